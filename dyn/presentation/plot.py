"""Pictures of a sweep file: `dyn plot`.

The variable drawn is `--var`, else the scenario's `[output] plot`, else the system's default.
Its dimensions decide the picture:
- two or more numeric dimensions: a heat map of the first two (the first sweep axis across), one
  panel per combination of the other axes (at most MAX_PANELS);
- one numeric dimension: curves against it, one per combination of the categorical axes
  (e.g. error against depth for each scheme);
- several, one of which a reference drawn beside the values lies along on a theory grid of its
  own (no `dyn_along`, a coordinate whose `dyn_axis` names that axis: mean-field branches over
  sigma): curves against that axis, one panel per combination of the other numeric axes (the
  references restricted to the panel's values);
- none: a bar per combination.
Numeric axes: evenly spaced values are drawn linear; geometric ones (depth 2^k), or uneven
positive ones spanning a decade or more (d = 2 ... 32), log; other uneven ones as evenly spaced
labelled cells. Pending points are blank. Points whose numbers are not answers yet
(:func:`dyn.engine.verdicts.unresolved`) are hatched (heat maps) or ringed (curves), each reason
in its own style and named in the legend: class probabilities where the point is horizon-limited
(more than `verdicts.HORIZON_LIMITED_SHARE` of its runs undecided), time averages where the
window is not stationary by the cap or the step error exceeds the Monte Carlo error. Curves of a
variable X with a standard error X_se in the file get error bars of one standard error.

Everything else drawn is declared in the file, never coded per system (the attributes of
:class:`dyn.core.contract.Draw`): variables whose `dyn_over` names the drawn one (the system's
references, e.g. sigma_c(beta), a closed form against time, or its single runs) are drawn over
it, restricted to each panel's values,
- `dyn_along` absent (values of the drawn variable): curves beside its curves, against the same
  axis (a theory grid lies along the axis its coordinate's `dyn_axis` names); per-run variables
  as thin steps of their first runs;
- `dyn_along` = an axis (positions on it): on a heat map with that axis, the curve of those
  positions against the other axis (a tick across each cell when indexed by that axis's own
  values); on curves against that axis, a vertical line at each position;
and the drawn variable's own `dyn_slopes` (reference slopes on log-log curves,
:mod:`dyn.presentation.marks`), `dyn_clim` (colour range) and `dyn_mark_above` ("+" on heat-map cells above it). References never
move the picture's limits along the sweep axes. :func:`figure` returns the figure unsaved.
"""
from __future__ import annotations

import itertools
import textwrap
import tomllib
from pathlib import Path

import numpy as np

from .. import systems
from ..core.contract import (ALONG_ATTR, AXIS_ATTR, CLIM_ATTR, COLOR_ATTR, LABEL_ATTR, LINESTYLE_ATTR,
                             MARK_ABOVE_ATTR, OVER_ATTR, SLOPES_ATTR)
from ..core.errors import ScenarioError
from ..engine.verdicts import HORIZON_LIMITED, HORIZON_LIMITED_SHARE, NONSTATIONARY, STEP_LIMITED
from .analysis import marks_for
from .analysis import open as open_dataset
from .marks import slope_lines

MAX_PANELS = 12
MAX_CURVES = 12
MAX_TICKS = 12
RUN = "run"  # the dimension of per-run variables (drawn as thin steps of their first runs)
TITLE_WIDTH = 70  # characters per title line
COLORBAR_WIDTH = 40  # characters per line of a colour bar's label
MAX_SETTINGS = 8  # fixed parameters named under a title
DATA_LOG_RATIO = 100.0  # positive curve values spanning more than this are drawn in log
DECADE = 10.0  # uneven positive axes spanning at least this ratio are drawn in log
# how each kind of unresolved point is drawn: hatch of a heat-map cell, ring colour on a curve
MARK_STYLES = {
    HORIZON_LIMITED: (dict(facecolor="0.8", edgecolor="0.3", hatch="///", alpha=0.7, lw=0.0),
                      "0.4", f"horizon-limited: > {HORIZON_LIMITED_SHARE:.0%} of runs undecided"),
    NONSTATIONARY: (dict(facecolor="0.85", edgecolor="0.2", hatch="\\\\", alpha=0.75, lw=0.0),
                    "0.2", "not stationary by the cap"),
    STEP_LIMITED: (dict(facecolor="none", edgecolor="red", hatch="xx", alpha=0.8, lw=0.0),
                   "red", "step error > Monte Carlo error"),
}

def choose_variable(ds, var: str | None) -> str:
    scenario = tomllib.loads(ds.attrs["scenario"])
    system = systems.get(scenario["scenario"]["system"])
    name = var or scenario["output"].get("plot") or system.default_plot
    if name not in ds.data_vars or name == "status":
        names = ", ".join(v for v in ds.data_vars if v != "status")
        raise ScenarioError("--var", f"unknown variable {name!r} (variables: {names})")
    return name


def plot(path: str | Path, out: str | Path | None = None, var: str | None = None) -> Path:
    """Draw `var` of the sweep file at `path` into a PNG (default: beside the file)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    out = Path(out) if out is not None else path.with_suffix(".png")
    fig = figure(path, var)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def figure(path: str | Path, var: str | None = None):
    """The figure of `var` (see the module doc), not saved: its axes hold what is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open_dataset(Path(path)) as ds:
        name = choose_variable(ds, var)
        da = ds[name].load()
        numeric = [d for d in da.dims if da.sizes[d] > 1 and da[d].dtype.kind in "fiu"]
        over = [ds[v].load() for v in drawn_over(ds, name)]
        against = _curve_axis(ds, over, numeric)
        field_dims = [against] if against else numeric[:2]
        # Heat maps: one panel per combination of the remaining axes. Curves: all in one panel,
        # or against a reference's axis one panel per combination of the other numeric axes.
        if against:
            panel_dims = [d for d in numeric if d != against]
        else:
            panel_dims = [d for d in da.dims if d not in field_dims] if len(field_dims) != 1 else []
        selections = _combinations(da, panel_dims)[:MAX_PANELS]
        cols = min(len(selections), 3)
        rows = -(-len(selections) // cols)
        size = (7, 5) if cols == 1 else (4.8 * cols, 3.9 * rows)
        fig, grid = plt.subplots(rows, cols, figsize=size, squeeze=False)
        marked = marks_for(ds, name)
        err = ds[f"{name}_se"].load() if f"{name}_se" in ds.data_vars else None
        for ax, selection in zip(grid.flat, selections):
            sub = da.sel(selection) if selection else da
            marks = {reason: hit.sel({k: v for k, v in selection.items() if k in hit.dims})
                     for reason, hit in marked.items()}
            drawn = False
            if len(field_dims) == 2:
                cells = _heatmap(ax, sub.transpose(*field_dims), marks)
                drawn = _over_heatmap(ax, ds, over, selection, cells)
            elif len(field_dims) == 1:
                _curves(ax, sub, field_dims[0], marks,
                        None if err is None else (err.sel(selection) if selection else err))
                drawn = _over_curves(ax, ds, over, field_dims[0], selection)
                slopes = da.attrs.get(SLOPES_ATTR)
                if slopes is not None and ax.get_xscale() == "log":
                    ax.set_yscale("log")
                    drawn |= slope_lines(ax, sub, field_dims[0], np.atleast_1d(slopes))
            else:
                _bars(ax, sub)
            if drawn:
                ax.legend(fontsize=7, framealpha=0.85)
            if selection:
                ax.set_title(", ".join(f"{k} = {_fmt(v)}" for k, v in selection.items()), fontsize=10)
        for ax in list(grid.flat)[len(selections):]:
            ax.set_visible(False)
        title = f"{ds.attrs.get('title', '').removeprefix('dyn sweep: ')}: {da.attrs.get('long_name', name)}"
        fig.suptitle("\n".join([textwrap.fill(title, TITLE_WIDTH),
                                textwrap.fill(settings(ds), int(TITLE_WIDTH * 1.2))]), fontsize=10)
        fig.tight_layout()
    return fig


def drawn_over(ds, name: str) -> list[str]:
    """The variables declared to be drawn over `name` (their dyn_over names it), in file order."""
    return [v for v, x in ds.data_vars.items() if name in str(x.attrs.get(OVER_ATTR, "")).split()]


def _axis(ds, dim: str) -> str:
    """The file axis a dimension lies along: itself, or the one its coordinate's dyn_axis names
    (a theory grid)."""
    return str(ds[dim].attrs.get(AXIS_ATTR, dim)) if dim in ds.coords else dim


def _restrict(ds, ref, selection: dict):
    """`ref` at the panel's values of the axes it lies along (on a theory grid: the nearest)."""
    for dim in ref.dims:
        axis = _axis(ds, dim)
        if axis in selection:
            ref = ref.sel({dim: selection[axis]}, method=None if dim == axis else "nearest")
    return ref


def _style(ref, default_color: str) -> dict:
    return dict(color=ref.attrs.get(COLOR_ATTR) or default_color,
                ls=ref.attrs.get(LINESTYLE_ATTR, "--"))


def _legend(ref) -> str:
    return str(ref.attrs.get(LABEL_ATTR) or ref.attrs.get("long_name", ref.name))


def _over_heatmap(ax, ds, refs, selection: dict, cells: dict) -> bool:
    """References whose values lie along one axis of the heat map, indexed by the other: their
    curve (a tick across each cell when indexed by that axis's own values). The limits stay."""
    (xdim, ydim), drawn = tuple(cells), False
    limits = ax.get_xlim(), ax.get_ylim()
    for ref in refs:
        along = ref.attrs.get(ALONG_ATTR, "")
        if along not in cells:
            continue
        other = ydim if along == xdim else xdim
        ref = _restrict(ds, ref, selection)
        index = [d for d in ref.dims if _axis(ds, d) == other]
        if len(index) != 1:
            continue
        ref = ref.transpose(index[0], ...)
        across = ref[index[0]].values.astype(float)
        at = ref.values.reshape(len(across), -1)
        if index[0] == other:  # the heat map's own cells: from edge to edge, NaN between
            values, edges = cells[other]
            hit = [np.flatnonzero(np.isclose(values, p)) for p in across]
            rows = [(k, int(h[0])) for k, h in enumerate(hit) if h.size]
            across = np.array([[edges[c], edges[c + 1], np.nan] for _, c in rows]).ravel()
            at = np.repeat(at[[k for k, _ in rows]], 3, axis=0)
        # one line: the columns of its other dims one after the other, NaN between
        gap = np.full((1, at.shape[1]), np.nan)
        at = np.vstack([at, gap]).T.ravel()[:-1]
        across = np.tile(np.append(across, np.nan), gap.shape[1])[:-1]
        xy = (at, across) if along == xdim else (across, at)
        ax.plot(*xy, lw=1.8, label=_legend(ref), **_style(ref, "white"))
        drawn = True
    ax.set_xlim(limits[0])
    ax.set_ylim(limits[1])
    return drawn


def _curve_axis(ds, refs, numeric: list[str]) -> str | None:
    """With several numeric axes, the one a reference drawn beside the values lies along on a
    theory grid of its own (no dyn_along; a coordinate whose dyn_axis names the axis, e.g. mean-
    field branches over sigma): the picture is then curves against it. None: no such reference."""
    if len(numeric) < 2:
        return None
    for ref in refs:
        if ref.attrs.get(ALONG_ATTR, ""):
            continue
        for dim in ref.dims:
            if dim in ds.coords and _axis(ds, dim) != dim and _axis(ds, dim) in numeric:
                return _axis(ds, dim)
    return None


def _over_curves(ax, ds, refs, xdim: str, selection: dict | None = None) -> bool:
    """References against `xdim`, at the panel's `selection`: curves of values beside the data's
    (per-run ones as thin steps of the first runs), or a vertical line at each position along
    `xdim`. The x limits stay."""
    xlim, drawn = ax.get_xlim(), False
    for ref in refs:
        ref = _restrict(ds, ref, selection or {})
        along = ref.attrs.get(ALONG_ATTR, "")
        if along == xdim:
            for k, v in enumerate(np.unique(ref.values[np.isfinite(ref.values)])[:MAX_CURVES]):
                ax.axvline(v, lw=1.2, label=_legend(ref) if k == 0 else None, **_style(ref, "0.2"))
                drawn = True
            continue
        index = [d for d in ref.dims if _axis(ds, d) == xdim]
        if along or len(index) != 1:
            continue
        x = ref[index[0]].values
        rows = ref.transpose(..., index[0]).values.reshape(-1, len(x))
        rows = [r for r in rows if np.isfinite(r).any()][:MAX_CURVES]
        per_run = RUN in ref.dims
        for k, row in enumerate(rows):
            label = None if k else (f"{_legend(ref)} (first {len(rows)})" if per_run else _legend(ref))
            if per_run:
                ax.step(x, row, where="post", lw=0.6, alpha=0.6, zorder=1, label=label,
                        color=ref.attrs.get(COLOR_ATTR) or "0.6")
            else:
                ax.plot(x, row, lw=1.2, label=label, **_style(ref, "black"))
            drawn = True
    ax.set_xlim(xlim)
    return drawn


def _combinations(da, dims: list[str]) -> list[dict]:
    """Every combination of coordinate values of `dims` (one empty selection when none)."""
    return [dict(zip(dims, values)) for values in
            itertools.product(*(da[d].values.tolist() for d in dims))] or [{}]


def _heatmap(ax, da, marks=None) -> dict:
    """Cells centred on the sweep values (geometric mid-points on log axes); `marks`: reason ->
    a boolean array over some of the dims, True where a cell is hatched for that reason; a "+"
    on cells above the variable's dyn_mark_above. Returns {dim: (values, cell edges)}."""
    marks = dict(marks or {})
    xdim, ydim = da.dims
    xs, ys = _scale(da[xdim].values), _scale(da[ydim].values)
    for dim, scale in ((xdim, xs), (ydim, ys)):
        if scale == "log":  # a log axis cannot show t = 0
            keep = da[dim].values > 0
            da = da.isel({dim: keep})
            marks = {r: m.isel({dim: keep}) if dim in m.dims else m for r, m in marks.items()}
    x, y = da[xdim], da[ydim]
    xe, ye = _edges(x.values, xs), _edges(y.values, ys)
    clim = da.attrs.get(CLIM_ATTR)
    mesh = ax.pcolormesh(xe, ye, da.values.T, shading="flat", cmap="viridis",
                         **({} if clim is None else dict(vmin=clim[0], vmax=clim[1])))
    _set_scale(ax, x.values, xs, "x")
    _set_scale(ax, y.values, ys, "y")
    ax.figure.colorbar(mesh, ax=ax, label=textwrap.fill(_label(da), COLORBAR_WIDTH))
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(y))
    drawn = False
    for reason, m in marks.items():
        hit = m.broadcast_like(da).transpose(xdim, ydim).values
        drawn |= _hatch_cells(ax, xe, ye, hit, reason)
    above = da.attrs.get(MARK_ABOVE_ATTR)
    if above is not None and (da.values > above).any():
        i, j = np.nonzero(da.values > above)
        ax.plot(x.values[i], y.values[j], "+", color="white", ms=6, mew=1.2,
                label=f"{da.name} > {float(above):g}")
        drawn = True
    if drawn:
        ax.legend(loc="upper left", fontsize=7, framealpha=0.9)
    return {xdim: (x.values.astype(float), xe), ydim: (y.values.astype(float), ye)}


def _hatch_cells(ax, xe, ye, hit, reason: str) -> bool:
    from matplotlib.patches import Rectangle

    style, _, label = MARK_STYLES[reason]
    for k, (i, j) in enumerate(np.argwhere(hit)):
        # the first cell carries the label, so a legend drawn later (references) lists it too
        ax.add_patch(Rectangle((xe[i], ye[j]), xe[i + 1] - xe[i], ye[j + 1] - ye[j],
                               label=label if k == 0 else None, **style))
    return bool(hit.any())


def _curves(ax, da, xdim: str, marks=None, err=None) -> None:
    """One curve per combination of the other axes, against the numeric axis `xdim` (with error
    bars of one standard error `err` when given); marked points get a ring, one colour per
    reason."""
    x = da[xdim]
    scale = _scale(x.values)
    xpos = x.values
    others = [d for d in da.dims if d != xdim]
    hits = {reason: m.broadcast_like(da) for reason, m in (marks or {}).items()}
    ringed = set()
    for selection in _combinations(da, others)[:MAX_CURVES]:
        label = ", ".join(f"{k} = {_fmt(v)}" for k, v in selection.items()) or None
        values = da.sel(selection).values
        yerr = None if err is None else err.broadcast_like(da).sel(selection).values
        ax.errorbar(xpos, values, yerr=yerr, marker="o", ms=3, capsize=2 if yerr is not None else 0,
                    label=label)
        for reason, hit in hits.items():
            on = hit.sel(selection).values
            if on.any():
                ringed.add(reason)
            ax.plot(xpos[on], values[on], "o", ms=9, mfc="none", mec=MARK_STYLES[reason][1], mew=1.5)
    for reason in sorted(ringed):
        ax.plot([], [], "o", ms=9, mfc="none", mec=MARK_STYLES[reason][1], mew=1.5,
                label=MARK_STYLES[reason][2])
    ax.set_xlabel(_label(x))
    ax.set_ylabel(_label(da))
    _set_scale(ax, x.values, scale, "x")
    finite = da.values[np.isfinite(da.values)]
    if finite.size and finite.min() > 0 and finite.max() > DATA_LOG_RATIO * finite.min():
        ax.set_yscale("log")  # errors and rates spanning decades
    if others or ringed:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def _bars(ax, da) -> None:
    """No numeric axis with more than one value: a bar per combination of the axes."""
    selections = _combinations(da, list(da.dims))
    labels = [", ".join(_fmt(v) for v in sel.values()) or str(da.name) for sel in selections]
    ax.bar(range(len(selections)), [float(da.sel(sel)) for sel in selections])
    ax.set_xticks(range(len(selections)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(_label(da))


def _is_geometric(values) -> bool:
    """Positive values with a constant ratio (and not a constant step): depth 2^k, eps 2^-k, ..."""
    values = np.asarray(values)
    if values.dtype.kind not in "fiu" or values.size < 3 or not np.all(values > 0):
        return False
    values = values.astype(float)
    steps, ratios = np.diff(values), np.diff(np.log(values))
    return not np.allclose(steps, steps[0], rtol=1e-6) and np.allclose(ratios, ratios[0], rtol=1e-6)


def _scale(values) -> str:
    """How a numeric axis is drawn: "linear" (even steps, or too few values to tell), "log"
    (geometric, or uneven positive values spanning a decade or more), else "index" (evenly
    spaced cells labelled with the values)."""
    values = np.asarray(values, dtype=float)
    if values.size >= 4 and values[0] == 0.0 and _is_geometric(values[1:]):
        return "log"  # log-spaced save times: 0, then t_min ... T (the 0 is left out of the picture)
    if values.size < 3:
        return "linear"
    steps = np.diff(values)
    if np.allclose(steps, steps[0], rtol=1e-6):
        return "linear"
    if _is_geometric(values) or (np.all(values > 0) and values.max() >= DECADE * values.min()):
        return "log"
    return "index"


def _index_map(values):
    """(forward, inverse): value <-> position, piecewise linear through (values[k], k) and
    extended linearly past both ends; a matplotlib "function" scale that draws uneven values as
    evenly spaced cells while decorations keep plotting in data coordinates."""
    v = np.asarray(values, dtype=float)
    k = np.arange(v.size, dtype=float)

    def through(x, xs, ys):
        x = np.asarray(x, dtype=float)
        inside = np.interp(x, xs, ys)
        lo = ys[0] + (x - xs[0]) * (ys[1] - ys[0]) / (xs[1] - xs[0])
        hi = ys[-1] + (x - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return np.where(x < xs[0], lo, np.where(x > xs[-1], hi, inside))

    return (lambda x: through(x, v, k)), (lambda y: through(y, k, v))


def _edges(values, scale: str) -> np.ndarray:
    """Cell boundaries around each value (len + 1), for a heat map."""
    if scale == "index":
        return _index_map(values)[1](np.arange(len(values) + 1) - 0.5)
    log = scale == "log"
    v = np.log(np.asarray(values, dtype=float)) if log else np.asarray(values, dtype=float)
    if v.size == 1:
        inner, first, last = np.array([]), v[0] - 0.5, v[0] + 0.5
    else:
        inner = (v[1:] + v[:-1]) / 2
        first, last = v[0] - (inner[0] - v[0]), v[-1] + (v[-1] - inner[-1])
    edges = np.concatenate([[first], inner, [last]])
    return np.exp(edges) if log else edges


def _set_scale(ax, values, scale: str, which: str) -> None:
    """Log or index axes get ticks at the sweep values themselves (every other when crowded)."""
    if scale == "linear":
        return
    from matplotlib.ticker import NullLocator

    values = np.asarray(values, dtype=float)
    axis = getattr(ax, f"{which}axis")
    if scale == "log":
        values = values[values > 0]
        getattr(ax, f"set_{which}scale")("log")
    else:
        getattr(ax, f"set_{which}scale")("function", functions=_index_map(values))
    if values.size <= MAX_TICKS or scale == "index":
        crowded = values.size > 6 and which == "x"
        axis.set_ticks(values, [_fmt(v) if not crowded or i % 2 == 0 else ""
                                for i, v in enumerate(values)])
        axis.set_minor_locator(NullLocator())


def settings(ds) -> str:
    """What a picture's numbers depend on besides its axes: the fixed scalar parameters that
    differ from the system's defaults (n and d always, n first) and the runs per point, from the
    scenario the file holds."""
    try:
        doc = tomllib.loads(ds.attrs["scenario"])
        fields = systems.get(ds.attrs["system"]).params
    except (KeyError, TypeError, tomllib.TOMLDecodeError):
        return ""
    fixed = sorted(((k, v) for k, v in doc.get("params", {}).items()
                    if isinstance(v, (int, float, str)) and not isinstance(v, bool)
                    and (k in ("n", "d") or k not in fields or v != fields[k].default)),
                   key=lambda kv: kv[0] != "n")
    text = ", ".join(f"{k} = {_fmt(v)}" for k, v in fixed[:MAX_SETTINGS])
    runs = doc.get("ensemble", {}).get("runs")
    return "; ".join(t for t in (text, f"{runs} runs per point" if runs else "") if t)


def _label(da) -> str:
    text = da.attrs.get("long_name", da.name)
    units = da.attrs.get("units", "")
    return f"{text} [{units}]" if units not in ("", "1") else str(text)


def _fmt(v) -> str:
    if isinstance(v, (float, np.floating)):
        return str(int(v)) if float(v).is_integer() and abs(v) < 1e7 else f"{v:.3g}"
    return str(v)
