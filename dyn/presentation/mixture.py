"""Points whose runs split between states, read back from what a sweep file holds (plot side only).

A time average X (:mod:`dyn.engine.averaging`) is marked `stationary` = 0 when its window fails
one of three checks by the cap (:mod:`dyn.engine.stationarity`): drift (the halves differ by more
than DRIFT_Z standard errors), length (fewer than MIN_EFFECTIVE effective samples per run) or
mixing (the runs disagree with each other more than their own fluctuations allow: runs in
different states, e.g. some nucleated a cluster and some did not). Its mean over runs is then the
mean of a mixture, a value of neither state. Files made since the engine writes `X_mixing` (the
runs' disagreement over its limit) say it exactly: a point that failed has split where X_mixing
> 1. Older files keep only the numbers of the first two checks (`X_drift`, `X_ess`) and the
standard error `X_se`, so there a point that failed is taken to have split when
- it passed the drift and the length checks: only the mixing check is left to have failed; or
- its runs' spread, at least what `X_se` sqrt(runs) says (`X_se` is the larger of the across-run
  and the within-run estimate), is at least SPREAD_SHARE of the span of X over the whole sweep:
  runs of one state do not differ by a sizeable part of the transition.
`dyn plot` draws such points with a marker of their own, instead of the non-stationary one.
"""

from __future__ import annotations

import tomllib

import numpy as np

from ..core.contract import ROLE_ATTR, STATIONARY, TIME_AVERAGE
from ..engine.stationarity import DRIFT_Z, MIN_EFFECTIVE

SPLIT = "runs split"  # the reason's name, beside dyn.engine.verdicts' reasons
SPREAD_SHARE = 0.15  # a spread of the runs this share of X's span is more than one state's noise


def split_points(ds, name: str):
    """Boolean DataArray over the points of the time-averaged variable `name`: True where its
    runs split between states (see the module doc); None when `name` is not a time average with
    the numbers needed, or a point has fewer than two runs."""
    if ds[name].attrs.get(ROLE_ATTR) != TIME_AVERAGE:
        return None
    averaged = [v for v, x in ds.data_vars.items() if x.attrs.get(ROLE_ATTR) == TIME_AVERAGE]
    flags = [v for v, x in ds.data_vars.items() if x.attrs.get(ROLE_ATTR) == STATIONARY]
    needed = [f"{v}_{part}" for v in averaged for part in ("drift", "ess", "se")]
    if not flags or any(n not in ds for n in needed):
        return None
    try:
        runs = int(tomllib.loads(ds.attrs["scenario"])["ensemble"]["runs"])
    except (KeyError, TypeError, ValueError, tomllib.TOMLDecodeError):
        return None
    if runs < 2:
        return None
    failed = np.logical_or.reduce([ds[f].values == 0 for f in flags])
    if all(f"{v}_mixing" in ds for v in averaged):  # the verdict itself
        with np.errstate(invalid="ignore"):
            unmixed = np.logical_or.reduce([ds[f"{v}_mixing"].values > 1 for v in averaged])
        return ds[flags[0]].copy(data=failed & unmixed).rename(SPLIT)
    only_mixing = np.ones_like(failed, dtype=bool)
    wide = np.zeros_like(failed, dtype=bool)
    with np.errstate(invalid="ignore"):
        for v in averaged:
            values = ds[v].values
            drift, ess, se = (ds[f"{v}_{part}"].values for part in ("drift", "ess", "se"))
            only_mixing &= np.isfinite(values) & (np.abs(drift) <= DRIFT_Z) & (ess / runs >= MIN_EFFECTIVE)
            finite = values[np.isfinite(values)]
            if finite.size > 1 and np.ptp(finite) > 0:
                wide |= se * np.sqrt(runs) >= SPREAD_SHARE * np.ptp(finite)
    return ds[flags[0]].copy(data=failed & (only_mixing | wide)).rename(SPLIT)
