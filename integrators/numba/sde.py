r"""Euler-Maruyama with retraction on an ensemble, in numba: the Ito scheme.

One step of size h from (t, x), with the Brownian increment dW ~ N(0, h I):

    x' = R( x + h P_x f(t, x) + P_x g(t, x)[dW] ).

Why this converges to the Ito solution on the sphere (and not to Stratonovich): the drift and
the noise are evaluated at the start point only. The radial part of an Ito drift (e.g. the
normalization correction -c |m|^2 x) is removed by P_x, and the retraction puts it back: for a
tangent increment eta, x + eta normalized is x + eta - |eta|^2 x / 2 + O(|eta|^3), whose mean
second-order term is exactly the Ito correction of keeping |x| = 1. So the full Ito drift may be
passed (its radial part is not counted twice). Checked in tests/test_sde*.py against the exact
two-token law and the Lyapunov exponents. On a flat geometry this is plain Euler-Maruyama.

Noise: per-member xoshiro streams (:mod:`integrators.numba.sde_rng`) seeded from the caller's rng,
or explicit increments (E, N, q1, q2) for coupling. Strong order 1/2, weak order 1.

Option ``refine`` (default 1): each step's increment is drawn as the sum of ``refine``
sub-increments of N(0, h/refine), in the order a run at step h/refine would draw them. A run at
step h with refine = 2 and a run at step h/2 with refine = 1, seeded alike, therefore follow the
same Brownian path: the engine's step check (:mod:`dyn.engine.stepcheck`) compares them.
"""

import math

import numpy as np
from numba import types

from ..core.base import AbstractIntegrator, FixedStep, step_grid
from .abi import DIFFUSION_FN, DRIFT_FN, F1, F3, F4, I1, NJIT, PROJECT_FN, RETRACT_FN
from .arrays import copy1, copy2
from .jit import compile_ahead, njit
from .sde_rng import STREAMS, fill_normals, member_streams
from .threads import over_members

_EM_SIG = types.void(
    F3,  # x0 (E, n, d)
    F1,  # ts
    I1,  # steps per save interval
    F1,  # step size per save interval
    F1,  # p
    DRIFT_FN,
    DIFFUSION_FN,
    PROJECT_FN,
    RETRACT_FN,
    types.int64,  # q1
    types.int64,  # q2
    types.int64,  # workspace floats of drift and diffusion
    types.int64,  # refine: sub-increments summed per step
    STREAMS,  # (E, 4) per-member streams (used when increments is empty)
    F4,  # increments (E, N, q1, q2) or shape (0, 0, 0, 0)
    F4,  # out (E, T, n, d)
)


@njit(_EM_SIG, **NJIT)
def _em_block(
    x0, ts, counts, steps, p, drift, diffusion, project, retract, q1, q2, work_size, refine, streams, increments, out
):
    n_members, n, d = x0.shape
    given = increments.shape[0] > 0
    for e in range(n_members):
        x = x0[e].copy()
        f = np.empty((n, d))
        g = np.empty((n, d))
        work = np.empty(work_size)
        dw_flat = np.empty(q1 * q2)
        dw = dw_flat.reshape((q1, q2))
        sub = np.empty(q1 * q2)
        s = streams[e].copy()
        copy2(out[e, 0], x)
        k = 0
        for iv in range(counts.shape[0]):
            h = steps[iv]
            sq = math.sqrt(h / refine)
            for j in range(counts[iv]):
                t = ts[iv] + j * h
                if given:
                    copy2(dw, increments[e, k])
                else:
                    fill_normals(s, dw_flat)
                    for _ in range(refine - 1):
                        fill_normals(s, sub)
                        for r in range(q1 * q2):
                            dw_flat[r] += sub[r]
                    for r in range(q1 * q2):
                        dw_flat[r] *= sq
                drift(t, x, p, f, work)
                project(x, f)
                diffusion(t, x, p, dw, g, work)
                project(x, g)
                for r in range(n):
                    for q in range(d):
                        x[r, q] += h * f[r, q] + g[r, q]
                retract(x)
                k += 1
            copy2(out[e, iv + 1], x)
        copy1(streams[e], s)


class NumbaEulerMaruyama(FixedStep, AbstractIntegrator):
    """Euler-Maruyama with projection and retraction (Ito; strong order 1/2, weak order 1).
    Option ``dt``: the largest step (grid of :func:`integrators.core.base.step_grid`); ``refine``:
    sub-increments per step (see the module doc)."""

    backend = "numba"
    method = "euler_maruyama"
    stochastic = True
    OPTIONS = {**FixedStep.OPTIONS, "refine": 1}

    def _check_options(self):
        super()._check_options()
        refine = self.options["refine"]
        if isinstance(refine, bool) or not isinstance(refine, (int, np.integer)) or refine < 1:
            raise ValueError(f"option 'refine' must be a positive integer, got {refine!r}")
        self.options["refine"] = int(refine)

    def _solve(self, problem, x0, ts, p, noise):
        rng, increments = noise
        if problem.drift is None or problem.diffusion is None:
            raise ValueError(
                "the numba backend needs Problem.drift and .diffusion (numba DRIFT_SIG / DIFFUSION_SIG functions)"
            )
        g = problem.geometry
        q1, q2 = problem.noise_shape
        counts, steps = step_grid(ts, self.options["dt"])
        E = x0.shape[0]
        if increments is None:
            streams = member_streams(rng, E)
            increments = np.empty((0, 0, 0, 0))
        else:
            streams = np.ones((E, 4), dtype=np.uint64)
        out = np.empty((E, ts.shape[0]) + x0.shape[1:])
        p, work_size, refine = np.array(p), problem.work_size(*x0.shape[1:]), self.options["refine"]
        block, drift, diffusion, project, retract = compile_ahead(
            _em_block, problem.drift, problem.diffusion, g.project, g.retract
        )
        over_members(
            E,
            lambda lo, hi: block(
                x0[lo:hi],
                ts,
                counts,
                steps,
                p,
                drift,
                diffusion,
                project,
                retract,
                q1,
                q2,
                work_size,
                refine,
                streams[lo:hi],
                increments[lo:hi],
                out[lo:hi],
            ),
        )
        return out


METHODS = {NumbaEulerMaruyama.method: NumbaEulerMaruyama}
