"""The words on a picture, and where they go: axis and colour-bar labels from a variable's
`long_name` and `units`, the settings a title names, text wrapped to a width in inches, and one
legend for the whole figure below its panels (outside the data). Shared by `dyn plot`
(:mod:`.plot`) and `dyn compare` (:mod:`.comparison`).
"""

from __future__ import annotations

import re
import textwrap
import tomllib

import numpy as np

MAX_LEGEND_COLUMNS = 4
CHAR_WIDTH = 0.55  # a character's mean width in units of the font size (to wrap text to a width)
MAX_SETTINGS = 8  # fixed parameters named under a title


ERROR_SHARE = 0.05  # heat maps: a cell is dotted where its error exceeds this share of the colours
DOT = dict(marker=".", ls="none", color="black", mec="white", mew=0.4, ms=5)  # how it is dotted


def error_legend(kind: str, words: str):
    """A legend entry saying what the error bars (or bands, or a heat map's dots) are; `words`
    names the error ("one standard error", "95% Wilson interval")."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if kind == "dots":  # a heat map's cells whose error is large on its colour scale
        spread = words if words == "one standard error" else f"half the {words}"
        return Line2D([], [], **DOT), f"dots: {spread} > {ERROR_SHARE:.0%} of the colour range"
    if kind == "band":
        return Patch(facecolor="0.5", alpha=0.3, lw=0), f"bands: {words}"
    return Line2D([], [], color="0.3", marker="|", ls="none", ms=8, mew=1.0), f"error bars: {words}"


def font_points(key: str) -> float:
    import matplotlib
    from matplotlib.font_manager import FontProperties

    return FontProperties(size=matplotlib.rcParams[key]).get_size_in_points()


def wrap_text(text: str, chars: int) -> str:
    """`text` in lines of at most `chars` characters, broken at spaces only (a formula stays whole)."""
    return textwrap.fill(text, chars, break_long_words=False, break_on_hyphens=False)


def chars_in(inches: float, key: str) -> int:
    """About how many characters of the font size `key` fit in `inches`."""
    return max(20, int(inches * 72 / (CHAR_WIDTH * font_points(key))))


def figure_legend(fig, axes, extra: list):
    """One legend for the figure below its panels (outside the data): every labelled artist of
    `axes` once (the first of each label), then `extra` (handle, label) entries; in as many
    columns as fit the figure's width. None when nothing is labelled."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    for handle, label in extra:
        handles.append(handle)
        labels.append(label)
    if not labels:
        return None
    from matplotlib.container import ErrorbarContainer

    # the data's curves first, then what is drawn over them, then the notes
    order = sorted(range(len(labels)), key=lambda i: not isinstance(handles[i], ErrorbarContainer))
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    # white references (drawn on heat maps) need a grey ground to be seen in the legend
    ground = (
        dict(frameon=True, facecolor="0.72", edgecolor="none", framealpha=1.0)
        if any(_light(h) for h in handles)
        else dict(frameon=False)
    )
    renderer = fig.canvas.get_renderer()
    ncols = min(len(labels), MAX_LEGEND_COLUMNS)
    while True:
        legend = fig.legend(handles, labels, loc="outside lower center", ncols=ncols, **ground)
        if ncols == 1 or legend.get_window_extent(renderer).width <= 0.95 * fig.bbox.width:
            return legend
        legend.remove()
        ncols -= 1


def _light(handle) -> bool:
    """Whether a legend handle is drawn in a colour near white (lines and hatch edges)."""
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if isinstance(handle, Line2D):
        colors = [handle.get_color(), handle.get_markeredgecolor()]
    elif isinstance(handle, Patch) and handle.get_hatch():
        colors = [handle.get_edgecolor()]
    else:
        return False
    try:
        return any(min(to_rgb(c)) > 0.85 for c in colors if c not in (None, "none"))
    except ValueError:
        return False


def fit_height(fig, width: float, height: float, texts) -> None:
    """Make the figure taller by the height of its title and legend, so the panels keep theirs."""
    renderer = fig.canvas.get_renderer()
    extra = sum(t.get_window_extent(renderer).height for t in texts if t is not None) / fig.dpi
    fig.set_size_inches(width, height + extra + 0.1)


def settings(ds, trust_model: bool = False) -> str:
    """What a picture's numbers depend on besides its axes: the fixed scalar parameters that
    differ from the system's defaults (n and d always, n first) and the runs per point, from the
    scenario the file holds; the defaults are those the file records (:mod:`.facts`: every fixed
    parameter is named when it records none, and no code the file names is imported unless
    `trust_model`)."""
    from .facts import param_defaults

    try:
        doc = tomllib.loads(ds.attrs["scenario"])
        if not isinstance(doc.get("scenario"), dict) or not isinstance(doc.get("params", {}), dict):
            return ""
    except (KeyError, TypeError, tomllib.TOMLDecodeError, RecursionError):
        return ""
    defaults = param_defaults(ds, doc, trust_model)
    fixed = sorted(
        (
            (k, v)
            for k, v in doc.get("params", {}).items()
            if isinstance(v, (int, float, str))
            and not isinstance(v, bool)
            and (k in ("n", "d") or k not in defaults or v != defaults[k])
        ),
        key=lambda kv: kv[0] != "n",
    )
    text = ", ".join(f"{k} = {value_text(v)}" for k, v in fixed[:MAX_SETTINGS])
    runs = doc.get("ensemble", {}).get("runs")
    runs_text = f"{runs} run{'s' if runs != 1 else ''} per point" if runs else ""
    return "; ".join(t for t in (text, runs_text) if t)


REMARK = re.compile(r"\s+\([^()]*\)")  # " (any sign)": a remark in a parameter's doc


def axis_label(da) -> str:
    """The variable's long name and units; a sweep axis's long name is its parameter's doc, whose
    remarks in parentheses ("inverse temperature beta (any sign)") are about the parameter, not
    the axis, and are left out (a formula's own parentheses, "O(n^2)", have no space before)."""
    text = str(da.attrs.get("long_name", da.name))
    if da.name in da.dims:  # a coordinate: an axis
        text = REMARK.sub("", text).strip() or text
    units = da.attrs.get("units", "")
    return f"{text} [{units}]" if units not in ("", "1") else text


def value_text(v) -> str:
    if isinstance(v, (float, np.floating)):
        return str(int(v)) if float(v).is_integer() and abs(v) < 1e7 else f"{v:.3g}"
    return str(v)
