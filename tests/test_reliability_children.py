"""Reliability, issue 35: every child dies with its parent. A killed `dyn compile` leaves no
pool worker compiling, and a killed driver no split-compile helper (integrators.split_compile),
even on a cold cache, where both would otherwise go on for tens of seconds."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from integrators import split_compile

ROOT = Path(__file__).resolve().parent.parent
GRACE = 5.0  # seconds a child may outlive its killed parent
START = 120.0  # seconds to wait for the children (a cold start on two busy cores)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux's")

# what a sweep's first solve does, over every declared kernel: the helper's share is large
# (about 20 s alone on two cores), so without the fix it outlives GRACE by far
COMPILE_AHEAD = ("from dyn.engine.warmup import import_kernel_modules; import_kernel_modules(); "
                 "from integrators.jit import compile_ahead, declared_kernels; "
                 "compile_ahead(*declared_kernels())")
RUN = ["-m", "dyn", "run", "scenarios/attention_clusters.toml", "--no-progress",
       "--set", "ensemble.runs=4", "--set", "sweep.beta=[1.0]", "--set", "output.saves=10",
       "--set", "integrator.horizon=2.0"]


def _cold_env(tmp_path: Path, jobs: str) -> dict:
    """This environment on an empty numba cache of its own, with DYN_COMPILE_JOBS = `jobs`."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba"), split_compile.JOBS_ENV: jobs}
    env.pop(split_compile.HELPER_ENV, None)
    return env


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
        driver = subprocess.Popen([sys.executable, *args], env=env, cwd=cwd,
                                  stdout=subprocess.DEVNULL, stderr=err)
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
        assert driver.poll() is None and ready(children), \
            f"the children did not start: {log.read_text()[-2000:]}"
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


def test_dyn_compile_workers_die_with_the_killed_command(tmp_path):
    """`dyn compile --workers 2` on an empty cache, killed once both workers exist and one has
    written a kernel into the cache (it is compiling): no worker, nor the pool's resource
    tracker, is alive GRACE seconds later."""
    cache = tmp_path / "numba"

    def compiling(children):
        workers = [p for p in children if "multiprocessing.spawn" in _command_line(p)]
        return len(workers) == 2 and any(cache.rglob("*.nbi"))

    survivors = _survivors_of_killed(["-m", "dyn", "compile", "--workers", "2"],
                                     _cold_env(tmp_path, "2"), compiling, tmp_path,
                                     tmp_path / "err.txt")
    assert not survivors, survivors


def _helpers(children) -> list[psutil.Process]:
    return [p for p in children if "helper_main" in _command_line(p)]


def _helper_started(children) -> bool:
    return bool(_helpers(children))


def _helper_compiling(children) -> bool:
    """A helper past its start: 1 s of CPU is more than its imports up to its death-signal
    request (about 0.5 s)."""
    try:
        return any(sum(p.cpu_times()[:2]) >= 1.0 for p in _helpers(children))
    except psutil.Error:
        return False


@pytest.mark.parametrize("driver", [
    # slow tier, to keep the default one within 3 minutes from a fresh clone: the helper dies
    # by integrators.lifetime.die_with, as dyn compile's workers do, whose default check stays
    pytest.param("compile_ahead", marks=pytest.mark.slow),
    pytest.param("dyn_run", marks=pytest.mark.slow),  # the probe's; the helper's share is
])  # smaller there (about 8 s alone), too close to GRACE for a check that must fail without it
def test_the_split_compile_helper_dies_with_its_killed_driver(tmp_path, driver):
    """A driver on an empty cache with DYN_COMPILE_JOBS=2 splits its cold kernel trees and
    starts the helper; killed, no descendant is alive GRACE seconds later. The compile_ahead
    driver is killed as soon as the helper exists, mostly before the helper has asked for its
    death signal (it imports numba first): the re-parenting check stops it. `dyn run` is killed
    once the helper is compiling: the death signal stops it."""
    if driver == "compile_ahead":
        args, ready = ["-c", COMPILE_AHEAD], _helper_started
    else:
        args, ready = [*RUN, "--out", str(tmp_path / "run.h5")], _helper_compiling
    survivors = _survivors_of_killed(args, _cold_env(tmp_path, "2"), ready, ROOT,
                                     tmp_path / "err.txt")
    assert not survivors, survivors
