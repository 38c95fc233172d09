"""dyn.core.layout: offsets written by pack, read by the numba accessor, checked by unpack."""

import numpy as np
import pytest
from numba import njit

from dyn.core.layout import Layout, block

L = Layout("test", scalars=("a", "d"), blocks={"M": ("d", "d"), "v": ("d",)}, optional=("v",))
NEST = Layout("outer", scalars=("s",), blocks={"inner": ("P",)})


@njit
def _sum_block(p, at):
    return block(p, at).sum()


def test_pack_writes_offsets_and_blocks_read_back():
    M = np.arange(9.0).reshape(3, 3)
    p = L.pack(a=1.5, d=3, M=M, v=[7.0, 8.0, 9.0])
    assert L.header == 5 and L.block_at("M") == 2 and L.block_at("v") == 3
    np.testing.assert_array_equal(p[:5], [1.5, 3, 5, 14, 17])
    assert _sum_block(p, L.block_at("M")) == M.sum() and _sum_block(p, L.block_at("v")) == 24
    u = L.unpack(p, {"d": 3})
    np.testing.assert_array_equal(u["M"], M)
    assert L.check(p) is p


def test_optional_block_is_empty_and_nested_vectors_keep_their_offsets():
    q = L.pack(a=0.0, d=2, M=np.eye(2))
    assert len(q) == L.size({"d": 2}, ("M",)) and _sum_block(q, L.block_at("v")) == 0
    assert "v" not in L.unpack(q, {"d": 2})
    outer = NEST.pack(s=2.0, inner=q)
    inner = NEST.unpack(outer)["inner"]  # P inferred from the length
    np.testing.assert_array_equal(inner, q)
    assert _sum_block(np.ascontiguousarray(inner), L.block_at("M")) == 2.0


def test_unpack_and_pack_refuse_inconsistent_vectors():
    p = L.pack(a=1.0, d=2, M=np.eye(2), v=[1.0, 2.0])
    with pytest.raises(ValueError, match="length"):
        L.unpack(p, {"d": 3})
    with pytest.raises(ValueError, match="length"):
        L.unpack(p[:-1], {"d": 2})
    bad = p.copy()
    bad[L.block_at("v")] += 1
    with pytest.raises(ValueError, match="offsets"):
        L.unpack(bad, {"d": 2})
    with pytest.raises(ValueError, match="offsets"):
        L.check(bad)
    with pytest.raises(ValueError, match="but d = 3"):
        L.pack(a=1.0, d=3, M=np.eye(2))
    with pytest.raises(ValueError, match="missing"):
        L.pack(a=1.0, d=2)
    with pytest.raises(ValueError, match="cannot infer"):
        L.unpack(p)
