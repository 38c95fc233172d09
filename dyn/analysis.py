"""Reading results: `dyn.open` and the text summary behind `dyn show`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from .errors import ScenarioError
from .systems.base import ROLE_ATTR, STATUS_NAMES, UNDECIDED

# A point whose share of runs left undecided (by the horizon or the cap) exceeds this is
# "horizon-limited": its class probabilities are not the answer, and plots and summaries say so.
HORIZON_LIMITED_SHARE = 0.02
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
        lines += _horizon_limited_lines(ds)
    return "\n".join(lines)


def _horizon_limited_lines(ds: xr.Dataset) -> list[str]:
    limited = horizon_limited(ds)
    if limited is None or not bool(limited.any()):
        return []
    name = undecided_variable(ds)
    where = np.argwhere(np.asarray(limited.values).reshape(limited.shape))
    lines = [f"  horizon-limited {len(where)} points with more than "
             f"{HORIZON_LIMITED_SHARE:.0%} of runs undecided ({name}); raise the horizon there:"]
    for index in where[:MAX_LISTED]:
        at = {dim: ds[dim].values[i] for dim, i in zip(limited.dims, index)}
        lines.append("    " + ", ".join(f"{k} = {_fmt(v)}" for k, v in at.items())
                     + f"  ({name} = {float(ds[name].values[tuple(index)]):.3f})")
    if len(where) > MAX_LISTED:
        lines.append(f"    ... and {len(where) - MAX_LISTED} more")
    return lines


def count_horizon_limited(path: str | Path) -> int:
    """Number of horizon-limited points in a sweep file (0 when the system classifies nothing)."""
    with open(path) as ds:
        limited = horizon_limited(ds)
        return 0 if limited is None else int(limited.sum())


def _span(values: np.ndarray) -> str:
    if values.size <= 6:
        return ", ".join(map(_fmt, values))
    return f"{_fmt(values[0])}, {_fmt(values[1])}, ..., {_fmt(values[-1])}"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)
