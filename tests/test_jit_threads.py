"""Kernels compile on first need, exactly for their declared signature, and ensembles split into
blocks across threads give the same numbers whatever the number of threads."""
import subprocess
import sys

import numba
import numpy as np
import pytest
from numba import types

from integrators.jit import DeferredDispatcher, njit
from integrators.numba_abi import F1, NJIT
from integrators.threads import block_bounds, over_members


@njit(types.float64(types.float64, F1), **NJIT)
def _scaled_sum(c, v):
    total = 0.0
    for x in v:
        total += x
    return c * total


@njit(types.float64(F1), **NJIT)
def _calls_scaled_sum(v):
    return _scaled_sum(2, v)  # an int typed against the declared float64


def test_a_declared_signature_is_the_only_one_ever_compiled():
    assert isinstance(_scaled_sum, DeferredDispatcher)
    assert _calls_scaled_sum(np.array([1.0, 2.0])) == 6.0  # typed from compiled code first
    assert _scaled_sum(3, np.array([1.0, 2.0])) == 9.0  # then an int from Python: converted
    assert len(_scaled_sum.signatures) == 1 and len(_calls_scaled_sum.signatures) == 1
    with pytest.raises(TypeError, match="No matching definition"):
        _scaled_sum(1.0, np.arange(3.0)[::2])  # not contiguous: refused as an eager kernel is


IMPORT_ALL = """
import importlib, pkgutil, sys
import dyn, integrators
from integrators.jit import DeferredDispatcher
for package in (dyn, integrators):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.name.endswith(("__main__", "jax", "jax_batch")):
            importlib.import_module(info.name)
compiled = [f"{m.__name__}.{k}" for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith(("dyn.", "integrators."))
            for k, v in vars(m).items() if isinstance(v, DeferredDispatcher) and v.signatures]
deferred = sum(isinstance(v, DeferredDispatcher) for m in list(sys.modules.values())
               if getattr(m, "__name__", "").startswith(("dyn.", "integrators."))
               for v in vars(m).values())
print(deferred, compiled)
"""


def test_importing_every_model_module_compiles_no_kernel():
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=1)
    assert int(out[0]) > 40, out  # the kernels were found ...
    assert out[1].strip() == "[]"  # ... and none was compiled (or loaded) by an import


@pytest.mark.parametrize("members, blocks", [(1, 1), (7, 2), (8, 3), (2, 2), (5, 8)])
def test_blocks_cover_the_members_once_and_differ_by_at_most_one(members, blocks):
    bounds = block_bounds(members, blocks)
    assert [i for lo, hi in bounds for i in range(lo, hi)] == list(range(members))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1 and len(bounds) == blocks


def test_over_members_raises_what_a_block_raises_and_runs_every_member():
    seen = np.zeros(9, dtype=int)

    def call(lo, hi):
        seen[lo:hi] += 1
        if lo > 0:
            raise RuntimeError(f"block {lo}")

    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        if numba.get_num_threads() == 1:
            pytest.skip("one core: no second block")
        with pytest.raises(RuntimeError, match="block"):
            over_members(9, call)
        assert (seen == 1).all()
    finally:
        numba.set_num_threads(threads)
