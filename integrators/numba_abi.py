"""The numba ABI of models: ``from integrators.numba_abi import DRIFT_SIG, NJIT, ...``. This name
is :mod:`integrators.numba.abi` itself (the same module object), which documents it."""
import sys

from .numba import abi

sys.modules[__name__] = abi
