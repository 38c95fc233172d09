"""The contract between the engine and the systems: what a system declares (`Output`, `Coord`,
`Reference`, the drawing hints `Draw`) and returns (`Chunk`), what the engine records per point
(`PointResult`, the status codes), the roles that tell readers of a file what a variable is, the
reductions, `Solve` (what a system asks the batched JAX path to solve), and `bytes_of`.

The engine (dyn.engine.ensemble, dyn.engine.store, ...) and the systems (dyn.systems.*) both
import this module and nothing of each other's in this direction: systems never import the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

# Per-point status codes stored in the file (CF flag_values / flag_meanings).
PENDING, OK, DIVERGED, FAILED = 0, 1, 2, 3
STATUS_NAMES = ("pending", "ok", "diverged", "failed")

# Output roles, stored as the variable attribute ROLE_ATTR so that readers of the file (plots,
# `dyn show`) know them without the system: a class probability, and the share of runs that the
# horizon left undecided (points where it exceeds verdicts.HORIZON_LIMITED_SHARE are marked).
# The engine adds its own for time averages (dyn.engine.averaging): the stationarity verdict (1
# passed, 0 not), the share of runs non-stationary on their own, and a step-error estimate (marked where
# it exceeds the Monte Carlo standard error beside it).
PROBABILITY, UNDECIDED = "probability", "undecided"
STATIONARY, NONSTATIONARY_SHARE, STEP_ERROR = "stationary", "nonstationary_share", "step_error"
TIME_AVERAGE = "time_average"  # a time average written by the engine (marked where unresolved)
REFERENCE = "reference"  # theory written once with the file (System.references), not measured
ROLE_ATTR = "dyn_role"
NAN_MEANS_ATTR = "dyn_nan_means"  # Output.nan_means, on the variable: a NaN there is an answer

# Drawing hints (`Draw`), stored as variable attributes so that `dyn plot` needs only the file:
#   dyn_over        space-separated names of the variables this one is drawn over
#   dyn_along       the axis (a dimension of the file) its values are positions on; absent: its
#                   values are values of the variables it is drawn over (a curve beside theirs)
#   dyn_color, dyn_linestyle, dyn_label   line colour (absent: the picture's), style, legend text
#   dyn_slopes      reference slopes c N^s drawn beside curves on log-log axes
#   dyn_clim        colour range of heat maps; dyn_mark_above: cells above it get a "+"
# and, on a coordinate, dyn_axis: the file dimension a theory grid lies along (beta_theory -> beta).
OVER_ATTR, ALONG_ATTR, AXIS_ATTR = "dyn_over", "dyn_along", "dyn_axis"
# dyn_profile: "X T": draw the variable as profiles against its dimension X, one curve per
# value of T (a few of them), one panel per combination of the other axes (Draw.profile)
PROFILE_ATTR = "dyn_profile"
COLOR_ATTR, LINESTYLE_ATTR, LABEL_ATTR = "dyn_color", "dyn_linestyle", "dyn_label"
SLOPES_ATTR, CLIM_ATTR, MARK_ABOVE_ATTR = "dyn_slopes", "dyn_clim", "dyn_mark_above"
# dyn_signed = 1: the sign is the point (a growth rate, a drift): heat maps use a diverging map
# centred on zero (so does a dyn_clim symmetric about zero)
SIGNED_ATTR = "dyn_signed"

# How an output is made from the runs of a point (see dyn.engine.ensemble):
#   mean        the mean over runs of per-run values
#   mean_se     the mean, stored with its standard error over runs as X_se (sample std / sqrt(runs))
#   proportion  per-run booleans: the fraction p_X, stored with n_X (count) and the 95% Wilson
#               bounds p_X_lo, p_X_hi (the name must start with "p_")
#   max         the largest per-run value
#   rms         sqrt of the mean of the squared per-run values
#   point       one value for the point, from System.point_values (not from runs)
#   per_run     no reduction: every run's value, stored with a leading dimension `run`
#   time_to_event  a first-passage time per run, NaN for a run that never got there by the
#               horizon T (censored at T): stored as X, the mean with T in place of NaN (biased
#               low by the censoring), X_se, the censored share X_censored, and the Kaplan-Meier
#               median X_median with its 95% distribution-free interval X_median_lower,
#               X_median_upper (dyn.engine.reductions.TimeToEvent)
#   time_average  a run's own series at the save times (values (runs, times)), averaged in time
#               over a window the engine chooses and extends (System.extend) until the runs are
#               stationary (dyn.engine.averaging): stored with X_se, X_ess, X_drift and the point's
#               burn_in_used, horizon_used, stationary, nonstationary_runs
REDUCTIONS = ("mean", "mean_se", "proportion", "max", "rms", "point", "per_run", "time_average", "time_to_event")
# The [integrator] keys of the solver (every such key a system may read).
INTEGRATOR_KEYS = frozenset({"backend", "method", "horizon", "dt", "rtol", "atol", "max_steps"})
# ... and of the engine, for a system with time averages that integrates an SDE with a fixed step
# (window, cap, the tolerance of dt = "auto", the step check).
AVERAGING_KEYS = frozenset({"burn_in", "horizon_cap", "step_tol", "check_step"})


@dataclass(frozen=True)
class Draw:
    """How `dyn plot` draws a variable, declared with it and written as its attributes (above).

    over: variables it is drawn over. Its dims lie along the picture's axes (a theory grid along
    the axis its coordinate's dyn_axis names), those of the panel select it, and
    - along = "" (its values are values of theirs): a curve beside their curves, one per
      combination of its other dims (a `run` dim: the first runs, as thin steps);
    - along = an axis (its values are positions on it, e.g. sigma_c(beta) on `sigma`): on a heat
      map with that axis, a curve (a tick across each cell when indexed by the other axis's own
      values); on curves against that axis, a vertical line at each value.
    slopes: reference slopes on log-log curves; clim: colour range of heat maps; mark_above:
    heat-map cells above it get a "+"; signed: a diverging colour map centred on zero (a growth
    rate, whose sign is the point); profile (x, curves): draw it as curves against its
    dimension x, one per value of `curves` (a few, spread over it), one panel per combination of
    the other axes (a position profile at a few times), instead of heat maps.
    """

    over: tuple[str, ...] = ()
    along: str = ""
    color: str = ""
    linestyle: str = "--"
    label: str = ""
    slopes: tuple[float, ...] = ()
    clim: tuple[float, float] | None = None
    mark_above: float | None = None
    profile: tuple[str, str] | None = None  # (x, curves): profiles against x, one per curve value
    signed: bool = False  # its sign is what matters: a diverging colour map centred on zero

    def attrs(self) -> dict:
        """The variable attributes that declare it (only those set)."""
        found = {OVER_ATTR: " ".join(self.over), ALONG_ATTR: self.along, COLOR_ATTR: self.color, LABEL_ATTR: self.label}
        found = {k: v for k, v in found.items() if v}
        if self.over:
            found[LINESTYLE_ATTR] = self.linestyle
        if self.slopes:
            found[SLOPES_ATTR] = np.asarray(self.slopes, dtype=float)
        if self.clim is not None:
            found[CLIM_ATTR] = np.asarray(self.clim, dtype=float)
        if self.mark_above is not None:
            found[MARK_ABOVE_ATTR] = float(self.mark_above)
        if self.profile is not None:
            found[PROFILE_ATTR] = " ".join(self.profile)
        if self.signed:
            found[SIGNED_ATTR] = 1
        return found


@dataclass(frozen=True)
class Output:
    """One output variable: its own dimensions come after the sweep axes."""

    name: str
    long_name: str
    units: str = ""
    dims: tuple[str, ...] = ()
    reduce: str = "mean"
    role: str = ""  # "" or one of the roles above
    draw: Draw | None = None  # how `dyn plot` draws it (and over what)
    # What a NaN in it means ("no more merges"), for an output that may hold NaN at a point
    # that is ok; "" (the default): every value must be finite, else the point is DIVERGED.
    nan_means: str = ""

    def __post_init__(self):
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"output {self.name}: reduce must be one of {REDUCTIONS}")
        if self.reduce == "proportion" and not self.name.startswith("p_"):
            raise ValueError(f"output {self.name}: a proportion's name starts with 'p_'")
        if self.reduce == "time_average" and self.dims:
            raise ValueError(f"output {self.name}: a time average is a scalar per point")


@dataclass(frozen=True)
class Coord:
    """A coordinate of a system-owned dimension (e.g. iterations)."""

    values: np.ndarray
    long_name: str
    units: str = ""
    attrs: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Reference:
    """Theory written into the file once, when it is made (`System.references(setup)`): a
    boundary, a closed form, a curve to compare with, with role "reference".

    dims: sweep axes, the system's own dimensions (`time`, `mode`, ...) or new ones given in
    `coords` (a theory grid: `theory_coord`); values: their shape. NaN where the theory has no
    value (no solution, does not apply). `draw` says what it is drawn over and how (`Draw`).
    """

    name: str
    long_name: str
    values: np.ndarray
    dims: tuple[str, ...] = ()
    coords: dict = field(default_factory=dict)  # name -> Coord, the dimensions it brings
    units: str = ""
    draw: Draw = Draw()


def theory_grid(values, points: int = 200) -> np.ndarray:
    """A fine grid over the cells of a sweep axis with these values (sorted): `points` evenly
    and `points` geometrically spaced values (positive axes) from the outer edge of the first
    cell to that of the last, and the values themselves; so a curve on it spans the heat map
    however its axis is drawn. One value: that value."""
    v = np.unique(np.asarray(values, dtype=float))
    if v.size < 2:
        return v
    lo, hi = v[0] - (v[1] - v[0]) / 2, v[-1] + (v[-1] - v[-2]) / 2
    grids = [v]
    if v[0] > 0:
        geo_lo, geo_hi = v[0] * math.sqrt(v[0] / v[1]), v[-1] * math.sqrt(v[-1] / v[-2])
        if v.size >= 3:  # drawn log when geometric or spanning a decade: geometric cell edges
            lo, hi = min(lo, geo_lo), max(hi, geo_hi)
        lo = lo if lo > 0 else geo_lo  # a positive axis keeps a positive grid
        grids.append(np.geomspace(lo, hi, points))
    grids.append(np.linspace(lo, hi, points))
    return np.unique(np.concatenate(grids))


def theory_coord(axis: str, values, points: int = 200) -> Coord:
    """The coordinate of a theory grid along the sweep axis `axis` (`theory_grid`)."""
    return Coord(theory_grid(values, points), f"{axis} (fine grid of the theory)", attrs={AXIS_ATTR: axis})


@dataclass
class Chunk:
    """What `simulate` returns for a chunk of runs.

    values: per-run values of every output that is not reduced by "point", leading axis = runs.
    states: (runs, times, *state) when the system saves trajectories (written by the engine).
    finite: per-run flags (runs,); None: read from `states`, else from `values`. A run that is
    not finite marks its point DIVERGED.
    carry: what `System.extend` needs to continue the runs (e.g. their last states), for
    systems with time-averaged outputs.
    status: the integrator's status per run (`integrators.Solution.status`: ok, max_steps,
    non-finite), where the system hands it on; the engine names the runs that ran out of
    max_steps in the point's message.
    """

    values: dict[str, np.ndarray]
    states: np.ndarray | None = None
    finite: np.ndarray | None = None
    carry: np.ndarray | None = None
    status: np.ndarray | None = None


@dataclass(frozen=True, eq=False)
class Solve:
    """One point's part of a batched solve (backend jax, :mod:`dyn.engine.batched`): the engine
    stacks the Solves of a batch (points of equal `System.batch_key`) and makes one call

        integrators.get("jax", method, dt=dt, absorbing=...).solve(Problem.stack(problems), x0s,
                                                                    ts, rng=keys | increments=...)

    whose slice for the point goes to `System.observe`. `problem`: an integrators.Problem with
    the point's flat vector; `x0` (runs, n, d); `ts` (T,) save times; the noise from `key`
    (uint32[2], e.g. RunSpec.jax_key()) or given `increments` (runs, steps, q1, q2), neither
    for an ODE; `absorbing`: runs stop in problem.stop_jax, and the result is (states, steps)."""

    method: str
    dt: float
    problem: object
    x0: np.ndarray
    ts: np.ndarray
    key: np.ndarray | None = None
    increments: np.ndarray | None = None
    absorbing: bool = False


@dataclass
class PointResult:
    """Values of every file variable for one sweep point, and whether the dynamics stayed finite."""

    values: dict[str, np.ndarray]
    status: int = OK
    message: str = ""


def bytes_of(*shape: int) -> int:
    """Bytes of a float64 array of this shape (for System.run_bytes)."""
    return 8 * math.prod(int(s) for s in shape)
