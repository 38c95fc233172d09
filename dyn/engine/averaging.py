"""Time averages until stationary: the engine's side of the "time_average" reduction.

    runs over [0, T] (System.simulate) -> window from burn-in -> stationary? -> done
                                                   ^                  | no, and below the cap
                                                   +-- one more block of T (System.extend) <-+

A system declares an output with ``reduce = "time_average"`` and returns, per run, its series at
the save times (evenly spaced, Delta = T / saves). The engine then, per point:

1. picks the window's start: ``[integrator] burn_in`` when it is a number, else MSER truncation
   of the mean series (``burn_in = "auto"``, the default; :mod:`dyn.engine.stationarity`);
2. tests the window: its halves agree within DRIFT_Z standard errors, the runs agree with each
   other as well as their own fluctuations say (no run stuck in another metastable state), and
   each run holds at least MIN_EFFECTIVE effective samples;
3. if a test fails and the horizon is below ``horizon_cap``, continues every run by one more
   block of length T (the same sampling; ``System.extend`` from the runs' last states, noise from
   the point's stream in run order, so any executor gives the same numbers) and goes back to 1.

File variables, per time-averaged output X: X (the mean over runs of the window averages),
X_se (its standard error from the effective sample size, :mod:`dyn.engine.stationarity`), X_ess
(effective samples in all runs), X_drift (the halves' difference in standard errors), X_mixing
(the runs' disagreement over its limit: above 1, the runs sit in different states); per
point: burn_in_used, horizon_used, stationary (1: every test passed; 0: not by the cap — the
point is marked in plots and listings), nonstationary_runs (share of runs whose own halves
differ by more than DRIFT_Z standard errors). Same mechanism as run-until-decided: the run goes
on until its question is answered, up to a cap, and what the cap cut short is recorded and shown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from ..core.contract import NONSTATIONARY_SHARE, STATIONARY, TIME_AVERAGE, Output
from . import stationarity

if TYPE_CHECKING:
    from ..core.spec import RunSpec
    from ..core.system import System

DEFAULT_CAP_BLOCKS = 8  # horizon_cap defaults to this many horizons
TIME = 1e-9  # relative slack when comparing times
SERIES = "_series"  # the save-time axis of a time-averaged output's per-run values


def as_series(out: Output) -> Output:
    """How `simulate` returns a time-averaged output: one value per save time and run."""
    if out.reduce != "time_average":
        return out
    return Output(out.name, out.long_name, out.units, (SERIES,), "mean", out.role)


def point_outputs(outputs: list[Output]) -> list[Output]:
    """The file variables the engine writes for the time-averaged outputs of a system."""
    averaged = [o for o in outputs if o.reduce == "time_average"]
    if not averaged:
        return []
    found = []
    for out in averaged:
        found += [
            replace(out, reduce="point", role=out.role or TIME_AVERAGE),
            Output(
                f"{out.name}_se",
                f"standard error of {out.name} (from its effective sample size)",
                out.units,
                (),
                "point",
            ),
            Output(
                f"{out.name}_ess",
                f"effective samples of {out.name} in all runs (window samples / 2 tau_int)",
                "1",
                (),
                "point",
            ),
            Output(
                f"{out.name}_drift",
                f"second minus first half of the window of {out.name}, in standard errors",
                "1",
                (),
                "point",
            ),
            Output(
                f"{out.name}_mixing",
                f"spread of the runs' window means of {out.name} "
                "over what their own fluctuations allow (above 1: the runs disagree, "
                "e.g. split between states)",
                "1",
                (),
                "point",
            ),
        ]
    return found + [
        Output("burn_in_used", "start of the averaging window", "1", (), "point"),
        Output("horizon_used", "end of the averaging window (the runs' horizon)", "1", (), "point"),
        Output(
            "stationary",
            "1 if the window passed every stationarity test, 0 if not by the cap",
            "1",
            (),
            "point",
            STATIONARY,
        ),
        Output(
            "nonstationary_runs",
            f"share of runs whose window halves differ by more than {stationarity.DRIFT_Z:g} standard errors",
            "1",
            (),
            "point",
            NONSTATIONARY_SHARE,
        ),
    ]


def cap_of(setup) -> float:
    """The longest horizon the runs are extended to."""
    return setup.horizon_cap if setup.horizon_cap is not None else DEFAULT_CAP_BLOCKS * setup.horizon


def start_index(times: np.ndarray, burn_in: float | None) -> int | None:
    """First sample at or after a fixed burn-in (None: MSER chooses)."""
    if burn_in is None:
        return None
    return int(np.searchsorted(times, burn_in * (1 - TIME) - TIME))


@dataclass
class Piece:
    """The runs of one chunk: their carry and their series so far."""

    runs: range
    carry: object
    series: dict[str, list[np.ndarray]] = field(default_factory=dict)


@dataclass
class Window:
    """The outcome for one point: the statistics per output, the sample times, runs that became
    non-finite while extended."""

    stats: dict[str, stationarity.WindowStats]
    times: np.ndarray
    bad: int = 0

    @property
    def start(self) -> float:
        return float(self.times[min(s.start for s in self.stats.values())])

    @property
    def end(self) -> float:
        return float(self.times[-1])

    def values(self) -> dict[str, float]:
        out = {}
        for name, s in self.stats.items():
            out.update(
                {
                    name: s.mean,
                    f"{name}_se": s.se,
                    f"{name}_ess": s.ess,
                    f"{name}_drift": s.drift_z,
                    f"{name}_mixing": s.mixing_ratio,
                }
            )
        out.update(
            burn_in_used=self.start,
            horizon_used=self.end,
            stationary=float(all(s.stationary for s in self.stats.values())),
            nonstationary_runs=max(s.share_nonstationary for s in self.stats.values()),
        )
        return out


def series_of(pieces: list[Piece], name: str) -> np.ndarray:
    """(runs, samples) of one output, every chunk's runs in order."""
    return np.concatenate([np.concatenate(p.series[name], axis=1) for p in pieces], axis=0)


def run_means(pieces: list[Piece], window: Window, names: list[str]) -> dict[str, np.ndarray]:
    """Each run's own time average over the window, X_per_run[r] = mean_{t_k in window} X_r(t_k),
    for the outputs `names` (`[output] per_run`): the output X is their mean over runs. Paired
    run by run across points that share their random numbers, their differences measure a
    weak (stationary) bias with a small noise (`dyn compare --observable`)."""
    from .reductions import PER_RUN_SUFFIX

    return {
        f"{name}{PER_RUN_SUFFIX}": series_of(pieces, name)[:, window.stats[name].start :].mean(axis=1) for name in names
    }


def assess(pieces: list[Piece], names: list[str], times: np.ndarray, burn_in: float | None):
    """Statistics of every output over one common window: from the fixed burn-in, or from the
    latest of the outputs' MSER starts."""
    fixed = start_index(times, burn_in)
    series = {name: series_of(pieces, name) for name in names}
    start = fixed if fixed is not None else max(stationarity.mser_start(y) for y in series.values())
    return {name: stationarity.window_stats(y, start) for name, y in series.items()}


def extend(
    system: System, spec: RunSpec, pieces: list[Piece], names: list[str], t_end: float, step: float, samples: int
) -> tuple[float, int]:
    """Continue every chunk's runs by `samples` samples of spacing `step` (in chunk order);
    returns the new end time and the number of runs that became non-finite."""
    block = t_end + step * np.arange(samples + 1)
    bad = 0
    for piece in pieces:
        chunk = system.extend(spec, piece.carry, block)
        for name in names:
            v = np.asarray(chunk.values[name], dtype=np.float64)
            if v.shape != (len(piece.runs), samples):
                raise RuntimeError(
                    f"{system.name}.extend returned {name} of shape {v.shape}, expected {(len(piece.runs), samples)}"
                )
            piece.series[name].append(v)
        piece.carry = chunk.carry
        finite = np.ones(len(piece.runs), bool) if chunk.finite is None else np.asarray(chunk.finite, bool)
        bad += int((~finite).sum())
    return float(block[-1]), bad


def extend_to(
    system: System,
    spec: RunSpec,
    pieces: list[Piece],
    names: list[str],
    t_end: float,
    end: float,
    step: float,
    per_block: int,
) -> tuple[float, int]:
    """Continue the runs from t_end to `end` in blocks of at most `per_block` samples; returns the
    time reached and the number of runs that became non-finite."""
    bad = 0
    while t_end < end - step / 2:
        samples = min(per_block, int(round((end - t_end) / step)))
        t_end, lost = extend(system, spec, pieces, names, t_end, step, samples)
        bad += lost
    return t_end, bad


def until_stationary(system: System, spec: RunSpec, pieces: list[Piece], names: list[str]) -> Window:
    """Extend the runs block by block until every output's window is stationary or the horizon
    reaches the cap (see the module doc)."""
    setup = spec.setup
    times = np.asarray(spec.times, dtype=np.float64)
    step = float(times[1] - times[0])
    per_block = len(times) - 1
    cap = cap_of(setup)
    bad = 0
    while True:
        stats = assess(pieces, names, times, setup.burn_in)
        done = all(s.stationary for s in stats.values()) or bad
        room = int(math.floor((cap - times[-1]) / step * (1 + TIME)))
        if done or room < 1:
            return Window(stats, times, bad)
        samples = min(per_block, room)
        end, lost = extend(system, spec, pieces, names, float(times[-1]), step, samples)
        bad += lost
        times = np.concatenate([times, times[-1] + step * np.arange(1, samples + 1)])
