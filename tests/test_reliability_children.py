"""Reliability, issue 35: every child dies with its parent. A killed `dyn compile` leaves no
pool worker compiling, even on a cold cache, where it would otherwise go on for tens of
seconds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
GRACE = 120.0  # seconds the killed children get to exit (wait_procs returns once all have)
START = 120.0  # seconds to wait for the children (a cold start on two busy cores)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _cold_env(tmp_path: Path) -> dict:
    """This environment on an empty numba cache of its own."""
    return {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}


def _command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # exited while we looked
        return ""


def _alive(process: psutil.Process) -> bool:
    # an orphan that exited stays a zombie until init reaps it (some container inits never do):
    # it runs no code and holds no file, so it counts as dead
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _survivors_of_killed(args: list[str], env: dict, ready, cwd: Path, log: Path) -> list[str]:
    """Start ``python *args`` (stderr to `log`), wait until ``ready(children)`` holds for its
    descendants, SIGKILL it and return the command lines of the descendants still alive GRACE
    seconds later (each then killed, so that no failed run leaves a compile burning a core)."""
    with open(log, "wb") as err:
        driver = subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + START
        while time.monotonic() < deadline and driver.poll() is None:
            try:
                children = psutil.Process(driver.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                break
            if ready(children):
                break
            time.sleep(0.05)
        assert driver.poll() is None and ready(children), f"the children did not start: {log.read_text()[-2000:]}"
        driver.kill()
        driver.wait()
        psutil.wait_procs(children, timeout=GRACE)
        alive = [p for p in children if _alive(p)]
        return [f"{p.pid}: {_command_line(p)}" for p in alive]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for child in children:
            try:
                child.kill()
            except psutil.Error:
                pass


@pytest.mark.slow  # a dyn compile process tree started and killed
def test_dyn_compile_workers_die_with_the_killed_command(tmp_path):
    """`dyn compile --workers 2` on an empty cache, killed once both workers exist and one has
    written a kernel into the cache (it is compiling): no worker, nor the pool's resource
    tracker, is alive GRACE seconds later."""
    cache = tmp_path / "numba"

    def compiling(children):
        workers = [p for p in children if "multiprocessing.spawn" in _command_line(p)]
        return len(workers) == 2 and any(cache.rglob("*.nbi"))

    survivors = _survivors_of_killed(
        ["-m", "dyn", "compile", "--workers", "2"], _cold_env(tmp_path), compiling, tmp_path, tmp_path / "err.txt"
    )
    assert not survivors, survivors
