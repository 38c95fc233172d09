r"""The attention drift on the circle in O(nK) instead of O(n^2) (Q = K = V = I, d = 2), and the
noisy SDE record that uses it.

Write token i as w_i = e^{i theta_i} (the unit complex number of row x_i) and the moments
S_m = (1/n) sum_j w_j^m (S_{-m} = conj S_m, S_0 = 1). By Jacobi-Anger (:mod:`dyn.numerics.bessel`),
e^{beta cos(theta_i - theta_j)} = sum_k I_k(beta) w_i^k conj(w_j)^k, so the attention sums are

    M_i = (1/n) sum_j e^{beta <x_i,x_j>} x_j = c_0 S_1 + sum_{l=1}^{K} c_l [ w_i^l conj(S_{l-1})
                                                                          + conj(w_i)^l S_{l+1} ]
    N_i = (1/n) sum_j e^{beta <x_i,x_j>}      = c_0 + 2 sum_{l=1}^{K} c_l Re( w_i^l conj(S_l) )

(complex numbers as vectors of R^2) up to the terms |k| > K, with c_k = I_k(beta): the moments
cost O(nK), the sums O(nK). The mean field is m_i = M_i (USA) or M_i / N_i (SA) and the drift
its tangent part P_{x_i} m_i = v_i (i w_i), v_i = Im(conj(w_i) m_i), minus the Ito correction
sigma^2/2 x_i of :mod:`.sde`.

**Truncation.** The dropped terms are bounded by T = sum_{|k|>K} |I_k(beta)| (|w| = |S_m| = 1 at
most), so |M_i - M_i^K| <= T and |N_i - N_i^K| <= T; K is the smallest order whose bound
(:func:`dyn.numerics.bessel.tail_bound`) keeps the drift within ``tol`` of the exact one (scaled by
e^{|beta|} for USA; for SA see :func:`dyn.noisy.params.fourier_tolerance`). K grows like
e|beta|/2 + log(1/tol): K = 18 at beta = 4, 26 at beta = 10 for tol = 1e-12.

The vector is :data:`dyn.noisy.params.FOURIER_LAYOUT`; the record ``noisy_fourier`` shares the
diffusion of ``noisy_attention``.
"""

from __future__ import annotations

import numpy as np

from integrators.core.geometry import SPHERE
from integrators.numba.abi import DRIFT_SIG, FASTMATH, NJIT
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import block
from .params import FOURIER_LAYOUT as LAYOUT, fourier_order_of, pack_fourier
from .sde import noise_shape, noisy_diffusion, noisy_diffusion_jax

SIGMA, USA = LAYOUT.index("sigma"), LAYOUT.index("usa")
COEF_AT = LAYOUT.block_at("coef")  # the coefficients c_0..c_K


def work_size(n: int, d: int, p) -> int:
    """Scratch floats: three complex n-vectors, one real n-vector, K + 2 complex moments."""
    return 7 * n + 2 * (fourier_order_of(p) + 2) + 2


@njit(DRIFT_SIG, **NJIT, fastmath=FASTMATH)
def fourier_drift(t, x, p, out, work):
    """out_i <- P_{x_i} m_i - sigma^2/2 x_i with m_i from the truncated Fourier series (module doc)."""
    n = x.shape[0]
    c = block(p, COEF_AT)
    K = c.shape[0] - 1
    usa = p[USA] != 0.0
    cw = work[: 6 * n].view(np.complex128)
    w = cw[:n]
    pw = cw[n : 2 * n]
    acc = cw[2 * n : 3 * n]
    den = work[6 * n : 7 * n]
    S = work[7 * n : 7 * n + 2 * (K + 2)].view(np.complex128)
    for j in range(n):
        r = 1.0 / np.sqrt(x[j, 0] * x[j, 0] + x[j, 1] * x[j, 1])
        w[j] = complex(x[j, 0] * r, x[j, 1] * r)
        pw[j] = 1.0
    inv_n = 1.0 / n
    for m in range(K + 2):  # S_m = mean_j w_j^m
        s = 0.0 + 0.0j
        for j in range(n):
            s += pw[j]
            pw[j] *= w[j]
        S[m] = s * inv_n
    c0 = c[0]
    for i in range(n):
        acc[i] = c0 * S[1]
        den[i] = c0
        pw[i] = 1.0
    for l in range(1, K + 1):
        a = c[l] * S[l - 1].conjugate()
        b = c[l] * S[l + 1]
        e = 2.0 * c[l] * S[l].conjugate()
        for i in range(n):
            q = pw[i] * w[i]
            pw[i] = q
            acc[i] += q * a + q.conjugate() * b
            den[i] += q.real * e.real - q.imag * e.imag
    half = 0.5 * p[SIGMA] * p[SIGMA]
    for i in range(n):
        m = acc[i] if usa else acc[i] / den[i]
        v = w[i].real * m.imag - w[i].imag * m.real
        out[i, 0] = -v * w[i].imag - half * x[i, 0]
        out[i, 1] = v * w[i].real - half * x[i, 1]


def fourier_drift_jax(t, x, p):
    """JAX twin of :func:`fourier_drift` (one member, K static from the length of p)."""
    import jax.numpy as jnp

    v = LAYOUT.unpack(p)
    c = v["coef"]
    K = c.shape[0] - 1
    theta = jnp.arctan2(x[:, 1], x[:, 0])
    powers = jnp.exp(1j * theta[:, None] * jnp.arange(K + 2))  # w^0 .. w^{K+1}, w = e^{i theta}
    w = powers[:, 1]
    S = powers.mean(axis=0)
    q = powers[:, 1 : K + 1]  # w^1 .. w^K
    M = c[0] * S[1] + q @ (c[1:] * jnp.conj(S[:K])) + jnp.conj(q) @ (c[1:] * S[2 : K + 2])
    N = c[0] + 2.0 * jnp.real(q @ (c[1:] * jnp.conj(S[1 : K + 1])))
    m = jnp.where(v["usa"] != 0.0, M, M / N)
    vel = jnp.real(w) * jnp.imag(m) - jnp.imag(w) * jnp.real(m)
    tangent = jnp.stack([-vel * jnp.imag(w), vel * jnp.real(w)], axis=1)
    return tangent - 0.5 * v["sigma"] ** 2 * x


def _example(rng):
    """A random member on the circle and vector (either normalization; beta and n from a few
    values, so that the JAX twin sees few shapes: each new one compiles for ~1.5 s)."""
    n = int(rng.choice([5, 23]))
    x = rng.standard_normal((n, 2))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, pack_fourier(float(rng.choice([-2.5, 0.7, 6.0])), rng.uniform(0, 2), n, str(rng.choice(["SA", "USA"])))


FOURIER = register(
    Dynamics(
        "noisy_fourier",
        LAYOUT,
        fourier_drift,
        fourier_drift_jax,
        SPHERE,
        example=_example,
        diffusion=noisy_diffusion,
        diffusion_jax=noisy_diffusion_jax,
        noise=noise_shape,
        work=work_size,
    )
)


def fourier_problem(p):
    """The :class:`integrators.Problem` of noisy attention on the circle with the O(nK) drift
    (vector of :func:`dyn.noisy.params.pack_fourier`)."""
    return FOURIER.problem(p)


def circle_velocity(x, beta: float, normalization: str = "USA", tol: float = 1e-12) -> np.ndarray:
    """The attention velocity P_{x_i} m_i (Q = K = V = I) of tokens on the circle, x of shape
    (n, 2) or (E, n, 2), by the O(nK) series, within ``tol`` of the exact one (times e^{|beta|}
    for USA)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.ndim not in (2, 3) or x.shape[-1] != 2 or x.shape[-2] < 1:
        raise ValueError(f"x must have shape (n, 2) or (E, n, 2), got {x.shape}")
    if not np.all(np.isfinite(x)) or np.any(np.hypot(x[..., 0], x[..., 1]) == 0):
        raise ValueError("x must be finite with non-zero rows")
    p = pack_fourier(beta, 0.0, x.shape[-2], normalization, tol)
    out = np.empty_like(x)
    work = np.empty(work_size(x.shape[-2], 2, p))
    for e in np.ndindex(x.shape[:-2]):
        fourier_drift(0.0, x[e], p, out[e], work)
    return out
