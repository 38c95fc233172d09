r"""The step check (``[integrator] check_step = true``): how much of a time average is the step.

Euler-Maruyama is weakly of order one: an average A computed with step h is A + c h + O(h^2).
Take the last states of the first CHECK_RUNS runs (stationary once the window passed its tests)
and continue each twice over a window as long as the point's own, on one Brownian path of its
own (a side stream of the point, so the main runs are untouched): with step h, each increment
drawn as the sum of two half-step increments (the integrator's ``refine = 2``), and with step
h/2. Then, run by run,

    A_h - A_{h/2} = c h / 2 + O(h^2),   so   step error of A_h  ~  2 (A_h - A_{h/2}),

averaged over the check runs; starting both from one state on one path keeps the difference far
less noisy than either average. Its standard error comes from the spread of the differences.
(Both start in the step-h law, so the h/2 run spends its first relaxation time getting to its
own: the estimate is low by about that time over the window's length.)
File variables: X_step_error (the estimate, in absolute value) and X_step_error_se. A point whose
step error exceeds its Monte Carlo error X_se by more than two of its own standard errors is
marked like a non-stationary one.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..core.contract import STEP_ERROR, Output
from . import averaging

if TYPE_CHECKING:
    from ..core.spec import RunSpec
    from ..systems.base import System

CHECK_RUNS = 8  # runs rerun at h and h/2 (fewer when the point has fewer)
CHECK_KEY = 0x5C  # spawn-key salt of the check's stream
RICHARDSON = 2.0  # weak order one: error(h) = 2 (A_h - A_{h/2})


def point_outputs(outputs: list[Output]) -> list[Output]:
    """X_step_error and X_step_error_se for every time-averaged output X."""
    found = []
    for out in outputs:
        if out.reduce == "time_average":
            found += [Output(f"{out.name}_step_error", f"Euler-Maruyama step error of {out.name} "
                             "(2 |A_h - A_h/2| on shared Brownian paths)", out.units, (), "point",
                             STEP_ERROR),
                      Output(f"{out.name}_step_error_se", f"standard error of "
                             f"{out.name}_step_error", out.units, (), "point")]
    return found


def _window_means(system, spec, names, carry, t0: float, length: float, step: float,
                  per_block: int) -> dict:
    """Window averages of runs continued from `carry` at t0 over `length`, in blocks."""
    piece = averaging.Piece(range(len(carry)), carry, {n: [] for n in names})
    averaging.extend_to(system, spec, [piece], names, t0, t0 + length, step, per_block)
    return {n: averaging.series_of([piece], n).mean(axis=1) for n in names}


def step_errors(system: "System", spec: "RunSpec", names: list[str], window: averaging.Window,
                pieces: list[averaging.Piece]) -> dict[str, float]:
    """X_step_error and X_step_error_se of each time-averaged output (see the module doc)."""
    from integrators.base import step_grid

    times = np.asarray(spec.times, dtype=np.float64)
    step = float(times[1] - times[0])
    carry = np.concatenate([np.asarray(p.carry) for p in pieces])[:CHECK_RUNS]
    runs = len(carry)
    h = float(step_grid(times, spec.dt)[1][0])  # the main runs' actual step
    args = (carry, window.end, window.end - window.start, step, len(times) - 1)
    coarse = _window_means(system, spec.variant((CHECK_KEY,), dt=h, refine=2), names, *args)
    fine = _window_means(system, spec.variant((CHECK_KEY,), dt=h / 2, refine=1), names, *args)
    out = {}
    for n in names:
        diff = RICHARDSON * (coarse[n] - fine[n])
        se = float(diff.std(ddof=1) / math.sqrt(runs)) if runs > 1 else math.nan
        out[f"{n}_step_error"] = float(abs(diff.mean()))
        out[f"{n}_step_error_se"] = se
    return out


def step_limited(error, error_se, mc_se):
    """True where the step error exceeds the Monte Carlo error by more than two of its own
    standard errors (arrays or scalars; NaN compares False)."""
    error_se = np.nan_to_num(np.asarray(error_se, dtype=float), nan=0.0)
    return np.asarray(error, dtype=float) - 2.0 * error_se > np.asarray(mc_se, dtype=float)
