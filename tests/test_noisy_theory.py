"""The kernel's expansions and the linear stability of the uniform law (physics.md §1.3):
Jacobi-Anger and Funk-Hecke coefficients against independent quadrature, the Bessel tail bound,
the closed-form growth rates and sigma_c, and the mean-field branches they predict."""

import math

import numpy as np
import pytest
from scipy import special

from dyn import noisy


@pytest.mark.parametrize("beta", [-2.5, 0.0, 1e-3, 0.7, 4.0, 12.0])
def test_jacobi_anger_series_within_its_tail_bound(beta):
    # sum_{|k| <= K} I_k e^{iku} reproduces e^{beta cos u} within tol e^{|beta|}, and the bound
    # is not vacuous: one order less leaves an error above the requested tolerance's scale
    u = np.linspace(-math.pi, math.pi, 2001)
    for tol in (1e-6, 1e-12):
        K = noisy.fourier_order(beta, tol)
        c = noisy.circle_coefficients(beta, K)
        series = c[0] + 2 * np.cos(np.outer(u, np.arange(1, K + 1))) @ c[1:]
        exact = np.exp(beta * (np.cos(u) - 1)) if beta >= 0 else np.exp(beta * np.cos(u) + beta)
        err = np.abs(series - exact).max()
        assert err <= max(tol, 4e-16 * K)
        true_tail = 2 * special.ive(np.arange(K + 1, K + 400), beta).__abs__().sum()
        assert true_tail <= noisy.tail_bound(beta, K) <= 1.2 * true_tail + 1e-300
        if K > 0:
            assert noisy.tail_bound(beta, K - 1) > tol


@pytest.mark.parametrize("d", [2, 3, 4, 7])
@pytest.mark.parametrize("beta", [-1.5, 0.3, 2.0, 9.0])
def test_funk_hecke_coefficients_against_quadrature(d, beta):
    # a_l = (|S^{d-2}| / |S^{d-1}|) int_{-1}^{1} e^{beta t} C_l(t)/C_l(1) (1 - t^2)^{(d-3)/2} dt,
    # with Gegenbauer C_l^{(d-2)/2} (Legendre-Chebyshev for d = 2): Gauss-Jacobi quadrature
    degrees = np.arange(0, 8)
    a, a_over_beta = noisy.funk_hecke(beta, d, degrees)
    alpha = (d - 3) / 2
    t, w = special.roots_jacobi(80, alpha, alpha)
    lam = (d - 2) / 2
    for l in degrees:
        if d == 2:
            poly = special.eval_chebyt(l, t)
        else:
            poly = special.eval_gegenbauer(l, lam, t) / special.eval_gegenbauer(l, lam, 1.0)
        want = np.sum(w * np.exp(beta * t) * poly) / np.sum(w)
        # the quadrature adds 80 terms of size up to e^{|beta|}: its own rounding is ~1e-14 of that
        assert abs(a[l] - want) <= 1e-13 * max(1.0, abs(want)) + 1e-14 * math.exp(abs(beta))
        if l >= 1:
            assert abs(a_over_beta[l] * beta - a[l]) <= 1e-13 * max(abs(a[l]), 1e-300)


def test_growth_rates_closed_forms_on_the_circle():
    ks = np.arange(1, 7)
    for beta in (0.4, 2.0, 7.5):
        for sigma in (0.3, 1.1):
            usa = ks**2 * (special.iv(ks, beta) / beta - sigma**2 / 2)
            sa = ks**2 * (special.iv(ks, beta) / (beta * special.iv(0, beta)) - sigma**2 / 2)
            np.testing.assert_allclose(noisy.growth_rates(beta, sigma, 2, "USA", ks), usa, rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(noisy.growth_rates(beta, sigma, 2, "SA", ks), sa, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_small_beta_limit_and_critical_noise(d):
    # beta -> 0: the drift is P_x(mean y), lambda_1 = (d-1)(1/d - sigma^2/2), higher modes pure
    # diffusion; at sigma_c mode 1 is neutral and every other mode decays
    for normalization in ("SA", "USA"):
        rates = noisy.growth_rates(0.0, 0.5, d, normalization, [1, 2, 3])
        ll = np.array([1, 2, 3]) * (np.array([1, 2, 3]) + d - 2)
        np.testing.assert_allclose(rates, [(d - 1) * (1 / d - 0.125), *(-0.125 * ll[1:])], rtol=1e-14)
        for beta in (0.5, 3.0, 8.0):
            sc = noisy.sigma_critical(beta, d, normalization)
            rates = noisy.growth_rates(beta, sc, d, normalization, range(1, 9))
            assert abs(rates[0]) < 1e-12 * d
            assert np.all(rates[1:] < 0)


def test_the_usa_transition_turns_discontinuous_where_I2_over_I1_passes_one_half():
    # the third-order expansion (dyn/noisy/theory.py) against the traced mean-field branch: the
    # branch leaves the uniform law at sigma_c (to the step of the continuation), towards lower
    # sigma (supercritical) for beta < 2.447 and towards higher sigma (subcritical) above
    for beta, discontinuous in ((1.0, False), (2.3, False), (2.6, True), (4.0, True)):
        assert noisy.usa_circle_is_discontinuous(beta) == discontinuous
        branch = noisy.circle_branch(beta, "USA", steps=60)
        sc = noisy.sigma_critical(beta, 2, "USA")
        assert abs(branch.sigma[0] / sc - 1) < 2e-3
        assert (branch.sigma[1] > branch.sigma[0]) == discontinuous
        assert (branch.sigma.max() > sc * (1 + 1e-4)) == discontinuous
        assert branch.stable[-1]  # the strongly clustered end is stable
    # SA stays continuous (checked up to beta = 20)
    for beta in (2.0, 6.0, 20.0):
        branch = noisy.circle_branch(beta, "SA", steps=40)
        assert np.all(np.diff(branch.sigma) < 0)
