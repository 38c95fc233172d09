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


@pytest.fixture
def small_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL_SCENARIO)
    return path
