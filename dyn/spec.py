"""What a system receives: a frozen run specification, never the scenario document.

    Setup    what every point of a sweep shares: fixed parameters, runs, save times, horizon,
             the configured solver, the memory budget of a chunk of runs, the trajectory request
    RunSpec  one point: its parameter values, its random streams, and the Setup

The engine builds them (:meth:`dyn.scenario.Scenario.setup`, :meth:`~dyn.scenario.Scenario.spec`);
systems read them. Neither knows TOML.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from . import sweep

CHUNK_BYTES = 64 * 2**20  # memory budget of one chunk of runs (states of the runs in flight)


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
    swept: tuple[str, ...]  # names of the sweep axes
    runs: int
    seed: int
    horizon: float
    saves: int  # save intervals on [0, horizon]
    solver: Solver
    chunk_bytes: int = CHUNK_BYTES
    trajectories: bool = False  # also save states (every trajectory_every-th save time,
    trajectory_every: int = 1  # the first trajectory_runs runs, 0 = all)
    trajectory_runs: int = 0

    def __post_init__(self):
        object.__setattr__(self, "params", _frozen(self.params))

    @cached_property
    def times(self) -> np.ndarray:
        """The save times: saves + 1 equally spaced times on [0, horizon] (read-only)."""
        t = np.linspace(0.0, self.horizon, self.saves + 1)
        t.setflags(write=False)
        return t

    def common_rng(self, *key: int) -> np.random.Generator:
        """A stream shared by every point (common random numbers): see :func:`dyn.sweep.common_rng`."""
        return sweep.common_rng(self.seed, *key)


@dataclass(frozen=True, eq=False)
class RunSpec:
    """One sweep point as a system sees it."""

    setup: Setup
    index: int
    values: Mapping[str, Any]  # every parameter of the point, swept ones included

    def __post_init__(self):
        object.__setattr__(self, "values", _frozen(self.values))

    @cached_property
    def rng(self) -> np.random.Generator:
        """The point's own stream, SeedSequence(seed, spawn_key=(index,)); one Generator per
        spec, consumed in run order, chunk after chunk."""
        return sweep.rng(self.setup.seed, self.index)

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
        return self.setup.solver

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default=None) -> Any:
        return self.values.get(key, default)
