"""Critical attention scaling (dyn.attention.critical, system critical_scaling): the one-layer
self weight, gamma_c = 1/(1 - rho), the equiangular reduction against particles, and the
crossover gamma_1/2(n) converging to gamma_c with its derived finite-n law."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dyn
import integrators
from dyn import attention
from dyn.attention import critical
from dyn.presentation.cli import main

SCENARIO = "scenarios/critical_scaling.toml"


@pytest.mark.parametrize("n, rho, gamma", [(7, 0.3, 1.2), (50, 0.0, 0.8), (200, 0.9, 11.0)])
def test_self_weight_is_the_softmax_of_an_equiangular_gram(n, rho, gamma):
    gram = np.full((n, n), rho) + (1.0 - rho) * np.eye(n)
    scores = gamma * math.log(n) * gram
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(np.diag(weights), critical.self_weight(gamma, n, rho), rtol=1e-12)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_self_weight_crosses_one_half_at_gamma_c(rho):
    gamma_c = critical.critical_gamma(rho)
    assert gamma_c == pytest.approx(1.0 / (1.0 - rho), rel=1e-15)
    for n in (10.0, 1e3, 1e6):
        assert critical.self_weight(critical.half_weight_gamma(n, rho), n, rho) == pytest.approx(0.5, abs=1e-12)
    # the phase transition: (n - 1) n^{-gamma(1 - rho)} ~ n^{1 - gamma/gamma_c} -> infinity or 0
    assert critical.self_weight(0.5 * gamma_c, 1e12, rho) < 1e-5
    assert critical.self_weight(1.5 * gamma_c, 1e12, rho) > 1 - 1e-5
    assert critical.half_weight_gamma(1e12, rho) == pytest.approx(gamma_c, rel=1e-11)


def test_equiangular_displacement_is_the_particles_displacement():
    """The frame formula |x_i(T) - x_i(0)| (module doc) against n equiangular particles in
    R^{n+1} solved by RK4, and rho(T) against the engine's scalar ODE."""
    n, d, rho, gamma, T = 6, 7, 0.4, 1.3, 1.0
    beta = gamma * math.log(n)
    x0 = attention.equiangular_start(np.random.default_rng(3), 2, n, d, rho)
    problem = attention.flow_problem(attention.pack_params(beta, d))
    states = integrators.get("numba", "rk4", dt=2e-3).solve(problem, x0, np.array([0.0, T])).states
    moved = np.linalg.norm(states[:, -1] - states[:, 0], axis=-1)
    np.testing.assert_allclose(moved, critical.displacement(gamma, n, rho, T), rtol=1e-8)
    path = critical.rho_path(gamma, n, rho, np.linspace(0, T, 5))
    np.testing.assert_allclose(path, attention.equiangular_rho(np.linspace(0, T, 5), rho, beta, n), rtol=1e-9)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_short_horizon_ratio_is_the_one_layer_law(rho):
    """Over a short horizon the displacement is T |x_i'(0)|, proportional to 1 - w_self."""
    n, T = 1000.0, 1e-4
    for kappa in (0.5, 1.0, 1.5):
        gamma = kappa / (1.0 - rho)
        law = (1.0 - critical.self_weight(gamma, n, rho)) / (1.0 - 1.0 / n)
        assert critical.displacement_ratio(gamma, n, rho, T) == pytest.approx(law, rel=1e-3)


NS = [1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8]


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_crossover_converges_to_gamma_c_and_extrapolates_within_5_percent(rho):
    gamma_c = 1.0 / (1.0 - rho)
    crossings = np.array([critical.crossover(n, rho, 1.0) for n in NS])
    gap = np.abs(crossings - gamma_c)
    assert np.all(np.diff(gap[1:]) < 0)  # closer at every n from 10^3 on
    assert gap[-1] / gamma_c < 0.17
    g_inf, _ = critical.extrapolate(NS, crossings, rho)
    assert abs(g_inf / gamma_c - 1.0) < 0.05  # measured: 0.9914, 0.9838, 0.9906
    if rho == 0.0:  # the closed form of the rho = 0 crossover, to first order in 1/n
        np.testing.assert_allclose(crossings[2:], critical.rho_zero_crossover(NS[2:], 1.0), rtol=1e-3)


def test_bad_rho_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "never.h5"
    assert main(["run", SCENARIO, "--out", str(out), "--set", "sweep.rho=[0.5, 1.0]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "sweep.rho[1]" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


@pytest.mark.slow  # ~40 s: particles at n = 100 and 316 for one rho
def test_scenario_crossovers_agree_with_the_reduction(tmp_path):
    path = dyn.run(
        SCENARIO, tmp_path / "c.h5", progress=False, overrides=["sweep.rho=[0.5]", "sweep.n=[100, 316, 10000]"]
    )
    with dyn.open(path) as ds:
        half = ds["gamma_half"].sel(rho=0.5).values
        np.testing.assert_allclose(half, [critical.crossover(n, 0.5, 1.0) for n in (100, 316, 10000)], rtol=1e-8)
        np.testing.assert_array_equal(ds["gamma_c"].values, 2.0)
        near = ds["near_gamma_half"].sel(rho=0.5).values
        assert np.isnan(near[-1])  # above particles_max
        # near-equiangular particles in R^64 cross within 5% of the reduction
        np.testing.assert_allclose(near[:2], half[:2], rtol=0.05)
