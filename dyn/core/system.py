"""What the engine needs from a system, and what it gives back.

A system is a continuous-time model (and, where it has one, its discrete network) seen by the
engine: its parameters (`params`, checked against every scenario), its outputs, and `simulate`,
which runs a chunk of Monte Carlo runs of one point and returns per-run values. The engine owns
the rest (:mod:`dyn.engine.ensemble`): chunking runs to a memory budget, reducing over runs,
divergence, checking the values against the declared outputs, trajectories.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from .errors import ScenarioError
from .schema import Field

if TYPE_CHECKING:
    from .spec import RunSpec, Setup

from .contract import (
    AVERAGING_KEYS,
    DIVERGED,
    FAILED,
    INTEGRATOR_KEYS,
    NONSTATIONARY_SHARE,
    OK,
    PENDING,
    PROBABILITY,
    REDUCTIONS,
    REFERENCE,
    ROLE_ATTR,
    STATIONARY,
    STATUS_NAMES,
    STEP_ERROR,
    TIME_AVERAGE,
    UNDECIDED,
    Chunk,
    Coord,
    Draw,
    Output,
    PointResult,
    Reference,
    Solve,
    bytes_of,
    theory_coord,
    theory_grid,
)

# what a system module needs, in one import (the contract's names, re-exported)
__all__ = [
    "AVERAGING_KEYS",
    "DIVERGED",
    "FAILED",
    "INTEGRATOR_KEYS",
    "NONSTATIONARY_SHARE",
    "OK",
    "PENDING",
    "PROBABILITY",
    "REDUCTIONS",
    "REFERENCE",
    "ROLE_ATTR",
    "STATIONARY",
    "STATUS_NAMES",
    "STEP_ERROR",
    "TIME_AVERAGE",
    "UNDECIDED",
    "Chunk",
    "Coord",
    "Draw",
    "Output",
    "PointResult",
    "Reference",
    "Solve",
    "bytes_of",
    "theory_coord",
    "theory_grid",
    "System",
    "over_axes",
    "state_dims",
]


def state_dims(setup: Setup, **dims: str) -> dict[str, int]:
    """Trajectory dims {dim: size} read from parameters (``token="n"``): every point's states
    must have one shape, so a size that changes along a sweep axis is refused."""
    found = {}
    for dim, key in dims.items():
        sizes = set(setup.values_of(key))
        if len(sizes) != 1:
            raise ScenarioError(
                "output.trajectories",
                f"saving trajectories needs params.{key} fixed (every point's states must have one shape)",
            )
        found[dim] = int(sizes.pop())
    return found


def over_axes(setup: Setup, *keys: str):
    """For references that depend on parameters which may be swept: (dims, cases), dims the
    sweep axes among `keys` (file order), cases a list of (index into those dims, {key: value}
    for every key, fixed ones from the setup), one per combination of the swept values."""
    dims = tuple(a for a in setup.axes if a in keys)
    cases = []
    for index in np.ndindex(*(len(setup.axes[a]) for a in dims)):
        values = {k: setup.params.get(k) for k in keys}
        values.update({a: setup.axes[a][i] for a, i in zip(dims, index, strict=True)})
        cases.append((index, values))
    return dims, cases


class System(abc.ABC):
    """Abstract base: subclasses are final and registered by `name`.

    Class data: `name`, `description`, `default_plot` (a variable), `params` (the parameter
    declaration), `equation` ("ode"/"sde" when `simulate` solves that kind of equation with the
    configured solver: the method is checked before anything runs), `integrator` (the
    `[integrator]` keys it reads; any other key a scenario sets is refused, not ignored).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[dict[str, Field]]
    default_plot: ClassVar[str]
    equation: ClassVar[str | None] = None
    integrator: ClassVar[frozenset[str]] = frozenset()
    # methods of [integrator] backend = "jax" (dyn.engine.batched): empty when the system has no
    # batched JAX path; such a system implements batch_key, problem, initial_state and observe (or its
    # own solves) and may size batch_bytes
    jax_methods: ClassVar[frozenset[str]] = frozenset()

    @abc.abstractmethod
    def outputs(self, setup: Setup) -> list[Output]:
        """The variables written for each point."""

    def simulate(self, spec: RunSpec, runs: range) -> Chunk:
        """Simulate runs `runs` (a sub-range of range(spec.runs)) of one point, drawing from
        `spec.rng` in run order. Not called when every output is reduced by "point"."""
        raise NotImplementedError(f"system {self.name} has per-run outputs but no simulate")

    def validate(self, spec: RunSpec) -> None:  # noqa: B027 an optional hook: by default every point passes
        """Cross-field checks on one point; raise ScenarioError naming the key."""

    def coords(self, setup: Setup) -> dict[str, Coord]:
        """Coordinates of the system's own dimensions other than `time` (which is the save times)."""
        return {}

    def run_bytes(self, spec: RunSpec) -> int:
        """Memory one run holds while simulated; the engine chunks runs to fit the budget."""
        return 0

    def point_values(self, spec: RunSpec) -> dict[str, np.ndarray]:
        """Values of the outputs reduced by "point"."""
        return {}

    def extend(self, spec: RunSpec, carry, times: np.ndarray) -> Chunk:
        """Continue runs from `carry` (the Chunk.carry of their previous stretch, at time
        times[0]) over `times`, drawing from `spec.rng`: the values of the time-averaged outputs
        at times[1:] (runs, len(times) - 1), the new carry and the finite flags. Needed by
        systems with a "time_average" output."""
        raise NotImplementedError(f"system {self.name} cannot continue its runs")

    def step_rate(self, spec: RunSpec) -> float | None:
        """The rate L of the point's fastest scale (e.g. sigma^2 of the noise, the stiffness of
        the drift), such that an Euler-Maruyama step dt has a relative bias O(L dt): `dt =
        "auto"` takes dt = step_tol / L, and a fixed dt with L dt > STEP_REFUSE is refused.
        None: the system does not choose its step."""
        return None

    # a system whose `simulate` and `extend` solve with `spec.solver.get()` and draw their noise
    # from `spec.rng` in the same order at any step: `[integrator] check_step` may rerun its runs
    # at dt / 2 on the same Brownian path (dyn.engine.stepcheck)
    step_check: ClassVar[bool] = False

    def batch_key(self, spec: RunSpec) -> tuple:
        """Points with equal keys run in one JAX computation (same shapes, same program)."""
        raise NotImplementedError(f"system {self.name} has no batched JAX path")

    def problem(self, spec: RunSpec):
        """The point's integrators.Problem (its flat parameter vector p)."""
        raise NotImplementedError(f"system {self.name} has no batched JAX path")

    def initial_state(self, spec: RunSpec, runs: int) -> np.ndarray:
        """The starts (runs, n, d) of the point's next `runs` runs, drawn from `spec.rng`."""
        raise NotImplementedError(f"system {self.name} has no batched JAX path")

    def solves(self, spec: RunSpec) -> Solve | dict[str, Solve]:
        """What backend jax solves for the point (dyn.engine.batched stacks a batch's Solves and
        makes one integrators.get("jax", ...).solve per name): by default `problem(spec)` from
        `initial_state(spec, spec.runs)` at the save times with the configured method and
        step, the noise (for an SDE method) from `spec.jax_key()`."""
        import integrators

        method = spec.solver.method
        key = spec.jax_key() if method in integrators.SDE_METHODS else None
        return Solve(method, spec.dt, self.problem(spec), self.initial_state(spec, spec.runs), spec.times, key=key)

    def observe(self, spec: RunSpec, solved) -> Chunk:
        """The point's Chunk from what its `solves` gave, in their structure: states
        (runs, T, n, d) for a Solve, (states, steps (runs,)) for an absorbing one."""
        raise NotImplementedError(f"system {self.name} has no batched JAX path")

    def batch_bytes(self, spec: RunSpec) -> int:
        """Device memory one point of a batch needs (the batch is sized to the device)."""
        return self.run_bytes(spec) * spec.runs

    def references(self, setup: Setup) -> list[Reference]:
        """Theory written into the file when it is made (boundaries, closed forms, curves to
        compare with), computed from the setup alone; `dyn plot` draws them by their `Draw`."""
        return []

    def trajectory_dims(self, setup: Setup) -> dict[str, int] | None:
        """Dims of one run's state at one save time (same for every point), or None when the
        system does not save trajectories. Such systems have a `time` dimension and return
        `Chunk.states`."""
        return None
