"""The points whose numbers are not yet answers, read from a sweep file (`dyn run` reports them,
`dyn show` lists them and `dyn plot` marks them: :mod:`dyn.presentation.analysis`):

- horizon-limited: more than HORIZON_LIMITED_SHARE of the runs ended undecided (a variable of
  role "undecided");
- non-stationary: a time average whose window failed its stationarity tests by the cap
  (`stationary` = 0, :mod:`dyn.engine.averaging`);
- step-limited: a step error (`X_step_error`, :mod:`dyn.engine.stepcheck`) larger than the Monte
  Carlo error `X_se`: for a time average (an SDE system's; it has `X_ess`) by more than two of
  its own standard errors, for a mean of an ODE system by anything (`stepcheck.ode_step_limited`,
  why there is no margin). Over an output's own dims (`time`, `position`, ...) element by
  element: the point is marked where any element of any output is.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.contract import PROBABILITY, ROLE_ATTR, STATIONARY, STEP_ERROR, TIME_AVERAGE, UNDECIDED
from .stepcheck import ode_step_limited, step_limited

# A point whose share of runs left undecided (by the horizon or the cap) exceeds this is
# "horizon-limited": its class probabilities are not the answer, and plots and summaries say so.
HORIZON_LIMITED_SHARE = 0.02


def undecided_variable(ds) -> str | None:
    """The variable holding the share of undecided runs per point, if the system has one."""
    names = with_role(ds, UNDECIDED)
    return names[0] if names else None


HORIZON_LIMITED, NONSTATIONARY, STEP_LIMITED = "horizon-limited", "non-stationary", "step-limited"
# which variables each mark applies to (by role)
# (step-limited: the time averages of an SDE system, the means of an ODE system, which have no role)
MARKED_ROLES = {
    HORIZON_LIMITED: (PROBABILITY, UNDECIDED),
    NONSTATIONARY: (TIME_AVERAGE,),
    STEP_LIMITED: (TIME_AVERAGE, ""),
}
WHY = {
    HORIZON_LIMITED: f"more than {HORIZON_LIMITED_SHARE:.0%} of runs undecided: raise the horizon",
    NONSTATIONARY: "time average not stationary by horizon_cap: raise it (or the horizon)",
    STEP_LIMITED: "step error above the Monte Carlo error: lower dt (or step_tol)",
}


def horizon_limited(ds):
    """Boolean DataArray per point: more than HORIZON_LIMITED_SHARE of its runs ended undecided
    (None when the system classifies no end state). Pending points are False."""
    return unresolved(ds).get(HORIZON_LIMITED)


def with_role(ds, role: str) -> list[str]:
    """The variables of `ds` (an xarray Dataset) whose role is `role`."""
    return [n for n, v in ds.data_vars.items() if v.attrs.get(ROLE_ATTR) == role]


def _hits(roles: dict[str, str], values) -> dict[str, tuple[str, np.ndarray]]:
    """For each reason with a rule in this file: (a variable whose dimensions the marks share,
    boolean per point). `roles` maps variable names to roles, `values(name)` reads one. NaN
    (a pending point) compares False, so pending points are never marked."""
    named = {role: [n for n, r in roles.items() if r == role] for role in (UNDECIDED, STATIONARY, STEP_ERROR)}
    hits = {}
    if named[UNDECIDED]:
        name = named[UNDECIDED][0]
        hits[HORIZON_LIMITED] = name, np.asarray(values(name)) > HORIZON_LIMITED_SHARE
    if named[STATIONARY]:
        flags = [np.asarray(values(n)) == 0 for n in named[STATIONARY]]
        hits[NONSTATIONARY] = named[STATIONARY][0], np.logical_or.reduce(flags)
    if named[STEP_ERROR]:  # per point: any element of any output (the dims after the axes)
        axes = np.ndim(values("status"))
        steps = []
        for n in named[STEP_ERROR]:
            base = n.removesuffix("_step_error")
            if f"{base}_ess" in roles:  # a time average
                hit = step_limited(values(n), values(f"{n}_se"), values(f"{base}_se"), values(base))
            else:
                hit = ode_step_limited(values(n), values(f"{base}_se"), values(base))
            steps.append(hit.reshape(hit.shape[:axes] + (-1,)).any(axis=-1))
        hits[STEP_LIMITED] = "status", np.logical_or.reduce(steps)
    return hits


def unresolved(ds) -> dict:
    """Boolean DataArray per point for each reason a point's numbers are not answers yet (only
    the reasons the file can have; pending points are False)."""
    import xarray as xr  # here, so that `dyn run` never imports xarray (nor dask through it)

    roles = {n: v.attrs.get(ROLE_ATTR) for n, v in ds.data_vars.items()}
    return {
        reason: xr.DataArray(hit, dims=ds[like].dims, coords=ds[like].coords, name=reason)
        for reason, (like, hit) in _hits(roles, lambda n: ds[n].values).items()
    }


def count_unresolved(path: str | Path) -> dict[str, int]:
    """Number of points marked for each reason (only the reasons with marked points), read with
    h5py: the end of `dyn run` should not pay for importing xarray."""
    import h5py

    with h5py.File(path, "r") as f:
        roles = {n: _text(v.attrs.get(ROLE_ATTR)) for n, v in f.items() if isinstance(v, h5py.Dataset)}
        counts = {reason: int(hit.sum()) for reason, (_, hit) in _hits(roles, lambda n: f[n][()]).items()}
    return {reason: n for reason, n in counts.items() if n}


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
