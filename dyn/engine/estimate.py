r"""What a sweep costs before it runs (`dyn run --dry-run`): its file, its time, its compiling.

- **File**: :func:`dyn.engine.store.output_text`, the file and its saved states (NAME.h5.d/),
  the same bound the run checks before it
  makes the file.
- **Time**: measured, not modelled. SAMPLES points spread over the sweep (the first, the last and
  evenly between, in sweep order) run with min(runs, CALIBRATION_RUNS) runs each: once untimed
  (numba compiles or loads the kernels), then timed. Every point of the sweep is given the
  seconds per run of the sampled point nearest to it in sweep order; times its runs, summed,
  that is the serial time, and a pool of W workers divides it by W (points are independent).
  Few runs use the threads of an ensemble block less well than many, so the per-run cost is if
  anything over-estimated. Where the cost varies between points more than the samples show
  (runs extended until decided or stationary, adaptive steps near a transition) the estimate is
  a guide, not a bound: the spread of the sampled points is printed with it.
- **Compiling**: what the untimed pass took beyond its runs, paid once per installation (numba's
  cache keeps the kernels). Counted from numba's compile events, which fire on cache misses only.

Nothing is written: no sweep file, no lock, no states.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from integrators.numba.events import recording_compiles

from ..core.contract import FAILED
from . import store
from .job_array import ArrayPool
from .longrun import duration_text
from .scenario import Scenario
from .store import size_text
from .worker import compute_point

SAMPLES = 3  # points timed
CALIBRATION_RUNS = 16  # runs per timed point, at most


@dataclass(frozen=True)
class Estimate:
    """A sweep's estimated cost; ``str()`` is what `dyn run --dry-run` prints."""

    name: str
    system: str
    points: int
    runs: int
    file: Path
    file_bytes: int
    sampled: dict[int, float]  # point index -> seconds per run (None: not timed)
    serial_seconds: float | None
    workers: int
    compile_seconds: float | None
    compiled: int = 0  # kernels compiled (not found in numba's cache) by the untimed pass
    note: str = ""
    file_text: str = ""  # the file and its saved states in words (store.output_text)

    def __str__(self) -> str:
        lines = [f"dry run: {self.name} ({self.system}): {self.points} points x {self.runs} runs "
                 f"= {self.points * self.runs} runs",
                 f"file: {self.file}, {self.file_text or 'about ' + size_text(self.file_bytes)}"]
        if self.serial_seconds is None:
            lines.append(f"time: not estimated ({self.note})")
            return "\n".join(lines)
        per_run = list(self.sampled.values())
        spread = (f"{_num(min(per_run))} to {_num(max(per_run))} s per run at points "
                  f"{', '.join(map(str, self.sampled))}")
        time_text = f"time: about {duration_text(self.serial_seconds)} serial ({spread})"
        if self.workers > 1:
            time_text += f", about {duration_text(self.serial_seconds / self.workers)} with {self.workers} workers"
        lines.append(time_text)
        if self.compiled:
            lines.append(f"compiling: numba compiled {self.compiled} functions not in its cache, "
                         f"in about {duration_text(self.compile_seconds)}; the run will load them")
        else:
            lines.append("compiling: none (every kernel loaded from numba's cache)")
        return "\n".join(lines)


def sample_points(count: int, samples: int = SAMPLES) -> list[int]:
    """`samples` point indices spread evenly over 0 .. count - 1, ends included, each once."""
    return sorted({int(round(i)) for i in np.linspace(0, count - 1, min(samples, count))})


def estimate(scenario: Scenario, out: str | Path | None = None, workers: int = 1) -> Estimate:
    """The cost of running `scenario` into `out` (see the module doc); runs a few points with a
    few runs, writes nothing."""
    path = Path(out) if out is not None else scenario.default_output_path()
    setup = scenario.setup
    common = dict(name=scenario.name, system=setup.system_name, points=scenario.count,
                  runs=setup.runs, file=path, file_bytes=store.output_text(scenario)[0],
                  file_text=store.output_text(scenario)[1], workers=workers)
    if scenario.integrator.get("backend") == "jax":
        return Estimate(**common, sampled={}, serial_seconds=None, compile_seconds=None,
                        note="backend jax runs the sweep as batches: time a small sweep instead")
    runs = min(setup.runs, CALIBRATION_RUNS)
    indices = sample_points(scenario.count)
    start = time.perf_counter()
    with recording_compiles() as compiles:  # fires on cache misses only
        compute_point(_fewer(setup, 1), indices[0])  # compiles or loads the kernels
    first = time.perf_counter() - start
    compiled = sum(e.is_start for _, e in compiles.buffer)
    small = _fewer(setup, runs)
    sampled = {}
    for index in indices:
        start = time.perf_counter()
        result = compute_point(small, index)
        if result.status == FAILED:
            return Estimate(**common, sampled={}, serial_seconds=None, compile_seconds=None,
                            note=f"point {index} failed: {result.message}")
        sampled[index] = (time.perf_counter() - start) / runs
    nearest = np.asarray(indices)[np.abs(np.arange(scenario.count)[:, None]
                                         - np.asarray(indices)[None, :]).argmin(axis=1)]
    serial = float(sum(sampled[int(i)] for i in nearest) * setup.runs)
    return Estimate(**common, sampled=sampled, serial_seconds=serial, compiled=compiled,
                    compile_seconds=max(first - sampled[indices[0]], 0.0))


def _fewer(setup, runs: int):
    """The sweep's setup with `runs` runs and no saved states; its own tag, so that a worker's
    copy of the full setup (worker._shared_setup) is never mistaken for it."""
    return dataclasses.replace(setup, runs=runs, trajectories=False,
                               tag=f"{setup.tag}:estimate:{runs}")


def _num(x: float) -> str:
    return f"{x:.2g}"


def calibrated(pool: ArrayPool, scenario, out: Path) -> ArrayPool:
    """`pool` with the seconds per point of the dry run's calibration (none when the options
    fix the chunk size, or the calibration cannot tell)."""
    if pool.options.points_per_task is not None:
        return pool
    found = estimate(scenario, out)
    if found.serial_seconds is None or not scenario.count:
        return pool
    return dataclasses.replace(pool, seconds_per_point=found.serial_seconds / scenario.count)
