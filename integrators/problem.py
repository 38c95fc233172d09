"""An initial-value problem, minus its initial state: x' = P_x f(t, x; p) on a geometry."""

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .geometry import EUCLIDEAN, Geometry


@dataclass(frozen=True, eq=False)
class Problem:
    """The vector field of an ensemble ODE  dx/dt = P_x f(t, x; p),  x in M subset R^{n x d}.

    - ``drift``: numba first-class function with ``numba_abi.DRIFT_SIG`` (numba backend);
    - ``drift_jax``: pure ``(t, x, p) -> f`` on one member (diffrax backend);
    - ``p``: flat float64 parameter vector, shared by all members;
    - ``geometry``: :class:`integrators.geometry.Geometry` giving P_x and the retraction.

    Either drift may be None when its backend is not used.
    """

    drift: Optional[Callable] = None
    drift_jax: Optional[Callable] = None
    p: np.ndarray = field(default_factory=lambda: np.zeros(0))
    geometry: Geometry = EUCLIDEAN

    def __post_init__(self):
        p = np.array(self.p, dtype=np.float64, order="C")  # a copy: freezing must not touch the caller's array
        if p.ndim != 1:
            raise ValueError(f"Problem.p must be a flat 1-D vector, got shape {p.shape}")
        p.setflags(write=False)
        object.__setattr__(self, "p", p)
        if not isinstance(self.geometry, Geometry):
            raise ValueError(f"Problem.geometry must be a Geometry, got {self.geometry!r}")
