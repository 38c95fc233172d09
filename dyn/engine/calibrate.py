r"""The dry run's calibration: what a sweep's parts cost on this machine, measured in a few seconds.

A run's wall time is modelled as

    T = start + load + file + sum over points of (a + b_i * runs)        (serial)

- **start**: this process's age when the estimate begins (Python, the imports, reading the
  scenario), which the run pays alike; only known from the command line, on Linux (/proc).
- **load**: the kernels' first use beyond its run: numba loading them from its cache, JAX
  tracing and compiling. numba's compiling (counted by its compile events) is not what the run
  pays: the run loads what this process compiled.
- **file**: the sweep file created, and points written (each write the same bytes and flushes
  as the run's), in a temporary folder beside the output, removed after.
- **a + b_i runs**: the cost of one point, the real kernel at the scenario's sizes. The first
  sampled point is timed at 1 run and at r runs (r <= min(runs, MAX_RUNS), chosen so that the
  timed passes fit BUDGET seconds); a, its fixed part (references, theory, set-up), comes from
  the two; the other sampled points at r runs give their own b_i. A point costlier than the
  budget is timed at 1 run, and alone; past COSTLY seconds its first pass is its time where
  nothing compiled (its loading counts as nothing beside it). Where the first pass compiled, a
  fresh process times the kernels' loading from numba's cache, as the run loads them. Where a
  program is traced for the runs' count (diffrax), every pass runs the run's first chunk.

The JAX backend solves points in batches: the sampled points at r runs are solved twice, the
first pass compiling (the run compiles its own batch once), the second giving the seconds per
point-run. The time is a measurement of this machine now: a loaded machine gives larger ones,
and points whose cost the samples miss (runs extended until stationary near a transition) make
it a guide, not a bound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from integrators.numba.events import recording_compiles

from ..core.contract import DIVERGED, FAILED, PointResult
from . import store

BUDGET = 2.0  # seconds of timed passes aimed at (beyond the first, compiling pass)
COSTLY = 10.0  # seconds of a first pass that is the point's time (its loading small beside it)
MAX_RUNS = 16  # runs per timed point, at most
WRITES = 4  # point writes timed
MAX_FILE_BYTES = 256 * 2**20  # a larger sweep file is not made for timing its writes


@dataclass(frozen=True)
class Calibration:
    """What the parts of a run cost here (seconds); None where not measured."""

    per_point: dict[int, float]  # sampled point index -> seconds of the point at full runs
    fixed: float  # a: seconds of a point beyond its runs
    runs: int  # r: runs per timed pass
    load: float  # the kernels' first use beyond its run, numba's compiling left out
    compile_seconds: float  # numba compiling (cache misses) in the first pass
    compiled: int  # kernels numba compiled
    file_create: float | None
    file_write: float | None  # per point
    start: float | None
    seconds: float  # the calibration's own wall time
    failed: str = ""  # why a sampled point could not be timed


def process_age() -> float | None:
    """Seconds since this process started (Linux /proc); None where it cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return None


def compiling_seconds(buffer) -> float:
    """Wall seconds during which numba compiled: the union of its nested compile intervals, from
    the (time, event) pairs of :func:`recording_compiles`."""
    depth, since, total = 0, 0.0, 0.0
    for when, ev in buffer:
        if ev.is_start:
            if depth == 0:
                since = when
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                total += when - since
    return total


def calibrate(scenario, indices: list[int], out: Path, start: float | None = None) -> Calibration:
    """Time the parts of running `scenario` (see the module doc); `indices`: the sampled points."""
    began = time.perf_counter()
    setup = scenario.setup
    batched = scenario.integrator.get("backend") == "jax"
    traced = batched or scenario.integrator.get("backend") == "diffrax"  # JAX compiles at first use
    keep_states = bool(scenario.output.get("trajectories"))
    with _scratch(out) as folder:
        timer = (_JaxTimer if batched else _PointTimer)(scenario, folder if keep_states else None)
        shape = _shape_runs(scenario, indices[0])
        clock = time.perf_counter()
        with recording_compiles() as compiles:  # fires on cache misses only
            first = timer.time(indices[:1], shape)
        first_pass = time.perf_counter() - clock
        compile_seconds = compiling_seconds(compiles.buffer)
        compiled = sum(e.is_start for _, e in compiles.buffer)
        if first.failed or (not compiled and not traced and first_pass > COSTLY):  # timed once
            one, load = _Timed(first_pass, first.failed), 0.0
        else:
            one = timer.time(indices[:1], shape)
            load = first_pass - one.seconds
        if compiled and not batched and not first.failed:  # what this process compiled, the run loads from the cache:
            # a fresh process times that, unless the point is costly beside its loading
            load = 0.0 if one.seconds > BUDGET else _fresh_first_pass(timer, indices[0], shape) - one.seconds
        if first.failed or one.failed:
            per_point, fixed, runs, failed = {}, 0.0, shape, first.failed or one.failed
        elif shape > 1 or one.seconds > BUDGET or setup.runs == 1:  # runs shaped, costly or one
            per_point, failed = timer.scaled(indices, shape, one.seconds)
            fixed, runs = 0.0, shape
        else:
            runs = max(2, min(setup.runs, MAX_RUNS, int(BUDGET / max(one.seconds * len(indices), 1e-9))))
            per_point, fixed, failed = timer.spread(indices, runs, one.seconds)
        create, write = _file_costs(scenario, folder)
    return Calibration(
        per_point=per_point,
        fixed=fixed,
        runs=runs,
        load=max(load, 0.0),
        compile_seconds=compile_seconds,
        compiled=compiled,
        file_create=create,
        file_write=write,
        start=start,
        seconds=time.perf_counter() - began,
        failed=failed,
    )


def _shape_runs(scenario, index: int) -> int:
    """Runs per timed pass where the runs' count shapes the compiled program (diffrax, whose
    solves are traced for the chunk's runs): the run's first chunk; else 1."""
    if scenario.integrator.get("backend") != "diffrax":
        return 1
    from .ensemble import chunks

    setup = scenario.setup
    first = chunks(setup.runs, scenario.system.run_bytes(scenario.spec(index)), setup.chunk_bytes)[0]
    return len(first)


def _fresh_first_pass(timer, index: int, runs: int) -> float:
    """Seconds of the first pass of point `index` in a new process, the kernels just compiled
    now loaded from numba's cache as the run loads them (its import of the engine left out)."""
    import pickle
    import subprocess
    import sys

    setup = timer.small_setup(runs)
    code = (
        "import pickle, sys, time; from dyn.engine.worker import compute_point; "
        "setup, index = pickle.load(sys.stdin.buffer); t = time.perf_counter(); "
        "compute_point(setup, index); print(time.perf_counter() - t)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps((setup, index)), capture_output=True, timeout=600
    )
    try:
        return float(done.stdout.decode().split()[-1])
    except (IndexError, ValueError):  # not timed: the loading counts as nothing
        return 0.0


@dataclass
class _Timed:
    seconds: float
    failed: str = ""


class _PointTimer:
    """Whole points through the workers' own path (compute_point), with fewer runs."""

    def __init__(self, scenario, folder: Path | None):
        from .worker import compute_point

        self.compute, self.setup = compute_point, scenario.setup
        self.folder = folder

    def small_setup(self, runs: int):
        """The sweep's setup with `runs` runs, states kept where the scenario keeps them, and a
        tag of its own (a worker's copy of the full setup is never mistaken for it)."""
        return dataclasses.replace(
            self.setup, runs=runs, trajectories=self.folder is not None, tag=f"{self.setup.tag}:estimate:{runs}"
        )

    def time(self, indices, runs: int) -> _Timed:
        small = self.small_setup(runs)
        sidecar = None if self.folder is None else str(self.folder / f"states{runs}")
        if sidecar is not None:
            Path(sidecar).mkdir(exist_ok=True)
        clock = time.perf_counter()
        for index in indices:
            result = self.compute(small, index, sidecar)
            if result.status == FAILED:
                return _Timed(0.0, f"point {index} failed: {result.message}")
        return _Timed(time.perf_counter() - clock)

    def scaled(self, indices, runs: int, one: float):
        """Seconds of each sampled point at full runs, from passes at `runs` runs scaled by
        runs; after a costly first point (over BUDGET) only that point."""
        full = self.setup.runs
        per_point = {indices[0]: one / runs * full}
        for index in indices[1:] if one <= BUDGET else ():
            timed = self.time([index], runs)
            if timed.failed:
                return {}, timed.failed
            per_point[index] = timed.seconds / runs * full
        return per_point, ""

    def spread(self, indices, runs: int, one: float):
        """Seconds of each sampled point at full runs: a + b_i runs, a from the first point's
        passes at 1 and `runs` runs."""
        full = self.setup.runs
        times = {}
        for index in indices:
            timed = self.time([index], runs)
            if timed.failed:
                return {}, 0.0, timed.failed
            times[index] = timed.seconds
        slope = max(times[indices[0]] - one, 0.0) / (runs - 1)
        fixed = min(max(one - slope, 0.0), times[indices[0]])
        per_point = {i: fixed + max(t - fixed, 0.0) / runs * full for i, t in times.items()}
        return per_point, fixed, ""


class _JaxTimer:
    """Batches of sampled points through the batched backend's own path."""

    def __init__(self, scenario, folder: Path | None):
        from .batched import iter_results

        self.iter, self.scenario, self.folder = iter_results, scenario, folder

    def time(self, indices, runs: int) -> _Timed:
        setup = dataclasses.replace(self.scenario.setup, runs=runs, trajectories=self.folder is not None)
        system = self.scenario.system
        small = types.SimpleNamespace(
            system=system, setup=setup, hash=self.scenario.hash, spec=lambda i: setup.spec(i, system)
        )
        sidecar = None if self.folder is None else str(self.folder / f"states{runs}")
        if sidecar is not None:
            Path(sidecar).mkdir(exist_ok=True)
        clock = time.perf_counter()
        for index, result in self.iter(small, indices, sidecar):
            if result.status == FAILED:
                return _Timed(0.0, f"point {index} failed: {result.message}")
        return _Timed((time.perf_counter() - clock) / len(indices))

    def scaled(self, indices, runs: int, one: float):
        """The first point alone (a costly one), scaled by runs."""
        return {indices[0]: one / runs * self.scenario.setup.runs}, ""

    def spread(self, indices, runs: int, one: float):
        """The sampled points as one batch at `runs` runs: compiled once, then timed; the
        seconds per point-run, spread evenly over the points."""
        first = self.time(indices, runs)
        if first.failed:
            return {}, 0.0, first.failed
        timed = self.time(indices, runs)
        if timed.failed:
            return {}, 0.0, timed.failed
        full = self.scenario.setup.runs
        return {i: timed.seconds / runs * full for i in indices}, 0.0, ""


@contextlib.contextmanager
def _scratch(out: Path):
    """A temporary folder beside `out` (the same disk), or in the system's temporary folder
    where that folder does not exist yet or is not writable; removed after."""
    parent = Path(out).parent
    here = parent.is_dir() and os.access(parent, os.W_OK)
    with tempfile.TemporaryDirectory(prefix=".dyn-dry-run-", dir=parent if here else None) as folder:
        yield Path(folder)


def _file_costs(scenario, folder: Path) -> tuple[float | None, float | None]:
    """Seconds to create the sweep file and to write one point into it (a point of NaN values:
    the run's bytes and flushes), in `folder`; None for a file over MAX_FILE_BYTES."""
    need = store.estimated_bytes(scenario)
    if need > MAX_FILE_BYTES:
        return None, None
    path = folder / "timing.h5"
    clock = time.perf_counter()
    store.create(path, scenario, "dyn run --dry-run", need)
    create = time.perf_counter() - clock
    writer = store.Writer(path, scenario)
    indices = np.unique(np.linspace(0, scenario.count - 1, min(WRITES, scenario.count)).astype(int))
    clock = time.perf_counter()
    try:
        for index in indices:
            writer.write(int(index), PointResult({}, DIVERGED, "timing"))
    finally:
        writer.close()
    return create, (time.perf_counter() - clock) / len(indices)
