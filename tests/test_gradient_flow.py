"""dyn.gradient_flow: a loss written in JAX over named array parameters becomes a system whose
runs follow the gradient flow (plain, heavy ball, Langevin), checked against closed forms; a loss
JAX cannot differentiate is refused in one line with exit 2. The models: tests/flow_model.py."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg as sl

import dyn
from dyn.presentation.cli import main

SCENARIO = """
[scenario]
name = "flow"
system = "flow_model:{model}"
[sweep]
{sweep}
[ensemble]
runs = {runs}
seed = 4
[integrator]
backend = "{backend}"
method = "{method}"
{step}
horizon = {horizon}
[output]
saves = 4
trajectories = {trajectories}
"""
ADAPTIVE = "rtol = 1e-12\natol = 1e-12"


@pytest.fixture
def flows(tmp_path):
    """tests/flow_model.py beside the scenarios, as a user's module lies beside theirs."""
    shutil.copy(Path(__file__).with_name("flow_model.py"), tmp_path / "flow_model.py")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop("flow_model", None)


def _scenario(
    folder,
    model,
    sweep="scale = [0.5, 2.0]",
    runs=3,
    backend="diffrax",
    method="dopri5",
    step=ADAPTIVE,
    horizon=1.0,
    trajectories="true",
):
    path = folder / f"{model}.toml"
    path.write_text(
        SCENARIO.format(
            model=model,
            sweep=sweep,
            runs=runs,
            backend=backend,
            method=method,
            step=step,
            horizon=horizon,
            trajectories=trajectories,
        )
    )
    return path


def _starts_and_data(path, point, runs):
    """The point's A and its runs' starts (runs, entries), drawn as the engine draws them."""
    scenario = dyn.load(path)
    spec = scenario.spec(point)
    model = scenario.system
    return model.data(spec)["A"], model.initial_state(spec, runs)


@pytest.mark.slow  # diffrax compiles its program (several seconds)
def test_a_quadratic_loss_follows_its_matrix_exponential(flows):
    path = _scenario(flows, "Quadratic")
    out = dyn.run(path, flows / "q.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        states = ds["trajectory"].values  # (scale, run, time, row, entry)
        loss, norm, row_sum, twice = (ds[k].values for k in ("loss", "norm_W", "row_sum", "twice_loss"))
        times, scales = ds["time"].values, ds["scale"].values
        assert (ds["status"].values == 1).all()
    worst = 0.0
    for i, scale in enumerate(scales):
        a, x0 = _starts_and_data(path, i, 3)
        w0 = x0[:, 0, :].reshape(3, 3, 2)
        exact = np.stack([np.einsum("ij,rjk->rik", sl.expm(-scale * a * t), w0) for t in times], 1)
        worst = max(worst, np.abs(states[i, :, :, 0, :] - exact.reshape(3, len(times), 6)).max())
        want_loss = 0.5 * scale * np.einsum("rtjk,ij,rtik->rt", exact, a, exact).mean(0)
        np.testing.assert_allclose(loss[i], want_loss, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(norm[i], np.sqrt((exact**2).sum((2, 3))).mean(0), rtol=1e-10)
        np.testing.assert_allclose(row_sum[i], exact[:, :, 0, :].sum(-1).mean(0), atol=1e-10)
        np.testing.assert_allclose(twice[i], 2 * want_loss, rtol=1e-10, atol=1e-12)
    assert worst <= 1e-10, worst


@pytest.mark.slow
def test_the_heavy_ball_follows_its_matrix_exponential(flows):
    """(W, V)' = (V, -gamma V - scale A W): the exponential of the block matrix
    [[0, I], [-scale A, -gamma I]] applied to (W0, 0)."""
    path = _scenario(flows, "Ball", sweep="friction = [0.3, 3.0]")
    out = dyn.run(path, flows / "b.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        states, times = ds["trajectory"].values, ds["time"].values
    for i, gamma in enumerate([0.3, 3.0]):
        a, x0 = _starts_and_data(path, i, 3)
        block = np.block([[np.zeros((3, 3)), np.eye(3)], [-a, -gamma * np.eye(3)]])
        start = np.concatenate([x0[:, 0, :].reshape(3, 3, 2), np.zeros((3, 3, 2))], axis=1)
        for j, t in enumerate(times):
            exact = np.einsum("ij,rjk->rik", sl.expm(block * t), start)
            got = np.concatenate([states[i, :, j, 0].reshape(3, 3, 2), states[i, :, j, 1].reshape(3, 3, 2)], axis=1)
            assert np.abs(got - exact).max() <= 1e-10


@pytest.mark.slow
def test_langevin_noise_reaches_its_gaussian_law(flows):
    """dw = -a w dt + sqrt(2T) dB: E w^2 = T/a + (w0^2 - T/a) e^{-2at}. Mean of |w|^2 / 4 over
    400 runs within 5 standard errors plus Euler-Maruyama's bias O(a dt) relative (a
    false-failure rate below 1e-6 per point, two points)."""
    path = _scenario(
        flows,
        "Hot",
        sweep="temperature = [0.1, 0.5]",
        runs=400,
        method="euler_maruyama",
        step="dt = 0.005",
        horizon=2.0,
        trajectories="false",
    )
    out = dyn.run(path, flows / "h.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        loss, se, times = ds["loss"].values, ds["loss_se"].values, ds["time"].values
    for i, temp in enumerate([0.1, 0.5]):
        # loss = a |w|^2 / 2 over 4 entries, each of mean square T/a + (1 - T/a) e^{-2at}
        want = 0.5 * 2.0 * 4 * (temp / 2.0 + (1.0 - temp / 2.0) * np.exp(-4.0 * times))
        assert (np.abs(loss[i] - want) <= 5 * se[i] + 4 * 2.0 * 0.005 * want).all()


def test_a_loss_jax_cannot_differentiate_is_refused_in_one_line(flows, capsys):
    path = _scenario(flows, "Kinked", sweep="init_scale = [1.0]", trajectories="false")
    out = flows / "never.h5"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dyn: ") and "Traceback" not in err
    assert "not differentiable" in err, err
    assert not out.exists()


def test_a_gradient_flow_refuses_the_numba_backend(flows, capsys):
    path = _scenario(flows, "Quadratic", backend="numba", method="rk4", step="dt = 0.01")
    assert main(["run", str(path), "--out", str(flows / "never.h5")]) == 2
    assert "use backend diffrax or jax" in capsys.readouterr().err


def test_the_drift_is_minus_the_gradient(flows):
    """The field the integrators get, at a random state: -scale A W (plain) and
    (V, -gamma V - scale A W) (heavy ball), to rounding."""
    for name, rows in (("Quadratic", 1), ("Ball", 2)):
        path = _scenario(flows, name, sweep="scale = [1.5]")
        scenario = dyn.load(path)
        spec, model = scenario.spec(0), scenario.system
        problem = model.problem(spec)
        a = model.data(spec)["A"]
        x = np.random.default_rng(0).standard_normal((rows, 6))
        got = np.asarray(problem.drift_jax(0.0, x, problem.p))
        grad = (1.5 * a @ x[0].reshape(3, 2)).reshape(6)
        want = -grad[None] if rows == 1 else np.stack([x[1], -1.0 * x[1] - grad])
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


@pytest.mark.slow  # two JAX programs compiled
def test_the_jax_batch_agrees_with_diffrax_and_a_rerun_repeats_its_bits(flows):
    """The same flow on the jax backend (the sweep's points in one vmapped program) and on
    diffrax, both RK4 at dt = 1e-3: equal to rounding; the same seed again: the same bits."""
    found = {}
    for backend in ("jax", "diffrax", "jax"):
        path = _scenario(flows, "Quadratic", backend=backend, method="rk4", step="dt = 0.001", trajectories="false")
        out = dyn.run(path, flows / f"{backend}.h5", progress=False, log=io.StringIO(), overwrite=True)
        with dyn.open(out) as ds:
            values = np.stack([ds[k].values for k in ("loss", "norm_W", "row_sum")])
        if backend in found:
            assert np.array_equal(found[backend], values)
        found[backend] = values
    np.testing.assert_allclose(found["jax"], found["diffrax"], rtol=1e-12, atol=1e-14)


def test_an_observable_reads_only_declared_parameters():
    """An observable (theta, data, <params>) names parameters of `params`, as the loss does;
    one taking theta alone reads nothing else; an unknown name is a ScenarioError."""
    from dyn.core.errors import ScenarioError

    params = {"scale": dyn.Field("float", 1.0, "loss scale", gt=0.0)}
    flow = dyn.gradient_flow(
        lambda theta, data, scale: scale,
        name="probe",
        weights={"w": (2,)},
        params=params,
        observables={
            "alone": lambda theta: 0.0,
            "scaled": lambda theta, data, scale: scale,
            "bad": lambda theta, data, nope: nope,
        },
    )
    model = flow()
    assert model.observable_parameters("alone") is None
    assert model.observable_parameters("scaled") == ("scale",)
    with pytest.raises(ScenarioError, match="observable bad takes 'nope'"):
        model.observable_parameters("bad")
