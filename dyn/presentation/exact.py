"""Distance of each run to its own closed form: `dyn compare --reference exact`.

A model that declares ``reference(x0, <params>, t)`` (:mod:`dyn.user.reference`) gives, for each
run, the state it should be at from its own start x0 (the saved state at the first save time).
The distance of a run is that of :mod:`dyn.presentation.comparison`,

    distance = max over saved times (or the final time only) of max over tokens of
               |x - x_ref| (Euclidean over the last dimension),

and the result has the same variables (`distance` per run, `error` = sqrt(E distance^2), `mean`,
`max`, `status`), so the rates, their intervals, the error bars and the picture of
`dyn compare --against` are computed by the same functions. Every sweep point is compared (no
axis is singled out); a point that is not ok has no distance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ..core.contract import OK
from ..core.errors import ScenarioError
from .analysis import open as open_dataset, scenario_of
from .comparison import TRAJECTORY, _check_states_present

EXACT = "exact"


def compare_exact(path: str | Path, *, at: str = "all", trust_model: bool = False) -> xr.Dataset:
    """The distances of every run of every point of `path` to its model's reference from its
    own start (module doc), as :func:`dyn.presentation.comparison.compare` returns them.

    The reference is the model's code: a shipped system's is used as is; a user's model is
    loaded only with `trust_model`, after its module is checked against the recorded sha256
    (:func:`dyn.presentation.facts.trusted_system`)."""
    from ..user import reference
    from .facts import FLAG, model_system

    if at not in ("all", "final"):
        raise ScenarioError("--at", f"must be all or final, got {at!r}")
    with open_dataset(path) as ds:
        doc = scenario_of(ds)
        if TRAJECTORY not in ds:
            raise ScenarioError("", f"{path} has no saved states: rerun with --set output.trajectories=true")
        _check_states_present(Path(path), ds)
        traj = ds[TRAJECTORY].load()
        status = ds["status"].load()
        from .words import settings

        settings_text = settings(ds)
    head = doc["scenario"]
    system = model_system(head, trust_model)
    if system is None:
        raise ScenarioError(
            FLAG,
            f"{path} was written by the model {head.get('system')!r}: its "
            "reference is that model's code, loaded only with --trust-model "
            "(checked against the recorded sha256)",
        )
    if reference.function(system) is None:
        raise ScenarioError(
            "--reference",
            f"system {system.name} declares no reference(x0, <params>, t): compare along an axis instead (--along)",
        )
    run = [d for d in traj.dims if d in ("run", "trajectory_run")][0]
    axes = list(traj.dims[: traj.dims.index(run)])
    state = list(traj.dims[traj.dims.index("trajectory_time") + 1 :])
    times = np.asarray(traj["trajectory_time"].values, dtype=float)
    if times[0] != 0.0:
        raise ScenarioError(
            "", f"the saved states of {path} do not start at t = 0: the reference needs each run's start"
        )
    fixed = {k: f.default for k, f in system.params.items()} | dict(doc.get("params", {}))
    distance = np.full(tuple(traj.sizes[a] for a in axes) + (traj.sizes[run],), np.nan)
    for where in np.ndindex(*distance.shape[:-1]):
        if int(status.values[where]) != OK:
            continue
        values = fixed | {a: traj[a].values[i].item() for a, i in zip(axes, where, strict=True)}
        x = np.asarray(traj.isel(dict(zip(axes, where, strict=True))).transpose(run, "trajectory_time", *state))
        ref = reference.states(system, values, x[:, 0], times)
        if ref.shape != x.shape:
            raise ScenarioError(
                "--reference",
                f"{type(system).__name__}.reference returned "
                f"states of shape {ref.shape[2:]}; the saved ones are {x.shape[2:]}",
            )
        norm = np.sqrt(((x - ref) ** 2).sum(axis=-1))
        norm = norm.reshape(norm.shape[0], norm.shape[1], -1).max(axis=2)
        distance[where] = norm[:, -1] if at == "final" else norm.max(axis=1)
    coords = {a: traj[a].values for a in axes}
    dist = xr.DataArray(
        distance,
        dims=(*axes, "run"),
        coords=coords,
        name="distance",
        attrs={"long_name": f"distance to the model's reference ({at} saved times)"},
    )
    out = xr.Dataset(
        {
            "distance": dist,
            "error": np.sqrt((dist**2).mean("run")).assign_attrs(
                long_name="strong error: RMS over runs of the distance to the reference"
            ),
            "mean": dist.mean("run").assign_attrs(long_name="mean distance over runs"),
            "median": dist.median("run").assign_attrs(long_name="median distance over runs"),
            "max": dist.max("run").assign_attrs(long_name="largest distance over runs"),
            "status": status.assign_attrs(long_name="status of the point (1 ok; else no distance)"),
        }
    )
    out.attrs.update(along=EXACT, reference=EXACT, at=at, source=str(path), settings=settings_text)
    return out
