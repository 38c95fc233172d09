r"""Brownian increments on the integrators' step grid, for driving solves by one given path.

Noise reaches an SDE solve either from a numpy Generator ``rng`` (each backend derives its own
per-member streams from it: same rng state, same numbers, whatever the thread count) or from
explicit ``increments`` of shape (E, N, q1, q2) on the step grid of
:func:`integrators.base.step_grid` (N = total steps; entry [e, k] = W_{t_{k+1}} - W_{t_k}).
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
