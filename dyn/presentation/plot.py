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
labelled cells. Pending points are blank. Points that diverged or failed hold no value
(`dyn.open` reads NaN there, whatever an older file holds): hatched on heat maps, marked at the
bottom of the panel on curves and bars, "diverged" / "failed" in the legend. Infinite values are
not drawn, and the title says how many there are. Points whose numbers are not answers yet
(:func:`dyn.engine.verdicts.unresolved`) are hatched (heat maps) or ringed (curves), each reason
in its own style and named in the legend: class probabilities where the point is horizon-limited
(more than `verdicts.HORIZON_LIMITED_SHARE` of its runs undecided), time averages where the
window is not stationary by the cap or the step error exceeds the Monte Carlo error; a time
average whose runs split between states (:mod:`dyn.presentation.mixture`) gets a marker of its
own. Curves (and bars) of a variable X get its Monte Carlo error: one standard error where the file
holds X_se, the 95% Wilson interval where it holds X_lo and X_hi; as bars, or as a band on
curves of more than BAND_POINTS points; the legend says which. Heat maps show it as dots: a dot
on every cell whose error (the standard error, or half the Wilson interval) exceeds
`words.ERROR_SHARE` of the panel's colour range (its colour is not to be read closer
than that); the legend says so whenever the file holds the error, dots drawn or not.

Everything else drawn is declared in the file, never coded per system (the attributes of
:class:`dyn.core.contract.Draw`): variables whose `dyn_over` names the drawn one (the system's
references, e.g. sigma_c(beta), a closed form against time, or its single runs) are drawn over
it, restricted to each panel's values,
- `dyn_along` absent (values of the drawn variable): curves beside its curves, against the same
  axis (a theory grid lies along the axis its coordinate's `dyn_axis` names), drawn only over the
  range of the data; per-run variables as thin steps of their first runs;
- `dyn_along` = an axis (positions on it): on a heat map with that axis, the curve of those
  positions against the other axis (a tick across each cell when indexed by that axis's own
  values); on curves against that axis, a vertical line at each position;
and the drawn variable's own `dyn_slopes` (reference slopes on log-log curves,
:mod:`dyn.presentation.marks`), `dyn_clim` (colour range) and `dyn_mark_above` ("+" on heat-map
cells above it). References never move the picture's limits along the sweep axes; NaN in a
reference (where it has no value) leaves a gap, never a joining segment; each further reference
on the same axes is drawn thinner and on top of the one before, with a dark rim where it runs
along one (on heat maps), so that curves that coincide (sigma_c and the fold) both stay visible.

Words: axis and colour-bar labels are the variables' `long_name` (and `units` unless "1"); the
title names the scenario, the variable, and the settings the numbers depend on (:func:`settings`:
n, d, the other fixed parameters away from their defaults, the runs per point), wrapped to the
figure's width; one legend for the whole figure sits below the panels, outside the data.

Styles (`dyn plot --style`): "default" (PNG, about 7 in wide) and "paper" (vector PDF or SVG,
chosen by the output's suffix: a single panel 3.4 in wide for one column of a two-column paper,
several panels 7 in wide for both columns, 8-9 pt serif text with embedded TrueType fonts).
:func:`figure` returns the figure unsaved.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np

from ..core.contract import (
    ALONG_ATTR,
    AXIS_ATTR,
    CLIM_ATTR,
    COLOR_ATTR,
    LABEL_ATTR,
    LINESTYLE_ATTR,
    MARK_ABOVE_ATTR,
    OVER_ATTR,
    SIGNED_ATTR,
    SLOPES_ATTR,
)
from ..core.errors import ScenarioError
from ..engine.verdicts import NONSTATIONARY
from . import facts, profiles, slicing
from .analysis import UNMASKED, marks_for, open as open_dataset, point_marks, scenario_of
from .marks import slope_lines
from .mixture import SPLIT, split_points
from .styles import MARK_STYLES, NO_VALUE, output_path, save, styled
from .words import (
    DOT,
    ERROR_SHARE,
    axis_label,
    chars_in,
    error_legend,
    figure_legend,
    fit_height,
    settings,
    value_text,
    wrap_text,
)

MAX_PANELS = 12
MAX_CURVES = 12
MAX_TICKS = 12
RUN = "run"  # the dimension of per-run variables (drawn as thin steps of their first runs)
MAX_COLORBAR_CHARS = 40  # characters per line of a colour bar's label, at most
DATA_LOG_RATIO = 100.0  # positive curve values spanning more than this are drawn in log
DECADE = 10.0  # uneven positive axes spanning at least this ratio are drawn in log
BAND_POINTS = 25  # curves with more points get their errors as a band: bars would hide the curve
REF_WIDTHS = (1.2, 0.8, 0.6)  # the k-th reference on a panel, in units of lines.linewidth


def drawable(ds) -> list[str]:
    """The variables `dyn plot` can draw: numbers, not the engine's per-point bookkeeping (status,
    message, library versions, checksums) nor the saved states (`dyn plot --tokens`)."""
    return [v for v, x in ds.data_vars.items() if x.dtype.kind in "fiu" and v not in UNMASKED]


def _default_plot(ds, scenario: dict, trust_model: bool = False) -> str:
    """The system's default plot as the file records it (:mod:`.facts`: no code the file names
    is imported unless `trust_model`); for a file that records none, the first drawable
    variable."""
    return facts.default_plot(ds, scenario, trust_model) or (drawable(ds) or [""])[0]


def choose_variable(ds, var: str | None, trust_model: bool = False) -> str:
    scenario = scenario_of(ds)
    name = var or scenario.get("output", {}).get("plot") or _default_plot(ds, scenario, trust_model)
    names = drawable(ds)
    if name not in names:
        what = (
            "the saved states: draw them with --tokens"
            if name == "trajectory"
            else "not a number per point"
            if name in ds.data_vars
            else "unknown variable"
        )
        raise ScenarioError("--var", f"{name!r}: {what} (variables: {', '.join(names)})")
    return name


def plot(
    path: str | Path,
    out: str | Path | None = None,
    var: str | None = None,
    style: str = "default",
    sel: list[str] | tuple[str, ...] = (),
    log: bool = False,
    hue: str | None = None,
    trust_model: bool = False,
) -> Path:
    """Draw `var` of the sweep file at `path`, cut at `sel` ("AXIS=VALUE" each), on a log scale
    with `log`, one curve per value of the axis `hue` on each panel when given. Default output:
    beside the file, NAME.png for the scenario's own picture and NAME_VAR.png for another
    variable's (so that it never replaces the scenario's picture); see :func:`output_path` for
    the paper style. `trust_model`: what the file does not record of its system may be read
    from the model's module, loaded when its sha256 is the recorded one
    (:func:`dyn.presentation.facts.trusted_system`); otherwise no code the file names runs."""
    path = Path(path)
    beside = path if var is None else path.with_name(f"{path.stem}_{var}{path.suffix}")
    out = output_path(beside, out, style)
    with styled(style) as look:
        return save(figure(path, var, style, sel, log, hue, trust_model), out, look.dpi)


def figure(
    path: str | Path,
    var: str | None = None,
    style: str = "default",
    sel: list[str] | tuple[str, ...] = (),
    log: bool = False,
    hue: str | None = None,
    trust_model: bool = False,
):
    """The figure of `var` (see the module doc) in `style`, not saved: its axes hold what is
    drawn, `fig.legends` its one legend. `sel`: "AXIS=VALUE" cuts of the file first
    (:mod:`.slicing`); `log`: the values on a log scale (heat maps' colours, curves' y); `hue`:
    an axis drawn as one curve per value (a legend entry each, with its error band or bars)
    against the first other numeric axis, instead of a heat map or panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with styled(style) as look, open_dataset(Path(path)) as whole:
        name = choose_variable(whole, var, trust_model)
        ds, chosen = slicing.select(whole, sel)
        if profiles.is_profile(ds, name):  # curves against its own dimension (Draw.profile)
            return profiles.figure(ds, name, look, error_bounds, slicing.words(chosen), trust_model)
        da, infinite = _finite(ds[name].load())
        numeric = [d for d in da.dims if da.sizes[d] > 1 and da[d].dtype.kind in "fiu"]
        over = [ds[v].load() for v in drawn_over(ds, name)]
        against = _curve_axis(ds, over, numeric)
        if hue is not None:
            against = _hue_axis(da, name, hue, against, numeric)
        field_dims = [against] if against else numeric[:2]
        # Heat maps: one panel per combination of the remaining axes. Curves: all in one panel,
        # or against a reference's axis one panel per combination of the other numeric axes
        # (the hue axis excepted: its values are the curves of each panel).
        if against:
            panel_dims = [d for d in numeric if d not in (against, hue)]
        else:
            panel_dims = [d for d in da.dims if d not in field_dims] if len(field_dims) != 1 else []
        every = _combinations(da, panel_dims)
        selections = every[:MAX_PANELS]
        left_out = _left_out(da, panel_dims, every, selections)
        if len(field_dims) == 1:  # curves: one per combination of the other axes, at most 12
            others = [d for d in da.dims if d not in field_dims and d not in panel_dims]
            curves = _combinations(da, others)
            left_out = "; ".join(
                t for t in (left_out, _left_out(da, others, curves, curves[:MAX_CURVES], "curves")) if t
            )
        colours = _colour_scale(da, log) if len(field_dims) == 2 else None  # one for every panel
        cols = min(len(selections), 3)
        rows = -(-len(selections) // cols)
        if len(selections) == 1:
            width, height = look.single
        else:
            width = look.width or look.panel[0] * cols
            height = look.panel[1] * rows
        # at the dpi it is saved with: text is measured (to fit the legend) as it will be drawn
        fig, grid = plt.subplots(rows, cols, figsize=(width, height), squeeze=False, layout="constrained", dpi=look.dpi)
        marked = _marks(ds, name)
        bounds = error_bounds(ds, name)
        if bounds is not None:  # an infinite bound is no error bar
            bounds = (*(_finite(b)[0] for b in bounds[:2]), bounds[2])
        bar_chars = chars_in(height / rows, "axes.labelsize")
        errors = set()  # how errors were drawn: "bars", "band"
        for ax, selection in zip(grid.flat, selections, strict=False):
            sub = da.sel(selection) if selection else da
            marks = {
                reason: hit.sel({k: v for k, v in selection.items() if k in hit.dims}) for reason, hit in marked.items()
            }
            panel_bounds = (
                None
                if bounds is None
                else tuple(b.sel({k: v for k, v in selection.items() if k in b.dims}) for b in bounds[:2])
            )
            if len(field_dims) == 2:
                spread = None if panel_bounds is None else (panel_bounds[1] - panel_bounds[0]) / 2
                cells = _heatmap(ax, sub.transpose(*field_dims), marks, bar_chars, spread, colours)
                if spread is not None and not log and np.isfinite(spread.values).any():
                    errors.add("dots")  # the legend says what the dots are, drawn or not
                _over_heatmap(ax, ds, over, selection, cells)
                if colours["signed"]:  # zero is white on a diverging map: white marks get a rim
                    _rim_light_lines(ax)
            elif len(field_dims) == 1:
                errors |= _curves(ax, sub, field_dims[0], marks, panel_bounds)
                _over_curves(ax, ds, over, field_dims[0], selection)
                slopes = da.attrs.get(SLOPES_ATTR)
                if slopes is not None and ax.get_xscale() == "log":
                    ax.set_yscale("log")
                    slope_lines(ax, sub, field_dims[0], np.atleast_1d(slopes))
                if log:
                    ax.set_yscale("log")
            else:
                errors |= _bars(ax, sub, panel_bounds, marks)
                if log:
                    ax.set_yscale("log")
            if selection:
                ax.set_title(", ".join(f"{k} = {value_text(v)}" for k, v in selection.items()))
        for ax in list(grid.flat)[len(selections) :]:
            ax.set_visible(False)
        for ax in list(grid.flat)[: len(selections)]:  # long labels wrap to the panel's size
            share = 0.8 if len(field_dims) == 2 else 1.0  # a colour bar takes the rest
            ax.set_xlabel(wrap_text(ax.get_xlabel(), chars_in(share * width / cols, "axes.labelsize")))
            ax.set_ylabel(wrap_text(ax.get_ylabel(), chars_in(height / rows, "axes.labelsize")))
        long_name = str(da.attrs.get("long_name", name))
        head = f"{ds.attrs.get('title', '').removeprefix('dyn sweep: ')}: {long_name}"
        named = _named_values(ds, long_name, settings(ds))
        if named:
            head += f" ({named})"
        if chosen:
            head += f", at {slicing.words(chosen)}"
        chars = chars_in(width, "figure.titlesize")
        lost = (
            f"{infinite} of {da.size} values {'is' if infinite == 1 else 'are'} infinite: not drawn" if infinite else ""
        )
        notes = (head, settings(ds, trust_model), lost, left_out, _colour_note(colours))
        title = fig.suptitle("\n".join(wrap_text(t, chars) for t in notes if t))
        notes = [error_legend(kind, bounds[2]) for kind in sorted(errors)] if bounds else []
        legend = figure_legend(fig, list(grid.flat)[: len(selections)], notes)
        fit_height(fig, width, height, [title, legend])
    return fig


def _finite(da):
    """`da` with its infinite values made NaN (not drawn), and how many there were."""
    values = np.asarray(da.values)
    if values.dtype.kind != "f":
        return da, 0
    infinite = np.isinf(values)
    if not infinite.any():
        return da, 0
    return da.copy(data=np.where(infinite, np.nan, values)), int(infinite.sum())


def _marks(ds, name: str) -> dict:
    """The marks of `name` (reason -> where), with the points whose runs split between states
    taken out of the non-stationary ones and marked for that reason instead, and the points
    that hold no value (diverged, failed: :func:`dyn.presentation.analysis.point_marks`)."""
    marked = marks_for(ds, name)
    split = split_points(ds, name)
    if split is not None and bool(split.any()):
        if NONSTATIONARY in marked:
            rest = marked[NONSTATIONARY] & ~split
            if bool(rest.any()):
                marked[NONSTATIONARY] = rest
            else:
                del marked[NONSTATIONARY]
        marked[SPLIT] = split
    marked.update(point_marks(ds, name))
    return marked


def error_bounds(ds, name: str):
    """(lower, upper, words) of the Monte Carlo error of `name` from the file: value -+ one
    standard error (`name_se`), or the 95% Wilson interval (`name_lo`, `name_hi`); None if
    neither is there."""
    da = ds[name].load()
    if f"{name}_se" in ds.data_vars:
        se = ds[f"{name}_se"].load()
        return da - se, da + se, "one standard error"
    if f"{name}_lo" in ds.data_vars and f"{name}_hi" in ds.data_vars:
        return ds[f"{name}_lo"].load(), ds[f"{name}_hi"].load(), "95% Wilson interval"
    return None


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


def _style(ref, default_color: str, k: int) -> dict:
    """Colour and line style of the k-th reference drawn on a panel: thinner than the one before
    and above it, so that references which coincide are all seen."""
    import matplotlib

    width = REF_WIDTHS[min(k, len(REF_WIDTHS) - 1)] * matplotlib.rcParams["lines.linewidth"]
    return dict(color=ref.attrs.get(COLOR_ATTR) or default_color, ls=ref.attrs.get(LINESTYLE_ATTR, "--"), lw=width)


def _legend(ref) -> str:
    return str(ref.attrs.get(LABEL_ATTR) or ref.attrs.get("long_name", ref.name))


def _over_heatmap(ax, ds, refs, selection: dict, cells: dict) -> bool:
    """References whose values lie along one axis of the heat map, indexed by the other: their
    curve (a tick across each cell when indexed by that axis's own values). The limits stay."""
    (xdim, ydim), drawn, placed = tuple(cells), 0, []
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
        # one line: the columns of its other dims one after the other, NaN between (a NaN in the
        # reference, where it has no value, leaves a gap too)
        gap = np.full((1, at.shape[1]), np.nan)
        at = np.vstack([at, gap]).T.ravel()[:-1]
        across = np.tile(np.append(across, np.nan), gap.shape[1])[:-1]
        xy = (at, across) if along == xdim else (across, at)
        style = _style(ref, "white", drawn)
        if _meets(ax, placed, xy):  # along another reference: a dark rim keeps the two apart
            from matplotlib import patheffects

            style["path_effects"] = [patheffects.withStroke(linewidth=style["lw"] + 1.6, foreground="0.1")]
        ax.plot(*xy, label=_legend(ref), zorder=3 + drawn, **style)
        placed.append(xy)
        drawn += 1
    ax.set_xlim(limits[0])
    ax.set_ylim(limits[1])
    return bool(drawn)


def _rim_light_lines(ax) -> None:
    """A dark rim on the near-white lines and marks of a panel (references, the "+" marks),
    which a diverging colour map's white middle would hide."""
    from matplotlib import patheffects
    from matplotlib.colors import to_rgb

    for line in ax.lines:
        colours = [line.get_color(), line.get_markeredgecolor()]
        if any(c not in (None, "none") and min(to_rgb(c)) > 0.85 for c in colours) and not line.get_path_effects():
            line.set_path_effects([patheffects.withStroke(linewidth=line.get_linewidth() + 1.6, foreground="0.1")])


def _meets(ax, placed: list, xy, near: float = 0.015, share: float = 0.1) -> bool:
    """Whether the curve `xy` runs along one already `placed`: at least `share` of its points
    within `near` (a fraction of the axes) of a point of theirs."""
    if not placed:
        return False

    def fractions(x, y):
        points = np.column_stack([np.asarray(x, dtype=float), np.asarray(y, dtype=float)])
        points = points[np.isfinite(points).all(axis=1)]
        if not len(points):
            return points
        return ax.transAxes.inverted().transform(ax.transData.transform(points))

    mine = fractions(*xy)
    theirs = np.concatenate([fractions(*other) for other in placed])
    if not len(mine) or not len(theirs):
        return False
    gaps = np.sqrt(((mine[:, None, :] - theirs[None, :, :]) ** 2).sum(-1)).min(axis=1)
    return bool(np.mean(gaps < near) >= share)


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


def _clip_to_span(ax, artist, lo: float, hi: float) -> None:
    """Show `artist` only between x = lo and x = hi (data coordinates), over the axes' height."""
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import blended_transform_factory

    across = blended_transform_factory(ax.transData, ax.transAxes)
    artist.set_clip_path(Rectangle((lo, 0.0), hi - lo, 1.0, transform=across))


def _over_curves(ax, ds, refs, xdim: str, selection: dict | None = None) -> bool:
    """References against `xdim`, at the panel's `selection`: curves of values beside the data's
    (per-run ones as thin steps of the first runs), or a vertical line at each position along
    `xdim`. Curves on a theory grid are shown over the data's range only; the x limits stay."""
    xlim, drawn = ax.get_xlim(), 0
    span = np.asarray(ds[xdim].values, dtype=float) if xdim in ds.coords else np.array([])
    span = span[np.isfinite(span) & ((span > 0) if ax.get_xscale() == "log" else True)]
    for ref in refs:
        ref = _restrict(ds, ref, selection or {})
        along = ref.attrs.get(ALONG_ATTR, "")
        if along == xdim:
            for k, v in enumerate(np.unique(ref.values[np.isfinite(ref.values)])[:MAX_CURVES]):
                ax.axvline(
                    v, label=_legend(ref) if k == 0 else None, zorder=1.5 + 0.1 * drawn, **_style(ref, "0.2", drawn)
                )
            drawn += bool(np.isfinite(ref.values).any())
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
                ax.step(
                    x,
                    row,
                    where="post",
                    lw=0.6,
                    alpha=0.6,
                    zorder=1,
                    label=label,
                    color=ref.attrs.get(COLOR_ATTR) or "0.6",
                )
            else:
                (line,) = ax.plot(x, row, label=label, zorder=1.5 + 0.1 * drawn, **_style(ref, "black", drawn))
                if index[0] != xdim and span.size:  # a theory grid: not beyond the data
                    _clip_to_span(ax, line, span.min(), span.max())
        drawn += bool(rows)
    ax.set_xlim(xlim)
    return bool(drawn)


def _combinations(da, dims: list[str]) -> list[dict]:
    """Every combination of coordinate values of `dims` (one empty selection when none)."""
    return [
        dict(zip(dims, values, strict=True)) for values in itertools.product(*(da[d].values.tolist() for d in dims))
    ] or [{}]


def _left_out(da, dims: list[str], every: list[dict], drawn: list[dict], what: str = "panels") -> str:
    """What a picture cut to MAX_PANELS panels (or MAX_CURVES curves) leaves out, in words (""
    when nothing)."""
    if len(drawn) == len(every):
        return ""
    missing = []
    for dim in dims:
        shown = {s[dim] for s in drawn}
        rest = [v for v in da[dim].values.tolist() if v not in shown]
        if rest:
            values = ", ".join(value_text(v) for v in rest[:6]) + (", ..." if len(rest) > 6 else "")
            missing.append(f"{dim} = {values}")
    where = "; ".join(missing) or f"{len(every) - len(drawn)} combinations of {', '.join(dims)}"
    return f"{len(drawn)} of {len(every)} {what} drawn, left out: {where} (choose {what} with --sel AXIS=VALUE)"


def _colour_scale(da, log: bool = False) -> dict:
    """One colour scale for every panel of a heat map: the colour map and norm, from the whole
    variable (so that panels compare). The declared dyn_clim wins; a signed variable (dyn_signed,
    or a dyn_clim symmetric about 0) gets a diverging map centred on zero; `log`: a log scale
    (of |values| around zero, linear within 1e-3 of the largest, for a signed variable)."""
    from matplotlib import colors

    values = np.asarray(da.values, dtype=float)
    finite = values[np.isfinite(values)]
    clim = da.attrs.get(CLIM_ATTR)
    signed = bool(da.attrs.get(SIGNED_ATTR, 0)) or (clim is not None and clim[0] < 0 and np.isclose(clim[0], -clim[1]))
    if clim is not None:
        low, high = float(clim[0]), float(clim[1])
    elif finite.size:
        low, high = float(finite.min()), float(finite.max())
    else:
        low, high = 0.0, 1.0
    if signed:
        reach = max(abs(low), abs(high)) or 1.0
        low, high = -reach, reach
    scale = {"cmap": "RdBu_r" if signed else "viridis", "signed": signed, "log": log, "skipped": 0}
    if log and signed:
        scale["norm"] = colors.SymLogNorm(linthresh=1e-3 * high, vmin=low, vmax=high, base=10)
    elif log:
        positive = finite[finite > 0]
        scale["skipped"] = int(finite.size - positive.size)
        if positive.size == 0:
            raise ScenarioError("--log", f"{da.name} holds no positive value to draw on a log scale")
        low = max(low, float(positive.min())) if clim is None or low <= 0 else low
        scale["norm"] = colors.LogNorm(vmin=low, vmax=max(high, low * (1 + 1e-12)))
    else:
        scale["norm"] = colors.Normalize(vmin=low, vmax=high)
    return scale


def _colour_note(scale) -> str:
    if not scale or not scale["skipped"]:
        return ""
    return f"{scale['skipped']} values <= 0 left blank on the log scale"


def _heatmap(ax, da, marks=None, label_chars: int = MAX_COLORBAR_CHARS, spread=None, colours=None) -> dict:
    """Cells centred on the sweep values (geometric mid-points on log axes); `marks`: reason ->
    a boolean array over some of the dims, True where a cell is hatched for that reason; a "+"
    on cells above the variable's dyn_mark_above; `spread`, the Monte Carlo error of each cell
    (over some of the dims): a dot where it exceeds ERROR_SHARE of the colour range; `colours`:
    the figure's one colour scale (:func:`_colour_scale`; default: this panel's). Returns
    {dim: (values, cell edges)}."""
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
    colours = colours or _colour_scale(da)
    values = np.asarray(da.values, dtype=float)
    if colours["log"] and not colours["signed"]:
        values = np.where(values > 0, values, np.nan)  # no colour on a log scale: blank
    mesh = ax.pcolormesh(xe, ye, values.T, shading="flat", cmap=colours["cmap"], norm=colours["norm"])
    _set_scale(ax, x.values, xs, "x")
    _set_scale(ax, y.values, ys, "y")
    ax.figure.colorbar(mesh, ax=ax, label=wrap_text(axis_label(da), min(label_chars, MAX_COLORBAR_CHARS)))
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    low, high = mesh.norm.vmin, mesh.norm.vmax  # None where no cell holds a value
    if spread is not None and low is not None and high is not None and not colours["log"]:
        cut = spread.sel({d: da[d].values for d in spread.dims if d in da.dims})  # as the cells
        _dot_cells(ax, x.values, y.values, cut.broadcast_like(da).transpose(xdim, ydim).values, high - low)
    for reason, m in marks.items():
        hit = m.broadcast_like(da).transpose(xdim, ydim).values
        _hatch_cells(ax, xe, ye, hit, reason)
    above = da.attrs.get(MARK_ABOVE_ATTR)
    if above is not None and (da.values > above).any():
        i, j = np.nonzero(da.values > above)
        ax.plot(x.values[i], y.values[j], "+", color="white", ms=6, mew=1.2, label=f"{da.name} > {float(above):g}")
    return {xdim: (x.values.astype(float), xe), ydim: (y.values.astype(float), ye)}


def _dot_cells(ax, x, y, spread, span: float) -> None:
    """A dot at the centre of each cell whose error `spread` exceeds ERROR_SHARE of the colour
    range `span` (NaN, no error yet: no dot)."""
    with np.errstate(invalid="ignore"):
        hit = np.asarray(spread, dtype=float) > ERROR_SHARE * span
    i, j = np.nonzero(hit)
    if i.size:
        ax.plot(x[i], y[j], zorder=3, **DOT)


def _hatch_cells(ax, xe, ye, hit, reason: str) -> bool:
    from matplotlib.patches import Rectangle

    style = MARK_STYLES[reason]
    for k, (i, j) in enumerate(np.argwhere(hit)):
        # the first cell carries the label, so that the figure's legend lists it
        ax.add_patch(
            Rectangle(
                (xe[i], ye[j]),
                xe[i + 1] - xe[i],
                ye[j + 1] - ye[j],
                label=style.label if k == 0 else None,
                **style.hatch,
            )
        )
    return bool(hit.any())


def _named_values(ds, text: str, said: str) -> str:
    """The values of the fixed parameters that `text` names as words ("... > 1 - delta" gives
    "delta = 0.01"), those `said` already gives left out: a threshold in a title is a number."""
    params = scenario_of(ds).get("params", {})
    found = [
        f"{k} = {value_text(v)}"
        for k, v in params.items()
        if isinstance(v, (int, float))
        and not isinstance(v, bool)
        and re.search(rf"(?<![\w.]){re.escape(k)}(?![\w(])", text)
    ]
    return ", ".join(t for t in found if t not in said)


def _hue_axis(da, name: str, hue: str, against: str | None, numeric: list[str]) -> str:
    """The axis the curves of `--hue` are drawn against: the reference's axis, else `time` for a
    series, else the first numeric axis other than `hue` (one line when there is none, or `hue`
    is not an axis)."""
    if hue not in da.dims:
        raise ScenarioError("--hue", f"{hue!r} is not an axis of {name} (axes: {', '.join(da.dims)})")
    if da.sizes[hue] < 2:
        raise ScenarioError("--hue", f"{hue} has one value here: nothing to tell apart")
    if against is not None and against != hue:
        return against
    others = [d for d in numeric if d != hue]
    if not others:
        raise ScenarioError("--hue", f"{name} has no numeric axis besides {hue} to draw against")
    return "time" if "time" in others else others[0]  # a series: against its time, panels per point


def _curves(ax, da, xdim: str, marks=None, bounds=None) -> set:
    """One curve per combination of the other axes, against the numeric axis `xdim`; `bounds`
    (lower, upper) of the Monte Carlo error, drawn as bars or, past BAND_POINTS points, as a
    band; marked points get a ring, one style per reason. Returns how errors were drawn."""
    import matplotlib

    x = da[xdim]
    scale = _scale(x.values)
    xpos = x.values
    others = [d for d in da.dims if d != xdim]
    hits = {reason: m.broadcast_like(da) for reason, m in (marks or {}).items()}
    size = matplotlib.rcParams["lines.markersize"]
    ringed, errors = set(), set()
    for selection in _combinations(da, others)[:MAX_CURVES]:
        label = ", ".join(f"{k} = {value_text(v)}" for k, v in selection.items()) or None
        values = np.asarray(da.sel(selection).values, dtype=float)
        lo = hi = None
        if bounds is not None:
            lo, hi = (
                np.asarray(b.broadcast_like(da).sel(selection).transpose(xdim).values, dtype=float) for b in bounds
            )
        band = lo is not None and xpos.size > BAND_POINTS
        yerr = None
        if lo is not None and not band:  # NaN where a point has no error (yet): no bar there
            yerr = np.vstack([np.maximum(values - lo, 0.0), np.maximum(hi - values, 0.0)])
            if np.isfinite(yerr).any():
                errors.add("bars")
        bars = ax.errorbar(
            xpos,
            values,
            yerr=yerr,
            marker="o" if xpos.size <= BAND_POINTS else "",
            ms=size / 2,
            capsize=size / 3 if yerr is not None else 0,
            label=label,
        )
        if band and np.isfinite(lo).any():
            ax.fill_between(xpos, lo, hi, color=bars.lines[0].get_color(), alpha=0.25, lw=0, zorder=1.8)
            errors.add("band")
        for reason, hit in hits.items():
            on = np.asarray(hit.sel(selection).values, dtype=bool)
            if on.any():
                ringed.add(reason)
                style = MARK_STYLES[reason]
                if reason in NO_VALUE:  # no value to ring: a mark at the bottom, the curve's colour
                    _bottom_marks(ax, xpos[on], style, bars.lines[0].get_color())
                    continue
                ax.plot(
                    xpos[on], values[on], style.marker, ms=1.5 * size, mfc="none", color=style.color, mew=1.5, zorder=4
                )  # a colour: the cycle stays
    _mark_legend(ax, ringed)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(da))
    _set_scale(ax, x.values, scale, "x")
    finite = da.values[np.isfinite(da.values)]
    if finite.size and finite.min() > 0 and finite.max() > DATA_LOG_RATIO * finite.min():
        ax.set_yscale("log")  # errors and rates spanning decades
    ax.grid(alpha=0.3)
    return errors


def _bottom_marks(ax, x, style, color) -> None:
    """Markers at the bottom edge of the panel at the positions `x` (data coordinates): points
    that hold no value (a diverged or failed point), for a curve or a bar."""
    import matplotlib
    from matplotlib.transforms import blended_transform_factory

    size = matplotlib.rcParams["lines.markersize"]
    ax.plot(
        np.asarray(x),
        np.zeros(len(x)),
        style.marker,
        ms=1.3 * size,
        color=color,
        mec=style.color,
        mew=1.0,
        clip_on=False,
        zorder=5,
        transform=blended_transform_factory(ax.transData, ax.transAxes),
    )


def _mark_legend(ax, reasons) -> None:
    """A legend entry per reason marked on this panel: a ring, or for points with no value the
    marker drawn at the bottom."""
    import matplotlib

    size = matplotlib.rcParams["lines.markersize"]
    for reason, style in MARK_STYLES.items():
        if reason not in reasons:
            continue
        if reason in NO_VALUE:
            ax.plot(
                [], [], style.marker, ms=1.3 * size, color="0.6", mec=style.color, mew=1.0, ls="none", label=style.label
            )
        else:
            ax.plot(
                [],
                [],
                style.marker,
                ms=1.5 * size,
                mfc="none",
                color=style.color,
                mew=1.5,
                ls="none",
                label=style.label,
            )


def _bars(ax, da, bounds=None, marks=None) -> set:
    """No numeric axis with more than one value: a bar per combination of the axes, with the
    error bars of `bounds` (lower, upper) when given; a bar of a point with no value (`marks`:
    diverged, failed) gets its mark at the bottom."""
    selections = _combinations(da, list(da.dims))
    labels = [", ".join(value_text(v) for v in sel.values()) or str(da.name) for sel in selections]
    values = np.array([float(da.sel(sel)) for sel in selections])
    yerr = None
    if bounds is not None:
        lo = np.array([float(bounds[0].broadcast_like(da).sel(sel)) for sel in selections])
        hi = np.array([float(bounds[1].broadcast_like(da).sel(sel)) for sel in selections])
        if np.isfinite(lo).any():
            yerr = np.vstack([np.maximum(values - lo, 0.0), np.maximum(hi - values, 0.0)])
    ax.bar(range(len(selections)), values, yerr=yerr, capsize=3 if yerr is not None else 0)
    ax.set_xticks(range(len(selections)), labels, rotation=30, ha="right")
    marked = set()
    for reason, hit in (marks or {}).items():
        if reason not in NO_VALUE:
            continue
        hit = hit.broadcast_like(da)
        on = [k for k, sel in enumerate(selections) if bool(hit.sel(sel))]
        if on:
            marked.add(reason)
            _bottom_marks(ax, on, MARK_STYLES[reason], MARK_STYLES[reason].color)
    _mark_legend(ax, marked)
    ax.set_ylabel(axis_label(da))
    return {"bars"} if yerr is not None else set()


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
    """Log or index axes get ticks at the sweep values themselves (every other when crowded);
    so do integer axes (counts: n, depth, k), drawn as the categories they are, with no ticks
    between their values."""
    counted = np.asarray(values).dtype.kind in "iu" and np.size(values) <= MAX_TICKS
    if scale == "linear" and not counted:
        return
    from matplotlib.ticker import NullLocator

    values = np.asarray(values, dtype=float)
    axis = getattr(ax, f"{which}axis")
    if scale == "log":
        values = values[values > 0]
        getattr(ax, f"set_{which}scale")("log")
    elif scale == "index":
        getattr(ax, f"set_{which}scale")("function", functions=_index_map(values))
    if values.size <= MAX_TICKS or scale == "index":
        crowded = values.size > 6 and which == "x"
        axis.set_ticks(values, [value_text(v) if not crowded or i % 2 == 0 else "" for i, v in enumerate(values)])
        axis.set_minor_locator(NullLocator())
