"""Generic ensemble ODE integrators (numba and diffrax backends) on Euclidean space or spheres.

    integ = integrators.get("numba", "rk4", dt=0.01)
    states = integ.solve(integrators.Problem(drift, drift_jax, p, geometry), x0, ts)  # (E,T,n,d)
"""

from .base import AbstractIntegrator
from .geometry import EUCLIDEAN, SPHERE, Geometry
from .problem import Problem
from .registry import available, get, options

__all__ = [
    "AbstractIntegrator",
    "EUCLIDEAN",
    "SPHERE",
    "Geometry",
    "Problem",
    "available",
    "get",
    "options",
]
