"""Polarization of the value-softmax model (dyn/frontier/softmax_polarization.py): the engine's
gradient flow of (V, a) against the reduced flow of (u = V^T beta, a) solved by scipy, the
limit (the token of the largest u_i(0)) and the derived rate eps z^2 (m + 1) / (2 m b^2) -> 1,
the references, and bad values refused in one line (slow tier: the shipped sweep)."""

import numpy as np
import pytest

import dyn
from dyn.frontier import softmax_polarization as sp
from dyn.presentation.cli import main

SCENARIO = "scenarios/softmax_polarization.toml"

FIXED = """
import dyn
from dyn.frontier import softmax_polarization as sp

Fixed = dyn.gradient_flow(sp.{loss}, name="value_softmax_fixed", weights={{"V": (4, 4), "a": (4,)}},
                          params=dict(sp.PARAMS), observables=sp.OBSERVABLES, init=sp.start)
"""

SMALL = """
[scenario]
name = "polarization_small"
system = "fixed_flow:Fixed"

[params]
n = 4
b = 1.5
init_scale = 0.5

[ensemble]
runs = 3
seed = 4

[integrator]
backend = "diffrax"
method = "tsit5"
rtol = 1e-10
atol = 1e-12
horizon = {horizon}

[output]
path = "{path}"
saves = 6
trajectories = true
"""


def _softmax(a):
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.slow  # JAX compiles the flow: several seconds per loss
@pytest.mark.parametrize("loss, horizon", [("logistic", 20.0), ("linear", 3.0)])
def test_engine_flow_is_the_reduced_flow(tmp_path, monkeypatch, loss, horizon):
    # the engine integrates the 20 entries of (V, a) through JAX's gradient; the reduced flow
    # (u, a) in R^8 from the same start (scipy): u = V^T beta = b V[0] and a to 1e-7 at every
    # save, and the rows of V orthogonal to beta never move (to rounding)
    (tmp_path / "fixed_flow.py").write_text(FIXED.format(loss=loss))
    monkeypatch.syspath_prepend(str(tmp_path))
    toml = tmp_path / "small.toml"
    toml.write_text(SMALL.format(path=tmp_path / "small.h5", horizon=horizon))
    ds = dyn.open(dyn.run(str(toml), progress=False))
    states = ds["trajectory"].values  # (run, time, row, entry)
    states = states.reshape(states.shape[0], states.shape[1], -1)  # (runs, times, 20)
    times = ds.time.values
    b = 1.5
    for run in states:
        v0, a0 = run[0, :16].reshape(4, 4), run[0, 16:]
        u, a = sp.reduced_flow(b * v0[0], a0, b, times, loss)
        assert np.abs(b * run[:, :4] - u).max() < 1e-7
        assert np.abs(run[:, 16:] - a).max() < 1e-7
        assert np.abs(run[:, 4:16] - run[:1, 4:16]).max() < 1e-12
    # the observables are those of the states (mean over runs)
    v = states[:, :, :16].reshape(*states.shape[:2], 4, 4)
    s = _softmax(states[:, :, 16:])
    assert np.allclose(ds.gap.values, (1 - s.max(axis=-1)).mean(axis=0), atol=1e-12)
    assert np.allclose(ds.margin_unit.values, np.einsum("rtj,rtj->rt", v[:, :, 0], s).mean(0), atol=1e-12)


def test_limit_is_the_largest_u_and_the_rate_is_the_derived_law():
    # the linear loss (the logistic path on its clock) to z = b^2 t = 4000: sigma -> the vertex
    # of argmax u(0), the losers draw together, and eps z^2 (m + 1) / (2 m b^2) is 1 within 1%
    rng = np.random.default_rng(12)
    for n, b in ((3, 1.0), (6, 2.0), (10, 0.7)):
        u0 = 0.3 * rng.standard_normal(n)
        times = np.array([1.0, 10.0, 4000.0 / b**2])
        u, a = sp.reduced_flow(u0, np.zeros(n), b, times, "linear")
        s = _softmax(a[-1])
        assert int(np.argmax(s)) == int(np.argmax(u0))
        # the losers equalize, slowly: log(sigma_j / sigma_k) ~ t^{-2/(m+1)}
        spread = [np.ptp(np.log(np.delete(_softmax(x), np.argmax(u0)))) for x in a[1:]]
        assert spread[1] < spread[0]
        eps, z = 1 - s.max(), s @ u[-1]
        assert eps * z**2 * n / (2 * (n - 1) * b * b) == pytest.approx(1.0, abs=0.01)
        assert sp.gap_law(n, b, times[-1:], "linear")[0] == pytest.approx(eps, rel=0.03)
    # the logistic path's margin grows like log(b^2 t): the o(1) is slow (e^z + z = b^2 t + C)
    u, a = sp.reduced_flow(np.array([0.2, 0.0, -0.1]), np.zeros(3), 1.0, [1e6], "logistic")
    z = float(_softmax(a[-1]) @ u[-1])
    assert abs(z - np.log(1e6)) < 1.0


def test_the_flow_decreases_the_loss_and_keeps_the_order_of_u():
    # along the reduced logistic flow: z increases (the loss decreases), the order of u is kept
    # and the largest share stays the largest u's (the limit's argument in the module doc)
    rng = np.random.default_rng(3)
    u0 = rng.standard_normal(7)
    times = np.geomspace(0.01, 1e3, 40)
    u, a = sp.reduced_flow(u0, np.zeros(7), 1.3, times, "logistic")
    s = _softmax(a)
    z = np.einsum("tj,tj->t", s, u)
    assert (np.diff(z) > 0).all()
    assert (np.argsort(u, axis=1) == np.argsort(u0)).all()
    assert (s.argmax(axis=1) == u0.argmax()).all()


def test_references_follow_the_derived_law():
    eps = sp.gap_law(8, 2.0, np.array([0.0, 0.1, 1e3]), "logistic")
    assert np.isnan(eps[0]) and np.isnan(eps[1])  # t = 0; b^2 t < e
    assert eps[2] == pytest.approx(2 * 7 * 4 / (8 * np.log(4e3) ** 2))
    assert sp.entropy_law(8, 1e-3) == pytest.approx(1e-3 * (1 + np.log(7e3)))


@pytest.mark.parametrize(
    "setting", ['params.objective="square"', "params.n=1", "params.b=0.0", "params.init_scale=-1.0"]
)
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, setting):
    out = tmp_path / "never.h5"
    assert main(["run", SCENARIO, "--out", str(out), "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert setting.split("=")[0] in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.slow
def test_shipped_sweep_polarizes_at_the_derived_rate(tmp_path):
    # every run ends at the vertex of its largest u; on the linear clock the ratio is 1 within
    # 0.5% at the horizon; on the logistic clock it is between 1 and 4 and falling over the
    # last decade (z about 5 .. 16: the o(1) of an asymptotic law in z ~ log t)
    ds = dyn.open(dyn.run(SCENARIO, tmp_path / "sp.h5", progress=False))
    assert (ds.winner_agrees.isel(time=-1).values == 1.0).all()
    final = ds.law_ratio.isel(time=-1)
    assert (np.abs(final.sel(objective="linear").values - 1) < 5e-3).all()
    logistic = ds.law_ratio.sel(objective="logistic")
    assert ((logistic.isel(time=-1) > 1) & (logistic.isel(time=-1) < 4)).all()
    entropy = ds.entropy.sel(objective="logistic")
    assert (entropy.isel(time=-1) < 0.6 * entropy.isel(time=0)).all()  # measured <= 0.50
