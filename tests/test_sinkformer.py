"""Sinkformers (physics.md §2): Sinkhorn attention, the gradient-flow identity, the heat limit,
and the discrete Sinkformer's depth limit."""

import numpy as np
import pytest

import integrators
from dyn import sinkformer as sf
from dyn.sinkformer import reference


def _gauss(seed, n, d, s0=1.0):
    return s0 * np.random.default_rng(seed).standard_normal((n, d))


def _sqdist(x, tau):
    return -((x[:, None, :] - x[None, :, :]) ** 2).sum(-1) / (2 * tau)


@pytest.mark.parametrize("iterations", [1, 2, 3, 8, 9])
def test_iterations_match_numpy_reference(iterations):
    S = _sqdist(_gauss(0, 30, 2), 0.1)
    K = sf.sinkhorn(S, iterations)[0]
    # same log-domain recursion, different summation order: rounding level
    np.testing.assert_allclose(K, reference.sinkhorn_log(S, iterations), rtol=0, atol=1e-13)


@pytest.mark.parametrize("scores", ["sqdist", "dot_asym"])
def test_marginals_to_tolerance(scores):
    x = _gauss(1, 40, 2)
    S = _sqdist(x, 0.05) if scores == "sqdist" else x @ np.array([[1.0, 0.7], [-0.2, 0.5]]) @ x.T
    K, f, g, k, errors = sf.sinkhorn(S, 100_000, 1e-10)
    assert k < 100_000
    # the stopping rule is max |marginal - 1| <= tol; 1e-10 itself is the contract
    assert sf.marginal_error(K) <= 1e-10
    np.testing.assert_allclose(K, np.exp(S + f[:, None] + g[None, :]), rtol=1e-12)


def test_one_iteration_is_softmax():
    S = 3.0 * _gauss(2, 25, 25)
    e = np.exp(S - S.max(axis=1, keepdims=True))
    np.testing.assert_allclose(sf.sinkhorn(S, 1)[0], e / e.sum(axis=1, keepdims=True), rtol=1e-14, atol=0)


def test_small_bandwidth_does_not_overflow():
    # scores down to -|x_i - x_j|^2 / 2e-6 ~ -1e6: exp(S) underflows everywhere off the diagonal
    x = _gauss(3, 50, 2)
    for iterations, tol in ((7, 0.0), (1000, 1e-12)):
        K = sf.sinkhorn(_sqdist(x, 1e-6), iterations, tol)[0]
        assert np.isfinite(K).all()
        np.testing.assert_allclose(K, np.eye(50), atol=1e-12)


def test_dot_and_sqdist_scores_same_doubly_stochastic_different_softmax():
    # -|x-y|^2/(2 tau) = x.y/tau - |x|^2/(2 tau) - |y|^2/(2 tau): the row and column factors are
    # absorbed by the potentials, so K^inf agrees; softmax absorbs only the row factor.
    x, tau = _gauss(4, 40, 2), 0.5
    dot, sq = x @ x.T / tau, _sqdist(x, tau)
    tol = 1e-12
    K_dot, K_sq = sf.sinkhorn(dot, 100_000, tol)[0], sf.sinkhorn(sq, 100_000, tol)[0]
    # both within tol of the same fixed point; K entries are O(1), so agreement is O(tol)-ish
    np.testing.assert_allclose(K_dot, K_sq, atol=1e-10)
    assert np.abs(sf.softmax(dot) - sf.softmax(sq)).max() > 0.1


def test_energy_identity_along_sinkhorn_flow():
    """dF/dt = -(1/n) sum_i |dx_i/dt|^2 for W = W_V symmetric, fully converged Sinkhorn."""
    d = 2
    W = np.array([[0.8, 0.3], [0.3, -0.4]])
    p = sf.pack_params(d, "sinkhorn", 10_000, 1e-13, W=W, WV=W)
    x0 = _gauss(5, 24, d)[None]
    ts = np.linspace(0.0, 0.5, 6)
    xs = integrators.get("numba", "rk4", dt=1e-3).solve(sf.flow_problem(p), x0, ts).states[0]
    h = 1e-4
    for x in xs:
        v = sf.velocity(x, p)
        dF = (sf.self_transport_energy(x + h * v, p) - sf.self_transport_energy(x - h * v, p)) / (2 * h)
        # central difference: O(h^2) = 1e-8 relative; the solve's tolerance 1e-13 is below it
        assert abs(dF / -sf.dissipation(v) - 1) < 1e-6
    F = sf.self_transport_energy(xs, p)
    assert np.all(np.diff(F) < 0)


def test_energy_identity_needs_converged_sinkhorn():
    # a truncated Sinkhorn is not the optimal plan, so the envelope argument fails: with 3
    # normalizations the dissipation misses dF/dt by a visible margin (measured ~1-20 %)
    d = 2
    W = np.array([[0.8, 0.3], [0.3, -0.4]])
    p_inf = sf.pack_params(d, "sinkhorn", 10_000, 1e-13, W=W, WV=W)
    p3 = sf.pack_params(d, "sinkhorn", 3, W=W, WV=W)
    x = _gauss(5, 24, d)
    v = sf.velocity(x, p3)
    h = 1e-4
    dF = (sf.self_transport_energy(x + h * v, p_inf) - sf.self_transport_energy(x - h * v, p_inf)) / (2 * h)
    assert abs(dF / -sf.dissipation(v) - 1) > 1e-3


@pytest.mark.slow  # a physics check of a few seconds: the default tier's 3-minute budget
def test_heat_limit_variance_slope():
    """Variance of a Gaussian start grows at ~2 alpha under Sinkhorn and ~4 alpha under softmax."""
    alpha, tau, n, T = 0.5, 0.05, 300, 0.5
    x0 = np.random.default_rng(6).standard_normal((2, n, 1))
    ts = np.linspace(0.0, T, 6)
    slopes = {}
    for norm in ("sinkhorn", "softmax"):
        p = sf.heat_params(1, alpha, tau, norm, iterations=1000, tol=1e-9)
        xs = integrators.get("numba", "rk4", dt=0.01).solve(sf.flow_problem(p), x0, ts).states
        slopes[norm] = np.polyfit(ts, sf.variance(xs).mean(axis=0), 1)[0]
    # 2 alpha = 1. Tolerance 10 %: finite n (kernel density of 300 points, sampling fluctuation
    # of the variance ~ sqrt(2/n) ~ 8 % on its growth over 2 runs is partly common to both ends)
    # and the O(tau) bias of the barycentric displacement (tau/2) grad log mu; measured 0.98.
    assert abs(slopes["sinkhorn"] - 2 * alpha) < 0.1 * 2 * alpha, slopes
    # softmax displaces by ~tau grad log mu: about twice the heat rate (measured ~1.9)
    assert slopes["softmax"] > 1.6 * slopes["sinkhorn"], slopes


def test_discrete_sinkformer_converges_to_flow_at_order_one():
    d = 2
    W = np.array([[0.5, 0.2], [0.2, -0.3]])
    p = sf.pack_params(d, "sinkhorn", 5, W=W, WV=W)
    x0 = _gauss(7, 12, d)[None]
    T = 1.0
    ref = integrators.get("numba", "rk4", dt=1e-3).solve(sf.flow_problem(p), x0, np.array([0.0, T])).states[0, -1]
    depths = np.array([16, 32, 64, 128])
    err = [np.abs(sf.sinkformer_layers(x0, L, T, p)[0, -1] - ref).max() for L in depths]
    slope = np.polyfit(np.log(depths), np.log(err), 1)[0]
    # explicit Euler in depth: error ~ C / L; +-0.15 covers the pre-asymptotic O(1/L^2) term
    assert -1.15 < slope < -0.85, (slope, err)


def test_velocity_matches_plain_numpy_heat_flow():
    x, alpha, tau = _gauss(8, 30, 2), 0.5, 0.2
    for iterations in (1, 4, 7):
        p = sf.heat_params(2, alpha, tau, "sinkhorn", iterations, tol=0.0)
        np.testing.assert_allclose(
            sf.velocity(x, p), reference.heat_velocity(x, alpha, tau, iterations), rtol=0, atol=1e-12
        )


@pytest.mark.slow  # JAX compiles; the sinkformer drift twin (test_models) and diffrax's own checks stay default
def test_numba_and_diffrax_agree():
    pytest.importorskip("diffrax")
    d = 2
    W = np.array([[0.5, 0.2], [0.2, -0.3]])
    x0 = np.stack([_gauss(9, 10, d), _gauss(10, 10, d)])
    ts = np.linspace(0.0, 0.5, 3)
    for p in (sf.pack_params(d, "sinkhorn", 4, W=W, WV=W), sf.heat_params(d, 0.5, 0.3, "sinkhorn", 500, 1e-12)):
        prob = sf.flow_problem(p)
        a = integrators.get("numba", "rk4", dt=1e-2).solve(prob, x0, ts).states
        b = integrators.get("diffrax", "rk4", dt=1e-2).solve(prob, x0, ts).states
        # same RK4 steps, same plan up to the Sinkhorn tolerance and rounding
        np.testing.assert_allclose(a, b, atol=1e-9)


def test_pack_params_rejects_bad_input():
    with pytest.raises(ValueError, match="normalization must be one of"):
        sf.pack_params(2, "sparsemax")
    with pytest.raises(ValueError, match="iterations must be an integer >= 1"):
        sf.pack_params(2, iterations=0)
    with pytest.raises(ValueError, match="tau must be finite and > 0"):
        sf.pack_params(2, scores="sqdist", tau=0.0)
    with pytest.raises(ValueError, match=r"W must have shape \(2, 2\)"):
        sf.pack_params(2, W=np.eye(3))
    assert sf.unpack_params(sf.pack_params(3, "softmax", 50, 1e-3))["iterations"] == 1
