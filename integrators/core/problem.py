"""An initial-value problem, minus its initial state:

    dx = P_x f(t, x; p) dt  [+ P_x g(t, x; p)[dW_t]]     on a geometry,

an ODE, or an Ito SDE when a diffusion is given (W: a standard Brownian motion with values in
R^{q1 x q2}, the *control*, e.g. one d x d matrix shared by all n rows of a member,
independent across members; g is linear in dW and returns a state-shaped increment; any scale
such as sigma / sqrt(d) belongs to g, so the integrators only ever draw N(0, h) entries).

On the jax backend a problem may instead give its own one-step map (a network layer, an exact
sampler), x' = step(t, x; p, h, xi), and an absorbing set: stop(x; p) true ends the run.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace

import numpy as np

from .geometry import EUCLIDEAN, Geometry


@dataclass(frozen=True, eq=False)
class Problem:
    """The vector field(s) of an ensemble ODE or SDE.

    - ``drift``: numba ``integrators.numba.abi.DRIFT_SIG`` function (numba backend; for an SDE,
      the full Ito drift);
    - ``drift_jax``: pure ``(t, x, p) -> f`` on one member (diffrax and jax backends);
    - ``p``: flat float64 parameter vector, shared by all members; on the jax backend one row
      per point of a batch, (P, m) (:meth:`stack`);
    - ``geometry``: :class:`integrators.core.geometry.Geometry` giving P_x and the retraction;
    - ``diffusion`` / ``diffusion_jax``: ``integrators.numba.abi.DIFFUSION_SIG`` function and its
      JAX twin ``(t, x, p, dw) -> g[dw]``, with ``noise_shape`` = (q1, q2); None for an ODE;
    - ``work``: scratch floats a numba drift (or diffusion) needs per member: an int, or
      ``(n, d, p) -> int``;
    - ``step_jax``: ``(t, x, p, h, xi) -> x'``, the problem's own step on one member (the jax
      backend's ``step_map``), xi the step's noise of ``noise_shape``;
    - ``stop_jax``: ``(x, p) -> bool`` on one member, the absorbing set (the jax backend's
      ``absorbing`` solves).

    Either backend's functions may be None when that backend is not used.
    """

    drift: Callable | None = None
    drift_jax: Callable | None = None
    p: np.ndarray = field(default_factory=lambda: np.zeros(0))
    geometry: Geometry = EUCLIDEAN
    diffusion: Callable | None = None
    diffusion_jax: Callable | None = None
    noise_shape: tuple | None = None
    work: int | Callable[[int, int, np.ndarray], int] = 0
    step_jax: Callable | None = None
    stop_jax: Callable | None = None

    def __post_init__(self):
        p = np.array(self.p, dtype=np.float64, order="C")  # a copy: freezing must not touch the caller's array
        if p.ndim not in (1, 2):
            raise ValueError(
                f"Problem.p must be a flat 1-D vector (or (P, m) for a batch of points), got shape {p.shape}"
            )
        p.setflags(write=False)
        object.__setattr__(self, "p", p)
        if not isinstance(self.geometry, Geometry):
            raise ValueError(f"Problem.geometry must be a Geometry, got {self.geometry!r}")
        diffusion = self.diffusion is not None or self.diffusion_jax is not None
        if (
            diffusion
            and self.noise_shape is None
            or (self.noise_shape is not None and not diffusion and self.step_jax is None)
        ):
            raise ValueError("an SDE problem needs both a diffusion and its noise_shape (q1, q2)")
        if self.noise_shape is not None:
            shape = tuple(int(q) for q in self.noise_shape)
            if len(shape) != 2 or min(shape) < 1:
                raise ValueError(f"noise_shape must be (q1, q2) with q1, q2 >= 1, got {self.noise_shape}")
            object.__setattr__(self, "noise_shape", shape)

    @property
    def stochastic(self) -> bool:
        return self.noise_shape is not None

    @classmethod
    def stack(cls, problems) -> "Problem":
        """One problem for a batch of points (the jax backend): the points' problems, equal but
        for their vectors, which become the rows of p (P, m), zero-padded at the end to the
        longest (a model whose vector length varies within a batch reads trailing zeros as
        nothing, e.g. Fourier coefficients c_l = 0)."""
        problems = list(problems)
        first = problems[0]
        for other in problems[1:]:
            for f in fields(cls):
                if f.name != "p" and getattr(other, f.name) != getattr(first, f.name):
                    raise ValueError(f"a batch of problems must share everything but p; {f.name} differs")
        if any(q.p.ndim != 1 for q in problems):
            raise ValueError("Problem.stack takes the problems of single points (1-D p)")
        width = max(q.p.shape[0] for q in problems)
        return replace(first, p=np.stack([np.pad(q.p, (0, width - q.p.shape[0])) for q in problems]))

    def work_size(self, n: int, d: int) -> int:
        """Scratch floats per member for states of shape (n, d) (at least 1)."""
        size = self.work(n, d, self.p) if callable(self.work) else self.work
        return max(1, int(size))
