"""`dyn run --dry-run`: the file size is the run's own bound; the time is the run's wall time as
calibrated on this machine (its start, the kernels' first use, the file's writes, the sampled
points' seconds spread over the sweep); nothing is left behind."""

import time

import numpy as np

import dyn
from dyn.engine import store
from dyn.engine.estimate import estimate, point_costs, sample_points
from dyn.presentation.cli import main

IMPORTED = time.monotonic()


def test_sampled_points_spread_over_the_sweep_ends_included():
    assert sample_points(45) == [0, 22, 44]
    assert sample_points(2) == [0, 1] and sample_points(1) == [0]


def test_estimate_spreads_the_sampled_cost_over_every_point(small_scenario, tmp_path, monkeypatch):
    from dyn.engine import calibrate

    monkeypatch.setattr(calibrate, "BUDGET", 1e9)  # three points sampled however loaded the machine
    sc = dyn.load(small_scenario)
    out = tmp_path / "never.h5"
    found = estimate(sc, out, workers=2)
    assert (found.points, found.runs, found.file) == (6, 6, out)
    assert found.file_bytes == store.estimated_bytes(sc)
    assert list(found.sampled) == [0, 2, 5] and all(v > 0 for v in found.sampled.values())
    # points 0, 1 take point 0's cost; 2, 3 point 2's; 4, 5 point 5's (nearest in sweep order)
    nearest = [0, 0, 2, 2, 5, 5]
    assert np.isclose(found.serial_seconds, 6 * sum(found.sampled[i] for i in nearest))
    text = str(found)
    assert text.splitlines()[0] == "dry run: small (attention_sphere): 6 points x 6 runs = 36 runs"
    assert "with 2 workers" in text and "compiling:" in text
    assert list(tmp_path.iterdir()) == [small_scenario]  # no file, no lock, no states


def test_dry_run_from_the_command_line_writes_nothing(small_scenario, tmp_path, capsys):
    out = tmp_path / "never.h5"
    assert main(["run", str(small_scenario), "--out", str(out), "--dry-run", "--set", "ensemble.runs=3"]) == 0
    printed = capsys.readouterr().out
    assert "6 points x 3 runs = 18 runs" in printed and f"file: {out}, about" in printed
    assert list(tmp_path.iterdir()) == [small_scenario]


def test_the_printed_time_is_the_runs_wall_time_with_its_calibration(small_scenario, tmp_path):
    found = estimate(dyn.load(small_scenario), tmp_path / "never.h5")
    # start (unknown from Python) + the kernels' first use + the file + the points
    assert found.start_seconds is None and found.file_seconds > 0 and found.load_seconds >= 0
    assert np.isclose(found.total_seconds, found.load_seconds + found.file_seconds + found.serial_seconds)
    assert 0 < found.calibration_seconds
    text = str(found)
    assert "calibrated on this machine in " in text and " cores" in text
    assert "start not measured" in text


def test_the_command_line_counts_its_own_start(small_scenario, tmp_path, capsys):
    assert main(["run", str(small_scenario), "--out", str(tmp_path / "never.h5"), "--dry-run"]) == 0
    time_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("time:"))
    assert "(start " in time_line and "start not measured" not in time_line


def test_a_point_that_fails_leaves_the_time_uncalibrated(small_scenario, tmp_path, monkeypatch):
    from dyn.core.contract import FAILED, PointResult
    from dyn.engine import worker

    monkeypatch.setattr(worker, "compute_point", lambda *a, **k: PointResult({}, FAILED, "boom"))
    found = estimate(dyn.load(small_scenario), tmp_path / "never.h5")
    assert found.serial_seconds is None and found.total_seconds is None
    assert "time: uncalibrated (point 0 failed: boom)" in str(found)
    assert list(tmp_path.iterdir()) == [small_scenario]


def test_auto_steps_take_the_sampled_point_of_their_step_scaled_by_steps():
    sc = dyn.load("noisy_phase", ["sweep.beta=[1.0,3.0]", "sweep.sigma=[0.5,2.0]"])
    dt = np.array([sc.spec(i).dt for i in range(4)])
    assert dt[1] == dt[3] and dt[0] > 2 * dt[1]  # the noise sets the step: sigma = 2 steps finer
    costs = point_costs(sc, {0: 1.0, 2: 2.0, 3: 5.0})
    # point 1 takes point 3's cost (the same step), not point 0's (nearer in sweep order)
    np.testing.assert_allclose(costs, [1.0, 5.0, 2.0, 5.0])
    # with only point 0 timed, the others scale by their steps
    np.testing.assert_allclose(point_costs(sc, {0: 1.0}), dt[0] / dt)


def test_compiling_time_is_the_union_of_nested_compiles():
    from types import SimpleNamespace

    from dyn.engine.calibrate import compiling_seconds

    def ev(start):
        return SimpleNamespace(is_start=start)

    # an outer compile 0..10 holding a nested one 2..3, then another 12..13
    buffer = [
        (0.0, ev(True)),
        (2.0, ev(True)),
        (3.0, ev(False)),
        (10.0, ev(False)),
        (12.0, ev(True)),
        (13.0, ev(False)),
    ]
    assert compiling_seconds(buffer) == 11.0 and compiling_seconds([]) == 0.0


def test_process_age_is_this_process_age():
    from dyn.engine.calibrate import process_age

    age = process_age()
    if age is None:  # no /proc here: the start is then said to be not measured
        return
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    # older than this test module (imported in this process), younger than the machine
    assert time.monotonic() - IMPORTED - 0.02 <= age < uptime
