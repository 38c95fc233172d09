"""Generic ensemble ODE and Ito SDE integrators (numba, diffrax and jax backends) on Euclidean
space or spheres, behind one API: every backend's ``solve`` takes the same arguments and returns
a :class:`Solution` (states, a status per run: OK, MAX_STEPS, NONFINITE, and statistics per run).

    integ = integrators.get("numba", "rk4", dt=0.01)
    sol = integ.solve(integrators.Problem(drift, drift_jax, p, geometry), x0, ts)
    sol.states                                   # (E, T, n, d); sol.status, sol.stats["steps"]
    sde = integrators.get("numba", "euler_maruyama", dt=0.01)
    sol = sde.solve(integrators.Problem(drift, drift_jax, p, geometry, diffusion,
                                        diffusion_jax, noise_shape), x0, ts, rng=rng)  # or increments=dW

The jax backend takes the same call (``rng``: a JAX key) and, as its documented extension, a
batch of points in one jitted, vmapped program (integrators.jax.batch): p (P, m) one row per
point (Problem.stack of the points' problems), x0 (P, R, n, d), rng one key per point (P, 2);
the solution then has the point axis first. Methods euler, heun, rk4, euler_maruyama, and
step_map (the problem's own step_jax); the option absorbing=True stops each run in
problem.stop_jax and counts its steps in sol.stats["steps"].

    batch = integrators.get("jax", "euler_maruyama", dt=0.01)
    sol = batch.solve(Problem.stack(problems), x0, ts, rng=keys)  # states (P,R,T,n,d); or increments=

The fixed-step methods' default step is integrators.core.base.DEFAULT_DT (the one place it is set).
"""

from .core.base import AbstractIntegrator
from .core.brownian import brownian_increments, coarsen, dyadic_increments
from .core.geometry import EUCLIDEAN, SPHERE, Geometry
from .core.observer import Observer
from .core.problem import Problem
from .core.solution import MAX_STEPS, NONFINITE, OK, STATUS_NAMES, Solution
from .registry import SDE_METHODS, available, get, options

__all__ = [
    "configure_jax",
    "AbstractIntegrator",
    "EUCLIDEAN",
    "SPHERE",
    "Geometry",
    "Problem",
    "Observer",
    "Solution",
    "OK",
    "MAX_STEPS",
    "NONFINITE",
    "STATUS_NAMES",
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
    from .diffrax import _programs

    _programs.enable_compilation_cache()
