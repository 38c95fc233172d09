"""SLURM job arrays through submitit: `dyn run --executor submitit`.

The driver (`dyn run` on a login node, or in a small job of its own) stays the only writer of
the sweep file. The pending points are cut into chunks, each chunk is one task of a job array
(`submitit.AutoExecutor.map_array`), and each task runs `compute_batch(setup, chunk, sidecar)`,
the same pure function the process pool and Dask run. A point's random stream depends only on
(seed, index), so the array gives the serial numbers bit for bit. As tasks finish, the driver
reads their results back from submitit's folder and writes the points.

- **Chunks** carry about `task_minutes` of work each: the seconds per point come from the
  dry run's calibration (a few runs of three points, :func:`dyn.engine.estimate.estimate`), or
  `points_per_task` sets the chunk size directly.
- **Preemption**: a task is a `submitit.helpers.Checkpointable`, so SLURM's preemption signal
  requeues it with the same chunk (its points are computed again from their start: a point is
  the unit of work).
- **Failures**: a task that fails (an exception outside a point, a node lost, a time limit) comes
  back as failed points carrying the end of the task's log; a resume recomputes them. The
  tasks' pickles and logs stay in NAME.h5.submitit/ beside the file when a task failed, and are
  removed when every task came back.
- **Killed driver**: tasks already running finish on their own; a resume computes what the file
  is missing (the points of the killed run's tasks included).
- **Options** come from the scenario's `[executor]` table (not part of the scenario's hash: where
  a sweep runs never changes its numbers) and the `--slurm-*` flags, which win: `partition`,
  `time_minutes` (per task), `cpus_per_task` (the numba threads of a task), `mem_gb`,
  `array_parallelism` (tasks running at once), `task_minutes`, `points_per_task`, and `cluster`
  ("slurm"; "local" runs the same path in local processes, as the tests do; "auto": SLURM
  where `sbatch` is found, else local).
SLURM features used: job arrays with a parallelism cap (`--array=0-N%P`), `--partition`,
`--time`, `--cpus-per-task`, `--mem`, and the requeue on the preemption signal (USR2) that
submitit installs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..core.contract import FAILED, PointResult
from ..core.errors import ScenarioError, one_line
from ..core.spec import Setup

CLUSTERS = ("auto", "slurm", "local")
LOG_LINES = 5  # lines of a failed task's log kept in each of its points' message
POLL_SECONDS = {"local": 0.5, "slurm": 10.0}  # how often the driver asks for finished tasks


@dataclass(frozen=True)
class ArrayOptions:
    """Where and how the array runs (see the module doc); None: submitit's or SLURM's default."""

    cluster: str = "auto"
    partition: str | None = None
    time_minutes: int = 60
    cpus_per_task: int = 1
    mem_gb: float | None = None
    array_parallelism: int = 256
    task_minutes: float = 10.0
    points_per_task: int | None = None

    def __post_init__(self):
        if self.cluster not in CLUSTERS:
            raise ScenarioError("executor.cluster", f"must be one of {', '.join(CLUSTERS)}, got {self.cluster!r}")
        for name in ("time_minutes", "cpus_per_task", "array_parallelism"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ScenarioError(f"executor.{name}", f"must be an integer >= 1, got {value!r}")
        if self.points_per_task is not None and (
            isinstance(self.points_per_task, bool)
            or not isinstance(self.points_per_task, int)
            or self.points_per_task < 1
        ):
            raise ScenarioError("executor.points_per_task", f"must be an integer >= 1, got {self.points_per_task!r}")
        for name in ("mem_gb", "task_minutes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
            ):
                raise ScenarioError(f"executor.{name}", f"must be a number > 0, got {value!r}")
        if self.partition is not None and not isinstance(self.partition, str):
            raise ScenarioError("executor.partition", f"must be a string, got {self.partition!r}")


def array_options(table: dict[str, Any] | None, flags: dict[str, Any] | None = None) -> ArrayOptions:
    """The options of the scenario's `[executor]` table, overridden by the flags given (None:
    not given); an unknown key is one line naming the known ones."""
    known = {f.name for f in fields(ArrayOptions)}
    values = dict(table or {})
    values.update({k: v for k, v in (flags or {}).items() if v is not None})
    unknown = sorted(set(values) - known)
    if unknown:
        raise ScenarioError(f"executor.{unknown[0]}", f"unknown key (known: {', '.join(sorted(known))})")
    return ArrayOptions(**values)


def chunk(indices: Sequence[int], size: int) -> list[list[int]]:
    """Consecutive chunks of `size` points (the last may be shorter)."""
    items = [int(i) for i in indices]
    return [items[k : k + size] for k in range(0, len(items), size)]


def points_per_task(options: ArrayOptions, seconds_per_point: float | None, pending: int) -> int:
    """Points a task carries: `points_per_task`, else about `task_minutes` of calibrated work,
    at least one; without a calibration, the pending points spread over `array_parallelism`
    tasks."""
    if options.points_per_task is not None:
        return options.points_per_task
    if seconds_per_point is not None and seconds_per_point > 0:
        return max(1, math.floor(60.0 * options.task_minutes / seconds_per_point))
    return max(1, math.ceil(pending / options.array_parallelism))


def _task_class():
    """The array task, made on first use: importing submitit is left to the runs that use it."""
    import submitit

    class PointTask(submitit.helpers.Checkpointable):
        """compute_batch in an array task, with the task's numba threads; a Checkpointable, so
        that SLURM's preemption requeues it with its arguments."""

        def __call__(self, setup: Setup, indices, sidecar, threads: int):
            import numba

            numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
            from .worker import compute_batch

            return compute_batch(setup, indices, sidecar)

    return PointTask


_POINT_TASK = None


def point_task():
    """The one PointTask class of this process (pickled by reference into the tasks)."""
    global _POINT_TASK
    if _POINT_TASK is None:
        _POINT_TASK = _task_class()
    return _POINT_TASK


@dataclass
class ArrayPool:
    """An opened submitit executor and what it was opened with; `failed` collects the ids of
    tasks that failed (their logs are kept)."""

    executor: Any
    options: ArrayOptions
    cluster: str
    failed: list = field(default_factory=list)
    seconds_per_point: float | None = None


def _cluster(options: ArrayOptions) -> str:
    if options.cluster != "auto":
        return options.cluster
    import shutil

    return "slurm" if shutil.which("sbatch") else "local"


@contextmanager
def array_pool(options: ArrayOptions, folder: Path) -> Iterator[ArrayPool]:
    """A submitit executor writing its logs and pickles under `folder`."""
    try:
        import submitit
    except ImportError:  # pragma: no cover - submitit is a dependency
        raise ScenarioError("--executor", "submitit needs the `submitit` package") from None
    cluster = _cluster(options)
    folder.mkdir(parents=True, exist_ok=True)
    executor = submitit.AutoExecutor(folder=str(folder / "%j"), cluster=cluster)
    params: dict[str, Any] = {
        "timeout_min": options.time_minutes,
        "cpus_per_task": options.cpus_per_task,
        "name": "dyn",
        "slurm_array_parallelism": options.array_parallelism,
    }
    if options.mem_gb is not None:
        params["mem_gb"] = options.mem_gb
    if options.partition is not None:
        params["slurm_partition"] = options.partition
    executor.update_parameters(**params)
    pool = ArrayPool(executor, options, cluster)
    yield pool
    if not pool.failed:  # every task came back: their pickles and logs are spent
        import shutil

        shutil.rmtree(folder, ignore_errors=True)


def iter_array(
    pool: ArrayPool, setup: Setup, indices: Sequence[int], sidecar: str | None
) -> Iterator[tuple[int, PointResult]]:
    """(index, result) of every point of `indices`, task by task as tasks finish; a failed
    task's points come back FAILED with the end of its log. Ctrl-C (or any stop of the driver)
    cancels the tasks not yet finished."""
    if not len(indices):
        return
    import submitit

    size = points_per_task(pool.options, pool.seconds_per_point, len(indices))
    chunks = chunk(indices, size)
    task = point_task()()
    jobs = pool.executor.map_array(
        task, [setup] * len(chunks), chunks, [sidecar] * len(chunks), [pool.options.cpus_per_task] * len(chunks)
    )
    points = {job.job_id: part for job, part in zip(jobs, chunks, strict=True)}
    finished = set()
    try:
        poll = POLL_SECONDS.get(pool.cluster, 10.0)
        for job in submitit.helpers.as_completed(jobs, poll_frequency=poll):
            finished.add(job.job_id)
            try:
                batch = job.result()
            except Exception as exc:  # noqa: BLE001 - a task's failure, whatever it is, fails its points
                why = _failure(job, exc)
                pool.failed.append(job.job_id)
                for index in points[job.job_id]:
                    yield index, PointResult({}, FAILED, why)
                continue
            for index, result, _spent in batch:
                yield index, result
    finally:
        for job in jobs:
            if job.job_id not in finished:
                try:
                    job.cancel(check=False)
                except Exception:  # noqa: BLE001 - a task that ended meanwhile: nothing to cancel
                    pass


def _failure(job, exc: BaseException) -> str:
    """One line: the task, what ended it, and the last lines of its log."""
    log = ""
    for read in (job.stderr, job.stdout):  # the error stream, else what the task printed
        try:
            log = (read() or "").strip()
        except Exception:  # noqa: BLE001 - no log yet (the task never started)
            log = ""
        if log:
            break
    own = [
        line.strip()
        for line in log.splitlines()  # the task's own lines, not submitit's
        if line.strip() and not line.startswith("submitit ")
    ]
    tail = " | ".join(own[-LOG_LINES:])
    try:
        state = str(job.state)
    except Exception:  # noqa: BLE001 - the scheduler has forgotten the task
        state = "UNKNOWN"
    text = f"array task {job.job_id} failed ({state}, {type(exc).__name__})"
    if tail:
        text += f"; log: {tail}"
    return one_line(text)


def folder_for(path: Path) -> Path:
    """Where submitit keeps the tasks' pickles and logs: NAME.h5.submitit/ beside the file."""
    return path.with_name(path.name + ".submitit")
