r"""Ito SDEs on an ensemble:  dX = f(t, X) dt + g(t, X)[dW_t]  on a manifold, and what their
solvers share.

``W`` is a standard Brownian motion with values in R^{q1 x q2} (the *control*; e.g. one d x d
matrix shared by all n rows of a member), independent across members. ``g(t, x)[dw]`` is linear
in ``dw`` and returns a state-shaped (n, d) increment; any scale (e.g. sigma / sqrt(d)) belongs to
g, so the integrators only ever draw N(0, h) entries.

Noise comes either from a numpy Generator ``rng`` (each backend derives its own per-member
streams from it: same rng state, same numbers, whatever the thread count) or from explicit
``increments`` of shape (E, N, q1, q2) on the step grid of :func:`integrators.base.step_grid`
(N = total steps; entry [e, k] = W_{t_{k+1}} - W_{t_k}). Explicit increments are how two schemes
are driven by one path (coupling, backend agreement).
"""

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .base import AbstractIntegrator, check_params, check_state, check_times, step_grid
from .geometry import EUCLIDEAN, Geometry


@dataclass(frozen=True, eq=False)
class SDEProblem:
    """dX = f(t, X; p) dt + g(t, X; p)[dW],  W in R^{noise_shape}, X in M subset R^{n x d}.

    - ``drift``: numba ``DRIFT_SIG`` function (the full Ito drift);
    - ``diffusion``: numba ``DIFFUSION_SIG`` function, ``out <- g(t, x; p)[dw]``;
    - ``drift_jax(t, x, p) -> f`` and ``diffusion_jax(t, x, p, dw) -> g[dw]`` (one member);
    - ``noise_shape``: (q1, q2) of the control;
    - ``geometry``: tangent projection and retraction (see the schemes for how they are used).
    """

    drift: Optional[Callable] = None
    diffusion: Optional[Callable] = None
    drift_jax: Optional[Callable] = None
    diffusion_jax: Optional[Callable] = None
    noise_shape: tuple = (1, 1)
    p: np.ndarray = field(default_factory=lambda: np.zeros(0))
    geometry: Geometry = EUCLIDEAN

    def __post_init__(self):
        p = np.array(self.p, dtype=np.float64, order="C")
        if p.ndim != 1:
            raise ValueError(f"SDEProblem.p must be a flat 1-D vector, got shape {p.shape}")
        p.setflags(write=False)
        object.__setattr__(self, "p", p)
        shape = tuple(int(q) for q in self.noise_shape)
        if len(shape) != 2 or min(shape) < 1:
            raise ValueError(f"noise_shape must be (q1, q2) with q1, q2 >= 1, got {self.noise_shape}")
        object.__setattr__(self, "noise_shape", shape)
        if not isinstance(self.geometry, Geometry):
            raise ValueError(f"SDEProblem.geometry must be a Geometry, got {self.geometry!r}")


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


class AbstractSDEIntegrator(AbstractIntegrator):
    """solve(problem, x0 (E, n, d), ts (T,), rng=..., increments=...) -> states (E, T, n, d)."""

    OPTIONS = {"dt": 1e-2}

    def _check_options(self):
        from .base import check_positive

        self.options["dt"] = check_positive("dt", self.options["dt"])

    def solve(self, problem, x0, ts, rng=None, increments=None) -> np.ndarray:
        if not isinstance(problem, SDEProblem):
            raise ValueError(
                f"problem must be an integrators.SDEProblem, got {type(problem).__name__}")
        x0 = check_state(x0)
        ts = check_times(ts)
        p = check_params(problem.p)
        counts, _ = step_grid(ts, self.options["dt"])
        if increments is not None:
            increments = np.ascontiguousarray(increments, dtype=np.float64)
            want = (x0.shape[0], int(counts.sum())) + problem.noise_shape
            if increments.shape != want:
                raise ValueError(f"increments must have shape {want} (E, steps, q1, q2), "
                                 f"got {increments.shape}")
        elif not isinstance(rng, np.random.Generator):
            raise ValueError("an SDE solve needs rng (a numpy Generator) or explicit increments")
        return self._solve_sde(problem, x0, ts, p, rng, increments)

    def _solve(self, problem, x0, ts, p):  # pragma: no cover - solve() is overridden
        raise NotImplementedError

    def _solve_sde(self, problem, x0, ts, p, rng, increments) -> np.ndarray:
        raise NotImplementedError
