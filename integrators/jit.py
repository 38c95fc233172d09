"""The ``njit`` models declare their kernels with: ``from integrators.jit import njit``. This name
is :mod:`integrators.numba.jit` itself (the same module object), which documents it."""
import sys

from .numba import jit

sys.modules[__name__] = jit
