"""Marks that systems add to `dyn plot` pictures (System.decorate): reference slopes on log-log
convergence curves. Only matplotlib axes and xarray data; no system, no scenario."""
from __future__ import annotations

import numpy as np


def slope_lines(ax, ds, var: str, slopes: dict[float, str], dim: str = "depth") -> None:
    """Dashed lines ``c N^slope`` (style per slope) through the data at the smallest `dim` value:
    the largest curve for negative slopes, the median for others. Only on a log x axis."""
    if ax.get_xscale() != "log" or dim not in ds.dims or var not in ds or ds[var].dims[0] != dim:
        return
    x = ds[dim].values.astype(float)
    first = ds[var].values.reshape(len(x), -1)[0]
    for slope, style in slopes.items():
        start = np.nanmax(first) if slope < 0 else np.nanmedian(first)
        if not np.isfinite(start) or start <= 0:
            continue
        ax.plot(x, start * (x / x[0]) ** slope, style, color="gray", lw=1, label=f"slope {slope:g}")
    ax.legend(fontsize=8)
