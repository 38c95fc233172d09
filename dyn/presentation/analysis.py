"""Reading results: `dyn.open`, the text summary behind `dyn show`, the error budget behind
`dyn show --errors`, and the marks of the points whose numbers are not yet answers
(horizon-limited, non-stationary, step-limited: :mod:`dyn.engine.verdicts` finds them).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from ..core.contract import ROLE_ATTR, STATUS_NAMES, STEP_ERROR, TIME_AVERAGE
from ..core.errors import ScenarioError
from ..engine.verdicts import (HORIZON_LIMITED, MARKED_ROLES, NONSTATIONARY, WHY, undecided_variable,
                               unresolved, with_role)

MAX_LISTED = 20  # horizon-limited points listed by `dyn show`


def open(path: str | Path) -> xr.Dataset:  # noqa: A001 - mirrors xarray.open_dataset
    """Open a sweep file as an `xarray.Dataset` (sweep axes are dimensions; pending points NaN)."""
    path = Path(path)
    if not path.exists():
        raise ScenarioError("", f"no such file: {path}")
    try:
        return xr.open_dataset(path, engine="h5netcdf")
    except (OSError, ValueError) as exc:
        raise ScenarioError("", f"{path} is not a readable dyn output file: {exc}") from None


def marks_for(ds: xr.Dataset, var: str) -> dict[str, xr.DataArray]:
    """The marks that apply to variable `var` (by its role), where any point is marked."""
    role = ds[var].attrs.get(ROLE_ATTR, "")
    return {reason: hit for reason, hit in unresolved(ds).items()
            if role in MARKED_ROLES[reason] and bool(hit.any())}


def completion(ds: xr.Dataset) -> dict[str, int]:
    codes = ds["status"].values.reshape(-1)
    return {name: int(np.sum(codes == c)) for c, name in enumerate(STATUS_NAMES)}


def summary(path: str | Path) -> str:
    """Scenario, axes, variables and completion of a sweep file, as text."""
    with open(path) as ds:
        attrs = ds.attrs
        lines = [f"{path}", f"  scenario   {attrs.get('title', '?').removeprefix('dyn sweep: ')}"
                 f" (system {attrs.get('system', '?')})",
                 f"  created    {attrs.get('created', '?')}  git {attrs.get('git_commit', '?')}",
                 f"  command    {attrs.get('command', '?')}",
                 f"  hash       {attrs.get('scenario_hash', '?')[:16]}"]
        versions = json.loads(attrs.get("versions", "{}"))
        lines.append("  versions   " + ", ".join(f"{k} {v}" for k, v in versions.items()
                                                if v != "not installed"))
        lines.append("  dimensions")
        for dim, size in ds.sizes.items():
            values = ds[dim].values if dim in ds.coords else np.arange(size)
            lines.append(f"    {dim:<16} {size:>6}  {_span(values)}")
        lines.append("  variables")
        for name, var in ds.data_vars.items():
            if name == "status":
                continue
            units = f" [{var.attrs['units']}]" if var.attrs.get("units") else ""
            lines.append(f"    {name:<22} ({', '.join(var.dims)})  {var.attrs.get('long_name', '')}{units}")
        counts = completion(ds)
        total = sum(counts.values())
        done = total - counts["pending"]
        lines.append(f"  completion {done}/{total} points ("
                     + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + ")")
        for reason, hit in unresolved(ds).items():
            lines += _marked_lines(ds, reason, hit)
    return "\n".join(lines)


def _evidence(ds: xr.Dataset, reason: str, at: dict) -> str:
    """The numbers behind a mark at one point."""
    def value(name):
        return float(ds[name].sel(at).values)

    if reason == HORIZON_LIMITED:
        name = undecided_variable(ds)
        return f"{name} = {value(name):.3f}"
    if reason == NONSTATIONARY:
        parts = [f"horizon_used = {value('horizon_used'):.4g}"]
        for name in with_role(ds, TIME_AVERAGE):
            if f"{name}_drift" in ds:
                parts.append(f"{name}_drift = {value(name + '_drift'):.2g} se")
        return ", ".join(parts)
    parts = []
    for name in with_role(ds, STEP_ERROR):
        base = name.removesuffix("_step_error")
        parts.append(f"{name} = {value(name):.3g} > {base}_se = {value(base + '_se'):.3g}")
    return ", ".join(parts)


def _marked_lines(ds: xr.Dataset, reason: str, hit: xr.DataArray) -> list[str]:
    if not bool(hit.any()):
        return []
    where = np.argwhere(np.asarray(hit.values).reshape(hit.shape))
    lines = [f"  {reason} {len(where)} points ({WHY[reason]}):"]
    for index in where[:MAX_LISTED]:
        at = {dim: ds[dim].values[i] for dim, i in zip(hit.dims, index)}
        lines.append("    " + ", ".join(f"{k} = {_fmt(v)}" for k, v in at.items())
                     + f"  ({_evidence(ds, reason, at)})")
    if len(where) > MAX_LISTED:
        lines.append(f"    ... and {len(where) - MAX_LISTED} more")
    return lines


def error_report(path: str | Path) -> str:
    """The error budget of a sweep file, as text (`dyn show --errors`): for every output, where
    its Monte Carlo error, step error and horizon status come from; then, point by point, each
    value with its Monte Carlo error (standard error, or the 95% Wilson interval), its step
    error where checked, and the marks of the point."""
    from ..engine.ensemble import HORIZON_ATTR, MC_ERROR, STEP_ERROR_ATTR

    with open(path) as ds:
        axes = list(ds["status"].dims)
        primaries = [n for n, v in ds.data_vars.items() if MC_ERROR in v.attrs]
        lines = [f"{path}: error budget", "  outputs"]
        for name in primaries:
            a = ds[name].attrs
            lines += [f"    {name}", f"      Monte Carlo  {a[MC_ERROR]}",
                      f"      step         {a[STEP_ERROR_ATTR]}", f"      horizon      {a[HORIZON_ATTR]}"]
        marks = unresolved(ds)
        lines.append("  points")
        status = ds["status"].values.reshape(ds["status"].shape)
        for index in np.ndindex(*status.shape):
            at = {dim: ds[dim].values[i] for dim, i in zip(axes, index)}
            where = ", ".join(f"{k} = {_fmt(v)}" for k, v in at.items()) or "(the point)"
            flags = [r for r, hit in marks.items() if bool(hit.values[index])]
            state = STATUS_NAMES[int(status[index])]
            lines.append(f"    {where}  [{state}{'; ' + ', '.join(flags) if flags else ''}]")
            if state == "pending":
                continue
            point = ds.isel(dict(zip(axes, index)))
            for name in primaries:
                lines.append(f"      {name:<22} {_budget_line(point, name)}")
    return "\n".join(lines)


def _budget_line(point: xr.Dataset, name: str) -> str:
    """One output at one point: value and errors (for an output over its own dims, the range
    of its values and the largest standard error)."""
    v = point[name].values
    if v.ndim:
        se = point[f"{name}_se"].values if f"{name}_se" in point else None
        text = f"{np.nanmin(v):.4g} .. {np.nanmax(v):.4g} over {', '.join(point[name].dims)}"
        return text + (f", largest se {np.nanmax(se):.2g}" if se is not None and np.isfinite(se).any() else "")
    text = f"{float(v):.6g}"
    if f"{name}_se" in point:
        text += f" +- {float(point[name + '_se']):.2g} (se)"
    elif f"{name}_lo" in point:
        text += f" [{float(point[name + '_lo']):.4g}, {float(point[name + '_hi']):.4g}] (95%)"
    if f"{name}_step_error" in point:
        text += (f", step error {float(point[name + '_step_error']):.2g} "
                 f"+- {float(point[name + '_step_error_se']):.2g}")
    if f"{name}_ess" in point:
        text += f", ess {float(point[name + '_ess']):.0f}"
    return text


def _span(values: np.ndarray) -> str:
    if values.size <= 6:
        return ", ".join(map(_fmt, values))
    return f"{_fmt(values[0])}, {_fmt(values[1])}, ..., {_fmt(values[-1])}"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)
