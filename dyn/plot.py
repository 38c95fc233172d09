"""Pictures of a sweep file: `dyn plot`.

The variable drawn is `--var`, else the scenario's `[output] plot`, else the system's default.
Its dimensions decide the picture: one -> a curve; two -> a heat map with the first sweep axis
across and the other dimension up (e.g. beta across, time up); more -> one heat map per value of
the extra leading axes (at most MAX_PANELS). Pending points are blank. A system may add its own
marks (e.g. a predicted boundary) through `System.decorate(ax, ds, var)`.
"""
from __future__ import annotations

import textwrap
import tomllib
from pathlib import Path

import numpy as np

from . import systems
from .analysis import open as open_dataset
from .errors import ScenarioError

MAX_PANELS = 12
TITLE_WIDTH = 70  # characters per title line
DATA_LOG_RATIO = 100.0  # positive curve values spanning more than this are drawn in log


def choose_variable(ds, var: str | None) -> str:
    scenario = tomllib.loads(ds.attrs["scenario"])
    system = systems.get(scenario["scenario"]["system"])
    name = var or scenario["output"].get("plot") or system.default_plot
    if name not in ds.data_vars or name == "status":
        names = ", ".join(v for v in ds.data_vars if v != "status")
        raise ScenarioError("--var", f"unknown variable {name!r} (variables: {names})")
    return name


def plot(path: str | Path, out: str | Path | None = None, var: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    out = Path(out) if out is not None else path.with_suffix(".png")
    with open_dataset(path) as ds:
        name = choose_variable(ds, var)
        da = ds[name].load()
        system = systems.get(ds.attrs["system"])
        if da.ndim <= 2:
            fig, ax = plt.subplots(figsize=(7, 5))
            axes = [ax]
            _draw(ax, da)
        else:
            lead = da.dims[0]
            panels = min(da.sizes[lead], MAX_PANELS)
            cols = min(panels, 3)
            rows = -(-panels // cols)
            fig, grid = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.8 * rows), squeeze=False)
            axes = list(grid.flat)[:panels]
            for i, ax in enumerate(axes):
                sub = da.isel({lead: i})
                while sub.ndim > 2:
                    sub = sub.isel({sub.dims[0]: 0})
                _draw(ax, sub)
                ax.set_title(f"{lead} = {_fmt(da[lead].values[i])}", fontsize=10)
            for ax in list(grid.flat)[panels:]:
                ax.set_visible(False)
        for ax in axes:
            decorate = getattr(system, "decorate", None)
            if decorate is not None:
                decorate(ax, ds, name)
        title = f"{ds.attrs.get('title', '').removeprefix('dyn sweep: ')}: {da.attrs.get('long_name', name)}"
        fig.suptitle(textwrap.fill(title, TITLE_WIDTH), fontsize=11)
        fig.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120)
        plt.close(fig)
    return out


def _draw(ax, da) -> None:
    label = _label(da)
    if da.ndim == 0:
        ax.text(0.5, 0.5, f"{label} = {float(da):.6g}", ha="center", transform=ax.transAxes)
        return
    if da.ndim == 1:
        x = da[da.dims[0]]
        ax.plot(x.values, da.values, marker="o", ms=3)
        ax.set_xlabel(_label(x))
        ax.set_ylabel(label)
        _maybe_log(ax, x.values, "x")
        finite = da.values[np.isfinite(da.values)]
        if finite.size and finite.min() > 0 and finite.max() > DATA_LOG_RATIO * finite.min():
            ax.set_yscale("log")  # errors and rates spanning decades
        ax.grid(alpha=0.3)
        return
    xdim, ydim = da.dims
    x, y = da[xdim], da[ydim]
    numeric = x.dtype.kind in "fiu" and y.dtype.kind in "fiu"
    if numeric and min(da.sizes.values()) > 1:
        mesh = ax.pcolormesh(x.values, y.values, da.values.T, shading="nearest", cmap="viridis")
        _maybe_log(ax, x.values, "x")
        _maybe_log(ax, y.values, "y")
    else:
        mesh = ax.imshow(da.values.T, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(x)), [_fmt(v) for v in x.values])
        ax.set_yticks(range(len(y)), [_fmt(v) for v in y.values])
    ax.figure.colorbar(mesh, ax=ax, label=da.name)
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))


def _maybe_log(ax, values, which: str) -> None:
    """Log scale for geometrically spaced coordinates (depth 2^k, ...), linear otherwise."""
    values = np.asarray(values, dtype=float) if np.asarray(values).dtype.kind in "fiu" else None
    if values is None or values.size < 3 or not np.all(values > 0):
        return
    steps, ratios = np.diff(values), np.diff(np.log(values))
    if not np.allclose(steps, steps[0], rtol=1e-6) and np.allclose(ratios, ratios[0], rtol=1e-6):
        getattr(ax, f"set_{which}scale")("log")


def _label(da) -> str:
    text = da.attrs.get("long_name", da.name)
    units = da.attrs.get("units", "")
    return f"{text} [{units}]" if units not in ("", "1") else str(text)


def _fmt(v) -> str:
    return f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v)
