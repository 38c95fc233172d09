"""Reliability, issue 20, defect 2: pool workers die with their driver, and a resume never takes
a point file it did not vouch for (a straggler's, another scenario's, a torn one)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import h5py
import psutil
import pytest

import dyn
from _files import assert_same, read_vars
from dyn.engine import trajectories
from dyn.engine.lifetime import die_with_parent

TRAJ = ["output.trajectories=true", "ensemble.runs=3", "sweep.beta=[0.5, 1.0, 2.0]"]


def _states(path):
    return read_vars(path, ("trajectory", "energy", "status"))


def _command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # a short-lived child that exited (or is a zombie) while we looked
        return ""


def _is_zombie(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _pool_workers(pid: int) -> list[psutil.Process]:
    """The driver's live multiprocessing-spawn children."""
    return [p for p in psutil.Process(pid).children() if "multiprocessing.spawn" in _command_line(p)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_pool_workers_die_with_a_killed_driver(small_scenario, tmp_path):
    out = tmp_path / "orphans.h5"
    sets = ["ensemble.runs=3000", "params.n=8", "integrator.dt=0.02", "sweep.d=[2, 3]"]
    cmd = [
        sys.executable,
        "-m",
        "dyn",
        "run",
        str(small_scenario),
        "--out",
        str(out),
        "--no-progress",
        "--executor",
        "process",
        "--workers",
        "2",
        *[a for s in sets for a in ("--set", s)],
    ]
    driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # a cold start on busy cores
        workers = []
        while time.monotonic() < deadline and driver.poll() is None:
            workers = _pool_workers(driver.pid)
            if len(workers) == 2 and out.exists():
                break
            time.sleep(0.1)
        assert len(workers) == 2, "the pool did not start"
        children = psutil.Process(driver.pid).children(recursive=True)  # the resource tracker too
        driver.send_signal(signal.SIGKILL)
        driver.wait()
        gone, alive = psutil.wait_procs(children, timeout=120)  # returns when all are gone
        # an orphan that has exited stays a zombie until init reaps it, and some container
        # inits never do: a zombie runs no code and holds no file, so it counts as dead
        alive = [p for p in alive if not _is_zombie(p)]
        assert not alive, [_command_line(p) for p in alive]
    finally:
        if driver.poll() is None:
            driver.kill()
    with dyn.open(out) as ds:  # readable; resuming it is tested below and in test_engine
        assert ds["status"].size == 12


def test_die_with_parent_is_available_here():
    if sys.platform.startswith("linux"):
        assert die_with_parent()


def _tamper(folder, index, data=None, tag=None):
    path = trajectories.point_file(folder, index)
    with h5py.File(path, "r+") as f:
        if data is not None:
            f[trajectories.DATASET][...] = data
        if tag is not None:
            f.attrs[trajectories.TAG_ATTR] = tag


def test_a_resume_takes_no_foreign_or_stray_point_file(small_scenario, tmp_path):
    reference = _states(dyn.run(small_scenario, tmp_path / "ref.h5", progress=False, overrides=TRAJ))
    out = dyn.run(small_scenario, tmp_path / "r.h5", progress=False, overrides=TRAJ)
    folder = trajectories.sidecar_dir(out)
    # a done point whose file another scenario (or a stale run) wrote: recomputed
    _tamper(folder, 1, data=7.0, tag="0" * 64)
    # a done point whose file is gone: recomputed
    trajectories.point_file(folder, 4).unlink()
    # a pending point with a straggler's file (complete, but not vouched for) and a torn .partial
    with h5py.File(out, "r+") as f:
        f["status"][2, 0] = 0  # point 4 of (beta, normalization) = (2.0, SA)
    (folder / "point_0000003.h5.partial").write_bytes(b"torn")
    with h5py.File(out, "r+") as f:
        f["status"][1, 1] = 0  # point 3
    _tamper(folder, 3, data=5.0)
    dyn.run(small_scenario, out, progress=False, overrides=TRAJ)
    assert_same(_states(out), reference)
    assert not list(folder.glob("*.partial"))


def test_a_new_file_ignores_the_folder_of_a_deleted_one(small_scenario, tmp_path):
    """`rm NAME.h5` leaves NAME.h5.d/; another scenario then made at NAME.h5 must not show the
    old states through its virtual dataset."""
    out = dyn.run(small_scenario, tmp_path / "n.h5", progress=False, overrides=TRAJ)
    out.unlink()
    other = [*TRAJ, "ensemble.seed=99"]
    fresh = _states(dyn.run(small_scenario, tmp_path / "fresh.h5", progress=False, overrides=other))
    assert_same(_states(dyn.run(small_scenario, out, progress=False, overrides=other)), fresh)


def test_a_killed_pool_worker_stops_the_run_in_one_line(small_scenario, tmp_path):
    out = tmp_path / "worker.h5"
    sets = ["ensemble.runs=3000", "params.n=8", "integrator.dt=0.02", "sweep.d=[2, 3]"]
    cmd = [
        sys.executable,
        "-m",
        "dyn",
        "run",
        str(small_scenario),
        "--out",
        str(out),
        "--no-progress",
        "--executor",
        "process",
        "--workers",
        "2",
        *[a for s in sets for a in ("--set", s)],
    ]
    driver = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300  # a cold start on busy cores
        workers = []
        while time.monotonic() < deadline and driver.poll() is None and not workers:
            workers = _pool_workers(driver.pid)
            time.sleep(0.1)
        assert workers, "the pool did not start"
        while not out.exists() and driver.poll() is None:
            time.sleep(0.05)
        workers[0].kill()
        err = driver.stderr.read().strip()
        assert driver.wait() == 2, err
    finally:
        if driver.poll() is None:
            driver.kill()
    assert err.startswith("dyn: error: ") and len(err.splitlines()) == 1 and "worker" in err, err
    with dyn.open(out) as ds:
        assert ds["status"].size == 12


UNGUARDED = """
import dyn
dyn.run({scenario!r}, {out!r}, executor="process", workers=2, progress=False)
print("finished")
"""


def test_an_unguarded_script_with_a_process_pool_fails_in_one_line_naming_the_guard(small_scenario, tmp_path):
    """Spawned workers re-import the driver's script; without `if __name__ == "__main__":` each
    would call dyn.run again. They stop quietly instead, and the driver's error says why."""
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED.format(scenario=str(small_scenario), out=str(tmp_path / "u.h5")))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1 and "finished" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("dyn.core.errors.RunAborted: --executor: ") and '__name__ == "__main__"' in last
    assert proc.stderr.count("RunAborted") == 1  # no error from the workers
