"""Engine: HDF5 round trip, executor equivalence, resume after kills, divergence, refusals."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn import store
from dyn.cli import main
from dyn.systems.base import DIVERGED, OK

VARIABLES = ("pair_fraction", "p_one_cluster", "n_clusters", "min_inner", "energy")


def values(path: Path) -> dict[str, np.ndarray]:
    with dyn.open(path) as ds:
        return {name: ds[name].values.copy() for name in (*VARIABLES, "status")}


def assert_same(a: dict, b: dict) -> None:
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)  # bit for bit, NaN == NaN


def test_round_trip_through_xarray(small_scenario, tmp_path):
    out = dyn.run(small_scenario, tmp_path / "r.h5", progress=False)
    with dyn.open(out) as ds:
        assert dict(ds.sizes) == {"beta": 3, "normalization": 2, "time": 5}
        assert ds["beta"].values.tolist() == [0.5, 1.0, 2.0]
        assert ds["normalization"].values.tolist() == ["SA", "USA"]
        np.testing.assert_allclose(ds["time"].values, np.linspace(0, 2, 5))
        assert ds["pair_fraction"].dims == ("beta", "normalization", "time")
        for name in VARIABLES:
            assert ds[name].attrs["long_name"] and np.isfinite(ds[name].values).all()
        assert (ds["status"].values == OK).all()
        resolved = tomllib.loads(ds.attrs["scenario"])
        assert resolved == dyn.load(small_scenario).data
        assert ds.attrs["scenario_hash"] == dyn.load(small_scenario).hash
        assert json.loads(ds.attrs["versions"])["numpy"] == np.__version__
        for key in ("git_commit", "command", "created"):
            assert ds.attrs[key]
        # physics sanity: at t = 0 the USA energy of unit tokens is at least e^{-beta}/(2 beta)
        e0 = ds["energy"].isel(time=0).values
        assert (e0 >= np.exp(-ds["beta"].values)[:, None] / (2 * ds["beta"].values[:, None])).all()


def test_executors_and_worker_counts_give_identical_numbers(small_scenario, tmp_path):
    serial = values(dyn.run(small_scenario, tmp_path / "s.h5", progress=False))
    one = values(dyn.run(small_scenario, tmp_path / "p1.h5", executor="process", workers=1, progress=False))
    two = values(dyn.run(small_scenario, tmp_path / "p2.h5", executor="process", workers=2, progress=False))
    assert_same(serial, one)
    assert_same(serial, two)


def test_resume_skips_done_points_and_refuses_other_scenarios(small_scenario, tmp_path, capsys):
    out = tmp_path / "r.h5"
    dyn.run(small_scenario, out, progress=False)
    before = out.read_bytes()
    assert main(["run", str(small_scenario), "--out", str(out), "--no-progress"]) == 0
    assert "6 of 6 points already done" in capsys.readouterr().err
    assert out.read_bytes() == before
    assert main(["run", str(small_scenario), "--out", str(out), "--set", "ensemble.runs=7"]) == 2
    assert "holds a different scenario" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_pending_points_are_nan_and_get_filled_on_resume(small_scenario, tmp_path):
    full = values(dyn.run(small_scenario, tmp_path / "full.h5", progress=False))
    out = tmp_path / "part.h5"
    sc = dyn.load(small_scenario)
    store.create(out, sc, "test")
    writer = store.Writer(out, sc)
    from dyn.executors import compute_point

    for index in (0, 3):
        writer.write(*compute_point(sc.text, index))
    writer.close()
    with dyn.open(out) as ds:
        status = ds["status"].values.reshape(-1)
        assert status.tolist() == [OK, 0, 0, OK, 0, 0]
        assert np.isnan(ds["pair_fraction"].values.reshape(6, -1)[status == 0]).all()
    dyn.run(small_scenario, out, progress=False)
    assert_same(values(out), full)


def test_divergence_is_recorded_not_hidden(small_scenario, tmp_path, capsys):
    # USA weights exp(beta <x_i,x_j>) overflow to inf at beta = 1000: NaN states, status "diverged"
    out = dyn.run(small_scenario, tmp_path / "d.h5", progress=False,
                  overrides=["sweep.beta=[1.0, 1000.0]"])
    with dyn.open(out) as ds:
        status = ds["status"].sel(beta=1000.0, normalization="USA").item()
        assert status == DIVERGED
        assert ds["status"].sel(beta=1.0).values.tolist() == [OK, OK]
    assert "diverged" in capsys.readouterr().err


def test_concurrent_writer_is_refused(small_scenario, tmp_path, capsys):
    out = tmp_path / "locked.h5"
    lock = store.WriterLock(out)
    lock.acquire()
    try:
        assert main(["run", str(small_scenario), "--out", str(out)]) == 2
        assert "another dyn run" in capsys.readouterr().err
        assert not out.exists()
    finally:
        lock.release()


# 16 points of ~0.1 s each (about 1 s of start-up before them), so that kills land before, between and during point writes.
KILL_SCENARIO_SETS = ["ensemble.runs=400", "params.n=8", "integrator.dt=0.02",
                      "sweep.beta=[0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25]"]


def _run_cmd(scenario: Path, out: Path) -> list[str]:
    sets = [arg for s in KILL_SCENARIO_SETS for arg in ("--set", s)]
    return [sys.executable, "-m", "dyn", "run", str(scenario), "--out", str(out), "--no-progress", *sets]


def test_killed_sweep_resumes_to_the_same_numbers(small_scenario, tmp_path):
    """SIGKILL a running sweep at random moments; each time the file must open, and the final
    resumed file must equal an uninterrupted run bit for bit."""
    reference = tmp_path / "ref.h5"
    start = time.perf_counter()
    subprocess.run(_run_cmd(small_scenario, reference), check=True, capture_output=True)
    full = time.perf_counter() - start  # start-up included: early kills hit start-up or creation
    out = tmp_path / "killed.h5"
    rng = np.random.default_rng()
    kills = 0
    for _ in range(4):
        proc = subprocess.Popen(_run_cmd(small_scenario, out), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 0.9) * full)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
        if out.exists():
            with dyn.open(out) as ds:  # readable after every kill
                assert ds["status"].size == 16
    subprocess.run(_run_cmd(small_scenario, out), check=True, capture_output=True)
    assert kills >= 1
    assert_same(values(out), values(reference))
    assert not store.partial_path(out).exists()
