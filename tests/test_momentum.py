"""Momentum ResNets: exact inversion, phase-space volume, depth limits, linear representability,
heavy ball vs RevNet, memory-free backprop (physics.md §4)."""

from __future__ import annotations

import numpy as np
import pytest

import integrators
from dyn import momentum as M


def tanh_problem(d=3, runs=4, eps=0.5, seed=1):
    rng = np.random.default_rng(seed)
    p = M.random_tanh_field(rng, d, eps=eps, scale=2.0)
    return p, rng.standard_normal((runs, d))


def slope(depths, errors) -> float:
    return float(np.polyfit(np.log(depths), np.log(errors), 1)[0])


# --- inversion --------------------------------------------------------------------------------
def test_exact_inversion_is_bit_for_bit_after_10k_layers():
    p, x = tanh_problem(d=3, runs=2)
    fmt = M.FixedPoint()
    x0 = fmt.to_float(fmt.to_fixed(x))  # an input on the fixed-point grid
    v0 = fmt.to_float(fmt.to_fixed(0.01 * x))  # and a nonzero initial velocity
    depth, gamma = 10_000, 0.9
    residual = M.ode_residual(p, 1.0, 100)  # f_n = h g(x, n h): any deterministic residual
    out = M.exact_forward(x0, v0, gamma, residual, depth, fmt)
    back = M.exact_inverse(out, gamma, residual, depth, fmt)
    start = M.exact_forward(x0, v0, gamma, residual, 0, fmt)
    assert np.array_equal(back.x, start.x) and np.array_equal(back.v, start.v)
    assert all(b == 0 for b in back.buffer.flat)  # every stored bit was consumed
    assert np.array_equal(fmt.to_float(back.x), x0) and np.array_equal(fmt.to_float(back.v), v0)
    # The buffer holds what multiplying by gamma destroys: log2(1/gamma) bits per entry and layer
    # (+ at most a few bits per entry for the last partial digit).
    bits = out.buffer_bits() / (out.v.size * depth)
    assert bits == pytest.approx(np.log2(1 / gamma), rel=0.01)


def test_exact_network_computes_the_float_network():
    p, x0 = tanh_problem()
    x_f, _, _ = M.network_states(p, x0, 0 * x0, 1.0, 512, arithmetic="float")
    x_e, _, inv = M.network_states(p, x0, 0 * x0, 1.0, 512, arithmetic="exact")
    assert np.all(inv == 0.0)
    # Exact and float differ by the float rounding of each layer (1e-16 relative, 512 layers)
    # and the exact gamma's 2^-48 quantization: both far below 1e-12.
    assert np.max(np.abs(x_e - x_f)) < 1e-12


def test_float_inversion_error_grows_as_gamma_decreases():
    """Reported, not hidden: the float inverse divides by gamma at each layer, so rounding grows
    like gamma^-N. Printed values (run with -s) are in the closing note of the issue."""
    p, x0 = tanh_problem()
    residual = lambda n, x: M.field_numpy(0.0, x, p)
    depth = 60
    errors = []
    for gamma in (0.99, 0.9, 0.8, 0.7, 0.6, 0.5):
        with np.errstate(over="ignore", invalid="ignore"):
            errors.append(M.inversion_error(x0, 0 * x0, gamma, residual, depth))
        print(f"gamma = {gamma}: float inversion error after {depth} layers = {errors[-1]:.3g}")
    assert errors[0] < 1e-12  # gamma^-N = 1.8: a few ulps
    assert all(b > a for a, b in zip(errors, errors[1:], strict=False))
    assert errors[-1] > 1e3  # 2^60 amplification: the input is lost


@pytest.mark.slow  # JAX Jacobians compile; test_heavy_ball_layer_determinant_is_gamma_to_the_d stays default
def test_each_layer_scales_phase_space_volume_by_gamma_to_the_d():
    pytest.importorskip("jax")
    integrators.configure_jax()  # float64 and the persistent compilation cache
    import jax.numpy as jnp

    from dyn.momentum.backprop import layer_jacobian_logdet

    d = 5
    p, x0 = tanh_problem(d=d, runs=1)
    p = jnp.asarray(p)
    f = lambda x, t: M.field_jax(t, x, p)
    for gamma in (0.1, 0.5, 0.9, 1.0):
        logdet = layer_jacobian_logdet(f, gamma, 0.3, jnp.asarray(x0[0]), jnp.asarray(0.2 * x0[0]))
        # det of a 10 x 10 float64 Jacobian: rounding ~1e-15 relative
        assert logdet == pytest.approx(d * np.log(gamma), abs=1e-12)


def test_heavy_ball_layer_determinant_is_gamma_to_the_d():
    rng = np.random.default_rng(0)
    d, gamma, eta = 4, 0.7, 0.5
    A, xstar = M.random_quadratic(rng, d, 10.0)
    # the Jacobian of the project's layer, column by column (the layer is affine in (x - x*, v))
    basis = np.eye(2 * d)
    x1, v1 = M.heavy_ball_layer(xstar + basis[:, :d], basis[:, d:], A, xstar, gamma, eta)
    J = np.concatenate([x1 - xstar, v1], axis=1).T
    np.testing.assert_allclose(J, M.layer_matrix(A, gamma, eta), atol=1e-15)
    assert np.linalg.det(J) == pytest.approx(gamma**d, rel=1e-12)  # 8 x 8 det in float64
    # the rate heavy_ball converges at is the spectral radius of that matrix
    # (measured over layers 40..80: past the transient, before rounding, rho^80 ~ 1e-6)
    dist = M.heavy_ball(xstar + rng.standard_normal((1, d)), A, xstar, gamma, eta, 80)[0]
    rate = (dist[80] / dist[40]) ** (1 / 40)
    assert rate == pytest.approx(M.contraction_rate(A, gamma, eta), rel=0.02)


# --- depth limits -----------------------------------------------------------------------------
def test_network_converges_to_second_order_ode_at_rate_one():
    p, x0 = tanh_problem(eps=0.5)
    ref = M.solve_second_order(p, x0, 0 * x0, [0.0, 1.0], "numba", "rk4", dt=1e-4)[:, -1, 0]
    depths = [64, 128, 256, 512, 1024]
    errors = [np.max(np.abs(M.network_states(p, x0, 0 * x0, 1.0, n)[0] - ref)) for n in depths]
    # order-1 scheme: the fitted slope is -1 up to the O(1/N^2) correction (measured -0.99)
    assert slope(depths, errors) == pytest.approx(-1.0, abs=0.05)


def test_fixed_gamma_tends_to_first_order_ode():
    p, x0 = tanh_problem(eps=0.5)
    ref1 = M.solve_first_order(p, x0, [0.0, 1.0], "numba", "rk4", dt=1e-4)[:, -1]
    ref2 = M.solve_second_order(p, x0, 0 * x0, [0.0, 1.0], "numba", "rk4", dt=1e-4)[:, -1, 0]
    depths = [128, 256, 512, 1024, 2048]
    to1, to2 = [], []
    for n in depths:
        x = M.network_states(p, x0, 0 * x0, 1.0, n, gamma=0.5)[0]
        to1.append(np.max(np.abs(x - ref1)))
        to2.append(np.max(np.abs(x - ref2)))
    # v relaxes to h g in O(1) layers: an O(1/N) scheme of x' = g (measured slope -1.00)
    assert slope(depths, to1) == pytest.approx(-1.0, abs=0.05)
    # ... and not the second-order ODE (eps = 0.5 is far from 0): that distance stays O(1)
    assert min(to2) > 10 * max(to1[-1], 1e-3) and slope(depths, to2) > -0.1


@pytest.mark.slow  # JAX compiles; the momentum drift twins (test_models) and diffrax's own checks stay default
def test_ode_backends_agree():
    pytest.importorskip("diffrax")
    p, x0 = tanh_problem(eps=0.2)
    a = M.solve_second_order(p, x0, 0.3 * x0, [0.0, 0.5, 1.0], "numba", "rk4", dt=1e-4)
    b = M.solve_second_order(p, x0, 0.3 * x0, [0.0, 0.5, 1.0], "diffrax", "tsit5", rtol=1e-11, atol=1e-12)
    # RK4 at dt = 1e-4 with stiffness 1/eps = 5: ~1e-14; tsit5 at rtol 1e-11: ~1e-11
    np.testing.assert_allclose(a, b, atol=1e-9)


# --- linear representability ------------------------------------------------------------------
A_GRID = np.linspace(-30.0, 3.0, 331)
EPS_GRID = (0.03, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


@pytest.mark.parametrize("eps", (0.05, 0.5, 2.0))
def test_closed_form_matches_simulation(eps):
    a = np.concatenate([np.linspace(-25.0, 3.0, 57), M.discriminant_threshold(eps) + np.array([-1e-7, 0.0, 1e-7])])
    sim = M.psi_simulated(a, eps, 1.0, "numba", "rk4", dt=1e-3)
    # RK4 global error ~ (dt |r|)^4 with |r| <= 1/eps = 20: < 1e-8 (measured 2e-11)
    np.testing.assert_allclose(sim, M.psi(a, eps), atol=1e-8)


def test_closed_form_is_continuous_through_the_double_root():
    for eps in EPS_GRID:
        a0 = float(M.discriminant_threshold(eps))
        vals = M.psi(a0 + np.array([-1e-9, 0.0, 1e-9]), eps)
        # psi is smooth in a; a 1e-9 step moves it by ~1e-9 |dpsi/da|
        assert np.ptp(vals) < 1e-7
        assert vals[1] == pytest.approx(np.exp(-0.5 / eps) * (1 + 0.5 / eps), rel=1e-14)


def test_negative_values_only_below_discriminant_threshold():
    for eps in EPS_GRID:
        values = M.psi(A_GRID, eps)
        disc = float(M.discriminant_threshold(eps))
        first = M.negativity_threshold(eps)
        assert np.all(values[A_GRID >= disc] > 0)  # real roots: psi > 0 (analytic, see linear.py)
        assert np.all(values[A_GRID > first] > 0)  # in fact psi > 0 down to the first zero a*
        assert first < disc  # ... which lies strictly below -1/(4 eps)
        assert M.psi(first, eps) == pytest.approx(0.0, abs=1e-12)
        assert M.psi(first - 1e-6, eps) < 0 < M.psi(first + 1e-6, eps)
        if first > A_GRID[0]:
            assert np.any(values < 0)  # negative eigenvalues are reached
    # first-order flows x' = a x reach only e^a > 0 (solved by the integrators here)
    for a in A_GRID[::30]:
        p = M.pack_field("affine", 1, eps=1.0, W1=[[a]])
        x1 = M.solve_first_order(p, np.ones((1, 1)), [0.0, 1.0], "numba", "rk4", dt=1e-3)[0, -1, 0]
        # RK4 at h |a| <= 0.03: relative error ~ N (h a)^5 / 120 <= 2e-7
        assert x1 > 0 and x1 == pytest.approx(np.exp(a), rel=1e-6)


def test_simulated_signs_agree_with_closed_form():
    for eps in (0.1, 1.0):
        a = np.linspace(-20.0, 1.0, 43)
        sim = M.psi_simulated(a, eps, 1.0, "numba", "rk4", dt=1e-3)
        closed = M.psi(a, eps)
        clear = np.abs(closed) > 1e-6  # far from a zero, beyond the ODE error
        assert np.array_equal(np.sign(sim[clear]), np.sign(closed[clear]))
        assert np.all(sim[a >= M.discriminant_threshold(eps)] > 0)


def test_network_reaches_psi_at_rate_one():
    a = np.array([-12.0, -3.0, 1.0])
    errors = [np.max(np.abs(M.psi_network(a, 0.5, n) - M.psi(a, 0.5))) for n in (128, 256, 512, 1024)]
    assert slope([128, 256, 512, 1024], errors) == pytest.approx(-1.0, abs=0.05)


# --- learning to optimize ---------------------------------------------------------------------
def test_heavy_ball_converges_revnet_does_not():
    rng = np.random.default_rng(3)
    A, xstar = M.random_quadratic(rng, 8, 50.0)
    x0 = xstar + rng.standard_normal((5, 8))
    hb = M.heavy_ball(x0, A, xstar, 0.8, 1.0, 400)
    rev = M.heavy_ball(x0, A, xstar, 1.0, 1.0, 400)
    # rate sqrt(gamma) ~ 0.9 per layer after transients: < 1e-10 after 400 layers
    assert np.all(hb[:, -1] < 1e-10 * hb[:, 0])
    # volume preserving: eigenvalues on the unit circle, no contraction; the distance keeps
    # oscillating at the scale of the start (bounded below by the smallest mode's share)
    assert M.contraction_rate(A, 1.0, 1.0) == pytest.approx(1.0, abs=1e-9)
    assert np.all(rev[:, -100:].max(axis=1) > 0.1 * rev[:, 0])
    assert M.contraction_rate(A, 0.8, 1.0) < 1.0


# --- memory-free backprop ---------------------------------------------------------------------
@pytest.mark.parametrize("shared", (True, pytest.param(False, marks=pytest.mark.slow)))  # JAX
def test_memory_free_backprop_matches_ordinary_backprop(shared):
    jax = pytest.importorskip("jax")
    integrators.configure_jax()  # float64 and the persistent compilation cache
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    d, hidden, batch, depth, gamma = 6, 4, 5, 40, 0.9

    def f(x, th):
        return jnp.tanh(x @ th[0] + th[1]) @ th[2]

    th = [jnp.asarray(rng.standard_normal(s) / 2) for s in ((d, hidden), (hidden,), (hidden, d))]
    if not shared:
        th = [jnp.stack([t * (1 + 0.01 * n) for n in range(depth)]) for t in th]
    x0 = jnp.asarray(rng.standard_normal((batch, d)))
    v0 = jnp.asarray(0.1 * rng.standard_normal((batch, d)))

    def loss(net):
        return lambda th, x, v: jnp.sum(jnp.sin(net(th, x, v)[0])) + jnp.sum(net(th, x, v)[1] ** 2)

    grads = [
        jax.grad(loss(M.momentum_net(f, gamma, depth, shared=shared, memory_free=mf)), argnums=(0, 1, 2))(th, x0, v0)
        for mf in (True, False)
    ]
    # The rebuilt activations carry float64 rounding amplified by gamma^-40 ~ 70 and by the
    # chain of VJPs: entries agree to ~1e-11 of the largest gradient of their leaf (measured
    # 6e-13 relative to it), entries near zero included.
    for a, b in zip(jax.tree_util.tree_leaves(grads[0]), jax.tree_util.tree_leaves(grads[1]), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * float(jnp.max(jnp.abs(b))))


@pytest.mark.slow  # JAX compiles; numba's exact inversion stays in the default tier
def test_exact_jax_network_rebuilds_its_input_bit_for_bit():
    """The JAX exact mode: gamma = 0.9 and 2000 layers, where a float inverse amplifies rounding by
    0.9^-2000 = 1e91; the integers (and an empty buffer) come back exactly."""
    pytest.importorskip("jax")
    integrators.configure_jax()  # float64 and the persistent compilation cache
    import jax.numpy as jnp

    from dyn.momentum.backprop import exact_roundtrip

    rng = np.random.default_rng(2)
    th = jnp.asarray(rng.standard_normal((4, 4)) / 2)
    f = lambda x, W: jnp.tanh(x @ W)
    x0 = jnp.asarray(rng.standard_normal((3, 4)), jnp.float32)
    (x, v), (xr, vr, buf), _ = exact_roundtrip(f, 0.9, 2000, th, x0, 0.1 * x0)
    assert bool((xr == x).all()) and bool((vr == v).all()) and bool((buf == 0).all())


@pytest.mark.slow  # JAX compiles; numba's exact inversion stays in the default tier
def test_exact_jax_backprop_matches_ordinary_backprop():
    jax = pytest.importorskip("jax")
    integrators.configure_jax()  # float64 and the persistent compilation cache
    import jax.numpy as jnp

    rng = np.random.default_rng(4)
    th = (jnp.asarray(rng.standard_normal((6, 3)) / 2), jnp.asarray(rng.standard_normal((3, 6)) / 2))
    f = lambda x, t: jnp.tanh(x @ t[0]) @ t[1]
    x0 = jnp.asarray(rng.standard_normal((5, 6)))
    grads = []
    for kw in ({"exact": True}, {"memory_free": False}):
        net = M.momentum_net(f, 0.6, 60, **kw)
        grads.append(jax.grad(lambda t: jnp.sum(jnp.sin(net(t, x0, 0 * x0)[0])))(th))  # noqa: B023 jax.grad calls it at once
    # The exact network uses gamma = num/2^20 (|dgamma| <= 2^-21, i.e. 1.2e-6 of 1 - gamma) and
    # 2^-52 fixed point; 0.6^-60 = 2e13 would wreck a float inverse, not this one.
    for a, b in zip(grads[0], grads[1], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * float(jnp.max(jnp.abs(b))))
