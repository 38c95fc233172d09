r"""Euler-Maruyama on the diffrax backend: ``diffrax.Euler`` on ``MultiTerm(ODETerm, ControlTerm)``.

Same scheme as :mod:`integrators.numba.sde`:  x' = R(x + h P_x f + P_x g(x)[dW]), the step grid of
:func:`integrators.core.base.step_times` enforced by ``diffrax.StepTo``; Euler evaluates both terms at
the start of the step, which is what makes it converge to the Ito solution (Heun/midpoint would
give Stratonovich: a different model). The control is one (q1, q2) Brownian motion per member
(e.g. a d x d matrix shared by all tokens); the diffusion is handed to diffrax as a lineax
operator ``dw -> P_x g(x)[dw]``, so no (n, d, q1, q2) tensor is ever formed.

The Brownian path (:class:`_StepIncrements`) reads the increment of step k from an array
(explicit ``increments``: path by path identical to numba) or draws it as
``sqrt(h) N(fold_in(key_e, k))`` (counter based: no (E, N, q1, q2) array in memory; the member
keys come from the caller's rng). Members are vmapped; p is traced, so a sweep compiles once.
"""

import functools

import numpy as np

from ..core.base import AbstractIntegrator, FixedStep, step_times


@functools.lru_cache(maxsize=64)
def _ensemble_sde(drift_jax, diffusion_jax, project_jax, retract_jax, flat, noise_shape, from_array):
    from . import _programs as jb  # switches JAX to float64, sets up the compile cache

    # the import above sets EQX_ON_ERROR, so it runs before equinox is imported
    # isort: split
    import diffrax
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import lineax as lx

    jb.enable_compilation_cache()

    class _StepIncrements(diffrax.AbstractPath):
        t0: float
        t1: float
        grid: jax.Array
        source: jax.Array  # (N, q1, q2) increments, or a PRNG key
        from_array: bool = eqx.field(static=True)

        def evaluate(self, t0, t1=None, left=True):
            del left
            k = jnp.clip(jnp.searchsorted(self.grid, t0, side="right") - 1, 0, self.grid.shape[0] - 2)
            if self.from_array:
                return self.source[k]
            h = self.grid[k + 1] - self.grid[k]
            return jnp.sqrt(h) * jax.random.normal(jax.random.fold_in(self.source, k), noise_shape, dtype=jnp.float64)

    euler = diffrax.Euler()
    solver = euler if flat else jb.RetractingSolver(euler, retract_jax)
    dw_struct = jax.ShapeDtypeStruct(noise_shape, jnp.float64)

    def drift(t, x, p):
        return project_jax(x, drift_jax(t, x, p))

    def noise_op(t, x, p):
        return lx.FunctionLinearOperator(lambda dw: project_jax(x, diffusion_jax(t, x, p, dw)), dw_struct)

    def solve_one(x0, source, p, ts, grid):
        path = _StepIncrements(grid[0], grid[-1], grid, source, from_array)
        terms = diffrax.MultiTerm(diffrax.ODETerm(drift), diffrax.ControlTerm(noise_op, path))
        sol = diffrax.diffeqsolve(
            terms,
            solver,
            t0=ts[0],
            t1=ts[-1],
            dt0=None,
            y0=x0,
            args=p,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.StepTo(ts=grid),
            max_steps=grid.shape[0] - 1,
            throw=False,
        )
        ys = jax.vmap(retract_jax)(sol.ys)
        return jnp.where(sol.result == diffrax.RESULTS.successful, ys, jnp.nan)

    return jax.jit(jax.vmap(solve_one, in_axes=(0, 0, None, None, None)))


class DiffraxEulerMaruyama(FixedStep, AbstractIntegrator):
    """Euler-Maruyama (``diffrax.Euler`` with a Brownian ``ControlTerm``); option ``dt``."""

    backend = "diffrax"
    method = "euler_maruyama"
    stochastic = True

    def _solve(self, problem, x0, ts, p, noise):
        rng, increments = noise
        if problem.drift_jax is None or problem.diffusion_jax is None:
            raise ValueError("the diffrax backend needs Problem.drift_jax and .diffusion_jax")
        if ts.shape[0] == 1:
            return x0[:, None].copy()
        g = problem.geometry
        fn = _ensemble_sde(
            problem.drift_jax,
            problem.diffusion_jax,
            g.project_jax,
            g.retract_jax,
            g.flat,
            problem.noise_shape,
            increments is not None,
        )
        grid = step_times(ts, self.options["dt"])
        if increments is None:
            import jax

            seeds = rng.integers(0, 2**32, size=x0.shape[0], dtype=np.uint32)
            source = jax.vmap(jax.random.PRNGKey)(seeds)
        else:
            source = increments
        return np.array(fn(x0, source, p, ts, grid))  # writable, like the numba backend


METHODS = {DiffraxEulerMaruyama.method: DiffraxEulerMaruyama}
