"""Flat parameter vector of the random-initialization transformer and its SDE limit.

=========  =================================================================================
``p[0]``   beta on unit tokens (scores ``beta <z_i, z_j>``; already converted from the
           ``sqrt_d`` convention, see :func:`effective_beta`)
``p[1]``   sigma (value-matrix noise: entries of G_k have variance sigma^2 / d)
``p[2]``   vbar (deterministic value part ``Vbar = vbar I``; vbar = 1, sigma = 0 is SA)
``p[3]``   d (token dimension, as a float)
=========  =================================================================================
"""
from __future__ import annotations

import math

import numpy as np

IDX_BETA, IDX_SIGMA, IDX_VBAR, IDX_DIM = range(4)
SIZE = 4
SCORES = ("unit", "sqrt_d")


def effective_beta(beta: float, d: int, score: str = "unit") -> float:
    """beta on unit tokens. ``score = "sqrt_d"``: scores (beta / sqrt d) <x_i, x_j> on tokens
    of norm sqrt(d), i.e. beta sqrt(d) <z_i, z_j> on the unit tokens z = x / sqrt(d)."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    return float(beta) * (math.sqrt(d) if score == "sqrt_d" else 1.0)


def pack(beta: float, d: int, sigma: float = 1.0, vbar: float = 0.0, score: str = "unit") -> np.ndarray:
    """The flat ``p`` (layout in the module doc)."""
    if isinstance(d, bool) or int(d) != d or int(d) < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    values = (float(beta), float(sigma), float(vbar))
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"beta, sigma, vbar must be finite, got {values}")
    if values[1] < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    return np.array([effective_beta(beta, int(d), score), values[1], values[2], float(int(d))])
