"""Attention flow on the sphere: the right-hand side, numba and JAX.

For tokens ``x_i in S^{d-1}`` (rows of ``x``, shape ``(n, d)``)::

    s_ij = beta x_i^T M x_j,          M = Q^T K
    A_ij = exp(s_ij) / Z_i,           SA: Z_i = sum_k exp(s_ik);  USA: Z_i = n
    m_i  = sum_j A_ij V x_j           (the mean field, unprojected)
    dx_i/dt = P_{x_i} m_i = m_i - (<x_i, m_i> / |x_i|^2) x_i

Dividing by ``|x_i|^2`` (instead of assuming unit rows) makes ``|x_i|`` an exact invariant of the
ambient flow, so an unconstrained solver drifts off the sphere only by its truncation error.
Both subtract the row maximum ``s_i*`` before exponentiating (vectorized exp of non-positive
arguments, see ``vexp``); USA multiplies back by ``exp(s_i*) / n``.

Two numba regimes, chosen by the work ``n^2 d``:
- small (e.g. n = 32, d = 2, one member inside a prange ensemble kernel): plain loops, one scratch
  buffer of ``n + 2 d`` floats per call, no BLAS;
- large (e.g. n = 1024, d = 64): two BLAS GEMMs (``X M X^T`` and ``A (X V^T)``) around a row-wise
  exp loop.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from .vexp import EXP_MAX_ARG, exp_shifted_inplace, row_max, row_sum
from .params import HEADER, IDX_BETA, IDX_M_IDENTITY, IDX_NORM, IDX_V_IDENTITY, pack_params

import integrators
from integrators.geometry import SPHERE
from integrators.numba_abi import DRIFT_SIG, NJIT

# fastmath without nnan/ninf: reductions may be reordered and vectorized, but NaN and inf still
# propagate (a blow-up must be visible to the caller).
FASTMATH = {"reassoc", "contract", "arcp", "nsz", "afn"}
# n^2 d at and above which the BLAS path is used (n = 128, d = 4 is the crossover order).
LARGE_WORK = 1 << 16

_KERNEL_SIG = types.void(types.float64[:, ::1], types.float64[::1], types.float64[:, ::1])


@njit(_KERNEL_SIG, **NJIT, fastmath=FASTMATH)
def _mean_field_loops(x, p, out):
    """out <- m (small regime: loops, no BLAS)."""
    n, d = x.shape
    beta = p[IDX_BETA]
    usa = p[IDX_NORM] != 0.0
    m_id = p[IDX_M_IDENTITY] != 0.0
    v_id = p[IDX_V_IDENTITY] != 0.0
    M = p[HEADER:HEADER + d * d].reshape((d, d))
    V = p[HEADER + d * d:HEADER + 2 * d * d].reshape((d, d))
    buf = np.empty(n + 2 * d)
    bits = np.empty(n, dtype=np.int64)
    w = buf[:n]
    q = buf[n:n + d]
    y = buf[n + d:]
    inv_n = 1.0 / n
    for i in range(n):
        # q = beta M^T x_i, so that s_ij = <q, x_j>
        if m_id:
            for k in range(d):
                q[k] = beta * x[i, k]
        else:
            for k in range(d):
                acc = 0.0
                for l in range(d):
                    acc += x[i, l] * M[l, k]
                q[k] = beta * acc
        smax = -np.inf
        for j in range(n):
            s = 0.0
            for k in range(d):
                s += q[k] * x[j, k]
            w[j] = s
            smax = max(smax, s)
        exp_shifted_inplace(w, smax, bits)
        scale = math.exp(smax) * inv_n if usa else 1.0 / row_sum(w)
        for k in range(d):
            y[k] = 0.0
        for j in range(n):
            wj = w[j]
            for k in range(d):
                y[k] += wj * x[j, k]
        if v_id:
            for k in range(d):
                out[i, k] = scale * y[k]
        else:
            for k in range(d):
                acc = 0.0
                for l in range(d):
                    acc += V[k, l] * y[l]
                out[i, k] = scale * acc


@njit(_KERNEL_SIG, **NJIT, fastmath=FASTMATH)
def _mean_field_blas(x, p, out):
    """out <- m (large regime: S = beta X M X^T and m = A (X V^T) by GEMM)."""
    n, d = x.shape
    beta = p[IDX_BETA]
    usa = p[IDX_NORM] != 0.0
    if p[IDX_M_IDENTITY] != 0.0:
        xq = beta * x
        m_norm = 1.0
    else:
        M = p[HEADER:HEADER + d * d].reshape((d, d))
        xq = beta * np.dot(x, M)
        m_norm = np.sqrt(np.sum(M * M))  # Frobenius >= spectral norm
    # Shift row i by its diagonal score s_ii instead of its maximum (saves a pass over S):
    # s_ij - s_ii = beta x_i^T M (x_j - x_i) <= 2 |beta| |M| R^2 with R = max |x_k|, and the
    # j = i term makes Z_i >= 1, so nothing overflows or underflows while that bound is small.
    r2 = 0.0
    for i in range(n):
        nrm = 0.0
        for k in range(d):
            nrm += x[i, k] * x[i, k]
        r2 = max(r2, nrm)
    diagonal_shift = 2.0 * abs(beta) * m_norm * r2 <= EXP_MAX_ARG
    S = np.empty((n, n))
    np.dot(xq, x.T, S)
    inv_n = 1.0 / n
    bits = np.empty(n, dtype=np.int64)
    scale = np.empty(n)
    for i in range(n):  # S_i <- exp(S_i - shift_i); the 1/Z_i goes onto the output row
        row = S[i]
        smax = row[i] if diagonal_shift else row_max(row)
        exp_shifted_inplace(row, smax, bits)
        scale[i] = math.exp(smax) * inv_n if usa else 1.0 / row_sum(row)
    if p[IDX_V_IDENTITY] != 0.0:
        np.dot(S, x, out)
    else:
        V = p[HEADER + d * d:HEADER + 2 * d * d].reshape((d, d))
        np.dot(S, np.dot(x, V.T), out)
    for i in range(n):
        for k in range(d):
            out[i, k] *= scale[i]


@njit(DRIFT_SIG, **NJIT)
def attention_mean_field(t, x, p, out):
    """out <- m_i = sum_j A_ij V x_j (unprojected; the post-norm layer map uses it)."""
    n, d = x.shape
    if n * n * d >= LARGE_WORK:
        _mean_field_blas(x, p, out)
    else:
        _mean_field_loops(x, p, out)


# The sphere's tangent projection, v_i <- v_i - (<x_i, v_i> / |x_i|^2) x_i, written once in
# integrators.geometry; a module-level alias so numba binds it at compile time.
_project_rows = SPHERE.project


@njit(DRIFT_SIG, **NJIT)
def attention_drift(t, x, p, out):
    """out <- dx_i/dt = P_{x_i}(sum_j A_ij V x_j), the tangent velocity of the attention flow."""
    attention_mean_field(t, x, p, out)
    _project_rows(x, out)


# ---------------------------------------------------------------------------------------------
# JAX twin (one member, same flat p; flags ignored, matrices always applied)

def attention_mean_field_jax(t, x, p):
    """m_i = sum_j A_ij V x_j for one member ``x`` of shape (n, d); differentiable in x and p."""
    import jax
    import jax.numpy as jnp

    n, d = x.shape
    beta, usa = p[IDX_BETA], p[IDX_NORM]
    M = p[HEADER:HEADER + d * d].reshape(d, d)
    V = p[HEADER + d * d:HEADER + 2 * d * d].reshape(d, d)
    S = beta * (x @ M) @ x.T
    smax = jax.lax.stop_gradient(jnp.max(S, axis=1, keepdims=True))
    log_z_sa = smax + jnp.log(jnp.sum(jnp.exp(S - smax), axis=1, keepdims=True))
    log_z = jnp.where(usa != 0.0, jnp.log(float(n)), log_z_sa)
    A = jnp.exp(S - log_z)
    return A @ (x @ V.T)


def attention_drift_jax(t, x, p):
    """dx_i/dt = P_{x_i} m_i for one member (n, d): the JAX twin of :func:`attention_drift`."""
    m = attention_mean_field_jax(t, x, p)
    c = (x * m).sum(axis=1, keepdims=True) / (x * x).sum(axis=1, keepdims=True)
    return m - c * x


def flow_problem(p) -> integrators.Problem:
    """The attention flow on the sphere as an :class:`integrators.Problem` (both backends)."""
    return integrators.Problem(attention_drift, attention_drift_jax, p, SPHERE)


# ---------------------------------------------------------------------------------------------
# numpy-facing entry points

def _as_tokens(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim not in (2, 3):
        raise ValueError(f"x must have shape (n, d) or (E, n, d), got {x.shape}")
    if x.shape[-1] < 2 or x.shape[-2] < 1:
        raise ValueError(f"x needs n >= 1 tokens of dimension d >= 2, got {x.shape}")
    return np.ascontiguousarray(x)


def _apply(kernel, x, p):
    x = _as_tokens(x)
    if p.shape[0] != HEADER + 2 * x.shape[-1] ** 2:
        raise ValueError(f"p was packed for another d than x.shape[-1] = {x.shape[-1]}")
    out = np.empty_like(x)
    if x.ndim == 2:
        kernel(0.0, x, p, out)
    else:
        for e in range(x.shape[0]):
            kernel(0.0, x[e], p, out[e])
    return out


def velocity(x, beta, normalization="SA", Q=None, K=None, V=None) -> np.ndarray:
    """dx_i/dt = P_{x_i}(sum_j A_ij V x_j) for ``x`` of shape (n, d) or (E, n, d)."""
    x = _as_tokens(x)
    return _apply(attention_drift, x, pack_params(beta, x.shape[-1], normalization, Q, K, V))


def mean_field(x, beta, normalization="SA", Q=None, K=None, V=None) -> np.ndarray:
    """m_i = sum_j A_ij V x_j (unprojected) for ``x`` of shape (n, d) or (E, n, d)."""
    x = _as_tokens(x)
    return _apply(attention_mean_field, x, pack_params(beta, x.shape[-1], normalization, Q, K, V))
