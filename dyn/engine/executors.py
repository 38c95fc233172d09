"""Where sweep points are computed: in-process, a local pool of spawned processes, or Dask.

Every executor runs the same pure function `compute_batch(setup, indices, sidecar)` on the
sweep's picklable :class:`dyn.core.spec.Setup` (workers never see the scenario document); a point's
random stream depends only on (seed, index), so the executor never changes the numbers.
Pools are driven through the standard `concurrent.futures.Executor` interface (a
`ProcessPoolExecutor`, Dask's `Client.get_executor()`), so other pools such as
`mpi4py.futures.MPIPoolExecutor` fit the same slot. Processes are spawned, never forked: forking
after JAX (or numba's threading layer) has started is unsafe.

Batching: the first tasks carry one point each; once some have finished, points are grouped so
that each task carries about TASK_SECONDS of work, which keeps per-task overhead (pickling,
scheduling, a Dask round trip) small for cheap points without starving workers on costly ones.

Pool workers die with their driver: each asks the kernel for SIGKILL when its parent dies
(Linux prctl PR_SET_PDEATHSIG) and checks its parent before every point, so a killed `dyn run`
leaves no worker writing into NAME.h5.d/ behind a resume. A worker that dies (killed, out of
memory) stops the run with one line (RunAborted); finished points are kept for the resume.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager

from ..core import stages
from ..core.contract import PointResult
from ..core.errors import RunAborted, ScenarioError
from ..core.spec import Setup
from .lifetime import init_worker
from .worker import compute_batch, compute_point

EXECUTORS = ("serial", "process", "dask", "submitit")
TASK_SECONDS = 1.0  # target work per task once point costs are known
MAX_BATCH = 256
IN_FLIGHT_PER_WORKER = 2  # queued tasks per worker: keeps workers busy without a huge queue
SCHEDULER_TIMEOUT = "10s"  # how long to try reaching a Dask scheduler before giving up


def iter_serial(setup: Setup, indices: Sequence[int], sidecar: str | None) -> Iterator[tuple[int, PointResult]]:
    for index in indices:
        yield int(index), compute_point(setup, int(index), sidecar)


def iter_pool(
    pool: Executor, setup: Setup, indices: Sequence[int], width: int, sidecar: str | None = None
) -> Iterator[tuple[int, PointResult]]:
    """Submit batches with at most `width` in flight; yield each point as its batch finishes."""
    queue = [int(i) for i in indices]
    position = 0
    running = set()
    seconds, points = 0.0, 0
    while True:
        while position < len(queue) and len(running) < width:
            size = 1 if points == 0 else min(MAX_BATCH, max(1, math.floor(TASK_SECONDS * points / max(seconds, 1e-9))))
            batch = queue[position : position + size]
            position += len(batch)
            try:
                running.add(pool.submit(compute_batch, setup, batch, sidecar))
            except _lost_worker():  # a worker died while nothing was being waited for
                raise _worker_died(points) from None
        if not running:
            return
        finished, running = wait(running, return_when=FIRST_COMPLETED)
        # a batch that stops the run stops it once the points of the others are in the file
        lost, error = False, None
        for future in finished:
            try:
                batch = future.result()
            except _lost_worker():
                lost = True
                continue
            except Exception as exc:  # noqa: BLE001 - re-raised below, after the finished points
                error = error or exc
                continue
            for index, result, spent in batch:
                seconds += spent
                points += 1
                yield index, result
        if lost:
            raise _worker_died(points) from None
        if error is not None:
            raise error


def _lost_worker() -> tuple[type[BaseException], ...]:
    """What a pool raises for a worker process that ended: a process pool's BrokenProcessPool,
    Dask's KilledWorker (once its retries are spent)."""
    distributed = sys.modules.get("distributed")
    killed = getattr(distributed, "KilledWorker", None) if distributed is not None else None
    return (BrokenProcessPool,) + ((killed,) if isinstance(killed, type) else ())


def _worker_died(points: int) -> RunAborted:
    """The one line of a worker process that ended: the hook it ran (core.stages), the
    missing `__main__` guard where a worker says it stopped for that, else a kill."""
    folder = os.environ.get(stages.ENV)
    found = stages.read(folder) if folder else []
    hooks = [text for text in found if text != stages.GUARD]
    if hooks:
        return stages.UserExit(
            "--executor",
            f"a worker process exited while running {hooks[0]} "
            "(os._exit, a crash or a kill); finished points are kept: run the "
            "same command again to resume",
        )
    if stages.GUARD in found:
        return RunAborted(
            "--executor",
            "the pool's workers stopped before finishing a point: a "
            "script that calls dyn.run with a process pool must call it under "
            '`if __name__ == "__main__":` (each worker re-imports the script)',
        )
    return RunAborted(
        "--executor",
        "a worker process died (killed, or out of memory?); "
        "finished points are kept: run the same command again to resume",
    )


def in_spawned_import() -> bool:
    """True in a spawned worker (a pool's or Dask's) whose start re-imports the driver's script
    as `__mp_main__`: a dyn.run there comes from a script without the `__main__` guard.
    multiprocessing names the main module ``__mp_main__`` as well in every process; only while
    a child runs the script again is that a module of its own (``__main__`` is then the child's
    starter), and the parent of a worker is not yet known (`parent_process()` is None) while
    its name is already the child's (the main process is ``MainProcess``, also while `runpy`
    runs a script there under a ``__main__`` of its own)."""
    alias = sys.modules.get("__mp_main__")
    return (
        alias is not None
        and alias is not sys.modules.get("__main__")
        and multiprocessing.parent_process() is None
        and multiprocessing.current_process().name != "MainProcess"
    )


def _cores() -> int:
    return os.cpu_count() or 1


def new_process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` spawned processes sharing the cores (its workers start on demand)."""
    threads = max(1, _cores() // workers)
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=init_worker,
        initargs=(threads, os.getpid()),
    )


@contextmanager
def process_pool(workers: int) -> Iterator[tuple[Executor, int]]:
    with stage_folder():
        pool = new_process_pool(workers)
        try:
            yield pool, workers
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def stage_folder() -> Iterator[str]:
    """A fresh folder where the pool's workers mark the hook they run (core.stages), named
    in this process's environment (its spawned workers inherit it) while the pool lives."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="dyn-stages-")
    before = os.environ.get(stages.ENV)
    os.environ[stages.ENV] = folder
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(stages.ENV, None)
        else:
            os.environ[stages.ENV] = before
        shutil.rmtree(folder, ignore_errors=True)


def ship_modules(client, files: Sequence[str]) -> None:
    """Send the modules of systems from outside the package to every Dask worker (they land on
    the workers' sys.path): a worker on another machine finds the module without its file. A
    worker that cannot import one stops the run in one line, before the file is made."""
    for file in files:
        try:
            client.upload_file(file)
        except Exception as exc:
            raise ScenarioError(
                "--executor",
                f"a Dask worker cannot import the system's module "
                f"{os.path.basename(file)}: {type(exc).__name__}: {exc}",
            ) from None


@contextmanager
def dask_pool(workers: int, scheduler: str | None, files: Sequence[str] = ()) -> Iterator[tuple[Executor, int]]:
    """A Dask executor: on `scheduler` if given, else on a LocalCluster of `workers` processes;
    the modules `files` shipped to its workers."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - distributed is a dependency
        raise ScenarioError("--executor", "dask needs the `distributed` package") from None
    cluster = None
    stack = ExitStack()  # the stage folder of a LocalCluster's workers
    if scheduler:
        try:
            client = Client(scheduler, timeout=SCHEDULER_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as exc:  # ValueError: not an address
            raise ScenarioError("--scheduler", f"cannot reach Dask scheduler {scheduler}: {exc}") from None
    else:
        threads = max(1, _cores() // workers)
        folder = stack.enter_context(stage_folder())
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            env={"NUMBA_NUM_THREADS": str(threads), stages.ENV: folder},
        )
        client = Client(cluster)
    try:
        ship_modules(client, files)
        width = max(1, sum(client.nthreads().values()))
        yield client.get_executor(pure=False), width
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
        stack.close()


@contextmanager
def open_pool(
    kind: str, workers: int, scheduler: str | None = None, files: Sequence[str] = (), array=None
) -> Iterator[tuple[Executor | None, int]]:
    """(executor, width) for `kind`; (None, 1) for serial. Opened before the output file is
    made, so an unreachable scheduler leaves nothing behind. `files`: modules of systems from
    outside the package, shipped to Dask's workers (a process pool's import them from disk).
    `array`: (ArrayOptions, folder) of a submitit job array (:mod:`dyn.engine.job_array`)."""
    if kind == "serial":
        yield None, 1
        return
    if kind == "submitit":
        from .job_array import array_pool

        with array_pool(*array) as pool:
            yield pool, pool.options.array_parallelism
        return
    with process_pool(workers) if kind == "process" else dask_pool(workers, scheduler, files) as opened:
        yield opened


def iter_results(
    pool: tuple[Executor | None, int], setup: Setup, indices: Sequence[int], sidecar: str | None = None
) -> Iterator[tuple[int, PointResult]]:
    """(index, result) for every point of `indices`, in completion order."""
    executor, width = pool
    if executor is None:
        yield from iter_serial(setup, indices, sidecar)
    elif not isinstance(executor, Executor):  # a submitit job array
        from .job_array import iter_array

        yield from iter_array(executor, setup, indices, sidecar)
    else:
        yield from iter_pool(executor, setup, indices, width * IN_FLIGHT_PER_WORKER, sidecar)
