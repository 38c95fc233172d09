r"""The attention field in the GEMM regime (from the crossover n of :mod:`.attention_field` on),
by BLAS.

For all H heads at once::

    S = X [K_1; ...; K_H]^T        (n x Hn; K_h = beta X M_h^T, so S[i, h n + j] = beta x_i^T M_h x_j)
    row loop:  S[i, h n + j] <- exp(S - b - shift) / (H Z^h_i) on the allowed j, 0 elsewhere
    m = S [X V_1^T; ...; X V_H^T]  (one GEMM of inner size Hn)

shift = the diagonal score s^h_ii while 2 |beta| max_h |M_h|_F R^2 <= EXP_MAX_ARG, else the row
maximum. Under a causal mask the rows go in CAUSAL_BLOCKS blocks [r0, r1), each against the
keys and values of tokens j < r1 only (block-triangular GEMMs: 5/8 of the dense products for
four blocks). The row loop runs on the calling thread: a numba parallel region here left OpenMP
threads spinning while BLAS ran the next GEMM on the same cores.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import F1, F2, FASTMATH, NJIT
from integrators.numba.arrays import copy2
from integrators.numba.jit import njit

from ._field_small import SIGNATURE, matrix_bound
from .vexp import EXP_MAX_ARG, exp_inplace, row_max, row_sum

CAUSAL_BLOCKS = 4


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


def work_size(n: int, d: int, heads: int) -> int:
    """Scratch floats: the n x Hn weights, the stacked keys and values (and a block's copy of
    them), the row weights."""
    return heads * n * n + 4 * heads * n * d + n


@njit(
    types.void(
        F2, types.int64, types.int64, types.boolean, types.float64, types.int64, types.boolean, types.boolean, F1
    ),
    **NJIT,
    fastmath=FASTMATH,
)
def _rows(S, r0, width, usa, slope, heads, causal, diagonal, weight):
    """Rows r0 + l of the block S (l = 0.., H blocks of `width` columns): S <- exp(S - b - shift)
    on the allowed columns j (j <= i causal), 0 on the others; one head: weight_i = 1/Z_i (or
    e^shift / n) is left for the output row, several: each head's row is scaled by its
    1/(H Z) here."""
    n_total = weight.shape[0]
    inv_n = 1.0 / n_total
    for local in range(S.shape[0]):
        i = r0 + local
        hi = i + 1 if causal else width
        for h in range(heads):
            row = S[local, h * width : (h + 1) * width]
            live = row[:hi]
            if slope != 0.0:
                for j in range(hi):
                    live[j] -= slope * abs(i - j)
            shift = live[i] if diagonal else row_max(live)
            exp_inplace(live, shift)
            c = math.exp(shift) * inv_n if usa else 1.0 / row_sum(live)
            if heads == 1:
                weight[i] = c
            else:
                c /= heads
                for j in range(hi):
                    live[j] *= c
            for j in range(hi, width):
                row[j] = 0.0


@njit(SIGNATURE, **NJIT, fastmath=FASTMATH)
def gemm(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work):
    """out <- m (large regime: scores and output of all heads by one GEMM each, per row block
    under a causal mask)."""
    n, d = x.shape
    hn = heads * n
    dd = d * d
    at = n * hn
    keys = work[at : at + hn * d].reshape((hn, d))
    values = work[at + hn * d : at + 2 * hn * d].reshape((hn, d))
    block_keys = work[at + 2 * hn * d : at + 3 * hn * d]
    block_values = work[at + 3 * hn * d : at + 4 * hn * d]
    weight = work[at + 4 * hn * d : at + 4 * hn * d + n]
    for h in range(heads):  # keys[h n + j] = beta M_h x_j, values[h n + j] = V_h x_j
        kh = keys[h * n : (h + 1) * n]
        if m_id:
            for j in range(n):
                for k in range(d):
                    kh[j, k] = beta * x[j, k]
        else:
            np.dot(x, M[h * dd : (h + 1) * dd].reshape((d, d)).T, kh)
            for j in range(n):
                for k in range(d):
                    kh[j, k] *= beta
        vh = values[h * n : (h + 1) * n]
        if v_id:
            copy2(vh, x)
        else:
            np.dot(x, V[h * dd : (h + 1) * dd].reshape((d, d)).T, vh)
    diagonal = 2.0 * abs(beta) * matrix_bound(heads, d, M, m_id) * max_square_norm(x) <= EXP_MAX_ARG
    blocks = CAUSAL_BLOCKS if causal and n >= CAUSAL_BLOCKS else 1
    for b in range(blocks):
        r0 = b * n // blocks
        r1 = (b + 1) * n // blocks
        width = r1 if causal else n  # keys of the tokens j < r1 (all of them without a mask)
        if heads == 1 or width == n:
            kb = keys if width == n else keys[:width]
            vb = values if width == n else values[:width]
        else:  # the first `width` keys (values) of every head, stacked
            kb = block_keys[: heads * width * d].reshape((heads * width, d))
            vb = block_values[: heads * width * d].reshape((heads * width, d))
            for h in range(heads):
                copy2(kb[h * width : (h + 1) * width], keys[h * n : h * n + width])
                copy2(vb[h * width : (h + 1) * width], values[h * n : h * n + width])
        S = work[: (r1 - r0) * heads * width].reshape((r1 - r0, heads * width))
        np.dot(x[r0:r1], kb.T, S)  # S[l, h w + j] = beta x_{r0+l}^T M_h x_j
        _rows(S, r0, width, usa, slope, heads, causal, diagonal, weight)
        ob = out[r0:r1]
        np.dot(S, vb, ob)
    if heads == 1:
        for i in range(n):
            c = weight[i]
            for k in range(d):
                out[i, k] *= c
