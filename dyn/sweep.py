"""Sweep points: the cartesian product of the `[sweep]` axes, and each point's random stream.

Point `k` is the C-order (row-major) flat index into the grid of axes, in file order: the last
axis varies fastest. Its random numbers come from `SeedSequence(seed, spawn_key=(k,))`, a pure
function of (scenario seed, point index): executor, worker count and resume history cannot change
them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import numpy as np

if TYPE_CHECKING:
    from .scenario import Scenario


def shape(scenario: "Scenario") -> tuple[int, ...]:
    return tuple(len(values) for values in scenario.axes.values())


def count(scenario: "Scenario") -> int:
    return int(np.prod(shape(scenario), dtype=np.int64))


def grid_index(scenario: "Scenario", index: int) -> tuple[int, ...]:
    """Flat point index -> index tuple into the sweep grid (empty tuple for no axes)."""
    return tuple(int(i) for i in np.unravel_index(index, shape(scenario))) if scenario.axes else ()


def axis_values(scenario: "Scenario", index: int) -> dict:
    """The sweep-axis values of point `index` (empty for a sweep without axes)."""
    return {axis: values[i] for (axis, values), i in zip(scenario.axes.items(), grid_index(scenario, index))}


def point(scenario: "Scenario", index: int) -> dict:
    """All parameters of point `index`: the fixed [params] plus this point's axis values."""
    return {**scenario.params, **axis_values(scenario, index)}


def iter_points(scenario: "Scenario") -> Iterator[dict]:
    for index in range(count(scenario)):
        yield point(scenario, index)


def rng(scenario: "Scenario", index: int) -> np.random.Generator:
    seq = np.random.SeedSequence(scenario.ensemble["seed"], spawn_key=(index,))
    return np.random.Generator(np.random.PCG64(seq))
