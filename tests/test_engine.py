"""Engine: HDF5 round trip, executor equivalence, resume after kills, divergence, refusals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.core.system import DIVERGED, FAILED, OK
from dyn.engine import store
from dyn.presentation.cli import main

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


@pytest.mark.parametrize(
    "kept", [("pair_fraction",), ("energy", "n_clusters"), ("time_to_one_cluster", "first_alignment")]
)
def test_kept_observables_are_the_same_numbers_and_only_they_are_written(small_scenario, tmp_path, kept):
    """[output] observables drops outputs (and their companions) from the file, and the system
    skips their work (energy's exps, the union-find): what is kept is bit for bit the same."""
    every = dyn.run(small_scenario, tmp_path / "all.h5", progress=False)
    some = dyn.run(
        small_scenario,
        tmp_path / "some.h5",
        progress=False,
        overrides={"output.observables": list(kept), "output.plot": kept[0]},
    )
    with dyn.open(every) as full, dyn.open(some) as part:
        written = {v for v in part.data_vars if v not in store.BOOKKEEPING}
        censored = ("", "_se", "_censored", "_median", "_median_lower", "_median_upper")
        assert written == {
            f"{k}{tail}" for k in kept for tail in (censored if k == "time_to_one_cluster" else ("", "_se"))
        }
        assert (part["status"].values == OK).all()
        for name in written:
            np.testing.assert_array_equal(part[name].values, full[name].values, err_msg=name)


@pytest.mark.parametrize(
    "executor, workers",
    [
        ("process", 2),
        # dask starts a cluster (~6 s) and a pool of one takes the same code path as two: the
        # default tier keeps the pool of two
        pytest.param("dask", 2, marks=pytest.mark.slow),
        pytest.param("process", 1, marks=pytest.mark.slow),
    ],
)
def test_executors_and_worker_counts_give_identical_numbers(small_scenario, tmp_path, executor, workers):
    serial = values(dyn.run(small_scenario, tmp_path / "s.h5", progress=False))
    out = tmp_path / f"{executor}{workers}.h5"
    assert_same(serial, values(dyn.run(small_scenario, out, executor=executor, workers=workers, progress=False)))


def test_a_run_says_once_when_numba_compiles(small_scenario, tmp_path, monkeypatch, capsys):
    """The first points of a cold run wait for numba: the run says so, once, and only then."""
    import numba

    from dyn.systems.attention_sphere import AttentionSphere

    original = AttentionSphere.simulate

    def compiling(self, spec, runs):  # a fresh kernel per point: numba compiles each time
        numba.njit(lambda v: v + 1.0)(1.0)
        return original(self, spec, runs)

    dyn.run(small_scenario, tmp_path / "first.h5", progress=False)  # compiles on a cold cache
    capsys.readouterr()
    dyn.run(small_scenario, tmp_path / "warm.h5", progress=False)  # every kernel in hand
    assert "compiling numba kernels" not in capsys.readouterr().err
    monkeypatch.setattr(AttentionSphere, "simulate", compiling)
    dyn.run(small_scenario, tmp_path / "cold.h5", progress=False)
    assert capsys.readouterr().err.count("compiling numba kernels on their first use") == 1


def test_failed_point_is_isolated_recorded_and_retried(small_scenario, tmp_path, monkeypatch, capsys):
    from dyn.systems.attention_sphere import AttentionSphere

    original = AttentionSphere.simulate

    def flaky(self, spec, runs):
        if spec["beta"] == 1.0:
            raise RuntimeError("simulated worker crash")
        return original(self, spec, runs)

    monkeypatch.setattr(AttentionSphere, "simulate", flaky)
    out = dyn.run(small_scenario, tmp_path / "f.h5", progress=False)
    with dyn.open(out) as ds:
        assert ds["status"].sel(beta=1.0).values.tolist() == [FAILED, FAILED]
        assert "simulated worker crash" in ds["message"].sel(beta=1.0, normalization="SA").item()
        assert (ds["status"].sel(beta=[0.5, 2.0]).values == OK).all()
        assert ds["message"].sel(beta=0.5, normalization="SA").item() == ""
    assert "failed: RuntimeError: simulated worker crash" in capsys.readouterr().err
    monkeypatch.setattr(AttentionSphere, "simulate", original)
    dyn.run(small_scenario, out, progress=False)  # resume retries the failed points only
    assert_same(values(out), values(dyn.run(small_scenario, tmp_path / "clean.h5", progress=False)))


@pytest.mark.parametrize(
    "break_it, problem",
    [
        (lambda v: v.pop("energy"), "returned no values for energy"),
        (lambda v: v.update(extra=v["energy"]), "undeclared extra"),
        (lambda v: v.update(energy=v["energy"][:, :2]), "energy of shape"),
    ],
)
def test_values_that_miss_the_declared_outputs_fail_their_point_only(
    small_scenario, tmp_path, monkeypatch, break_it, problem
):
    """The engine checks a point's values against the declared outputs in the worker."""
    from dyn.systems.attention_sphere import AttentionSphere

    original = AttentionSphere.simulate

    def sloppy(self, spec, runs):
        chunk = original(self, spec, runs)
        if spec["beta"] == 2.0:
            break_it(chunk.values)
        return chunk

    monkeypatch.setattr(AttentionSphere, "simulate", sloppy)
    out = dyn.run(small_scenario, tmp_path / "m.h5", progress=False)
    with dyn.open(out) as ds:
        assert ds["status"].sel(beta=2.0).values.tolist() == [FAILED, FAILED]
        assert problem in ds["message"].sel(beta=2.0, normalization="SA").item()
        assert (ds["status"].sel(beta=[0.5, 1.0]).values == OK).all()


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
    from dyn.engine.executors import compute_point

    for index in (0, 3):
        writer.write(index, compute_point(sc.setup, index))
    writer.close()
    with dyn.open(out) as ds:
        status = ds["status"].values.reshape(-1)
        assert status.tolist() == [OK, 0, 0, OK, 0, 0]
        assert np.isnan(ds["pair_fraction"].values.reshape(6, -1)[status == 0]).all()
    dyn.run(small_scenario, out, progress=False)
    assert_same(values(out), full)


def test_divergence_is_recorded_not_hidden(small_scenario, tmp_path, capsys):
    # USA weights exp(beta <x_i,x_j>) overflow to inf at beta = 1000: NaN states, status "diverged"
    out = dyn.run(small_scenario, tmp_path / "d.h5", progress=False, overrides=["sweep.beta=[1.0, 1000.0]"])
    with dyn.open(out) as ds:
        status = ds["status"].sel(beta=1000.0, normalization="USA").item()
        assert status == DIVERGED
        assert ds["status"].sel(beta=1.0).values.tolist() == [OK, OK]
    assert "diverged" in capsys.readouterr().err


HOLD_LOCK = """
import sys
from pathlib import Path
from dyn.engine import store
lock = store.WriterLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
sys.stdin.readline()  # hold it until told
lock.release()
"""


@pytest.mark.slow  # two fresh processes; the same refusal in-process stays default below
def test_second_run_on_a_file_being_written_is_refused(small_scenario, tmp_path):
    """Another process holds the output's writer lock (as a running `dyn run` does): a real
    `dyn run` on that file is refused with one line and touches nothing; once the lock is
    released the same command runs. No timing: the holder waits for its stdin."""
    out = tmp_path / "busy.h5"
    script = tmp_path / "hold.py"
    script.write_text(HOLD_LOCK)
    holder = subprocess.Popen(
        [sys.executable, str(script), str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        second = subprocess.run(_run_cmd(small_scenario, out, ()), capture_output=True, text=True)
        assert second.returncode == 2 and "another dyn run" in second.stderr
        assert second.stderr.count("\n") == 1 and not out.exists()
    finally:
        holder.communicate("go\n")
    assert holder.returncode == 0
    dyn.run(small_scenario, out, progress=False)  # free again
    with dyn.open(out) as ds:
        assert (ds["status"].values == OK).all()


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


# 32 small points; the kills are placed by hooks (KILL_AT), so the points' cost does not matter.
KILL_SCENARIO_SETS = [
    "ensemble.runs=32",
    "params.n=8",
    "integrator.dt=0.02",
    "sweep.beta=[0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25]",
    "sweep.normalization=['SA', 'USA']",
    "sweep.d=[2, 3]",
]


def _run_cmd(scenario: Path, out: Path, overrides=tuple(KILL_SCENARIO_SETS)) -> list[str]:
    sets = [arg for s in overrides for arg in ("--set", s)]
    return [sys.executable, "-m", "dyn", "run", str(scenario), "--out", str(out), "--no-progress", *sets]


KILL_AT = """
import os, signal, sys
from dyn.presentation import cli
from dyn.engine import ensemble, store
where, count = sys.argv[1], int(sys.argv[2])  # die in the count-th point's compute or write
seen = []

def hit():
    seen.append(1)
    if len(seen) == count:
        os.kill(os.getpid(), signal.SIGKILL)

if where == "compute":
    run_point = ensemble.run_point
    def computing(system, spec, sink=None):
        hit()
        return run_point(system, spec, sink)
    ensemble.run_point = computing
elif where == "create":  # the file is being made (after the partial file exists)
    create = store.create
    def creating(*args, **kwargs):
        create(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    store.create = creating
else:  # after a point is written and flushed
    write = store.Writer.write
    def writing(self, index, result):
        write(self, index, result)
        hit()
    store.Writer.write = writing
sys.exit(cli.main(sys.argv[3:]))
"""


@pytest.mark.parametrize(
    "kills",
    [
        3,  # one of each kind (each kill is a fresh process: ~5 s of start-up)
        pytest.param(10, marks=pytest.mark.slow),
    ],
)
def test_kills_at_chosen_moments_then_resume_gives_the_same_numbers(small_scenario, tmp_path, kills):
    """SIGKILL a sweep `kills` times, at moments drawn from a seeded generator: while the file is
    being created, while a point is computed, right after a point is written. After each kill the
    file must open; the resumed file must equal an uninterrupted run bit for bit. The kills are
    placed by hooks, not timers, so the test means the same on any machine."""
    # the uninterrupted run, in this process: integrators.numba.jit loads a kernel's callees before
    # it, so this worker runs the same code as the fresh processes killed below, cold or warm
    # (before that, USA points differed from theirs by 1-2 ulp)
    reference = dyn.run(small_scenario, tmp_path / "ref.h5", progress=False, overrides=KILL_SCENARIO_SETS)
    script = tmp_path / "kill.py"
    script.write_text(KILL_AT)
    out = tmp_path / "killed.h5"
    rng = np.random.default_rng(20261201)
    moments = [("create", 1), ("compute", 2), ("write", 1)]
    moments += [(str(rng.choice(["compute", "write"])), int(rng.integers(1, 4))) for _ in range(kills - len(moments))]
    for where, count in moments:  # at most 27 of the 32 points get done before the last kill
        cmd = _run_cmd(small_scenario, out)
        proc = subprocess.run([sys.executable, str(script), where, str(count), *cmd[3:]], capture_output=True)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        if out.exists():
            with dyn.open(out) as ds:  # readable after every kill
                assert ds["status"].size == 32 and (ds["status"] == OK).sum() < 32
    dyn.run(small_scenario, out, progress=False, overrides=KILL_SCENARIO_SETS)  # the resume
    assert_same(values(out), values(reference))
    assert not store.partial_path(out).exists()


DIE_MID_WRITE = """
import os, signal, sys
from dyn.presentation import cli
from dyn.engine import store
calls = []
def clip(message):  # called after a point's values are written, before the flush and status
    calls.append(1)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return message.encode()
store._clip = clip
sys.exit(cli.main(sys.argv[1:]))
"""


def test_kill_in_the_middle_of_a_write_leaves_a_readable_file(small_scenario, tmp_path):
    script = tmp_path / "die.py"
    script.write_text(DIE_MID_WRITE)
    out = tmp_path / "torn.h5"
    cmd = _run_cmd(small_scenario, out, overrides=())
    proc = subprocess.run([sys.executable, str(script), *cmd[3:]], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    with dyn.open(out) as ds:
        status = ds["status"].values.reshape(-1)
        assert (status == OK).sum() == 2 and (status == 0).sum() == 4  # the torn point is pending
    dyn.run(small_scenario, out, progress=False)
    assert_same(values(out), values(dyn.run(small_scenario, tmp_path / "ref.h5", progress=False)))


PROBE = """[scenario]
name = "probe"
system = "probe"
[params]
samples = 100
[sweep]
label = { start = 0, stop = 299, num = 300 }
[ensemble]
seed = 11
"""


def test_batched_pool_tasks_keep_every_point_on_its_own_stream(tmp_path):
    """300 cheap points: the pool soon packs many points per task; numbers must not move."""
    scenario = tmp_path / "probe.toml"
    scenario.write_text(PROBE)
    serial = dyn.run(scenario, tmp_path / "s.h5", progress=False)
    pooled = dyn.run(scenario, tmp_path / "p.h5", executor="process", workers=2, progress=False)
    with dyn.open(serial) as a, dyn.open(pooled) as b:
        np.testing.assert_array_equal(a["first"].values, b["first"].values)
        np.testing.assert_array_equal(a["mean"].values, b["mean"].values)
        assert len(np.unique(a["first"].values[:, 0])) == 300  # distinct streams per point
        # each point's first draw is the first normal of SeedSequence(seed, spawn_key=(index,))
        first = [
            np.random.default_rng(np.random.SeedSequence(11, spawn_key=(k,))).standard_normal() for k in (0, 150, 299)
        ]
        np.testing.assert_array_equal(a["first"].values[[0, 150, 299], 0], first)
