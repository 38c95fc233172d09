"""Initial token configurations on the sphere S^{d-1}."""

from __future__ import annotations

import numpy as np


def _shape(E, n, d):
    for name, v, lo in (("E", E, 1), ("n", n, 1), ("d", d, 2)):
        if isinstance(v, bool) or int(v) != v or int(v) < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(E), int(n), int(d)


def uniform_sphere(rng: np.random.Generator, E: int, n: int, d: int) -> np.ndarray:
    """(E, n, d) i.i.d. tokens uniform on S^{d-1}: x = g / |g| with g ~ N(0, I_d)."""
    E, n, d = _shape(E, n, d)
    g = rng.standard_normal((E, n, d))
    return g / np.linalg.norm(g, axis=-1, keepdims=True)


def hemisphere(rng: np.random.Generator, E: int, n: int, d: int, pole=None) -> np.ndarray:
    """(E, n, d) i.i.d. tokens uniform on the open hemisphere {x : <x, u> > 0}, u = pole/|pole|
    (default e_1): uniform tokens reflected through the plane u^perp when <x, u> < 0."""
    E, n, d = _shape(E, n, d)
    u = np.zeros(d) if pole is None else np.array(pole, dtype=np.float64)
    if pole is None:
        u[0] = 1.0
    if u.shape != (d,) or not np.all(np.isfinite(u)) or not np.any(u):
        raise ValueError(f"pole must be a finite non-zero vector of length {d}")
    u = u / np.linalg.norm(u)
    x = uniform_sphere(rng, E, n, d)
    c = x @ u
    while np.any(c == 0.0):  # measure zero; resample so the hemisphere is open
        bad = c == 0.0
        x[bad] = uniform_sphere(rng, 1, int(bad.sum()), d)[0]
        c = x @ u
    x -= 2.0 * np.minimum(c, 0.0)[..., None] * u
    return x
