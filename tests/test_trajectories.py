"""Saved trajectories: consistent with the summaries, identical across executors, pending = NaN,
and streamed with memory that does not grow with the number of points."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import dyn
from dyn import attention

TRAJ = ["output.trajectories=true"]


def test_trajectories_agree_with_summaries_and_initial_law(small_scenario, tmp_path):
    out = dyn.run(small_scenario, tmp_path / "t.h5", overrides=TRAJ, progress=False)
    sc = dyn.load(small_scenario, TRAJ)
    with dyn.open(out) as ds:
        traj = ds["trajectory"]
        assert traj.dims == ("beta", "normalization", "run", "trajectory_time", "token", "coordinate")
        x = traj.values
        np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)  # on the sphere
        flat = x.reshape((-1,) + x.shape[2:])
        for index in range(sc.count):
            # time 0 holds exactly the point's initial draws
            x0 = attention.uniform_sphere(sc.spec(index).rng, 6, 5, 3)
            np.testing.assert_array_equal(flat[index][:, 0], x0)
        # every run at every save time is stored, so the summaries follow from the trajectories
        pairs = attention.pair_fraction(x, 0.01).mean(axis=2)
        np.testing.assert_allclose(pairs, ds["pair_fraction"].values, rtol=0, atol=1e-12)


@pytest.mark.slow  # a process pool; the serial trajectory checks and test_engine's pool check stay default
def test_trajectories_identical_across_executors_and_thinned(small_scenario, tmp_path):
    sets = TRAJ + ["output.trajectory_every=2", "output.trajectory_runs=3"]
    a = dyn.run(small_scenario, tmp_path / "a.h5", overrides=sets, progress=False)
    b = dyn.run(small_scenario, tmp_path / "b.h5", overrides=sets, executor="process", workers=2, progress=False)
    with dyn.open(a) as da, dyn.open(b) as db:
        assert da["trajectory"].sizes["run"] == 3
        assert da["trajectory_time"].values.tolist() == [0.0, 1.0, 2.0]
        np.testing.assert_array_equal(da["trajectory"].values, db["trajectory"].values)


def test_pending_points_read_as_nan(small_scenario, tmp_path):
    from dyn.engine import store
    from dyn.engine.executors import compute_point

    sc = dyn.load(small_scenario, TRAJ)
    out = tmp_path / "p.h5"
    store.create(out, sc, "test")
    writer = store.Writer(out, sc)
    writer.write(1, compute_point(sc.setup, 1, str(out) + ".d"))
    writer.close()
    with dyn.open(out) as ds:
        x = ds["trajectory"].values.reshape((6, -1))
        assert np.isfinite(x[1]).all() and np.isnan(np.delete(x, 1, axis=0)).all()


def test_trajectories_need_fixed_state_shape(small_scenario):
    with pytest.raises(dyn.ScenarioError, match="params.n fixed"):
        dyn.load(small_scenario, TRAJ + ["sweep.n=[4, 5]"])


# The peak of the run's own process: VmHWM, the high-water mark of its address space. Not
# ru_maxrss: on Linux, exec folds the parent's high-water mark into the child's ru_maxrss, so a
# sweep started from a pytest worker that had grown to 1.1 GB reported 1.1 GB (measured; the
# same sweep from a shell: 284 MiB).
PEAK_RSS = """
import resource, sys
from dyn.presentation.cli import main
code = main(sys.argv[1:])
try:
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except OSError:  # no procfs: ru_maxrss (which may include the parent's peak: an upper bound)
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("PEAK_KIB", kib, file=sys.stderr)
sys.exit(code)
"""


def _peak_rss_mib(tmp_path, scenario, out, sets) -> tuple[float, float]:
    script = tmp_path / "peak.py"
    script.write_text(PEAK_RSS)
    args = [a for s in sets for a in ("--set", s)]
    proc = subprocess.run(
        [sys.executable, str(script), "run", str(scenario), "--out", str(out), "--no-progress", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    peak = int(proc.stderr.split("PEAK_KIB")[1].split()[0]) / 1024
    size = sum(p.stat().st_size for p in (tmp_path / (out.name + ".d")).iterdir()) / 2**20
    return peak, size


def _streaming_sets(points: int, runs: int) -> list[str]:
    betas = ", ".join(str(0.5 + 0.01 * k) for k in range(points))
    return TRAJ + [
        f"sweep.beta=[{betas}]",
        "sweep.normalization=['SA']",
        f"ensemble.runs={runs}",
        "params.n=16",
        "params.d=2",
        "integrator.dt=0.05",
        "integrator.horizon=1.0",
        "output.saves=50",
    ]


@pytest.mark.slow  # ~20 s of sweeps measured in subprocesses: a long check
def test_peak_memory_does_not_grow_with_the_number_of_points(small_scenario, tmp_path):
    """3x more points (3x more trajectory data) must not raise the peak RSS of the sweep: each
    point streams its runs to disk chunk by chunk."""
    few, few_mib = _peak_rss_mib(tmp_path, small_scenario, tmp_path / "few.h5", _streaming_sets(2, 2000))
    many, many_mib = _peak_rss_mib(tmp_path, small_scenario, tmp_path / "many.h5", _streaming_sets(6, 2000))
    assert many_mib > 2.5 * few_mib
    # 25 MiB of slack: allocator and HDF5 cache noise, far below the 2x more data written
    assert many < few + 25, (few, many, few_mib, many_mib)


@pytest.mark.slow
def test_two_gigabytes_of_trajectories_under_500_mib_peak(small_scenario, tmp_path):
    peak, size = _peak_rss_mib(tmp_path, small_scenario, tmp_path / "big.h5", _streaming_sets(40, 4000))
    # 40 points x 4000 runs x 51 times x 16 tokens x 2 coordinates: 1992 MiB of doubles, which
    # shuffle + gzip shrink by about a fifth on disk (1606 MiB measured)
    assert size > 1400
    assert peak < 500, (peak, size)
