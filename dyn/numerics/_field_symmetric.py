r"""The attention field in the small regime when there is no mask and every M_h is symmetric
(the identity included): half the exps.

Then s_ij = s_ji (the bias -lambda |i - j| is symmetric too), and with one shift c >= |s_ij| for
all pairs, e_ij = exp(s_ij - c) serves row i and row j: the upper triangle (i <= j, stored by
columns, column j at offset j (j + 1) / 2) holds n(n+1)/2 exps instead of n^2. Row i collects
sum_j e_ij (1, V x_j) from the columns j > i (vertical sums) and, for j < i, from its own column
(horizontal sums). c = |beta| max_h |M_h|_F R^2 (R = max_k |x_k|), so e_ij lies in [e^{-2c}, 1]:
the path is taken while 2c <= EXP_MAX_ARG, else :func:`._field_small.columns` runs.

Large n at d = 2: the triangle goes in blocks of whole columns (BLOCK_ENTRIES floats at most,
a multiple of four columns), each scored, exponentiated and summed while it is in L2; the
column order of every sum is the triangle's. Blocking pays only once the triangle leaves L2,
hence blocks of 2^17 entries, from n = 512 on. A triangle that fits one block, and any d != 2,
runs the unblocked code, bit for bit (at d = 3 the blocked code is slower: its rows are too
short to amortize the block passes; benchmarks/attention_rhs.py measures both).

For d = 2 four columns go together: one sweep over the rows below them makes the vertical sums
and the 12 horizontal ones (each loop reads few distinct views, see :mod:`._field_small`).

d = 2, n a multiple of 4, no bias (the main ensembles) take vectorized passes with the general
pass's sums: scores with its roundings written as fma (:func:`_upper_scores2`), the exps in
512-bit vectors where the CPU has them, the sums' small triangles in registers with their order
written out (:func:`_upper_accumulate2`), blocks of CIRCLE_BLOCK entries beyond BLOCK_ENTRIES.
The written order is the one LLVM gives the general loop where it vectorizes it four rows a
step: there the bits are the general pass's; on a CPU where LLVM picks another width the sums
agree to rounding.
The normalizers are left for the caller: the last two floats of ``work`` (reserved by
:func:`.attention_field.work_size`) get c and sum_i Z_i of head 0, Z_i = sum_j e^{s_ij - c},
so sum_ij e^{s_ij} = e^c sum_i Z_i (the USA energy without a second exp pass); NaN in the
second when the path falls back to the column path. No other path writes them.

Against the column path and :mod:`.mean_field` it is measured in benchmarks/attention_rhs.py.
"""

from __future__ import annotations

import math

from numba import types

from integrators.numba.abi import F1, F2, FASTMATH, NJIT
from integrators.numba.jit import njit

from ._field_small import SIGNATURE, I, _apply_rows, _combine, _transpose, columns, matrix_bound
from .vexp import EXP_MAX_ARG, add, exp_inplace, fma

# entries of the triangle one column block holds at d = 2 (1 MiB: in L2 with the sums); a
# triangle of more entries goes in blocks
BLOCK_ENTRIES = 1 << 17
# ... and a block of the vectorized d = 2 passes (32 KiB: in L1; the block size changes no sum's
# order, only where a block ends)
CIRCLE_BLOCK = 1 << 12


@njit(types.boolean(I, I, F1, types.boolean), **NJIT)
def symmetric_blocks(heads, d, M, m_id):
    """Every M_h equal to its transpose (exactly)."""
    if m_id:
        return True
    dd = d * d
    for h in range(heads):
        for k in range(d):
            for l in range(k + 1, d):
                if M[h * dd + k * d + l] != M[h * dd + l * d + k]:
                    return False
    return True


@njit(types.int64(F1, I, I, I, types.float64, I, I, types.float64, types.float64, I, I), **NJIT, fastmath=FASTMATH)
def _upper_scores(work, w, xt, qt, beta, n, d, slope, c, j0, j1):
    """Columns j0 <= j < j1 of the upper triangle, one after the other from `w`, rows i = 0..j:
    beta <x_i, q_j> - lambda (j - i) - c. j0 is a multiple of 4 (the d = 2 groups of four
    columns fall where they fall over the whole triangle). Returns the number of entries."""
    x2 = work[xt : xt + d * n]
    at = w
    j = j0
    while j < j1:
        if d == 2 and j + 4 <= j1:  # four columns: lengths L .. L + 3, starts 0, L, 2L+1, 3L+3
            L = j + 1
            size = 4 * L + 6
            blk = work[at : at + size]
            q00, q01 = beta * work[qt + j], beta * work[qt + j + 1]
            q02, q03 = beta * work[qt + j + 2], beta * work[qt + j + 3]
            q10, q11 = beta * work[qt + n + j], beta * work[qt + n + j + 1]
            q12, q13 = beta * work[qt + n + j + 2], beta * work[qt + n + j + 3]
            for u in range(L):  # rows every one of the four columns holds
                a = x2[u]
                b = x2[n + u]
                blk[u] = a * q00 + b * q10 - c
                blk[L + u] = a * q01 + b * q11 - c
                blk[2 * L + 1 + u] = a * q02 + b * q12 - c
                blk[3 * L + 3 + u] = a * q03 + b * q13 - c
            for u in range(L, L + 3):  # the last rows of columns j + 1 .. j + 3
                a = x2[u]
                b = x2[n + u]
                if u < L + 1:
                    blk[L + u] = a * q01 + b * q11 - c
                if u < L + 2:
                    blk[2 * L + 1 + u] = a * q02 + b * q12 - c
                blk[3 * L + 3 + u] = a * q03 + b * q13 - c
            if slope != 0.0:
                starts = (0, L, 2 * L + 1, 3 * L + 3)
                for t in range(4):
                    for i in range(L + t):
                        blk[starts[t] + i] -= slope * (j + t - i)
            at += size
            j += 4
            continue
        m = j + 1
        col = work[at : at + m]
        q0 = beta * work[qt + j]
        for i in range(m):
            col[i] = x2[i] * q0 - c
        for k in range(1, d):
            qk = beta * work[qt + k * n + j]
            for i in range(m):
                col[i] += x2[k * n + i] * qk
        if slope != 0.0:
            for i in range(m):
                col[i] -= slope * (j - i)
        at += m
        j += 1
    return at - w


@njit(types.void(F1, I, I, I, I, I), **NJIT, fastmath=FASTMATH)
def _upper_accumulate(work, w, vt, sums, n, d):
    """The (d + 1) x n block at `sums` from the upper triangle: row 0 Z_i = sum_j e_ij, row
    1 + k sum_j e_ij (V x_j)_k."""
    out = work[sums : sums + (d + 1) * n]
    for a in range((d + 1) * n):
        out[a] = 0.0
    v = work[vt : vt + d * n]
    at = w
    j = 0
    while j < n:
        if d == 2 and j + 4 <= n:
            L = j + 1
            size = 4 * L + 6
            blk = work[at : at + size]
            s1, s2, s3 = L, 2 * L + 1, 3 * L + 3
            v00, v01, v02, v03 = v[j], v[j + 1], v[j + 2], v[j + 3]
            v10, v11, v12, v13 = v[n + j], v[n + j + 1], v[n + j + 2], v[n + j + 3]
            h0 = h1 = h2 = h3 = 0.0  # row j + t from its own column: Z ...
            g00 = g01 = g02 = g03 = 0.0  # ... and sum_i e_i,j+t (V x_i)_0 ...
            g10 = g11 = g12 = g13 = 0.0  # ... and (V x_i)_1, over the rows i < j
            for u in range(j):  # rows below all four columns: vertical and horizontal sums
                e0, e1, e2, e3 = blk[u], blk[s1 + u], blk[s2 + u], blk[s3 + u]
                out[u] += (e0 + e1) + (e2 + e3)
                out[n + u] += e0 * v00 + e1 * v01 + e2 * v02 + e3 * v03
                out[2 * n + u] += e0 * v10 + e1 * v11 + e2 * v12 + e3 * v13
                vu0 = v[u]
                vu1 = v[n + u]
                h0 += e0
                h1 += e1
                h2 += e2
                h3 += e3
                g00 += e0 * vu0
                g01 += e1 * vu0
                g02 += e2 * vu0
                g03 += e3 * vu0
                g10 += e0 * vu1
                g11 += e1 * vu1
                g12 += e2 * vu1
                g13 += e3 * vu1
            hz = (h0, h1, h2, h3)
            g0 = (g00, g01, g02, g03)
            g1 = (g10, g11, g12, g13)
            starts = (0, s1, s2, s3)
            for t in range(4):  # the small triangle: rows j .. j + t of column j + t
                jt = j + t
                st = starts[t]
                vt0, vt1 = v[jt], v[n + jt]
                sz, a0, a1 = hz[t], g0[t], g1[t]
                for i in range(j, jt):
                    e = blk[st + i]
                    out[i] += e
                    out[n + i] += e * vt0
                    out[2 * n + i] += e * vt1
                    sz += e
                    a0 += e * v[i]
                    a1 += e * v[n + i]
                e = blk[st + jt]
                out[jt] += sz + e
                out[n + jt] += a0 + e * vt0
                out[2 * n + jt] += a1 + e * vt1
            at += size
            j += 4
            continue
        col = work[at : at + j + 1]
        e_jj = col[j]
        sz = 0.0
        for i in range(j):
            out[i] += col[i]
            sz += col[i]
        out[j] += sz + e_jj
        for k in range(d):
            vk = v[k * n + j]
            ak = out[(k + 1) * n : (k + 2) * n]
            s = 0.0
            for i in range(j):
                ak[i] += col[i] * vk
                s += col[i] * v[k * n + i]
            ak[j] += s + e_jj * vk
        at += j + 1
        j += 1


@njit(types.void(F1, I, I, I, I, I, I, I), **NJIT, fastmath=FASTMATH)
def _upper_accumulate_block(work, w, vt, sums, n, d, j0, j1):
    """:func:`_upper_accumulate` for the columns j0 <= j < j1 (from `w`, as
    :func:`_upper_scores` wrote them), adding to the block at `sums` (zeroed by the first
    block). A copy, not a call in both: the loop bounds change the vectorized reductions'
    order, and the whole triangle keeps the bits it had before blocks existed."""
    out = work[sums : sums + (d + 1) * n]
    if j0 == 0:  # the first block starts the sums
        for a in range((d + 1) * n):
            out[a] = 0.0
    v = work[vt : vt + d * n]
    at = w
    j = j0
    while j < j1:
        if d == 2 and j + 4 <= n:  # (j1 < n ends a group: the same groups)
            L = j + 1
            size = 4 * L + 6
            blk = work[at : at + size]
            s1, s2, s3 = L, 2 * L + 1, 3 * L + 3
            v00, v01, v02, v03 = v[j], v[j + 1], v[j + 2], v[j + 3]
            v10, v11, v12, v13 = v[n + j], v[n + j + 1], v[n + j + 2], v[n + j + 3]
            h0 = h1 = h2 = h3 = 0.0  # row j + t from its own column: Z ...
            g00 = g01 = g02 = g03 = 0.0  # ... and sum_i e_i,j+t (V x_i)_0 ...
            g10 = g11 = g12 = g13 = 0.0  # ... and (V x_i)_1, over the rows i < j
            for u in range(j):  # rows below all four columns: vertical and horizontal sums
                e0, e1, e2, e3 = blk[u], blk[s1 + u], blk[s2 + u], blk[s3 + u]
                out[u] += (e0 + e1) + (e2 + e3)
                out[n + u] += e0 * v00 + e1 * v01 + e2 * v02 + e3 * v03
                out[2 * n + u] += e0 * v10 + e1 * v11 + e2 * v12 + e3 * v13
                vu0 = v[u]
                vu1 = v[n + u]
                h0 += e0
                h1 += e1
                h2 += e2
                h3 += e3
                g00 += e0 * vu0
                g01 += e1 * vu0
                g02 += e2 * vu0
                g03 += e3 * vu0
                g10 += e0 * vu1
                g11 += e1 * vu1
                g12 += e2 * vu1
                g13 += e3 * vu1
            hz = (h0, h1, h2, h3)
            g0 = (g00, g01, g02, g03)
            g1 = (g10, g11, g12, g13)
            starts = (0, s1, s2, s3)
            for t in range(4):  # the small triangle: rows j .. j + t of column j + t
                jt = j + t
                st = starts[t]
                vt0, vt1 = v[jt], v[n + jt]
                sz, a0, a1 = hz[t], g0[t], g1[t]
                for i in range(j, jt):
                    e = blk[st + i]
                    out[i] += e
                    out[n + i] += e * vt0
                    out[2 * n + i] += e * vt1
                    sz += e
                    a0 += e * v[i]
                    a1 += e * v[n + i]
                e = blk[st + jt]
                out[jt] += sz + e
                out[n + jt] += a0 + e * vt0
                out[2 * n + jt] += a1 + e * vt1
            at += size
            j += 4
            continue
        col = work[at : at + j + 1]
        e_jj = col[j]
        sz = 0.0
        for i in range(j):
            out[i] += col[i]
            sz += col[i]
        out[j] += sz + e_jj
        for k in range(d):
            vk = v[k * n + j]
            ak = out[(k + 1) * n : (k + 2) * n]
            s = 0.0
            for i in range(j):
                ak[i] += col[i] * vk
                s += col[i] * v[k * n + i]
            ak[j] += s + e_jj * vk
        at += j + 1
        j += 1


@njit(types.int64(F1, I, I, I, I, types.float64, types.float64, I, I), **NJIT, fastmath=FASTMATH)
def _upper_scores2(work, w, xt, qt, n, beta, c, j0, j1):
    """d = 2, n a multiple of 4, no bias: :func:`_upper_scores` for the columns j0 <= j < j1
    (multiples of 4), its bits, in vectorized loops (its own loop stays scalar: LLVM cannot rule out negative
    offsets there). Its roundings of ``a q0 + b q1 - c`` written out: fma(b, q1, a q0) - c in
    the first column of a group of four, fma(b, q1, -fma(-a, q0, c)) in the others. Each
    column of a group runs over the group's L + 3 rows (a multiple of four: no scalar
    remainder); the rows past its own end land on the next column's first rows, which that
    column writes after. Returns the number of entries."""
    x0 = work[xt : xt + n]
    x1 = work[xt + n : xt + 2 * n]
    at = w
    for j in range(j0, j1, 4):
        L = j + 1
        m = L + 3
        q0, q1 = beta * work[qt + j], beta * work[qt + n + j]
        col = work[at : at + m]
        for u in range(m):
            col[u] = fma(x1[u], q1, x0[u] * q0) - c
        for t, start in ((1, L), (2, 2 * L + 1), (3, 3 * L + 3)):
            q0, q1 = beta * work[qt + j + t], beta * work[qt + n + j + t]
            col = work[at + start : at + start + m]
            for u in range(m):
                col[u] = fma(x1[u], q1, -fma(-x0[u], q0, c))
        at += 4 * L + 6
    return at - w


@njit(types.void(F1, I, I, I, I), **NJIT, fastmath=FASTMATH)
def _upper_accumulate2(work, w, vt, sums, n):
    """:func:`_upper_accumulate` at d = 2, n a multiple of 4, its sums (its bits where LLVM
    vectorizes four rows a step, module doc): the same loop over the rows below each group of
    four columns (so the same vectorized reduction order), and the
    group's own small triangle (rows j .. j + 3) written out in registers, in the order of
    :func:`_upper_accumulate`'s sums there (each operation an :func:`.vexp.add` or
    :func:`.vexp.fma`: nothing for LLVM to reorder)."""
    out = work[sums : sums + 3 * n]
    for a in range(3 * n):
        out[a] = 0.0
    v = work[vt : vt + 2 * n]
    at = w
    j = 0
    while j < n:
        L = j + 1
        size = 4 * L + 6
        blk = work[at : at + size]
        s1, s2, s3 = L, 2 * L + 1, 3 * L + 3
        v00, v01, v02, v03 = v[j], v[j + 1], v[j + 2], v[j + 3]
        v10, v11, v12, v13 = v[n + j], v[n + j + 1], v[n + j + 2], v[n + j + 3]
        h0 = h1 = h2 = h3 = 0.0  # row j + t from its own column: Z ...
        g00 = g01 = g02 = g03 = 0.0  # ... and sum_i e_i,j+t (V x_i)_0 ...
        g10 = g11 = g12 = g13 = 0.0  # ... and (V x_i)_1, over the rows i < j
        if j >= 12:  # vectorized there (four rows a step) as in _upper_accumulate: its order
            for u in range(j):  # rows below all four columns: vertical and horizontal sums
                e0, e1, e2, e3 = blk[u], blk[s1 + u], blk[s2 + u], blk[s3 + u]
                out[u] += (e0 + e1) + (e2 + e3)
                out[n + u] += e0 * v00 + e1 * v01 + e2 * v02 + e3 * v03
                out[2 * n + u] += e0 * v10 + e1 * v11 + e2 * v12 + e3 * v13
                vu0 = v[u]
                vu1 = v[n + u]
                h0 += e0
                h1 += e1
                h2 += e2
                h3 += e3
                g00 += e0 * vu0
                g01 += e1 * vu0
                g02 += e2 * vu0
                g03 += e3 * vu0
                g10 += e0 * vu1
                g11 += e1 * vu1
                g12 += e2 * vu1
                g13 += e3 * vu1
        else:  # its scalar loop below 12 rows (LLVM's threshold there): in row order
            for u in range(j):
                e0, e1, e2, e3 = blk[u], blk[s1 + u], blk[s2 + u], blk[s3 + u]
                out[u] = add(out[u], add(add(e0, e1), add(e2, e3)))
                out[n + u] = fma(e3, v03, fma(e2, v02, fma(e1, v01, fma(e0, v00, out[n + u]))))
                out[2 * n + u] = fma(e3, v13, fma(e2, v12, fma(e1, v11, fma(e0, v10, out[2 * n + u]))))
                vu0 = v[u]
                vu1 = v[n + u]
                h0, h1, h2, h3 = add(h0, e0), add(h1, e1), add(h2, e2), add(h3, e3)
                g00, g01 = fma(e0, vu0, g00), fma(e1, vu0, g01)
                g02, g03 = fma(e2, vu0, g02), fma(e3, vu0, g03)
                g10, g11 = fma(e0, vu1, g10), fma(e1, vu1, g11)
                g12, g13 = fma(e2, vu1, g12), fma(e3, vu1, g13)
        # the small triangle: e_ik for j <= i <= k <= j + 3, column k = j + t at s_t
        e00 = blk[j]
        e01, e11 = blk[s1 + j], blk[s1 + j + 1]
        e02, e12, e22 = blk[s2 + j], blk[s2 + j + 1], blk[s2 + j + 2]
        e03, e13, e23, e33 = blk[s3 + j], blk[s3 + j + 1], blk[s3 + j + 2], blk[s3 + j + 3]
        z0, z1, z2, z3 = out[j], out[j + 1], out[j + 2], out[j + 3]
        p0, p1, p2, p3 = out[n + j], out[n + j + 1], out[n + j + 2], out[n + j + 3]
        r0, r1, r2, r3 = out[2 * n + j], out[2 * n + j + 1], out[2 * n + j + 2], out[2 * n + j + 3]
        # column j: its diagonal
        z0 = add(z0, add(h0, e00))
        p0 = add(p0, fma(e00, v00, g00))
        r0 = add(r0, fma(e00, v10, g10))
        # column j + 1: row j, then its diagonal
        z0 = add(z0, e01)
        p0 = fma(e01, v01, p0)
        r0 = fma(e01, v11, r0)
        sz, a0, a1 = add(h1, e01), fma(e01, v00, g01), fma(e01, v10, g11)
        z1 = add(z1, add(sz, e11))
        p1 = add(p1, fma(e11, v01, a0))
        r1 = add(r1, fma(e11, v11, a1))
        # column j + 2: rows j, j + 1, then its diagonal
        z0 = add(z0, e02)
        p0 = fma(e02, v02, p0)
        r0 = fma(e02, v12, r0)
        sz, a0, a1 = add(h2, e02), fma(e02, v00, g02), fma(e02, v10, g12)
        z1 = add(z1, e12)
        p1 = fma(e12, v02, p1)
        r1 = fma(e12, v12, r1)
        sz, a0, a1 = add(sz, e12), fma(e12, v01, a0), fma(e12, v11, a1)
        z2 = add(z2, add(sz, e22))
        p2 = add(p2, fma(e22, v02, a0))
        r2 = add(r2, fma(e22, v12, a1))
        # column j + 3: rows j .. j + 2, then its diagonal
        z0 = add(z0, e03)
        p0 = fma(e03, v03, p0)
        r0 = fma(e03, v13, r0)
        sz, a0, a1 = add(h3, e03), fma(e03, v00, g03), fma(e03, v10, g13)
        z1 = add(z1, e13)
        p1 = fma(e13, v03, p1)
        r1 = fma(e13, v13, r1)
        sz, a0, a1 = add(sz, e13), fma(e13, v01, a0), fma(e13, v11, a1)
        z2 = add(z2, e23)
        p2 = fma(e23, v03, p2)
        r2 = fma(e23, v13, r2)
        sz, a0, a1 = add(sz, e23), fma(e23, v02, a0), fma(e23, v12, a1)
        z3 = add(z3, add(sz, e33))
        p3 = add(p3, fma(e33, v03, a0))
        r3 = add(r3, fma(e33, v13, a1))
        out[j], out[j + 1], out[j + 2], out[j + 3] = z0, z1, z2, z3
        out[n + j], out[n + j + 1], out[n + j + 2], out[n + j + 3] = p0, p1, p2, p3
        out[2 * n + j], out[2 * n + j + 1] = r0, r1
        out[2 * n + j + 2], out[2 * n + j + 3] = r2, r3
        at += size
        j += 4


@njit(types.void(F1, I, I, I, I, I, I), **NJIT, fastmath=FASTMATH)
def _upper_accumulate2_block(work, w, vt, sums, n, j0, j1):
    """:func:`_upper_accumulate2` for the columns j0 <= j < j1 (multiples of 4, as
    :func:`_upper_scores2` wrote them from `w`), adding to the block at `sums` (zeroed by the
    first block): the sums of :func:`_upper_accumulate_block`, as above. A copy of
    :func:`_upper_accumulate2`, for speed: the sums are the same either way, but a shared body (this
    function called with (0, n), or one inlined group body for both) is slower at small n,
    where the unblocked path runs (benchmarks/attention_rhs.py times the field)."""
    out = work[sums : sums + 3 * n]
    if j0 == 0:  # the first block starts the sums
        for a in range(3 * n):
            out[a] = 0.0
    v = work[vt : vt + 2 * n]
    at = w
    j = j0
    while j < j1:
        L = j + 1
        size = 4 * L + 6
        blk = work[at : at + size]
        s1, s2, s3 = L, 2 * L + 1, 3 * L + 3
        v00, v01, v02, v03 = v[j], v[j + 1], v[j + 2], v[j + 3]
        v10, v11, v12, v13 = v[n + j], v[n + j + 1], v[n + j + 2], v[n + j + 3]
        h0 = h1 = h2 = h3 = 0.0  # row j + t from its own column: Z ...
        g00 = g01 = g02 = g03 = 0.0  # ... and sum_i e_i,j+t (V x_i)_0 ...
        g10 = g11 = g12 = g13 = 0.0  # ... and (V x_i)_1, over the rows i < j
        if j >= 12:  # vectorized there (four rows a step) as in _upper_accumulate: its order
            for u in range(j):  # rows below all four columns: vertical and horizontal sums
                e0, e1, e2, e3 = blk[u], blk[s1 + u], blk[s2 + u], blk[s3 + u]
                out[u] += (e0 + e1) + (e2 + e3)
                out[n + u] += e0 * v00 + e1 * v01 + e2 * v02 + e3 * v03
                out[2 * n + u] += e0 * v10 + e1 * v11 + e2 * v12 + e3 * v13
                vu0 = v[u]
                vu1 = v[n + u]
                h0 += e0
                h1 += e1
                h2 += e2
                h3 += e3
                g00 += e0 * vu0
                g01 += e1 * vu0
                g02 += e2 * vu0
                g03 += e3 * vu0
                g10 += e0 * vu1
                g11 += e1 * vu1
                g12 += e2 * vu1
                g13 += e3 * vu1
        else:  # its scalar loop below 12 rows (LLVM's threshold there): in row order
            for u in range(j):
                e0, e1, e2, e3 = blk[u], blk[s1 + u], blk[s2 + u], blk[s3 + u]
                out[u] = add(out[u], add(add(e0, e1), add(e2, e3)))
                out[n + u] = fma(e3, v03, fma(e2, v02, fma(e1, v01, fma(e0, v00, out[n + u]))))
                out[2 * n + u] = fma(e3, v13, fma(e2, v12, fma(e1, v11, fma(e0, v10, out[2 * n + u]))))
                vu0 = v[u]
                vu1 = v[n + u]
                h0, h1, h2, h3 = add(h0, e0), add(h1, e1), add(h2, e2), add(h3, e3)
                g00, g01 = fma(e0, vu0, g00), fma(e1, vu0, g01)
                g02, g03 = fma(e2, vu0, g02), fma(e3, vu0, g03)
                g10, g11 = fma(e0, vu1, g10), fma(e1, vu1, g11)
                g12, g13 = fma(e2, vu1, g12), fma(e3, vu1, g13)
        # the small triangle: e_ik for j <= i <= k <= j + 3, column k = j + t at s_t
        e00 = blk[j]
        e01, e11 = blk[s1 + j], blk[s1 + j + 1]
        e02, e12, e22 = blk[s2 + j], blk[s2 + j + 1], blk[s2 + j + 2]
        e03, e13, e23, e33 = blk[s3 + j], blk[s3 + j + 1], blk[s3 + j + 2], blk[s3 + j + 3]
        z0, z1, z2, z3 = out[j], out[j + 1], out[j + 2], out[j + 3]
        p0, p1, p2, p3 = out[n + j], out[n + j + 1], out[n + j + 2], out[n + j + 3]
        r0, r1, r2, r3 = out[2 * n + j], out[2 * n + j + 1], out[2 * n + j + 2], out[2 * n + j + 3]
        # column j: its diagonal
        z0 = add(z0, add(h0, e00))
        p0 = add(p0, fma(e00, v00, g00))
        r0 = add(r0, fma(e00, v10, g10))
        # column j + 1: row j, then its diagonal
        z0 = add(z0, e01)
        p0 = fma(e01, v01, p0)
        r0 = fma(e01, v11, r0)
        sz, a0, a1 = add(h1, e01), fma(e01, v00, g01), fma(e01, v10, g11)
        z1 = add(z1, add(sz, e11))
        p1 = add(p1, fma(e11, v01, a0))
        r1 = add(r1, fma(e11, v11, a1))
        # column j + 2: rows j, j + 1, then its diagonal
        z0 = add(z0, e02)
        p0 = fma(e02, v02, p0)
        r0 = fma(e02, v12, r0)
        sz, a0, a1 = add(h2, e02), fma(e02, v00, g02), fma(e02, v10, g12)
        z1 = add(z1, e12)
        p1 = fma(e12, v02, p1)
        r1 = fma(e12, v12, r1)
        sz, a0, a1 = add(sz, e12), fma(e12, v01, a0), fma(e12, v11, a1)
        z2 = add(z2, add(sz, e22))
        p2 = add(p2, fma(e22, v02, a0))
        r2 = add(r2, fma(e22, v12, a1))
        # column j + 3: rows j .. j + 2, then its diagonal
        z0 = add(z0, e03)
        p0 = fma(e03, v03, p0)
        r0 = fma(e03, v13, r0)
        sz, a0, a1 = add(h3, e03), fma(e03, v00, g03), fma(e03, v10, g13)
        z1 = add(z1, e13)
        p1 = fma(e13, v03, p1)
        r1 = fma(e13, v13, r1)
        sz, a0, a1 = add(sz, e13), fma(e13, v01, a0), fma(e13, v11, a1)
        z2 = add(z2, e23)
        p2 = fma(e23, v03, p2)
        r2 = fma(e23, v13, r2)
        sz, a0, a1 = add(sz, e23), fma(e23, v02, a0), fma(e23, v12, a1)
        z3 = add(z3, add(sz, e33))
        p3 = add(p3, fma(e33, v03, a0))
        r3 = add(r3, fma(e33, v13, a1))
        out[j], out[j + 1], out[j + 2], out[j + 3] = z0, z1, z2, z3
        out[n + j], out[n + j + 1], out[n + j + 2], out[n + j + 3] = p0, p1, p2, p3
        out[2 * n + j], out[2 * n + j + 1] = r0, r1
        out[2 * n + j + 2], out[2 * n + j + 3] = r2, r3
        at += size
        j += 4


@njit(types.float64(F2, F1, I), **NJIT, fastmath=FASTMATH)
def _transpose2(x, work, at):
    """d = 2: work[at + i], work[at + n + i] <- x[i, 0], x[i, 1]; returns max_i |x_i|^2 (the
    bits of :func:`._field_small._transpose`, which also stores the norms: not read here)."""
    n = x.shape[0]
    x0 = work[at : at + n]
    x1 = work[at + n : at + 2 * n]
    r2 = 0.0
    for i in range(n):
        a = x[i, 0]
        b = x[i, 1]
        x0[i] = a
        x1[i] = b
        r2 = max(r2, a * a + b * b)
    return r2


@njit(types.void(F1, I, F2, types.float64, types.boolean), **NJIT, fastmath=FASTMATH)
def _normalize2(work, sums, out, usa_weight, usa):
    """d = 2, one head: out[i] <- a_i (sum_j e_ij x_j) with a_i = 1/Z_i (SA) or usa_weight,
    the weights left in row 0 of the sums as :func:`._field_small._combine` reads them (the
    same two roundings: the weight, then its product)."""
    n = out.shape[0]
    z = work[sums : sums + n]
    for i in range(n):
        z[i] = usa_weight if usa else 1.0 / z[i]
    s0 = work[sums + n : sums + 2 * n]
    s1 = work[sums + 2 * n : sums + 3 * n]
    for i in range(n):
        out[i, 0] = z[i] * s0[i]
        out[i, 1] = z[i] * s1[i]


@njit(types.int64(I, I, I), **NJIT)
def _block_end(j0, n, most):
    """The end j1 of the column block from j0: whole groups of four columns while the block
    holds at most `most` entries (at least one group; the last block ends at n)."""
    j1 = j0
    entries = 0
    while j1 < n:
        group = min(4, n - j1)
        more = group * (j1 + 1) + group * (group - 1) // 2
        if j1 > j0 and entries + more > most:
            break
        entries += more
        j1 += group
    return j1


@njit(SIGNATURE, **NJIT, fastmath=FASTMATH)
def symmetric(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work):
    """out <- m when no mask and every M_h is symmetric (the caller checks; `causal` is not
    read): n(n+1)/2 exps per head. Falls back to :func:`columns` when 2c > EXP_MAX_ARG."""
    n, d = x.shape
    nd = n * d
    xt, vt, tot = 0, 2 * nd, 3 * nd
    sums = 4 * nd
    w = 5 * nd + 2 * n
    r2 = _transpose2(x, work, xt) if d == 2 else _transpose(x, work, xt, 5 * nd + n)
    c = abs(beta) * matrix_bound(heads, d, M, m_id) * r2  # >= |s_ij| for every pair
    end = work.shape[0]  # the normalizers' two floats: [c, sum_i Z_i] of head 0
    if not 2.0 * c <= EXP_MAX_ARG:
        columns(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work)
        work[end - 1] = math.nan
        return
    usa_weight = math.exp(c) / n if usa else 0.0
    one_block = d != 2 or n * (n + 1) // 2 <= BLOCK_ENTRIES
    circle = d == 2 and n % 4 == 0 and slope == 0.0  # the vectorized d = 2 passes
    for h in range(heads):
        qt = xt
        if not m_id:
            qt = nd
            _apply_rows(work, xt, M, qt, n, d, h, 1.0, False)  # q_j = M_h x_j
        if not v_id:
            _apply_rows(work, xt, V, vt, n, d, h, 1.0, False)  # V_h x_j
        values = xt if v_id else vt
        j0 = 0
        while j0 < n:  # column blocks: scores, exps and sums while the block is in cache
            j1 = n if one_block else _block_end(j0, n, CIRCLE_BLOCK if circle else BLOCK_ENTRIES)
            if circle:  # the same bits as the general passes below
                entries = _upper_scores2(work, w, xt, qt, n, beta, c, j0, j1)
                exp_inplace(work[w : w + entries], 0.0)
                if j0 == 0 and j1 == n:
                    _upper_accumulate2(work, w, values, sums, n)
                else:
                    _upper_accumulate2_block(work, w, values, sums, n, j0, j1)
                j0 = j1
                continue
            entries = _upper_scores(work, w, xt, qt, beta, n, d, slope, c, j0, j1)
            exp_inplace(work[w : w + entries], 0.0)
            if j0 == 0 and j1 == n:
                _upper_accumulate(work, w, values, sums, n, d)
            else:
                _upper_accumulate_block(work, w, values, sums, n, d, j0, j1)
            j0 = j1
        if h == 0:
            total = 0.0
            for i in range(n):
                total += work[sums + i]
            work[end - 2] = c
            work[end - 1] = total
        if d == 2 and heads == 1:
            _normalize2(work, sums, out, usa_weight, usa)
            continue
        for i in range(n):  # Z_i <- the weight 1/(H Z_i) of head h on row i
            a = usa_weight if usa else 1.0 / work[sums + i]
            work[sums + i] = a / heads if heads > 1 else a
        _combine(work, sums, tot, out, n, d, h, heads)
