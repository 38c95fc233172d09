r"""Stochastic Heun for additive noise, in numba: weak order 2 for the laws the engine averages.

One step of size h from (t, x) with the Brownian increment dW ~ N(0, h I), on a flat geometry:

    x* = x + h f(t, x) + g(t, x)[dW]                          (Euler-Maruyama predictor)
    x' = x + (h/2) (f(t, x) + f(t + h, x*)) + g(t, x)[dW]     (trapezoidal corrector)

The diffusion is evaluated once, at the start point: the scheme is consistent with the Ito
equation dx = f dt + g dW for any g (the corrector's extra term (h/2) f'(x) g dW has mean zero),
weak order 1 in general.

Why weak order 2 when g does not depend on x (additive noise, g = g(t) or constant): expand
f(x*) = f + f'(h f + g dW) + (1/2) f''[g dW, g dW] + O(h^{3/2}), so

    x' - x = h f + g dW + (h^2/2) f' f + (h/2) f' g dW + (h/4) f''[g dW, g dW] + O(h^{5/2}),

and compare with the weak Taylor scheme of order 2 for additive noise (Kloeden & Platen,
Numerical Solution of SDEs, sec. 14.2): h f + g dW + (h^2/2)(f' f + (1/2) f''[g, g]) +
f' g dZ, with dZ = int_0^h W ds. Its moments up to the order that enters a local error of
O(h^3) agree: E[(h/4) f''[g dW, g dW]] = (h^2/4) f''[g, g]; the mean-zero f' g dZ and
(h/2) f' g dW have the same covariance with dW, E[dZ dW] = h^2/2 = E[(h/2) dW dW]; their
second moments differ at O(h^3) (h^3/3 against h^3/4); and the mean-zero
(h/4) f''[g, g](dW^2 - h) meets the other increments only in moments of O(h^3). Local weak
error O(h^3) over h^-1 steps: global weak order 2, for expectations of smooth functions at a
time, and so for the stationary law (the invariant measure of the chain is within O(h^2) of
the SDE's, Talay's expansion), which is what a time average estimates. With multiplicative
noise the missing term (1/2) g g' (dW^2 - h) makes it weak order 1 (as Euler-Maruyama).

On the sphere (geometry "sphere", rows on S^{d-1}) the predictor and corrector are taken
along great circles: with v = h P_x f(t, x) + P_x g(t, x)[dW],

    x* = Exp_x(v),   x' = Exp_x( (h/2) (P_x f(t, x) + T P_{x*} f(t + h, x*)) + P_x g[dW] ),

Exp_x(v) = cos|v| x + sin|v| v/|v| row by row, and T the parallel transport from x* back to
x along the geodesic: with u = v/|v| and a = |v|, the velocity there is e = -sin a x + cos a u
and T w = w + <w, e> (u - e). On the circle (d = 2) an angle chart makes this exactly the flat
scheme for theta (Exp adds angles, T keeps the angular component; the projected noise
P_x sigma dW is the additive sigma dB_theta): weak order 2 for additive noise there. On
S^{d-1} with d > 2 the tangent noise is not additive in any chart (curvature): weak order 1.
Exp and the retraction differ at third order in |v|: the scheme reaches the Ito solution of
:mod:`integrators.numba.sde`'s equation (radial drift removed by P_x, put back by Exp).

Noise and the option ``refine``: as :mod:`integrators.numba.sde` (one dW per step, drawn as the
sum of ``refine`` sub-increments, so runs at h with refine = 2 and at h/2 share their path).
"""

import math

import numpy as np
from numba import types

from ..core.base import step_grid
from .abi import DIFFUSION_FN, DRIFT_FN, F1, F2, F3, F4, I1, NJIT, PROJECT_FN, RETRACT_FN
from .arrays import copy1, copy2
from .jit import compile_ahead, njit
from .sde import NumbaEulerMaruyama
from .sde_rng import STREAM, STREAMS, fill_normals, member_streams
from .threads import over_members

_HEUN_SIG = types.void(
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
    types.boolean,  # sphere: steps along great circles (else flat)
    STREAMS,  # (E, 4) per-member streams (used when increments is empty)
    F4,  # increments (E, N, q1, q2) or shape (0, 0, 0, 0)
    F4,  # out (E, T, n, d)
)

_EXP_SIG = types.void(F2, F2, F2)
_TRANSPORT_SIG = types.void(F2, F2, F2, F2)


@njit(_EXP_SIG, **NJIT)
def _sphere_exp(x, v, out):
    """out <- Exp_x(v), row by row on the unit sphere (v tangent at x)."""
    n, d = x.shape
    for i in range(n):
        a2 = 0.0
        for k in range(d):
            a2 += v[i, k] * v[i, k]
        a = math.sqrt(a2)
        if a > 0.0:
            c, s = math.cos(a), math.sin(a) / a
        else:
            c, s = 1.0, 1.0
        norm = 0.0
        for k in range(d):
            out[i, k] = c * x[i, k] + s * v[i, k]
            norm += out[i, k] * out[i, k]
        r = 1.0 / math.sqrt(norm)  # unit up to rounding: keep it on the sphere
        for k in range(d):
            out[i, k] *= r


@njit(_TRANSPORT_SIG, **NJIT)
def _sphere_transport(x, v, w, out):
    """out <- w parallel-transported from Exp_x(v) back to x along the great circle."""
    n, d = x.shape
    for i in range(n):
        a2 = 0.0
        for k in range(d):
            a2 += v[i, k] * v[i, k]
        a = math.sqrt(a2)
        if a == 0.0:
            for k in range(d):
                out[i, k] = w[i, k]
            continue
        c, s = math.cos(a), math.sin(a)
        we = 0.0
        for k in range(d):  # e = -sin(a) x + cos(a) u, the geodesic's velocity at Exp_x(v)
            we += w[i, k] * (-s * x[i, k] + c * v[i, k] / a)
        for k in range(d):
            u = v[i, k] / a
            out[i, k] = w[i, k] + we * (u - (-s * x[i, k] + c * u))


@njit(types.void(STREAM, F1, F1, types.int64, types.float64), **NJIT)
def _increment(s, dw_flat, sub, refine, sq):
    """dw_flat <- the sum of `refine` standard normal vectors from the stream s, times sq."""
    fill_normals(s, dw_flat)
    for _ in range(refine - 1):
        fill_normals(s, sub)
        for r in range(dw_flat.shape[0]):
            dw_flat[r] += sub[r]
    for r in range(dw_flat.shape[0]):
        dw_flat[r] *= sq


@njit(types.void(F2, F2, F2, RETRACT_FN, types.boolean), **NJIT)
def _step_along(x, v, out, retract, sphere):
    """out <- Exp_x(v) on the sphere, R(x + v) on a flat geometry."""
    if sphere:
        _sphere_exp(x, v, out)
        return
    n, d = x.shape
    for r in range(n):
        for q in range(d):
            out[r, q] = x[r, q] + v[r, q]
    retract(out)


@njit(
    types.void(
        types.float64,
        types.float64,
        F2,
        F2,
        F1,
        DRIFT_FN,
        DIFFUSION_FN,
        PROJECT_FN,
        RETRACT_FN,
        types.boolean,
        F2,
        F2,
        F2,
        F2,
        F2,
        F2,
        F1,
    ),
    **NJIT,
)
def _heun_step(t, h, x, dw, p, drift, diffusion, project, retract, sphere, f, fs, g, v, xs, w, work):
    """x <- one stochastic Heun step of size h from (t, x) with the increment dw (module doc)."""
    n, d = x.shape
    drift(t, x, p, f, work)
    project(x, f)
    diffusion(t, x, p, dw, g, work)
    project(x, g)
    for r in range(n):
        for q in range(d):
            v[r, q] = h * f[r, q] + g[r, q]
    _step_along(x, v, xs, retract, sphere)  # the predictor x*
    drift(t + h, xs, p, fs, work)
    project(xs, fs)
    if sphere:  # f(x*) carried back to x's tangent space
        copy2(w, fs)
        _sphere_transport(x, v, w, fs)
    for r in range(n):
        for q in range(d):
            v[r, q] = 0.5 * h * (f[r, q] + fs[r, q]) + g[r, q]
    _step_along(x, v, xs, retract, sphere)
    copy2(x, xs)


@njit(_HEUN_SIG, **NJIT)
def _heun_block(
    x0,
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
    sphere,
    streams,
    increments,
    out,
):
    n_members, n, d = x0.shape
    given = increments.shape[0] > 0
    for e in range(n_members):
        x = x0[e].copy()
        f, fs, g = np.empty((n, d)), np.empty((n, d)), np.empty((n, d))
        v, xs, w = np.empty((n, d)), np.empty((n, d)), np.empty((n, d))
        work = np.empty(work_size)
        dw_flat = np.empty(q1 * q2)
        dw = dw_flat.reshape((q1, q2))
        sub = np.empty(q1 * q2)
        s = streams[e].copy()
        copy2(out[e, 0], x)
        k = 0
        for iv in range(counts.shape[0]):
            h = steps[iv]
            for j in range(counts[iv]):
                if given:
                    copy2(dw, increments[e, k])
                else:
                    _increment(s, dw_flat, sub, refine, math.sqrt(h / refine))
                _heun_step(
                    ts[iv] + j * h, h, x, dw, p, drift, diffusion, project, retract, sphere, f, fs, g, v, xs, w, work
                )
                k += 1
            copy2(out[e, iv + 1], x)
        copy1(streams[e], s)


class NumbaStochasticHeun(NumbaEulerMaruyama):
    """Stochastic Heun (module doc): Ito, weak order 2 for additive noise on a flat geometry and
    on the circle, weak order 1 otherwise. Options as Euler-Maruyama's: ``dt``, ``refine``."""

    method = "stochastic_heun"
    WEAK_ORDER = 2  # where the noise is additive (module doc)

    def _solve(self, problem, x0, ts, p, noise):
        rng, increments = noise
        if problem.drift is None or problem.diffusion is None:
            raise ValueError(
                "the numba backend needs Problem.drift and .diffusion (numba DRIFT_SIG / DIFFUSION_SIG functions)"
            )
        g = problem.geometry
        if not (g.flat or g.name == "sphere"):
            raise ValueError(
                f"stochastic_heun steps on a flat geometry or the sphere, not on {g.name!r}: use euler_maruyama"
            )
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
        sphere = g.name == "sphere"
        block, drift, diffusion, project, retract = compile_ahead(
            _heun_block, problem.drift, problem.diffusion, g.project, g.retract
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
                sphere,
                streams[lo:hi],
                increments[lo:hi],
                out[lo:hi],
            ),
        )
        return out


METHODS = {NumbaStochasticHeun.method: NumbaStochasticHeun}
