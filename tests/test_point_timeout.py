"""A wall-clock limit per point (--point-timeout, dyn/engine/deadlines.py): a point whose
compiled drift never returns is killed in its worker and recorded failed with that reason, and
the sweep goes on; a serial run, which cannot stop compiled code, refuses the limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from dyn.presentation.cli import main

ROOT = Path(__file__).resolve().parents[1]

MODEL = """
import numpy as np

import dyn


class Stuck(dyn.Model):
    name, description, default_plot = "stuck", "a drift stuck after t = 0.5 for theta > 1", "x2"
    params = {"theta": dyn.Field("float", 1.0, "rate")}

    def drift(t, x, theta):
        k = 0.0
        while t > 0.5 and theta > 1.0:  # never returns (the engine's probe at t = 0 does):
            k += 1.0                      # compiled code checks no signal
        return -theta * x + k

    def outputs(self, setup):
        return [dyn.Output("x2", "x2", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 1, 2))

    def observe(self, spec, states):
        return dyn.Chunk({"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))})
"""
SCENARIO = """
[scenario]
name = "stuck"
system = "stuck_model:Stuck"
[sweep]
theta = [0.5, 2.0, 0.7]
[ensemble]
runs = 4
[integrator]
method = "rk4"
dt = 0.1
horizon = 1.0
[output]
saves = 2
"""


def _dyn(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HOME=str(folder / "home"))
    env.pop("NUMBA_CACHE_DIR", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "dyn",
            "run",
            str(folder / "stuck.toml"),
            "--out",
            str(folder / "stuck.h5"),
            "--no-progress",
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=folder,
        timeout=600,
    )


@pytest.fixture
def stuck(tmp_path):
    (tmp_path / "stuck_model.py").write_text(MODEL)
    (tmp_path / "stuck.toml").write_text(SCENARIO)
    return tmp_path


@pytest.mark.slow  # spawns a pool twice and waits out the limit
def test_a_point_past_the_limit_is_killed_and_the_sweep_goes_on(stuck):
    done = _dyn(stuck, "--executor", "process", "--workers", "1", "--point-timeout", "20")
    assert done.returncode == 3, done.stderr  # a point failed; no traceback
    assert "Traceback" not in done.stderr
    with h5py.File(stuck / "stuck.h5") as f:
        status = f["status"][:]
        message = [m.decode() if isinstance(m, bytes) else m for m in f["message"][:]]
        x2 = f["x2"][:]
    assert list(status) == [1, 3, 1]
    assert "--point-timeout = 20 s" in message[1]
    assert np.isfinite(x2[[0, 2]]).all()


@pytest.mark.parametrize(
    "value, says",
    [
        ("5", "serial run cannot stop compiled code"),
        ("0", "positive number of seconds"),
        ("nan", "positive number of seconds"),
    ],
)
def test_a_limit_the_run_cannot_keep_is_refused_in_one_line(stuck, capsys, value, says):
    """Refused before the model is imported (its drift is never probed)."""
    code = main(
        ["run", str(stuck / "stuck.toml"), "--out", str(stuck / "stuck.h5"), "--no-progress", "--point-timeout", value]
    )
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("dyn: ") and says in err
    assert not (stuck / "stuck.h5").exists() and "stuck_model" not in sys.modules
