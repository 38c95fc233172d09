"""Flat parameter vector of the attention flow on the sphere.

Scores are ``s_ij = beta <Q x_i, K x_j> = beta x_i^T M x_j`` with ``M = Q^T K``; the value map is
``V``. Every right-hand side (numba and JAX) reads one flat float64 vector ``p``:

=================  =========================================================
``p[0]``           beta (inverse temperature)
``p[1]``           normalization: 0.0 = SA (softmax, ``Z_i = sum_k e^{s_ik}``), 1.0 = USA (``Z_i = n``)
``p[2]``           d (token dimension, stored as a float)
``p[3]``           1.0 if M is the identity (numba skips the matmul), else 0.0
``p[4]``           1.0 if V is the identity (numba skips the matmul), else 0.0
``p[5:5+d*d]``     M = Q^T K, row-major
``p[5+d*d:5+2d*d]`` V, row-major
=================  =========================================================

The length is ``HEADER + 2 d^2`` whatever the flags, so a sweep over beta (or over the matrices)
keeps one shape and JAX compiles once. The JAX twin ignores the flags and always multiplies.
"""
from __future__ import annotations

import math

import numpy as np

HEADER = 5
IDX_BETA, IDX_NORM, IDX_DIM, IDX_M_IDENTITY, IDX_V_IDENTITY = range(HEADER)
NORMALIZATIONS = {"SA": 0.0, "USA": 1.0}


def param_size(d: int) -> int:
    """Length of ``p`` for token dimension ``d``: ``HEADER + 2 d^2``."""
    return HEADER + 2 * d * d


def _matrix(name: str, a, d: int) -> np.ndarray:
    if a is None:
        return np.eye(d)
    try:
        a = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric (d, d) matrix: {exc}") from None
    if a.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite entries")
    return a


def _normalization(normalization: str) -> float:
    key = str(normalization).upper()
    if key not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {sorted(NORMALIZATIONS)}, got {normalization!r}")
    return NORMALIZATIONS[key]


def pack_params(beta: float, d: int, normalization: str = "SA", Q=None, K=None, V=None) -> np.ndarray:
    """Pack ``(beta, normalization, Q, K, V)`` into the flat vector ``p`` (layout in the module doc).

    ``Q``, ``K``, ``V`` default to the identity; only ``M = Q^T K`` is stored.
    Raises ValueError on a non-finite beta, ``d < 2``, a wrong matrix shape or non-finite entries.
    """
    try:
        beta = float(beta)
    except (TypeError, ValueError):
        raise ValueError(f"beta must be a real number, got {beta!r}") from None
    if not math.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    if isinstance(d, bool) or int(d) != d or int(d) < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    d = int(d)
    norm = _normalization(normalization)
    q, k, v = _matrix("Q", Q, d), _matrix("K", K, d), _matrix("V", V, d)
    m = q.T @ k
    eye = np.eye(d)
    p = np.empty(param_size(d))
    p[IDX_BETA] = beta
    p[IDX_NORM] = norm
    p[IDX_DIM] = d
    p[IDX_M_IDENTITY] = 1.0 if np.array_equal(m, eye) else 0.0
    p[IDX_V_IDENTITY] = 1.0 if np.array_equal(v, eye) else 0.0
    p[HEADER:HEADER + d * d] = m.ravel()
    p[HEADER + d * d:] = v.ravel()
    return p


def unpack_params(p) -> dict:
    """Inverse of :func:`pack_params` (for inspection): beta, normalization, d, M, V and flags."""
    p = np.asarray(p, dtype=np.float64)
    d = int(p[IDX_DIM])
    if p.shape != (param_size(d),):
        raise ValueError(f"p has length {p.size}, expected {param_size(d)} for d = {d}")
    return {
        "beta": float(p[IDX_BETA]),
        "normalization": "USA" if p[IDX_NORM] != 0.0 else "SA",
        "d": d,
        "M": p[HEADER:HEADER + d * d].reshape(d, d).copy(),
        "V": p[HEADER + d * d:].reshape(d, d).copy(),
        "M_identity": bool(p[IDX_M_IDENTITY]),
        "V_identity": bool(p[IDX_V_IDENTITY]),
    }


def with_beta(p, beta: float) -> np.ndarray:
    """Copy of ``p`` with beta replaced (a sweep axis)."""
    q = np.array(p, dtype=np.float64, copy=True)
    q[IDX_BETA] = float(beta)
    return q
