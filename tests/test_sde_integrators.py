"""The generic SDE integrators: random streams, Euler-Maruyama orders, backend agreement."""

import math

import numba
import numpy as np
import pytest
from scipy import stats

import integrators
from integrators.numba import sde_rng
from integrators.numba.abi import DIFFUSION_SIG, DRIFT_SIG, NJIT
from integrators.numba.jit import njit

MU, SIG = 0.5, 0.8  # geometric Brownian motion dX = MU X dt + SIG X dW


@njit(DRIFT_SIG, **NJIT)
def gbm_drift(t, x, p, out, work):
    out[0, 0] = p[0] * x[0, 0]


@njit(DIFFUSION_SIG, **NJIT)
def gbm_diffusion(t, x, p, dw, out, work):
    out[0, 0] = p[1] * x[0, 0] * dw[0, 0]


def gbm_drift_jax(t, x, p):
    return p[0] * x


def gbm_diffusion_jax(t, x, p, dw):
    return p[1] * x * dw[0, 0]


GBM = integrators.Problem(
    gbm_drift, gbm_drift_jax, [MU, SIG], diffusion=gbm_diffusion, diffusion_jax=gbm_diffusion_jax, noise_shape=(1, 1)
)


def test_streams_are_normal_and_reproducible():
    a = sde_rng.normals(sde_rng.member_streams(np.random.default_rng(3), 4), 50_000)
    b = sde_rng.normals(sde_rng.member_streams(np.random.default_rng(3), 4), 50_000)
    assert np.array_equal(a, b)
    for row in a:  # level 1e-4 per row: a failure means a broken generator, not bad luck
        assert stats.kstest(row, "norm").pvalue > 1e-4
    # members are distinct streams (correlation of two rows ~ N(0, 1/sqrt(50000)))
    assert abs(np.corrcoef(a[0], a[1])[0, 1]) < 5 / math.sqrt(50_000)


def test_sde_methods_registered():
    assert "euler_maruyama" in integrators.available()["numba"]
    assert "euler_maruyama" in integrators.available()["diffrax"]
    assert integrators.options("numba", "euler_maruyama") == {"dt": 1e-2, "refine": 1}
    with pytest.raises(ValueError, match="rng"):
        integrators.get("numba", "euler_maruyama").solve(GBM, np.ones((2, 1, 1)), [0.0, 1.0])
    with pytest.raises(ValueError, match="increments must have shape"):
        integrators.get("numba", "euler_maruyama", dt=0.5).solve(
            GBM, np.ones((2, 1, 1)), [0.0, 1.0], increments=np.zeros((2, 3, 1, 1))
        )


def test_euler_maruyama_strong_order_half_on_gbm():
    # Exact solution on the same path: X_T = exp((MU - SIG^2/2) T + SIG W_T). EM has strong
    # order 1/2 for multiplicative noise; fitted over h = 2^-2 .. 2^-7 with 2000 paths the
    # slope's Monte Carlo spread is ~0.03, so [0.4, 0.65] is a safe but discriminating band
    # (order 1 would fail it).
    rng = np.random.default_rng(11)
    E, fine = 2000, 2**7
    dw = integrators.brownian_increments(rng, E, [0.0, 1.0], 1.0 / fine, (1, 1))
    exact = np.exp((MU - SIG**2 / 2) + SIG * dw.sum(axis=(1, 2, 3)))
    steps, errs = [], []
    for k in range(2, 8):
        n = 2**k
        em = integrators.get("numba", "euler_maruyama", dt=1.0 / n)
        x = em.solve(GBM, np.ones((E, 1, 1)), [0.0, 1.0], increments=integrators.coarsen(dw, fine // n)).states[
            :, -1, 0, 0
        ]
        steps.append(1.0 / n)
        errs.append(np.sqrt(np.mean((x - exact) ** 2)))
    order = np.polyfit(np.log(steps), np.log(errs), 1)[0]
    assert 0.4 < order < 0.65, (order, errs)


def test_euler_maruyama_reproducible_whatever_the_threads():
    em = integrators.get("numba", "euler_maruyama", dt=0.05)
    x0 = np.ones((64, 1, 1))
    runs, before = [], numba.get_num_threads()
    try:
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(threads)
            runs.append(em.solve(GBM, x0, [0.0, 0.5, 1.0], rng=np.random.default_rng(9)).states)
    finally:
        numba.set_num_threads(before)  # the session's setting (conftest: one per worker)
    assert np.array_equal(runs[0], runs[1])


@pytest.mark.slow  # JAX compiles; the noisy tokens' path-by-path agreement (test_noisy_sde) stays default
def test_numba_and_diffrax_agree_path_by_path_on_gbm():
    rng = np.random.default_rng(2)
    ts = np.array([0.0, 0.5, 1.0])
    dw = integrators.brownian_increments(rng, 16, ts, 0.1, (1, 1))
    x0 = 1.0 + rng.random((16, 1, 1))
    a = integrators.get("numba", "euler_maruyama", dt=0.1).solve(GBM, x0, ts, increments=dw).states
    b = integrators.get("diffrax", "euler_maruyama", dt=0.1).solve(GBM, x0, ts, increments=dw).states
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)  # same floats up to summation order
