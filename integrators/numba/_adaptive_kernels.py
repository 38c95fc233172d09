"""The numba kernels of :mod:`integrators.numba.adaptive` (the step, error norm and PI control
described there) and their step-control constants. They compile, or load from numba's cache, on
the first adaptive solve (:mod:`integrators.numba.jit`); this module imports nothing of
:mod:`integrators.numba.adaptive`, which imports it."""

import numpy as np
from numba import types

from .abi import DRIFT_FN, F1, F2, F3, F4, NJIT, PROJECT_FN, RETRACT_FN
from .arrays import copy2
from .fixed import stage_point
from .jit import njit

SAFETY, FAC_MIN, FAC_MAX = 0.9, 0.2, 10.0
MIN_STEP_FRACTION = 1e-14  # a step below this fraction of max(1, |t|) fails the member

I2 = types.int64[:, ::1]

_MEMBER_SIG = types.void(
    F2,  # x0 of one member (n, d)
    F1,  # ts (T,)
    F2,  # A (s, s)
    F1,  # b (s,)
    F1,  # b - bhat (s,)
    F1,  # c (s,)
    F1,  # p
    DRIFT_FN,
    PROJECT_FN,
    RETRACT_FN,
    types.int64,  # drift workspace floats
    F1,  # controls: rtol, atol, dt0 (<= 0: estimate), max_steps, error order q + 1, beta, fsal
    F3,  # out of one member (T, n, d)
    F2,  # last state reached (n, d): where a member stopped early, its state there
    types.int64[::1],  # stats of one member: accepted, rejected, evaluations, stop reason
)
_KERNEL_SIG = types.void(F3, *_MEMBER_SIG.args[1:-3], F4, F3, I2)

# Why a member stopped before the last save time (stats column 3).
REACHED, MAX_STEPS, STEP_UNDERFLOW = 0, 1, 2


@njit(types.float64(F2, F2, F2, types.float64, types.float64), **NJIT)
def _scaled_rms(v, x, y, rtol, atol):
    """sqrt(mean (v / (atol + rtol max(|x|, |y|)))^2) over all components."""
    n, d = v.shape
    acc = 0.0
    for r in range(n):
        for q in range(d):
            sc = atol + rtol * max(abs(x[r, q]), abs(y[r, q]))
            e = v[r, q] / sc
            acc += e * e
    return np.sqrt(acc / (n * d))


@njit(
    types.float64(
        types.float64, F2, F2, F2, F2, F1, DRIFT_FN, PROJECT_FN, F1, types.float64, types.float64, types.float64
    ),
    **NJIT,
)
def _initial_step(t, x, f0, y, f1, p, drift, project, work, rtol, atol, q1):
    """Hairer, Norsett & Wanner's starting step: h0 = 0.01 |x| / |f0| (scaled norms), one Euler
    step to estimate |f'|, then h1 = (0.01 / max(|f0|, |f'|))^{1/q1}; min(100 h0, h1)."""
    n, d = x.shape
    d0 = _scaled_rms(x, x, x, rtol, atol)
    d1 = _scaled_rms(f0, x, x, rtol, atol)
    h0 = 1e-6 if d0 < 1e-5 or d1 < 1e-5 else 0.01 * d0 / d1
    for r in range(n):
        for c in range(d):
            y[r, c] = x[r, c] + h0 * f0[r, c]
    drift(t + h0, y, p, f1, work)
    project(y, f1)
    for r in range(n):
        for c in range(d):
            f1[r, c] -= f0[r, c]
    d2 = _scaled_rms(f1, x, x, rtol, atol) / h0
    big = max(d1, d2)
    h1 = max(1e-6, h0 * 1e-3) if big <= 1e-15 else (0.01 / big) ** (1.0 / q1)
    return min(100.0 * h0, h1)


@njit(_MEMBER_SIG, **NJIT)
def member(x0, ts, A, b, db, c, p, drift, project, retract, work_size, ctl, out, last, stats):
    n, d = x0.shape
    s = b.shape[0]
    rtol, atol, dt0, max_steps = ctl[0], ctl[1], ctl[2], int(ctl[3])
    q1, beta, fsal = ctl[4], ctl[5], ctl[6] != 0.0
    expo = 1.0 / q1 - 0.75 * beta
    x = x0.copy()
    y = np.empty((n, d))
    e = np.empty((n, d))
    k = np.empty((s, n, d))
    work = np.empty(work_size)
    copy2(out[0], x)
    accepted = rejected = evaluations = 0
    t = ts[0]
    drift(t, x, p, k[0], work)
    project(x, k[0])
    evaluations += 1
    have_k0 = True
    if dt0 > 0.0:
        h = dt0
    else:
        h = _initial_step(t, x, k[0], y, k[1], p, drift, project, work, rtol, atol, q1)
        evaluations += 1
    err_prev = 1e-4
    save = 1
    T = ts.shape[0]
    stop = REACHED
    while save < T:
        if accepted + rejected >= max_steps:
            stop = MAX_STEPS
        elif not h >= MIN_STEP_FRACTION * max(1.0, abs(t)):
            stop = STEP_UNDERFLOW
        if stop != REACHED:  # save times not reached have no state: NaN, never a guess
            for r in range(save, T):
                out[r] = np.nan
            break
        target = ts[save]
        step = h
        clipped = t + step >= target
        if clipped:
            step = target - t
        if not have_k0:
            drift(t, x, p, k[0], work)
            project(x, k[0])
            evaluations += 1
        for st in range(1, s):
            stage_point(x, A, k, st, step, y)
            drift(t + c[st] * step, y, p, k[st], work)
            project(y, k[st])
            evaluations += 1
        for r in range(n):  # y <- x + h sum b k,  e <- h sum (b - bhat) k
            for q in range(d):
                acc = 0.0
                err = 0.0
                for m in range(s):
                    acc += b[m] * k[m, r, q]
                    err += db[m] * k[m, r, q]
                y[r, q] = x[r, q] + step * acc
                e[r, q] = step * err
        err = _scaled_rms(e, x, y, rtol, atol)
        if err <= 1.0:
            accepted += 1
            t = target if clipped else t + step
            for r in range(n):
                for q in range(d):
                    x[r, q] = y[r, q]
            retract(x)
            if fsal:  # k[s-1] = f(t + h, x') with x' before the retraction
                copy2(k[0], k[s - 1])
            have_k0 = fsal
            if clipped:
                copy2(out[save], x)
                save += 1
            factor = FAC_MAX if err == 0.0 else min(FAC_MAX, max(FAC_MIN, SAFETY * err ** (-expo) * err_prev**beta))
            err_prev = max(err, 1e-4)
            proposal = step * factor
            h = max(h, proposal) if clipped else proposal
        else:
            rejected += 1
            factor = max(FAC_MIN, SAFETY * err ** (-1.0 / q1)) if err == err else FAC_MIN
            h = step * factor
    for r in range(n):
        for q in range(d):
            last[r, q] = x[r, q]
    stats[0] = accepted
    stats[1] = rejected
    stats[2] = evaluations
    stats[3] = stop


@njit(_KERNEL_SIG, **NJIT)
def block(x0, ts, A, b, db, c, p, drift, project, retract, work_size, ctl, out, last, stats):
    for m in range(x0.shape[0]):
        member(x0[m], ts, A, b, db, c, p, drift, project, retract, work_size, ctl, out[m], last[m], stats[m])
