r"""Fixed-step explicit Runge-Kutta on an ensemble, in numba, with a projection method.

One step of size h from (t, x) on a manifold with tangent projection P and retraction R:

    Y_i = x + h \sum_{j<i} a_{ij} k_j              (stage points, not retracted)
    k_i = P_{Y_i} f(t + c_i h, Y_i)                (each velocity projected at its own point)
    x'  = R(x + h \sum_i b_i k_i).

This is the standard projection method: it keeps the order of the table (4 for RK4). Projecting
only the summed increment at x instead caps the order at 2 (checked in the tests).

The kernel is compiled once (on first use, :mod:`.jit`) for any table: the table is data (A, b, c), and drift,
project and retract are first-class function arguments (see :mod:`integrators.numba.abi`).
The members run in blocks across threads (:mod:`.threads`); each member allocates its scratch
once, the drift's workspace included.

With an observer (:mod:`integrators.core.observer`) the kernel stores no state: at each save
time it calls the observer on the state, right after the first stage's drift evaluation there
(Y_1 = x; at the last save time the drift is evaluated once more), and keeps its row.

A one-stage table (forward Euler: the network form's layers) runs its own loops
(:func:`kernels`): one velocity array and flat state buffers whose loops (the stage point, the
update, the finiteness check) run once over the n d entries and vectorize, where the general
loops run over (n, d) with a stage loop inside. They do the same arithmetic in the same order,
so the numbers are the general loops' bit for bit: the stage point is still formed,
Y_1 = x + h * 0 (the empty sum is +0.0; x + 0.0 is x except that -0.0 becomes +0.0, and the
drift sees exactly the general loop's Y_1), and the update is x + h (0 + b_1 k_1).
benchmarks/fused_observation.py times them against the general loops.
"""

import numpy as np
from numba import types

from ..core.base import AbstractIntegrator, FixedStep, step_grid
from ..core.solution import NONFINITE, OK, Solution
from ..core.tableau import TABLEAUS
from .abi import DRIFT_FN, F1, F2, F3, F4, I1, NJIT, OBSERVE_FN, PROJECT_FN, RETRACT_FN
from .arrays import copy2
from .jit import compile_ahead, njit
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
        _rk_member(x0[e], ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out[e])


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
    """Whether every entry of x (C-contiguous) is finite: x * 0 is 0, not NaN. An or over the
    flat entries, which vectorizes (a float sum in order does not)."""
    flat = x.reshape(x.shape[0] * x.shape[1])
    bad = False
    for i in range(flat.shape[0]):
        bad |= flat[i] * 0.0 != 0.0
    return not bad


@njit(types.boolean(*_OBSERVED_MEMBER_SIG.args), **NJIT)
def _rk_member_observed(
    x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, observe, q, own_size, rows, last
):
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
def _rk_block_observed(
    x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, observe, q, own_size, rows, last, finite
):
    for e in range(x0.shape[0]):
        finite[e] = _rk_member_observed(
            x0[e],
            ts,
            counts,
            steps,
            A,
            b,
            c,
            p,
            drift,
            project,
            retract,
            work_size,
            observe,
            q,
            own_size,
            rows[e],
            last[e],
        )


@njit(inline="always", **NJIT)
def first_point(x, h, y):
    """y <- Y_1 = x + h * 0: :func:`stage_point` of the first stage (its sum is empty, +0.0),
    over the flat rows (one loop of n d: it vectorizes, the (n, d) loops with d = 2 do not)."""
    zero = h * 0.0
    for i in range(x.shape[0]):
        y[i] = x[i] + zero


@njit(inline="always", **NJIT)
def first_point_finite(x, h, y):
    """:func:`first_point`, and whether x is finite (every y_i * 0 is 0, not NaN), in the same
    loop (an or reduction, which vectorizes; a float sum in order does not)."""
    zero = h * 0.0
    bad = False
    for i in range(x.shape[0]):
        v = x[i] + zero
        y[i] = v
        bad |= v * 0.0 != 0.0
    return not bad


@njit(inline="always", **NJIT)
def advance_one(x, b0, k, h):
    """x <- x + h (0 + b_1 k_1): :func:`advance` of a one-stage table (the same sum), flat."""
    for i in range(x.shape[0]):
        x[i] += h * (0.0 + b0 * k[i])


@njit(_MEMBER_SIG, **NJIT)
def _one_stage_member(x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out):
    """:func:`_rk_member` for a one-stage table (s = 1, forward Euler), bit for bit: one
    velocity array, no stage loop."""
    n, d = x0.shape
    xf, yf, kf = np.empty(n * d), np.empty(n * d), np.empty(n * d)
    x, y, k = xf.reshape((n, d)), yf.reshape((n, d)), kf.reshape((n, d))
    copy2(x, x0)
    work = np.empty(work_size)
    b0, c0 = b[0], c[0]
    copy2(out[0], x)
    for iv in range(counts.shape[0]):
        h = steps[iv]
        for j in range(counts[iv]):
            t = ts[iv] + j * h
            first_point(xf, h, yf)
            drift(t + c0 * h, y, p, k, work)
            project(y, k)
            advance_one(xf, b0, kf, h)
            retract(x)
        copy2(out[iv + 1], x)


@njit(_KERNEL_SIG, **NJIT)
def _one_stage_block(x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out):
    for e in range(x0.shape[0]):
        _one_stage_member(x0[e], ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out[e])


@njit(types.boolean(*_OBSERVED_MEMBER_SIG.args), **NJIT)
def _one_stage_member_observed(
    x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, observe, q, own_size, rows, last
):
    """:func:`_rk_member_observed` for a one-stage table, bit for bit."""
    n, d = x0.shape
    xf, yf, kf = np.empty(n * d), np.empty(n * d), np.empty(n * d)
    x, y, k = xf.reshape((n, d)), yf.reshape((n, d)), kf.reshape((n, d))
    copy2(x, x0)
    work = np.full(work_size, np.nan)
    own = np.empty(max(own_size, 1))
    b0, c0 = b[0], c[0]
    finite = True
    for iv in range(counts.shape[0]):
        h = steps[iv]
        for j in range(counts[iv]):
            t = ts[iv] + j * h
            if j == 0:  # a save time: the observer sees x right after the drift did
                finite &= first_point_finite(xf, h, yf)
                drift(t + c0 * h, y, p, k, work)
                observe(t, x, q, rows[iv], work, own)
            else:
                first_point(xf, h, yf)
                drift(t + c0 * h, y, p, k, work)
            project(y, k)
            advance_one(xf, b0, kf, h)
            retract(x)
    end = ts.shape[0] - 1
    drift(ts[end], x, p, k, work)  # the last save time: one more evaluation, for the observer
    observe(ts[end], x, q, rows[end], work, own)
    if not _finite(x):
        finite = False
    copy2(last, x)
    return finite


@njit(_OBSERVED_SIG, **NJIT)
def _one_stage_block_observed(
    x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, observe, q, own_size, rows, last, finite
):
    for e in range(x0.shape[0]):
        finite[e] = _one_stage_member_observed(
            x0[e],
            ts,
            counts,
            steps,
            A,
            b,
            c,
            p,
            drift,
            project,
            retract,
            work_size,
            observe,
            q,
            own_size,
            rows[e],
            last[e],
        )


def kernels(tableau) -> tuple:
    """(stored, observed) block kernels for a table: the one-stage loops for a one-stage table
    (forward Euler; the same numbers as the general loops), else the general RK loops."""
    if len(tableau.b) == 1:
        return _one_stage_block, _one_stage_block_observed
    return _rk_block, _rk_block_observed


def _run(block, x0, ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out):
    """The members in blocks across threads (:mod:`integrators.numba.threads`)."""
    over_members(
        x0.shape[0],
        lambda lo, hi: block(x0[lo:hi], ts, counts, steps, A, b, c, p, drift, project, retract, work_size, out[lo:hi]),
    )


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
    block = kernels(tab)[1]
    block, drift, project, retract, observe = compile_ahead(
        block, problem.drift, geom.project, geom.retract, observer.kernel
    )
    work_size = problem.work_size(*x0.shape[1:])
    over_members(
        members,
        lambda lo, hi: block(
            x0[lo:hi],
            ts,
            counts,
            steps,
            A,
            b,
            c,
            p,
            drift,
            project,
            retract,
            work_size,
            observe,
            q,
            observer.work,
            rows[lo:hi],
            last[lo:hi],
            finite[lo:hi],
        ),
    )
    status = np.where(finite != 0, OK, NONFINITE).astype(np.int8)
    steps_taken = np.full(members, float(int(counts.sum())))
    return Solution(
        None, status, {"steps": steps_taken, "rejections": np.zeros(members)}, last_state=last, observations=rows
    )


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
        block = kernels(tab)[0]
        block, drift, project, retract = compile_ahead(block, problem.drift, geom.project, geom.retract)
        _run(block, x0, ts, counts, steps, A, b, c, p, drift, project, retract, problem.work_size(*x0.shape[1:]), out)
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
