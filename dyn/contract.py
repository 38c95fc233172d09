"""The contract between the engine and the systems: what a system declares (`Output`, `Coord`)
and returns (`Chunk`), what the engine records per point (`PointResult`, the status codes), the
roles that tell readers of a file what a variable is, the reductions, and `bytes_of`.

The engine (dyn.ensemble, dyn.store, ...) and the systems (dyn.systems.*) both import this
module and nothing of each other's in this direction: systems never import the engine.
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
# horizon left undecided (points where it exceeds analysis.HORIZON_LIMITED_SHARE are marked).
# The engine adds its own for time averages (dyn.averaging): the stationarity verdict (1 passed,
# 0 not), the share of runs non-stationary on their own, and a step-error estimate (marked where
# it exceeds the Monte Carlo standard error beside it).
PROBABILITY, UNDECIDED = "probability", "undecided"
STATIONARY, NONSTATIONARY_SHARE, STEP_ERROR = "stationary", "nonstationary_share", "step_error"
TIME_AVERAGE = "time_average"  # a time average written by the engine (marked where unresolved)
ROLE_ATTR = "dyn_role"

# How an output is made from the runs of a point (see dyn.ensemble):
#   mean        the mean over runs of per-run values
#   mean_se     the mean, stored with its standard error over runs as X_se (sample std / sqrt(runs))
#   proportion  per-run booleans: the fraction p_X, stored with n_X (count) and the 95% Wilson
#               bounds p_X_lo, p_X_hi (the name must start with "p_")
#   max         the largest per-run value
#   rms         sqrt of the mean of the squared per-run values
#   point       one value for the point, from System.point_values (not from runs)
#   per_run     no reduction: every run's value, stored with a leading dimension `run`
#   time_average  a run's own series at the save times (values (runs, times)), averaged in time
#               over a window the engine chooses and extends (System.extend) until the runs are
#               stationary (dyn.averaging): stored with X_se, X_ess, X_drift and the point's
#               burn_in_used, horizon_used, stationary, nonstationary_runs
REDUCTIONS = ("mean", "mean_se", "proportion", "max", "rms", "point", "per_run", "time_average")
# The [integrator] keys of the solver (every such key a system may read).
INTEGRATOR_KEYS = frozenset({"backend", "method", "horizon", "dt", "rtol", "atol", "max_steps"})
# ... and of the engine, for a system with time averages that integrates an SDE with a fixed step
# (window, cap, the tolerance of dt = "auto", the step check).
AVERAGING_KEYS = frozenset({"burn_in", "horizon_cap", "step_tol", "check_step"})


@dataclass(frozen=True)
class Output:
    """One output variable: its own dimensions come after the sweep axes."""

    name: str
    long_name: str
    units: str = ""
    dims: tuple[str, ...] = ()
    reduce: str = "mean"
    role: str = ""  # "" or one of the roles above

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


@dataclass
class Chunk:
    """What `simulate` returns for a chunk of runs.

    values: per-run values of every output that is not reduced by "point", leading axis = runs.
    states: (runs, times, *state) when the system saves trajectories (written by the engine).
    finite: per-run flags (runs,); None: read from `states`, else from `values`. A run that is
    not finite marks its point DIVERGED.
    carry: what `System.extend` needs to continue the runs (e.g. their last states), for
    systems with time-averaged outputs.
    """

    values: dict[str, np.ndarray]
    states: np.ndarray | None = None
    finite: np.ndarray | None = None
    carry: np.ndarray | None = None


@dataclass
class PointResult:
    """Values of every file variable for one sweep point, and whether the dynamics stayed finite."""

    values: dict[str, np.ndarray]
    status: int = OK
    message: str = ""


def bytes_of(*shape: int) -> int:
    """Bytes of a float64 array of this shape (for System.run_bytes)."""
    return 8 * math.prod(int(s) for s in shape)
