r"""The `jax` backend: fixed-step schemes over a batch of points x runs, one jitted, vmapped JAX
program (a whole sweep at once, on a GPU when there is one).

The contract of every backend (:mod:`integrators.core.base`), with a JAX key as the random source:

    ode = integrators.get("jax", "rk4", dt=0.01)
    sol = ode.solve(problem, x0, ts).states                # x0 (R, n, d): sol.states (R, T, n, d)
    sde = integrators.get("jax", "euler_maruyama", dt=0.01)
    sol = sde.solve(problem, x0, ts, rng=key).states       # key (2,) uint32; or increments=dW

**A batch of points** is the documented extension of that contract: ``problem.p`` (P, m), one
parameter vector per point (:meth:`Problem.stack`), traced, so a sweep compiles once per shape
(and method, vector field, geometry); ``x0`` (P, R, n, d): R runs of each of P points; ``ts``
(T,) save times shared by the points, or (P, T), one row per point (each row its own step grid,
e.g. its own horizon); ``rng`` (P, 2), one key per point; ``increments`` (P, R, steps, q1, q2).
The solution then has the point axis first: states (P, R, T, n, d), status and statistics
(P, R). The step grid is the numba backend's (:func:`integrators.core.base.step_grid`). Methods:

- ``euler``, ``heun``, ``rk4`` (ODEs): the projection method of :mod:`integrators.numba.fixed`,
  stage velocities projected at their own stage points, the state retracted after the step;
- ``euler_maruyama`` (Ito SDEs): x' = R(x + h P_x f(t, x) + P_x g(t, x)[dW]), the scheme of
  :mod:`integrators.numba.sde`;
- ``step_map``: the problem's own step x' = ``step_jax(t, x, p, h, xi)`` (a network layer, an
  exact sampler), xi the step's noise.

Noise: from ``rng``, a key (2,) uint32 per point: step k of run r of point i reads
xi ~ N(0, I) of ``noise_shape`` from fold_in(fold_in(key_i, r), k) (euler_maruyama: dW =
sqrt(h) xi), so a point's numbers depend on its key only, never on the batch it runs in; or given
``increments`` (P, R, steps, q1, q2) on the step grid (euler_maruyama: dW, the very path the
numba backend takes; step_map: its xi as given).

Absorbing stops (the option ``absorbing=True``, with ``problem.stop_jax(x, p) -> bool``): a run
stops after the first step at which stop holds (its state then kept at the later save times), a
point's loop ends once all its runs have stopped, and ``sol.stats["steps"]`` holds the steps each
run took (without it, every run's grid steps).

Importing this module imports no JAX; the first solve switches JAX to float64.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from ..core.base import AbstractIntegrator, FixedStep, check_times, step_grid
from ..core.problem import Problem
from ..core.solution import Solution
from ..core.tableau import TABLEAUS

NONE, KEY, GIVEN = "none", "key", "given"  # where a step's noise comes from


def _jax():
    from ..diffrax import _programs  # float64, persistent compilation cache

    _programs.enable_compilation_cache()
    import jax

    return jax


def _rk_step(drift_jax, project_jax, retract_jax, tableau):
    """One explicit RK step with projected stage velocities, retracted after the step."""
    A, b, c = (np.asarray(a) for a in (tableau.A, tableau.b, tableau.c))
    stages = len(b)

    def step(t, x, p, h, xi):
        ks = []
        for i in range(stages):
            y = x
            for j in range(i):
                if A[i, j] != 0.0:
                    y = y + h * A[i, j] * ks[j]
            ks.append(project_jax(y, drift_jax(t + c[i] * h, y, p)))
        inc = sum(b[i] * ks[i] for i in range(stages) if b[i] != 0.0)
        return retract_jax(x + h * inc)

    return step


def _em_step(drift_jax, diffusion_jax, project_jax, retract_jax):
    """One Euler-Maruyama step, x' = R(x + h P_x f + P_x g[dw])."""

    def step(t, x, p, h, dw):
        f = project_jax(x, drift_jax(t, x, p))
        g = project_jax(x, diffusion_jax(t, x, p, dw))
        return retract_jax(x + h * f + g)

    return step


def _step_of(scheme: tuple):
    kind, *parts = scheme
    return {"rk": _rk_step, "em": _em_step, "map": lambda f: f}[kind](*parts)


def _noise_of(jax, key, k, noise_shape, h, scaled: bool):
    """The standard normals of step k from a run's key (times sqrt(h) when scaled)."""
    xi = jax.random.normal(jax.random.fold_in(key, k), noise_shape, dtype=jax.numpy.float64)
    return jax.numpy.sqrt(h) * xi if scaled else xi


@functools.lru_cache(maxsize=64)
def _program(scheme: tuple, noise_shape, noise: str, scaled: bool, per_point: bool):
    """(x0 (P, R, n, d), source, p (P, m), starts, counts, hs, first) -> states (P, R, T, n, d);
    source: keys (P, 2), increments (P, R, steps, q1, q2) or a placeholder (P, R)."""
    jax = _jax()
    jnp = jax.numpy
    step = _step_of(scheme)

    def member(x0, source, p, starts, counts, hs, first):
        def interval(x, where):
            t0, count, h, k0 = where

            def one(j, x):
                xi = None
                if noise == GIVEN:  # source: this run's increments (steps, q1, q2)
                    xi = source[k0 + j]
                elif noise == KEY:  # source: this run's key
                    xi = _noise_of(jax, source, k0 + j, noise_shape, h, scaled)
                return step(t0 + j * h, x, p, h, xi)

            x = jax.lax.fori_loop(0, count, one, x)
            return x, x

        _, saved = jax.lax.scan(interval, x0, (starts, counts, hs, first))
        return jnp.concatenate([x0[None], saved])

    def runs(x0, source, p, *grid):
        if noise == KEY:  # one key per run, folded from the point's
            source = jax.vmap(lambda r: jax.random.fold_in(source, r))(jnp.arange(x0.shape[0]))
        return jax.vmap(member, in_axes=(0, 0, None, None, None, None, None))(x0, source, p, *grid)

    g = 0 if per_point else None
    return jax.jit(jax.vmap(runs, in_axes=(0, 0, 0, g, g, g, g)))


@functools.lru_cache(maxsize=64)
def _absorbing_program(scheme: tuple, stop_jax, noise_shape, noise: str, scaled: bool, per_point: bool):
    """As :func:`_program`, all runs of a point in one loop that ends once every run has
    stopped; -> (states (P, R, T, n, d), steps taken (P, R))."""
    jax = _jax()
    jnp = jax.numpy
    xi_axis = None if noise == NONE else 0
    advance = jax.vmap(_step_of(scheme), in_axes=(None, 0, None, None, xi_axis))
    halted = jax.vmap(stop_jax, in_axes=(0, None))

    def point(x0, source, p, starts, counts, hs, first):
        runs = x0.shape[0]
        if noise == KEY:
            source = jax.vmap(lambda r: jax.random.fold_in(source, r))(jnp.arange(runs))

        def interval(state, where):
            t0, count, h, k0 = where

            def body(loop):
                j, x, active, taken = loop
                xi = None
                if noise == GIVEN:
                    xi = source[:, k0 + j]
                elif noise == KEY:
                    xi = jax.vmap(lambda key: _noise_of(jax, key, k0 + j, noise_shape, h, scaled))(source)
                moved = advance(t0 + j * h, x, p, h, xi)
                x = jnp.where(active[:, None, None], moved, x)
                taken = taken + active
                active = active & ~halted(x, p)
                return j + 1, x, active, taken

            def cond(loop):
                j, _, active, _ = loop
                return (j < count) & jnp.any(active)

            _, x, active, taken = jax.lax.while_loop(cond, body, (jnp.asarray(0, jnp.int64),) + state)
            return (x, active, taken), x

        start = (x0, jnp.ones(runs, bool), jnp.zeros(runs, jnp.int64))
        (_, _, taken), saved = jax.lax.scan(interval, start, (starts, counts, hs, first))
        return jnp.swapaxes(jnp.concatenate([x0[None], saved]), 0, 1), taken

    g = 0 if per_point else None
    return jax.jit(jax.vmap(point, in_axes=(0, 0, 0, g, g, g, g)))


def _grid(ts: np.ndarray, dt: float):
    """starts, steps per interval, step sizes, first step index: (T-1,) each, or (P, T-1)."""
    if ts.ndim == 2:
        rows = [_grid(row, dt) for row in ts]
        return tuple(np.stack(part) for part in zip(*rows, strict=True))
    counts, hs = step_grid(ts, dt)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return ts[:-1], counts, hs, first


class JaxIntegrator(FixedStep, AbstractIntegrator):
    """A fixed-step method of the jax backend (see the module doc). Option ``dt``: the largest
    step. Subclasses give ``_scheme(problem)``: the hashable description of their step."""

    backend = "jax"
    scaled = True  # keyed noise is dW = sqrt(h) xi (the step map reads xi itself)

    OPTIONS = {**FixedStep.OPTIONS, "absorbing": False}

    def _check_options(self):
        super()._check_options()
        if not isinstance(self.options["absorbing"], bool):
            raise ValueError(f"option 'absorbing' must be true or false, got {self.options['absorbing']!r}")

    def solve(self, problem, x0, ts, rng=None, increments=None) -> Solution:
        """The solution of one point (p (m,), x0 (R, n, d), rng a key (2,)) or of a batch of
        points (p (P, m), x0 (P, R, n, d), rng (P, 2)); see the module doc."""
        if not isinstance(problem, Problem):
            raise ValueError(f"problem must be an integrators.Problem, got {type(problem).__name__}")
        if np.ndim(problem.p) == 1:  # one point: a batch of one
            one = lambda a: None if a is None else np.asarray(a)[None]  # noqa: E731
            if np.ndim(x0) != 3:
                raise ValueError(
                    f"x0 must have shape (R, n, d) for one point (p of shape (m,)), got shape {np.shape(x0)}"
                )
            sol = self.solve(replace(problem, p=np.asarray(problem.p)[None]), one(x0), ts, one(rng), one(increments))
            return Solution(sol.states[0], sol.status[0], {k: v[0] for k, v in sol.stats.items()})
        p = problem.p
        if p.ndim != 2:
            raise ValueError(
                "problem.p must be (m,) for one point or (P, m), one row per point "
                f"(Problem.stack), got shape {p.shape}"
            )
        x0 = np.asarray(x0, dtype=np.float64)
        if x0.ndim != 4 or x0.shape[0] != p.shape[0] or min(x0.shape) == 0:
            raise ValueError(f"x0 must have shape (P, R, n, d) with P = {p.shape[0]} points, got shape {x0.shape}")
        if not np.all(np.isfinite(x0)):
            raise ValueError("x0 contains non-finite values (nan or inf)")
        ts = np.asarray(ts, dtype=np.float64)
        if ts.ndim == 2 and ts.shape[0] != p.shape[0]:
            raise ValueError(f"ts must be (T,) or (P, T) with P = {p.shape[0]}, got {ts.shape}")
        ts = np.stack([check_times(row) for row in ts]) if ts.ndim == 2 else check_times(ts)
        absorbing = self.options["absorbing"]
        if absorbing and problem.stop_jax is None:
            raise ValueError("an absorbing solve needs Problem.stop_jax")
        noise = self._noise(problem, x0, ts, rng, increments)
        found = self._solve(problem, x0, ts, p, noise, absorbing)
        if absorbing:
            states, steps = found
        else:
            states = found
            counts = _grid(ts, self.options["dt"])[1]
            steps = np.broadcast_to(np.atleast_2d(counts).sum(axis=-1)[:, None], x0.shape[:2])
        return Solution.of(states, steps=steps, rejections=0)

    def _noise(self, problem, x0, ts, keys, increments):  # keys: the solve's rng
        """(kind, source): the checked noise of the solve."""
        if not self.stochastic:
            if problem.stochastic:
                raise ValueError(f"jax/{self.method} solves ODEs; this problem has a diffusion (use euler_maruyama)")
            if keys is not None or increments is not None:
                raise ValueError("an ODE solve takes no rng or increments")
            return NONE, np.zeros(x0.shape[:2])
        if not problem.stochastic:
            raise ValueError(f"jax/{self.method} needs noise; this problem has no noise_shape")
        if (keys is None) == (increments is None):
            raise ValueError("a stochastic solve takes rng (a key per point, (P, 2)) or increments, exactly one")
        if keys is not None:
            keys = np.asarray(keys)
            if keys.shape != (x0.shape[0], 2):
                raise ValueError(f"rng must be a key per point, shape (P, 2) = ({x0.shape[0]}, 2), got {keys.shape}")
            return KEY, keys.astype(np.uint32)
        increments = np.asarray(increments, dtype=np.float64)
        totals = {int(c.sum()) for c in np.atleast_2d(_grid(ts, self.options["dt"])[1])}
        want = x0.shape[:2] + (max(totals),) + problem.noise_shape
        if len(totals) != 1 or increments.shape != want:
            raise ValueError(
                f"increments must have shape {want} (P, R, steps, q1, q2), every "
                f"point on as many steps, got {increments.shape}"
            )
        return GIVEN, increments

    def _solve(self, problem, x0, ts, p, noise, absorbing=False):
        jax = _jax()
        jnp = jax.numpy
        kind, source = noise
        per_point = ts.ndim == 2
        args = (self._scheme(problem), problem.noise_shape, kind, self.scaled)
        program = (
            _absorbing_program(args[0], problem.stop_jax, *args[1:], per_point)
            if absorbing
            else _program(*args, per_point)
        )
        source = jnp.asarray(source, dtype=jnp.uint32) if kind == KEY else jnp.asarray(source)
        out = program(jnp.asarray(x0), source, jnp.asarray(p), *_grid(ts, self.options["dt"]))
        if absorbing:
            return np.array(out[0]), np.array(out[1])
        return np.array(out)

    def _scheme(self, problem) -> tuple:
        raise NotImplementedError


class JaxRK(JaxIntegrator):
    tableau = None

    def _scheme(self, problem):
        if problem.drift_jax is None:
            raise ValueError(f"jax/{self.method} needs Problem.drift_jax")
        g = problem.geometry
        return "rk", problem.drift_jax, g.project_jax, g.retract_jax, self.tableau


class JaxEuler(JaxRK):
    """Explicit Euler (order 1)."""

    method = "euler"
    tableau = TABLEAUS["euler"]


class JaxHeun(JaxRK):
    """Heun's method (order 2)."""

    method = "heun"
    tableau = TABLEAUS["heun"]


class JaxRK4(JaxRK):
    """Classical RK4 (order 4)."""

    method = "rk4"
    tableau = TABLEAUS["rk4"]


class JaxEulerMaruyama(JaxIntegrator):
    """Euler-Maruyama with projection and retraction (Ito; strong order 1/2, weak order 1)."""

    method = "euler_maruyama"
    stochastic = True

    def _scheme(self, problem):
        if problem.drift_jax is None or problem.diffusion_jax is None:
            raise ValueError("jax/euler_maruyama needs Problem.drift_jax and .diffusion_jax")
        g = problem.geometry
        return "em", problem.drift_jax, problem.diffusion_jax, g.project_jax, g.retract_jax


class JaxStepMap(JaxIntegrator):
    """The problem's own step, x' = step_jax(t, x, p, h, xi), xi standard normals of
    noise_shape (from the keys) or the given increments."""

    method = "step_map"
    stochastic = True
    scaled = False

    def _scheme(self, problem):
        if problem.step_jax is None:
            raise ValueError("jax/step_map needs Problem.step_jax")
        return "map", problem.step_jax


METHODS = {cls.method: cls for cls in (JaxEuler, JaxHeun, JaxRK4, JaxEulerMaruyama, JaxStepMap)}
