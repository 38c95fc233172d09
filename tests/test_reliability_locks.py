"""Reliability, issue 20, defect 3: one writer per file whatever name reaches it — a symlink
(the lock sits beside the real path) or a hard link (the file itself is locked by device and
inode) to a file another run is writing is refused; readers are not."""

from __future__ import annotations

import os

import pytest

import dyn
from dyn.engine import store
from dyn.presentation.cli import main


@pytest.fixture
def made(small_scenario, tmp_path):
    return dyn.run(small_scenario, tmp_path / "c.h5", progress=False, overrides=["ensemble.runs=1"])


def _second_writer(capsys, scenario, out) -> tuple[int, str]:
    code = main(["run", str(scenario), "--out", str(out), "--no-progress", "--set", "ensemble.runs=1"])
    return code, capsys.readouterr().err


def test_a_symlink_to_a_file_being_written_is_refused(small_scenario, made, tmp_path, capsys):
    link = tmp_path / "link.h5"
    link.symlink_to(made.name)
    lock = store.WriterLock(made)
    lock.acquire()
    try:
        code, err = _second_writer(capsys, small_scenario, link)
        assert code == 2 and "another dyn run" in err
    finally:
        lock.release()
    assert _second_writer(capsys, small_scenario, link)[0] == 0  # free again: a resume


def test_a_symlink_to_a_file_not_yet_made_shares_its_lock(small_scenario, tmp_path, capsys):
    link = tmp_path / "ahead.h5"
    link.symlink_to("real.h5")  # dangling: the first run has not made the file yet
    lock = store.WriterLock(tmp_path / "real.h5")
    lock.acquire()
    try:
        code, err = _second_writer(capsys, small_scenario, link)
        assert code == 2 and "another dyn run" in err
    finally:
        lock.release()


def test_a_hard_link_to_a_file_being_written_is_refused(small_scenario, made, tmp_path, capsys):
    hard = tmp_path / "hard.h5"
    os.link(made, hard)
    lock = store.WriterLock(made)
    lock.acquire()
    try:
        code, err = _second_writer(capsys, small_scenario, hard)
        assert code == 2 and "another name" in err
        with dyn.open(made) as ds:  # readers are not locked out
            assert (ds["status"].values == 1).all()
    finally:
        lock.release()
    assert _second_writer(capsys, small_scenario, hard)[0] == 0
    assert not store.lock_path(made).exists() and not store.lock_path(hard).exists()


def test_the_lock_of_a_new_file_covers_its_inode(small_scenario, tmp_path, capsys):
    """A run that makes its file locks the new inode too: hard links made while it runs are
    refused (checked here by holding the lock as `run` does after `create`)."""
    out = tmp_path / "fresh.h5"
    lock = store.WriterLock(out)
    lock.acquire()
    try:
        store.create(out, dyn.load(small_scenario, ["ensemble.runs=1"]), "test")
        lock.hold()
        hard = tmp_path / "fresh_link.h5"
        os.link(out, hard)
        code, err = _second_writer(capsys, small_scenario, hard)
        assert code == 2 and "another name" in err
    finally:
        lock.release()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="bind mounts need root")
def test_a_bind_mount_of_the_folder_is_the_same_file(small_scenario, made, tmp_path, capsys):
    import subprocess

    other = tmp_path.parent / (tmp_path.name + "_bound")
    other.mkdir()
    if subprocess.run(["mount", "--bind", str(tmp_path), str(other)], capture_output=True).returncode:
        pytest.skip("cannot bind-mount here")
    try:
        lock = store.WriterLock(made)
        lock.acquire()
        try:
            code, err = _second_writer(capsys, small_scenario, other / made.name)
            assert code == 2 and "another dyn run" in err
        finally:
            lock.release()
    finally:
        subprocess.run(["umount", str(other)], capture_output=True)
        other.rmdir()
