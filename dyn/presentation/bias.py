r"""The weak error of an output along a sweep axis: `dyn compare --observable` (and :func:`compare_bias`).

`dyn compare` without `--observable` measures the strong error, the distance of the paths. A
stationary bias (the step's error on a time average, e.g. r_stationary against dt) is a weak
error: that of an observable's expectation, not of the paths. Given a sweep file that keeps every
run's value of the output X (`[output] per_run = ["X"]`: X_per_run) and a reference point (a value
of the axis `along`, and, with `reference_at`, values of other axes: e.g. dt = 0.0125 and
method = stochastic_heun), each point is paired run by run with the reference point at the same
other coordinates:

    bias    = (1/R) sum_r (v_r - v_r^ref)                   (v_r: run r's X_per_run)
    bias_se = std_r(v_r - v_r^ref) / sqrt(R)                (ddof = 1)

Pairing needs common random numbers: every axis that tells a point from its reference must be
in `[ensemble] common` (the runs then share their start and their Brownian path: with dt common,
a step h sums h / h_min increments of the finest step). The paired differences then carry a
noise far below that of either value, so a bias much smaller than the Monte Carlo error of X
itself is resolved. A time average must have been taken over the same window at both points
(a fixed `integrator.burn_in`, and `horizon_cap` = horizon so that no point is extended), else
the file is refused. Against a numeric axis (`--against dt`) log|bias| is fitted by
:func:`dyn.presentation.comparison.fit_rate`, the same rates, lines and picture as the strong
error (`error` = |bias|, error bars bias_se): a weak order p shows as the slope p.

Only the file's data are read: no code the file names is imported or run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ..core.contract import OK
from ..core.errors import ScenarioError
from ..engine.reductions import PER_RUN_SUFFIX
from .analysis import open as open_dataset, scenario_of
from .comparison import _match

WINDOW = ("burn_in_used", "horizon_used")  # a time average's window, per point


def parse_at(items) -> dict[str, str]:
    """`--reference-at AXIS=VALUE` (repeated) as {axis: value text}."""
    found = {}
    for item in items or ():
        axis, sep, value = str(item).partition("=")
        if not sep or not axis.strip() or not value.strip():
            raise ScenarioError("--reference-at", f"takes AXIS=VALUE (e.g. method=stochastic_heun), got {item!r}")
        found[axis.strip()] = value.strip()
    return found


def compare_bias(path: str | Path, along: str, reference, observable: str, reference_at=None) -> xr.Dataset:
    """The bias of `observable` at every point against the reference point (module doc), as a
    Dataset with `difference` (..., run), `bias`, `bias_se`, `error` (= |bias|, what the rates
    fit), `runs` (the pairs counted) and `status` (the point's, else its reference's).

    Raises ScenarioError (one line) when `along` or an axis of `reference_at` is not a sweep axis
    or not common, a reference value is not one of its axis' values, the file keeps no per-run
    values of `observable`, or a point's time-average window differs from its reference's."""
    at = dict(reference_at or {})
    if along in at:
        raise ScenarioError("--reference-at", f"fixes another axis than --along ({along} is given by --reference)")
    with open_dataset(path) as ds:
        doc = scenario_of(ds)
        fixed = _reference_point(ds, doc, path, {along: reference, **at})
        values = _per_run(ds, doc, path, observable)
        status = ds["status"].load()
        windows = {name: ds[name].load() for name in WINDOW if name in ds}
        from .words import settings

        settings_text = settings(ds)
    result = paired_bias(values, status, fixed, windows, str(path))
    where = point_text(values, fixed)
    result["difference"].attrs["long_name"] = f"{observable} minus its value at {where}, run by run"
    result["bias"].attrs["long_name"] = f"bias of {observable} against {where} (mean over paired runs)"
    result["error"].attrs["long_name"] = f"|bias| of {observable} against {where}"
    result.attrs.update(
        along=along,
        reference=str(values[along].values[fixed[along]]),
        reference_point=where,
        observable=observable,
        statistic="|bias|",
        source=str(path),
        settings=settings_text,
    )
    return result


def paired_bias(
    values: xr.DataArray, status: xr.DataArray, fixed: dict[str, int], windows=None, source=""
) -> xr.Dataset:
    """The bias of per-run `values` (..., run) against the point `fixed` ({axis: index}), pair by
    pair (module doc): a pair counts where both points are ok (`status` 1) and not at the
    reference itself; `windows` ({name: per-point window bound}) must agree within each pair."""
    for name, window in (windows or {}).items():
        _check_window(window, window.isel(fixed, drop=True), name, source)
    diff = values - values.isel(fixed, drop=True)
    pair = xr.where(status != OK, status, status.isel(fixed, drop=True)).astype(status.dtype)
    diff = diff.where(pair == OK)
    itself = xr.DataArray(True)
    for axis, i in fixed.items():
        itself = itself & xr.DataArray(np.arange(values.sizes[axis]) == i, dims=axis, coords={axis: values[axis]})
    return _summary(diff.where(~itself), pair)  # the reference against itself: no bias to fit


def point_text(values: xr.DataArray, fixed: dict[str, int]) -> str:
    """The reference point in words: `dt = 0.0125, method = stochastic_heun`."""
    return ", ".join(f"{axis} = {values[axis].values[i]}" for axis, i in fixed.items())


def _reference_point(ds: xr.Dataset, doc: dict, path, wanted: dict) -> dict[str, int]:
    """{axis: index} of the reference point: each axis a common sweep axis, each value one of its."""
    axes = list(doc.get("sweep", {}))
    common = doc.get("ensemble", {}).get("common", [])
    fixed = {}
    for axis, value in wanted.items():
        flag = "--along" if not fixed else "--reference-at"
        if axis not in axes:
            raise ScenarioError(flag, f"{axis!r} is not a sweep axis of {path} (axes: {', '.join(axes) or 'none'})")
        if axis not in common:
            raise ScenarioError(
                flag,
                f"the runs of {path} do not share random numbers along {axis}: "
                f"rerun with {axis} in ensemble.common (e.g. --set 'ensemble.common=[\"{axis}\"]')",
            )
        match = _match(ds[axis].values, value)
        if match is None:
            raise ScenarioError(
                "--reference" if not fixed else "--reference-at",
                f"{value!r} is not a value of {axis} (values: {', '.join(map(str, ds[axis].values))})",
            )
        fixed[axis] = int(np.flatnonzero(ds[axis].values == match)[0])  # by position (bool axes)
    return fixed


def _per_run(ds: xr.Dataset, doc: dict, path, observable: str) -> xr.DataArray:
    """Every run's value of `observable` (X_per_run), or one line saying why there is none."""
    name = f"{observable}{PER_RUN_SUFFIX}"
    if name in ds:
        return ds[name].load()
    kept = sorted(v[: -len(PER_RUN_SUFFIX)] for v in ds.data_vars if str(v).endswith(PER_RUN_SUFFIX))
    if observable not in ds:
        raise ScenarioError(
            "--observable",
            f"{path} has no output {observable!r} (outputs kept per run: {', '.join(kept) or 'none'})",
        )
    raise ScenarioError(
        "--observable",
        f"{path} keeps no per-run values of {observable}: rerun with --set 'output.per_run=[\"{observable}\"]'",
    )


def _check_window(window: xr.DataArray, ref: xr.DataArray, name: str, path) -> None:
    """A time average is compared with its reference only over the same window."""
    window, ref = xr.broadcast(window, ref)  # by name: the reference lacks the fixed axes
    a, b = window.values, ref.transpose(*window.dims).values
    apart = np.isfinite(a) & np.isfinite(b) & ~np.isclose(a, b, rtol=1e-12, atol=0)
    if bool(apart.any()):
        raise ScenarioError(
            "--observable",
            f"the time averages of {path} were taken over different windows ({name} differs "
            "between a point and its reference): set integrator.burn_in to a number and "
            "integrator.horizon_cap = integrator.horizon",
        )


def _summary(diff: xr.DataArray, pair: xr.DataArray) -> xr.Dataset:
    """The paired differences' mean, standard error and count over runs (module doc)."""
    runs = diff.count("run")
    bias = diff.mean("run")
    se = diff.std("run", ddof=1) / np.sqrt(runs)
    return xr.Dataset(
        {
            "difference": diff.assign_attrs(long_name="value minus the reference's, run by run"),
            "bias": bias.assign_attrs(long_name="bias: mean over runs of the paired differences"),
            "bias_se": se.where(runs > 1).assign_attrs(long_name="standard error of the bias (paired runs)"),
            "error": np.abs(bias).assign_attrs(long_name="|bias|"),
            "runs": runs.assign_attrs(long_name="pairs counted"),
            "status": pair.assign_attrs(
                long_name="status of the point, else of its reference (1 ok; 2 diverged, 3 failed: no bias)"
            ),
        }
    )


def table(result: xr.Dataset) -> str:
    """What `dyn compare --observable` prints: the bias and its standard error at every point."""
    return result[["bias", "bias_se", "runs"]].to_dataframe().to_string()
