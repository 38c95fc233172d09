"""The zonal mean field of noisy attention on S^{d-1} (dyn.noisy.zonal): the Gegenbauer basis and
its Laplacian, the growth rates of the uniform law against the closed form, mass, relaxation to
the stationary laws of the branch (also in the bistable window), and the stability of branch
points from the operator's spectrum."""

import math

import numpy as np
import pytest

from dyn import noisy


@pytest.mark.parametrize("d", [2, 3, 4, 8, 16])
def test_the_basis_is_orthonormal_and_diagonalizes_the_laplacian(d):
    # E[P_l P_k] = delta_lk and E[(1 - u^2) P_l' P_k'] = E[grad P_l . grad P_k] = l(l+d-2) delta
    # under the law (1 - u^2)^{(d-3)/2} of u = <x, e_1>; P_1 = sqrt(d) u; and the Gauss rule
    # integrates u^{2j} exactly: E u^2 = 1/d, E u^4 = 3/(d(d+2))
    L = 30
    u, w = noisy.gauss_nodes(d, 40)
    P, dP = noisy.zonal_polynomials(u, d, L)
    np.testing.assert_allclose((P * w) @ P.T, np.eye(L + 1), atol=1e-13)
    ll = np.arange(L + 1) * (np.arange(L + 1) + d - 2.0)
    np.testing.assert_allclose((dP * w * (1 - u**2)) @ dP.T, np.diag(ll), atol=1e-11 * ll.max())
    np.testing.assert_allclose(P[1], math.sqrt(d) * u, rtol=1e-15)
    assert abs(w @ u**2 - 1 / d) < 1e-15 and abs(w @ u**4 - 3 / (d * (d + 2))) < 1e-15
    # the zonal harmonics are Gegenbauer C_l^{(d-2)/2} (d = 2: Chebyshev T_l), up to a constant
    from scipy import special

    t = np.linspace(-0.9, 0.9, 7)
    Pt, _ = noisy.zonal_polynomials(t, d, 6)
    for l in range(1, 7):
        ref = special.eval_chebyt(l, t) if d == 2 else special.eval_gegenbauer(l, (d - 2) / 2, t)
        ratio = Pt[l] / ref
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)


@pytest.mark.parametrize("d", [3, 4, 8])
@pytest.mark.parametrize("normalization", ["USA", "SA"])
def test_growth_rates_of_zonal_modes_match_the_closed_form(d, normalization):
    # lambda_l = l(l+d-2)(a_l/(beta D_0) - sigma^2/2) (dyn/noisy/theory.py), from the assembled
    # linearized operator and from nonlinear runs (odd part of +-1e-5 perturbations): 1e-8
    degrees = np.arange(1, 7)
    for beta, sigma in ((0.8, 0.5), (3.0, 1.2), (6.0, 2.0)):
        theory = noisy.growth_rates(beta, sigma, d, normalization, degrees)
        for method in ("operator", "pde"):
            measured = noisy.zonal_growth_rates(beta, sigma, d, normalization, degrees, method=method)
            assert np.abs(measured - theory).max() < 1e-8, (beta, sigma, method)


def test_the_circle_is_the_case_d_2():
    # d = 2: Chebyshev modes are cos(k theta), rates k^2 (I_k/beta - sigma^2/2)
    from scipy.special import iv

    k = np.arange(1, 6)
    for beta, sigma in ((2.5, 1.1), (6.0, 2.0)):
        rates = noisy.zonal_growth_rates(beta, sigma, 2, "USA", k, method="pde")
        np.testing.assert_allclose(rates, k**2 * (iv(k, beta) / beta - sigma**2 / 2), atol=1e-8)


@pytest.mark.parametrize("d, normalization", [(2, "SA"), (3, "USA"), (8, "SA")])
def test_mass_is_conserved_exactly_while_the_law_clusters(d, normalization):
    beta = 3.0
    sigma = 0.6 * noisy.sigma_critical(beta, d, normalization)
    field = noisy.ZonalMeanField(beta, sigma, d, normalization, degree=40)
    c0 = np.zeros(41)
    c0[0], c0[1], c0[2] = 1.0, 0.1, 0.05
    c = field.solve(c0, np.linspace(0.0, 12.0, 7), dt=0.01)
    assert np.all(field.mass(c) == 1.0)  # T_0 = 0 and D_0 = 0: c_0 is never changed
    r = field.order_parameter(c)
    assert r[-1] > 5 * r[0]  # it clustered
    rho = field.density(c[-1])
    assert rho.min() > -1e-12 * rho.max()  # positive up to the truncation of a tight cluster


@pytest.mark.parametrize("beta, d, normalization, fraction", [(1.0, 3, "USA", 0.6), (3.0, 4, "SA", 0.7)])
def test_the_pde_relaxes_to_the_stationary_law_of_the_branch(beta, d, normalization, fraction):
    # two independent computations: the time-dependent Galerkin equation from a von Mises-like
    # start, and the self-consistency continued along the branch (dyn.noisy.branches)
    sigma = fraction * noisy.sigma_critical(beta, d, normalization)
    want = noisy.stationary_law(beta, sigma, d, normalization, degree=32)
    field = noisy.ZonalMeanField(beta, sigma, d, normalization, degree=32)
    c0 = field.project(lambda u: np.exp(3 * (u - 1)))
    c = field.solve(c0 / c0[0], [0.0, 30.0], dt=0.01)[-1]
    assert np.abs(c - want).max() < 1e-8  # the degree-32 truncation of the PDE


def test_bistability_above_sigma_c_in_d_3():
    # USA, d = 3, beta = 4 > beta_*(3) = 1.816: at sigma = 1.06 sigma_c < sigma_fold = 1.124 sigma_c
    # a clustered start relaxes to the stable clustered law of the branch, a perturbed uniform
    # law decays (lambda_1 = -0.31)
    beta, d = 4.0, 3
    sigma_c = noisy.sigma_critical(beta, d, "USA")
    sigma = 1.06 * sigma_c
    assert sigma < noisy.sigma_fold(beta, d)
    want = noisy.stationary_law(beta, sigma, d, "USA", degree=48)
    field = noisy.ZonalMeanField(beta, sigma, d, "USA", degree=48)
    cluster = field.project(lambda u: np.exp(3 * (u - 1)))
    near_uniform = np.eye(49)[0] + 0.05 * np.eye(49)[1]
    c = field.solve(np.stack([cluster / cluster[0], near_uniform]), [0.0, 40.0], dt=0.01)[-1]
    assert np.abs(c[0] - want).max() < 1e-9
    assert field.order_parameter(c[0]) > 0.9
    assert np.abs(c[1, 1:]).max() < 1e-6


@pytest.mark.parametrize("beta, d", [(5.0, 2), (4.0, 3)])
def test_branch_stability_flags_agree_with_the_operator_spectrum(beta, d):
    # subcritical USA branches: unstable before the fold, stable after (exchange of stability);
    # the zonal linearized operator at the branch's laws has an eigenvalue > 0 before, none after
    for r, stable in ((0.3, False), (0.85, True)):
        point = noisy.branch_at(beta, d, "USA", [r])
        assert bool(point.stable[0]) == stable
        law = noisy.branch_law(beta, d, "USA", r, degree=48)
        field = noisy.ZonalMeanField(beta, float(point.sigma[0]), d, "USA", degree=48)
        assert np.abs(field.rhs(law)).max() < 1e-7  # stationary, to the PDE's truncation
        top = np.linalg.eigvals(field.jacobian(law)[1:, 1:]).real.max()
        assert (top < 0) == stable and abs(top) > 1e-2, (r, top)
