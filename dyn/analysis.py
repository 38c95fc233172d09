"""Reading results: `dyn.open` and the text summary behind `dyn show`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import xarray as xr

from .errors import ScenarioError
from .systems.base import STATUS_NAMES


def open(path: str | Path) -> xr.Dataset:  # noqa: A001 - mirrors xarray.open_dataset
    """Open a sweep file as an `xarray.Dataset` (sweep axes are dimensions; pending points NaN)."""
    path = Path(path)
    if not path.exists():
        raise ScenarioError("", f"no such file: {path}")
    try:
        return xr.open_dataset(path, engine="h5netcdf")
    except (OSError, ValueError) as exc:
        raise ScenarioError("", f"{path} is not a readable dyn output file: {exc}") from None


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
    return "\n".join(lines)


def _span(values: np.ndarray) -> str:
    if values.size <= 6:
        return ", ".join(map(_fmt, values))
    return f"{_fmt(values[0])}, {_fmt(values[1])}, ..., {_fmt(values[-1])}"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)
