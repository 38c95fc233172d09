"""Shared fixtures: a small, fast attention scenario written to a temporary directory."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from _scenarios import SMALL_SCENARIO

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _in_the_repository(monkeypatch):
    """Every test runs in the repository's root, whatever folder pytest was started in (tests
    name shipped files by relative paths, scenarios/NAME.toml, as a user in a checkout does)."""
    monkeypatch.chdir(ROOT)


def pytest_configure(config):
    """In each pytest-xdist worker, compile this worker's share of the numba kernels before the
    first test (dyn.engine.warmup): on a cold cache two workers otherwise compile the same kernel
    families side by side, and later tests and the processes they start load every kernel from
    the cache. Then run ensembles on one thread per worker: the workers already fill the cores,
    and a second thread per worker only adds contention. Tests of
    thread counts set theirs and restore this one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker.startswith("gw") and count > 1:
        import numba

        from dyn.engine.warmup import compile_share

        # a worker started in place of one that crashed is named past the count (gw2 of 2):
        # it takes its predecessor's share
        compile_share(int(worker[2:]) % count, count)
        numba.set_num_threads(1)


# Cases of parametrized tests that the default tier leaves to the slow tier: each compiles
# seconds of kernels on a cold cache, and its siblings (named) check the same path by default.
SLOW_CASES = {
    "test_reliability_bounds.py::test_every_float_bound_validates_to_finite_step_rates"
    "[dyn.frontier.sparse_attention_clusters:SparseAttentionClusters]":
        "the other systems' bounds",
    "test_attention_particles.py::test_bad_input_is_one_line_and_exit_2[Shifted--negative weight]":
        "test_normalizations.py::test_row_check_names_weights_that_are_not_a_distribution",
    "test_attention_particles.py::test_bad_input_is_one_line_and_exit_2[Halves--summing to]":
        "test_normalizations.py::test_row_check_names_weights_that_are_not_a_distribution",
    "test_run_until_decided.py::test_d_dimensional_forms_run_until_decided[sde]":
        "the network form, run until decided by the same stopping rule",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark SLOW_CASES slow before `-m 'not slow'` deselects."""
    for item in items:
        if item.nodeid.removeprefix("tests/") in SLOW_CASES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def small_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL_SCENARIO)
    return path
