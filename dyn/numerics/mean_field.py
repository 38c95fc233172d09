r"""The attention mean field of tokens x_i (rows of an (n, d) array), numba and JAX::

    s_ij = beta x_i^T M x_j,      A_ij = exp(s_ij) / Z_i,      m_i = sum_j A_ij V x_j
    softmax (SA): Z_i = sum_k exp(s_ik);   unnormalized (USA): Z_i = n

Both subtract a row shift before exponentiating (vectorized exp of non-positive arguments,
:mod:`.vexp`); USA multiplies back by ``exp(shift) / n``. M or V is skipped when its flag says
it is the identity (the matrix argument is then never read: pass any (n, d) array).

Two numba regimes, chosen by the work ``n^2 d``:
- small (e.g. n = 32, d = 2, one member inside an ensemble kernel): plain loops (rows
  shorter than SCALAR_ROWS exponentiate entry by entry);
- large (e.g. n = 1024, d = 64): two BLAS GEMMs (``X M X^T`` and ``A (X V^T)``) around a
  row-wise exp loop.
Every buffer comes from ``work`` (:func:`work_size` floats), so a call allocates nothing.
"""
from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.jit import njit
from integrators.numba_abi import F1, F2, FASTMATH, NJIT

from .vexp import EXP_MAX_ARG, exp_shifted_inplace, row_max, row_sum

# n^2 d at and above which the BLAS path is used (n = 128, d = 4 is the crossover order).
LARGE_WORK = 1 << 16
# Rows shorter than this take a scalar exp: the vectorised exp's two passes cost more than they
# save on a handful of entries (measured: n = 2, 8: 145, 830 ns scalar vs 405, 1263 ns vectorised).
SCALAR_ROWS = 16

_SIG = types.void(F2, types.float64, types.boolean, F2, types.boolean, F2, types.boolean, F2, F1)


def work_size(n: int, d: int) -> int:
    """Scratch floats :func:`mean_field` needs for n tokens of dimension d."""
    if n * n * d >= LARGE_WORK:
        return n * n + 2 * n + 2 * n * d
    return 2 * n + 2 * d


@njit(_SIG, **NJIT, fastmath=FASTMATH)
def _loops(x, beta, usa, M, m_id, V, v_id, out, work):
    """out <- m (small regime: loops, no BLAS)."""
    n, d = x.shape
    w = work[:n]
    q = work[n:n + d]
    y = work[n + d:n + 2 * d]
    bits = work[n + 2 * d:2 * n + 2 * d].view(np.int64)
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
        if n < SCALAR_ROWS:
            for j in range(n):
                w[j] = math.exp(w[j] - smax)
        else:
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


@njit(types.float64(F2), **NJIT)
def max_square_norm(x):
    """max_i |x_i|^2 over the rows of x."""
    n, d = x.shape
    r2 = 0.0
    for i in range(n):
        s = 0.0
        for k in range(d):
            s += x[i, k] * x[i, k]
        r2 = max(r2, s)
    return r2


@njit(_SIG, **NJIT, fastmath=FASTMATH)
def _blas(x, beta, usa, M, m_id, V, v_id, out, work):
    """out <- m (large regime: S = beta X M X^T and m = A (X V^T) by GEMM)."""
    n, d = x.shape
    S = work[:n * n].reshape((n, n))
    bits = work[n * n:n * n + n].view(np.int64)
    scale = work[n * n + n:n * n + 2 * n]
    xq = work[n * n + 2 * n:n * n + 2 * n + n * d].reshape((n, d))
    xv = work[n * n + 2 * n + n * d:n * n + 2 * n + 2 * n * d].reshape((n, d))
    if m_id:
        for i in range(n):
            for k in range(d):
                xq[i, k] = beta * x[i, k]
        m_norm = 1.0
    else:
        np.dot(x, M, xq)
        for i in range(n):
            for k in range(d):
                xq[i, k] *= beta
        m_norm = np.sqrt(np.sum(M * M))  # Frobenius >= spectral norm
    # Shift row i by its diagonal score s_ii instead of its maximum (saves a pass over S):
    # s_ij - s_ii = beta x_i^T M (x_j - x_i) <= 2 |beta| |M| R^2 with R = max |x_k|, and the
    # j = i term makes Z_i >= 1, so nothing overflows or underflows while that bound is small.
    diagonal_shift = 2.0 * abs(beta) * m_norm * max_square_norm(x) <= EXP_MAX_ARG
    np.dot(xq, x.T, S)
    inv_n = 1.0 / n
    for i in range(n):  # S_i <- exp(S_i - shift_i); the 1/Z_i goes onto the output row
        row = S[i]
        smax = row[i] if diagonal_shift else row_max(row)
        exp_shifted_inplace(row, smax, bits)
        scale[i] = math.exp(smax) * inv_n if usa else 1.0 / row_sum(row)
    if v_id:
        np.dot(S, x, out)
    else:
        np.dot(x, V.T, xv)
        np.dot(S, xv, out)
    for i in range(n):
        for k in range(d):
            out[i, k] *= scale[i]


@njit(_SIG, **NJIT)
def mean_field(x, beta, usa, M, m_id, V, v_id, out, work):
    """out <- m_i = sum_j A_ij V x_j (unprojected); `work`: at least work_size(n, d) floats."""
    n, d = x.shape
    if n * n * d >= LARGE_WORK:
        _blas(x, beta, usa, M, m_id, V, v_id, out, work)
    else:
        _loops(x, beta, usa, M, m_id, V, v_id, out, work)


def mean_field_jax(x, beta, usa, M=None, V=None):
    """m_i = sum_j A_ij V x_j for one member ``x`` (n, d) in JAX; M, V None = identity; `usa`
    may be traced (0 or 1). Differentiable in x and the parameters."""
    import jax
    import jax.numpy as jnp

    n = x.shape[0]
    S = beta * (x if M is None else x @ M) @ x.T
    smax = jax.lax.stop_gradient(jnp.max(S, axis=1, keepdims=True))
    log_z_sa = smax + jnp.log(jnp.sum(jnp.exp(S - smax), axis=1, keepdims=True))
    log_z = jnp.where(usa != 0.0, jnp.log(float(n)), log_z_sa)
    return jnp.exp(S - log_z) @ (x if V is None else x @ V.T)
