r"""The error budget of a :class:`dyn.Model`: its step rate, and the continuation of its runs.

A shipped SDE system with time averages gives the engine three things: a step rate L (the
relative weak bias of one step dt is O(L dt), so ``dt = "auto"`` takes dt = step_tol / L), a
solve that draws its noise through the configured integrator from the point's stream (so the
step check can rerun a run at dt and dt/2 on one Brownian path), and ``extend``, which continues
runs from their last states (so a time average can grow its window until it is stationary).
A Model has the last two by construction; the first is the user's:

- ``step_rate(self, spec) -> float``, written on the Model. A model that writes it reads the
  engine's keys of ``[integrator]`` (``burn_in``, ``horizon_cap``, ``step_tol``, ``check_step``)
  and, as an SDE, may ask for ``dt = "auto"`` and ``check_step = true`` (numba backend);
  a model that does not is refused those in one line, as before anything runs.
- :func:`extend`: the default ``Model.extend``. It solves from the carried states (the last
  state of each run, :func:`carry_of`) over the block's times with the point's solver and
  stream, and hands the block's states to the model's own ``observe``; the time-averaged
  outputs' values at the block's times after its first (the carried one) are the block's
  samples. The engine's stationarity check (:mod:`dyn.engine.averaging`) then decides whether
  the window is long enough, as for every system.
"""

from __future__ import annotations

import numpy as np

from ..core import stages
from ..core.contract import AVERAGING_KEYS, Chunk
from ..core.errors import ScenarioError
from ..core.system import System
from . import observe as user_observe
from .observe import averaged


def declares_rate(cls) -> bool:
    """Whether the Model class `cls` writes its own ``step_rate``."""
    owner = next(base for base in cls.__mro__ if "step_rate" in base.__dict__)
    return owner is not System


def declare(cls) -> None:
    """At class creation: a Model that writes ``step_rate`` (and does not set ``integrator``
    itself) reads the engine's [integrator] keys; an SDE one may be step-checked."""
    if "integrator" in cls.__dict__ or not declares_rate(cls):
        return
    cls.integrator = frozenset(cls.integrator) | AVERAGING_KEYS
    if "step_check" not in cls.__dict__:
        cls.step_check = cls.equation == "sde"


def check(model, spec, per_run_arrays: bool) -> None:
    """Time averages need runs the engine can continue: one problem for all of them; the
    stochastic Heun steps on flat geometries and the sphere only."""
    if spec.solver.method == "stochastic_heun":
        from . import geometry as user_geometry

        found = user_geometry.resolve(model.geometry)
        if not (found.flat or found.name == "sphere"):
            raise ScenarioError(
                "integrator.method",
                f"stochastic_heun steps on a flat geometry or the sphere, not on {found.name!r}: use euler_maruyama",
            )
    if per_run_arrays and averaged(model, spec.setup):
        raise ScenarioError(
            "scenario.system",
            f"{type(model).__name__} has time-averaged "
            'outputs and arrays drawn per run (draw = "run"): the runs are '
            "continued with one problem per point; draw the arrays per point",
        )


def extend(model, spec, carry, times) -> Chunk:
    """Continue the runs from `carry` (runs, n, d) at times[0] over `times` (module doc)."""
    names = averaged(model, spec.setup)
    x0 = np.ascontiguousarray(carry, dtype=np.float64)
    noise = {"rng": spec.rng} if model.equation == "sde" else {}
    if noise and spec.solver.backend == "jax":
        block = int(round(times[0] / (times[1] - times[0])))
        noise = {"rng": spec.jax_key(EXTEND_KEY, block)}  # one side key per block
    module = type(model).__module__
    with stages.running(f"{module}.drift"):
        solution = spec.solver.get().solve(model.problem(spec, x0.shape[1:]), x0, times, **noise)
    states = solution.states
    with stages.running(f"{module}.observe"):
        if user_observe.observes(model):  # observe_state at the block's own times
            chunk = user_observe.chunk(model, spec, user_observe.values_of(model, spec, states, times))
        else:
            chunk = model.observe(spec, states)
    values = {}
    for name in names:
        v = np.asarray(chunk.values[name], dtype=np.float64)
        if v.ndim != 2 or v.shape[1] != len(times):
            raise RuntimeError(
                f"{type(model).__name__}.observe returned {name} of shape "
                f"{v.shape} for states at {len(times)} times; a time-averaged "
                "output has one value per run and save time"
            )
        values[name] = v[:, 1:]
    return Chunk(
        values,
        finite=np.isfinite(states).all(axis=tuple(range(1, states.ndim))),
        carry=np.array(states[:, -1], dtype=np.float64),
    )


EXTEND_KEY = 0xE7  # salt of the jax backend's key for a block of the continued runs
