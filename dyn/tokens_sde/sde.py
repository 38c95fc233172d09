r"""The Ito SDE of tokens on the sphere driven by one matrix Brownian motion (physics.md §1.2).

For unit tokens z_i (rows of an (n, d) array), softmax weights A_ij = e^{beta <z_i,z_j>} / Z_i,
m_i = sum_j A_ij z_j, and W a d x d Brownian motion with entries of variance sigma^2/d per unit
time, shared by all tokens of a member:

    dZ_i = P_{Z_i} dW m_i  -  c |m_i|^2 Z_i dt  +  vbar P_{Z_i} m_i dt,     c = sigma^2 (d-1) / (2d).

In the integrator's convention W = (sigma / sqrt d) B with B standard, so
``diffusion(t, z, p, dB) = (sigma / sqrt d) P_z (dB m)`` and ``drift`` is the full Ito drift
(normalization correction included; on the sphere the projected scheme drops its radial part
and the retraction restores it, see :mod:`integrators.sde_numba`).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from integrators.numba_abi import DIFFUSION_SIG, DRIFT_SIG, NJIT

from .params import IDX_BETA, IDX_DIM, IDX_SIGMA, IDX_VBAR

_MF_SIG = types.void(types.float64[:, ::1], types.float64, types.float64[:, ::1])


@njit(_MF_SIG, **NJIT)
def softmax_mean_field(z, beta, m):
    """m_i <- sum_j A_ij z_j with A = softmax_j(beta <z_i, z_j>) (rows shifted by their max)."""
    n, d = z.shape
    w = np.empty(n)
    for i in range(n):
        smax = -np.inf
        for j in range(n):
            s = 0.0
            for k in range(d):
                s += z[i, k] * z[j, k]
            w[j] = beta * s
            smax = max(smax, w[j])
        tot = 0.0
        for j in range(n):
            w[j] = math.exp(w[j] - smax)
            tot += w[j]
        for k in range(d):
            m[i, k] = 0.0
        for j in range(n):
            a = w[j] / tot
            for k in range(d):
                m[i, k] += a * z[j, k]


@njit(DRIFT_SIG, **NJIT)
def token_drift(t, z, p, out):
    """out_i <- vbar P_{z_i} m_i - sigma^2 (d-1)/(2d) |m_i|^2 z_i  (the Ito drift)."""
    n, d = z.shape
    sigma, vbar = p[IDX_SIGMA], p[IDX_VBAR]
    c = sigma * sigma * (p[IDX_DIM] - 1.0) / (2.0 * p[IDX_DIM])
    softmax_mean_field(z, p[IDX_BETA], out)
    for i in range(n):
        zm = 0.0
        zz = 0.0
        mm = 0.0
        for k in range(d):
            zm += z[i, k] * out[i, k]
            zz += z[i, k] * z[i, k]
            mm += out[i, k] * out[i, k]
        for k in range(d):
            out[i, k] = vbar * (out[i, k] - zm / zz * z[i, k]) - c * mm * z[i, k]


@njit(DIFFUSION_SIG, **NJIT)
def token_diffusion(t, z, p, dw, out):
    """out_i <- (sigma / sqrt d) P_{z_i} (dw m_i): the common matrix noise applied to every token."""
    n, d = z.shape
    scale = p[IDX_SIGMA] / math.sqrt(p[IDX_DIM])
    m = np.empty((n, d))
    softmax_mean_field(z, p[IDX_BETA], m)
    for i in range(n):
        for k in range(d):
            acc = 0.0
            for l in range(d):
                acc += dw[k, l] * m[i, l]
            out[i, k] = scale * acc
        zv = 0.0
        zz = 0.0
        for k in range(d):
            zv += z[i, k] * out[i, k]
            zz += z[i, k] * z[i, k]
        for k in range(d):
            out[i, k] -= zv / zz * z[i, k]


# ---------------------------------------------------------------------------------- JAX twins

def softmax_mean_field_jax(z, beta):
    import jax

    return jax.nn.softmax(beta * (z @ z.T), axis=-1) @ z


def _project_jax(z, v):
    return v - (z * v).sum(-1, keepdims=True) / (z * z).sum(-1, keepdims=True) * z


def token_drift_jax(t, z, p):
    """JAX twin of :func:`token_drift` (one member)."""
    m = softmax_mean_field_jax(z, p[IDX_BETA])
    c = p[IDX_SIGMA] ** 2 * (p[IDX_DIM] - 1.0) / (2.0 * p[IDX_DIM])
    return p[IDX_VBAR] * _project_jax(z, m) - c * (m * m).sum(-1, keepdims=True) * z


def token_diffusion_jax(t, z, p, dw):
    """JAX twin of :func:`token_diffusion`: (sigma / sqrt d) P_z (dw m)."""
    import jax.numpy as jnp

    m = softmax_mean_field_jax(z, p[IDX_BETA])
    return _project_jax(z, p[IDX_SIGMA] / jnp.sqrt(p[IDX_DIM]) * (m @ dw.T))


def problem(p):
    """The :class:`integrators.SDEProblem` of this SDE on the sphere (noise: one (d, d) matrix)."""
    import integrators
    from integrators.geometry import SPHERE

    d = int(p[IDX_DIM])
    return integrators.SDEProblem(token_drift, token_diffusion, token_drift_jax,
                                  token_diffusion_jax, (d, d), p, SPHERE)
