r"""The step check (``[integrator] check_step = true``): how much of a time average is the step.

Euler-Maruyama is weakly of order one: an average A computed with step h is A + c h + O(h^2).
Take the last states of the first CHECK_RUNS runs (stationary once the window passed its tests)
and continue each twice over a window as long as the point's own, on one Brownian path of its
own (a side stream of the point, so the main runs are untouched): with step h, each increment
drawn as the sum of two half-step increments (the integrator's ``refine = 2``), and with step
h/2. Then, run by run,

    A_h - A_{h/2} = c h / 2 + O(h^2),   so   step error of A_h  ~  2 (A_h - A_{h/2}),

averaged over the check runs; starting both from one state on one path keeps the difference far
less noisy than either average. A method of weak order p (:data:`SDE_ORDER`: stochastic Heun, 2
for additive noise) has A_h - A_{h/2} = c h^p (1 - 2^-p), and the factor 2 becomes
2^p / (2^p - 1) (4/3). Its standard error comes from the spread of the differences.
(Both start in the step-h law, so the h/2 run spends its first relaxation time getting to its
own: the estimate is low by about that time over the window's length.)
File variables: X_step_error (the estimate, in absolute value) and X_step_error_se. A point whose
step error exceeds its Monte Carlo error X_se by more than two of its own standard errors is
marked like a non-stationary one.

ODE systems (``System.equation = "ode"``, fixed-step methods euler, heun, rk4 of the numba and
diffrax backends): the first k = :func:`ode_check_runs` runs of the point (a quarter of them,
at least CHECK_RUNS) are run again with every step halved, ``system.simulate(spec.variant(dt=
h/2), range(k))``. A variant has a fresh Generator on the point's stream (:attr:`RunSpec.rng`),
so it draws the starts of the main pass's first k runs: the property that makes chunking leave
the numbers unchanged (a system that drew its starts otherwise, not run after run from the
point's stream, would pair other starts). With global order p,
X_h - X_{h/2} = C h^p (1 - 2^-p) + O(h^{p+1}), so, run by run,

    step error of X_h  ~  (X_h - X_{h/2}) 2^p / (2^p - 1)      (euler 2, heun 4/3, rk4 16/15),

averaged over the check runs (X_h: the main pass's own values of those runs), element by element
for an output with dims: X_step_error (in absolute value) and X_step_error_se have the dims of
X, for every simulated mean X (reduce "mean" or "mean_se"; not for one whose NaN means
something, ``Output.nan_means``: its step error would be NaN where it is).

The fine run's dt is half the grid's largest step (:func:`halved_step`): on evenly spaced saves
that halves every step exactly. On other grids (``spacing = "log"``) a save interval taken in
c >= 2 steps is refined by a factor between 1.5 and 2.5, so the estimate there is off by a
factor between (1 - 1.5^-p) / (1 - 2^-p) and (1 - 2.5^-p) / (1 - 2^-p) (rk4 0.86 - 1.04,
euler 0.67 - 1.2), and one shorter than the fine step is taken in one step both times: its
error (its step is at most half the largest) is missed.

The mark (:func:`ode_step_limited`): where X_step_error exceeds X_se, element by element; the
point is marked where any element is (:mod:`dyn.engine.verdicts`). Not the SDE's margin of two
standard errors: an ODE run's difference is its own step error, and where the step is too long
it is carried by a few runs (RK4 past its stability limit inside the tightest clusters, a
sensitivity blowing up there), whose spread is then as large as their mean - with that margin
no check marks such a point, even one of all its runs. Without the margin the estimate's noise
is what could mark a point, and it is below X_se while a run's step error is below half the
spread of the runs (sd of the differences < sd of X / 2 with k = runs / 4): hence k grows with
the runs. Measured on lost_in_the_middle at beta = 3 (256 runs, RK4): at dt = 0.02 (bias of
soft_accuracy 0.18 X_se) 8 of 32 disjoint blocks of 8 check runs mark the point, none of 4
blocks of 64; at dt = 0.05 (bias 10 X_se) every block of 8 or 64 does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..core.contract import STEP_ERROR, Output
from . import averaging

if TYPE_CHECKING:
    from ..core.spec import RunSpec
    from ..core.system import System

CHECK_RUNS = 8  # runs rerun at h and h/2 (fewer when the point has fewer)
ODE_CHECK_SHARE = 4  # an ODE point reruns 1 / ODE_CHECK_SHARE of its runs (at least CHECK_RUNS)
CHECK_KEY = 0x5C  # spawn-key salt of the check's stream
RICHARDSON = 2.0  # weak order one: error(h) = 2 (A_h - A_{h/2})
# weak order p of the SDE methods: error(h) = (A_h - A_{h/2}) 2^p / (2^p - 1); stochastic_heun's
# 2 holds for additive noise on a flat geometry or the circle (integrators.numba.sde_heun)
SDE_ORDER = {"euler_maruyama": 1, "stochastic_heun": 2}
ODE_ORDER = {"euler": 1, "heun": 2, "rk4": 4}  # global order p of the fixed-step ODE methods


def refused(system: System, setup) -> str:
    """Why ``check_step = true`` would be refused for an SDE `system` under `setup`'s solver
    ("" where it is accepted): what ``dyn show --errors`` says instead of suggesting it."""
    solver = setup.solver
    if "check_step" not in system.integrator:
        return (
            f"system {system.name} does not take integrator.check_step (a system takes it "
            "by declaring step_rate; a dyn.Model by writing step_rate)"
        )
    if solver.backend != "numba" or not system.step_check:
        return f"the step check reruns runs on one Brownian path: {system.name} on backend {solver.backend} cannot"
    return ""


def point_outputs(outputs: list[Output], ode: bool = False) -> list[Output]:
    """X_step_error and X_step_error_se for every time-averaged output X (an SDE system), or with
    `ode` for every simulated mean X (:func:`ode_checked`), with the dims of X."""
    if ode:
        return [
            part
            for out in ode_checked(outputs)
            for part in (
                Output(
                    f"{out.name}_step_error",
                    f"step error of {out.name} (Richardson: |mean of X_h - X_h/2| 2^p / (2^p - 1) over the check runs)",
                    out.units,
                    out.dims,
                    "point",
                    STEP_ERROR,
                ),
                Output(
                    f"{out.name}_step_error_se",
                    f"standard error of {out.name}_step_error",
                    out.units,
                    out.dims,
                    "point",
                ),
            )
        ]
    found = []
    for out in outputs:
        if out.reduce == "time_average":
            found += [
                Output(
                    f"{out.name}_step_error",
                    f"Euler-Maruyama step error of {out.name} (2 |A_h - A_h/2| on shared Brownian paths)",
                    out.units,
                    (),
                    "point",
                    STEP_ERROR,
                ),
                Output(f"{out.name}_step_error_se", f"standard error of {out.name}_step_error", out.units, (), "point"),
            ]
    return found


def _window_means(system, spec, names, carry, t0: float, length: float, step: float, per_block: int) -> dict:
    """Window averages of runs continued from `carry` at t0 over `length`, in blocks."""
    piece = averaging.Piece(range(len(carry)), carry, {n: [] for n in names})
    averaging.extend_to(system, spec, [piece], names, t0, t0 + length, step, per_block)
    return {n: averaging.series_of([piece], n).mean(axis=1) for n in names}


def step_errors(
    system: System, spec: RunSpec, names: list[str], window: averaging.Window, pieces: list[averaging.Piece]
) -> dict[str, float]:
    """X_step_error and X_step_error_se of each time-averaged output (see the module doc)."""
    from integrators.core.base import step_grid

    times = np.asarray(spec.times, dtype=np.float64)
    step = float(times[1] - times[0])
    carry = np.concatenate([np.asarray(p.carry) for p in pieces])[:CHECK_RUNS]
    runs = len(carry)
    h = float(step_grid(times, spec.dt)[1][0])  # the main runs' actual step
    args = (carry, window.end, window.end - window.start, step, len(times) - 1)
    coarse = _window_means(system, spec.variant((CHECK_KEY,), dt=h, refine=2), names, *args)
    fine = _window_means(system, spec.variant((CHECK_KEY,), dt=h / 2, refine=1), names, *args)
    out = {}
    p = SDE_ORDER.get(spec.solver.method, 1)
    factor = RICHARDSON if p == 1 else 2.0**p / (2.0**p - 1.0)
    for n in names:
        diff = factor * (coarse[n] - fine[n])
        se = float(diff.std(ddof=1) / math.sqrt(runs)) if runs > 1 else math.nan
        out[f"{n}_step_error"] = float(abs(diff.mean()))
        out[f"{n}_step_error_se"] = se
    return out


def ode_checked(outputs: list[Output]) -> list[Output]:
    """The outputs the ODE step check covers: the means over runs, but those whose NaN means
    something (their step error would be NaN where they are, at points that are ok)."""
    return [out for out in outputs if out.reduce in ("mean", "mean_se") and not out.nan_means]


def halved_step(times: np.ndarray, dt: float) -> float:
    """The fine run's dt: half the largest step of the grid of `dt` over the save times (every
    step halved on evenly spaced saves; see the module doc for other grids)."""
    from integrators.core.base import step_grid

    return float(step_grid(times, dt)[1].max()) / 2


def ode_check_runs(runs: int) -> int:
    """How many of an ODE point's first runs the step check reruns (see the module doc)."""
    return min(runs, max(CHECK_RUNS, -(-runs // ODE_CHECK_SHARE)))


def ode_step_errors(system: System, spec: RunSpec, coarse: dict[str, np.ndarray]) -> dict:
    """X_step_error and X_step_error_se of each output in `coarse`: the main pass's values of
    its first runs (runs, *dims), against those runs again at half the step (the module doc)."""
    runs = len(next(iter(coarse.values())))
    fine_spec = spec.variant(dt=halved_step(np.asarray(spec.times, dtype=np.float64), spec.dt))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fine = system.simulate(fine_spec, range(runs)).values
    p = ODE_ORDER[spec.solver.method]
    out = {}
    for name, values in coarse.items():
        diff = (values - np.asarray(fine[name], dtype=np.float64)) * (2.0**p / (2.0**p - 1.0))
        out[f"{name}_step_error"] = np.abs(diff.mean(axis=0))
        out[f"{name}_step_error_se"] = (
            diff.std(axis=0, ddof=1) / math.sqrt(runs) if runs > 1 else np.full(diff.shape[1:], np.nan)
        )
    return out


ROUNDING = 1e-10  # a step error below this share of |X| is the rounding of two runs' arithmetic


def step_limited(error, error_se, mc_se, value=0.0):
    """True where the step error exceeds the Monte Carlo error by more than two of its own
    standard errors (arrays, element by element, or scalars; NaN compares False). A step error
    within ROUNDING |value| of the output's value marks nothing: where every run ends at one
    value (tokens collapsed to one point) X_se is rounding too, and so is any difference."""
    error_se = np.nan_to_num(np.asarray(error_se, dtype=float), nan=0.0)
    floor = np.maximum(np.asarray(mc_se, dtype=float), ROUNDING * np.abs(np.asarray(value, dtype=float)))
    return np.asarray(error, dtype=float) - 2.0 * error_se > floor


def ode_step_limited(error, mc_se, value=0.0):
    """The ODE step check's mark (module doc): True where the step error exceeds the Monte Carlo
    error, element by element (NaN compares False), and is more than ROUNDING |value|."""
    floor = np.maximum(np.asarray(mc_se, dtype=float), ROUNDING * np.abs(np.asarray(value, dtype=float)))
    return np.asarray(error, dtype=float) > floor
