"""A wall-clock limit on each sweep point (``--point-timeout``, ``dyn.run(point_timeout=)``).

Compiled code (a numba drift in an endless loop) checks no signal: neither Ctrl-C nor a Python
timer stops it inside the process that runs it. So a point is bounded from outside:

- process executor: each task carries one point; the worker writes its pid and the point's
  start (``time.time()``) into a file of a private folder as the point starts, and the driver,
  polling every POLL_SECONDS, kills (SIGKILL) the worker of a point running past the limit.
  The point is recorded failed with that reason; killing a worker breaks a
  ``ProcessPoolExecutor``, so the points that were running beside it are submitted again to a
  new pool (a point's numbers depend only on (seed, index): a rerun gives the same ones).
- dask executor: the worker runs the point in a thread of its own and waits for it at most the
  limit; past it the task returns the point failed, and the stuck thread runs on in that
  worker until its cluster closes (a LocalCluster closes with the run).
- serial: nothing can stop compiled code of the process itself; the limit is refused there
  (use ``--executor process --workers 1``).

The clock of a point starts when its worker starts it, not when it is queued, so a pool's
start-up (spawning, importing numba) never counts against a point.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..core.contract import FAILED, PointResult
from ..core.errors import ScenarioError
from ..core.spec import Setup

POLL_SECONDS = 0.2  # how often the driver looks for points past their limit


def check(seconds: float | None, executor: str) -> float | None:
    """The limit, validated: a positive number of seconds, for an executor that can stop a
    point (process, dask); None for no limit."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 or seconds == float("inf"):
        raise ScenarioError("--point-timeout", f"must be a positive number of seconds, got {seconds!r}")
    if executor == "serial":
        raise ScenarioError(
            "--point-timeout",
            "a serial run cannot stop compiled code in the middle "
            "of a point: use --executor process (--workers 1 for one at a time)",
        )
    return float(seconds)


def reason(seconds: float) -> str:
    """The message of a point stopped at the limit."""
    return f"stopped: the point ran past --point-timeout = {seconds:g} s"


def _started(folder: str, index: int) -> None:
    """In a worker: record (pid, start) of point `index`, written whole (renamed into place)."""
    final = os.path.join(folder, str(index))
    with open(final + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {time.time()!r}")
    os.replace(final + ".tmp", final)


def timed_point(setup: Setup, index: int, sidecar: str | None, folder: str) -> list[tuple[int, PointResult, float]]:
    """A process pool's task: point `index`, its start recorded in `folder` first."""
    from .executors import compute_batch

    _started(folder, index)
    return compute_batch(setup, [index], sidecar)


def threaded_point(
    setup: Setup, index: int, sidecar: str | None, seconds: float
) -> list[tuple[int, PointResult, float]]:
    """A Dask task: point `index` in a thread of its own, waited for at most `seconds`; past
    them the point is returned failed (its thread runs on, a daemon, until the worker exits)."""
    from .executors import compute_batch

    box: list = []
    worker = threading.Thread(
        target=lambda: box.append(compute_batch(setup, [index], sidecar)), daemon=True, name=f"dyn-point-{index}"
    )
    worker.start()
    worker.join(seconds)
    if box:
        return box[0]
    return [(index, PointResult({}, FAILED, reason(seconds)), seconds)]


def iter_threaded(
    pool: Executor, setup: Setup, indices: Sequence[int], width: int, sidecar: str | None, seconds: float
) -> Iterator[tuple[int, PointResult]]:
    """(index, result) of every point of `indices` on a Dask executor, one point a task."""
    queue, running = deque(int(i) for i in indices), set()
    while queue or running:
        while queue and len(running) < width:
            running.add(pool.submit(threaded_point, setup, queue.popleft(), sidecar, seconds))
        finished, running = wait(running, return_when=FIRST_COMPLETED)
        for future in finished:
            for index, result, _ in future.result():
                yield index, result


def _overdue(folder: str, index: int, seconds: float, now: float) -> int | None:
    """The pid of the worker running point `index` past `seconds`; None if it is not."""
    try:
        pid, start = Path(folder, str(index)).read_text().split()
    except (OSError, ValueError):  # not started yet
        return None
    return int(pid) if now - float(start) > seconds else None


def iter_killing(
    new_pool: Callable[[], Executor],
    setup: Setup,
    indices: Sequence[int],
    width: int,
    sidecar: str | None,
    seconds: float,
    died: Callable[[int], Exception],
) -> Iterator[tuple[int, PointResult]]:
    """(index, result) of every point of `indices` on process pools made by `new_pool`, at
    most `width` points at once (one a worker: each starts as it is submitted). A point past
    `seconds` gets its worker killed and is yielded failed; the pool, broken by the kill, is
    replaced and the points running beside it are submitted again. A worker that dies of
    anything else raises ``died(points finished)``."""
    queue, running, points = deque(int(i) for i in indices), {}, 0
    killed: set[int] = set()
    pool = new_pool()
    try:
        with tempfile.TemporaryDirectory(prefix="dyn-points-") as folder:
            while queue or running:
                broken = False
                try:
                    while queue and len(running) < width:
                        index = queue.popleft()
                        running[pool.submit(timed_point, setup, index, sidecar, folder)] = index
                except BrokenProcessPool:
                    queue.appendleft(index)
                    broken = True
                finished, _ = wait(running, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                for future in finished:
                    index = running.pop(future)
                    try:
                        batch = future.result()
                    except BrokenProcessPool:
                        broken = True
                        running[future] = index  # settled with the others below
                        continue
                    for done, result, _ in batch:
                        points += 1
                        yield done, result
                now = time.time()
                for index in running.values():
                    pid = _overdue(folder, index, seconds, now)
                    if pid is not None and index not in killed:
                        killed.add(index)
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                if broken:
                    if not killed:  # not by this module: a worker killed, or out of memory
                        raise died(points)
                    for index in running.values():  # broken with the pool
                        if index in killed:
                            yield index, PointResult({}, FAILED, reason(seconds))
                        else:
                            queue.appendleft(index)
                    running.clear()
                    killed.clear()
                    pool.shutdown(wait=True, cancel_futures=True)
                    pool = new_pool()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def iter_limited(
    kind: str,
    workers: int,
    pool: tuple[Executor | None, int],
    setup: Setup,
    indices: Sequence[int],
    sidecar: str | None,
    seconds: float,
) -> Iterator[tuple[int, PointResult]]:
    """(index, result) of every point of `indices` under the limit `seconds`, on the opened
    `pool` (dask) or on process pools of `workers` made here (module doc)."""
    from . import executors

    if kind == "dask":
        executor, width = pool
        yield from iter_threaded(executor, setup, indices, width, sidecar, seconds)
    else:
        with executors.stage_folder():  # a worker's exit names the user hook it ran
            yield from iter_killing(
                lambda: executors.new_process_pool(workers),
                setup,
                indices,
                workers,
                sidecar,
                seconds,
                executors._worker_died,
            )
