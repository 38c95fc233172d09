"""The attention flow through the generic integrators: numba vs diffrax, sphere invariance, and the
post-norm network's convergence to the flow as depth grows."""

import numpy as np
import pytest

import integrators
from dyn import attention as att

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)


def _problem(beta, d, norm="SA", **mats):
    p = att.pack_params(beta, d, norm, **mats)
    return att.flow_problem(p)


@pytest.mark.parametrize("norm", ["SA", "USA"])
def test_numba_rk4_matches_diffrax_tsit5(norm):
    rng = np.random.default_rng(10)
    x0 = att.uniform_sphere(rng, 3, 8, 3)
    ts = np.linspace(0.0, 2.0, 5)
    prob = _problem(1.5, 3, norm)
    a = integrators.get("numba", "rk4", dt=1e-3).solve(prob, x0, ts).states
    b = integrators.get("diffrax", "tsit5", rtol=1e-11, atol=1e-12).solve(prob, x0, ts).states
    assert a.shape == b.shape == (3, 5, 8, 3)
    np.testing.assert_allclose(a, b, atol=1e-9)
    for s in (a, b):
        assert np.abs(np.linalg.norm(s, axis=-1) - 1).max() < 1e-12


# JAX compiles; general Q, K, V through JAX stay default in test_per_head_matrices_from_a_scenario_file
@pytest.mark.slow
def test_general_qkv_backends_agree():
    rng = np.random.default_rng(11)
    d = 4
    Q, K, V = (np.eye(d) + 0.3 * rng.standard_normal((d, d)) for _ in range(3))
    x0 = att.uniform_sphere(rng, 2, 6, d)
    ts = np.linspace(0.0, 1.0, 3)
    prob = _problem(1.0, d, Q=Q, K=K, V=V)
    a = integrators.get("numba", "rk4", dt=1e-3).solve(prob, x0, ts).states
    b = integrators.get("diffrax", "tsit5", rtol=1e-11, atol=1e-12).solve(prob, x0, ts).states
    np.testing.assert_allclose(a, b, atol=1e-9)


def test_postnorm_network_converges_to_flow_at_order_one():
    rng = np.random.default_rng(12)
    x0 = att.uniform_sphere(rng, 4, 10, 3)
    T, beta = 2.0, 1.0
    ref = integrators.get("numba", "rk4", dt=1e-3).solve(_problem(beta, 3), x0, np.array([0.0, T])).states[:, -1]
    depths = np.array([16, 32, 64, 128, 256])
    err = [np.abs(att.postnorm_layers(x0, L, T, beta)[:, -1] - ref).max() for L in depths]
    slope = np.polyfit(np.log(depths), np.log(err), 1)[0]
    assert -1.15 < slope < -0.85, (slope, err)
