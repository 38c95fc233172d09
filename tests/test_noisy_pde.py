"""The mean-field equation on the circle (dyn.noisy.pde): mass, positivity, the linear growth
rates of the uniform law against the closed form, the stationary laws, and refused grids."""

import math

import numpy as np
import pytest

from dyn import noisy


def test_phi_functions():
    # phi_j(z) = sum_m z^m/(m+j)!: the series branch (|z| < 1) and the closed forms agree where
    # they meet, and phi_j(0) = 1/j!
    z = np.array([-0.999999, -1.000001, -0.3, 0.0, -50.0])
    p1, p2, p3 = noisy.phi_functions(z)
    closed = lambda z: (np.expm1(z) / z, (np.expm1(z) - z) / z**2, (np.expm1(z) - z - z**2 / 2) / z**3)
    for got, want in zip((p1, p2, p3), closed(z[[0, 1, 2, 4]]), strict=True):
        np.testing.assert_allclose(got[[0, 1, 2, 4]], want, rtol=1e-12)
    np.testing.assert_allclose([p1[3], p2[3], p3[3]], [1, 0.5, 1 / 6], rtol=1e-15)


@pytest.mark.parametrize("normalization", ["SA", "USA"])
def test_mass_is_conserved_and_the_density_stays_positive(normalization):
    # from a two-mode perturbation into a cluster (sigma < sigma_c): mass to rounding, rho > 0
    beta = 3.0
    sigma = 0.6 * noisy.sigma_critical(beta, 2, normalization)
    solver = noisy.CircleMeanField(beta, sigma, normalization, grid=256)
    M = solver.M
    rho0 = noisy.perturbed_density(M, 1, 0.2) + noisy.perturbed_density(M, 3, 0.1) - 1 / (2 * math.pi)
    rho = solver.solve(rho0, np.linspace(0.0, 6.0, 13), dt=2e-3)
    assert np.abs(solver.mass(rho) - 1.0).max() < 1e-14
    assert rho.min() > 0
    r = np.abs(solver.moments(rho, 1)[:, 0])
    assert r[-1] > 2 * r[0]  # it did cluster: the test is not on a trivial evolution


@pytest.mark.parametrize("normalization", ["SA", "USA"])
@pytest.mark.parametrize("beta, sigma", [(0.0, 0.9), (0.7, 0.8), (2.5, 1.1), (5.0, 1.6)])
def test_growth_rates_match_the_closed_form(normalization, beta, sigma):
    # lambda_k measured on the PDE (perturbation 1e-6 in mode k alone, window 0.5/k) against
    # k^2 (I_k/beta - sigma^2/2) (USA) or k^2 (I_k/(beta I_0) - sigma^2/2) (SA), to 1e-6
    solver = noisy.CircleMeanField(beta, sigma, normalization, grid=128)
    measured = noisy.pde_growth_rates(solver, 0.5, 6, dt=1e-3, epsilon=1e-6)
    theory = noisy.growth_rates(beta, sigma, 2, normalization, np.arange(1, 7))
    assert np.abs(measured - theory).max() < 1e-6


def test_the_pde_relaxes_to_the_stationary_branch():
    # a clustered start relaxes to the mean-field stationary law of dyn.noisy.branches
    # (independent code: a self-consistency solved by continuation); SA, continuous transition
    beta, sigma = 2.0, 0.6
    branch = noisy.circle_branch(beta, "SA")
    r_branch = np.interp(-sigma, -branch.sigma, branch.r)  # sigma decreases along the branch
    solver = noisy.CircleMeanField(beta, sigma, "SA", grid=128)
    rho = solver.solve(noisy.von_mises_density(128, 4.0), [0.0, 25.0], dt=0.01)
    r_pde = abs(solver.moments(rho[-1], 1)[0])
    assert abs(r_pde - r_branch) < 2e-4  # the branch's interpolation error on 60 points


def test_a_grid_too_coarse_for_beta_is_refused():
    with pytest.raises(ValueError, match="too coarse for beta = 30"):
        noisy.CircleMeanField(30.0, 1.0, "USA", grid=64)
    M = noisy.min_grid(30.0, 1e-12)
    noisy.CircleMeanField(30.0, 1.0, "USA", grid=M)
    with pytest.raises(ValueError, match="too coarse"):
        noisy.CircleMeanField(30.0, 1.0, "USA", grid=M - 2)
