"""An ensemble's members across threads: contiguous blocks of members, one block per thread,
each block a serial (``nogil``) numba kernel on slices of the ensemble's arrays.

This replaces ``prange`` in the ensemble kernels. The numbers are the same, since every member
is computed by the same serial code on its own stream, whatever the block it falls in; what
changes is compile time: a ``parallel=True`` kernel costs about 8 s more to compile than its
serial twin (measured on ``_em_ensemble``: 10.4-11.1 s against 2.0-2.9 s of CPU), and there
were eight of them. A drift that calls BLAS (large n) also keeps BLAS's own threads here, where
numba's parallel region pinned it to one.

The thread count is ``numba.get_num_threads()``, so ``NUMBA_NUM_THREADS`` (set by the engine's
executors for their workers) and ``numba.set_num_threads`` keep their meaning.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numba


def block_bounds(members: int, blocks: int) -> list[tuple[int, int]]:
    """`blocks` contiguous ranges [lo, hi) covering 0..members-1, sizes differing by at most 1."""
    q, extra = divmod(members, blocks)
    bounds, lo = [], 0
    for b in range(blocks):
        hi = lo + q + (b < extra)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def over_members(members: int, call: Callable[[int, int], None]) -> None:
    """Run ``call(lo, hi)`` (members lo..hi-1) on contiguous blocks, one per thread; the calling
    thread takes the first block. An exception in any block is raised here."""
    threads = max(1, min(numba.get_num_threads(), members))
    if threads == 1:
        call(0, members)
        return
    (first, *rest) = block_bounds(members, threads)
    with ThreadPoolExecutor(max_workers=len(rest)) as pool:
        futures = [pool.submit(call, lo, hi) for lo, hi in rest]
        call(*first)
        for future in futures:
            future.result()
