r"""The neural ODE of a ResNet with smooth weights, as a right-hand side for the integrators.

    dx/ds = f(x; theta(s)) = sigma(x W(s)^T) V(s)^T,     s in [0, 1]

(one input per row of the state ``x``, shape ``(B, d)``; see :mod:`.weights`). Flat parameters
``p`` read by both the numba drift and its JAX twin:

=====================  ===============================================
``p[0:4]``             d, M (width), K (modes), activation code
``p[4:4+KMd]``         A^W (K, M, d), row-major
``p[4+KMd:4+2KMd]``    A^V (K, d, M), row-major
=====================  ===============================================
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from integrators.numba_abi import DRIFT_SIG, NJIT

from .weights import ACTIVATIONS, WeightFunction

HEADER = 4
SQRT1_2 = 1.0 / math.sqrt(2.0)


def pack_params(wf: WeightFunction, activation: str) -> np.ndarray:
    """Flat ``p`` of the neural ODE (layout in the module doc)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    K, M, d = wf.AW.shape
    if wf.AV.shape != (K, d, M):
        raise ValueError(f"AV must have shape {(K, d, M)}, got {wf.AV.shape}")
    head = np.array([d, M, K, ACTIVATIONS[activation]], dtype=np.float64)
    return np.concatenate([head, wf.AW.ravel(), wf.AV.ravel()])


@njit(**NJIT)
def _sigma(z, code):
    if code == 0:
        return math.tanh(z)
    if code == 1:
        return z if z > 0.0 else 0.0
    return 0.5 * z * (1.0 + math.erf(z * SQRT1_2))


@njit(DRIFT_SIG, **NJIT)
def resnet_drift(t, x, p, out):
    """out <- sigma(x W(t)^T) V(t)^T with (W, V)(t) = sum_k A_k cos(pi k t)."""
    d, M, K, code = int(p[0]), int(p[1]), int(p[2]), int(p[3])
    size = K * M * d
    AW = p[HEADER:HEADER + size].reshape((K, M, d))
    AV = p[HEADER + size:HEADER + 2 * size].reshape((K, d, M))
    W = np.zeros((M, d))
    V = np.zeros((d, M))
    for k in range(K):
        c = math.cos(math.pi * k * t)
        for m in range(M):
            for j in range(d):
                W[m, j] += c * AW[k, m, j]
                V[j, m] += c * AV[k, j, m]
    h = np.empty(M)
    for i in range(x.shape[0]):
        for m in range(M):
            z = 0.0
            for j in range(d):
                z += W[m, j] * x[i, j]
            h[m] = _sigma(z, code)
        for j in range(d):
            acc = 0.0
            for m in range(M):
                acc += V[j, m] * h[m]
            out[i, j] = acc


def sigma_jax(name: str):
    """sigma in JAX, by name."""
    import jax
    import jax.numpy as jnp

    return {"tanh": jnp.tanh, "relu": jax.nn.relu,
            "gelu": lambda z: jax.nn.gelu(z, approximate=False)}[name]


@functools.cache
def resnet_drift_jax(modes: int, width: int, activation: str):
    """JAX twin of :func:`resnet_drift` for a given (K, M, activation): ``(t, x, p) -> dx``.

    The integrators trace ``p``, so the shapes and the activation cannot be read from it; they
    are fixed here, and the cache returns the same function for the same key (one compile).
    """
    import jax.numpy as jnp

    sigma = sigma_jax(activation)
    K, M = int(modes), int(width)

    def drift(t, x, p):
        d = x.shape[1]
        size = K * M * d
        AW = p[HEADER:HEADER + size].reshape(K, M, d)
        AV = p[HEADER + size:HEADER + 2 * size].reshape(K, d, M)
        c = jnp.cos(jnp.pi * jnp.arange(K) * t)
        return sigma(x @ jnp.tensordot(c, AW, axes=1).T) @ jnp.tensordot(c, AV, axes=1).T

    return drift


def problem(wf: WeightFunction, activation: str):
    """The neural ODE as an :class:`integrators.Problem` (Euclidean), both backends filled in."""
    import integrators

    K, M, _ = wf.AW.shape
    return integrators.Problem(resnet_drift, resnet_drift_jax(K, M, activation),
                               pack_params(wf, activation), integrators.EUCLIDEAN)


def solve(wf: WeightFunction, activation: str, x0, integrator) -> np.ndarray:
    """x(1) for inputs ``x0`` (B, d): the ODE solved by ``integrator`` over s in [0, 1]."""
    x0 = np.ascontiguousarray(x0, dtype=np.float64)
    states = integrator.solve(problem(wf, activation), x0[None], np.array([0.0, 1.0]))
    return states[0, -1]
