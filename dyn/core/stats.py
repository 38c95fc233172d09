"""Small statistics shared by the engine and the systems."""

from __future__ import annotations

import numpy as np

WILSON_Z = 1.959963984540054  # two-sided 95%


def wilson(k, n, z: float = WILSON_Z):
    """Wilson score interval (lo, hi) for k successes out of n trials (arrays broadcast): the p
    with (k/n - p)^2 = z^2 p (1 - p) / n. At k = 0 the lower root is p = 0 exactly, and at k = n
    the upper one is 1: written so, since centre - half would leave rounding there (1.7e-18)."""
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    p = k / n
    denom = 1.0 + z**2 / n
    centre = (p + z**2 / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
    lo = np.where(k == 0, 0.0, np.clip(centre - half, 0.0, 1.0))
    hi = np.where(k == n, 1.0, np.clip(centre + half, 0.0, 1.0))
    return lo, hi
