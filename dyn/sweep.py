"""Sweep points: the cartesian product of the `[sweep]` axes, and each point's random stream.

Point `k` is the C-order (row-major) flat index into the grid of axes, in file order: the last
axis varies fastest. Its random numbers come from `SeedSequence(seed, spawn_key=(k,))`, a pure
function of (scenario seed, point index): executor, worker count and resume history cannot change
them. Every function takes the axes (`{name: [values...]}`, in file order), not a scenario.
"""
from __future__ import annotations

from typing import Iterator, Mapping

import numpy as np


def shape(axes: Mapping[str, list]) -> tuple[int, ...]:
    return tuple(len(values) for values in axes.values())


def count(axes: Mapping[str, list]) -> int:
    return int(np.prod(shape(axes), dtype=np.int64))


def grid_index(axes: Mapping[str, list], index: int) -> tuple[int, ...]:
    """Flat point index -> index tuple into the sweep grid (empty tuple for no axes)."""
    return tuple(int(i) for i in np.unravel_index(index, shape(axes))) if axes else ()


def axis_values(axes: Mapping[str, list], index: int) -> dict:
    """The sweep-axis values of point `index` (empty for a sweep without axes)."""
    return {axis: values[i] for (axis, values), i in zip(axes.items(), grid_index(axes, index))}


def point(params: Mapping, axes: Mapping[str, list], index: int) -> dict:
    """All parameters of point `index`: the fixed [params] plus this point's axis values."""
    return {**params, **axis_values(axes, index)}


def iter_points(params: Mapping, axes: Mapping[str, list]) -> Iterator[dict]:
    for index in range(count(axes)):
        yield point(params, axes, index)


def rng(seed: int, index: int) -> np.random.Generator:
    """The random stream of point `index`."""
    seq = np.random.SeedSequence(seed, spawn_key=(index,))
    return np.random.Generator(np.random.PCG64(seq))


def common_rng(seed: int, *key: int) -> np.random.Generator:
    """A stream shared by every point of a sweep, named by `key` (common random numbers).
    Keys start with a constant salt of the caller's, so they never meet a point's (index,)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key)))
