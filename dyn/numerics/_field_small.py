r"""The attention field in the small regime (below the crossover n of :mod:`.attention_field`),
any mask and any M_h: loops, no BLAS (the symmetric case has its own path,
:mod:`._field_symmetric`).

One member's weights live in ``work`` as columns, w[j, i] for the queries i that key j reaches,
so every inner loop runs over contiguous i (vectorizes without horizontal sums) and the whole
block goes through the vectorised exp (:mod:`.vexp`) in one call. Buffers are offsets into
``work``: at this size a top-level view costs more than the loop it serves (an atomic reference
count pair, ~10 ns).

Scores are shifted by the diagonal score s_ii (or by the row maximum when 2 |beta| max_h |M_h|_F
R^2 > EXP_MAX_ARG); the diagonal weight is set to exp(0) = 1 exactly. A causal mask stores only
the n(n+1)/2 allowed entries (column j: rows i >= j).

For d = 2 (tokens on the circle: the main ensembles) the score and sum passes handle four
columns per sweep over the rows, so the running sums are loaded and stored once per four
columns. Each loop reads and writes few distinct views: LLVM vectorizes a loop only while it
needs at most eight runtime alias checks between the views of one buffer (measured on the sum
pass: 4 column views and 3 sum views, 535 ns scalar; one block view and one sum view, 228 ns).
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import F1, F2, FASTMATH, NJIT
from integrators.numba.jit import njit

from .vexp import EXP_MAX_ARG, exp_inplace

I = types.int64
SIGNATURE = types.void(
    F2, types.float64, types.boolean, types.boolean, types.float64, I, F1, types.boolean, F1, types.boolean, F2, F1
)


def work_size(n: int, d: int) -> int:
    """Scratch floats: n^2 weights, x, M x, V x, the (Z, sums) block, the head total (n x d
    each) and the n shifts."""
    return n * n + 5 * n * d + 2 * n


@njit(types.float64(F2, F1, I, I), **NJIT, fastmath=FASTMATH)
def _transpose(x, work, at, norms):
    """work[at + k n + i] <- x[i, k] (column storage), work[norms + i] <- |x_i|^2; returns
    max_i |x_i|^2."""
    n, d = x.shape
    r2 = 0.0
    for i in range(n):
        s = 0.0
        for k in range(d):
            v = x[i, k]
            work[at + k * n + i] = v
            s += v * v
        work[norms + i] = s
        r2 = max(r2, s)
    return r2


@njit(types.float64(I, I, F1, types.boolean), **NJIT)
def matrix_bound(heads, d, M, m_id):
    """max_h |M_h|_F (>= the spectral norm); 1 for identity blocks."""
    if m_id:
        return 1.0
    bound = 0.0
    dd = d * d
    for h in range(heads):
        s = 0.0
        for a in range(h * dd, (h + 1) * dd):
            s += M[a] * M[a]
        bound = max(bound, np.sqrt(s))
    return bound


@njit(types.void(F1, I, F1, I, I, I, I, types.float64, types.boolean), **NJIT, fastmath=FASTMATH)
def _apply_rows(work, src, A, dst, n, d, h, c, identity):
    """work[dst + k n + i] = c sum_l A_h[k, l] work[src + l n + i] for every token i (c times the
    source when `identity`): the column storage of c A_h x_i for all i at once."""
    if identity:
        for a in range(n * d):
            work[dst + a] = c * work[src + a]
        return
    dd = d * d
    for k in range(d):
        row = work[dst + k * n : dst + (k + 1) * n]
        first = c * A[h * dd + k * d]
        x0 = work[src : src + n]
        for i in range(n):
            row[i] = first * x0[i]
        for l in range(1, d):
            a = c * A[h * dd + k * d + l]
            xl = work[src + l * n : src + (l + 1) * n]
            for i in range(n):
                row[i] += a * xl[i]


@njit(types.void(F1, I, I, types.float64, I, I, I), **NJIT, fastmath=FASTMATH)
def _diagonal(work, xt, qt, beta, shift, n, d):
    """work[shift + i] = beta <x_i, q_i> = s_ii (q_i = M_h x_i)."""
    for i in range(n):
        work[shift + i] = work[xt + i] * work[qt + i]
    for k in range(1, d):
        for i in range(n):
            work[shift + i] += work[xt + k * n + i] * work[qt + k * n + i]
    for i in range(n):
        work[shift + i] *= beta


@njit(inline="always", **NJIT)
def _causal_quad(work, at, n, j):
    """Four causal columns j .. j + 3 stored from `at`: column j + t holds rows j + t .. n - 1
    (4 (n - j) - 6 floats). Returns the block and the views of the four columns at the rows
    j + 3 .. n - 1 they share."""
    m = n - j
    c = work[at : at + 4 * m - 6]
    return c, c[3:m], c[m + 2 : 2 * m - 1], c[2 * m : 3 * m - 3], c[3 * m - 3 : 4 * m - 6]


@njit(
    types.int64(F1, I, I, I, types.float64, I, I, I, types.boolean, types.float64, types.boolean),
    **NJIT,
    fastmath=FASTMATH,
)
def _scores(work, w, xt, qt, beta, shift, n, d, causal, slope, diagonal):
    """Column j of w: w[j, i] = beta <x_i, q_j> + b_ij - shift_i (q_j = M_h x_j at `qt`) for i
    in N^{-1}(j) (all i, or i >= j under the causal mask); with `diagonal` (shift_i = s_ii) the
    diagonal entry is set to exactly 0 whatever rounding the two computations of s_jj took.
    Returns the number of entries."""
    x2 = work[xt : xt + d * n]
    sh = work[shift : shift + n]
    at = w
    j = 0
    while j < n:
        if d == 2 and j + 4 <= n:  # four columns per sweep over the rows
            q00, q01 = beta * work[qt + j], beta * work[qt + j + 1]
            q02, q03 = beta * work[qt + j + 2], beta * work[qt + j + 3]
            q10, q11 = beta * work[qt + n + j], beta * work[qt + n + j + 1]
            q12, q13 = beta * work[qt + n + j + 2], beta * work[qt + n + j + 3]
            if causal:
                m, size, lo = n - j, 4 * (n - j) - 6, j + 3
                c, c0, c1, c2, c3 = _causal_quad(work, at, n, j)
                a = x2[lo:n]
                b = x2[n + lo : 2 * n]
                sv = sh[lo:n]
                for u in range(n - lo):
                    c0[u] = a[u] * q00 + b[u] * q10 - sv[u]
                    c1[u] = a[u] * q01 + b[u] * q11 - sv[u]
                    c2[u] = a[u] * q02 + b[u] * q12 - sv[u]
                    c3[u] = a[u] * q03 + b[u] * q13 - sv[u]
                for i in range(j, lo):  # rows j .. j + 2 of the first three columns
                    ai, bi, si = x2[i], x2[n + i], sh[i]
                    c[i - j] = ai * q00 + bi * q10 - si
                    if i > j:
                        c[m + i - j - 1] = ai * q01 + bi * q11 - si
                    if i > j + 1:
                        c[2 * m - 1 + i - j - 2] = ai * q02 + bi * q12 - si
                starts = (0, m, 2 * m - 1, 3 * m - 3)
                firsts = (j, j + 1, j + 2, j + 3)
            else:
                size = 4 * n
                c = work[at : at + size]
                for i in range(n):
                    a, b, sv = x2[i], x2[n + i], sh[i]
                    c[i] = a * q00 + b * q10 - sv
                    c[n + i] = a * q01 + b * q11 - sv
                    c[2 * n + i] = a * q02 + b * q12 - sv
                    c[3 * n + i] = a * q03 + b * q13 - sv
                starts = (0, n, 2 * n, 3 * n)
                firsts = (0, 0, 0, 0)
            for t in range(4):
                jt = j + t
                if slope != 0.0:
                    for i in range(firsts[t], n):
                        c[starts[t] + i - firsts[t]] -= slope * abs(i - jt)
                if diagonal:
                    c[starts[t] + jt - firsts[t]] = 0.0
            at += size
            j += 4
            continue
        lo = j if causal else 0
        m = n - lo
        col = work[at : at + m]
        q0 = beta * work[qt + j]
        for i in range(m):
            col[i] = x2[lo + i] * q0 - sh[lo + i]
        for k in range(1, d):
            qk = beta * work[qt + k * n + j]
            for i in range(m):
                col[i] += x2[k * n + lo + i] * qk
        if slope != 0.0:
            for i in range(m):
                col[i] -= slope * abs(lo + i - j)
        if diagonal:
            col[j - lo] = 0.0
        at += m
        j += 1
    return at - w


@njit(types.void(F1, I, I, I, types.float64, I, I, I, types.boolean, types.float64), **NJIT, fastmath=FASTMATH)
def _row_max(work, w, xt, qt, beta, shift, n, d, causal, slope):
    """shift_i <- max_j (s_ij + b_ij) (the fallback when the diagonal shift is not safe): the
    scores are formed once against a zero shift and reduced column by column."""
    for i in range(n):
        work[shift + i] = 0.0
    _scores(work, w, xt, qt, beta, shift, n, d, causal, slope, False)
    for i in range(n):
        work[shift + i] = -np.inf
    at = w
    for j in range(n):
        lo = j if causal else 0
        for i in range(lo, n):
            work[shift + i] = max(work[shift + i], work[at + i - lo])
        at += n - lo


@njit(types.void(F1, I, I, I, I, I, types.boolean), **NJIT, fastmath=FASTMATH)
def _accumulate(work, w, vt, sums, n, d, causal):
    """The block at `sums`, (d + 1) x n: row 0 Z_i = sum_j w[j, i], row 1 + k
    sum_j w[j, i] vt[k n + j] (vertical sums only)."""
    out = work[sums : sums + (d + 1) * n]
    for a in range((d + 1) * n):
        out[a] = 0.0
    at = w
    j = 0
    while j < n:
        if d == 2 and j + 4 <= n:  # four columns per sweep over the rows
            v00, v01, v02, v03 = work[vt + j], work[vt + j + 1], work[vt + j + 2], work[vt + j + 3]
            v10, v11 = work[vt + n + j], work[vt + n + j + 1]
            v12, v13 = work[vt + n + j + 2], work[vt + n + j + 3]
            if causal:
                m, size, lo = n - j, 4 * (n - j) - 6, j + 3
                c, c0, c1, c2, c3 = _causal_quad(work, at, n, j)
                o = out[lo:]
                for u in range(n - lo):
                    e0, e1, e2, e3 = c0[u], c1[u], c2[u], c3[u]
                    o[u] += (e0 + e1) + (e2 + e3)
                    o[n + u] += e0 * v00 + e1 * v01 + e2 * v02 + e3 * v03
                    o[2 * n + u] += e0 * v10 + e1 * v11 + e2 * v12 + e3 * v13
                for i in range(j, lo):  # rows j .. j + 2 of the first three columns
                    e = c[i - j]
                    zs, a0, a1 = e, e * v00, e * v10
                    if i > j:
                        e = c[m + i - j - 1]
                        zs += e
                        a0 += e * v01
                        a1 += e * v11
                    if i > j + 1:
                        e = c[2 * m - 1 + i - j - 2]
                        zs += e
                        a0 += e * v02
                        a1 += e * v12
                    out[i] += zs
                    out[n + i] += a0
                    out[2 * n + i] += a1
            else:
                size = 4 * n
                c = work[at : at + size]
                for i in range(n):
                    e0, e1, e2, e3 = c[i], c[n + i], c[2 * n + i], c[3 * n + i]
                    out[i] += (e0 + e1) + (e2 + e3)
                    out[n + i] += e0 * v00 + e1 * v01 + e2 * v02 + e3 * v03
                    out[2 * n + i] += e0 * v10 + e1 * v11 + e2 * v12 + e3 * v13
            at += size
            j += 4
            continue
        lo = j if causal else 0
        m = n - lo
        col = work[at : at + m]
        o = out[lo:]
        for i in range(m):
            o[i] += col[i]
        for k in range(d):
            vk = work[vt + k * n + j]
            for i in range(m):
                o[(k + 1) * n + i] += col[i] * vk
        at += m
        j += 1


@njit(types.void(F1, I, I, F2, I, I, I, I), **NJIT, fastmath=FASTMATH)
def _combine(work, sums, tot, out, n, d, h, heads):
    """Head h's part (1/Z_i) sum_j w[j, i] V x_j, with row 0 of the `sums` block already turned
    into the weights 1/(H Z_i): written to `out` directly for one head, summed in column storage
    at `tot` (and written out after the last head) for several."""
    if heads == 1:
        for i in range(n):
            c = work[sums + i]
            for k in range(d):
                out[i, k] = c * work[sums + (k + 1) * n + i]
        return
    for k in range(d):
        for i in range(n):
            v = work[sums + i] * work[sums + (k + 1) * n + i]
            work[tot + k * n + i] = v if h == 0 else work[tot + k * n + i] + v
    if h == heads - 1:
        for i in range(n):
            for k in range(d):
                out[i, k] = work[tot + k * n + i]


@njit(SIGNATURE, **NJIT, fastmath=FASTMATH)
def columns(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work):
    """out <- m_i = (1/H) sum_h sum_{j in N(i)} A^h_ij V_h x_j (see :mod:`.attention_field`)."""
    n, d = x.shape
    nd = n * d
    xt, vt, tot = 0, 2 * nd, 3 * nd  # q_j = M_h x_j at nd unless M_h = I
    sums = 4 * nd  # (d + 1) x n
    shift = 5 * nd + n
    w = 5 * nd + 2 * n
    r2 = _transpose(x, work, xt, shift)  # shift <- |x_i|^2 for now
    diagonal = 2.0 * abs(beta) * matrix_bound(heads, d, M, m_id) * r2 <= EXP_MAX_ARG
    inv_n = 1.0 / n
    for h in range(heads):
        if m_id:  # q_j = x_j, s_ii = beta |x_i|^2
            qt = xt
            if diagonal and h == 0:
                for i in range(n):
                    work[shift + i] *= beta
        else:
            qt = nd
            _apply_rows(work, xt, M, qt, n, d, h, 1.0, False)  # q_j = M_h x_j
            if diagonal:
                _diagonal(work, xt, qt, beta, shift, n, d)
        if not diagonal:
            _row_max(work, w, xt, qt, beta, shift, n, d, causal, slope)
        entries = _scores(work, w, xt, qt, beta, shift, n, d, causal, slope, diagonal)
        exp_inplace(work[w : w + entries], 0.0)
        if v_id:
            _accumulate(work, w, xt, sums, n, d, causal)
        else:
            _apply_rows(work, xt, V, vt, n, d, h, 1.0, False)  # V_h x_j
            _accumulate(work, w, vt, sums, n, d, causal)
        for i in range(n):  # Z_i <- the weight 1/(H Z_i) of head h on row i
            c = math.exp(work[shift + i]) * inv_n if usa else 1.0 / work[sums + i]
            work[sums + i] = c / heads if heads > 1 else c
        _combine(work, sums, tot, out, n, d, h, heads)
