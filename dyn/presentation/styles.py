"""How a picture looks: the styles of `dyn plot --style` (today's PNG, and a two-column paper's
vector figure), where each writes, and how points that are not answers yet are marked.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import ScenarioError
from ..engine.verdicts import HORIZON_LIMITED, HORIZON_LIMITED_SHARE, NONSTATIONARY, STEP_LIMITED
from .analysis import DIVERGED_POINTS, FAILED_POINTS
from .mixture import SPLIT

VECTOR = (".pdf", ".svg")  # what --style paper writes


@dataclass(frozen=True)
class MarkStyle:
    """How points of one reason are drawn: hatch of a heat-map cell; on a curve, a ring (marker
    and colour) around the point; and the words in the legend."""

    hatch: dict
    color: str
    marker: str
    label: str


MARK_STYLES = {
    HORIZON_LIMITED: MarkStyle(
        dict(facecolor="0.8", edgecolor="0.3", hatch="///", alpha=0.7, lw=0.0),
        "0.4",
        "o",
        f"horizon-limited: > {HORIZON_LIMITED_SHARE:.0%} of runs undecided",
    ),
    NONSTATIONARY: MarkStyle(
        dict(facecolor="0.85", edgecolor="0.2", hatch="\\\\", alpha=0.75, lw=0.0),
        "0.2",
        "o",
        "not stationary by the cap",
    ),
    SPLIT: MarkStyle(
        dict(facecolor="none", edgecolor="tab:purple", hatch="...", alpha=1.0, lw=0.0),
        "tab:purple",
        "D",
        "runs split between states (mean of a mixture)",
    ),
    STEP_LIMITED: MarkStyle(
        dict(facecolor="none", edgecolor="red", hatch="xx", alpha=0.8, lw=0.0),
        "red",
        "o",
        "step error > Monte Carlo error",
    ),
    # points with no value (dyn.open reads NaN there): the cell is hatched, on a curve or a bar a
    # marker sits at the bottom of the panel at the point's position
    DIVERGED_POINTS: MarkStyle(
        dict(facecolor="0.92", edgecolor="darkred", hatch="++", alpha=1.0, lw=0.0),
        "darkred",
        "X",
        "diverged: runs became non-finite (no value)",
    ),
    FAILED_POINTS: MarkStyle(
        dict(facecolor="0.92", edgecolor="0.15", hatch="--", alpha=1.0, lw=0.0),
        "0.15",
        "s",
        "failed: an error, computed again by a resume (no value)",
    ),
}
NO_VALUE = (DIVERGED_POINTS, FAILED_POINTS)  # marks of points that hold no value to ring


@dataclass(frozen=True)
class Look:
    """A style: matplotlib rc settings, and sizes in inches (the panels' area; the title and the
    legend add their own height)."""

    rc: dict
    single: tuple[float, float]  # one panel: width, height
    panel: tuple[float, float]  # one of several: width, height (the figure: cols x rows of them)
    width: float | None = None  # several panels: the figure's width, shared by the columns
    dpi: int = 120


LOOKS = {
    # today's look: matplotlib's defaults, titles and legends a little smaller
    "default": Look(
        {"figure.titlesize": 10, "axes.titlesize": 10, "legend.fontsize": 7.5}, single=(7.0, 5.0), panel=(4.8, 3.9)
    ),
    # a two-column paper: one panel in a column (3.4 in), several across both (7 in); 8-9 pt text
    "paper": Look(
        {
            "font.family": "serif",
            "font.serif": ["STIXGeneral", "DejaVu Serif"],
            "mathtext.fontset": "stix",
            "font.size": 8,
            "axes.labelsize": 8,
            "axes.titlesize": 8,
            "figure.titlesize": 8.5,
            "legend.fontsize": 7,
            "xtick.labelsize": 7,
            "ytick.labelsize": 7,
            "lines.linewidth": 1.0,
            "lines.markersize": 4,
            "axes.linewidth": 0.6,
            "xtick.major.width": 0.6,
            "ytick.major.width": 0.6,
            "xtick.minor.width": 0.4,
            "ytick.minor.width": 0.4,
            "xtick.major.size": 3,
            "ytick.major.size": 3,
            "xtick.minor.size": 1.5,
            "ytick.minor.size": 1.5,
            "grid.linewidth": 0.4,
            "patch.linewidth": 0.6,
            "hatch.linewidth": 0.5,
            "legend.handlelength": 1.8,
            "pdf.fonttype": 42,
            "ps.fonttype": 42,
            "svg.fonttype": "none",  # text stays text
        },
        single=(3.4, 2.5),
        panel=(2.33, 2.0),
        width=7.0,
        dpi=300,
    ),
}


STYLE_NAMES = tuple(LOOKS)


@contextlib.contextmanager
def styled(style: str = "default"):
    """The matplotlib settings of a style (see LOOKS), for drawing and for saving; yields its Look."""
    import matplotlib

    if style not in LOOKS:
        raise ScenarioError("--style", f"unknown style {style!r} (styles: {', '.join(LOOKS)})")
    with matplotlib.rc_context(LOOKS[style].rc):
        yield LOOKS[style]


def save(fig, out: Path, dpi: float) -> Path:
    """Write `fig` to `out` exactly (its folder made first; a name without a suffix gets a
    PNG, under that name) and close it. A write that fails (a full disk, /dev/full) is one
    line, and a partial picture it made is removed."""
    import matplotlib.pyplot as plt

    existed = out.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=dpi, format=None if out.suffix else "png")
    except OSError as exc:
        if not existed and out.is_file():
            out.unlink()
        raise ScenarioError("--out", f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    return out


def output_path(path: str | Path, out: str | Path | None, style: str = "default") -> Path:
    """Where `dyn plot` writes: `out`, or beside the file (PNG; with --style paper PDF, and an
    `out` without a suffix gets .pdf); `out` a folder: the default name, in it. The paper
    style writes vector files only."""
    path = Path(path)
    if out is not None and Path(out).is_dir():  # a folder: the default name, in it
        out = Path(out) / path.with_suffix(".pdf" if style == "paper" else ".png").name
    if style != "paper":
        return check_suffix(Path(out)) if out is not None else path.with_suffix(".png")
    if out is None:
        return path.with_suffix(".pdf")
    out = Path(out)
    if not out.suffix:
        return out.with_suffix(".pdf")
    if out.suffix.lower() not in VECTOR:
        raise ScenarioError("--out", f"--style paper writes vector pictures: give a .pdf or .svg path, not {out.name}")
    return out


def check_suffix(out: Path) -> Path:
    """`out`, if matplotlib can write a picture by its suffix (none: a PNG); else one line."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    if out.suffix and out.suffix.lower().lstrip(".") not in kinds:
        raise ScenarioError(
            "--out",
            f"{out.name}: no picture is written as {out.suffix} "
            f"(suffixes: {', '.join('.' + k for k in sorted(kinds))})",
        )
    return out
