r"""Brownian increments on the integrators' step grid, for driving solves by one given path.

Noise reaches an SDE solve either from a numpy Generator ``rng`` (each backend derives its own
per-member streams from it: same rng state, same numbers, whatever the thread count) or from
explicit ``increments`` of shape (E, N, q1, q2) on the step grid of
:func:`integrators.core.base.step_grid` (N = total steps; entry [e, k] = W_{t_{k+1}} - W_{t_k}).
Explicit increments are how two schemes are driven by one path (coupling, backend agreement).
"""

import numpy as np

from .base import check_times, step_grid


def brownian_increments(rng: np.random.Generator, members: int, ts, dt, noise_shape) -> np.ndarray:
    """(E, N, q1, q2) increments of a standard Brownian motion on the step grid of (ts, dt)."""
    counts, steps = step_grid(check_times(ts), dt)
    scale = np.repeat(np.sqrt(steps), counts)
    z = rng.standard_normal((int(members), int(counts.sum())) + tuple(noise_shape))
    return z * scale[None, :, None, None]


def coarsen(increments: np.ndarray, factor: int) -> np.ndarray:
    """Sum consecutive blocks of ``factor`` increments along axis 1: the same path on a grid
    ``factor`` times coarser."""
    E, N = increments.shape[:2]
    if N % factor:
        raise ValueError(f"{N} steps are not a multiple of {factor}")
    return increments.reshape((E, N // factor, factor) + increments.shape[2:]).sum(axis=2)


def dyadic_increments(rngs, horizon: float, steps: int, noise_shape) -> np.ndarray:
    """(E, steps, q1, q2) increments of one Brownian path per generator in `rngs`, on `steps`
    equal steps of [0, horizon] (a power of two), built level by level (Levy's construction):

        W(T) = sqrt(T) Z_0;   W(m) = (W(a) + W(b)) / 2 + sqrt((b - a) / 4) Z   at each midpoint m,

    with the normals Z drawn in level order. Level l only reads the first 2^l draws, so the path
    on 2^l steps is exactly the path on 2^(l+1) steps seen at every other point: depths that
    differ by powers of two see one and the same Brownian motion, refined consistently.
    """
    steps = int(steps)
    if steps < 1 or steps & (steps - 1):
        raise ValueError(f"a dyadic path needs a power-of-two number of steps, got {steps}")
    shape = tuple(int(q) for q in noise_shape)
    out = np.empty((len(rngs), steps) + shape)
    for e, rng in enumerate(rngs):
        z = rng.standard_normal((steps,) + shape)
        w = np.zeros((steps + 1,) + shape)
        w[steps] = np.sqrt(horizon) * z[0]
        width, used = steps, 1  # grid spacing (in steps) of the current level, normals used
        while width > 1:
            half = width // 2
            left, right = w[0 : steps - half : width], w[width::width]
            sd = np.sqrt(horizon * half / steps / 2.0)  # sqrt((b - a) / 4), b - a = 2 half h
            count = left.shape[0]
            w[half::width] = 0.5 * (left + right) + sd * z[used : used + count]
            used += count
            width = half
        out[e] = np.diff(w, axis=0)
    return out
