"""Element-wise array copies for kernels.

``a[i] = b`` or ``a[:] = b`` between arrays makes numba compile its shape-checked slice
assignment, whose error message formats both shapes: numba's string machinery, about 6 s of
compile per process (measured on `_rk_block`, cold cache), paid again by every fresh process
that compiles a kernel. These loops do the same copy without it (``dst`` and ``src`` of one
shape; the caller guarantees it).
"""

from __future__ import annotations

from .abi import NJIT
from .jit import njit


@njit(**NJIT)
def copy1(dst, src):
    """dst[i] <- src[i] for i < len(src)."""
    for i in range(src.shape[0]):
        dst[i] = src[i]


@njit(**NJIT)
def copy2(dst, src):
    """dst[i, j] <- src[i, j] over src's shape."""
    for i in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[i, j] = src[i, j]
