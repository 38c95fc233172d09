"""The O(nK) attention drift on the circle against the direct O(n^2) drift of dyn.attention, and
the observables computed by Fourier series against their pairwise definitions."""

import math

import numpy as np
import pytest

from dyn import noisy
from dyn.attention import FLOW, attention_drift, pack_params


def _direct(x, beta, normalization):
    p = pack_params(beta, 2, normalization)
    out = np.empty_like(x)
    attention_drift(0.0, x, p, out, np.empty(FLOW.work(*x.shape, p)))
    return out


def _configurations(rng, n):
    """Uniform tokens, and one tight and one loose cluster (where SA's normalizer is smallest
    for tokens far from both, and USA's drift largest)."""
    x = noisy.uniform_tokens(rng, 1, n, 2)[0]
    y = x.copy()
    y[: n // 2] = [1.0, 0.0] + 1e-3 * rng.standard_normal((n // 2, 2))
    y[n // 2 : 3 * n // 4] = [0.0, 1.0] + 0.2 * rng.standard_normal((n // 4, 2))
    return x, y / np.linalg.norm(y, axis=1, keepdims=True)


@pytest.mark.parametrize("normalization", ["SA", "USA"])
@pytest.mark.parametrize("beta", [-2.0, 0.0, 0.5, 3.0, 8.0, 20.0])
def test_fast_drift_agrees_with_the_direct_drift(normalization, beta):
    # |fast - direct| <= 1e-10 in the drift's units: e^{|beta|} for USA (its kernel's maximum;
    # absolute 1e-10 for |beta| <= 3), 1 for SA (|m_i| <= 1)
    rng = np.random.default_rng(int(10 * abs(beta)) + len(normalization))
    scale = math.exp(abs(beta)) if normalization == "USA" else 1.0
    for x in _configurations(rng, 300):
        fast = noisy.circle_velocity(x, beta, normalization, tol=1e-12)
        assert np.abs(fast - _direct(x, beta, normalization)).max() <= 1e-10 * scale


def test_the_tolerance_is_what_is_delivered():
    # with a loose tolerance the truncation is visible (the test can fail) and within the bound
    rng = np.random.default_rng(1)
    for normalization, beta in (("USA", 4.0), ("SA", 6.0)):
        scale = math.exp(beta) if normalization == "USA" else 1.0
        for x in _configurations(rng, 200):
            exact = _direct(x, beta, normalization)
            errs = [
                np.abs(noisy.circle_velocity(x, beta, normalization, tol) - exact).max() / scale for tol in (1e-3, 1e-6)
            ]
            assert errs[0] <= 1e-3 and errs[1] <= 1e-6
        K = [
            noisy.fourier_order_of(noisy.pack_fourier(beta, 0.0, 200, normalization, tol))
            for tol in (1e-3, 1e-6, 1e-12)
        ]
        assert K[0] < K[1] < K[2]


def test_fast_drift_costs_order_n_K():
    # the drift's cost is linear in n at fixed K (no n x n work): the scratch it asks for is
    # O(n + K); timing belongs to benchmarks/noisy_attention.py
    p = noisy.pack_fourier(4.0, 1.0, 10**5, "USA")
    assert noisy.FOURIER.problem(p).work_size(10**5, 2) < 10 * 10**5


def test_fast_drift_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        noisy.circle_velocity(np.ones((4, 3)), 1.0)
    with pytest.raises(ValueError, match="normalization"):
        noisy.pack_fourier(1.0, 1.0, 4, "XX")
    with pytest.raises(ValueError, match="tol"):
        noisy.pack_fourier(1.0, 1.0, 4, "SA", tol=0.0)


def test_observables_against_their_definitions():
    rng = np.random.default_rng(2)
    x = noisy.uniform_tokens(rng, 6, 40, 2)
    x[:3, :20] = x[:3, :1] + 0.05 * rng.standard_normal((3, 20, 2))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    theta = np.arctan2(x[..., 1], x[..., 0])
    modes = noisy.circle_modes(x, 6)
    for k in range(1, 7):
        np.testing.assert_allclose(modes[..., k - 1], np.abs(np.exp(1j * k * theta).mean(-1)), atol=1e-14)
    np.testing.assert_allclose(noisy.order_parameter(x), modes[..., 0], atol=1e-14)
    for delta in (1e-3, 0.01, 0.3):
        np.testing.assert_array_equal(noisy.circle_clusters(x, delta), noisy.clusters(x, delta))
    for beta in (-1.0, 0.7, 6.0):
        G = x @ np.swapaxes(x, -1, -2)
        want = np.exp(beta * G).mean(axis=(-1, -2)) / (2 * beta)
        np.testing.assert_allclose(noisy.interaction_energy(x, beta), want, rtol=1e-11)
        x3 = noisy.uniform_tokens(rng, 2, 9, 3)
        G3 = x3 @ np.swapaxes(x3, -1, -2)
        np.testing.assert_allclose(
            noisy.interaction_energy(x3, beta), np.exp(beta * G3).mean(axis=(-1, -2)) / (2 * beta), rtol=1e-13
        )


def test_uniform_order_parameter_is_of_order_n_to_the_minus_half():
    # i.i.d. uniform tokens: E r^2 = 1/n exactly; 4 standard errors
    rng = np.random.default_rng(3)
    for n, d in ((64, 2), (256, 2), (100, 3)):
        r2 = noisy.order_parameter(noisy.uniform_tokens(rng, 4000, n, d)) ** 2
        assert abs(r2.mean() * n - 1) < 4 * r2.std() * n / math.sqrt(r2.size)


def test_perturbed_law_has_the_requested_moment():
    # stratified sampling of (1 + 2a cos k theta)/(2 pi): moment a to O(n^{-3/2}), a distribution
    # function check of the pooled angles by Kolmogorov-Smirnov (level 1e-3)
    from scipy import stats

    rng = np.random.default_rng(4)
    for k, a in ((1, 0.2), (3, 0.45), (6, -0.1)):
        x = noisy.perturbed_circle(rng, 50, 500, k, a)
        S = noisy.circle_moments(x, k)[..., k - 1]
        # one uniform draw per stratum of width 2 pi/n: sd of S_k at most k (2 pi/n)/sqrt(12 n);
        # the largest of 50 runs within 5 of those
        assert np.abs(S - a).max() < 5 * k * 2 * math.pi / math.sqrt(12) / 500**1.5
        theta = np.mod(np.arctan2(x[..., 1], x[..., 0]), 2 * math.pi).ravel()

        def cdf(t, a=a, k=k):
            return t / (2 * math.pi) + a * np.sin(k * t) / (math.pi * k)

        assert stats.kstest(theta[::17], cdf).pvalue > 1e-3
