r"""Fixed-step explicit Runge-Kutta on an ensemble, in numba, with a projection method.

One step of size h from (t, x) on a manifold with tangent projection P and retraction R:

    Y_i = x + h \sum_{j<i} a_{ij} k_j              (stage points, not retracted)
    k_i = P_{Y_i} f(t + c_i h, Y_i)                (each velocity projected at its own point)
    x'  = R(x + h \sum_i b_i k_i).

This is the standard projection method: it keeps the order of the table (4 for RK4). Projecting
only the summed increment at x instead caps the order at 2 (checked in the tests).

The kernel is compiled once (on first use, :mod:`.jit`) for any table: the table is data (A, b, c), and drift,
project and retract are first-class function arguments (see :mod:`integrators.numba_abi`).
The members run in blocks across threads (:mod:`.threads`); each member allocates its scratch
once, the drift's workspace included.

With an observer (:mod:`integrators.core.observer`) the kernel stores no state: at each save
time it calls the observer on the state, right after the first stage's drift evaluation there
(Y_1 = x; at the last save time the drift is evaluated once more), and keeps its row.
"""

import numpy as np
from numba import types

from .arrays import copy2
from ..core.base import AbstractIntegrator, FixedStep, step_grid
from .jit import compile_ahead, njit
from .abi import DRIFT_FN, F1, F2, F3, F4, I1, NJIT, OBSERVE_FN, PROJECT_FN, RETRACT_FN
from ..core.solution import NONFINITE, OK, Solution
from ..core.tableau import TABLEAUS
from .threads import over_members

_MEMBER_SIG = types.void(
    F2,  # x0 of one member (n, d)
    F1,  # ts (T,)
    I1,  # steps per save interval (T-1,)
    F1,  # step size per save interval (T-1,)
    F2,  # A (s, s)
    F1,  # b (s,)
    F1,  # c (s,)
    F1,  # p
    DRIFT_FN,
    PROJECT_FN,
    RETRACT_FN,
    types.int64,  # drift workspace floats
    F3,  # out of one member (T, n, d)
)
_KERNEL_SIG = types.void(F3, *_MEMBER_SIG.args[1:-1], F4)


@njit(inline="always", **NJIT)
def stage_point(x, A, k, st, h, y):
    """y <- Y_st = x + h sum_{m<st} a_{st,m} k_m, the point where stage st is evaluated."""
    n, d = x.shape
    for r in range(n):
        for q in range(d):
            acc = 0.0
            for m in range(st):
                acc += A[st, m] * k[m, r, q]
            y[r, q] = x[r, q] + h * acc


@njit(inline="always", **NJIT)
def advance(x, b, k, h):
    """x <- x + h sum_m b_m k_m, the step's update from its stages."""
    n, d = x.shape
    for r in range(n):
        for q in range(d):
            acc = 0.0
            for m in range(b.shape[0]):
                acc += b[m] * k[m, r, q]
            x[r, q] += h * acc


@njit(_MEMBER_SIG, **NJIT)
def _rk_member(x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out):
    """All steps of one member; scratch (and the drift's workspace) allocated once."""
    n, d = x0.shape
    s = b.shape[0]
    x = x0.copy()
    y = np.empty((n, d))
    k = np.empty((s, n, d))
    work = np.empty(work_size)
    copy2(out[0], x)
    for iv in range(counts.shape[0]):
        h = steps[iv]
        for j in range(counts[iv]):
            t = ts[iv] + j * h
            for st in range(s):
                stage_point(x, A, k, st, h, y)
                kst = k[st]
                drift(t + c[st] * h, y, p, kst, work)
                project(y, kst)
            advance(x, b, k, h)
            retract(x)
        copy2(out[iv + 1], x)


@njit(_KERNEL_SIG, **NJIT)
def _rk_block(x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out):
    for e in range(x0.shape[0]):
        _rk_member(x0[e], ts, counts, steps, A, b, c, p, drift, project, retract, work_size,
                   out[e])


_OBSERVED_MEMBER_SIG = types.void(
    *_MEMBER_SIG.args[:-1],
    OBSERVE_FN,
    F1,  # the observer's q
    types.int64,  # the observer's scratch floats
    F2,  # observations of one member (T, columns)
    F2,  # last state of one member (n, d)
)
_OBSERVED_SIG = types.void(F3, *_OBSERVED_MEMBER_SIG.args[1:-2], F3, F3, I1)


@njit(types.boolean(F2), **NJIT)
def _finite(x):
    bad = 0.0
    for r in range(x.shape[0]):
        for q in range(x.shape[1]):
            bad += x[r, q] * 0.0  # NaN for NaN and inf, 0 otherwise
    return bad == 0.0


@njit(types.boolean(*_OBSERVED_MEMBER_SIG.args), **NJIT)
def _rk_member_observed(x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size,
                        observe, q, own_size, rows, last):
    """All steps of one member, observed at the save times (no state stored); the drift's
    workspace starts as NaN, so an observer reads NaN where the drift left nothing. Returns
    whether every saved state was finite."""
    n, d = x0.shape
    s = b.shape[0]
    x = x0.copy()
    y = np.empty((n, d))
    k = np.empty((s, n, d))
    work = np.full(work_size, np.nan)
    own = np.empty(max(own_size, 1))
    finite = True
    for iv in range(counts.shape[0]):
        h = steps[iv]
        for j in range(counts[iv]):
            t = ts[iv] + j * h
            for st in range(s):
                stage_point(x, A, k, st, h, y)
                kst = k[st]
                drift(t + c[st] * h, y, p, kst, work)
                if st == 0 and j == 0:  # Y_1 = x at a save time: the drift has just seen it
                    observe(t, x, q, rows[iv], work, own)
                    if not _finite(x):
                        finite = False
                project(y, kst)
            advance(x, b, k, h)
            retract(x)
    end = ts.shape[0] - 1
    drift(ts[end], x, p, k[0], work)  # the last save time: one more evaluation, for the observer
    observe(ts[end], x, q, rows[end], work, own)
    if not _finite(x):
        finite = False
    copy2(last, x)
    return finite


@njit(_OBSERVED_SIG, **NJIT)
def _rk_block_observed(x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size,
                       observe, q, own_size, rows, last, finite):
    for e in range(x0.shape[0]):
        finite[e] = _rk_member_observed(x0[e], ts, counts, steps, A, b, c, p, drift, project,
                                        retract, work_size, observe, q, own_size, rows[e],
                                        last[e])


def _run(x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out):
    """The members in blocks across threads (:mod:`integrators.numba.threads`)."""
    over_members(x0.shape[0], lambda lo, hi: _rk_block(
        x0[lo:hi], ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out[lo:hi]))


def _solve_observed_rk(integrator, problem, x0, ts, p, observer) -> Solution:
    """The observed solve of a fixed-step RK method: rows (E, T, columns), no states."""
    if problem.drift is None:
        raise ValueError("the numba backend needs Problem.drift (a numba DRIFT_SIG function)")
    geom = problem.geometry
    tab = integrator.TABLEAU
    counts, steps = step_grid(ts, integrator.options["dt"])
    members = x0.shape[0]
    rows = np.empty((members, ts.shape[0], observer.columns))
    last = np.empty_like(x0)
    finite = np.empty(members, dtype=np.int64)
    A, b, c, p, q = (np.array(a) for a in (tab.A, tab.b, tab.c, p, observer.q))
    compile_ahead(_rk_block_observed, problem.drift, geom.project, geom.retract, observer.kernel)
    work_size = problem.work_size(*x0.shape[1:])
    over_members(members, lambda lo, hi: _rk_block_observed(
        x0[lo:hi], ts, counts, steps, A, b, c, p, problem.drift, geom.project, geom.retract,
        work_size, observer.kernel, q, observer.work, rows[lo:hi], last[lo:hi], finite[lo:hi]))
    status = np.where(finite != 0, OK, NONFINITE).astype(np.int8)
    steps_taken = np.full(members, float(int(counts.sum())))
    return Solution(None, status, {"steps": steps_taken, "rejections": np.zeros(members)},
                    last_state=last, observations=rows)


class NumbaRK(FixedStep, AbstractIntegrator):
    """Fixed-step explicit RK (table ``TABLEAU``) on the numba backend. Option ``dt``: the
    largest step; the step used divides every save interval evenly (see :mod:`integrators.core.base`).
    """

    backend = "numba"
    TABLEAU = None
    observes = True

    def _solve_observed(self, problem, x0, ts, p, observer):
        return _solve_observed_rk(self, problem, x0, ts, p, observer)

    def _solve(self, problem, x0, ts, p, noise):
        if problem.drift is None:
            raise ValueError("the numba backend needs Problem.drift (a numba DRIFT_SIG function)")
        geom = problem.geometry
        tab = self.TABLEAU
        counts, steps = step_grid(ts, self.options["dt"])
        out = np.empty((x0.shape[0], ts.shape[0]) + x0.shape[1:])
        # The kernel's signature takes writable arrays; tables and p are stored read-only.
        A, b, c, p = (np.array(a) for a in (tab.A, tab.b, tab.c, p))
        compile_ahead(_rk_block, problem.drift, geom.project, geom.retract)
        _run(x0, ts, counts, steps, A, b, c, p, problem.drift, geom.project, geom.retract,
             problem.work_size(*x0.shape[1:]), out)
        return out


class NumbaEuler(NumbaRK):
    """Forward Euler, order 1."""

    method = "euler"
    TABLEAU = TABLEAUS["euler"]


class NumbaHeun(NumbaRK):
    """Heun (explicit trapezoid), order 2."""

    method = "heun"
    TABLEAU = TABLEAUS["heun"]


class NumbaRK4(NumbaRK):
    """Classic Runge-Kutta, order 4."""

    method = "rk4"
    TABLEAU = TABLEAUS["rk4"]


METHODS = {cls.method: cls for cls in (NumbaEuler, NumbaHeun, NumbaRK4)}
