"""Where sweep points are computed: in-process, or a local pool of fresh (spawned) processes.

Every executor runs the same pure function `compute_point(scenario_text, index)`; the point's
random stream depends only on (seed, index), so the executor never changes the numbers. Pools are
driven through the standard `concurrent.futures.Executor` interface so other pools (Dask,
mpi4py.futures) fit the same slot. Processes are spawned, never forked: forking after JAX (or
numba's threading layer) has started is unsafe.
"""
from __future__ import annotations

import multiprocessing
import os
import traceback
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from functools import lru_cache
from typing import Iterable, Iterator

from .systems.base import FAILED, PointResult

EXECUTORS = ("serial", "process")
IN_FLIGHT_PER_WORKER = 2  # queued points per worker: keeps workers busy without a huge queue


@lru_cache(maxsize=4)
def _scenario(text: str):
    from .scenario import parse_toml, resolve

    return resolve(parse_toml(text))


def compute_point(text: str, index: int) -> tuple[int, PointResult]:
    """Run one sweep point of the scenario given as resolved TOML text; never raises."""
    from . import sweep

    scenario = _scenario(text)
    try:
        result = scenario.system.run_point(sweep.point(scenario, index), scenario,
                                           sweep.rng(scenario, index))
    except Exception as exc:  # one bad point must not kill the sweep: record it
        last = traceback.extract_tb(exc.__traceback__)[-1]
        result = PointResult({}, FAILED, f"{type(exc).__name__}: {exc} "
                             f"({os.path.basename(last.filename)}:{last.lineno})")
    return index, result


def _init_worker(threads: int) -> None:
    # Runs in each spawned worker before numba is imported: share the cores, do not oversubscribe.
    os.environ["NUMBA_NUM_THREADS"] = str(threads)


def iter_serial(text: str, indices: Iterable[int]) -> Iterator[tuple[int, PointResult]]:
    for index in indices:
        yield compute_point(text, int(index))


def iter_pool(pool: Executor, text: str, indices: Iterable[int], width: int
              ) -> Iterator[tuple[int, PointResult]]:
    """Submit points with at most `width` in flight; yield each as soon as it finishes."""
    queue = iter([int(i) for i in indices])
    running = set()
    while True:
        for index in queue:
            running.add(pool.submit(compute_point, text, index))
            if len(running) >= width:
                break
        if not running:
            return
        done, running = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            yield future.result()


def process_pool(workers: int) -> ProcessPoolExecutor:
    threads = max(1, (os.cpu_count() or 1) // workers)
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(threads,))


def iter_results(kind: str, text: str, indices, workers: int) -> Iterator[tuple[int, PointResult]]:
    if kind == "serial":
        yield from iter_serial(text, indices)
        return
    with process_pool(workers) as pool:
        try:
            yield from iter_pool(pool, text, indices, workers * IN_FLIGHT_PER_WORKER)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
