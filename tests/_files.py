"""Reading sweep files back in the tests: variables as arrays, compared bit for bit."""

import numpy as np

import dyn


def read_vars(path, names) -> dict:
    """The named variables of a sweep file, as numpy arrays."""
    with dyn.open(path) as ds:
        return {name: ds[name].values.copy() for name in names}


def assert_same(a: dict, b: dict) -> None:
    """Every array of `a` equal to its namesake in `b`, bit for bit (NaN where NaN)."""
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
