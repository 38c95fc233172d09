r"""What a sweep costs before it runs (`dyn run --dry-run`): its file, its time, its compiling.

- **File**: :func:`dyn.engine.store.output_text`, the file and its saved states (NAME.h5.d/),
  the same bound the run checks before it
  makes the file.
- **Time**: measured on this machine, not modelled by constants (:mod:`dyn.engine.calibrate`):
  the start (this process's age), the kernels' first use, the file's creation and point writes,
  and SAMPLES points spread over the sweep (the first, the last and evenly between, in sweep
  order) through the run's own kernels at the scenario's sizes, with fewer runs. Every point is
  given the cost of the sampled point nearest to it in sweep order; summed, that is the serial
  time of the points, and a pool of W workers divides it by W (points are independent) and
  pays the start again in its workers. Where the cost varies between points more than the
  samples show (runs extended until decided or stationary, adaptive steps near a transition)
  the estimate is a guide, not a bound: the spread of the sampled points is printed with it.
  Where a sampled point fails, the time is printed as uncalibrated, with the reason.
- **Compiling**: what numba compiled in the first pass (its compile events fire on cache misses
  only), paid once per installation: numba's cache keeps the kernels, and the run loads them.

Nothing is left behind: no sweep file, no lock, no states (the writes are timed in a temporary
folder, removed after).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import one_line
from . import store
from .calibrate import calibrate, process_age
from .job_array import ArrayPool
from .longrun import duration_text
from .scenario import Scenario
from .store import size_text

SAMPLES = 3  # points timed
MAX_STEP_POINTS = 20_000  # a larger sweep's points are not each asked their step (nearest in order)


@dataclass(frozen=True)
class Estimate:
    """A sweep's estimated cost; ``str()`` is what `dyn run --dry-run` prints."""

    name: str
    system: str
    points: int
    runs: int
    file: Path
    file_bytes: int
    sampled: dict[int, float]  # point index -> seconds per run (the point's cost / runs)
    serial_seconds: float | None  # the points' work, one after another
    workers: int
    compile_seconds: float | None
    compiled: int = 0  # kernels compiled (not found in numba's cache) by the first pass
    note: str = ""
    file_text: str = ""  # the file and its saved states in words (store.output_text)
    start_seconds: float | None = None  # the process's start (imports, reading the scenario)
    load_seconds: float = 0.0  # the kernels' first use (loading from the cache, JAX compiling)
    file_seconds: float | None = None  # creating the file and writing every point
    calibration_seconds: float = 0.0  # how long the measuring took

    @property
    def total_seconds(self) -> float | None:
        """The run's wall time: its start, the kernels' first use, the file, the points (shared by
        the workers, whose start is paid again in their processes)."""
        if self.serial_seconds is None:
            return None
        begin = (self.start_seconds or 0.0) + self.load_seconds
        pool = begin if self.workers > 1 else 0.0
        return begin + pool + (self.file_seconds or 0.0) + self.serial_seconds / self.workers

    def __str__(self) -> str:
        lines = [
            f"dry run: {self.name} ({self.system}): {self.points} points x {self.runs} runs "
            f"= {self.points * self.runs} runs",
            f"file: {self.file}, {self.file_text or 'about ' + size_text(self.file_bytes)}",
        ]
        if self.serial_seconds is None:
            lines.append(f"time: uncalibrated ({self.note})")
            return "\n".join(lines)
        per_run = list(self.sampled.values())
        spread = f"{_num(min(per_run))} to {_num(max(per_run))} s per run at points {', '.join(map(str, self.sampled))}"
        who = f" with {self.workers} workers" if self.workers > 1 else ""
        parts = [
            f"start {_secs(self.start_seconds)}" if self.start_seconds is not None else "start not measured",
            f"kernels {_secs(self.load_seconds)}",
            f"file {_secs(self.file_seconds)}" if self.file_seconds is not None else "file writes not timed",
            f"points {_secs(self.serial_seconds)} serial: {spread}",
        ]
        lines.append(f"time: about {_secs(self.total_seconds)}{who} ({'; '.join(parts)})")
        lines.append(f"calibrated on this machine in {_secs(self.calibration_seconds)} ({_machine()})")
        if self.compiled:
            lines.append(
                f"compiling: numba compiled {self.compiled} functions not in its cache, "
                f"in about {_secs(self.compile_seconds)} (not counted above: the "
                "run loads them from the cache)"
            )
        else:
            lines.append("compiling: none (every kernel loaded from numba's cache)")
        return "\n".join(lines)


def sample_points(count: int, samples: int = SAMPLES) -> list[int]:
    """`samples` point indices spread evenly over 0 .. count - 1, ends included, each once."""
    return sorted({int(round(i)) for i in np.linspace(0, count - 1, min(samples, count))})


def estimate(
    scenario: Scenario, out: str | Path | None = None, workers: int = 1, command_line: bool = False
) -> Estimate:
    """The cost of running `scenario` into `out` (see the module doc); runs a few points with a
    few runs, leaves nothing behind. `command_line`: this process is `dyn run --dry-run`, whose
    age so far is the start the run pays too."""
    path = Path(out) if out is not None else scenario.default_output_path()
    setup = scenario.setup
    size, size_words = store.output_text(scenario)  # the system's references, as the run's check
    common = dict(
        name=scenario.name,
        system=setup.system_name,
        points=scenario.count,
        runs=setup.runs,
        file=path,
        file_bytes=size,
        file_text=size_words,
        workers=workers,
    )
    start = process_age() if command_line else None  # the run's start, up to its file's size
    indices = sample_points(scenario.count)
    try:
        cal = calibrate(scenario, indices, path, start)
    except Exception as exc:  # noqa: BLE001 - a system's own error: the estimate says it in a line
        return Estimate(
            **common,
            sampled={},
            serial_seconds=None,
            compile_seconds=None,
            note=one_line(f"the calibration stopped: {type(exc).__name__}: {exc}"),
        )
    if cal.failed:
        return Estimate(
            **common,
            sampled={},
            serial_seconds=None,
            compile_seconds=None,
            note=cal.failed,
            calibration_seconds=cal.seconds,
        )
    serial = float(sum(point_costs(scenario, cal.per_point)))
    files = None if cal.file_write is None else cal.file_create + cal.file_write * scenario.count
    return Estimate(
        **common,
        sampled={i: t / setup.runs for i, t in cal.per_point.items()},
        serial_seconds=serial,
        compiled=cal.compiled,
        compile_seconds=cal.compile_seconds,
        start_seconds=start,
        load_seconds=cal.load,
        file_seconds=files,
        calibration_seconds=cal.seconds,
    )


def point_costs(scenario: Scenario, sampled: dict[int, float]) -> np.ndarray:
    """Every point's seconds from the sampled points' (index -> seconds): each point takes the
    sampled point of the nearest step (in log dt; the nearest in sweep order among equals),
    scaled by their steps' ratio dt_sampled / dt_point (a point's steps go as 1/dt). Equal
    steps (a fixed dt, adaptive solvers): the sampled point nearest in sweep order."""
    timed = np.asarray(list(sampled), dtype=int)
    count = scenario.count
    steps = _log_dt(scenario) if scenario.setup.auto_dt and count <= MAX_STEP_POINTS else np.zeros(count)
    order = np.abs(np.arange(count)[:, None] - timed[None, :])
    apart = np.abs(steps[:, None] - steps[timed][None, :])
    nearest = np.lexsort((order, apart), axis=1)[:, 0] if len(timed) > 1 else np.zeros(count, int)
    chosen = timed[nearest]
    return np.array([sampled[int(c)] for c in chosen]) * np.exp(steps[chosen] - steps)


def _log_dt(scenario: Scenario) -> np.ndarray:
    """log of each point's step (dt = "auto" chooses it per point)."""
    system = scenario.system
    return np.log([scenario.setup.spec(i, system).dt for i in range(scenario.count)])


def _machine() -> str:
    """Cores and the load average: what the measured seconds depend on."""
    try:
        load = f", load average {os.getloadavg()[0]:.1f}"
    except OSError:
        load = ""
    return f"{os.cpu_count() or 1} cores{load}"


def _secs(x: float) -> str:
    return f"{x:.2g} s" if x < 100 else duration_text(x)


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
