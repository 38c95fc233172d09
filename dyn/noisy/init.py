r"""Initial token laws of noisy attention, (E, n, d) arrays of unit rows.

- ``uniform``: i.i.d. uniform on S^{d-1} (x = g/|g|, g ~ N(0, I_d));
- ``cluster``: every token at e_1 (no randomness drawn);
- ``perturbed_circle``: on the circle, the law (1 + 2a cos(k theta)) d theta / (2 pi), whose
  k-th moment int e^{ik theta} is a, sampled by inverting its distribution function
  F(theta) = theta/(2 pi) + a sin(k theta)/(pi k) at jittered strata u_j = (j + U_j)/n (U_j i.i.d.
  uniform): each token is still distributed by the law, and the empirical moments fluctuate by
  O(n^{-3/2}) instead of O(n^{-1/2}); a uniform random rotation by a multiple of 2 pi/k keeps
  the moment and decorrelates the runs' phases of the other modes.
"""

from __future__ import annotations

import math

import numpy as np

from ..attention.init import _shape, uniform_sphere

LAWS = ("uniform", "cluster")


# the uniform law and the shape checks are the attention package's (one implementation)
uniform_tokens = uniform_sphere


def cluster_tokens(E: int, n: int, d: int) -> np.ndarray:
    """(E, n, d) tokens all at e_1."""
    E, n, d = _shape(E, n, d)
    x = np.zeros((E, n, d))
    x[..., 0] = 1.0
    return x


def initial_tokens(law: str, rng: np.random.Generator, E: int, n: int, d: int) -> np.ndarray:
    """Tokens from ``law`` in LAWS."""
    if law == "uniform":
        return uniform_tokens(rng, E, n, d)
    if law == "cluster":
        return cluster_tokens(E, n, d)
    raise ValueError(f"init must be one of {LAWS}, got {law!r}")


def perturbed_circle(
    rng: np.random.Generator, E: int, n: int, k: int, amplitude: float, iterations: int = 60
) -> np.ndarray:
    """(E, n, 2) tokens of the law (1 + 2a cos k theta)/(2 pi) (module doc), |a| < 1/2."""
    E, n, _ = _shape(E, n, 2)
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    a = float(amplitude)
    if not abs(a) < 0.5:
        raise ValueError(f"amplitude must be in (-1/2, 1/2) (a positive density), got {a}")
    u = (np.arange(n) + rng.random((E, n))) / n
    theta = 2 * math.pi * u
    for _ in range(iterations):  # Newton on F(theta) = u; F' >= (1 - 2|a|)/(2 pi) > 0
        F = theta / (2 * math.pi) + a * np.sin(k * theta) / (math.pi * k)
        dF = (1.0 + 2.0 * a * np.cos(k * theta)) / (2 * math.pi)
        step = (F - u) / dF
        theta -= step
        if np.abs(step).max() < 1e-15:
            break
    theta += (2 * math.pi / k) * rng.integers(0, k, size=(E, 1))
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)
