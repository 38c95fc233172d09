r"""Sinkformer particle flows: the right-hand side (numba and JAX) and the discrete layers.

For tokens x_i in R^d (rows of ``x``, shape (n, d)), with K = softmax or Sinkhorn of the scores
(:mod:`.sinkhorn`, layout of ``p`` in :mod:`.params`)::

    dx_i/dt = sum_j K_ij W_V x_j            (or W_V (x_j - x_i) with ``relative`` values)

computed as ``K [X W_V^T | 1]`` by one GEMM (the last column gives the row sums for the relative
form). The discrete Sinkformer of depth L is the residual map x <- x + (T/L) v(x), L times.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange, types

import integrators
from integrators.numba_abi import DRIFT_SIG, NJIT, NJIT_PARALLEL

from .params import (HEADER, IDX_DIM, IDX_ITERS, IDX_RELATIVE, IDX_SCORES, IDX_SYMMETRIC,
                     IDX_TAU, IDX_TOL, param_size)
from .sinkhorn import FASTMATH, sinkhorn_kernel, symmetric_kernel

BLOCK = 64  # tile of the in-place symmetrization (keeps both tiles in L1/L2)
SMALL_D = 16  # up to this token dimension, scores and K Y are plain loops instead of BLAS

_F2 = types.float64[:, ::1]


@njit(types.void(_F2), **NJIT)
def _symmetrize(S):
    """S <- (S + S^T) / 2 tile by tile (GEMM results are symmetric only up to rounding)."""
    n = S.shape[0]
    for bi in range(0, n, BLOCK):
        for bj in range(bi, n, BLOCK):
            for i in range(bi, min(bi + BLOCK, n)):
                for j in range(max(bj, i + 1), min(bj + BLOCK, n)):
                    a = 0.5 * (S[i, j] + S[j, i])
                    S[i, j] = a
                    S[j, i] = a


@njit(types.void(_F2, types.float64[::1], _F2), **NJIT, fastmath=FASTMATH)
def scores_kernel(x, p, S):
    """S <- x W x^T (dot) or -|x_i - x_j|^2 / (2 tau) (sqdist).

    Plain loops for small d: a BLAS call with inner dimension d ~ 2 is memory-bound anyway, and a
    threaded BLAS on a shared machine costs more than it brings. sqdist is exactly symmetric as
    computed ((a - b)^2 = (b - a)^2 in IEEE); dot is symmetrized when W is symmetric.
    """
    n, d = x.shape
    if p[IDX_SCORES] != 0.0:
        c = -0.5 / p[IDX_TAU]
        for i in range(n):
            for j in range(n):
                acc = 0.0
                for k in range(d):
                    diff = x[i, k] - x[j, k]
                    acc += diff * diff
                S[i, j] = c * acc
        return
    W = p[HEADER:HEADER + d * d].reshape((d, d))
    if d > SMALL_D:
        np.dot(np.dot(x, W), x.T, S)
    else:
        xq = np.zeros((n, d))
        for i in range(n):
            for k in range(d):
                for l in range(d):
                    xq[i, l] += x[i, k] * W[k, l]
        for i in range(n):
            for j in range(n):
                acc = 0.0
                for k in range(d):
                    acc += xq[i, k] * x[j, k]
                S[i, j] = acc
    if p[IDX_SYMMETRIC] != 0.0:
        _symmetrize(S)


@njit(types.void(_F2, types.boolean, _F2, _F2), **NJIT, fastmath=FASTMATH)
def _apply(P, transposed, Y, Z):
    """Z <- K Y with K = P, or K = P^T when ``transposed`` (loops: Y is a skinny (n, d+1))."""
    n, m = Y.shape
    Z[:] = 0.0
    if transposed:
        for j in range(n):  # Z += outer(P[j], Y[j]): an axpy over i per column of Y
            row = P[j]
            for k in range(m):
                y = Y[j, k]
                for i in range(n):
                    Z[i, k] += row[i] * y
    else:
        YT = np.ascontiguousarray(Y.T)
        for i in range(n):
            row = P[i]
            for k in range(m):
                yk = YT[k]
                acc = 0.0
                for j in range(n):
                    acc += row[j] * yk[j]
                Z[i, k] = acc


@njit(types.void(_F2, types.float64[::1], _F2), **NJIT)
def attention_kernel(x, p, out):
    """out <- v(x) (the body of the drift; see the module doc)."""
    n, d = x.shape
    S = np.empty((n, n))
    scores_kernel(x, p, S)
    iters = int(p[IDX_ITERS])
    tol = p[IDX_TOL]
    f = np.empty(n)
    g = np.empty(n)
    P = np.empty((n, n))
    errors = np.empty(0)
    symmetric = p[IDX_SYMMETRIC] != 0.0
    transposed = 0
    if tol > 0.0 and symmetric:
        symmetric_kernel(S, iters, tol, f, P, errors)
    else:
        ST = S if symmetric else np.ascontiguousarray(S.T)
        transposed = sinkhorn_kernel(S, ST, iters, tol, f, g, P, errors)[1]
    WV = p[HEADER + d * d:HEADER + 2 * d * d].reshape((d, d))
    Y = np.empty((n, d + 1))
    for i in range(n):
        for k in range(d):
            acc = 0.0
            for l in range(d):
                acc += WV[k, l] * x[i, l]
            Y[i, k] = acc
    Y[:, d] = 1.0
    Z = np.empty((n, d + 1))
    if d > SMALL_D:
        # BLAS needs contiguous operands (a transposed view would fall back to a slow loop)
        np.dot(np.ascontiguousarray(P.T) if transposed else P, Y, Z)
    else:
        _apply(P, transposed != 0, Y, Z)
    relative = p[IDX_RELATIVE] != 0.0
    for i in range(n):
        r = Z[i, d] if relative else 0.0
        for k in range(d):
            out[i, k] = Z[i, k] - r * Y[i, k]


@njit(DRIFT_SIG, **NJIT)
def sinkformer_drift(t, x, p, out):
    """out <- dx_i/dt = sum_j K_ij W_V x_j (or W_V (x_j - x_i)): the numba ABI drift."""
    attention_kernel(x, p, out)


_LAYERS_SIG = types.void(types.float64[:, :, ::1], types.int64, types.float64,
                         types.float64[::1], types.int64[::1], types.float64[:, :, :, ::1])


@njit(_LAYERS_SIG, **NJIT_PARALLEL)
def _layers_kernel(x0, depth, h, p, save, states):
    n_members, n, d = x0.shape
    for e in prange(n_members):
        x = x0[e].copy()
        v = np.empty((n, d))
        s = 0
        while s < save.shape[0] and save[s] == 0:
            states[e, s] = x
            s += 1
        for layer in range(1, depth + 1):
            attention_kernel(x, p, v)
            for i in range(n):
                for k in range(d):
                    x[i, k] += h * v[i, k]
            while s < save.shape[0] and save[s] == layer:
                states[e, s] = x
                s += 1


# ---------------------------------------------------------------------------------------------
# JAX twin (one member, same flat p)

def sinkformer_drift_jax(t, x, p):
    """dx_i/dt for one member (n, d): the JAX twin of :func:`sinkformer_drift`."""
    import jax.numpy as jnp

    from .sinkhorn_jax import sinkhorn_jax

    n, d = x.shape
    W = p[HEADER:HEADER + d * d].reshape(d, d)
    WV = p[HEADER + d * d:HEADER + 2 * d * d].reshape(d, d)
    sq = jnp.sum(x * x, axis=1)
    S_sq = -(sq[:, None] + sq[None, :] - 2.0 * x @ x.T) / (2.0 * p[IDX_TAU])
    S = jnp.where(p[IDX_SCORES] != 0.0, S_sq, (x @ W) @ x.T)
    S = jnp.where(p[IDX_SYMMETRIC] != 0.0, 0.5 * (S + S.T), S)
    K = sinkhorn_jax(S, p[IDX_ITERS], p[IDX_TOL], p[IDX_SYMMETRIC])
    Y = x @ WV.T
    r = jnp.where(p[IDX_RELATIVE] != 0.0, K.sum(axis=1), 0.0)
    return K @ Y - r[:, None] * Y


def flow_problem(p) -> integrators.Problem:
    """The Sinkformer flow in R^{n x d} as an :class:`integrators.Problem` (both backends)."""
    return integrators.Problem(sinkformer_drift, sinkformer_drift_jax, p, integrators.EUCLIDEAN)


# ---------------------------------------------------------------------------------------------
# numpy-facing entry points

def as_tokens(x) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.ndim not in (2, 3) or x.shape[-1] < 1 or x.shape[-2] < 1:
        raise ValueError(f"x must have shape (n, d) or (E, n, d), got {x.shape}")
    return x


def _check_p(x, p):
    p = np.ascontiguousarray(p, dtype=np.float64)
    if p.shape != (param_size(x.shape[-1]),) or int(p[IDX_DIM]) != x.shape[-1]:
        raise ValueError(f"p was packed for another d than x.shape[-1] = {x.shape[-1]}")
    return p


def velocity(x, p) -> np.ndarray:
    """dx_i/dt for ``x`` of shape (n, d) or (E, n, d) under the flow packed in ``p``."""
    x = as_tokens(x)
    p = _check_p(x, p)
    out = np.empty_like(x)
    for e in np.ndindex(x.shape[:-2]):
        sinkformer_drift(0.0, x[e], p, out[e])
    return out


def score_matrix(x, p) -> np.ndarray:
    """The score matrix S (n, n) of one member under ``p``."""
    x = as_tokens(x)
    p = _check_p(x, p)
    S = np.empty((x.shape[0], x.shape[0]))
    scores_kernel(x, p, S)
    return S


def sinkformer_layers(x0, depth: int, T: float, p, save_every: int | None = None) -> np.ndarray:
    """The discrete Sinkformer: ``depth`` residual layers x <- x + (T/depth) v(x).

    Returns (E, S, n, d): the states after layers 0, save_every, 2 save_every, ..., depth.
    """
    x0 = as_tokens(x0)
    x0 = x0[None] if x0.ndim == 2 else x0
    p = _check_p(x0, p)
    if isinstance(depth, bool) or int(depth) != depth or depth < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    every = int(depth) if save_every is None else int(save_every)
    if every < 1 or depth % every:
        raise ValueError(f"save_every = {save_every} must divide depth = {depth}")
    save = np.arange(0, depth + 1, every, dtype=np.int64)
    states = np.empty((x0.shape[0], save.size) + x0.shape[1:])
    _layers_kernel(x0, int(depth), float(T) / depth, p, save, states)
    return states
