"""Particles against the mean-field PDE (propagation of chaos) on the circle, with fitted rates in
n; and the growth rates measured on particles against the closed form.

Setting: SA, beta = 3, sigma = 0.6 sigma_c (the uniform law unstable), tokens from the law
(1 + 0.4 cos theta)/(2 pi), T = 1.5: the first moment grows from 0.2 to 0.26 (the PDE's m_1(T)).
The particles run the O(nK) drift (agreeing with the direct one to 1e-12) by Euler-Maruyama,
dt = 0.005; its weak error (< 1e-3, measured at n = 512) is below every deviation fitted here.
"""

import math

import numpy as np
import pytest

import integrators
from dyn import noisy

BETA, NORMALIZATION, T, AMPLITUDE = 3.0, "SA", 1.5, 0.2
SIGMA = 0.6 * noisy.sigma_critical(BETA, 2, NORMALIZATION)
EM = integrators.get("numba", "euler_maruyama", dt=0.005)


def _pde_moments(K=2):
    solver = noisy.CircleMeanField(BETA, SIGMA, NORMALIZATION, grid=256)
    rho = solver.solve(noisy.perturbed_density(256, 1, AMPLITUDE), [0.0, T], 1e-3)
    return solver.moments(rho[-1], K)


def _particle_moments(n, runs, seed, K=2):
    rng = np.random.default_rng(seed)
    x0 = noisy.perturbed_circle(rng, runs, n, 1, AMPLITUDE)
    problem = noisy.fourier_problem(noisy.pack_fourier(BETA, SIGMA, n, NORMALIZATION))
    xT = EM.solve(problem, x0, [0.0, T], rng=rng).states[:, -1]
    return noisy.circle_moments(xT, K)


@pytest.mark.slow  # ensembles at four n; the particles' growth rates against the closed form stay default
def test_particle_moments_approach_the_pde_at_rate_n_to_the_minus_half():
    # RMS distance sqrt(E|S_k(T) - m_k(T)|^2) of the empirical moments from the PDE's, k = 1, 2:
    # fitted slope -1/2 in n (fluctuations of the empirical measure). Each RMS has a relative
    # standard error ~ 1/sqrt(2 runs) = 6%, the slope ~0.04; tolerance 0.15.
    m = _pde_moments()
    ns = np.array([32, 64, 128, 256])
    rms = np.array([np.sqrt((np.abs(_particle_moments(n, 128, n) - m) ** 2).mean(0)) for n in ns])
    for k in range(2):
        slope = np.polyfit(np.log(ns), np.log(rms[:, k]), 1)[0]
        assert abs(slope + 0.5) < 0.15, (k, slope)


@pytest.mark.slow
def test_mean_particle_moment_approaches_the_pde_at_rate_one_over_n():
    # |E S_1(T) - m_1(T)| (the ensemble mean against the PDE): fitted slope -1 (finite-n bias:
    # SA's self-weight e^beta / (n N_i) and pair correlations). n R = 3.2e5 tokens per point keeps
    # the standard error at 5e-4, below the bias (~0.2/n) up to n = 64; slope error ~0.1,
    # tolerance 0.3.
    m = _pde_moments()[0]
    ns = np.array([16, 32, 64])
    bias = np.array([abs(_particle_moments(n, 320_000 // n, 100 + n)[:, 0].mean() - m) for n in ns])
    slope = np.polyfit(np.log(ns), np.log(bias), 1)[0]
    assert abs(slope + 1.0) < 0.3, (bias, slope)


def test_particle_growth_rates_match_the_closed_form():
    # per-run rates of modes 1..3 (window 1/k, amplitude 0.2, n = 1000): their mean over 24 runs
    # against the closed form within 4 standard errors plus the amplitude's O(a^2) bias, which
    # the PDE started from the same amplitude measures (|rate(0.2) - rate(0)| <= 0.01 here)
    beta, sigma = 2.0, 0.5
    rng = np.random.default_rng(7)
    rates, finite = noisy.particle_growth_rates(EM, rng, 24, 1000, beta, sigma, "SA", 1.0, K=3, amplitude=0.2)
    assert finite.all()
    theory = noisy.growth_rates(beta, sigma, 2, "SA", np.arange(1, 4))
    nonlinear = noisy.pde_growth_rates(noisy.CircleMeanField(beta, sigma, "SA", 128), 1.0, 3, epsilon=0.2)
    se = rates.std(0) / math.sqrt(len(rates))
    assert np.all(np.abs(rates.mean(0) - theory) < 4 * se + np.abs(nonlinear - theory))
