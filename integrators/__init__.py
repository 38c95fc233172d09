"""Generic ensemble ODE and Ito SDE integrators (numba and diffrax backends) on Euclidean space
or spheres, behind one API.

    integ = integrators.get("numba", "rk4", dt=0.01)
    states = integ.solve(integrators.Problem(drift, drift_jax, p, geometry), x0, ts)  # (E,T,n,d)
    sde = integrators.get("numba", "euler_maruyama", dt=0.01)
    states = sde.solve(integrators.Problem(drift, drift_jax, p, geometry, diffusion,
                                           diffusion_jax, noise_shape), x0, ts, rng=rng)  # or increments=dW
"""

from .base import AbstractIntegrator
from .geometry import EUCLIDEAN, SPHERE, Geometry
from .problem import Problem
from .registry import SDE_METHODS, available, get, options
from .brownian import brownian_increments, coarsen, dyadic_increments

__all__ = [
    "configure_jax",
    "AbstractIntegrator",
    "EUCLIDEAN",
    "SPHERE",
    "Geometry",
    "Problem",
    "SDE_METHODS",
    "brownian_increments",
    "coarsen",
    "dyadic_increments",
    "available",
    "get",
    "options",
]


def configure_jax() -> None:
    """For code that uses JAX directly: float64, and the project's persistent compilation cache
    (what the diffrax backend sets up for itself on first use)."""
    from . import _jax_backend

    _jax_backend.enable_compilation_cache()
