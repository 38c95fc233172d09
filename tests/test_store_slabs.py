"""A point's slab written through HDF5's own calls (dyn.engine.store.PointSlab) holds the bytes
that h5py's ``var[where] = value`` writes, for every kind of per-point variable and sweep shape."""

import h5py
import numpy as np
import pytest

from dyn.engine.store import MESSAGE_BYTES, PointSlab

NAN_PAYLOAD = np.uint64(0x7FF8000000000123).view(np.float64)


def awkward(rng, shape) -> np.ndarray:
    v = np.array(rng.standard_normal(shape))
    for value in (np.nan, -np.nan, NAN_PAYLOAD, np.inf, -0.0):
        v[rng.random(shape) < 0.1] = value
    return v


def both(tmp_path, dtype, shape, axes, values):
    """Two datasets of `shape` (its first `axes` the sweep's), filled point by point: by the
    slab, and by h5py's indexing; returns their bytes."""
    with h5py.File(tmp_path / "slabs.h5", "w") as f:
        direct = f.create_dataset("direct", shape, dtype=dtype)
        indexed = f.create_dataset("indexed", shape, dtype=dtype)
        slab = PointSlab(direct, axes)
        for where, value in values:
            slab.write(where, value)
            indexed[where] = value
        return direct[()].tobytes(), indexed[()].tobytes()


@pytest.mark.parametrize("sweep, own", [((5,), (7,)), ((3, 4), (2, 3)), ((6,), ()), ((), (4,)), ((2, 3), ()), ((), ())])
def test_float_slabs_hold_h5pys_bytes_nan_payloads_included(tmp_path, sweep, own):
    rng = np.random.default_rng(len(sweep) + len(own))
    values = []
    for where in np.ndindex(*sweep):
        value = np.ascontiguousarray(awkward(rng, own))  # a scalar slab's value arrives as (1,)
        values.append((tuple(int(i) for i in where), value))
    direct, indexed = both(tmp_path, "f8", sweep + own, len(sweep), values[::-1])
    assert direct == indexed
    words = {direct[i : i + 8] for i in range(0, len(direct), 8)}
    assert len(words) > 1 or len(direct) == 8  # not all one value


def test_bookkeeping_slabs_hold_h5pys_bytes(tmp_path):
    """The status (int8), the checksum (uint32) and the fixed-width texts (message, versions)
    from the Python values the writer hands over: ints, bytes of any length up to the width."""
    cases = [
        ("i1", [3, 1, 2]),
        ("u4", [2**32 - 1, 0, 12345]),
        (f"S{MESSAGE_BYTES}", [b"", "\u00e9t\u00e9 diverged".encode(), b"x" * MESSAGE_BYTES]),
    ]
    for dtype, items in cases:
        values = [((i,), item) for i, item in enumerate(items)]
        direct, indexed = both(tmp_path, dtype, (len(items),), 1, values)
        assert direct == indexed


def test_a_slab_refuses_a_value_of_another_shape(tmp_path):
    with h5py.File(tmp_path / "one.h5", "w") as f:
        slab = PointSlab(f.create_dataset("v", (3, 5), dtype="f8"), 1)
        with pytest.raises(ValueError, match="shape"):
            slab.write((0,), np.zeros(4))
