"""Discrete against continuous, path by path: `dyn compare` (and :func:`compare` in Python).

Given a sweep file with saved trajectories and a sweep axis with a reference value (e.g. the
axis `form` and its value `flow`), the distance of every other point along that axis to the
reference point with the same other coordinates, run by run:

    distance = max over saved times (or the final time only) of max over tokens (all state
               dimensions but the last) of |x - x_ref| (Euclidean over the last dimension)

Runs are comparable only when the points drew the same random numbers (the same starts, the same
Brownian path): the axis must be in `[ensemble] common`, else the file is refused. Against a
numeric axis (`against`, e.g. `depth`) the strong error sqrt(E distance^2) is fitted by
log(error) = slope log(axis) + c, with a 95% interval (least squares, Student t), and drawn on
log-log axes beside reference slopes.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from ..core.errors import ScenarioError
from .analysis import open as open_dataset

REFERENCE_SLOPES = {-0.5: ":", -1.0: "--", -2.0: "-."}
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
        try:
            if float(v) == float(reference):
                return v
        except (TypeError, ValueError):
            continue
    return None


def compare(path: str | Path, along: str, reference, *, at: str = "all") -> xr.Dataset:
    """Distances to the reference point along `along`, run by run, as a Dataset with
    `distance` (..., along, run) and, over runs, `error` (RMS: the strong error), `mean` and
    `max`. `at`: "all" saved times (their maximum) or "final"."""
    if at not in ("all", "final"):
        raise ScenarioError("--at", f"must be all or final, got {at!r}")
    with open_dataset(path) as ds:
        scenario = tomllib.loads(ds.attrs["scenario"])
        axes = list(scenario.get("sweep", {}))
        if along not in axes:
            raise ScenarioError("--along", f"{along!r} is not a sweep axis of {path} "
                                f"(axes: {', '.join(axes) or 'none'})")
        if TRAJECTORY not in ds:
            raise ScenarioError("", f"{path} has no saved states: rerun with "
                                "--set output.trajectories=true")
        _check_states_present(Path(path), ds)
        ref = _match(ds[along].values, reference)
        if ref is None:
            raise ScenarioError("--reference", f"{reference!r} is not a value of {along} "
                                f"(values: {', '.join(map(str, ds[along].values))})")
        if along not in scenario["ensemble"].get("common", []):
            raise ScenarioError("--along", f"the runs of {path} do not share random numbers "
                                f"along {along}: rerun with --set 'ensemble.common=[\"{along}\"]'")
        if ds.sizes[along] < 2:
            raise ScenarioError("--along", f"{along} has one value: nothing to compare")
        traj = ds[TRAJECTORY].load()
    state = list(traj.dims[traj.dims.index("trajectory_time") + 1:])
    diff = traj.drop_sel({along: [ref]}) - traj.sel({along: ref})
    norm = np.sqrt((diff ** 2).sum(state[-1], skipna=False))
    if len(state) > 1:
        norm = norm.max(state[:-1], skipna=False)
    if at == "final":
        norm = norm.isel(trajectory_time=-1).drop_vars("trajectory_time")
    else:
        norm = norm.max("trajectory_time", skipna=False)
    run = [d for d in norm.dims if d in ("run", "trajectory_run")][0]
    distance = norm.rename({run: "run"}).rename("distance")
    distance.attrs.update(long_name=f"distance to {along} = {ref} ({at} saved times)")
    out = xr.Dataset({
        "distance": distance,
        "error": np.sqrt((distance ** 2).mean("run")).assign_attrs(
            long_name=f"strong error: RMS over runs of the distance to {along} = {ref}"),
        "mean": distance.mean("run").assign_attrs(long_name="mean distance over runs"),
        "max": distance.max("run").assign_attrs(long_name="largest distance over runs"),
    })
    out.attrs.update(along=along, reference=str(ref), at=at, source=str(path))
    return out


def _check_states_present(path: Path, ds: xr.Dataset) -> None:
    """The saved states live in NAME.h5.d/ beside the file: refuse in one line when that folder,
    or the file of a finished point, is missing (they would read as NaN, silently)."""
    from ..core.contract import FAILED, PENDING
    from ..engine.trajectories import point_file, sidecar_dir

    folder = sidecar_dir(path)
    if not folder.is_dir():
        raise ScenarioError("", f"the saved states of {path} are missing: the folder "
                            f"{folder.name}/ must sit beside it (move the two together)")
    codes = np.asarray(ds["status"].values).reshape(-1)
    finished = np.flatnonzero((codes != PENDING) & (codes != FAILED))
    missing = [i for i in finished if not point_file(folder, int(i)).exists()]
    if missing:
        raise ScenarioError("", f"{len(missing)} of the {len(finished)} finished points of {path} "
                            f"have no file in {folder.name}/ (e.g. {point_file(folder, int(missing[0])).name}): "
                            "run the same `dyn run` again to recompute them")


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


def rates(result: xr.Dataset, against: str) -> dict[tuple, Rate]:
    """The fitted rate of the strong error against `against`, per combination of other axes."""
    error = result["error"]
    if against not in error.dims:
        raise ScenarioError("--against", f"{against!r} is not an axis of the comparison "
                            f"(axes: {', '.join(error.dims) or 'none'})")
    if error[against].dtype.kind not in "fiu":
        raise ScenarioError("--against", f"{against} is not numeric")
    others = [d for d in error.dims if d != against]
    found = {}
    for key in np.ndindex(*(error.sizes[d] for d in others)):
        label = tuple((d, error[d].values[i].item()) for d, i in zip(others, key))
        found[label] = fit_rate(error.isel(dict(zip(others, key))), against)
    return found


def plot(result: xr.Dataset, against: str, out: str | Path) -> Path:
    """Strong error against `against` on log-log axes, fitted rates in the legend, and
    reference slopes through the first point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fitted = rates(result, against)
    values = np.asarray(result["error"].values, dtype=float)
    if not (np.isfinite(values) & (values > 0)).any():
        raise ScenarioError("--against", "no finite, positive error to draw on log axes "
                            "(are the points computed?)")
    fig, ax = plt.subplots(figsize=(7, 5))
    error = result["error"]
    first = None
    for label, rate in fitted.items():
        curve = error.sel(dict(label)) if label else error
        x, y = curve[against].values.astype(float), curve.values
        name = ", ".join(f"{k} = {v}" for k, v in label) or "error"
        ax.plot(x, y, "o-", ms=4, label=f"{name}: rate {rate}")
        first = first if first is not None else (x, y)
    if first is not None:
        x, y = first
        for slope, style in REFERENCE_SLOPES.items():
            ax.plot(x, y[0] * (x / x[0]) ** slope, style, color="gray", lw=1, label=f"slope {slope:g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(against)
    ax.set_ylabel(f"RMS distance to {result.attrs['along']} = {result.attrs['reference']}")
    ax.set_title(f"{Path(result.attrs['source']).stem}: {result.attrs['along']} against "
                 f"{result.attrs['reference']} ({result.attrs['at']} saved times)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
