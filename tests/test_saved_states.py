"""A user model that declares `trajectory_dims` saves its solved states (the toy
Ornstein-Uhlenbeck model of tests/toy_model.py, states checked against the drift's exact decay);
a `simulate` that returns none, or none finite, fails its point with that reason instead of
writing NaN trajectories under an ok status."""

from __future__ import annotations

import io
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dyn

SCENARIO = """
[scenario]
name = "toy_states"
system = "{module}:{cls}"
[params]
d = 2
x0 = 1.5
sigma = 1e-9
[sweep]
theta = [0.5, 2.0]
[ensemble]
runs = 3
seed = 5
[integrator]
backend = "numba"
method = "euler_maruyama"
dt = 0.001
horizon = 1.0
[output]
saves = 5
trajectories = true
"""

MODELS = """
import numpy as np
import dyn
from toy_model import ToyOU


class Saving(ToyOU):
    def trajectory_dims(self, setup):
        return {"token": 1, "coordinate": setup.values_of("d")[0]}


class Forgetting(Saving):
    def simulate(self, spec, runs):
        chunk = super().simulate(spec, runs)
        chunk.states = None
        return chunk


class Blank(Saving):
    def simulate(self, spec, runs):
        chunk = super().simulate(spec, runs)
        chunk.states = np.full_like(chunk.states, np.nan)
        return chunk
"""


@pytest.fixture
def folder(tmp_path):
    shutil.copy(Path(__file__).with_name("toy_model.py"), tmp_path / "toy_model.py")
    (tmp_path / "state_models.py").write_text(textwrap.dedent(MODELS))
    yield tmp_path
    for name in ("toy_model", "state_models"):
        sys.modules.pop(name, None)


def _run(folder: Path, cls: str) -> Path:
    path = folder / f"{cls}.toml"
    path.write_text(SCENARIO.format(module="state_models", cls=cls))
    return dyn.run(path, folder / f"{cls}.h5", progress=False, log=io.StringIO())


def test_declared_states_are_saved_and_follow_the_drift(folder):
    with dyn.open(_run(folder, "Saving")) as ds:
        assert (ds["status"].values == 1).all()
        states = ds["trajectory"].values  # (theta, run, time, token, coordinate)
        assert np.isfinite(states).all()
        times = ds["trajectory_time"].values
        theta = ds["theta"].values
        # sigma ~ 0: x(t) = x0 e^{-theta t}; Euler's relative error theta^2 t dt / 2 <= 2e-3
        want = 1.5 * np.exp(-theta[:, None] * times[None, :])
        got = states[..., 0, :]  # token 0
        np.testing.assert_allclose(got, np.broadcast_to(want[:, None, :, None], got.shape), rtol=2.5e-3)


@pytest.mark.parametrize("cls, reason", [("Forgetting", "returned no states"), ("Blank", "all NaN or inf")])
def test_a_point_without_its_declared_states_fails_with_the_reason(folder, cls, reason):
    with dyn.open(_run(folder, cls)) as ds:
        status = ds["status"].values
        assert (status == 3).all(), status  # FAILED
        messages = [m.decode() if isinstance(m, bytes) else str(m) for m in ds["message"].values.ravel()]
        assert all(reason in m for m in messages), messages
