"""What the engine needs from a system: its parameters, its outputs, and how to run one point.

A system is the continuous-time model (and, where it has one, its discrete network). The engine
never looks inside: it validates `params` against `System.params`, asks `outputs` and `coords` for
the file layout, and calls `run_point` once per sweep point with a generator seeded from
(scenario seed, point index).
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..schema import Field

if TYPE_CHECKING:
    from ..scenario import Scenario

# Per-point status codes stored in the file (CF flag_values / flag_meanings).
PENDING, OK, DIVERGED, FAILED = 0, 1, 2, 3
STATUS_NAMES = ("pending", "ok", "diverged", "failed")


# Output roles, stored as the variable attribute ROLE_ATTR so that readers of the file (plots,
# `dyn show`) know them without the system: a class probability, and the share of runs that the
# horizon left undecided (points where it exceeds analysis.HORIZON_LIMITED_SHARE are marked).
PROBABILITY, UNDECIDED = "probability", "undecided"
ROLE_ATTR = "dyn_role"


@dataclass(frozen=True)
class Output:
    """One output variable: its own dimensions come after the sweep axes."""

    name: str
    long_name: str
    units: str = ""
    dims: tuple[str, ...] = ()
    role: str = ""  # "", PROBABILITY or UNDECIDED


@dataclass
class PointResult:
    """Values of every output for one sweep point, and whether the dynamics stayed finite."""

    values: dict[str, np.ndarray]
    status: int = OK
    message: str = ""


@dataclass(frozen=True)
class Coord:
    """A coordinate of a system-owned dimension (e.g. save times)."""

    values: np.ndarray
    long_name: str
    units: str = ""
    attrs: dict = field(default_factory=dict)


class System(abc.ABC):
    """Abstract base: subclasses are final and registered by `name`."""

    name: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[dict[str, Field]]
    default_plot: ClassVar[str]
    # "ode" or "sde" when run_point solves that kind of equation with the scenario's integrator:
    # the scenario's method must then be of that kind (checked before anything runs).
    equation: ClassVar[str | None] = None

    def validate(self, point: dict, scenario: "Scenario") -> None:
        """Cross-field checks on one point's parameters; raise ScenarioError naming the key."""

    @abc.abstractmethod
    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        """Coordinates of the system's own dimensions, identical for every point."""

    @abc.abstractmethod
    def outputs(self, scenario: "Scenario") -> list[Output]:
        """The variables written for each point."""

    @abc.abstractmethod
    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        """Simulate one sweep point; `point` holds every parameter, swept ones included.

        Systems that save trajectories also accept `trajectories=` (a `TrajectoryFile`, passed
        only when the scenario asks for them) and call `trajectories.write(first_run, states)`
        with states of shape (runs, times, *state) as each chunk of runs is done.
        """

    def trajectory_dims(self, scenario: "Scenario") -> dict[str, int] | None:
        """Dims of one run's state at one save time (same for every point), or None when the
        system does not save trajectories. Such systems have a `time` coordinate."""
        return None
