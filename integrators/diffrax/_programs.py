r"""The JAX/diffrax machinery behind :mod:`integrators.diffrax.solvers` (imported lazily).

Solves, for every member of an ensemble (vmap), the ODE on a manifold M

    dx/dt = P_x f(t, x; p),    x(t_0) = x_0,

with a diffrax solver whose every accepted step is followed by the retraction x_1 <- R(x_1)
(:class:`RetractingSolver`), and retracts the saved states. Importing this module switches JAX to
float64.

It also sets ``EQX_ON_ERROR=nan`` (unless the variable is set, or equinox is already imported):
with equinox's default ("raise") every diffrax solve embeds host callbacks, and JAX refuses to
store programs with host callbacks in the persistent compilation cache (~1.5 s per compile per
process lost). "nan" matches this backend's contract anyway: failures give NaN, never raise.
"""

import functools
import os
import sys
from collections.abc import Callable
from typing import ClassVar

EQX_ON_ERROR_DEFAULT = "nan"
if "equinox" not in sys.modules:
    os.environ.setdefault("EQX_ON_ERROR", EQX_ON_ERROR_DEFAULT)

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from ..core.tableau import RK4, ButcherTableau  # noqa: E402

# Persistent XLA compilation cache shared by all processes of the project.
JAX_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "dyn", "jax")


@functools.cache
def enable_compilation_cache() -> None:
    """Point JAX's persistent compilation cache at JAX_CACHE_DIR (once per process)."""
    os.makedirs(JAX_CACHE_DIR, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", JAX_CACHE_DIR)


class EnsembleProgram:
    """A jitted ensemble solve, ``run(x0s, p, ts, grid) -> (states, result, accepted, rejected)``,
    and how many times it was traced (compiled) in this process: its own count, no global one."""

    def __init__(self, solve_all):
        self.traces = 0

        def counted(*args):
            self.traces += 1  # runs only while JAX traces
            return solve_all(*args)

        self.run = jax.jit(counted)


# diffrax's result per member, as integrators.core.solution reads it
RESULT_OK, RESULT_MAX_STEPS, RESULT_FAILED = 0, 1, 2


class RetractingSolver(diffrax.AbstractWrappedSolver):
    """Wraps a solver so that each step ends on the manifold:  x_1 <- R(step(x_0)).

    The wrapped step is told ``made_jump=True`` so that first-same-as-last solvers (Tsit5,
    Dopri5) evaluate f at the retracted x_0 instead of reusing f at the unretracted point.
    """

    solver: diffrax.AbstractSolver
    retract: Callable = eqx.field(static=True)

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(terms, t0, t1, y0, args, solver_state, True)
        y1 = self.retract(y1)
        if "y1" in dense_info:
            dense_info = dict(dense_info, y1=y1)
        return y1, y_error, dense_info, solver_state, result

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


def _diffrax_tableau(tab: ButcherTableau) -> diffrax.ButcherTableau:
    s = tab.stages
    return diffrax.ButcherTableau(
        c=np.array(tab.c[1:]),
        b_sol=np.array(tab.b),
        b_error=np.zeros(s),  # no embedded method: fixed steps only
        a_lower=tuple(np.array(tab.A[i, :i]) for i in range(1, s)),
    )


class ClassicRK4(diffrax.AbstractERK):
    """The classic fourth-order Runge-Kutta method (table :data:`integrators.core.tableau.RK4`);
    diffrax has no built-in. Fixed steps only (no error estimate)."""

    tableau: ClassVar[diffrax.ButcherTableau] = _diffrax_tableau(RK4)
    interpolation_cls: ClassVar[Callable] = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 4


# Euler and Heun are diffrax's own (same tables as integrators.core.tableau.EULER / HEUN).
SOLVERS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "euler": diffrax.Euler,
    "heun": diffrax.Heun,
    "rk4": ClassicRK4,
}


@functools.lru_cache(maxsize=128)
def ensemble_solver(drift_jax, project_jax, retract_jax, flat, method, adaptive_opts):
    """An :class:`EnsembleProgram` ``(x0s (E,n,d), p, ts, grid) -> (states (E,T,n,d), result (E,),
    accepted steps (E,), rejected steps (E,))``, built once per key.

    ``adaptive_opts``: None for fixed steps (``grid`` gives the step boundaries), else a tuple
    ``(rtol, atol, dt0, max_steps)`` (``grid`` is None). Members whose solve fails (max_steps,
    step size collapse on NaN) come back as NaN, with result RESULT_MAX_STEPS or RESULT_FAILED.
    """
    enable_compilation_cache()
    base = SOLVERS[method]()
    solver = base if flat else RetractingSolver(base, retract_jax)
    term = diffrax.ODETerm(lambda t, x, p: project_jax(x, drift_jax(t, x, p)))

    def solve_one(x0, p, ts, grid):
        if adaptive_opts is None:
            controller = diffrax.StepTo(ts=grid)
            dt0, max_steps = None, grid.shape[0] - 1
        else:
            rtol, atol, dt0, max_steps = adaptive_opts
            controller = diffrax.PIDController(rtol=rtol, atol=atol)
        sol = diffrax.diffeqsolve(
            term,
            solver,
            t0=ts[0],
            t1=ts[-1],
            dt0=dt0,
            y0=x0,
            args=p,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=controller,
            max_steps=max_steps,
            throw=False,
        )
        ys = jax.vmap(retract_jax)(sol.ys)
        ok = sol.result == diffrax.RESULTS.successful
        result = jnp.where(
            ok, RESULT_OK, jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, RESULT_MAX_STEPS, RESULT_FAILED)
        )
        return (jnp.where(ok, ys, jnp.nan), result, sol.stats["num_accepted_steps"], sol.stats["num_rejected_steps"])

    def solve_all(x0s, p, ts, grid):
        return jax.vmap(solve_one, in_axes=(0, None, None, None))(x0s, p, ts, grid)

    return EnsembleProgram(solve_all)
