"""Flat parameter vector of the random-initialization transformer and its SDE limit.

=================  =========================================================================
``p[0]``           beta on unit tokens (scores ``beta <z_i, z_j>``; already converted from the
                   ``sqrt_d`` convention, see :func:`effective_beta`)
``p[1]``           sigma (value-matrix noise scale, see ``p[4]``)
``p[2]``           vbar (deterministic value part ``Vbar = vbar I``; vbar = 1, sigma = 0 is SA);
                   ignored when a matrix follows
``p[3]``           d (token dimension, as a float)
``p[4]``           noise law: 0 = ``"gaussian"`` (G_k with i.i.d. N(0, sigma^2/d) entries),
                   1 = ``"goe"`` (G_k = sigma/sqrt(d) (A + A^T)/sqrt(2), A i.i.d. N(0, 1): symmetric,
                   off-diagonal variance sigma^2/d, diagonal variance 2 sigma^2/d)
``p[5:5 + d*d]``   optional: a general Vbar (d x d, row-major). ``len(p) == 5``: Vbar = vbar I
=================  =========================================================================
"""
from __future__ import annotations

import math

import numpy as np

IDX_BETA, IDX_SIGMA, IDX_VBAR, IDX_DIM, IDX_NOISE = range(5)
SIZE = 5  # header; a general Vbar follows it when present
SCORES = ("unit", "sqrt_d")
NOISES = ("gaussian", "goe")


def effective_beta(beta: float, d: int, score: str = "unit") -> float:
    """beta on unit tokens. ``score = "sqrt_d"``: scores (beta / sqrt d) <x_i, x_j> on tokens
    of norm sqrt(d), i.e. beta sqrt(d) <z_i, z_j> on the unit tokens z = x / sqrt(d)."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    return float(beta) * (math.sqrt(d) if score == "sqrt_d" else 1.0)


def pack(beta: float, d: int, sigma: float = 1.0, vbar: float = 0.0, score: str = "unit",
         noise: str = "gaussian", Vbar=None) -> np.ndarray:
    """The flat ``p`` (layout in the module doc). ``Vbar`` (d x d), when given, overrides
    ``vbar``."""
    if isinstance(d, bool) or int(d) != d or int(d) < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    d = int(d)
    values = (float(beta), float(sigma), float(vbar))
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"beta, sigma, vbar must be finite, got {values}")
    if values[1] < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    head = [effective_beta(beta, d, score), values[1], values[2], float(d),
            float(NOISES.index(noise))]
    if Vbar is None:
        return np.array(head)
    V = np.asarray(Vbar, dtype=np.float64)
    if V.shape != (d, d) or not np.all(np.isfinite(V)):
        raise ValueError(f"Vbar must be a finite {d} x {d} matrix, got shape {V.shape}")
    return np.concatenate([head, V.ravel()])


def noise_law(p) -> str:
    """``"gaussian"`` or ``"goe"``, from a packed ``p``."""
    return NOISES[int(p[IDX_NOISE])]


def has_matrix(p) -> bool:
    """True when ``p`` carries a general Vbar (not vbar I)."""
    return len(p) > SIZE
