r"""Whole sweeps in one JAX computation: fixed-step schemes over a batch of points x runs.

    states = rk_batch(drift_jax, geometry, tableau, x0, p, ts, dt)      # (P, R, T, n, d)
    states = em_batch(drift_jax, diffusion_jax, geometry, noise_shape, x0, p, ts, dt, keys)

``x0`` (P, R, n, d): R runs of each of P points; ``p`` (P, m): one parameter vector per point,
traced, so a sweep compiles once per shape (and method, drift, geometry, step count pattern).
The step grid is the numba backend's (:func:`integrators.base.step_grid`, shared by all points),
and each step is the same projection method: stage velocities projected at their own stage
points, the state retracted after the step (the numba kernels' scheme, and diffrax's with the
retracting wrapper). Euler-Maruyama draws the increment of step k of run r of point i as
sqrt(h) N(fold_in(fold_in(key_i, r), k)): a point's numbers depend on its key only, never on the
batch it runs in. Importing this module switches JAX to float64.
"""
from __future__ import annotations

import functools

import numpy as np

from .base import step_grid
from .geometry import Geometry
from .tableau import ButcherTableau


def _jax():
    from . import _jax_backend  # float64, persistent compilation cache

    _jax_backend.enable_compilation_cache()
    import jax

    return jax


@functools.lru_cache(maxsize=64)
def _rk_program(drift_jax, project_jax, retract_jax, tableau: ButcherTableau):
    jax = _jax()
    jnp = jax.numpy
    A, b, c = (np.asarray(a) for a in (tableau.A, tableau.b, tableau.c))
    stages = len(b)

    def step(x, t, h, p):
        ks = []
        for i in range(stages):
            y = x
            for j in range(i):
                if A[i, j] != 0.0:
                    y = y + h * A[i, j] * ks[j]
            ks.append(project_jax(y, drift_jax(t + c[i] * h, y, p)))
        inc = sum(b[i] * ks[i] for i in range(stages) if b[i] != 0.0)
        return retract_jax(x + h * inc)

    def member(x0, p, starts, counts, hs):
        def interval(x, where):
            t0, count, h = where
            x = jax.lax.fori_loop(0, count, lambda j, x: step(x, t0 + j * h, h, p), x)
            return x, x

        _, saved = jax.lax.scan(interval, x0, (starts, counts, hs))
        return jnp.concatenate([x0[None], saved])

    runs = jax.vmap(member, in_axes=(0, None, None, None, None))
    return jax.jit(jax.vmap(runs, in_axes=(0, 0, None, None, None)))


def rk_batch(drift_jax, geometry: Geometry, tableau: ButcherTableau, x0, p, ts, dt: float):
    """States (P, R, T, n, d) of an explicit RK table from x0 (P, R, n, d), p (P, m)."""
    jax = _jax()
    ts = np.asarray(ts, dtype=np.float64)
    counts, hs = step_grid(ts, dt)
    program = _rk_program(drift_jax, geometry.project_jax, geometry.retract_jax, tableau)
    out = program(jax.numpy.asarray(x0), jax.numpy.asarray(p), ts[:-1], counts, hs)
    return np.array(out)


@functools.lru_cache(maxsize=64)
def _em_program(drift_jax, diffusion_jax, project_jax, retract_jax, noise_shape, given: bool):
    jax = _jax()
    jnp = jax.numpy

    def member(x0, source, p, starts, counts, hs, first):
        def interval(x, where):
            t0, count, h, k0 = where

            def one(j, x):
                if given:  # source: this run's increments (steps, q1, q2)
                    dw = source[k0 + j]
                else:  # source: this run's key
                    dw = jnp.sqrt(h) * jax.random.normal(jax.random.fold_in(source, k0 + j),
                                                         noise_shape, dtype=jnp.float64)
                t = t0 + j * h
                f = project_jax(x, drift_jax(t, x, p))
                g = project_jax(x, diffusion_jax(t, x, p, dw))
                return retract_jax(x + h * f + g)

            x = jax.lax.fori_loop(0, count, one, x)
            return x, x

        _, saved = jax.lax.scan(interval, x0, (starts, counts, hs, first))
        return jnp.concatenate([x0[None], saved])

    def runs(x0, source, p, starts, counts, hs, first):
        if not given:  # one key per run, folded from the point's
            source = jax.vmap(lambda r: jax.random.fold_in(source, r))(jnp.arange(x0.shape[0]))
        return jax.vmap(member, in_axes=(0, 0, None, None, None, None, None))(
            x0, source, p, starts, counts, hs, first)

    return jax.jit(jax.vmap(runs, in_axes=(0, 0, 0, None, None, None, None)))


def em_batch(drift_jax, diffusion_jax, geometry: Geometry, noise_shape, x0, p, ts, dt: float,
             keys=None, increments=None):
    """Euler-Maruyama with projection and retraction (the Ito scheme of
    :mod:`integrators.sde_numba`): states (P, R, T, n, d). Noise from ``keys`` (P, 2) uint32,
    one per point, or given ``increments`` (P, R, steps, q1, q2) on the step grid (then the
    very path the numba backend would take)."""
    jax = _jax()
    ts = np.asarray(ts, dtype=np.float64)
    counts, hs = step_grid(ts, dt)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    given = increments is not None
    if given == (keys is not None):
        raise ValueError("em_batch takes keys or increments, exactly one")
    program = _em_program(drift_jax, diffusion_jax, geometry.project_jax, geometry.retract_jax,
                          tuple(int(q) for q in noise_shape), given)
    source = (jax.numpy.asarray(increments) if given
              else jax.numpy.asarray(keys, dtype=jax.numpy.uint32))
    out = program(jax.numpy.asarray(x0), source, jax.numpy.asarray(p), ts[:-1], counts, hs, first)
    return np.array(out)
