"""Discrete against continuous, path by path: `dyn compare` (and :func:`compare` in Python).

Given a sweep file with saved trajectories and a sweep axis with a reference value (e.g. the
axis `form` and its value `flow`), the distance of every other point along that axis to the
reference point with the same other coordinates, run by run:

    distance = max over saved times (or the final time only) of max over tokens (all state
               dimensions but the last) of |x - x_ref| (Euclidean over the last dimension)

Runs are comparable only when the points drew the same random numbers (the same starts, the same
Brownian path): the axis must be in `[ensemble] common`, else the file is refused. Against a
numeric axis (`against`, e.g. `depth`) the strong error sqrt(E distance^2) is fitted by
log(error) = slope log(axis) + c, with a 95% interval (least squares, Student t): over all points
(:func:`rates`), and over the asymptotic range alone (:func:`asymptotic_rates`; the points of
:func:`asymptotic`: the upper half of the axis, where an O(1/L^2) correction of the smallest
depths no longer bends the line); `dyn compare` prints both, naming the points of the second
(:func:`rate_lines`), and the picture draws both. The picture draws the error on log-log axes with error
bars of one standard error (from the runs' distances), the asymptotic fit over the points it
uses (filled; the others open) and short reference slopes beside it (-1/2, -1, -2; or +1/2, +1,
+2 for an error that grows with the axis, as with the step dt), which never move the axes' limits.

The weak error (`--observable`, :mod:`dyn.presentation.bias`): the bias of an output paired run
by run, fitted and drawn by the same functions (`error` = |bias|). When the reference lies on
the fitted axis (`--along dt --against dt`), the asymptotic range is the half of the points
nearest to it (the finest steps), not the largest values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from ..core.contract import DIVERGED, OK
from ..core.errors import ScenarioError
from .analysis import open as open_dataset, scenario_of

REFERENCE_SLOPES = {-0.5: ":", -1.0: "--", -2.0: "-."}
GUIDE_BELOW = 0.4  # reference slopes pass this factor below the fitted line, beside the data
MIN_FIT_POINTS = 3  # the asymptotic fit uses at least this many points (a 95% interval needs 3)
TRAJECTORY = "trajectory"


@dataclass(frozen=True)
class Rate:
    """A fitted log-log slope with its 95% interval (nan where fewer than 3 points)."""

    slope: float
    lo: float
    hi: float
    points: int

    def __str__(self) -> str:
        if not math.isfinite(self.lo):
            return f"{self.slope:.3f} ({self.points} points)"
        return f"{self.slope:.3f} [{self.lo:.3f}, {self.hi:.3f}] ({self.points} points)"


def _match(values: np.ndarray, reference: str | float):
    """The coordinate value equal to `reference` (given as text on the command line)."""
    for v in values:
        if str(v) == str(reference):
            return v
        if isinstance(v, (bool, np.bool_)):  # a switch: true/false as TOML writes it
            if str(reference).lower() in ("true", "false") and bool(v) == (str(reference).lower() == "true"):
                return v
            continue
        try:
            if float(v) == float(reference):
                return v
        except (TypeError, ValueError):
            continue
    return None


def compare(path: str | Path, along: str, reference, *, at: str = "all", trust_model: bool = False) -> xr.Dataset:
    """Distances to the reference point along `along`, run by run, as a Dataset with
    `distance` (..., along, run) and, over runs, `error` (RMS: the strong error), `mean` and
    `max`. `at`: "all" saved times (their maximum) or "final". `trust_model`: the title's
    settings may read the parameters' defaults from the model's module when the file records
    none (:func:`dyn.presentation.facts.trusted_system`); otherwise no code the file names runs.

    Returns the Dataset (in memory). Raises MissingFile (a FileNotFoundError) when `path` does
    not exist, and ScenarioError (one line) when it is not a readable sweep file, `along` is not
    a sweep axis with two values or more, `reference` is not one of its values, the file saved
    no states, or its runs do not share random numbers along `along`."""
    if at not in ("all", "final"):
        raise ScenarioError("--at", f"must be all or final, got {at!r}")
    with open_dataset(path) as ds:
        scenario = scenario_of(ds)
        axes = list(scenario.get("sweep", {}))
        if along not in axes:
            raise ScenarioError(
                "--along", f"{along!r} is not a sweep axis of {path} (axes: {', '.join(axes) or 'none'})"
            )
        if TRAJECTORY not in ds:
            raise ScenarioError("", f"{path} has no saved states: rerun with --set output.trajectories=true")
        _check_states_present(Path(path), ds)
        ref = _match(ds[along].values, reference)
        if ref is None:
            raise ScenarioError(
                "--reference",
                f"{reference!r} is not a value of {along} (values: {', '.join(map(str, ds[along].values))})",
            )
        if along not in scenario.get("ensemble", {}).get("common", []):
            raise ScenarioError(
                "--along",
                f"the runs of {path} do not share random numbers "
                f"along {along}: rerun with --set 'ensemble.common=[\"{along}\"]'",
            )
        if ds.sizes[along] < 2:
            raise ScenarioError("--along", f"{along} has one value: nothing to compare")
        traj = ds[TRAJECTORY].load()
        status = ds["status"].load()
        from .words import settings

        settings_text = settings(ds, trust_model)  # for the picture's title
    state = list(traj.dims[traj.dims.index("trajectory_time") + 1 :])
    # by position: label selection of a bool axis would read [True] as a mask, not a label
    where = int(np.flatnonzero(traj[along].values == ref)[0])
    others = [i for i in range(traj.sizes[along]) if i != where]
    diff = traj.isel({along: others}) - traj.isel({along: where}, drop=True)
    norm = np.sqrt((diff**2).sum(state[-1], skipna=False))
    if len(state) > 1:
        norm = norm.max(state[:-1], skipna=False)
    if at == "final":
        norm = norm.isel(trajectory_time=-1).drop_vars("trajectory_time")
    else:
        norm = norm.max("trajectory_time", skipna=False)
    run = [d for d in norm.dims if d in ("run", "trajectory_run")][0]
    distance = norm.rename({run: "run"}).rename("distance")
    # a pair whose point or reference is not ok (diverged, failed) has no distance: its status
    # is the point's own if that is not ok, else its reference's
    mine, theirs = status.isel({along: others}), status.isel({along: where}, drop=True)
    pair = xr.where(mine != OK, mine, theirs).astype(status.dtype)
    distance = distance.where(pair == OK)
    distance.attrs.update(long_name=f"distance to {along} = {ref} ({at} saved times)")
    out = xr.Dataset(
        {
            "distance": distance,
            "error": np.sqrt((distance**2).mean("run")).assign_attrs(
                long_name=f"strong error: RMS over runs of the distance to {along} = {ref}"
            ),
            "mean": distance.mean("run").assign_attrs(long_name="mean distance over runs"),
            "median": distance.median("run").assign_attrs(long_name="median distance over runs"),
            "max": distance.max("run").assign_attrs(long_name="largest distance over runs"),
            "status": pair.assign_attrs(
                long_name="status of the point, else of its reference (1 ok; 2 diverged, 3 failed: no distance)"
            ),
        }
    )
    out.attrs.update(along=along, reference=str(ref), at=at, source=str(path), settings=settings_text)
    return out


def _check_states_present(path: Path, ds: xr.Dataset) -> None:
    """The saved states live in NAME.h5.d/ beside the file: refuse in one line when that folder,
    or the file of a finished point, is missing (they would read as NaN, silently)."""
    from ..core.contract import FAILED, PENDING
    from ..engine.trajectories import point_file, sidecar_dir

    folder = sidecar_dir(path)
    if not folder.is_dir():
        raise ScenarioError(
            "",
            f"the saved states of {path} are missing: the folder "
            f"{folder.name}/ must sit beside it (move the two together)",
        )
    codes = np.asarray(ds["status"].values).reshape(-1)
    finished = np.flatnonzero((codes != PENDING) & (codes != FAILED))
    missing = [i for i in finished if not point_file(folder, int(i)).exists()]
    if missing:
        raise ScenarioError(
            "",
            f"{len(missing)} of the {len(finished)} finished points of {path} "
            f"have no file in {folder.name}/ (e.g. {point_file(folder, int(missing[0])).name}): "
            "run the same `dyn run` again to recompute them",
        )


def fit_rate(error: xr.DataArray, against: str) -> Rate:
    """Slope of log(error) against log(coordinate `against`), with a 95% interval."""
    from scipy import stats

    x = np.asarray(error[against].values, dtype=float)
    y = np.asarray(error.values, dtype=float)
    ok = np.isfinite(y) & (y > 0) & (x > 0)
    if ok.sum() < 2:
        return Rate(math.nan, math.nan, math.nan, int(ok.sum()))
    fit = stats.linregress(np.log(x[ok]), np.log(y[ok]))
    if ok.sum() < 3:
        return Rate(float(fit.slope), math.nan, math.nan, int(ok.sum()))
    half = stats.t.ppf(0.975, ok.sum() - 2) * fit.stderr
    return Rate(float(fit.slope), float(fit.slope - half), float(fit.slope + half), int(ok.sum()))


STATISTICS = ("error", "mean", "median")  # what --statistic fits: RMS (strong error), mean, median


def select(result: xr.Dataset, statistic: str) -> xr.Dataset:
    """The comparison with `statistic` (mean or median distance over runs) as the curve that
    rates and the picture fit (`error`): a heavy-tailed distance (an in-context error ~ 1/(T
    delta)) has a mean, a median and an RMS that fall at different rates."""
    if statistic not in STATISTICS:
        raise ScenarioError("--statistic", f"must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    if statistic == "error":
        return result
    if statistic not in result:
        raise ScenarioError("--statistic", f"the comparison has no {statistic}")
    out = result.assign(error=result[statistic])
    out.attrs["statistic"] = statistic
    return out


def rates(result: xr.Dataset, against: str) -> dict[tuple, Rate]:
    """The fitted rate of the strong error against `against`, per combination of other axes."""
    error = result["error"]
    if against not in error.dims:
        raise ScenarioError(
            "--against", f"{against!r} is not an axis of the comparison (axes: {', '.join(error.dims) or 'none'})"
        )
    if error[against].dtype.kind not in "fiu":
        raise ScenarioError("--against", f"{against} is not numeric")
    others = [d for d in error.dims if d != against]
    found = {}
    for key in np.ndindex(*(error.sizes[d] for d in others)):
        label = tuple((d, error[d].values[i].item()) for d, i in zip(others, key, strict=True))
        found[label] = fit_rate(error.isel(dict(zip(others, key, strict=True))), against)
    return found


def asymptotic(x, toward: float | None = None) -> np.ndarray:
    """Which points of the axis values `x` the asymptotic fit uses: half of them (at least
    MIN_FIT_POINTS) where the leading order dominates: the largest values, or with `toward` (the
    reference's value on the same axis, e.g. the finest step dt) those nearest to it in log."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x if toward is None else -np.abs(np.log(x / toward)))
    keep = np.zeros(x.size, dtype=bool)
    keep[order[-max(MIN_FIT_POINTS, -(-x.size // 2)) :]] = True
    return keep


def _toward(result: xr.Dataset, against: str) -> float | None:
    """The reference's value when it lies on the axis fitted against (`--along dt --against
    dt`): the limit the error vanishes in, where the asymptotic range is; else None."""
    if result.attrs.get("along") != against:
        return None
    try:
        value = float(result.attrs["reference"])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value > 0 else None


def fitted_points(result: xr.Dataset, against: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The points of one curve (axis values x, errors y) that the asymptotic fit uses: among the
    finite, positive errors, those :func:`asymptotic` picks."""
    ok = np.isfinite(y) & (y > 0) & (x > 0)
    toward = _toward(result, against)
    if toward is None:
        return asymptotic(x) & ok
    use = np.zeros(x.size, dtype=bool)
    use[np.flatnonzero(ok)[asymptotic(x[ok], toward)]] = True
    return use


def asymptotic_rates(result: xr.Dataset, against: str) -> dict[tuple, tuple[Rate, np.ndarray]]:
    """The rate fitted over the asymptotic range alone (:func:`fitted_points`), per combination of
    the other axes (as :func:`rates`), with the values of `against` it used: (rate, values)."""
    found = {}
    for label in rates(result, against):
        curve = result["error"].sel(dict(label)) if label else result["error"]
        x, y = curve[against].values.astype(float), curve.values.astype(float)
        use = fitted_points(result, against, x, y)
        found[label] = (fit_rate(curve.isel({against: np.flatnonzero(use)}), against), np.sort(x[use]))
    return found


def rate_lines(result: xr.Dataset, against: str) -> list[str]:
    """What `dyn compare --against` prints: per combination of the other axes, the rate over all
    points and the asymptotic fit, naming the points it used (as the picture does)."""
    lines = []
    tail = asymptotic_rates(result, against)
    for label, rate in rates(result, against).items():
        where = ", ".join(f"{k} = {v}" for k, v in label)
        what = f" of the {result.attrs['statistic']}" if "statistic" in result.attrs else ""
        head = f"rate{what} against {against}{' (' + where + ')' if where else ''}"
        lines.append(f"{head}, all points: {rate}")
        fit, used = tail[label]
        if used.size >= 2:
            points = ", ".join(f"{v:g}" for v in used)
            lines.append(f"{head}, asymptotic fit on {against} = {points}: {fit}")
    return lines


def heading(attrs: dict) -> str:
    """The comparison in a sentence: what is compared with what, and over which times."""
    along, reference = attrs["along"], attrs["reference"]
    if "observable" in attrs:  # dyn.presentation.bias: a weak error, run by run
        return (
            f"{Path(attrs['source']).stem}: bias of {attrs['observable']} against "
            f"{attrs['reference_point']}, paired run by run"
        )
    times = "the final saved time" if attrs.get("at") == "final" else "all saved times"
    if along == reference == "exact":  # dyn.presentation.exact: each run against its own start
        return (
            f"{Path(attrs['source']).stem}: distance of each run to the model's reference "
            f"from its own start, the largest over tokens and {times}"
        )
    return (
        f"{Path(attrs['source']).stem}: distance of each {along} to {along} = {reference}, "
        f"the largest over tokens and {times}"
    )


def _standard_error(result: xr.Dataset, label: tuple) -> np.ndarray:
    """One standard error of the strong error sqrt(mean d^2), from the runs' distances d (the
    delta method: se(mean d^2) / (2 sqrt(mean d^2))); a bias's (:mod:`.bias`) is its own."""
    if "bias_se" in result:
        return (result["bias_se"].sel(dict(label)) if label else result["bias_se"]).values
    statistic = result.attrs.get("statistic", "error")
    if statistic != "error":  # the mean's standard error; none drawn for the median
        d = result["distance"].sel(dict(label)) if label else result["distance"]
        if statistic == "median" or d.sizes["run"] < 2:
            return np.full(d.isel(run=0).shape, np.nan)
        return (d.std("run", ddof=1) / np.sqrt(d.count("run"))).values
    d2 = result["distance"] ** 2
    d2 = d2.sel(dict(label)) if label else d2
    runs = d2.sizes["run"]
    rms = np.sqrt(d2.mean("run"))
    if runs < 2:
        return np.full(rms.shape, np.nan)
    return (d2.std("run", ddof=1) / np.sqrt(runs) / (2 * rms)).values


def plot(result: xr.Dataset, against: str, out: str | Path, style: str = "default") -> Path:
    """Strong error against `against` on log-log axes (see :func:`figure`), saved to `out`."""
    from .styles import check_suffix, save, styled

    out = check_suffix(Path(out))
    with styled(style) as look:
        return save(figure(result, against, style), out, look.dpi)


def figure(result: xr.Dataset, against: str, style: str = "default"):
    """The figure of the strong error against `against` on log-log axes (see the module doc),
    unsaved: the rate over all points and over the asymptotic range in the legend, short
    reference slopes beside the fit; points with no distance (the point or its reference
    diverged or failed) marked at the bottom of the panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .styles import MARK_STYLES, styled
    from .words import axis_label, chars_in, figure_legend, fit_height, wrap_text

    fitted = rates(result, against)
    tail = asymptotic_rates(result, against)
    values = np.asarray(result["error"].values, dtype=float)
    if not (np.isfinite(values) & (values > 0)).any():
        raise ScenarioError("--against", "no finite, positive error to draw on log axes (are the points computed?)")
    with styled(style) as look:
        width, height = look.single
        fig, ax = plt.subplots(figsize=(width, height), layout="constrained", dpi=look.dpi)
        error = result["error"]
        guide, marked = None, set()
        for label, rate in fitted.items():
            curve = error.sel(dict(label)) if label else error
            x, y = curve[against].values.astype(float), curve.values.astype(float)
            name = ", ".join(f"{k} = {v}" for k, v in label) or "error"
            use = fitted_points(result, against, x, y)
            bars = ax.errorbar(
                x,
                y,
                yerr=_standard_error(result, label),
                fmt="o-",
                ms=4,
                mfc="white",
                capsize=2,
                label=f"{name}: rate {rate} over all points",
            )
            color = bars.lines[0].get_color()
            ax.plot(x[use], y[use], "o", ms=4, color=color, zorder=4)  # the fitted points, filled
            if use.sum() >= 2:
                fit = tail[label][0]
                line = np.exp(np.polyfit(np.log(x[use]), np.log(y[use]), 1)[1]) * x[use] ** fit.slope
                ax.plot(
                    x[use],
                    line,
                    "-",
                    color="black",
                    lw=0.8,
                    zorder=3,
                    label=f"fit on the filled points, {against} = {x[use].min():g} ... {x[use].max():g}: rate {fit}",
                )
                guide = guide or (x[use], line * GUIDE_BELOW, fit.slope)
            if "status" in result:
                codes = result["status"].sel(dict(label)) if label else result["status"]
                codes = np.asarray(codes.values).reshape(-1)
                for reason, hit in (("diverged", codes == DIVERGED), ("failed", (codes != OK) & (codes != DIVERGED))):
                    if hit.any():
                        _no_value(ax, x[hit], MARK_STYLES[reason], color)
                        marked.add(reason)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.autoscale_view()
        ax.set_ylim(ax.get_ylim())  # the guides below must not move the limits
        ax.set_xlim(ax.get_xlim())
        for axis in (ax.xaxis, ax.yaxis):
            _sparse_minor_labels(axis)
        if guide is not None:  # short, through the middle of the fitted range, below the fit
            x, line, rising = guide
            order = np.argsort(x)  # np.interp reads increasing values (a step axis may fall)
            x, line = x[order], line[order]
            middle = np.sqrt(x.min() * x.max())
            reach = (x.max() / x.min()) ** 0.25  # half the fitted range, in log
            span = np.geomspace(middle / reach, middle * reach, 8)
            fit = np.exp(np.interp(np.log(span), np.log(x), np.log(line)))
            for slope, dash in REFERENCE_SLOPES.items():
                slope = -slope if rising > 0 else slope  # an error falling with the step: +1, +2
                shape = (span / middle) ** slope
                scale = (fit / shape).min()  # GUIDE_BELOW under the fit all along, whatever slope
                ax.plot(span, scale * shape, dash, color="gray", lw=0.8, label=f"slope {slope:g}")
        for reason in sorted(marked):
            style = MARK_STYLES[reason]
            ax.plot([], [], style.marker, color="0.6", mec=style.color, ls="none", label=style.label)
        ax.set_xlabel(axis_label(result[against]))
        ax.set_ylabel(axis_label(error))
        head = heading(result.attrs)
        chars = chars_in(width, "figure.titlesize")
        title = fig.suptitle("\n".join(wrap_text(t, chars) for t in (head, result.attrs.get("settings", "")) if t))
        ax.grid(alpha=0.3, which="both")
        from matplotlib.lines import Line2D

        over = "over paired runs" if "bias_se" in result else "over runs"
        notes = [(Line2D([], [], color="0.3", marker="|", ls="none", ms=8), f"error bars: one standard error ({over})")]
        legend = figure_legend(fig, [ax], notes)
        fit_height(fig, width, height, [title, legend])
    return fig


MINOR_LABELS = (2, 5)  # the minor ticks labelled on a short log axis: 2 and 5 times a power of 10


def _sparse_minor_labels(axis) -> None:
    """On a log axis, label only the minor ticks at 2 and 5 times a power of ten: where the axis
    holds at most one power of ten, matplotlib labels several minor ticks of each decade, and
    their labels (2 x 10^-2, 3 x 10^-2, ...) run into each other. An axis holding two powers of
    ten or more keeps matplotlib's labels (the powers alone)."""
    from matplotlib.ticker import FuncFormatter

    lo, hi = sorted(axis.get_view_interval())
    if lo > 0 and math.floor(math.log10(hi)) - math.ceil(math.log10(lo)) >= 1:
        return

    def label(value, _position):
        if not value > 0:
            return ""
        power = math.floor(math.log10(value) + 1e-9)
        mantissa = value / 10.0**power
        if round(mantissa) not in MINOR_LABELS or abs(mantissa - round(mantissa)) > 1e-6:
            return ""
        return f"${round(mantissa)}\\times10^{{{power}}}$"

    axis.set_minor_formatter(FuncFormatter(label))


def _no_value(ax, x, style, color) -> None:
    """Markers at the bottom edge of the panel at `x`: points with no distance."""
    from matplotlib.transforms import blended_transform_factory

    ax.plot(
        np.asarray(x, dtype=float),
        np.zeros(len(x)),
        style.marker,
        ms=6,
        color=color,
        mec=style.color,
        clip_on=False,
        zorder=5,
        transform=blended_transform_factory(ax.transData, ax.transAxes),
    )
