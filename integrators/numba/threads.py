"""An ensemble's members across threads: contiguous blocks of members, a few per thread and
taken by whichever thread is free, each block a serial (``nogil``) numba kernel on slices of the
ensemble's arrays. (One block per thread left a core idle whenever the other ran slower, as a
thread on a shared machine does.)

This replaces ``prange`` in the ensemble kernels. The numbers are the same, since every member
is computed by the same serial code on its own stream, whatever the block it falls in; what
changes is compile time: a ``parallel=True`` kernel takes several times as long to compile as
its serial twin (numba outlines and optimizes the parallel region apart), and there were eight
of them. A drift that calls BLAS (large n) also keeps BLAS's own threads here, where
numba's parallel region pinned it to one.

A block's call from Python holds the GIL while numba converts its arguments, the kernels it
passes as first-class functions (drift, projection, retraction, observer) included; the rest of
the block runs without it (``nogil``).

The thread count is ``numba.get_num_threads()``, so ``NUMBA_NUM_THREADS`` (set by the engine's
executors for their workers) and ``numba.set_num_threads`` keep their meaning.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba

BLOCKS_PER_THREAD = 4  # a slow block delays the ensemble by at most a quarter of a thread's share


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
    """Run ``call(lo, hi)`` (members lo..hi-1) on contiguous blocks, BLOCKS_PER_THREAD per
    thread, each taken by the next free thread (the calling thread is one of them). Every block
    runs once; an exception a block raised (the first to be raised) is raised here."""
    threads = max(1, min(numba.get_num_threads(), members))
    if threads == 1:
        call(0, members)
        return
    blocks = iter(block_bounds(members, min(members, threads * BLOCKS_PER_THREAD)))
    lock = threading.Lock()
    errors: list[Exception] = []
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            with lock:
                block = next(blocks, None)
            if block is None:
                return
            try:
                call(*block)
            except Exception as error:  # the other blocks still run: every member once
                errors.append(error)

    with ThreadPoolExecutor(max_workers=threads - 1) as pool:
        futures = [pool.submit(drain) for _ in range(threads - 1)]
        try:
            drain()
        except BaseException:  # an interrupt: the other threads take no further block
            stop.set()
            raise
        for future in futures:
            future.result()
    if errors:
        raise errors[0]
