r"""Observables of token configurations x of shape (..., n, d), vectorized over leading axes.

- ``order_parameter``: r = |(1/n) sum_i x_i|, 0 for a uniform law (O(n^{-1/2}) for n i.i.d.
  uniform tokens: E r^2 = 1/n), 1 for one point;
- ``circle_modes`` (d = 2): r_k = |(1/n) sum_i e^{i k theta_i}|, k = 1..K (r_1 = r);
- ``circle_clusters`` (d = 2): clusters by single linkage at <x_i, x_j> > 1 - delta, i.e. the
  number of gaps wider than arccos(1 - delta) between neighbouring angles (O(n log n));
  ``clusters`` is the same count in any d by union-find over the pairs (O(n^2));
- ``interaction_energy``: E = (1/(2 beta n^2)) sum_ij e^{beta <x_i,x_j>}; on the circle by the
  Fourier series (1/(2 beta)) sum_k I_k(beta) |S_k|^2 in O(nK) (S_k the moments), else by pairs;
- ``window_mean``: the time average of a saved series over the trailing window [start, T].
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics.bessel import circle_coefficients, fourier_order


def _tokens(x, d: int | None = None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2 or x.shape[-2] < 1 or x.shape[-1] < 2:
        raise ValueError(f"x must have shape (..., n, d) with n >= 1, d >= 2, got {x.shape}")
    if d is not None and x.shape[-1] != d:
        raise ValueError(f"x must have d = {d} (last axis), got shape {x.shape}")
    return x


def order_parameter(x) -> np.ndarray:
    """r = |mean_i x_i|, shape (...)."""
    x = _tokens(x)
    return np.linalg.norm(x.mean(axis=-2), axis=-1)


def circle_moments(x, K: int) -> np.ndarray:
    """S_k = (1/n) sum_i e^{i k theta_i}, k = 1..K, complex (..., K); d = 2."""
    x = _tokens(x, 2)
    if isinstance(K, bool) or int(K) != K or K < 1:
        raise ValueError(f"K must be an integer >= 1, got {K!r}")
    w = (x[..., 0] + 1j * x[..., 1]) / np.hypot(x[..., 0], x[..., 1])
    out = np.empty(x.shape[:-2] + (int(K),), dtype=np.complex128)
    power = np.ones_like(w)
    for k in range(int(K)):
        power = power * w
        out[..., k] = power.mean(axis=-1)
    return out


def circle_modes(x, K: int = 6) -> np.ndarray:
    """r_k = |S_k|, k = 1..K, shape (..., K); d = 2."""
    return np.abs(circle_moments(x, K))


def _delta(delta) -> float:
    delta = float(delta)
    if not (math.isfinite(delta) and 0 <= delta <= 2):
        raise ValueError(f"delta must be in [0, 2], got {delta}")
    return delta


def circle_clusters(x, delta: float) -> np.ndarray:
    """Single-linkage clusters at <x_i, x_j> > 1 - delta on the circle, int64 (...)."""
    x = _tokens(x, 2)
    gap = math.acos(1.0 - _delta(delta))
    theta = np.sort(np.arctan2(x[..., 1], x[..., 0]), axis=-1)
    gaps = np.diff(theta, axis=-1, append=theta[..., :1] + 2 * math.pi)
    count = np.sum(gaps >= gap, axis=-1)
    return np.maximum(count, 1).astype(np.int64)


def clusters(x, delta: float) -> np.ndarray:
    """Single-linkage clusters at <x_i, x_j> > 1 - delta in any d, int64 (...)."""
    from ..attention.observables import n_clusters

    return n_clusters(_tokens(x), _delta(delta))


def interaction_energy(x, beta: float, tol: float = 1e-12) -> np.ndarray:
    """E = (1/(2 beta n^2)) sum_ij e^{beta <x_i, x_j>}, shape (...); NaN at beta = 0. On the
    circle by the Fourier series (relative error below tol), else by pairs."""
    x = _tokens(x)
    beta = float(beta)
    if not math.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    if beta == 0.0:
        return np.full(x.shape[:-2], np.nan)
    if x.shape[-1] == 2:
        K = max(fourier_order(beta, tol), 1)
        c = circle_coefficients(beta, K)
        S2 = np.abs(circle_moments(x, K)) ** 2
        total = c[0] + 2.0 * (S2 @ c[1:])
        return total * math.exp(abs(beta)) / (2.0 * beta)
    flat = np.ascontiguousarray(x.reshape((-1,) + x.shape[-2:]))
    out = np.array([np.exp(beta * (z @ z.T)).mean() for z in flat])
    return (out / (2.0 * beta)).reshape(x.shape[:-2])


def window_mean(values, times, start: float) -> np.ndarray:
    """Mean over the save times t >= start of values (..., T) (last axis = time)."""
    times = np.asarray(times, dtype=np.float64)
    keep = times >= start
    if not keep.any():
        raise ValueError(f"no save time in the window [{start}, {times[-1]}]")
    return np.asarray(values)[..., keep].mean(axis=-1)
