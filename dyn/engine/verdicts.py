"""The points whose numbers are not yet answers, read from a sweep file (`dyn run` reports them,
`dyn show` lists them and `dyn plot` marks them: :mod:`dyn.presentation.analysis`):

- horizon-limited: more than HORIZON_LIMITED_SHARE of the runs ended undecided (a variable of
  role "undecided");
- non-stationary: a time average whose window failed its stationarity tests by the cap
  (`stationary` = 0, :mod:`dyn.engine.averaging`);
- step-limited: a step error (`X_step_error`, :mod:`dyn.engine.stepcheck`) larger than the Monte
  Carlo error `X_se` by more than two of its own standard errors.
"""
from __future__ import annotations

from pathlib import Path

import xarray as xr

from ..core.contract import PROBABILITY, ROLE_ATTR, STATIONARY, STEP_ERROR, TIME_AVERAGE, UNDECIDED
from .stepcheck import step_limited

# A point whose share of runs left undecided (by the horizon or the cap) exceeds this is
# "horizon-limited": its class probabilities are not the answer, and plots and summaries say so.
HORIZON_LIMITED_SHARE = 0.02


def undecided_variable(ds: xr.Dataset) -> str | None:
    """The variable holding the share of undecided runs per point, if the system has one."""
    names = [n for n, v in ds.data_vars.items() if v.attrs.get(ROLE_ATTR) == UNDECIDED]
    return names[0] if names else None


def horizon_limited(ds: xr.Dataset) -> xr.DataArray | None:
    """Boolean per point: more than HORIZON_LIMITED_SHARE of its runs ended undecided
    (None when the system classifies no end state). Pending points are False."""
    name = undecided_variable(ds)
    if name is None:
        return None
    share = ds[name]
    return (share > HORIZON_LIMITED_SHARE).fillna(False).rename("horizon_limited")


HORIZON_LIMITED, NONSTATIONARY, STEP_LIMITED = "horizon-limited", "non-stationary", "step-limited"
# which variables each mark applies to (by role)
MARKED_ROLES = {HORIZON_LIMITED: (PROBABILITY, UNDECIDED), NONSTATIONARY: (TIME_AVERAGE,),
                STEP_LIMITED: (TIME_AVERAGE,)}
WHY = {HORIZON_LIMITED: f"more than {HORIZON_LIMITED_SHARE:.0%} of runs undecided: raise the horizon",
       NONSTATIONARY: "time average not stationary by horizon_cap: raise it (or the horizon)",
       STEP_LIMITED: "step error above the Monte Carlo error: lower dt (or step_tol)"}


def with_role(ds: xr.Dataset, role: str) -> list[str]:
    """The variables of `ds` whose role is `role`."""
    return [n for n, v in ds.data_vars.items() if v.attrs.get(ROLE_ATTR) == role]


def unresolved(ds: xr.Dataset) -> dict[str, xr.DataArray]:
    """Boolean per point for each reason a point's numbers are not answers yet (only the
    reasons the file can have; pending points are False)."""
    found = {}
    limited = horizon_limited(ds)
    if limited is not None:
        found[HORIZON_LIMITED] = limited
    for name in with_role(ds, STATIONARY):
        found[NONSTATIONARY] = (ds[name] == 0).rename(NONSTATIONARY)
    steps = []
    for name in with_role(ds, STEP_ERROR):
        base = name.removesuffix("_step_error")
        hit = step_limited(ds[name], ds[f"{name}_se"], ds[f"{base}_se"])
        steps.append(xr.DataArray(hit, dims=ds[name].dims, coords=ds[name].coords))
    if steps:
        found[STEP_LIMITED] = xr.concat(steps, "output").any("output").rename(STEP_LIMITED)
    return found


def count_unresolved(path: str | Path) -> dict[str, int]:
    """Number of points marked for each reason (only the reasons with marked points)."""
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        counts = {reason: int(hit.sum()) for reason, hit in unresolved(ds).items()}
    return {reason: n for reason, n in counts.items() if n}
