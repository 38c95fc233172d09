"""Pictures of saved states: `dyn plot FILE --tokens` and `dyn animate FILE`.

A sweep file run with `[output] trajectories = true` holds the variable `trajectory` (dims: sweep
axes..., run, trajectory_time, points..., coordinate). One picture shows the points of one run
at one save time, at one sweep point:
- d = 2: the points in the plane with the unit circle, and a histogram of their angles;
- d = 3: a 3-D scatter on a wireframe unit sphere;
- d > 3: the projection on the first two principal directions of all the run's saved states
  (fixed over time, so a movie does not jump), said in the title.
Colours follow the initial order of the tokens: the rank of each token's angle in the plane of
its first two coordinates at the first save time, on a cyclic colour map, which a colour bar
beside the tokens says.

`--point AXIS=VALUE` picks the sweep point (nearest value on a numeric axis, the exact value on
another; default the first value of each axis, said in the title), `--time` the save time
(nearest; default the last), `--run` the run (default 0). A movie draws the same picture at (at
most MAX_FRAMES evenly spread) save times, with the time in the corner: GIF through Pillow, MP4
only where ffmpeg is installed. Bad choices are :class:`ScenarioError` (one line, exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ScenarioError, short_repr
from ..engine.trajectories import DATASET
from .analysis import open as open_dataset

TIME = "trajectory_time"
COORDINATE = "coordinate"
MAX_FRAMES = 60  # a movie draws at most this many save times
FPS = 12
DPI = 80  # of movie frames (PNG pictures use PNG_DPI)
PNG_DPI = 120
BINS = 36  # angle histogram bins (10 degrees)
COLORMAP = "hsv"  # cyclic: the colour of an angle
TOLERANCE = 1e-9  # relative slack of a value at the ends of an axis
COLOUR_LABEL = "colour: token's rank by starting angle"  # the colour bar's words


@dataclass
class States:
    """The states of one run at one sweep point, and what the picture says about them."""

    x: np.ndarray  # (times, points, coordinates)
    times: np.ndarray
    where: str  # the sweep point and run, for the title
    name: str  # the scenario's name
    note: str = ""  # what the title says of a point that is not ok ("diverged: ...")


def load(path: str | Path, points: list[str] | None = None, run: int = 0) -> States:
    """The saved states of run `run` at the sweep point chosen by `points` ("AXIS=VALUE" each)."""
    path = Path(path)
    with open_dataset(path) as ds:
        if DATASET not in ds.data_vars:
            raise ScenarioError(
                "", f"{path} has no saved states (run its scenario with --set output.trajectories=true)"
            )
        traj = ds[DATASET]
        dims = list(traj.dims)
        at = dims.index(TIME)
        axes, run_dim, state = dims[: at - 1], dims[at - 1], dims[at + 1 :]
        if not state or state[-1] != COORDINATE:
            raise ScenarioError(
                "--tokens", f"the saved states (dims {', '.join(state)}) are not points with coordinates"
            )
        chosen = _choose_point(ds, axes, points or [])
        runs = traj.sizes[run_dim]
        if not 0 <= run < runs:
            raise ScenarioError("--run", f"{run} is out of range: the file keeps runs 0 to {runs - 1}")
        x = np.asarray(traj.isel({**chosen, run_dim: run}).values, dtype=float)
        note = _status_note(ds, chosen)
        times = np.asarray(ds[TIME].values, dtype=float)
        labels = [f"{a} = {_show(ds[a].values[i])}" for a, i in chosen.items()]
        where = ", ".join(labels) if labels else "the only point"
        if axes and not points:
            where += " (first point; choose with --point)"
        name = str(ds.attrs.get("title", "")).removeprefix("dyn sweep: ")
    x = x.reshape(len(times), -1, x.shape[-1])
    if not np.isfinite(x).any():
        raise ScenarioError("--point", f"no states at {where}: the point is not computed yet")
    return States(x, times, f"{where}, run {run}", name, note)


def _status_note(ds, chosen: dict[str, int]) -> str:
    """The words for a point that is not ok (diverged, failed): its status and message."""
    from .analysis import status_name

    if "status" not in ds:
        return ""
    state = status_name(ds["status"].isel(chosen).values)
    if state in ("ok", "pending"):
        return ""
    why = str(ds["message"].isel(chosen).values) if "message" in ds else ""
    return f"{state}: {why}" if why else state


def _show(value) -> str:
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)


def _choose_point(ds, axes: list[str], points: list[str]) -> dict[str, int]:
    """Index on each sweep axis: from "AXIS=VALUE" choices, else 0."""
    chosen = {axis: 0 for axis in axes}
    for item in (part for text in points for part in text.split(",")):
        axis, sep, text = (s.strip() for s in item.partition("="))
        if not sep or not axis or not text:
            raise ScenarioError("--point", f"expected AXIS=VALUE, got {short_repr(item)}")
        if axis not in axes:
            known = ", ".join(axes) if axes else "none (the file has one point)"
            raise ScenarioError("--point", f"unknown axis {short_repr(axis)} (sweep axes: {known})")
        chosen[axis] = _nearest(axis, np.asarray(ds[axis].values), text)
    return chosen


def _nearest(axis: str, values: np.ndarray, text: str) -> int:
    if values.dtype.kind in "fiu":
        try:
            value = float(text)
        except ValueError:
            raise ScenarioError("--point", f"{axis}: expected a number, got {short_repr(text)}") from None
        return _nearest_index(f"--point {axis}", values.astype(float), value)
    names = [str(v) for v in values]
    if text not in names:
        raise ScenarioError("--point", f"{axis}: {short_repr(text)} is not a value (values: {', '.join(names)})")
    return names.index(text)


def _nearest_index(key: str, values: np.ndarray, value: float) -> int:
    """The index of the value nearest `value`; outside [min, max] (or not finite) is an error."""
    low, high = float(np.min(values)), float(np.max(values))
    slack = TOLERANCE * max(high - low, abs(high), abs(low), 1.0)
    if not np.isfinite(value) or value < low - slack or value > high + slack:
        raise ScenarioError(key, f"{value:g} is out of range [{low:g}, {high:g}]")
    return int(np.argmin(np.abs(values - value)))


def time_index(states: States, time: float | None) -> int:
    """The save time nearest `time` (default: the last)."""
    if time is None:
        return len(states.times) - 1
    return _nearest_index("--time", states.times, float(time))


class Picture:
    """A figure of the states at one save time; `show(k)` redraws it at save index k."""

    def __init__(self, states: States, width: float = 8.0, height: float = 4.0):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        self.states = states
        x = states.x
        self.d = x.shape[-1]
        finite = np.isfinite(x).all(axis=(1, 2))
        first = x[np.argmax(finite)]
        plane = self._plane(x[finite] if finite.any() else np.nan_to_num(x[:1], posinf=0.0, neginf=0.0))
        angle0 = np.arctan2(first @ plane[1], first @ plane[0])
        ranks = np.argsort(np.argsort(angle0, kind="stable"), kind="stable")
        self.colors = plt.get_cmap(COLORMAP)(ranks / max(len(ranks), 1))
        self.plane = plane
        self.hist = None
        norms = np.linalg.norm(x, axis=-1)
        norms = norms[np.isfinite(norms)]  # a diverged run's last states are not finite
        radius = 1.1 * max(1.0, float(norms.max()) if norms.size else 1.0)
        if self.d == 3:
            self.fig = plt.figure(figsize=(height * 1.1, height), layout="constrained")
            self.ax = self.fig.add_subplot(projection="3d")
            u, v = np.mgrid[0 : 2 * np.pi : 25j, 0 : np.pi : 13j]
            self.ax.plot_wireframe(np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v), color="0.75", lw=0.4)
            for set_lim in (self.ax.set_xlim, self.ax.set_ylim, self.ax.set_zlim):
                set_lim(-radius, radius)
            self.ax.set_box_aspect((1, 1, 1))
            self.ax.set_xlabel("x1")
            self.ax.set_ylabel("x2")
            self.ax.set_zlabel("x3")
        else:
            if self.d == 2:
                self.fig, (self.ax, self.hist_ax) = plt.subplots(1, 2, figsize=(width, height), layout="constrained")
            else:
                self.fig, self.ax = plt.subplots(figsize=(height * 1.1, height), layout="constrained")
            t = np.linspace(0, 2 * np.pi, 200)
            self.ax.plot(np.cos(t), np.sin(t), color="0.7", lw=0.8)
            self.ax.set_xlim(-radius, radius)
            self.ax.set_ylim(-radius, radius)
            self.ax.set_aspect("equal")
            if self.d == 2:
                self.ax.set_xlabel("x1")
                self.ax.set_ylabel("x2")
                edges = np.linspace(-np.pi, np.pi, BINS + 1)
                _, _, self.hist = self.hist_ax.hist(np.zeros(0), bins=edges, color="0.35")
                self.hist_ax.set_xlim(-np.pi, np.pi)
                self.hist_ax.set_ylim(0, x.shape[1])
                self.hist_ax.set_xticks([-np.pi, -np.pi / 2, 0, np.pi / 2, np.pi], ["-π", "-π/2", "0", "π/2", "π"])
                self.hist_ax.set_xlabel("angle")
                self.hist_ax.set_ylabel("tokens")
            else:
                self.ax.set_xlabel("principal direction 1")
                self.ax.set_ylabel("principal direction 2")
        self._colour_legend(plt, len(ranks))
        self.dots = None
        self.clock = self.fig.text(0.01, 0.01, "", fontsize=10, family="monospace", va="bottom")
        self.fig.suptitle(self._title(), fontsize=9)

    def _colour_legend(self, plt, n: int) -> None:
        """A colour bar that says what the colours are: each token's rank by its starting angle
        (in the drawing plane, at the first save time), on the cyclic map the dots use."""
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        mappable = ScalarMappable(Normalize(0, n), plt.get_cmap(COLORMAP))
        bar = self.fig.colorbar(mappable, ax=self.ax, shrink=0.8, pad=0.02, fraction=0.04)
        bar.set_label(COLOUR_LABEL, fontsize=8)
        bar.set_ticks(sorted({0, n // 2, max(n - 1, 0)}))
        bar.ax.tick_params(labelsize=7)
        self.colour_bar = bar

    def _plane(self, x: np.ndarray) -> np.ndarray:
        """Two orthonormal directions of the drawing plane (rows): the first two coordinates,
        or for d > 3 the first two principal directions of all the given states."""
        d = x.shape[-1]
        if d <= 3:
            return np.eye(d)[:2]
        flat = x.reshape(-1, d)
        _, _, vt = np.linalg.svd(flat - flat.mean(axis=0), full_matrices=False)
        return vt[:2]

    def _title(self) -> str:
        s = self.states
        n, d = s.x.shape[1:]
        head = f"{s.name}: " if s.name else ""
        shape = {2: "circle", 3: "sphere S^2"}.get(d, f"projection on the first two principal directions (d = {d})")
        from .words import wrap_text

        note = f"\n{wrap_text(s.note, 90)}" if s.note else ""
        return f"{head}{n} tokens, {shape}\n{s.where}{note}"

    def show(self, k: int) -> None:
        """Draw the states at save index k."""
        x = self.states.x[k]
        if self.dots is not None:
            self.dots.remove()
        if self.d == 3:
            self.dots = self.ax.scatter(
                x[:, 0], x[:, 1], x[:, 2], c=self.colors, s=18, depthshade=False, edgecolors="k", linewidths=0.3
            )
        else:
            xy = x @ self.plane.T
            self.dots = self.ax.scatter(
                xy[:, 0], xy[:, 1], c=self.colors, s=22, zorder=3, edgecolors="k", linewidths=0.3
            )
        if self.hist is not None:
            counts, _ = np.histogram(np.arctan2(x[:, 1], x[:, 0]), bins=np.linspace(-np.pi, np.pi, BINS + 1))
            for bar, count in zip(self.hist, counts, strict=True):
                bar.set_height(count)
        lost = int((~np.isfinite(x).all(axis=-1)).sum())
        self.clock.set_text(f"t = {self.states.times[k]:.4g}" + (f" ({lost} not finite)" if lost else ""))


def figure(path: str | Path, points: list[str] | None = None, time: float | None = None, run: int = 0):
    """The picture of the states at `time` (see the module doc), unsaved."""
    states = load(path, points, run)
    picture = Picture(states)
    picture.show(time_index(states, time))
    return picture.fig


def plot(
    path: str | Path,
    out: str | Path | None = None,
    points: list[str] | None = None,
    time: float | None = None,
    run: int = 0,
) -> Path:
    """Draw the states into a PNG (default: NAME_tokens.png beside the file, or in the folder
    `out`); a failed write is one line (:func:`dyn.presentation.styles.save`)."""
    from .styles import check_suffix, save

    path = Path(path)
    name = path.stem + "_tokens.png"
    if out is not None and Path(out).is_dir():  # a folder: the default name, in it
        out = Path(out) / name
    out = check_suffix(Path(out)) if out is not None else path.with_name(name)
    return save(figure(path, points, time, run), out, PNG_DPI)


def frames(count: int, most: int = MAX_FRAMES) -> np.ndarray:
    """Save indices a movie draws: all, or `most` evenly spread including the first and last."""
    if count <= most:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, most).round().astype(int))


def animate(
    path: str | Path,
    out: str | Path | None = None,
    points: list[str] | None = None,
    run: int = 0,
    fps: int = FPS,
    most: int = MAX_FRAMES,
) -> Path:
    """Write a GIF (or MP4, where ffmpeg is installed) of the picture over the save times."""
    import matplotlib.pyplot as plt
    from matplotlib import animation

    path = Path(path)
    out = Path(out) if out is not None else path.with_name(path.stem + "_tokens.gif")
    kind = out.suffix.lower()
    if kind == ".gif":
        writer = animation.PillowWriter(fps=fps)
    elif kind == ".mp4":
        if not animation.writers.is_available("ffmpeg"):
            raise ScenarioError("--out", "an MP4 needs ffmpeg, which is not installed; write a .gif")
        writer = animation.FFMpegWriter(fps=fps)
    else:
        raise ScenarioError("--out", f"{short_repr(out.name)}: expected a .gif or .mp4 file")
    if fps < 1:
        raise ScenarioError("--fps", f"must be >= 1, got {fps}")
    states = load(path, points, run)
    picture = Picture(states, width=6.4, height=3.2)
    out.parent.mkdir(parents=True, exist_ok=True)
    picture.show(len(states.times) - 1)
    picture.fig.canvas.draw()  # lay the figure out once, then keep it: frames do not jump
    picture.fig.set_layout_engine("none")
    try:
        with writer.saving(picture.fig, str(out), dpi=DPI):
            for k in frames(len(states.times), most):
                picture.show(int(k))
                writer.grab_frame()
    finally:
        plt.close(picture.fig)
    return out
