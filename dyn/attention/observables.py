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

from integrators.jit import njit
from integrators.numba_abi import NJIT
from integrators.threads import over_members


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


@njit(types.void(types.float64[:, :, ::1], types.float64, types.float64, types.float64[:, ::1]),
      **NJIT)
def _pair_kernel(x, threshold, beta, out):
    m, n, d = x.shape
    pairs = n * (n - 1) // 2
    for b in range(m):
        close = 0
        lowest = 1.0
        total = 0.0
        for i in range(n):
            for j in range(i, n):
                g = 0.0
                for k in range(d):
                    g += x[b, i, k] * x[b, j, k]
                if j == i:
                    total += math.exp(beta * g)
                    continue
                total += 2.0 * math.exp(beta * g)
                if g > threshold:
                    close += 1
                if g < lowest or g != g:  # NaN wins: a blown-up state must not look clustered
                    lowest = g
        out[b, 0] = close / pairs if pairs else 1.0
        out[b, 1] = lowest
        out[b, 2] = total


def pair_statistics(x, delta: float, beta: float) -> np.ndarray:
    """[pair_fraction, min_inner, energy_usa] of each configuration, shape (..., 3), in one pass
    without forming the Gram matrices (a sweep point's states would need hundreds of MB).
    The energy is NaN at beta = 0, where E = 1/(2 beta n^2) sum_ij e^{beta G_ij} is undefined."""
    delta = _delta(delta)
    beta = float(beta)
    if not np.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    x = _tokens(x)
    n = x.shape[-2]
    flat = np.ascontiguousarray(x.reshape((-1,) + x.shape[-2:]))
    out = np.empty((flat.shape[0], N_PAIR_STATS))
    over_members(flat.shape[0], lambda a, b: _pair_kernel(flat[a:b], 1.0 - delta, beta, out[a:b]))
    out[:, 2] = out[:, 2] / (2.0 * beta * n * n) if beta != 0.0 else np.nan
    return out.reshape(x.shape[:-2] + (N_PAIR_STATS,))


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


@njit(types.int64(types.int64[::1], types.int64), link=True, **NJIT)
def _find(parent, i):
    root = i
    while parent[root] != root:
        root = parent[root]
    while parent[i] != root:  # path compression
        nxt = parent[i]
        parent[i] = root
        i = nxt
    return root


@njit(types.void(types.float64[:, :, ::1], types.float64, types.int64[:, ::1]), **NJIT)
def _labels_kernel(x, threshold, out):
    m, n, d = x.shape
    for b in range(m):
        parent = np.arange(n)
        for i in range(n):
            for j in range(i + 1, n):
                g = 0.0
                for k in range(d):
                    g += x[b, i, k] * x[b, j, k]
                if g > threshold:
                    ri = _find(parent, i)
                    rj = _find(parent, j)
                    if ri != rj:
                        parent[max(ri, rj)] = min(ri, rj)
        for i in range(n):
            out[b, i] = _find(parent, i)


def cluster_labels(x, delta: float) -> np.ndarray:
    """Cluster of every token: the connected components of the graph linking i, j when
    <x_i, x_j> > 1 - delta (union-find per configuration), each labelled by its smallest token
    index; int64 array of shape (..., n)."""
    delta = _delta(delta)
    x = _tokens(x)
    flat = np.ascontiguousarray(x.reshape((-1,) + x.shape[-2:]))
    out = np.empty(flat.shape[:2], dtype=np.int64)
    over_members(flat.shape[0], lambda a, b: _labels_kernel(flat[a:b], 1.0 - delta, out[a:b]))
    return out.reshape(x.shape[:-1])


def n_clusters(x, delta: float) -> np.ndarray:
    """Number of connected components of the graph linking i, j when <x_i, x_j> > 1 - delta,
    int64 array of shape (...)."""
    return count_clusters(cluster_labels(x, delta))


def count_clusters(labels) -> np.ndarray:
    """Number of clusters of labellings (..., n) by smallest index: the tokens labelling
    their own cluster."""
    labels = np.asarray(labels)
    return (labels == np.arange(labels.shape[-1])).sum(axis=-1).astype(np.int64)
