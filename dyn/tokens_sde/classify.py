r"""End states: pair classification, the n-token census, and Wilson intervals.

rho rounds to +-1 long before a run is decided, so classes are read from
log|z_i - z_j|^2 and log|z_i + z_j|^2 (computed from the differences, which keep their relative
precision down to ~1e-300) against a threshold (default -20: |z_i -+ z_j| < 4.5e-5).

- pair (two tokens): CLUSTER if log|z_1 - z_2|^2 < threshold, ANTIPODAL if
  log|z_1 + z_2|^2 < threshold, else UNDECIDED.
- census (n tokens): ONE_CLUSTER if every pair is within threshold of coinciding; TWO_ANTIPODAL
  if the tokens split into two non-empty groups, coinciding within each group and antipodal
  across; else OTHER.
"""

from __future__ import annotations

import numpy as np

from ..core.stats import wilson  # noqa: F401 - re-exported: end-state probabilities come with it

UNDECIDED, CLUSTER, ANTIPODAL = 0, 1, 2
OTHER, ONE_CLUSTER, TWO_ANTIPODAL = 0, 1, 2
THRESHOLD = -20.0


def log_gaps(z):
    """(log|z_i - z_j|^2, log|z_i + z_j|^2) for all pairs: z (..., n, d) -> two (..., n, n)."""
    z = np.asarray(z, dtype=float)
    diff = z[..., :, None, :] - z[..., None, :, :]
    summ = z[..., :, None, :] + z[..., None, :, :]
    with np.errstate(divide="ignore"):
        return np.log(np.sum(diff**2, -1)), np.log(np.sum(summ**2, -1))


def classify_pair(z, threshold: float = THRESHOLD) -> np.ndarray:
    """Class of each two-token state z (..., 2, d): UNDECIDED / CLUSTER / ANTIPODAL (int8)."""
    z = np.asarray(z, dtype=float)
    with np.errstate(divide="ignore"):
        minus = np.log(np.sum((z[..., 0, :] - z[..., 1, :]) ** 2, -1))
        plus = np.log(np.sum((z[..., 0, :] + z[..., 1, :]) ** 2, -1))
    out = np.full(minus.shape, UNDECIDED, dtype=np.int8)
    out[minus < threshold] = CLUSTER
    out[plus < threshold] = ANTIPODAL
    return out


def census(z, threshold: float = THRESHOLD) -> np.ndarray:
    """Census class of each state z (..., n, d): OTHER / ONE_CLUSTER / TWO_ANTIPODAL (int8)."""
    minus, plus = log_gaps(z)
    n = minus.shape[-1]
    close = minus < threshold
    anti = plus < threshold
    eye = np.eye(n, dtype=bool)
    close |= eye
    one = close.all(axis=(-2, -1))
    # group of token 0 (close to it) vs the others (antipodal to it); then check every pair
    side = close[..., 0, :]  # (..., n)
    same = side[..., :, None] == side[..., None, :]
    consistent = np.where(same, close, anti).all(axis=(-2, -1))
    two = consistent & ~side.all(axis=-1)
    out = np.full(one.shape, OTHER, dtype=np.int8)
    out[two] = TWO_ANTIPODAL
    out[one] = ONE_CLUSTER
    return out
