"""What a system receives: a frozen run specification, never the scenario document.

    Setup    what every point of a sweep shares: fixed parameters, runs, save times, horizon,
             the configured solver, the memory budget of a chunk of runs, the trajectory request
    RunSpec  one point: its parameter values, its random streams, and the Setup

The engine builds them (:meth:`dyn.engine.scenario.Scenario.setup`,
:meth:`~dyn.engine.scenario.Scenario.spec`); systems read them. Neither knows TOML.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np

from . import sweep

CHUNK_BYTES = 64 * 2**20  # memory budget of one chunk of runs (states of the runs in flight)
RUN_KEY = 0x52  # spawn-key salt of per-run streams (any constant)
SHARED_MAX = 256  # values Setup.shared keeps


def _frozen(values: Mapping) -> Mapping:
    return MappingProxyType(dict(values))


@dataclass(frozen=True)
class Solver:
    """The configured integrator of `[integrator]`: backend, method and the solver's options."""

    backend: str
    method: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def get(self, **overrides):
        """A fresh integrator instance (options overridden, e.g. a step size set by the model)."""
        import integrators

        return integrators.get(self.backend, self.method, **{**self.options, **overrides})


@dataclass(frozen=True, eq=False)
class Setup:
    """What every point of a sweep shares."""

    params: Mapping[str, Any]  # the fixed [params] (swept keys absent)
    axes: Mapping[str, tuple]  # the sweep axes and their values, in file order
    runs: int
    seed: int
    horizon: float
    saves: int  # save intervals on [0, horizon]
    solver: Solver
    common: tuple[str, ...] = ()  # sweep axes along which points share random numbers
    spacing: str = "linear"  # save times: "linear" on [0, T], or "log" (0, then t_min ... T)
    t_min: float | None = None
    chunk_bytes: int = CHUNK_BYTES
    trajectories: bool = False  # also save states (every trajectory_every-th save time,
    trajectory_every: int = 1  # the first trajectory_runs runs, 0 = all)
    trajectory_runs: int = 0
    observables: tuple[str, ...] = ()  # [output] observables: the outputs kept (() = all)
    per_run: tuple[str, ...] = ()  # [output] per_run: outputs whose every run's value is kept
    # time averages (dyn.engine.averaging): the window's start (None: MSER's choice), the longest
    # horizon the runs are extended to; the step tolerance of dt = "auto" and the step check
    burn_in: float | None = None
    horizon_cap: float | None = None
    step_tol: float = 0.01
    check_step: bool = False
    # what a worker needs to make any point's RunSpec without the scenario document: the
    # system's registered name, whether dt = "auto", and the scenario hash (stamped on files)
    system_name: str = ""
    system_file: str = ""  # the module file of a system named by import path (workers import it)
    auto_dt: bool = False
    tag: str = ""
    # sweep axes that set the solver of each point (integrator.dt, integrator.method), not a
    # parameter of the system: see :meth:`solver_of`
    solver_axes: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "params", _frozen(self.params))
        object.__setattr__(self, "axes", _frozen({k: tuple(v) for k, v in self.axes.items()}))
        object.__setattr__(self, "_shared", {})

    def __reduce__(self):
        # pickled for pool workers as plain fields: the frozen views and the cache stay behind
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(params=dict(self.params), axes={k: list(v) for k, v in self.axes.items()})
        return _setup_from_fields, (values,)

    def keeps(self, name: str) -> bool:
        """Whether the output `name` is computed and kept (every output unless the scenario's
        [output] observables names a subset); a system may skip the work of the others."""
        return not self.observables or name in self.observables

    @property
    def count(self) -> int:
        """Number of sweep points."""
        return sweep.count(self.axes)

    def spec(self, index: int, system=None) -> RunSpec:
        """The run specification of point `index` (its values, its random stream and, with
        dt = "auto", its step: step_tol / system.step_rate). `system` is the System these points
        run (the engine looks it up by `system_name`); only dt = "auto" needs it."""
        values = sweep.point(self.params, self.axes, index)
        options = self.solver_of(values)
        values = {k: v for k, v in values.items() if k not in self.solver_axes}
        spec = RunSpec(self, index, values, sweep.stream_index(self.axes, index, self.common), options)
        if self.auto_dt:
            if system is None:
                raise ValueError(f"dt = 'auto' needs the system ({self.system_name}) to choose the step")
            rate = system.step_rate(spec)
            if rate is None:
                from .errors import ScenarioError

                raise ScenarioError(
                    "integrator.dt",
                    f"system {self.system_name} does not choose its step: give dt a number (or declare its step_rate)",
                )
            spec = spec.variant(dt=self.step_tol / rate)
        return spec

    def solver_of(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The solver options a point's solver axes set (`[sweep] dt`, `[sweep] method`). With dt
        in `[ensemble] common`, also refine = dt / min(dt values) (:func:`refine_of`): every step
        h draws its increment as the sum of h / h_min increments of the finest step, so every
        point follows one Brownian path (the integrators' option ``refine``)."""
        found = {axis: values[axis] for axis in self.solver_axes}
        if "dt" in found and "dt" in self.common:
            found["refine"] = refine_of(found["dt"], min(self.axes["dt"]))
        return found

    def shared(self, key: tuple, compute):
        """A value computed once per sweep (in each process) and shared by every point that asks
        with an equal `key` (e.g. a reference solution the points of a depth sweep share): the
        engine's cache, living as long as this Setup, bounded by SHARED_MAX entries."""
        if key not in self._shared:
            if len(self._shared) >= SHARED_MAX:
                self._shared.clear()
            self._shared[key] = compute()
        return self._shared[key]

    @property
    def swept(self) -> tuple[str, ...]:
        """Names of the sweep axes."""
        return tuple(self.axes)

    def values_of(self, key: str) -> tuple:
        """Every value `key` takes in the sweep (its axis, or its one fixed value)."""
        return self.axes[key] if key in self.axes else (self.params.get(key),)

    @cached_property
    def times(self) -> np.ndarray:
        """The save times (read-only): saves + 1 equally spaced times on [0, horizon], or with log
        spacing 0 followed by `saves` geometric times from t_min to horizon."""
        if self.spacing == "log":
            t = np.concatenate([[0.0], np.geomspace(self.t_min, self.horizon, self.saves)])
        else:
            t = np.linspace(0.0, self.horizon, self.saves + 1)
        t.setflags(write=False)
        return t

    def common_rng(self, *key: int) -> np.random.Generator:
        """A stream shared by every point (common random numbers): see
        :func:`dyn.core.sweep.common_rng`."""
        return sweep.common_rng(self.seed, *key)


def refine_of(dt: float, finest: float) -> int:
    """The integer r = dt / finest (within rounding), the sub-increments of a step dt that make
    its Brownian path the finest step's; ValueError when dt is not an integer multiple of it."""
    r = round(dt / finest)
    if r < 1 or abs(r * finest - dt) > 1e-9 * dt:
        raise ValueError(f"dt = {dt:g} is not an integer multiple of the finest step {finest:g}")
    return int(r)


def _setup_from_fields(values: dict) -> Setup:
    return Setup(**values)


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One sweep point as a system sees it."""

    setup: Setup
    index: int
    values: Mapping[str, Any]  # every parameter of the point, swept ones included
    stream: int = -1  # the point's stream index (default: its index; see sweep.stream_index)
    # solver options of this point over the Setup's (e.g. the step dt = "auto" chose)
    solver_options: Mapping[str, Any] = field(default_factory=dict)
    salt: tuple[int, ...] = ()  # a side stream of the point (e.g. the step check's runs)

    def __post_init__(self):
        object.__setattr__(self, "values", _frozen(self.values))
        object.__setattr__(self, "solver_options", _frozen(self.solver_options))
        if self.stream < 0:
            object.__setattr__(self, "stream", self.index)

    @cached_property
    def rng(self) -> np.random.Generator:
        """The point's stream, SeedSequence(seed, spawn_key=(stream,)); one Generator per spec,
        consumed in run order, chunk after chunk. Points that differ only along common axes
        have the same stream. With a salt, SeedSequence(seed, spawn_key=(stream, *salt))."""
        if self.salt:
            return sweep.common_rng(self.setup.seed, self.stream, *self.salt)
        return sweep.rng(self.setup.seed, self.stream)

    def variant(self, salt: tuple[int, ...] = (), **solver_options) -> RunSpec:
        """The same point with other solver options and, with a salt, its own fresh stream."""
        return RunSpec(
            self.setup, self.index, self.values, self.stream, {**self.solver_options, **solver_options}, tuple(salt)
        )

    def jax_key(self, *salt: int) -> np.ndarray:
        """The point's JAX PRNG key data (uint32[2]), from the same SeedSequence(seed,
        spawn_key=(stream, *self.salt)) as :attr:`rng`: the `jax` backend's noise (same seed,
        same device, same numbers); extra `salt` names a side stream (e.g. one per extension)."""
        key = (self.stream, *self.salt, *salt)
        return np.random.SeedSequence(self.setup.seed, spawn_key=key).generate_state(2)

    def run_rng(self, run: int) -> np.random.Generator:
        """Run `run`'s own stream, SeedSequence(seed, spawn_key=(stream, RUN_KEY, run)): for
        numbers a run must draw the same way whatever the point's other parameters (e.g. a
        Brownian path refined consistently across depths)."""
        return sweep.common_rng(self.setup.seed, self.stream, RUN_KEY, run)

    # the Setup fields a system reads most, without the extra hop
    @property
    def runs(self) -> int:
        return self.setup.runs

    @property
    def times(self) -> np.ndarray:
        return self.setup.times

    @property
    def horizon(self) -> float:
        return self.setup.horizon

    @property
    def solver(self) -> Solver:
        if not self.solver_options:
            return self.setup.solver
        base = self.setup.solver
        options = {**base.options, **self.solver_options}
        return Solver(base.backend, options.pop("method", base.method), options)

    @property
    def dt(self) -> float:
        """The point's (largest) step: `[integrator] dt` (or the step dt = "auto" chose), else
        the fixed-step methods' default (integrators.core.base.DEFAULT_DT)."""
        from integrators.core.base import DEFAULT_DT

        return self.solver.options.get("dt") or DEFAULT_DT

    def key_without(self, *varying: str) -> tuple:
        """This point's parameter values and solver, but for the keys `varying`: what decides a
        value that points differing only in `varying` share (see Setup.shared)."""
        values = tuple(sorted((k, repr(v)) for k, v in self.values.items() if k not in varying))
        solver = self.solver
        return values + ((solver.backend, solver.method, tuple(sorted(solver.options.items()))),)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default=None) -> Any:
        return self.values.get(key, default)
