"""What `dyn run`'s own process pays before and after its sweep: the libraries a numba run never
uses stay unimported, and the garbage collector is the process's to tune, never a caller's."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dyn.presentation.cli import main

# Imported by a numba `dyn run` only if something went wrong: jax and the plots are other
# commands' and backends'.
NEVER_IN_A_NUMBA_RUN = ("jax", "matplotlib", "xarray", "dask", "pandas", "scipy.stats")
# ... and what this run (attention_sphere, --no-progress) has no use for: the other systems'
# modules (a system is found by its own module) and the progress bar's library
NOT_IN_THIS_RUN = ("dyn.systems.resnet_ode", "dyn.systems.noisy_attention", "dyn.noisy", "tqdm")

# `dyn run` as a user types it; what the process holds is said when the command leaves
# (cli._leave, which ends the process) or, if it did not, when main returned
THE_COMMAND = """
import gc, json, runpy, sys
from dyn.presentation import cli

def said(code, left):
    from integrators.numba import jit
    loaded = [jit.qualified(k) for k in jit.declared_kernels() if not jit.pending(k)]
    print(json.dumps({"code": code, "modules": sorted(sys.modules), "collecting": gc.isenabled(),
                      "frozen": gc.get_freeze_count(), "left": left, "kernels": loaded}),
          flush=True)

def leave(code, stock=cli._leave):
    said(code, True)
    stock(code)

cli._leave = leave
sys.argv = ["dyn", *sys.argv[1:]]
try:
    runpy.run_module("dyn", run_name="__main__")
except SystemExit as done:
    said(done.code, False)
"""


def _run_as_a_user(scenario, out) -> tuple[dict, dict]:
    """What the process held when its command left, and what it held at its very end (only
    when it was not left early)."""
    done = subprocess.run(
        [sys.executable, "-c", THE_COMMAND, "run", str(scenario), "--out", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    return lines[0], lines[-1]


def test_a_numba_run_imports_no_other_backend(tmp_path, small_scenario):
    _run_as_a_user(small_scenario, tmp_path / "warm.h5")  # compiles what the cache lacks
    seen, _ = _run_as_a_user(small_scenario, tmp_path / "run.h5")  # every kernel from the cache
    assert seen["code"] == 0
    imported = [name for name in NEVER_IN_A_NUMBA_RUN + NOT_IN_THIS_RUN if name in seen["modules"]]
    assert imported == [], imported
    assert {"numba", "h5py", "dyn.systems.attention_sphere"} <= set(seen["modules"])  # it ran
    # the collector was off for the imports only: the sweep ran, and a long one runs, collected
    assert seen["collecting"] and seen["frozen"] > 0


# The small scenario's field (no mask, M = I, d = 3) has one regime for every n, which its
# problem fixes: its run loads that regime's kernels, not the field that picks per call, nor the
# GEMM regime's (the symmetric path's own fallback, the columns path, stays: large beta R^2)
FIELD = "dyn.numerics.attention_field."
NOT_LOADED = (
    FIELD + "field",
    FIELD + "regime",
    "dyn.numerics._field_gemm.gemm",
    "dyn.numerics._field_gemm._rows",
    "dyn.numerics._field_symmetric.symmetric_blocks",
    "dyn.attention.schemes.layer_output",
)
LOADED = ("dyn.attention.schemes.layer_output_symmetric", "dyn.numerics._field_symmetric.symmetric")


def test_a_run_whose_problem_fixes_the_field_regime_loads_that_regime_only(tmp_path, small_scenario):
    seen, _ = _run_as_a_user(small_scenario, tmp_path / "run.h5")
    assert seen["code"] == 0
    assert set(LOADED) <= set(seen["kernels"]), seen["kernels"]
    assert [name for name in NOT_LOADED if name in seen["kernels"]] == []


def test_main_called_in_a_process_leaves_its_collector_alone(capsys):
    frozen = gc.get_freeze_count()
    assert main(["list"]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    capsys.readouterr()


def test_a_finished_run_leaves_early_with_its_file_whole_and_an_error_exits_as_before(tmp_path, small_scenario):
    import h5py

    from dyn.engine.store import bad_points

    out = tmp_path / "run.h5"
    left, last = _run_as_a_user(small_scenario, out)
    assert left["left"] and last is left and left["code"] == 0  # nothing ran after it left
    assert bad_points(out) == 0
    with h5py.File(out, "r") as f:
        assert (f["status"][()] == 1).all() and np.isfinite(f["pair_fraction"][()]).all()

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            THE_COMMAND,
            "run",
            str(small_scenario),
            "--out",
            str(tmp_path / "bad.h5"),
            "--set",
            "ensemble.runs=0",
        ],
        capture_output=True,
        text=True,
    )
    said = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert done.stderr.startswith("dyn: error: ")
    assert [s["left"] for s in said] == [False] and said[0]["code"] == 2  # the interpreter's exit


class _Exited(Exception):
    pass


def test_leaving_waits_for_open_files_and_running_threads(monkeypatch, tmp_path):
    """cli._leave ends the process (os._exit) only after the exit handlers, and not while an
    HDF5 file is open or a thread the interpreter would wait for runs."""
    import threading

    import h5py

    from dyn.presentation import cli

    handled = []
    monkeypatch.setattr(cli.atexit, "_run_exitfuncs", lambda: handled.append(True))

    def exit_now(code):
        raise _Exited(code)

    monkeypatch.setattr(os, "_exit", exit_now)
    with h5py.File(tmp_path / "open.h5", "w"):
        cli._leave(3)  # returns: the HDF5 library's exit handler has a file to close
    stop = threading.Event()
    waiting = threading.Thread(target=stop.wait)
    waiting.start()
    try:
        cli._leave(3)  # returns: the interpreter would wait for the thread
    finally:
        stop.set()
        waiting.join()
    assert handled == []
    with pytest.raises(_Exited) as left:
        cli._leave(3)
    assert left.value.args == (3,) and handled == [True]
