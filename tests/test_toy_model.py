"""A model added in one new module (tests/toy_model.py, the Ornstein-Uhlenbeck process) runs
through every backend with no other edit: numba and diffrax through `System.simulate`, batched
JAX through the engine's `integrators.get("jax", ...)` path; each agrees with the exact law, and
its numba drift agrees with the JAX twin like every registered model's (test_models.py)."""
from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import dyn
import dyn.systems
from dyn.core import dynamics

SCENARIO = """
[scenario]
name = "toy"
system = "toy_ou"
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
def toy(tmp_path, monkeypatch):
    """The toy module dropped into a folder on the system registry's search path, as a new file
    in dyn/systems/ would be; the registries are restored afterwards."""
    dyn.systems.names()  # the built-ins registered first: a copy made before would lose them
    folder = tmp_path / "plugin"
    folder.mkdir()
    shutil.copy(Path(__file__).with_name("toy_model.py"), folder / "toy_ou.py")
    monkeypatch.setattr(dyn.systems, "__path__", [*dyn.systems.__path__, str(folder)])
    monkeypatch.setattr(dyn.systems, "_REGISTRY", dict(dyn.systems._REGISTRY))
    monkeypatch.setattr(dyn.systems, "_LOADED", False)
    monkeypatch.setattr(dynamics, "_REGISTRY", dict(dynamics._REGISTRY))
    sys.modules.pop("dyn.systems.toy_ou", None)
    assert "toy_ou" in dyn.systems.names()  # found by the registry's own scan, not imported here
    yield sys.modules["dyn.systems.toy_ou"]
    sys.modules.pop("dyn.systems.toy_ou", None)


@pytest.mark.parametrize("backend", ["numba", "diffrax", "jax"])
def test_a_model_in_one_module_runs_through_every_backend(toy, tmp_path, backend):
    path = tmp_path / "toy.toml"
    path.write_text(SCENARIO.format(backend=backend))
    out = dyn.run(path, tmp_path / "toy.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        x2, se, exact = (ds[v].values for v in ("x2", "x2_se", "x2_exact"))
        assert (ds["status"].values == 1).all()
    np.testing.assert_allclose(exact, toy.exact_x2(np.array([0.5, 2.0])[:, None, None], 0.7, 1.5,
                                                   np.linspace(0, 1, 5)), rtol=1e-14)
    # Monte Carlo (4 standard errors) plus Euler-Maruyama's weak bias, O(theta dt) relative
    bias = 2.0 * 2.0 * 0.005 * exact
    assert (np.abs(x2 - exact)[..., 1:] <= 4 * se[..., 1:] + bias[..., 1:]).all(), (x2, exact, se)
    assert x2[..., 0] == pytest.approx(1.5**2)  # the start, exactly


def test_the_new_model_joins_the_drift_pair_check(toy, monkeypatch):
    import test_models

    monkeypatch.setattr(test_models, "MODELS", dynamics.registered())
    assert test_models.MODELS["toy_ou"] is toy.TOY
    test_models.test_numba_drift_and_jax_twin_agree("toy_ou")
