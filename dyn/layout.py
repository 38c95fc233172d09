"""Flat parameter vectors for kernels, laid out from one declaration.

numba right-hand sides take one float64 vector ``p`` (a fixed signature is what lets numba cache a
kernel that receives a drift, see docs/architecture.md), and their JAX twins take the same vector.
A :class:`Layout` names its entries once: scalars first, then blocks whose shapes are products of
named dimensions::

    LAYOUT = Layout("attention", scalars=("beta", "usa", "d", "m_identity", "v_identity"),
                    blocks={"M": ("d", "d"), "V": ("d", "d")})
    p = LAYOUT.pack(beta=2.0, usa=0, d=3, m_identity=1, v_identity=1, M=np.eye(3), V=np.eye(3))
    BETA = LAYOUT.index("beta")                   # a constant numba freezes at compile time
    LAYOUT.unpack(p, d=3)["V"]                    # numpy or JAX: slices and reshapes

Blocks sit after the scalars in declared order (``LAYOUT.header`` is where the first starts), so
a numba kernel reads block k at ``header + (sizes of the blocks before it)``. Trailing blocks may
be left out of a vector (``optional``): its length then says which are present.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np


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
        if list(self.optional) != blocks[len(blocks) - len(self.optional):]:
            raise ValueError(f"layout {self.name}: optional blocks must be the trailing ones")

    @property
    def header(self) -> int:
        """Number of scalars; the first block starts here."""
        return len(self.scalars)

    def index(self, name: str) -> int:
        """Position of scalar `name` in the vector."""
        if name not in self.scalars:
            raise KeyError(f"layout {self.name} has no scalar {name!r} (scalars: {self.scalars})")
        return self.scalars.index(name)

    def shape(self, block: str, dims: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(int(dims[d]) for d in self.blocks[block])

    def size(self, dims: Mapping[str, int], present: tuple[str, ...] | None = None) -> int:
        """Length of a vector with blocks `present` (default: all)."""
        present = tuple(self.blocks) if present is None else present
        return self.header + sum(math.prod(self.shape(b, dims)) for b in present)

    def pack(self, **values) -> np.ndarray:
        """The vector from every scalar and every block (an optional block may be None)."""
        missing = [k for k in (*self.scalars, *self.blocks)
                   if k not in values and k not in self.optional]
        extra = sorted(set(values) - set(self.scalars) - set(self.blocks))
        if missing or extra:
            raise ValueError(f"layout {self.name}: missing {missing}, unknown {extra}")
        parts = [np.array([float(values[k]) for k in self.scalars])]
        for block in self.blocks:
            value = values.get(block)
            if value is None:
                if block not in self.optional:
                    raise ValueError(f"layout {self.name}: block {block} is required")
                continue
            parts.append(np.asarray(value, dtype=np.float64).ravel())
        return np.concatenate(parts)

    def unpack(self, p, dims: Mapping[str, int]) -> dict:
        """Scalars and the blocks present in `p` (numpy or JAX array), blocks reshaped."""
        out = {k: p[i] for i, k in enumerate(self.scalars)}
        at = self.header
        for block in self.blocks:
            shape = self.shape(block, dims)
            size = math.prod(shape)
            if at + size > p.shape[0] and block in self.optional:
                break
            out[block] = p[at:at + size].reshape(shape)
            at += size
        return out
