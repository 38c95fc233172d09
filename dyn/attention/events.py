r"""Clusters over time: labels, merge events, and the share of tokens early tokens hold.

Clusters are the connected components of the graph {i ~ j : <x_i, x_j> > 1 - delta} (as in
:func:`dyn.attention.n_clusters`), labelled by their smallest token index
(:func:`dyn.attention.cluster_labels`).

Merge events of one run, from its clusterings at the save times t_0 < t_1 < ...: over the
interval (t_{k-1}, t_k] the cluster count falls by D_k = C_{k-1} - C_k. Each cluster at t_k that
gathers tokens of m >= 2 clusters of t_{k-1} is m - 1 candidate merges, joined in order of their
smallest token: sizes (a_1, a_2), (a_1 + a_2, a_3), ..., a_l the number of its tokens that came
from the l-th old cluster. There are at least D_k candidates (each old cluster meets a new one),
exactly D_k unless a cluster also split over the interval (seen before the clusters have formed).
The max(D_k, 0) candidates with the largest merged sizes are recorded, at time t_k: so every
recorded merge is one unit of a fall in the cluster count at a save time. The time resolution is
one save interval (log-spaced saves: a fixed ratio t_k / t_{k-1}).
"""

from __future__ import annotations

import numpy as np

from .observables import count_clusters


def merges(labels, times) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge events of one run from its labels (S, n) at the save times (S,): arrays of n - 1
    rows (time, size_a, size_b), NaN-padded after the last event. See the module doc."""
    labels = np.asarray(labels)
    times = np.asarray(times, dtype=np.float64)
    if labels.ndim != 2 or labels.shape[0] != times.shape[0]:
        raise ValueError(f"labels must be (saves, n) with one row per time, got {labels.shape}")
    n = labels.shape[1]
    rows = max(n - 1, 0)
    out = np.full((3, rows), np.nan)
    counts = count_clusters(labels)
    at = 0
    for k in range(1, len(times)):
        fall = counts[k - 1] - counts[k]
        if fall <= 0:
            continue
        candidates = []
        for new in np.unique(labels[k]):
            members = labels[k] == new
            old, parts = np.unique(labels[k - 1][members], return_counts=True)
            total = parts[0]  # old clusters in order of their smallest token
            for part in parts[1:]:
                candidates.append((total + part, total, part))
                total += part
        candidates.sort(key=lambda c: -c[0])  # stable: ties keep the token order
        for _, a, b in candidates[:fall]:
            if at < rows:
                out[:, at] = (times[k], a, b)
                at += 1
    return out[0], out[1], out[2]


def held_by(labels, first: int) -> np.ndarray:
    """Fraction of the tokens whose cluster contains one of the first `first` tokens (labels are
    smallest indices, so: label < first), shape (...)."""
    labels = np.asarray(labels)
    if int(first) < 1:
        raise ValueError(f"first must be >= 1, got {first}")
    return (labels < int(first)).mean(axis=-1)
