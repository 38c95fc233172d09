"""Observables of token configurations, vectorized over leading axes: ``x`` has shape (..., n, d).

With ``G_ij = <x_i, x_j>``:
- ``energy_usa``:    E(X) = 1/(2 beta n^2) sum_ij exp(beta G_ij)  (increases along the USA flow, V = I)
- ``pair_fraction``: fraction of unordered pairs i < j with G_ij > 1 - delta
- ``n_clusters``:    connected components of the graph {i ~ j : G_ij > 1 - delta}
- ``cluster_labels``: those components, each labelled by its smallest token index
- ``min_inner``:     min_{i<j} G_ij  (-> 1 as the tokens collapse to one point)
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import F1, F2, F3, NJIT
from integrators.numba.jit import njit
from integrators.numba.threads import over_members

from ..numerics.vexp import exp_inplace, row_sum


def _tokens(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2 or x.shape[-1] < 1 or x.shape[-2] < 1:
        raise ValueError(f"x must have shape (..., n, d), got {x.shape}")
    return x


def _delta(delta) -> float:
    delta = float(delta)
    if not np.isfinite(delta) or delta < 0:
        raise ValueError(f"delta must be finite and >= 0, got {delta}")
    return delta


# One pass over the pairs of each configuration: [pair fraction, min inner product, sum_ij e^{beta G_ij}]
N_PAIR_STATS = 3


@njit(types.float64(F1), **NJIT, fastmath={"nnan", "nsz"})
def _least(row):
    """min_j row[j], 1 if empty; NaN entries are the caller's to detect (the reduction
    vectorizes only when it may assume there are none)."""
    m = 1.0
    for j in range(row.shape[0]):
        v = row[j]
        m = v if v < m else m
    return m


@njit(types.float64(F1, F1, types.float64, types.int64), **NJIT)
def _exp_sum(g, w, beta, n):
    """sum_ij e^{beta G_ij} from the upper triangle g of G (rows of n - i entries), as
    e^shift sum e^{beta g - shift} with the largest exponent as shift; `w`: scratch.
    n^2 at beta = 0 (the callers that pass 0 want no energy: no exps)."""
    if beta == 0.0:
        return float(n * n)
    size = g.shape[0]
    shift = -np.inf
    for a in range(size):
        w[a] = beta * g[a]
        if w[a] > shift or w[a] != w[a]:  # NaN sticks
            shift = w[a]
    if not math.isfinite(shift):
        return shift if shift != -np.inf else 0.0  # NaN or inf passes through
    exp_inplace(w, shift)
    diagonal = 0.0
    at = 0
    for i in range(n):
        diagonal += w[at]
        at += n - i
    return math.exp(shift) * (2.0 * row_sum(w) - diagonal)  # the diagonal + twice i < j


@njit(
    types.void(F2, types.float64, types.float64, types.boolean, F1, F1, F2, types.int64[::1], F1),
    **NJIT,
)
def _pair_pass(x, threshold, beta, join, g, w, xt, parent, stats):
    """One configuration x (n, d): stats[:3] <- [pair fraction, min inner, sum_ij e^{beta G_ij}]
    and, if `join`, parent <- the clusters of {i ~ j : G_ij > threshold} (union-find, smallest
    index; without `join` parent is left as it was). Scratch: g, w (n(n+1)/2 floats each), xt
    (d, n).
    The upper triangle of G (diagonal included, row by row) is formed once; its exps go through
    the vectorised exp (:mod:`dyn.numerics.vexp`), shifted by their maximum."""
    n, d = x.shape
    pairs = n * (n - 1) // 2
    for i in range(n):
        for k in range(d):
            xt[k, i] = x[i, k]
    at = 0
    for i in range(n):  # row i of the triangle: G_ii, G_i,i+1, ..., G_i,n-1
        length = n - i
        row = g[at : at + length]
        for j in range(length):
            row[j] = 0.0
        for k in range(d):
            xik = xt[k, i]
            col = xt[k, i:]
            for j in range(length):
                row[j] += xik * col[j]
        at += length
    if join:
        for i in range(n):
            parent[i] = i
    close = 0
    lowest = 1.0
    nan = False
    at = 0
    for i in range(n - 1):  # the pairs i < j of row i: counted in branch-free loops that
        row = g[at + 1 : at + n - i]  # vectorize, joined only where a pair is close
        near = 0
        for j in range(row.shape[0]):
            near += row[j] > threshold
            nan |= row[j] != row[j]
        lowest = min(lowest, _least(row))
        close += near
        if near and join:
            ri = _find(parent, i)  # a root is the smallest token of its cluster
            for j in range(row.shape[0]):
                if row[j] > threshold:
                    rj = _find(parent, i + 1 + j)
                    if ri != rj:
                        parent[max(ri, rj)] = min(ri, rj)
                        ri = min(ri, rj)
        at += n - i
    if nan:  # NaN wins: a blown-up state must not look clustered
        lowest = np.nan
    if join:
        for i in range(n):
            parent[i] = _find(parent, i)
    stats[0] = close / pairs if pairs else 1.0
    stats[1] = lowest
    stats[2] = _exp_sum(g, w, beta, n)


@njit(inline="always", **NJIT)
def _circle_columns(x, xt):
    """xt <- x (n, 2) by columns; returns its two rows (contiguous coordinates of the tokens)."""
    for i in range(x.shape[0]):
        xt[0, i] = x[i, 0]
        xt[1, i] = x[i, 1]
    return xt[0], xt[1]


@njit(types.float64(F2, types.float64, F2), **NJIT)
def close_fraction(x, threshold, xt):
    """The pair fraction of :func:`_pair_pass` for one configuration x (n, 2) alone, bit for
    bit: the same sums G_ij = (0 + x_i1 x_j1) + x_i2 x_j2, counted in one loop per row that
    keeps nothing (a few times faster than the pass, whose rows are kept for the min, the
    exps and the labels). Scratch: xt (2, n). Kept apart from any union-find: with one in the
    same function LLVM vectorized none of these loops."""
    n = x.shape[0]
    pairs = n * (n - 1) // 2
    x0, x1 = _circle_columns(x, xt)
    close = 0
    for i in range(n - 1):
        a0 = x0[i]
        a1 = x1[i]
        c0 = x0[i + 1 :]
        c1 = x1[i + 1 :]
        near = 0
        for j in range(n - 1 - i):
            near += ((0.0 + a0 * c0[j]) + a1 * c1[j]) > threshold
        close += near
    return close / pairs if pairs else 1.0


@njit(types.UniTuple(types.float64, 2)(F2, types.float64, F2, F1, F1), **NJIT)
def close_rows(x, threshold, xt, g, near_rows):
    """(pair fraction, min inner product) of :func:`_pair_pass` for one configuration x (n, 2),
    bit for bit, g <- the rows of the upper triangle one after the other (row i:
    G_i,i+1 .. G_i,n-1; n(n - 1)/2 floats) and near_rows[i] <- the close pairs of row i, for
    :func:`join_rows`: each row formed, counted and checked for NaN in one loop, the min in one
    pass over the whole triangle. Scratch: xt (2, n). No union-find here: with one in the same
    function LLVM vectorized none of these loops."""
    n = x.shape[0]
    pairs = n * (n - 1) // 2
    x0, x1 = _circle_columns(x, xt)
    close = 0
    nan = False
    at = 0
    for i in range(n - 1):
        length = n - 1 - i
        a0 = x0[i]
        a1 = x1[i]
        c0 = x0[i + 1 :]
        c1 = x1[i + 1 :]
        row = g[at : at + length]
        near = 0
        for j in range(length):
            v = (0.0 + a0 * c0[j]) + a1 * c1[j]
            row[j] = v
            near += v > threshold
            nan |= v != v
        close += near
        near_rows[i] = near
        at += length
    lowest = min(1.0, _least_lanes(g, at))
    if nan:  # NaN wins: a blown-up state must not look clustered
        lowest = np.nan
    return close / pairs if pairs else 1.0, lowest


@njit(types.float64(F1, types.int64), **NJIT)
def _least_lanes(g, count):
    """min of g[:count] (inf if empty) in four independent lanes: a compare-and-select chain
    does not vectorize, four chains overlap (the min is exact in any order; NaN is the
    caller's to detect)."""
    m0 = m1 = m2 = m3 = np.inf
    quads = count - count % 4
    for j in range(0, quads, 4):
        v0 = g[j]
        v1 = g[j + 1]
        v2 = g[j + 2]
        v3 = g[j + 3]
        m0 = v0 if v0 < m0 else m0
        m1 = v1 if v1 < m1 else m1
        m2 = v2 if v2 < m2 else m2
        m3 = v3 if v3 < m3 else m3
    for j in range(quads, count):
        v = g[j]
        m0 = v if v < m0 else m0
    return min(min(m0, m1), min(m2, m3))


@njit(types.void(F1, types.int64, types.float64, types.boolean, F1, types.int64[::1]), **NJIT)
def join_rows(g, n, threshold, every, near_rows, parent):
    """parent <- the clusters of {i ~ j : G_ij > threshold} from the rows and row counts of
    :func:`close_rows` (union-find over the rows holding a close pair, each cluster labelled by
    its smallest token, as the pair pass); `every`: every pair is close (one cluster, labelled
    0, without the union-find)."""
    if every:
        for i in range(n):
            parent[i] = 0
        return
    for i in range(n):
        parent[i] = i
    at = 0
    for i in range(n - 1):
        length = n - 1 - i
        if near_rows[i] == 0.0:
            at += length
            continue
        ri = -1
        for j in range(length):
            if g[at + j] > threshold:
                if ri < 0:
                    ri = _find(parent, i)  # a root is the smallest token of its cluster
                rj = _find(parent, i + 1 + j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
                    ri = min(ri, rj)
        at += length
    for i in range(n):
        parent[i] = _find(parent, i)


@njit(types.void(F3, types.float64, types.float64, F2, types.int64[:, ::1], types.boolean), **NJIT)
def _pairs_kernel(x, threshold, beta, stats, labels, join):
    """Per configuration b: stats[b] <- [pair fraction, min inner, sum_ij e^{beta G_ij}] and,
    if `join`, labels[b] <- the clusters (:func:`_pair_pass`)."""
    m, n, d = x.shape
    size = n * (n + 1) // 2
    g = np.empty(size)
    w = np.empty(size)
    xt = np.empty((d, n))
    for b in range(m):
        _pair_pass(x[b], threshold, beta, join, g, w, xt, labels[b], stats[b])


def _pairs(x, delta: float, beta: float, join: bool) -> tuple[np.ndarray, np.ndarray]:
    """(stats (m, 3), labels (m, n); without `join`, (m, 1) of scratch) of the configurations
    of x (..., n, d), flattened."""
    flat = np.ascontiguousarray(x.reshape((-1,) + x.shape[-2:]))
    stats = np.empty((flat.shape[0], N_PAIR_STATS))
    labels = np.empty((flat.shape[0], flat.shape[1] if join else 1), dtype=np.int64)
    over_members(flat.shape[0], lambda a, b: _pairs_kernel(flat[a:b], 1.0 - delta, beta, stats[a:b], labels[a:b], join))
    return stats, labels


def pair_statistics(x, delta: float, beta: float) -> np.ndarray:
    """[pair_fraction, min_inner, energy_usa] of each configuration, shape (..., 3), in one pass
    without forming the Gram matrices (a sweep point's states would need hundreds of MB).
    The energy is NaN at beta = 0, where E = 1/(2 beta n^2) sum_ij e^{beta G_ij} is undefined."""
    return pairs_and_clusters(x, delta, beta, labels=False)[0]


def pairs_and_clusters(x, delta: float, beta: float, labels: bool = True):
    """:func:`pair_statistics` (..., 3) and :func:`cluster_labels` (..., n) from one pass over
    the pairs of each configuration; with ``labels=False`` the union-find is skipped and the
    labels are None (the statistics are the same)."""
    delta = _delta(delta)
    beta = float(beta)
    if not np.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    x = _tokens(x)
    n = x.shape[-2]
    stats, found = _pairs(x, delta, beta, bool(labels))
    stats[:, 2] = stats[:, 2] / (2.0 * beta * n * n) if beta != 0.0 else np.nan
    stats = stats.reshape(x.shape[:-2] + (N_PAIR_STATS,))
    return stats, found.reshape(x.shape[:-1]) if labels else None


def energy_usa(x, beta: float) -> np.ndarray:
    """E(X) = 1/(2 beta n^2) sum_{i,j} exp(beta <x_i, x_j>), shape (...)."""
    beta = float(beta)
    if not np.isfinite(beta) or beta == 0.0:
        raise ValueError(f"beta must be finite and non-zero, got {beta}")
    return pair_statistics(x, 0.0, beta)[..., 2]


def pair_fraction(x, delta: float) -> np.ndarray:
    """Fraction of unordered pairs i < j with <x_i, x_j> > 1 - delta, shape (...); 1 if n = 1."""
    return pair_statistics(x, delta, 0.0)[..., 0]


def min_inner(x) -> np.ndarray:
    """min_{i<j} <x_i, x_j>, shape (...); +1 if n = 1."""
    return pair_statistics(x, 0.0, 0.0)[..., 1]


@njit(types.int64(types.int64[::1], types.int64), **NJIT)
def _find(parent, i):
    root = i
    while parent[root] != root:
        root = parent[root]
    while parent[i] != root:  # path compression
        nxt = parent[i]
        parent[i] = root
        i = nxt
    return root


def cluster_labels(x, delta: float) -> np.ndarray:
    """Cluster of every token: the connected components of the graph linking i, j when
    <x_i, x_j> > 1 - delta (union-find per configuration), each labelled by its smallest token
    index; int64 array of shape (..., n)."""
    return pairs_and_clusters(x, delta, 0.0)[1]


def n_clusters(x, delta: float) -> np.ndarray:
    """Number of connected components of the graph linking i, j when <x_i, x_j> > 1 - delta,
    int64 array of shape (...)."""
    return count_clusters(cluster_labels(x, delta))


def count_clusters(labels) -> np.ndarray:
    """Number of clusters of labellings (..., n) by smallest index: the tokens labelling
    their own cluster."""
    labels = np.asarray(labels)
    return (labels == np.arange(labels.shape[-1])).sum(axis=-1).astype(np.int64)
