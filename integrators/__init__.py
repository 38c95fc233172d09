"""Generic ensemble ODE and Ito SDE integrators (numba, diffrax and jax backends) on Euclidean
space or spheres, behind one API.

    integ = integrators.get("numba", "rk4", dt=0.01)
    states = integ.solve(integrators.Problem(drift, drift_jax, p, geometry), x0, ts)  # (E,T,n,d)
    sde = integrators.get("numba", "euler_maruyama", dt=0.01)
    states = sde.solve(integrators.Problem(drift, drift_jax, p, geometry, diffusion,
                                           diffusion_jax, noise_shape), x0, ts, rng=rng)  # or increments=dW

The jax backend solves a batch of points in one jitted, vmapped program (integrators.jax_batch):
p (P, m) one row per point (Problem.stack of the points' problems), x0 (P, R, n, d), noise from
one key per point; methods euler, heun, rk4, euler_maruyama, and step_map (the problem's own
step_jax); absorbing=True stops each run in problem.stop_jax and also returns its steps.

    batch = integrators.get("jax", "euler_maruyama", dt=0.01)
    states = batch.solve(Problem.stack(problems), x0, ts, keys=keys)  # (P,R,T,n,d); or increments=
    states, steps = batch.solve(problem, x0, ts, keys=keys, absorbing=True)

The fixed-step methods' default step is integrators.base.DEFAULT_DT (the one place it is set).
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
