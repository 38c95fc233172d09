r"""Noisy attention on S^{d-1}: the attention flow plus an independent Brownian motion per token
(physics.md §1.3), as an Ito SDE record for the integrators (numba and JAX).

    dX_i = P_{X_i}( sum_j A_ij V X_j ) dt + sigma P_{X_i} o dB_i                      (Stratonovich)
         = [ P_{X_i}( sum_j A_ij V X_j ) - sigma^2 (d-1)/2 X_i ] dt + sigma P_{X_i} dB_i   (Ito)

with B_i independent standard Brownian motions in R^d: the Brownian control of one member is an
(n, d) array (row i drives token i). ``noisy_drift`` is the full Ito drift (the attention
velocity of :func:`dyn.attention.attention_drift`, read from the trailing ``attention`` block of
the vector, minus the radial correction); ``noisy_diffusion`` is out_i = sigma P_{x_i} dw_i.

**Scheme.** Euler-Maruyama with projection and retraction (:mod:`integrators.numba.sde`, and the
same scheme on diffrax), x' = R(x + h P_x f(x) + P_x g(x)[dW]): the projection removes the radial
part of the Ito drift and the retraction x -> x/|x| puts it back (for a tangent step eta,
|x + eta|^{-1} = 1 - |eta|^2/2 + O(eta^4) and E|sigma P dW_i|^2 = sigma^2 (d-1) h), so the scheme
converges to the Ito solution, strong order 1/2, weak order 1. Without the drift (V = 0) a step
is x' = (x + eta)/sqrt(1 + |eta|^2) with eta = sigma P_x dW isotropic in the tangent space, so
E[x' | x] = m_d(h) x and the scheme's law is exactly

    E<x_N, x_0> = m_d(h)^N,   m_d(h) = E (1 + sigma^2 h chi^2_{d-1})^{-1/2},
    log m_d(h) = -(d-1) sigma^2 h/2 + (d-1)(d+2) sigma^4 h^2/4 + O(h^3),

i.e. exp(-sigma^2 (d-1) T/2) (1 + (d-1)(d+2) sigma^4 h T/4 + O(h^2)) at T = N h: the generator
(sigma^2/2) Lap of Brownian motion on the sphere, with a first-order weak error. The tests check
the exact law and measure the order from the log-log slope of the error.
"""

from __future__ import annotations

import numpy as np

from integrators.core.geometry import SPHERE
from integrators.numba.abi import DIFFUSION_SIG, DRIFT_SIG, NJIT
from integrators.numba.arrays import copy2
from integrators.numba.jit import njit

from ..attention import FLOW, attention_drift, attention_drift_jax
from ..core.dynamics import Dynamics, register
from ..core.layout import block
from .params import LAYOUT, attention_part, pack

SIGMA, N, DIM = (LAYOUT.index(k) for k in ("sigma", "n", "d"))
ATTENTION_AT = LAYOUT.block_at("attention")  # the attention vector, read by the attention drift


def work_size(n: int, d: int, p) -> int:
    """Scratch floats of the drift (those of the attention flow) for n tokens of dimension d."""
    work = FLOW.work
    return int(work(n, d, attention_part(p))) if callable(work) else int(work)


@njit(DRIFT_SIG, **NJIT)
def noisy_drift(t, x, p, out, work):
    """out_i <- P_{x_i}(sum_j A_ij V x_j) - sigma^2 (d-1)/2 x_i  (the Ito drift)."""
    n, d = x.shape
    attention_drift(t, x, block(p, ATTENTION_AT), out, work)
    c = 0.5 * p[SIGMA] * p[SIGMA] * (d - 1)
    for i in range(n):
        for k in range(d):
            out[i, k] -= c * x[i, k]


_project = SPHERE.project  # v_i <- P_{x_i} v_i (numba)


@njit(DIFFUSION_SIG, **NJIT)
def noisy_diffusion(t, x, p, dw, out, work):
    """out_i <- sigma P_{x_i} dw_i: token i driven by row i of the (n, d) control."""
    copy2(out, dw)
    _project(x, out)  # the same arithmetic as sigma (dw_i - <x_i, dw_i>/|x_i|^2 x_i)
    sigma = p[SIGMA]
    n, d = x.shape
    for i in range(n):
        for k in range(d):
            out[i, k] *= sigma


# ---------------------------------------------------------------------------------- JAX twins


def noisy_drift_jax(t, x, p):
    """JAX twin of :func:`noisy_drift` (one member)."""
    v = LAYOUT.unpack(p)
    d = x.shape[-1]
    return attention_drift_jax(t, x, v["attention"]) - 0.5 * v["sigma"] ** 2 * (d - 1) * x


def noisy_diffusion_jax(t, x, p, dw):
    """JAX twin of :func:`noisy_diffusion`: sigma P_x dw, row by row."""
    return p[SIGMA] * SPHERE.project_jax(x, dw)


def noise_shape(p) -> tuple[int, int]:
    """The control of one member: one d-vector per token."""
    return int(p[N]), int(p[DIM])


def _example(rng):
    """A random member and vector (general Q, K, V, either normalization)."""
    n, d = int(rng.integers(2, 10)), int(rng.integers(2, 6))
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    Q, K, V = (np.eye(d) + 0.5 * rng.standard_normal((d, d)) for _ in range(3))
    return x, pack(rng.uniform(-3, 6), d, rng.uniform(0, 2), n, str(rng.choice(["SA", "USA"])), Q, K, V)


NOISY = register(
    Dynamics(
        "noisy_attention",
        LAYOUT,
        noisy_drift,
        noisy_drift_jax,
        SPHERE,
        example=_example,
        diffusion=noisy_diffusion,
        diffusion_jax=noisy_diffusion_jax,
        noise=noise_shape,
        work=work_size,
    )
)


def noisy_problem(p):
    """The :class:`integrators.Problem` of noisy attention with the direct drift (vector of
    :func:`dyn.noisy.params.pack`)."""
    return NOISY.problem(p)
