"""integrators.split_compile: a cold kernel tree compiles on two processes, each kernel once,
and the numbers are those of a compile in one process."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba import types

from dyn.numerics.vexp import row_sum
from integrators import split_compile
from integrators.jit import callees, njit
from integrators.numba_abi import F1, NJIT

ROOT = Path(__file__).resolve().parent.parent


def main_job_roots():
    """What the main job's first solve compiles together: the RK kernel, its drift, the sphere's
    projection and retraction, and the observation's pair pass."""
    from dyn.attention import observables, schemes
    from integrators import geometry, numba_fixed

    return [numba_fixed._rk_block, schemes.layer_output, geometry.SPHERE.project,
            geometry.SPHERE.retract, observables._pairs_kernel]


def closure(kernels) -> dict:
    """The kernels and every declared kernel they reach, by id."""
    seen, todo = {}, list(kernels)
    while todo:
        k = todo.pop()
        if id(k) not in seen:
            seen[id(k)] = k
            todo.extend(callees(k))
    return seen


def test_a_cold_tree_is_split_so_that_no_process_needs_the_others_work(monkeypatch):
    """Every kernel at most once; what this process compiles before or beside the helper
    reaches nothing the helper compiles; the helper reaches only its own kernels and those
    compiled before it starts; what is left (compiled after) calls into the helper's share."""
    monkeypatch.setattr(split_compile, "cached", lambda kernel: False)
    roots = main_job_roots()
    plan = split_compile.plan(roots, callees, lambda kernel: True)
    assert plan is not None
    first, helper, alongside = ({id(k) for k in part}
                                for part in (plan.first, plan.helper, plan.alongside))
    tree = closure(roots)
    assert helper and not (first & helper or first & alongside or helper & alongside)
    assert first | helper | alongside <= set(tree)
    assert not set(closure(plan.first + plan.alongside)) & helper  # never waits on the helper
    assert set(closure(plan.helper)) <= helper | first  # the helper never compiles this one's
    above = set(tree) - first - helper - alongside
    assert all(set(closure([tree[i]])) & helper for i in above)
    serial = sum(split_compile.PER_KERNEL + split_compile.cost(k) for k in tree.values())
    assert plan.wait < 0.8 * serial


@njit(types.float64(F1), **NJIT)
def _scripted(w):  # a kernel of a module that is not a package's submodule, like a script's
    return row_sum(w)


def test_the_helper_never_imports_a_module_outside_a_package(monkeypatch):
    """The helper imports the module of each kernel it compiles: a script's (or this test
    module's) kernels stay here, however costly."""
    monkeypatch.setattr(split_compile, "cached", lambda kernel: False)
    monkeypatch.setattr(split_compile, "cost", lambda kernel: 10**6 if kernel is _scripted
                        else 1000)
    plan = split_compile.plan([_scripted, *main_job_roots()], callees, lambda kernel: True)
    assert plan is not None and plan.helper
    assert _scripted not in plan.helper
    assert all("." in k.py_func.__module__ for k in plan.helper)


def test_a_cached_or_small_tree_compiles_in_one_process(monkeypatch):
    from dyn.numerics import vexp

    monkeypatch.setattr(split_compile, "cached", lambda kernel: True)
    assert split_compile.plan(main_job_roots(), callees, lambda kernel: True) is None
    monkeypatch.setattr(split_compile, "cached", lambda kernel: False)
    assert split_compile.plan([vexp.row_sum], callees, lambda kernel: True) is None
    monkeypatch.setenv(split_compile.JOBS_ENV, "1")
    assert not split_compile.enabled()
    monkeypatch.setenv(split_compile.JOBS_ENV, "2")
    assert split_compile.enabled()
    monkeypatch.setenv(split_compile.HELPER_ENV, "1")  # a helper never splits again
    assert not split_compile.enabled()


COLD_RUN = """
import json, sys
import dyn
from integrators.jit import declared_kernels
path = dyn.run("scenarios/attention_clusters.toml", sys.argv[1], progress=False,
               overrides=["ensemble.runs=4", "sweep.beta=[1.0, 9.0]", "output.saves=10",
                          "integrator.horizon=2.0"])
with dyn.open(path) as ds:
    values = {v: ds[v].values.tolist() for v in ("pair_fraction", "energy", "min_inner")}
hits = sum(sum(k.stats.cache_hits.values()) for k in declared_kernels())
print(json.dumps({"hits": hits, "values": values}))
"""


@pytest.mark.slow  # two cold compiles of the main job's kernels, about 10 s each on 2 cores
def test_a_cold_run_split_over_two_processes_gives_the_same_numbers(tmp_path):
    """The main job on an empty cache, compiled in one process and split over two: the same
    bits; split, the run loads from the cache the kernels its helper compiled (cache hits on
    an empty cache), in one process it loads none."""
    found = {}
    for jobs in ("1", "2"):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / f"numba{jobs}"),
               split_compile.JOBS_ENV: jobs}
        env.pop(split_compile.HELPER_ENV, None)
        out = subprocess.run([sys.executable, "-c", COLD_RUN, str(tmp_path / f"{jobs}.h5")],
                             env=env, cwd=ROOT, check=True, capture_output=True, text=True)
        found[jobs] = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["1"]["hits"] == 0 and found["2"]["hits"] > 5
    assert found["1"]["values"] == found["2"]["values"]
