"""Flat parameter vectors for kernels, laid out from one declaration.

numba right-hand sides take one float64 vector ``p`` (a fixed signature is what lets numba cache a
kernel that receives a drift, see docs/architecture.md), and their JAX twins take the same vector.
A :class:`Layout` names its entries once: scalars, then blocks whose shapes are products of named
dimensions::

    LAYOUT = Layout("attention", scalars=("beta", "usa", "d", "m_identity", "v_identity"),
                    blocks={"M": ("d", "d"), "V": ("d", "d")})
    p = LAYOUT.pack(beta=2.0, usa=0, d=3, m_identity=1, v_identity=1, M=np.eye(3), V=np.eye(3))
    BETA, V_AT = LAYOUT.index("beta"), LAYOUT.block_at("V")  # constants numba freezes
    block(p, V_AT).reshape((d, d))                           # numba: a view of p
    LAYOUT.unpack(p, {"d": 3})["V"]                          # numpy or JAX, checked

The vector is ``[scalars | o_1 .. o_B, end | block 1 .. block B]``: after the S scalars, the start
of each of the B blocks and the end of the last (floats, absolute within the vector), so
``header = S + B + 1`` (S when there are no blocks) and block k is
``p[int(p[S + k]) : int(p[S + k + 1])]`` (:func:`block`). A kernel thus reads a block without
knowing a dimension, and a block may hold another layout's vector (the attention vector inside
the noisy one): its offsets are relative to its own start, so the inner kernels read the slice
as they read their own vector. Trailing blocks declared ``optional`` may be left out: they are
then empty (start = end) and the vector's length says which are present (what JAX, which sees
only shapes, relies on).

:meth:`Layout.unpack` checks the length against the dimensions (one dimension left out is
inferred from the length, :meth:`Layout.infer`) and, for a numpy vector, the stored offsets and
the scalars that name a dimension; :meth:`Layout.check` checks a vector's offsets without knowing
its dimensions. Both raise ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from integrators.numba.abi import NJIT
from integrators.numba.jit import njit


@njit(**NJIT)
def block(p, at):
    """The block whose start is stored at ``p[at]`` and end at ``p[at + 1]``: a view of ``p``
    (``at`` is :meth:`Layout.block_at`)."""
    return p[int(p[at]) : int(p[at + 1])]


@dataclass(frozen=True)
class Layout:
    name: str
    scalars: tuple[str, ...]
    blocks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    optional: tuple[str, ...] = ()  # trailing blocks a vector may omit

    def __post_init__(self):
        names = list(self.scalars) + list(self.blocks)
        if len(set(names)) != len(names):
            raise ValueError(f"layout {self.name}: duplicate names in {names}")
        blocks = list(self.blocks)
        if list(self.optional) != blocks[len(blocks) - len(self.optional) :]:
            raise ValueError(f"layout {self.name}: optional blocks must be the trailing ones")

    @property
    def header(self) -> int:
        """Scalars and offsets; the first block starts here."""
        return len(self.scalars) + (len(self.blocks) + 1 if self.blocks else 0)

    @property
    def dims(self) -> tuple[str, ...]:
        """The dimensions the blocks' shapes name, in order of first appearance."""
        return tuple(dict.fromkeys(d for shape in self.blocks.values() for d in shape))

    def index(self, name: str) -> int:
        """Position of scalar `name` in the vector."""
        if name not in self.scalars:
            raise KeyError(f"layout {self.name} has no scalar {name!r} (scalars: {self.scalars})")
        return self.scalars.index(name)

    def block_at(self, name: str) -> int:
        """Position of the start offset of block `name` (its end is at the next position)."""
        if name not in self.blocks:
            raise KeyError(f"layout {self.name} has no block {name!r} (blocks: {tuple(self.blocks)})")
        return len(self.scalars) + list(self.blocks).index(name)

    def shape(self, block: str, dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(int(dims[d]) for d in self.blocks[block])

    def offsets(self, dims: Mapping[str, int], present: tuple[str, ...] | None = None) -> list[int]:
        """Start of every block (an absent one is empty), then the end."""
        present = tuple(self.blocks) if present is None else present
        at, out = self.header, []
        for b in self.blocks:
            out.append(at)
            if b in present:
                at += math.prod(self.shape(b, dims))
        return out + [at] if self.blocks else []

    def size(self, dims: Mapping[str, int], present: tuple[str, ...] | None = None) -> int:
        """Length of a vector with blocks `present` (default: all)."""
        offsets = self.offsets(dims, present)
        return offsets[-1] if offsets else self.header

    def pack(self, **values) -> np.ndarray:
        """The vector from every scalar and every block (an optional block may be None). A
        block's shape must agree with the dimensions (those that are scalars, and those the
        blocks before it fixed)."""
        missing = [k for k in (*self.scalars, *self.blocks) if k not in values and k not in self.optional]
        extra = sorted(set(values) - set(self.scalars) - set(self.blocks))
        if missing or extra:
            raise ValueError(f"layout {self.name}: missing {missing}, unknown {extra}")
        dims = {d: int(values[d]) for d in self.dims if d in self.scalars}
        arrays = {}
        for b, names in self.blocks.items():
            if values.get(b) is None:
                if b not in self.optional:
                    raise ValueError(f"layout {self.name}: block {b} is required")
                continue
            a = np.asarray(values[b], dtype=np.float64)
            if a.ndim != len(names):
                raise ValueError(
                    f"layout {self.name}: block {b} must have {len(names)} dimensions {names}, got shape {a.shape}"
                )
            for d, n in zip(names, a.shape, strict=True):
                if dims.setdefault(d, n) != n:
                    raise ValueError(f"layout {self.name}: block {b} has shape {a.shape}, but {d} = {dims[d]}")
            arrays[b] = a.ravel()
        offsets = self.offsets(dims, tuple(arrays))
        scalars = [float(values[k]) for k in self.scalars]
        return np.concatenate([np.array(scalars + offsets, dtype=np.float64), *arrays.values()])

    def infer(self, length: int, dims: Mapping[str, int] | None = None) -> dict:
        """`dims` with the one dimension it lacks (if any) solved from a vector's length (the
        length is affine in it); ValueError when no vector has that length."""
        dims = dict(dims or {})
        missing = [d for d in self.dims if d not in dims]
        if not missing:
            return dims
        d = missing[0]
        if len(missing) > 1 or self.optional or any(s.count(d) > 1 for s in self.blocks.values()):
            raise ValueError(f"layout {self.name}: cannot infer {missing} from the length")
        s0, s1 = self.size({**dims, d: 0}), self.size({**dims, d: 1})
        k, r = divmod(length - s0, s1 - s0)
        if k < 0 or r:
            raise ValueError(f"layout {self.name}: no vector has length {length} (given {dims})")
        return {**dims, d: k}

    def unpack(self, p, dims: Mapping[str, int] | None = None) -> dict:
        """Scalars and the blocks present in `p` (numpy or JAX array), blocks reshaped. `dims`
        may leave out one dimension (then solved from the length). ValueError when the length
        fits no vector of these dimensions, or, for a numpy `p`, when its offsets or the scalars
        that name a dimension disagree."""
        length = int(p.shape[0])
        dims = self.infer(length, dims)
        present = tuple(self.blocks)
        if self.size(dims, present) != length:
            present = tuple(b for b in self.blocks if b not in self.optional)
            if not self.optional or self.size(dims, present) != length:
                raise ValueError(
                    f"layout {self.name}: vector of length {length}, expected {self.size(dims)} for {dims}"
                )
        offsets = self.offsets(dims, present)
        if isinstance(p, np.ndarray):
            S = len(self.scalars)
            if not np.array_equal(p[S : self.header], offsets):
                raise ValueError(
                    f"layout {self.name}: stored offsets {p[S : self.header].tolist()}, expected {offsets} for {dims}"
                )
            wrong = {d: p[self.index(d)] for d in dims if d in self.scalars and p[self.index(d)] != dims[d]}
            if wrong:
                raise ValueError(f"layout {self.name}: packed with {wrong}, expected {dims}")
        out = {k: p[i] for i, k in enumerate(self.scalars)}
        for b, start, end in zip(self.blocks, offsets[:-1], offsets[1:], strict=True):
            if b in present:
                out[b] = p[start:end].reshape(self.shape(b, dims))
        return out

    def check(self, p) -> np.ndarray:
        """`p` as a float64 vector whose offsets are sound: the first block starts at the
        header, none ends before it starts, the last ends at the length, and a block whose
        dimensions are all scalars has their product as size (an optional one may be empty).
        ValueError otherwise."""
        p = np.asarray(p, dtype=np.float64)
        if p.ndim != 1 or p.shape[0] < self.header:
            raise ValueError(f"layout {self.name}: expected a vector of length >= {self.header}, got shape {p.shape}")
        if not self.blocks:
            if p.shape[0] != self.header:
                raise ValueError(f"layout {self.name}: expected length {self.header}, got {p.shape[0]}")
            return p
        at = p[len(self.scalars) : self.header]
        sound = at[0] == self.header and at[-1] == p.shape[0] and np.all(np.diff(at) >= 0)
        dims = {d: p[self.index(d)] for d in self.dims if d in self.scalars}
        for b, size in zip(self.blocks, np.diff(at), strict=True):
            if all(d in dims for d in self.blocks[b]):
                want = math.prod(dims[d] for d in self.blocks[b])
                sound = sound and (size == want or (b in self.optional and size == 0))
        if not sound:
            raise ValueError(
                f"layout {self.name}: inconsistent offsets {at.tolist()} for a vector of length {p.shape[0]}"
            )
        return p
