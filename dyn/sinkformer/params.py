"""Flat parameter vector of the Sinkformer flows (numba and JAX read the same ``p``).

Scores: ``dot``: s_ij = x_i^T W x_j (W = W_Q^T W_K); ``sqdist``: s_ij = -|x_i - x_j|^2 / (2 tau).
Values: ``v_i = sum_j K_ij W_V x_j``, or with ``relative`` ``v_i = sum_j K_ij W_V (x_j - x_i)``.
K is softmax (one normalization) or Sinkhorn (``iterations`` alternating normalizations, or to a
marginal tolerance ``tol > 0`` with ``iterations`` as the cap).

=====================  ===================================================================
``p[0]``               iterations (>= 1; 1 is softmax)
``p[1]``               tol (0: exactly ``iterations`` normalizations)
``p[2]``               scores: 0.0 = dot, 1.0 = sqdist
``p[3]``               tau (bandwidth of ``sqdist``)
``p[4]``               1.0 if values act on x_j - x_i (relative), else 0.0
``p[5]``               d (token dimension, stored as a float)
``p[6]``               1.0 if the score matrix is symmetric (sqdist, or W symmetric), else 0.0
``p[7:7+d^2]``         W, row-major (identity for sqdist)
``p[7+d^2:7+2d^2]``    W_V, row-major
=====================  ===================================================================

The heat-diffusion setting (physics.md §2) is ``sqdist`` scores with ``relative`` values and
``W_V = -(2 alpha / tau) I``: ``v_i = -(2 alpha / tau) (sum_j K_ij x_j - x_i)`` (rows of K sum to 1).
"""
from __future__ import annotations

import math

import numpy as np

HEADER = 7
IDX_ITERS, IDX_TOL, IDX_SCORES, IDX_TAU, IDX_RELATIVE, IDX_DIM, IDX_SYMMETRIC = range(HEADER)
SCORES = {"dot": 0.0, "sqdist": 1.0}
NORMALIZATIONS = ("sinkhorn", "softmax")


def param_size(d: int) -> int:
    return HEADER + 2 * d * d


def _matrix(name, a, d):
    if a is None:
        return np.eye(d)
    a = np.asarray(a, dtype=np.float64)
    if a.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite entries")
    return a


def pack_params(d: int, normalization: str = "sinkhorn", iterations: int = 1, tol: float = 0.0,
                scores: str = "dot", tau: float = 1.0, W=None, WV=None,
                relative: bool = False) -> np.ndarray:
    """Pack a Sinkformer flow into ``p`` (layout in the module doc).

    ``normalization="softmax"`` forces one iteration and no tolerance. W and W_V default to the
    identity. Raises ValueError on a bad value.
    """
    if isinstance(d, bool) or int(d) != d or int(d) < 1:
        raise ValueError(f"d must be an integer >= 1, got {d!r}")
    d = int(d)
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    if scores not in SCORES:
        raise ValueError(f"scores must be one of {sorted(SCORES)}, got {scores!r}")
    if isinstance(iterations, bool) or int(iterations) != iterations or int(iterations) < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    tol, tau = float(tol), float(tau)
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be finite and >= 0, got {tol}")
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be finite and > 0, got {tau}")
    if normalization == "softmax":
        iterations, tol = 1, 0.0
    w = np.eye(d) if scores == "sqdist" else _matrix("W", W, d)
    wv = _matrix("WV", WV, d)
    p = np.empty(param_size(d))
    p[IDX_ITERS] = int(iterations)
    p[IDX_TOL] = tol
    p[IDX_SCORES] = SCORES[scores]
    p[IDX_TAU] = tau
    p[IDX_RELATIVE] = 1.0 if relative else 0.0
    p[IDX_DIM] = d
    p[IDX_SYMMETRIC] = 1.0 if np.array_equal(w, w.T) else 0.0
    p[HEADER:HEADER + d * d] = w.ravel()
    p[HEADER + d * d:] = wv.ravel()
    return p


def heat_params(d: int, alpha: float, tau: float, normalization: str = "sinkhorn",
                iterations: int = 1000, tol: float = 1e-9) -> np.ndarray:
    """The heat-diffusion setting: Gaussian kernel of bandwidth tau, W_V = -(2 alpha/tau) I on x_j - x_i."""
    alpha = float(alpha)
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    return pack_params(d, normalization, iterations, tol, "sqdist", tau,
                       WV=-(2.0 * alpha / float(tau)) * np.eye(int(d)), relative=True)


def unpack_params(p) -> dict:
    """Inverse of :func:`pack_params` (for inspection)."""
    p = np.asarray(p, dtype=np.float64)
    d = int(p[IDX_DIM])
    if p.shape != (param_size(d),):
        raise ValueError(f"p has length {p.size}, expected {param_size(d)} for d = {d}")
    return {
        "iterations": int(p[IDX_ITERS]), "tol": float(p[IDX_TOL]),
        "scores": "sqdist" if p[IDX_SCORES] != 0.0 else "dot", "tau": float(p[IDX_TAU]),
        "relative": bool(p[IDX_RELATIVE]), "d": d, "symmetric": bool(p[IDX_SYMMETRIC]),
        "W": p[HEADER:HEADER + d * d].reshape(d, d).copy(),
        "WV": p[HEADER + d * d:].reshape(d, d).copy(),
    }
