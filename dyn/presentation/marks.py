"""Reference slopes on log-log curves, drawn by `dyn plot` where a variable declares them (its
`dyn_slopes` attribute, :class:`dyn.core.contract.Draw`). Only matplotlib axes and xarray data; no
system, no scenario."""

from __future__ import annotations

import numpy as np

STYLES = ("--", ":", "-.")  # one per slope, in the declared order


def slope_lines(ax, da, dim: str, slopes) -> bool:
    """Grey lines ``c N^slope`` against `dim` through the data at its smallest value: the
    largest curve for negative slopes, the median for others. Only on a log x axis; the axes keep
    the data's limits (a steep slope runs out of the panel rather than stretch it). Returns
    whether any was drawn."""
    if ax.get_xscale() != "log" or dim not in da.dims:
        return False
    ax.autoscale_view()
    limits = ax.get_ylim()
    x = da[dim].values.astype(float)
    first = da.transpose(dim, ...).values.reshape(len(x), -1)[0]
    drawn = False
    for k, slope in enumerate(slopes):
        finite = first[np.isfinite(first)]
        start = (finite.max() if slope < 0 else np.median(finite)) if finite.size else np.nan
        if not np.isfinite(start) or start <= 0:
            continue
        ax.plot(x, start * (x / x[0]) ** slope, STYLES[k % len(STYLES)], color="gray", lw=1, label=f"slope {slope:g}")
        drawn = True
    if drawn:
        ax.set_ylim(limits)
    return drawn
