"""Kernels compile on first need, exactly for their declared signature, and ensembles split into
blocks across threads give the same numbers whatever the number of threads."""

import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from numba import types

from integrators.numba import jit
from integrators.numba.abi import F1, NJIT
from integrators.numba.jit import callees, njit
from integrators.numba.threads import block_bounds, over_members


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
    assert jit.declared(_scaled_sum)
    assert _calls_scaled_sum(np.array([1.0, 2.0])) == 6.0  # typed from compiled code first
    assert _scaled_sum(3, np.array([1.0, 2.0])) == 9.0  # then an int from Python: converted
    assert len(_scaled_sum.signatures) == 1 and len(_calls_scaled_sum.signatures) == 1
    with pytest.raises(TypeError, match="No matching definition"):
        _scaled_sum(1.0, np.arange(3.0)[::2])  # not contiguous: refused as an eager kernel is


@njit(types.float64(F1), **NJIT)
def _leaf(v):
    return v[0] * v[-1]


@njit(types.float64(F1), **NJIT)
def _middle(v):
    return _leaf(v) + 1.0


@njit(types.float64(F1), **NJIT)
def _top(v):
    return 2.0 * _middle(v)


def test_callees_are_read_from_the_source_and_loaded_before_their_caller():
    """A caller loaded from numba's cache binds its calls to whichever callees the process
    already holds (integrators.numba.jit, "Same code, cold or warm"): so every declared callee is
    compiled or loaded before its caller, on a warm cache as on a cold one."""
    from dyn.attention import schemes
    from dyn.numerics import _field_small, _field_symmetric, attention_field, vexp

    assert callees(_top) == [_middle] and callees(_middle) == [_leaf] and callees(_leaf) == []
    found = set(callees(_field_symmetric.symmetric))  # by name, and through a module
    assert {_field_symmetric._upper_scores, _field_small.columns, vexp.exp_inplace} <= found
    assert attention_field.field in callees(schemes.layer_output)
    assert _top(np.array([3.0, 2.0])) == 14.0
    assert len(_middle.signatures) == 1 and len(_leaf.signatures) == 1  # loaded, never called


STALE_LEAF = """
from numba import types
from integrators.numba.abi import F1, NJIT
from integrators.numba.jit import njit

@njit(types.float64(F1), **NJIT)
def leaf(v):
    total = 0.0
    for x in v:
        total += x * x
    return total{change}
"""

STALE_TOP = """
from numba import types
from integrators.numba.abi import F1, NJIT
from integrators.numba.jit import njit
import stale_leaf

@njit(types.float64(F1), **NJIT)
def top(v):
    return stale_leaf.leaf(v) + 1.0
"""


def test_a_cached_caller_of_a_callee_compiled_again_is_compiled_again(tmp_path):
    """The callee's file changes and the caller's does not (a `git pull`): numba's own cache key
    of the caller (its file, its bytecode) is unchanged, and its cached copy links the old callee.
    The caller is compiled again (the callee digest recorded beside the cache differs,
    jit.callee_digest) and calls the new code (numba alone would run the stale copy: 6.0)."""
    (tmp_path / "stale_leaf.py").write_text(STALE_LEAF.format(change=""))
    (tmp_path / "stale_top.py").write_text(STALE_TOP)
    call = (
        "import sys, numba, numpy as np; sys.path.insert(0, sys.argv[1]); "
        "[numba.njit(lambda v: v + k)(1.0) for k in range(int(sys.argv[2]))]; "
        "import stale_top; print(stale_top.top(np.arange(3.0)))"
    )

    def run(compiled_before):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
        return subprocess.run(
            [sys.executable, "-c", call, str(tmp_path), str(compiled_before)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    assert run(0) == "6.0"  # 0 + 1 + 4, plus 1
    (tmp_path / "stale_leaf.py").write_text(STALE_LEAF.format(change=" + 1.0"))
    assert run(2) == "7.0"


USER_CALLER = """
import numba, numpy as np
import stale_leaf

@numba.njit("float64(float64[::1])", cache=True)
def user(v):
    return stale_leaf.leaf(v) * 2.0
"""


def test_a_users_cached_caller_loads_before_the_kernels_it_calls(tmp_path):
    """A script's own eager `numba.njit(sig, cache=True)` that calls one of our kernels is loaded
    from numba's cache when the script is imported, before anything has loaded that kernel: the
    caller carries its own linked copy of the kernel, and runs."""
    (tmp_path / "stale_leaf.py").write_text(STALE_LEAF.format(change=""))
    (tmp_path / "user_caller.py").write_text(USER_CALLER)
    call = (
        "import sys, numpy as np; sys.path.insert(0, sys.argv[1]); import user_caller; "
        "print(user_caller.user(np.arange(3.0)), sum(user_caller.user.stats.cache_hits.values()))"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    outs = [
        subprocess.run(
            [sys.executable, "-c", call, str(tmp_path)], env=env, check=True, capture_output=True, text=True
        ).stdout.strip()
        for _ in range(2)
    ]
    assert outs == ["10.0 0", "10.0 1"]  # compiled, then loaded from the cache


COLD_OR_WARM = """
import sys, numpy as np
from dyn.numerics import attention_field as af
rng = np.random.default_rng(3)
x = rng.standard_normal((32, 2))
x /= np.linalg.norm(x, axis=1, keepdims=True)
eye, out = np.eye(2).ravel(), np.zeros((32, 2))
af.field(x, 4.0, False, False, 0.0, 1, eye, True, eye, True, out, np.zeros(af.work_size(32, 2)))
sys.stdout.write(out.tobytes().hex())
"""


@pytest.mark.slow
def test_the_attention_field_gives_the_same_bits_on_a_cold_and_a_warm_cache(tmp_path):
    """The attention field compiled in the process that runs it (cold) and loaded from the cache
    it wrote (warm): the same bits. Before callees were loaded first, they differed by 1 ulp."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PATH": "/usr/bin:/bin"}
    cold, warm = (
        subprocess.run([sys.executable, "-c", COLD_OR_WARM], env=env, check=True, capture_output=True, text=True).stdout
        for _ in range(2)
    )
    assert len(cold) == 32 * 2 * 16 and cold == warm


IMPORT_ALL = """
import importlib, pkgutil, sys
import dyn, integrators
from integrators.numba.jit import declared
for package in (dyn, integrators):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.name.endswith(("__main__", "jax", "jax_batch")) and not info.name.startswith(
                ("integrators.jax", "integrators.diffrax")):
            importlib.import_module(info.name)
compiled = [f"{m.__name__}.{k}" for m in list(sys.modules.values())
            if getattr(m, "__name__", "").startswith(("dyn.", "integrators."))
            for k, v in vars(m).items() if declared(v) and v.signatures]
deferred = sum(declared(v) for m in list(sys.modules.values())
               if getattr(m, "__name__", "").startswith(("dyn.", "integrators."))
               for v in vars(m).values())
print(deferred, compiled)
"""


@pytest.mark.slow  # a fresh interpreter imports every module (~5 s); the deferred compile is checked above
def test_importing_every_model_module_compiles_no_kernel():
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, check=True).stdout.split(
        maxsplit=1
    )
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


def test_kernel_families_are_dealt_whole_and_every_kernel_once():
    """dyn.engine.warmup: each declared kernel goes to exactly one share, and a kernel's callees
    share its share (unless they are shared leaves, called from several modules), except in a
    family too large for one share: that one is dealt level by level, every kernel after its
    callees in its own share's order. The deal is the same in every process."""
    from dyn.engine import warmup
    from integrators.numba.jit import callees, declared_kernels

    warmup.import_kernel_modules()
    everything = {id(k) for k in declared_kernels()}
    groups, costs = warmup.families(declared_kernels())
    assert costs == sorted(costs, reverse=True) and sum(map(len, groups)) == len(everything)
    home = {id(k): i for i, group in enumerate(groups) for k in group}
    from dyn.attention import schemes
    from dyn.numerics import _field_small, _field_symmetric, attention_field

    field_family = {
        home[id(k)]
        for k in (attention_field.field, _field_symmetric.symmetric, _field_small.columns, schemes.layer_output)
    }
    assert len(field_family) == 1  # the attention field's tree is one family
    for shares in (1, 2, 3):
        dealt = [warmup.share_of(i, shares) for i in range(shares)]
        ids = [{id(k) for k in share} for share in dealt]
        assert set().union(*ids) == everything and sum(map(len, ids)) == len(everything)
        fair = sum(costs) / shares
        split = {i for i, cost in enumerate(costs) if shares > 1 and cost > fair}
        assert split == ({0} if shares > 1 else set())  # the field's family, by far the largest
        for share, mine in zip(dealt, ids, strict=True):
            for j in mine:  # whole families, but for the split one
                if home[j] not in split:
                    assert {id(k) for k in groups[home[j]]} <= mine
            place = {id(k): n for n, k in enumerate(share)}
            for k in share:  # in the split family, callees first
                assert all(
                    place[id(c)] < place[id(k)]
                    for c in callees(k)
                    if id(c) in place and home[id(c)] == home[id(k)] in split
                )
    with pytest.raises(ValueError, match="share index"):
        warmup.share_of(2, 2)


@pytest.mark.slow
def test_dyn_compile_fills_an_empty_cache_in_two_processes(tmp_path):
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "dyn", "compile", "--workers", "2"], env=env, check=True, capture_output=True, text=True
    ).stdout
    count = int(out.split()[0])
    assert count > 40 and "kernels compiled or loaded" in out
    assert len(list((tmp_path / "numba").rglob("*.nbi"))) >= count  # an index per kernel


CACHED_KERNELS = """
from numba import types
from integrators.numba import jit
from integrators.numba.abi import F1, NJIT

@jit.njit(types.float64(types.float64, F1), **NJIT)
def scaled_sum(c, v):
    total = 0.0
    for x in v:
        total += x
    return c * total

@jit.njit(types.float64(F1), **NJIT)
def calls_scaled_sum(v):
    return scaled_sum(2, v)
"""

CACHE_COUNTS = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from cached_kernels import calls_scaled_sum, scaled_sum
assert calls_scaled_sum.signatures == [] and scaled_sum.signatures == []  # imported: nothing made
value = calls_scaled_sum(np.array([1.0, 2.0]))
print(value, *(sum(getattr(k.stats, s).values()) for k in (scaled_sum, calls_scaled_sum)
               for s in ("cache_hits", "cache_misses")))
"""


def test_a_second_process_loads_declared_kernels_from_numbas_cache(tmp_path):
    """A kernel and its caller compiled in one process (cache misses) are loaded from numba's
    cache in the next (hits), and the recorded callee digest keeps the caller's entry."""
    (tmp_path / "cached_kernels.py").write_text(CACHED_KERNELS)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    outs = [
        subprocess.run(
            [sys.executable, "-c", CACHE_COUNTS, str(tmp_path)], env=env, check=True, capture_output=True, text=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert outs == [["6.0", "0", "1", "0", "1"], ["6.0", "1", "0", "1", "0"]]


def test_a_kernel_pickles_by_name():
    """A pool's worker gets the very kernel of its module (found by name), not a copy."""
    import pickle

    from dyn.numerics import vexp

    assert pickle.loads(pickle.dumps(vexp.row_sum)) is vexp.row_sum
