"""Sweep points: the cartesian product of the `[sweep]` axes, and each point's random stream.

Point `k` is the C-order (row-major) flat index into the grid of axes, in file order: the last
axis varies fastest. Its random numbers come from `SeedSequence(seed, spawn_key=(s,))` with `s`
its stream index: `k` itself, or, with common axes (`[ensemble] common`), its index in the grid
of the other axes, so points that differ only along common axes draw the same numbers. Either way
a pure function of (seed, point): executor, worker count and resume history cannot change them.
Every function takes the axes (`{name: [values...]}`, in file order), not a scenario.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import numpy as np


def shape(axes: Mapping[str, list]) -> tuple[int, ...]:
    return tuple(len(values) for values in axes.values())


def count(axes: Mapping[str, list]) -> int:
    return int(np.prod(shape(axes), dtype=np.int64))


def grid_index(axes: Mapping[str, list], index: int) -> tuple[int, ...]:
    """Flat point index -> index tuple into the sweep grid (empty tuple for no axes)."""
    if not axes:
        return ()
    sizes = shape(axes)
    index = int(index)
    if not 0 <= index < math.prod(sizes):
        raise ValueError(f"index {index} is out of bounds for a sweep of {math.prod(sizes)} points")
    place = []
    for size in reversed(sizes):  # C order, as np.unravel_index (a tenth of its time per call)
        index, i = divmod(index, size)
        place.append(i)
    return tuple(reversed(place))


def axis_values(axes: Mapping[str, list], index: int) -> dict:
    """The sweep-axis values of point `index` (empty for a sweep without axes)."""
    return {axis: values[i] for (axis, values), i in zip(axes.items(), grid_index(axes, index), strict=True)}


def point(params: Mapping, axes: Mapping[str, list], index: int) -> dict:
    """All parameters of point `index`: the fixed [params] plus this point's axis values."""
    return {**params, **axis_values(axes, index)}


def iter_points(params: Mapping, axes: Mapping[str, list]) -> Iterator[dict]:
    for index in range(count(axes)):
        yield point(params, axes, index)


def stream_index(axes: Mapping[str, list], index: int, common: tuple[str, ...] = ()) -> int:
    """The stream of point `index`: its flat index in the grid of the axes that are not common.
    Points that differ only along `common` axes share it (common random numbers); with no common
    axes it is the point index itself."""
    if not common:
        return index
    where = grid_index(axes, index)
    rest = [(i, len(v)) for (axis, v), i in zip(axes.items(), where, strict=True) if axis not in common]
    return int(np.ravel_multi_index([i for i, _ in rest], [n for _, n in rest])) if rest else 0


def rng(seed: int, index: int) -> np.random.Generator:
    """The random stream number `index` (a point's: see :func:`stream_index`)."""
    seq = np.random.SeedSequence(seed, spawn_key=(index,))
    return np.random.Generator(np.random.PCG64(seq))


def common_rng(seed: int, *key: int) -> np.random.Generator:
    """A stream named by `key` (at least two integers, so it never meets a point's (index,)):
    shared by every point that asks for the same key (common random numbers)."""
    if len(key) < 2:
        raise ValueError(f"a common stream needs a key of two or more integers, got {key}")
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key)))
