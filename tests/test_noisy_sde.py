"""Noisy attention as an SDE on the sphere (physics.md §1.3): the coefficients, the generator
(Brownian motion on the sphere), the weak order of the scheme, invariants, backend agreement.

Statistical tolerances: fixed seeds; |estimate - prediction| < 4 standard errors (a correct
implementation fails with probability ~6e-5 per comparison with another seed).
"""

import math

import numpy as np
import pytest
from scipy import integrate, stats

import integrators
from dyn import noisy
from integrators import brownian_increments, coarsen

Z = 4.0  # standard errors allowed


def _unit(rng, E, n, d):
    return noisy.uniform_tokens(rng, E, n, d)


def test_drift_and_diffusion_are_the_ito_coefficients():
    # drift = P_x m - sigma^2 (d-1)/2 x with m the attention mean field; diffusion = sigma P_x dw
    rng = np.random.default_rng(0)
    n, d, beta, sigma = 7, 3, 1.7, 0.8
    Q, K, V = (np.eye(d) + 0.3 * rng.standard_normal((d, d)) for _ in range(3))
    x = _unit(rng, 1, n, d)[0]
    dw = rng.standard_normal((n, d))
    for normalization in ("SA", "USA"):
        p = noisy.pack(beta, d, sigma, n, normalization, Q, K, V)
        s = beta * (x @ Q.T) @ (x @ K.T).T
        A = np.exp(s) / (np.exp(s).sum(1, keepdims=True) if normalization == "SA" else n)
        m = A @ x @ V.T
        P = np.eye(d)[None] - x[:, :, None] * x[:, None, :]
        want_f = np.einsum("ikl,il->ik", P, m) - sigma**2 * (d - 1) / 2 * x
        want_g = sigma * np.einsum("ikl,il->ik", P, dw)
        f, g = np.empty_like(x), np.empty_like(x)
        work = np.empty(noisy.NOISY.problem(p).work_size(n, d))
        noisy.noisy_drift(0.0, x, p, f, work)
        noisy.noisy_diffusion(0.0, x, p, dw, g, work)
        np.testing.assert_allclose(f, want_f, atol=1e-13)
        np.testing.assert_allclose(g, want_g, atol=1e-14)
    assert noisy.noise_shape(p) == (n, d)


def _scheme_law(sigma, h, steps, d):
    """E<x_N, x_0> of the projected-retracted Euler scheme without drift, exactly: each step
    multiplies it by E (1 + sigma^2 h chi^2_{d-1})^{-1/2} (isotropy of the tangent noise)."""
    f = lambda u: (1 + sigma**2 * h * u * u) ** -0.5 * stats.chi.pdf(u, d - 1)  # u = |P dW|/sqrt(h)
    step = integrate.quad(f, 0, np.inf, epsabs=1e-15, epsrel=1e-13, limit=200)[0]
    return step**steps


@pytest.mark.parametrize("d", [2, 3])
def test_free_brownian_motion_law_of_the_scheme(d):
    # V = 0 switches the drift off: each token is the scheme's Brownian motion on S^{d-1}, and
    # E<x(T), x(0)> equals the exact law of the scheme, m_d(h)^{T/h}, at every step size.
    sigma, T, E, n = 1.0, 1.0, 4000, 8
    rng = np.random.default_rng(10 + d)
    p = noisy.pack(1.0, d, sigma, n, "SA", V=np.zeros((d, d)))
    x0 = _unit(rng, E, n, d)
    for N in (4, 8, 16, 32):
        em = integrators.get("numba", "euler_maruyama", dt=T / N)
        xT = em.solve(noisy.noisy_problem(p), x0, [0.0, T], rng=rng).states[:, -1]
        c = np.sum(xT * x0, -1).ravel()  # tokens are independent: E * n samples
        se = c.std() / math.sqrt(c.size)
        assert abs(c.mean() - _scheme_law(sigma, T / N, N, d)) < Z * se
    # ... and the scheme's law tends to the generator's, exp(-sigma^2 (d-1) T / 2)
    assert abs(_scheme_law(sigma, T / 4096, 4096, d) / math.exp(-(sigma**2) * (d - 1) * T / 2) - 1) < 1e-3


def _slope(h, errors):
    return np.polyfit(np.log(h), np.log(errors), 1)[0]


@pytest.mark.parametrize("d", [2, pytest.param(3, marks=pytest.mark.slow)])  # one d by default
def test_weak_order_one(d):
    # E<x(T), x(0)> against exp(-sigma^2 (d-1) T / 2) with the drift switched off (V = 0). One
    # Brownian path per token, coarsened (common random numbers): the differences of the errors
    # between consecutive step sizes, e(h) - e(h/2), carry little Monte Carlo noise, and their
    # log-log slope in h is the weak order. At these steps the order is still pre-asymptotic: the
    # scheme's exact law (_scheme_law) has log m_d = -(d-1)a/2 + (d-1)(d+2)a^2/4 - O(a^3), a =
    # sigma^2 h, with a large cubic term (4.2 a^3 for d = 2), so its own slope is 0.8-0.9 here and
    # tends to 1 as h -> 0. The measured slope must match the exact law's at the same steps within
    # 0.1 (its statistical error is ~0.05), and that slope must tend to 1.
    sigma, T, E, n, fine = 1.0, 1.0, 2500, 8, 128
    rng = np.random.default_rng(20 + d)
    p = noisy.pack(1.0, d, sigma, n, "USA", V=np.zeros((d, d)))
    x0 = _unit(rng, E, n, d)
    dW = brownian_increments(rng, E, [0.0, T], T / fine, (n, d))
    exact = math.exp(-(sigma**2) * (d - 1) * T / 2)
    steps = np.array([16, 32, 64, 128])
    errors = []
    for N in steps:
        em = integrators.get("numba", "euler_maruyama", dt=T / N)
        xT = em.solve(noisy.noisy_problem(p), x0, [0.0, T], increments=coarsen(dW, fine // N)).states[:, -1]
        errors.append(np.sum(xT * x0, -1).mean() - exact)
    errors = np.array(errors)
    assert np.all(errors[:-1] > 0)  # the scheme's law decays slower than the generator's
    h = T / steps[:-1]
    measured = _slope(h, errors[:-1] - errors[1:])
    law = np.array([_scheme_law(sigma, T / N, N, d) for N in steps])
    predicted = _slope(h, law[:-1] - law[1:])
    assert abs(measured - predicted) < 0.1, (measured, predicted)
    fine_steps = np.array([4096, 8192, 16384])
    law = np.array([_scheme_law(sigma, T / N, N, d) for N in fine_steps])
    assert abs(_slope(T / fine_steps[:-1], law[:-1] - law[1:]) - 1.0) < 0.01


@pytest.mark.parametrize("record", ["direct", "fourier"])
def test_tokens_stay_on_the_sphere(record):
    rng = np.random.default_rng(3)
    if record == "direct":
        d = 3
        p = noisy.pack(2.0, d, 1.3, 12, "SA", *(np.eye(d) + 0.4 * rng.standard_normal((3, d, d))))
        problem = noisy.noisy_problem(p)
    else:
        d = 2
        problem = noisy.fourier_problem(noisy.pack_fourier(3.0, 1.3, 12, "USA"))
    x0 = _unit(rng, 20, 12, d)
    states = (
        integrators.get("numba", "euler_maruyama", dt=0.01).solve(problem, x0, np.linspace(0.0, 3.0, 4), rng=rng).states
    )
    np.testing.assert_allclose(np.linalg.norm(states, axis=-1), 1.0, rtol=0, atol=1e-12)


# each record compiles its own JAX program: the Fourier drift's twin is checked in test_models
@pytest.mark.parametrize("record", ["direct", pytest.param("fourier", marks=pytest.mark.slow)])
def test_backends_agree_path_by_path(record):
    # the same Brownian increments drive numba and diffrax: the same Ito scheme, so the states
    # agree to rounding (accumulated over 50 steps)
    rng = np.random.default_rng(4)
    if record == "direct":
        n, d = 6, 3
        M = np.eye(d) + 0.3 * rng.standard_normal((3, d, d))
        problem = noisy.noisy_problem(noisy.pack(1.5, d, 0.9, n, "SA", *M))
    else:
        n, d = 9, 2
        problem = noisy.fourier_problem(noisy.pack_fourier(2.5, 0.9, n, "USA"))
    x0 = _unit(rng, 3, n, d)
    ts = np.linspace(0.0, 1.0, 3)
    dW = brownian_increments(rng, 3, ts, 0.02, (n, d))
    a = integrators.get("numba", "euler_maruyama", dt=0.02).solve(problem, x0, ts, increments=dW).states
    b = integrators.get("diffrax", "euler_maruyama", dt=0.02).solve(problem, x0, ts, increments=dW).states
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-11)


@pytest.mark.slow  # many runs; the path-by-path agreement stays in the default tier
def test_backends_agree_in_law():
    # each backend draws its own noise (numba: xoshiro streams, diffrax: JAX keys); r(T) and
    # E<x(T), x(0)> must agree within 4 combined standard errors
    n, d, E, T = 16, 2, 300, 1.0
    problem = noisy.fourier_problem(noisy.pack_fourier(2.0, 1.0, n, "USA"))
    stats_ = []
    for backend, seed in (("numba", 5), ("diffrax", 6)):
        rng = np.random.default_rng(seed)
        x0 = _unit(rng, E, n, d)
        xT = integrators.get(backend, "euler_maruyama", dt=0.02).solve(problem, x0, [0.0, T], rng=rng).states[:, -1]
        stats_.append((noisy.order_parameter(xT), np.sum(xT * x0, -1).mean(-1)))
    for i in range(2):
        a, b = stats_[0][i], stats_[1][i]
        se = math.hypot(a.std() / math.sqrt(E), b.std() / math.sqrt(E))
        assert abs(a.mean() - b.mean()) < Z * se
