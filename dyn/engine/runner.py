"""Run a scenario: validate, open or create the one output file, compute pending points, write.

    scenario -> sweep points -> executor -> single writer (flush per point) -> resume

`run` is the Python entry point behind `dyn run`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from integrators.numba.events import CompileListener, listening_to_compiles

from ..core import stages, sweep
from ..core.contract import DIVERGED, FAILED, STATUS_NAMES
from ..core.errors import OutputError, ScenarioError
from . import deadlines, provenance, store, trajectories
from .batched import iter_results as batched_results
from .executors import EXECUTORS, in_spawned_import, iter_results, open_pool
from .longrun import LongRunNote, duration_text
from .scenario import Scenario, apply_overrides, apply_values, read_file, resolve, scenario_file
from .verdicts import WHY, count_unresolved

MAX_WORKERS = 1024
LOG_SECONDS = 10.0  # progress lines in a log (stderr not a terminal): one per interval


def run(  # noqa: C901 the run's steps in order, each branch one refusal of an option or one choice of executor
    scenario: Scenario | str | Path,
    out: str | Path | None = None,
    *,
    workers: int = 1,
    executor: str = "serial",
    scheduler: str | None = None,
    array: dict | None = None,
    overrides: dict[str, Any] | list[str] | None = None,
    unset: list[str] | None = None,
    progress: bool | None = None,
    command: str | None = None,
    log=None,
    force: bool = False,
    overwrite: bool = False,
    allow_version_change: bool = False,
    point_timeout: float | None = None,
) -> Path:
    """Run (or resume) a sweep and return the output path.

    `scenario` is a path to a TOML file, the name of a shipped scenario (`"attention_clusters"`,
    as `dyn run` takes it) or a `Scenario`; `overrides` is either a list of `--set` strings
    (`"params.beta=2.0"`) or a dict of dotted keys to Python values; `unset` lists keys of the
    scenario removed first (`--unset`, `"integrator.dt"`: they take their defaults). A method or
    backend set by `overrides` drops the scenario's solver options the new method does not take
    (a `dt` for dopri5), saying so on `log`.
    `executor` is "serial", "process" (a local pool of `workers` processes) or "dask" (on
    `scheduler`, or a LocalCluster of `workers` processes) or "submitit" (a SLURM job array, or
    its local stand-in: the scenario's [executor] table, overridden by `array`, a dict of the
    same keys; :mod:`dyn.engine.job_array`). `force` allows a sweep file
    estimated past `store.MAX_FILE_BYTES`. `overwrite` replaces an output file made by another
    scenario (and its states folder), or a damaged one, after saying what it replaces; a file of
    this scenario is resumed either way, and a file that is not a sweep file is never deleted.
    A resume keeps only the points whose checksums match, and refuses points computed under
    other versions of numpy, scipy, numba, jax or diffrax unless `allow_version_change` (each
    point records its versions). `--out` through a symlink writes the real file (and the
    states folder beside it). `point_timeout` (seconds, process or dask executor): a point
    running longer is stopped and recorded failed with that reason (dyn/engine/deadlines.py).

    Returns the `Path` of the output file (the real file where `out` is a symlink).

    Raises MissingFile (a ScenarioError that is also a FileNotFoundError) when the scenario file
    does not exist, naming the nearest shipped scenarios; ScenarioError for any other bad input,
    or a refused or aborted run (one line each: OutputError for a file of another scenario or
    held by another run, RunAborted when a worker died or the disk is full, finished points
    kept); KeyboardInterrupt on Ctrl-C, SIGTERM or SIGHUP (the same call resumes).

    Points that diverge are not raised: the run goes on, and the file records them with status
    2 (diverged; 3 failed: an exception in the system, a full disk) and the reason in
    `message`, and holds NaN in each of their outputs (`dyn.open` reads NaN there whatever is
    stored). `dyn.engine.store.bad_points(path)` counts them (`dyn run` then exits with 3), and
    `dyn.open(path)["status"]` says which; a second call recomputes failed points only.
    """
    if in_spawned_import():  # a worker re-importing an unguarded script: stop it quietly, the
        stages.mark(stages.GUARD)  # driver says why (executors._worker_died), in one line
        os._exit(1)
    provenance.prefetch()  # beside the start-up: the file's provenance is read in a thread
    log = log or sys.stderr
    limit = deadlines.check(point_timeout, executor)  # before a model is imported or probed
    # where things lie, fixed before a user's module is imported: one that changes the working
    # folder cannot move the output, its lock or the scenario read
    here = Path(os.getcwd())
    out = None if out is None else here / out
    if isinstance(scenario, (str, Path)) and Path(scenario).is_file():
        scenario = here / scenario
    notes: list[str] = []
    scenario = _with_overrides(scenario, overrides, unset, notes)
    if executor not in EXECUTORS:
        raise ScenarioError("--executor", f"unknown executor {executor!r} (known: {', '.join(EXECUTORS)})")
    if scheduler and executor != "dask":
        raise ScenarioError("--scheduler", "a scheduler address needs --executor dask")
    if array and executor != "submitit":
        raise ScenarioError("--executor", "job array options need --executor submitit")
    arrayed = None
    if executor == "submitit":
        from .job_array import array_options, folder_for

        arrayed = array_options(scenario.executor, array)
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise ScenarioError("--workers", f"must be an integer in 1..{MAX_WORKERS}, got {workers!r}")
    batched = scenario.integrator.get("backend") == "jax"
    if batched and executor != "serial":
        raise ScenarioError(
            "--executor",
            "backend jax runs whole batches in this process on the JAX device: drop --executor / --workers",
        )
    path = out if out is not None else here / scenario.default_output_path()
    if path.suffix in (".partial", ".lock") or path.is_dir():
        raise ScenarioError("--out", f"{path} is not a usable output file name")
    if path.exists() and _same_file(path, getattr(scenario, "source", "")):
        raise ScenarioError("--out", f"{path} is the scenario file itself")

    path = Path(os.path.realpath(path))  # the real file: its lock, its states folder, its rename
    if path.is_dir():
        raise ScenarioError("--out", f"{path} is not a usable output file name")
    for note in notes:  # keys a new method does not take, dropped (said once the input is valid)
        print(note, file=log)
    lock = store.WriterLock(path)
    try:
        lock.acquire()
    except OSError as exc:  # an unwritable folder, a read-only file system, ...
        raise ScenarioError("--out", f"cannot write beside {path}: {exc.strerror or exc}") from None
    try:
        if overwrite and path.exists() and (replaced := store.replaceable(path, scenario)):
            print(f"replacing {path}: {replaced}", file=log)
            lock.unhold()
            _remove(path)
        statuses = _resumable(path, scenario, allow_version_change, log) if path.exists() else None
        need = store.check_size(path, scenario, force) if statuses is None else 0
        array_at = None if arrayed is None else (arrayed, folder_for(path))
        with open_pool(executor, workers, scheduler, _shipped(scenario), array_at) as pool:
            if statuses is None:
                _create(path, scenario, command or _command_line(), need)
                _say_step_cut(scenario, log)
                lock.hold()  # the new file's inode: refused to writers through a hard link
                statuses = np.zeros(scenario.count, dtype=np.int8)
            sidecar = str(trajectories.sidecar_dir(path)) if scenario.output["trajectories"] else None
            if sidecar is not None:  # stale point files out; finished points without theirs redone
                statuses = statuses.copy()
                statuses[_prune(scenario, Path(sidecar), statuses)] = 0
            todo = store.pending(statuses)
            done = len(statuses) - len(todo)
            if done:
                print(f"resuming {path}: {done} of {len(statuses)} points already done", file=log)
            if arrayed is not None and len(todo):  # chunks of minutes: the dry run's calibration
                from .estimate import calibrated

                pool = (calibrated(pool[0], scenario, path), pool[1])
            if batched:
                results = batched_results(scenario, todo, sidecar)
            elif limit is not None:
                results = deadlines.iter_limited(executor, workers, pool, scenario.setup, todo, sidecar, limit)
            else:
                results = iter_results(pool, scenario.setup, todo, sidecar)
            with listening_to_compiles(_CompileNotice(log)):
                try:
                    _write_all(scenario, path, results, len(todo), progress, log)
                except SystemExit as exc:  # user code outside a named hook: never its status
                    raise stages.exited(exc.code, stages.current()) from None
    finally:
        lock.release()
    return path


class _CompileNotice(CompileListener):
    """Says once, when numba starts compiling in this process (its cache misses a kernel), why
    the first points are slow; numba fires this event on cache misses only."""

    def __init__(self, log):
        self.log, self.said = log, False

    def on_start(self, ev):
        if not self.said:
            self.said = True
            print(
                "compiling numba kernels on their first use (once: numba's cache keeps them; "
                "`dyn compile` compiles them all ahead)",
                file=self.log,
                flush=True,
            )

    def on_end(self, ev):
        pass


def _shipped(scenario: Scenario) -> list[str]:
    """The module file of a system named by import path, module:Class with a top-level module
    (what Dask's upload_file installs on its workers); installed packages are theirs already."""
    head = scenario.data["scenario"]
    file, module = head.get("system_file", ""), head.get("system_module", "")
    if ":" in head["system"] and file and "." not in module and Path(file).name != "__init__.py":
        return [file]
    return []


def _resumable(path: Path, scenario: Scenario, allow_version_change: bool, log) -> np.ndarray:
    """The statuses a resume keeps (store.read_verified), after the version check."""
    kept = store.read_verified(path, scenario)
    if len(kept.damaged):
        print(
            f"{path}: {len(kept.damaged)} finished points failed their checksum (damaged): computing them again",
            file=log,
        )
    if kept.repaired:
        print(
            f"{path}: {', '.join(kept.repaired)} did not match the theory this scenario "
            "computes (damaged): written again",
            file=log,
        )
    current = store.numeric_versions()
    others = {text: count for text, count in kept.versions.items() if text != current}
    if others:
        text, count = max(others.items(), key=lambda item: item[1])
        if not allow_version_change:
            raise OutputError(
                "--allow-version-change",
                f"{count} points of {path} were computed "
                f"with {text or 'unknown versions'}, this is {current}: a resume "
                "would mix their numbers; add --allow-version-change to resume "
                "anyway (each point records its versions), or delete the file to "
                "start again",
            )
        print(
            f"resuming under other versions ({count} points were computed with {text}); each point records its own",
            file=log,
        )
    return kept.statuses


def _remove(path: Path) -> None:
    """A sweep file and what belongs to it (states folder, partial file); the lock stays held."""
    import shutil

    path.unlink()
    shutil.rmtree(trajectories.sidecar_dir(path), ignore_errors=True)
    store.partial_path(path).unlink(missing_ok=True)


def _same_file(path: Path, other: str) -> bool:
    try:
        return bool(other) and Path(other).exists() and path.samefile(other)
    except OSError:
        return False


def _prune(scenario: Scenario, sidecar: Path, statuses: np.ndarray) -> np.ndarray:
    from .ensemble import coords

    layout = trajectories.spec(scenario.system, scenario.setup, coords(scenario.system, scenario.setup))
    return trajectories.prune(sidecar, statuses, scenario.hash, layout)


def _create(path: Path, scenario: Scenario, command: str, need: int | None = None) -> None:
    try:
        store.create(path, scenario, command, need)
    except OSError as exc:  # e.g. a full disk: no half-made file stays behind
        store.partial_path(path).unlink(missing_ok=True)
        raise ScenarioError("--out", f"cannot create {path}: {exc.strerror or exc}") from None
    except Exception as exc:  # noqa: BLE001 - h5py and h5netcdf raise their own; none may leave a traceback
        store.partial_path(path).unlink(missing_ok=True)
        raise ScenarioError("--out", f"cannot create {path}: {type(exc).__name__}: {exc}") from None


def _say_step_cut(scenario: Scenario, log) -> None:
    """Where a fixed dt exceeds a save interval the solver steps that interval instead: say so
    (the file records both, as dt_requested and dt_used_min, dt_used_max)."""
    steps = store.step_attributes(scenario)
    # (a relative 1e-9: a save interval equal to dt up to rounding is not a cut)
    if steps and steps["dt_used_max"] < steps["dt_requested"] * (1 - 1e-9):
        print(
            f"dyn: note: dt = {steps['dt_requested']:g} is longer than save intervals, which "
            f"the solver steps whole instead: its steps are {steps['dt_used_min']:.6g} to "
            f"{steps['dt_used_max']:.6g} (recorded as dt_used_min, dt_used_max)",
            file=log,
        )


def _write_all(scenario, path, results, total, progress, log) -> None:
    """The single writer: each finished point goes to disk (and is flushed) as it arrives."""
    writer = store.Writer(path, scenario)
    counts = np.zeros(len(STATUS_NAMES), dtype=int)
    # progress=None: a bar on a terminal, lines every LOG_SECONDS in a log (a file, a pipe)
    if progress is False:
        bar = NoProgress()
    elif progress is None and not (hasattr(log, "isatty") and log.isatty()):
        bar = LogProgress(scenario.name, total, log)
    else:
        from tqdm import tqdm

        bar = tqdm(
            total=total, desc=scenario.name, unit="pt", disable=None if progress is None else not progress, file=log
        )
        bar.set_postfix_str(STARTING, refresh=False)
    long_run = LongRunNote(total, log, duration_text)
    try:
        for index, result in results:
            writer.write(index, result)
            long_run.done()
            counts[result.status] += 1
            if result.status in (DIVERGED, FAILED):
                where = sweep.axis_values(scenario.axes, index) or ""
                bar.write(
                    f"point {index} {where}: {STATUS_NAMES[result.status]}"
                    + (f": {result.message}" if result.message else ""),
                    file=log,
                )
            bar.update()
            if getattr(bar, "n", None) == 1:  # tqdm's bar
                _restart_clock(bar)
    finally:
        bar.close()
        writer.close()
    summary = ", ".join(f"{counts[c]} {STATUS_NAMES[c]}" for c in range(1, len(STATUS_NAMES)) if counts[c])
    print(f"wrote {path} ({summary or 'nothing to do'})", file=log)
    for reason, count in count_unresolved(path).items():
        print(
            f"{count} points are {reason} ({WHY[reason]}): their numbers are not the answer "
            f"yet; `dyn show {path}` lists them",
            file=log,
        )


# what the progress says until a rate can be measured: the first point's time holds the start
# (numba compiling its kernels on first use, JAX its programs, a pool's workers starting)
STARTING = "first point: starting, compiling kernels on first use"
MIN_RATE_SECONDS = 1.0  # a rate is measured over at least this long, after the first point


def _restart_clock(bar) -> None:
    """Start tqdm's rate from the first finished point, so that the time left leaves out the
    start-up (the compile) instead of spreading it over every point still to come."""
    done = bar.n
    bar.reset(total=bar.total)
    bar.n = bar.last_print_n = bar.initial = done
    bar.set_postfix_str("", refresh=False)
    bar.refresh()


class NoProgress:
    """No progress (``progress=False``, ``--no-progress``): only what a point says when it
    diverges or fails, as tqdm's ``write`` prints it (and tqdm is not imported)."""

    def update(self) -> None:
        pass

    def write(self, message: str, file) -> None:
        print(message, file=file)

    def close(self) -> None:
        pass


class LogProgress:
    """Progress where there is no terminal: every LOG_SECONDS, one line with the points done, the
    rate and the time left at that rate (what tqdm's bar says, readable in a log file). The rate
    is measured from the first finished point on: before it the time goes to starting up (numba
    compiles its kernels on their first use, JAX its programs), which would make the first
    estimates of the time left many times too long; until a rate is measured the line says so."""

    def __init__(self, name: str, total: int, log):
        self.name, self.total, self.log = name, total, log
        self.done = 0
        self.start = self.last = time.monotonic()
        self.first: tuple[float, int] | None = None  # (time, points done) at the first point

    def update(self) -> None:
        self.done += 1
        now = time.monotonic()
        if self.first is None:
            self.first = (now, self.done)
        if now - self.last >= LOG_SECONDS:
            self.last = now
            print(self.line(now), file=self.log, flush=True)

    def line(self, now: float) -> str:
        head = f"{self.name}: {self.done}/{self.total} points"
        since, done = self.first if self.first is not None else (now, self.done)
        counted, seconds = self.done - done, now - since
        if counted < 1 or seconds < MIN_RATE_SECONDS:
            return (
                f"{head} in {duration_text(now - self.start)}, measuring the rate (the first "
                "point's time is mostly start-up: compiling kernels on first use)"
            )
        rate = counted / seconds
        left = (self.total - self.done) / rate
        return f"{head}, {rate:.3g} points/s, about {duration_text(left)} left"

    def write(self, message: str, file=None) -> None:
        print(message, file=file or self.log, flush=True)

    def close(self) -> None:
        pass


def _with_overrides(scenario, overrides, unset=None, notes=None) -> Scenario:
    if isinstance(scenario, Scenario):
        if not overrides and not unset:
            return scenario
        doc, source = scenario.data, scenario.source
    else:
        path = scenario_file(scenario)  # a file, or a shipped scenario's name
        doc, source = read_file(path), str(path)
    if isinstance(overrides, dict):
        doc = apply_values(doc, overrides, unset or (), notes)
    elif overrides or unset:
        doc = apply_overrides(doc, overrides or [], unset or (), notes)
    return resolve(doc, source)


def _command_line() -> str:
    return (
        " ".join(["dyn", *sys.argv[1:]]) if sys.argv and sys.argv[0].endswith("dyn") else " ".join(sys.argv) or "python"
    )
