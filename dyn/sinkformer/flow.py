r"""Sinkformer particle flows: the right-hand side (numba and JAX) and the discrete layers.

For tokens x_i in R^d (rows of ``x``, shape (n, d)), with K = softmax or Sinkhorn of the scores
(:mod:`.sinkhorn_numba`, layout of ``p`` in :mod:`.params`)::

    dx_i/dt = sum_j K_ij W_V x_j            (or W_V (x_j - x_i) with ``relative`` values)

computed as ``K [X W_V^T | 1]`` by one GEMM (the last column gives the row sums for the relative
form). The n x n buffers come from the integrators' per-member workspace (:func:`work_size`), so
a call allocates only O(n). The discrete Sinkformer of depth L is the residual map
x <- x + (T/L) v(x), L times: the integrators' Euler scheme on the flat geometry.
"""

from __future__ import annotations

import numpy as np
from numba import types

import integrators
from integrators.numba.abi import DRIFT_SIG, F1, F2, FASTMATH, NJIT
from integrators.numba.arrays import copy2
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import block
from .params import LAYOUT, pack_params, param_size
from .sinkhorn_numba import sinkhorn_kernel, symmetric_kernel

ITERS, TOL, SCORES, TAU, RELATIVE, DIM, SYMMETRIC = (LAYOUT.index(k) for k in LAYOUT.scalars)
W_AT, WV_AT = LAYOUT.block_at("W"), LAYOUT.block_at("WV")
BLOCK = 64  # tile of the in-place symmetrization (keeps both tiles in L1/L2)
SMALL_D = 16  # up to this token dimension, scores and K Y are plain loops instead of BLAS


def work_size(n: int, d: int, p=None) -> int:
    """Scratch floats of the drift: S, S^T (then P^T), P (n x n each), f, g, Y, Z."""
    return 3 * n * n + 2 * n + 2 * n * (d + 1)


@njit(types.void(F2), **NJIT)
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


@njit(types.void(F2, F1, F2), **NJIT, fastmath=FASTMATH)
def scores_kernel(x, p, S):
    """S <- x W x^T (dot) or -|x_i - x_j|^2 / (2 tau) (sqdist).

    Plain loops for small d: a BLAS call with inner dimension d ~ 2 is memory-bound anyway, and a
    threaded BLAS on a shared machine costs more than it brings. sqdist is exactly symmetric as
    computed ((a - b)^2 = (b - a)^2 in IEEE); dot is symmetrized when W is symmetric.
    """
    n, d = x.shape
    if p[SCORES] != 0.0:
        c = -0.5 / p[TAU]
        for i in range(n):
            for j in range(n):
                acc = 0.0
                for k in range(d):
                    diff = x[i, k] - x[j, k]
                    acc += diff * diff
                S[i, j] = c * acc
        return
    W = block(p, W_AT).reshape((d, d))
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
    if p[SYMMETRIC] != 0.0:
        _symmetrize(S)


@njit(types.void(F2, types.boolean, F2, F2), **NJIT, fastmath=FASTMATH)
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


@njit(DRIFT_SIG, **NJIT)
def sinkformer_drift(t, x, p, out, work):
    """out <- dx_i/dt = sum_j K_ij W_V x_j (or W_V (x_j - x_i)): the numba ABI drift."""
    n, d = x.shape
    nn = n * n
    S = work[:nn].reshape((n, n))
    ST = work[nn : 2 * nn].reshape((n, n))  # S^T for Sinkhorn, then P^T for BLAS
    P = work[2 * nn : 3 * nn].reshape((n, n))
    f = work[3 * nn : 3 * nn + n]
    g = work[3 * nn + n : 3 * nn + 2 * n]
    Y = work[3 * nn + 2 * n : 3 * nn + 2 * n + n * (d + 1)].reshape((n, d + 1))
    Z = work[3 * nn + 2 * n + n * (d + 1) : 3 * nn + 2 * n + 2 * n * (d + 1)].reshape((n, d + 1))
    scores_kernel(x, p, S)
    iters = int(p[ITERS])
    tol = p[TOL]
    errors = np.empty(0)
    symmetric = p[SYMMETRIC] != 0.0
    transposed = 0
    if tol > 0.0 and symmetric:
        symmetric_kernel(S, iters, tol, f, P, errors)
    elif symmetric:
        transposed = sinkhorn_kernel(S, S, iters, tol, f, g, P, errors)[1]
    else:
        copy2(ST, S.T)
        transposed = sinkhorn_kernel(S, ST, iters, tol, f, g, P, errors)[1]
    WV = block(p, WV_AT).reshape((d, d))
    for i in range(n):
        for k in range(d):
            acc = 0.0
            for l in range(d):
                acc += WV[k, l] * x[i, l]
            Y[i, k] = acc
    Y[:, d] = 1.0
    if d > SMALL_D:
        # BLAS needs contiguous operands (a transposed view would fall back to a slow loop)
        if transposed:
            copy2(ST, P.T)
        np.dot(ST if transposed else P, Y, Z)
    else:
        _apply(P, transposed != 0, Y, Z)
    relative = p[RELATIVE] != 0.0
    for i in range(n):
        r = Z[i, d] if relative else 0.0
        for k in range(d):
            out[i, k] = Z[i, k] - r * Y[i, k]


# ---------------------------------------------------------------------------------------------
# JAX twin (one member, same flat p)


def sinkformer_drift_jax(t, x, p):
    """dx_i/dt for one member (n, d): the JAX twin of :func:`sinkformer_drift`."""
    import jax.numpy as jnp

    from .sinkhorn_jax import sinkhorn_jax

    v = LAYOUT.unpack(p, {"d": x.shape[1]})
    sq = jnp.sum(x * x, axis=1)
    S_sq = -(sq[:, None] + sq[None, :] - 2.0 * x @ x.T) / (2.0 * v["tau"])
    S = jnp.where(v["scores"] != 0.0, S_sq, (x @ v["W"]) @ x.T)
    S = jnp.where(v["symmetric"] != 0.0, 0.5 * (S + S.T), S)
    K = sinkhorn_jax(S, v["iterations"], v["tol"], v["symmetric"])
    Y = x @ v["WV"].T
    r = jnp.where(v["relative"] != 0.0, K.sum(axis=1), 0.0)
    return K @ Y - r[:, None] * Y


def _example(rng):
    """A random member and parameter vector: softmax or Sinkhorn, dot or sqdist scores."""
    n, d = int(rng.integers(3, 10)), int(rng.integers(1, 4))
    W = rng.standard_normal((d, d))
    if rng.random() < 0.5:
        W = W + W.T
    p = pack_params(
        d,
        str(rng.choice(["sinkhorn", "softmax"])),
        int(rng.integers(1, 8)),
        float(rng.choice([0.0, 1e-10])),
        str(rng.choice(["dot", "sqdist"])),
        rng.uniform(0.5, 2),
        W=0.3 * W,
        WV=rng.standard_normal((d, d)),
        relative=bool(rng.random() < 0.5),
    )
    return rng.standard_normal((n, d)), p


SINKFORMER = register(
    Dynamics(
        "sinkformer",
        LAYOUT,
        sinkformer_drift,
        sinkformer_drift_jax,
        integrators.EUCLIDEAN,
        example=_example,
        work=work_size,
    )
)


def flow_problem(p) -> integrators.Problem:
    """The Sinkformer flow in R^{n x d} as an :class:`integrators.Problem` (both backends)."""
    return SINKFORMER.problem(p)


# ---------------------------------------------------------------------------------------------
# numpy-facing entry points


def as_tokens(x) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.ndim not in (2, 3) or x.shape[-1] < 1 or x.shape[-2] < 1:
        raise ValueError(f"x must have shape (n, d) or (E, n, d), got {x.shape}")
    return x


def _check_p(x, p):
    p = np.ascontiguousarray(p, dtype=np.float64)
    if p.shape != (param_size(x.shape[-1]),) or int(p[DIM]) != x.shape[-1]:
        raise ValueError(f"p was packed for another d than x.shape[-1] = {x.shape[-1]}")
    return p


def velocity(x, p) -> np.ndarray:
    """dx_i/dt for ``x`` of shape (n, d) or (E, n, d) under the flow packed in ``p``."""
    x = as_tokens(x)
    p = _check_p(x, p)
    out = np.empty_like(x)
    work = np.empty(work_size(*x.shape[-2:]))
    for e in np.ndindex(x.shape[:-2]):
        sinkformer_drift(0.0, x[e], p, out[e], work)
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
    h = float(T) / depth
    ts = np.arange(0, depth + 1, every) * h
    return integrators.get("numba", "euler", dt=h).solve(flow_problem(p), x0, ts).states
