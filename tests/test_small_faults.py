"""Small faults, each one line or none: a lock file whose pid cannot be written (a full disk)
never blocks a run; `dyn plot --out` a folder writes in it and a failed write is one line;
refusals of size print two different numbers; `dyn compare` checks every option before it
prints; a file name with a line break is refused; the heap walk never forks a process that runs
other threads; a run estimated past an hour says so once."""

from __future__ import annotations

import _thread
import errno
import io
import os

import h5py
import numpy as np
import pytest

import dyn
from dyn.engine import heaps, store
from dyn.presentation.cli import main


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory):
    from _scenarios import SMALL_SCENARIO

    folder = tmp_path_factory.mktemp("faults")
    (folder / "small.toml").write_text(SMALL_SCENARIO)
    forms = [
        "sweep.form=['flow', 'network']",
        "params.depth=8",
        "output.trajectories=true",
        "sweep.beta=[1.0, 2.0]",
        "sweep.normalization=['SA']",
        "ensemble.common=['form']",
    ]
    return dyn.run(
        folder / "small.toml", folder / "small.h5", progress=False, log=io.StringIO(), overrides=forms
    )  # two forms sharing random numbers: `dyn compare` compares


def test_a_lock_file_that_cannot_take_the_pid_does_not_block_the_run(small_scenario, tmp_path, monkeypatch):
    """A full disk refuses the pid's few bytes: the lock (the kernel's flock) holds anyway."""

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)
    lock = store.WriterLock(tmp_path / "x.h5")
    lock.acquire()
    try:
        with pytest.raises(dyn.ScenarioError, match="another dyn run"):
            store.WriterLock(tmp_path / "x.h5").acquire()  # held all the same
    finally:
        lock.release()
    stale = store.lock_path(tmp_path / "y.h5")
    stale.write_text("12345")  # left by a run killed with SIGKILL: its flock died with it
    out = dyn.run(small_scenario, tmp_path / "y.h5", progress=False, log=io.StringIO())
    assert (dyn.open(out)["status"].values == 1).all()


def test_plot_into_a_folder_writes_in_it_and_a_failed_write_is_one_line(sweep_file, tmp_path, capsys):
    folder = tmp_path / "pictures"
    folder.mkdir()
    assert main(["plot", str(sweep_file), "--out", str(folder)]) == 0
    assert main(["plot", str(sweep_file), "--tokens", "--out", str(folder)]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["small.png", "small_tokens.png"]
    assert not (tmp_path / "pictures.png").exists()
    capsys.readouterr()
    if os.path.exists("/dev/full"):
        for tokens in ([], ["--tokens"]):
            assert main(["plot", str(sweep_file), *tokens, "--out", "/dev/full"]) == 2
            out, err = capsys.readouterr()
            assert out == "" and err.count("\n") == 1
            assert err.startswith("dyn: error: --out: cannot write")
        assert not os.path.exists("/dev/full.png")


def test_a_size_refusal_never_prints_two_equal_numbers():
    limit = store.MAX_FILE_BYTES
    assert store.size_text(limit + 1) == store.size_text(limit)  # rounded to one text
    assert str(limit + 1) in store.exactly(limit + 1, limit)
    assert store.exactly(2 * limit, limit) == ""  # two texts already


@pytest.mark.parametrize("extra", [["--out", "x.png"], ["--style", "paper"]])
def test_compare_checks_every_option_before_it_prints(sweep_file, capsys, extra):
    """Options that need --against are refused before the comparison prints its table."""
    argv = ["compare", str(sweep_file), "--along", "form", "--reference", "flow"]
    assert main(argv) == 0 and capsys.readouterr().out  # it compares
    code = main([*argv, *extra])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("dyn: error: ")


@pytest.mark.parametrize("command", [["show"], ["plot"], ["run", "--out"]])
def test_a_file_name_with_a_line_break_is_refused_in_one_line(sweep_file, tmp_path, capsys, command):
    odd = tmp_path / "new\nline.h5"
    odd.write_bytes(sweep_file.read_bytes())
    argv = (
        [command[0], str(odd)] if len(command) == 1 else ["run", "scenarios/attention_clusters.toml", "--out", str(odd)]
    )
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "new\\nline.h5" in err


def test_the_heap_walk_never_forks_a_process_running_another_thread(tmp_path, monkeypatch):
    """A thread started outside Python's threading module (as JAX's and numba's are) is
    counted: the datasets are listed in a fresh process, not a fork."""
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(4.0)
        f.attrs["text"] = "variable-length"
    forks = []
    fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or fork())
    held = _thread.allocate_lock()
    held.acquire()
    _thread.start_new_thread(held.acquire, ())  # waits until released below
    try:
        assert heaps.heap_problem(path) == ""
    finally:
        held.release()
    assert forks == []


def test_a_run_estimated_past_an_hour_says_so_once():
    from dyn.engine import longrun

    clock = iter([0.0, 100.0, 200.0, 300.0, 400.0])  # after the first point, 100 s a point
    log = io.StringIO()
    note = longrun.LongRunNote(100, log, clock=lambda: next(clock))
    for _ in range(5):
        note.done()
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dyn: note: ") and "97 points left" in lines[0]
    short = io.StringIO()
    clock = iter([0.0, 1.0, 2.0, 3.0])
    quick = longrun.LongRunNote(100, short, clock=lambda: next(clock))
    for _ in range(4):
        quick.done()
    assert short.getvalue() == ""  # 97 s left: no note
