"""Reliability, issue 20, defect 1: a full disk during a run with trajectories. The failing point
gets status 3 (failed) with the OS error as its message, the run goes on and exits with 3, no
`.partial` file stays, the file stays readable, and a resume once space is freed gives the
numbers of an uninterrupted run. Before, HDF5 met the full disk mid-write and the process
segfaulted (serial) or the pool broke (process)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

import dyn
from _files import assert_same, read_vars
from dyn.core.system import FAILED, OK
from dyn.engine import store, trajectories
from dyn.presentation.cli import main

# 6 points; each point file holds 400 runs x 41 saves x 5 tokens x 3 coordinates (~2 MB raw)
TRAJ = ["output.trajectories=true", "ensemble.runs=400", "output.saves=40"]


def _values(path):
    return read_vars(path, ("trajectory", "energy", "pair_fraction"))


@pytest.fixture
def reference(small_scenario, tmp_path):
    return _values(dyn.run(small_scenario, tmp_path / "ref.h5", progress=False, overrides=TRAJ))


def _args(scenario, out, *extra):
    return ["run", str(scenario), "--out", str(out), "--no-progress", *[a for s in TRAJ for a in ("--set", s)], *extra]


def test_enospc_in_the_writer_fails_points_cleanly_and_resume_completes(
    small_scenario, tmp_path, capsys, monkeypatch, reference
):
    real = trajectories.reserve

    def full_from_point_3(path, nbytes):  # the disk fills up halfway through the sweep
        if int(path.name.split("_")[1][:7]) >= 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(path, nbytes)

    monkeypatch.setattr(trajectories, "reserve", full_from_point_3)
    out = tmp_path / "full.h5"
    assert main(_args(small_scenario, out)) == 3
    err = capsys.readouterr().err
    assert err.count("No space left on device") == 3 and "Traceback" not in err
    with dyn.open(out) as ds:
        status = ds["status"].values.reshape(-1)
        assert status.tolist() == [OK] * 3 + [FAILED] * 3
        message = ds["message"].values.reshape(-1)[3]
        assert "No space left on device" in message and "point 3" in message
    folder = trajectories.sidecar_dir(out)
    assert sorted(p.name for p in folder.iterdir()) == [f"point_000000{i}.h5" for i in range(3)]
    monkeypatch.setattr(trajectories, "reserve", real)  # space freed
    assert main(_args(small_scenario, out)) == 0
    assert_same(_values(out), reference)


@pytest.mark.parametrize("where", ["free space", "reservation"])
def test_no_space_for_the_sweep_file_is_one_line_and_no_file(small_scenario, tmp_path, capsys, monkeypatch, where):
    if where == "free space":
        monkeypatch.setattr(store, "free_bytes", lambda folder: 1000)
    else:  # the free space was there when checked, and gone when reserved

        def no_room(path, nbytes):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(store, "reserve", no_room)
    out = tmp_path / "none.h5"
    assert main(_args(small_scenario, out)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dyn: error: --out") and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]


def _tmpfs(folder, megabytes):
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(folder)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")


@pytest.mark.slow  # two subprocess runs each (10-20 s); the injected ENOSPC above is the fast check
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="a real full disk needs a tmpfs, which needs root"
)
@pytest.mark.parametrize("executor", ["serial", "process"])
def test_a_real_full_disk_then_resume(small_scenario, tmp_path, reference, executor):
    disk = tmp_path / "disk"
    _tmpfs(disk, 5)  # room for the sweep file and two point files of ~1.7 MB
    try:
        out = disk / "full.h5"
        cmd = [
            sys.executable,
            "-m",
            "dyn",
            *_args(small_scenario, out, "--executor", executor, "--workers", "1" if executor == "serial" else "2"),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 3, done.stderr
        assert "No space left on device" in done.stderr and "Traceback" not in done.stderr
        with dyn.open(out) as ds:
            status = ds["status"].values.reshape(-1)
            assert (status == FAILED).sum() >= 3 and set(status) <= {OK, FAILED}
        assert not list(trajectories.sidecar_dir(out).glob("*.partial"))
        subprocess.run(["mount", "-o", "remount,size=40m", str(disk)], check=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert_same(_values(out), reference)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
