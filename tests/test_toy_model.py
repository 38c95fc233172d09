"""A model written in its own module through the public API (tests/toy_model.py, the
Ornstein-Uhlenbeck process, a `dyn.Model`) and named by import path from a scenario beside it runs
through every backend with no edit of the package: numba and diffrax through `Model.simulate`,
batched JAX through the engine's `integrators.get("jax", ...)` path; each agrees with the exact
law, and its numba drift agrees with its JAX twin to 1e-12."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import dyn

SCENARIO = """
[scenario]
name = "toy"
system = "toy_model:ToyOU"
[params]
d = 3
x0 = 1.5
[sweep]
theta = [0.5, 2.0]
sigma = [0.7]
[ensemble]
runs = 2000
seed = 5
[integrator]
backend = "{backend}"
method = "euler_maruyama"
dt = 0.005
horizon = 1.0
[output]
saves = 4
"""


@pytest.fixture
def toy(tmp_path):
    """The toy module beside the scenario, as a user's module lies beside theirs."""
    shutil.copy(Path(__file__).with_name("toy_model.py"), tmp_path / "toy_model.py")
    yield tmp_path
    sys.modules.pop("toy_model", None)


# the JAX backends, ~2.5 s each of JAX compiling, in the slow tier (the default tier's 3-minute
# budget); the drift pair (below) and dyn.Model's backend tests keep JAX in the default tier
@pytest.mark.parametrize(
    "backend", ["numba", pytest.param("diffrax", marks=pytest.mark.slow), pytest.param("jax", marks=pytest.mark.slow)]
)
def test_a_model_in_one_module_runs_through_every_backend(toy, tmp_path, backend):
    path = tmp_path / "toy.toml"
    path.write_text(SCENARIO.format(backend=backend))
    out = dyn.run(path, tmp_path / "toy.h5", progress=False, log=io.StringIO())
    import toy_model

    with dyn.open(out) as ds:
        x2, se, exact = (ds[v].values for v in ("x2", "x2_se", "x2_exact"))
        assert (ds["status"].values == 1).all()
    np.testing.assert_allclose(
        exact, toy_model.exact_x2(np.array([0.5, 2.0])[:, None, None], 0.7, 1.5, np.linspace(0, 1, 5)), rtol=1e-14
    )
    # Monte Carlo (4 standard errors) plus Euler-Maruyama's weak bias, O(theta dt) relative
    bias = 2.0 * 2.0 * 0.005 * exact
    assert (np.abs(x2 - exact)[..., 1:] <= 4 * se[..., 1:] + bias[..., 1:]).all(), (x2, exact, se)
    assert x2[..., 0] == pytest.approx(1.5**2)  # the start, exactly


def test_the_new_model_keeps_the_drift_pair(toy):
    sys.path.insert(0, str(toy))
    try:
        import toy_model
    finally:
        sys.path.remove(str(toy))
    rng = np.random.default_rng(3)
    for _ in range(3):
        x, theta = rng.standard_normal((1, 4)), rng.uniform(0.1, 2)
        want = -theta * x
        assert toy_model.ToyOU.twin_error(x, theta=theta) <= 1e-12 * np.abs(want).max()


def test_the_toy_module_is_short():
    assert len(Path(__file__).with_name("toy_model.py").read_text().splitlines()) <= 50
