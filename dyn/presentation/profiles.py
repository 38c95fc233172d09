"""Profiles: a variable drawn against one of its own dimensions, one curve per value of another
(`Draw.profile = (x, curves)`, the file attribute `dyn_profile`): the soft accuracy of the last
token against the position s = j/n at a few times, one panel per beta.

- **Curves**: where a reference gives one value per panel along the curves' dimension
  (`dyn_along`: t_crit(beta)), the saved values nearest to FRACTIONS of it, the same colour
  for the same fraction in every panel (what the claim is about: the profile before, at and
  after the threshold); otherwise at most MAX_CURVES values spread over the dimension
  (geometrically where its values are positive and span a decade; the first left out where
  the variable is 0 there). Dark is early, light late; each curve has its Monte Carlo error
  as a band (one standard error, or the Wilson interval).
- **References** declared over the variable (`dyn_over`) with the same two dimensions are
  drawn dashed in the colour of their curve (the finite-n linear theory), up to the threshold
  (a linear theory is not drawn where it no longer applies); curves past it are thinner.
- **Points that hold no answer** (status not ok: diverged, failed, pending) are left empty,
  with the reason written in the panel.
"""

from __future__ import annotations

import numpy as np

from ..core.contract import ALONG_ATTR, LABEL_ATTR, OVER_ATTR, PROFILE_ATTR, STATUS_NAMES
from .words import axis_label, chars_in, error_legend, figure_legend, fit_height, settings, value_text, wrap_text

MAX_CURVES = 6
FRACTIONS = (0.125, 0.25, 0.5, 1.0, 1.5)  # of the panel's threshold, where there is one
MAX_PANELS = 12
OK = 1


def is_profile(ds, name: str) -> bool:
    """Whether `name` asks to be drawn as profiles, with both of its dimensions in the file."""
    spec = str(ds[name].attrs.get(PROFILE_ATTR, "")).split()
    return len(spec) == 2 and all(d in ds[name].dims for d in spec)


def picked(values: np.ndarray, zero_first: bool) -> np.ndarray:
    """Indices of at most MAX_CURVES values, spread over them (geometrically for positive
    values spanning a decade); without the first when it carries nothing (`zero_first`)."""
    values = np.asarray(values, dtype=float)
    first = 1 if zero_first and len(values) > 1 else 0
    rest = values[first:]
    if len(rest) <= MAX_CURVES:
        return np.arange(first, len(values))
    if rest[0] > 0 and rest[-1] / rest[0] >= 10:
        targets = np.geomspace(rest[0], rest[-1], MAX_CURVES)
    else:
        targets = np.linspace(rest[0], rest[-1], MAX_CURVES)
    found = np.unique([int(np.argmin(np.abs(rest - t))) for t in targets])
    return found + first


def figure(ds, name: str, look, error_bounds, selected: str = "", trust_model: bool = False):
    """The profile figure of `name` in the style `look` (dyn.presentation.styles);
    `error_bounds(ds, name)` gives its Monte Carlo error (dyn.presentation.plot); `selected`: the
    values `dyn plot --sel` cut the file at, in words, for the title."""
    import matplotlib.pyplot as plt

    x, by = str(ds[name].attrs[PROFILE_ATTR]).split()
    single = {d: 0 for d in ds[name].dims if d not in (x, by) and ds.sizes[d] == 1}
    ds = ds.isel({d: 0 for d in single if d in ds.dims})  # an axis of one value: no panels
    da = ds[name].load()
    panel_dims = [d for d in da.dims if d not in (x, by)]
    selections = [
        dict(zip(panel_dims, values, strict=True)) for values in _product([da[d].values for d in panel_dims])
    ][:MAX_PANELS]
    at = da.isel({d: 0 for d in da.dims if d not in (x, by) and d not in panel_dims})
    zero_first = bool(np.all(np.nan_to_num(at.isel({by: 0}).values) == 0))
    picks = picked(da[by].values, zero_first)
    refs = [ds[v].load() for v, ref in ds.data_vars.items() if name in str(ref.attrs.get(OVER_ATTR, "")).split()]
    curves = [r for r in refs if x in r.dims and by in r.dims]
    marks = [r for r in refs if r.attrs.get(ALONG_ATTR) == by and x not in r.dims and by not in r.dims]
    bounds = error_bounds(ds, name)
    cols = min(len(selections), 3)
    rows = -(-len(selections) // cols)
    width, height = look.single if len(selections) == 1 else (look.width or look.panel[0] * cols, look.panel[1] * rows)
    fig, grid = plt.subplots(rows, cols, figsize=(width, height), squeeze=False, layout="constrained", dpi=look.dpi)
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(picks)))
    fractions_colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(FRACTIONS)))
    status = ds["status"] if "status" in ds else None
    for ax, selection in zip(grid.flat, selections, strict=False):
        sub = da.sel(selection)
        state = int(
            status.sel({k: v for k, v in selection.items() if k in status.dims}).values.max()
            if status is not None and status.size
            else OK
        )
        late = _mark_times(marks, selection)
        title = ", ".join(f"{k} = {value_text(v)}" for k, v in selection.items())
        for label, when in late:
            title += f"; {label} = {value_text(when)}"
        ax.set_title(title)
        if status is not None and not bool(
            (status.sel({k: v for k, v in selection.items() if k in status.dims}) == OK).all()
        ):
            ax.text(
                0.5,
                0.5,
                f"no answer here ({STATUS_NAMES[state]})",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="tab:red",
            )
            continue
        drawn = []
        steps = [
            (color, i, f"{by} = {value_text(float(da[by].values[i]))}") for color, i in zip(colors, picks, strict=True)
        ]
        if late:
            steps = _relative(da[by].values, late[0], fractions_colors)
        for color, i, label in steps:
            t = float(da[by].values[i])
            thin = any(t > when * (1 + 1e-9) for _, when in late)
            line = sub.isel({by: i})
            ax.plot(line[x].values, line.values, color=color, lw=1.0 if thin else 2.0, label=label)
            drawn.append(line.values)
            if bounds is not None:
                lo, hi = (b.sel(selection).isel({by: i}) for b in bounds[:2])
                ax.fill_between(line[x].values, lo.values, hi.values, color=color, alpha=0.2, lw=0)
                drawn += [lo.values, hi.values]
            for ref in curves if not thin else ():  # a linear theory: only while it applies
                theory = ref.sel({k: v for k, v in selection.items() if k in ref.dims}).isel({by: i})
                ax.plot(
                    theory[x].values,
                    theory.values,
                    color=color,
                    ls="--",
                    lw=1.0,
                    label=str(ref.attrs.get(LABEL_ATTR, ref.name)),
                )
        _data_limits(ax, drawn)
        ax.set_xlabel(axis_label(da[x]))
    for ax in list(grid.flat)[len(selections) :]:
        ax.set_visible(False)
    for ax in list(grid.flat)[: len(selections)]:
        ax.set_xlabel(wrap_text(ax.get_xlabel(), chars_in(width / cols, "axes.labelsize")))
    for ax in grid[:, 0]:  # one label per row: the panels' axes are the same quantity
        ax.set_ylabel(wrap_text(axis_label(da), chars_in(height / rows, "axes.labelsize")))
    head = f"{ds.attrs.get('title', '').removeprefix('dyn sweep: ')}: {da.attrs.get('long_name', name)}"
    if selected:  # the values `dyn plot --sel` chose
        head += f", at {selected}"
    where = f"thin curves: {by} past " + ", ".join(str(r.attrs.get(LABEL_ATTR, r.name)) for r in marks) if marks else ""
    chars = chars_in(width, "figure.titlesize")
    title = fig.suptitle("\n".join(wrap_text(t, chars) for t in (head, settings(ds, trust_model), where) if t))
    notes = [error_legend("band", bounds[2])] if bounds is not None else []
    legend = figure_legend(fig, list(grid.flat)[: len(selections)], notes)
    fit_height(fig, width, height, [title, legend])
    return fig


def _relative(values: np.ndarray, mark: tuple[str, float], colors) -> list[tuple]:
    """(colour, index, label) of the saved values nearest to FRACTIONS of the mark's value
    (those within the saved range, each once)."""
    label, when = mark
    found, seen = [], set()
    values = np.asarray(values, dtype=float)
    for color, fraction in zip(colors, FRACTIONS, strict=True):
        target = fraction * when
        if not values[0] < target <= values[-1] * (1 + 1e-9):
            continue
        i = int(np.argmin(np.abs(values - target)))
        if i not in seen:
            seen.add(i)
            found.append((color, i, f"{value_text(fraction)} {label}"))
    return found


def _data_limits(ax, drawn) -> None:
    """The y range of the data and its errors (a theory running off it is cut, not followed)."""
    values = np.concatenate([np.ravel(v) for v in drawn]) if drawn else np.array([])
    values = values[np.isfinite(values)]
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        pad = 0.08 * (hi - lo) if hi > lo else 0.5 * max(abs(hi), 1e-12)
        ax.set_ylim(lo - pad, hi + pad)


def _mark_times(marks, selection: dict) -> list[tuple[str, float]]:
    """(label, value) of each one-per-panel reference along the curves' axis (t_crit)."""
    found = []
    for ref in marks:
        value = ref.sel({k: v for k, v in selection.items() if k in ref.dims}).values
        if np.size(value) == 1 and np.isfinite(value):
            found.append((str(ref.attrs.get(LABEL_ATTR, ref.name)), float(np.ravel(value)[0])))
    return found


def _product(values: list) -> list[tuple]:
    import itertools

    return list(itertools.product(*values)) if values else [()]
