"""The one-stage loops of integrators.numba.fixed (forward Euler, the network form's layers)
against the general RK loops run with the same one-stage table: the same states, observed
rows, last states and finiteness flags, bit for bit, for the attention layer (POSTNORM), the
sphere's projected field, and a field that reads the sign of zero and the time (so a loop
that evaluated the drift at x itself instead of at Y_1 = x + h * 0, or at another time,
would differ)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _problems import SPHERE_P, SPHERE_X0, sphere_drift
from dyn.attention import architecture, schemes
from dyn.attention.init import uniform_sphere
from dyn.attention.observer import pair_observer
from integrators.core.base import step_grid
from integrators.core.geometry import EUCLIDEAN, POSTNORM, SPHERE
from integrators.core.tableau import TABLEAUS
from integrators.numba import fixed
from integrators.numba.abi import DRIFT_SIG, NJIT, OBSERVE_SIG
from integrators.numba.jit import njit


@njit(DRIFT_SIG, **NJIT)
def signed_drift(t, x, p, out, work):
    """out_rq = copysign(p_0 + t, x_rq): the velocity's sign is the sign of x_rq, -0.0 too."""
    n, d = x.shape
    for r in range(n):
        for q in range(d):
            out[r, q] = math.copysign(p[0] + t, x[r, q])


@njit(OBSERVE_SIG, **NJIT)
def state_row(t, x, q, row, drift_work, work):
    """row <- [x (flat), t]: the state the observer was shown."""
    n, d = x.shape
    for r in range(n):
        for c in range(d):
            row[r * d + c] = x[r, c]
    row[n * d] = t


def _attention():
    p = architecture.pack_architecture(4.0, 2, "SA")
    return schemes.scheme("post").network.problem(p)


def _both(problem, geometry, x0, ts, dt, b, c, observer=None):
    """(general, one-stage) results for the one-stage table (A = 0, b, c): the states, or
    (rows, last states, finiteness) with an observer (kernel, q, columns, work)."""
    counts, steps = step_grid(ts, dt)
    A, b, c = np.zeros((1, 1)), np.array([b]), np.array([c])
    p = np.array(problem.p)
    n, d = x0.shape[1:]
    args = (ts, counts, steps, A, b, c, p, problem.drift, geometry.project, geometry.retract, problem.work_size(n, d))
    found = []
    for stored, observed in (
        (fixed._rk_block, fixed._rk_block_observed),
        (fixed._one_stage_block, fixed._one_stage_block_observed),
    ):
        if observer is None:
            out = np.empty((x0.shape[0], len(ts), n, d))
            stored(x0, *args, out)
            found.append(out)
        else:
            kernel, q, columns, work = observer
            rows = np.empty((x0.shape[0], len(ts), columns))
            last = np.empty_like(x0)
            finite = np.empty(x0.shape[0], dtype=np.int64)
            observed(x0, *args, kernel, q, work, rows, last, finite)
            found.append((rows, last, finite))
    return found


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_the_euler_table_takes_the_one_stage_loops():
    assert fixed.kernels(TABLEAUS["euler"]) == (fixed._one_stage_block, fixed._one_stage_block_observed)
    for name in ("heun", "rk4"):
        assert fixed.kernels(TABLEAUS[name]) == (fixed._rk_block, fixed._rk_block_observed)


@pytest.mark.parametrize("case", ["attention", "sphere", "signed"])
def test_one_stage_loops_are_the_rk_loops_bit_for_bit(case):
    """Stored states and observed rows of the one-stage loops equal the general loops' bits,
    for Euler (b = 1, c = 0) and another one-stage table (b = 0.75, c = 0.5); a member that
    blows up (NaN) is flagged alike."""
    rng = np.random.default_rng(11)
    ts = np.array([0.0, 0.3, 0.5, 1.2])
    if case == "attention":
        problem, geometry = _attention(), POSTNORM
        x0 = uniform_sphere(rng, 5, 12, 2)
        x0[1, 3] = (-0.0, -1.0)  # a signed zero in a unit token
        x0[2, 0, 0] = np.nan  # a member that is not finite from the start
        ob = pair_observer(12, 2, 1e-3, 4.0, labels=True, from_field=True, token_sum=True)
        observer = (ob.kernel, ob.q, ob.columns, ob.work)
    elif case == "sphere":
        problem, geometry = _sphere_problem(), SPHERE
        x0 = np.array(SPHERE_X0)
        observer = (state_row, np.zeros(0), x0.shape[1] * x0.shape[2] + 1, 0)
    else:
        problem, geometry = _signed_problem(), EUCLIDEAN
        x0 = np.array([[[-0.0, 0.5], [0.0, -2.0]], [[1.0, -0.0], [np.inf, 3.0]]])
        observer = (state_row, np.zeros(0), 5, 0)
    for b, c in ((1.0, 0.0), (0.75, 0.5)):
        general, one = _both(problem, geometry, x0, ts, 0.1, b, c)
        assert _same_bits(general, one)
        general, one = _both(problem, geometry, x0, ts, 0.1, b, c, observer)
        for g, o in zip(general, one, strict=True):
            assert _same_bits(g, o)
        finite = general[2]
        if case == "attention":
            assert list(finite) == [1, 1, 0, 1, 1]
        if case == "signed":
            assert list(finite) == [1, 0]


def test_the_drift_sees_the_stage_point_not_the_state():
    """Y_1 = x + h * 0 turns -0.0 into +0.0: the first velocity of a -0.0 entry is +(p_0 + t),
    so after one step it is +h (1 + 0); at x itself it would be -h. The observer is shown x."""
    problem = _signed_problem()
    x0 = np.array([[[-0.0, 0.5]]])
    ts = np.array([0.0, 0.25])
    general, one = _both(problem, EUCLIDEAN, x0, ts, 0.25, 1.0, 0.0)
    assert one[0, 1, 0, 0] == 0.25 and general[0, 1, 0, 0] == 0.25
    general, one = _both(problem, EUCLIDEAN, x0, ts, 0.25, 1.0, 0.0, (state_row, np.zeros(0), 3, 0))
    assert math.copysign(1.0, one[0][0, 0, 0]) == -1.0  # the row at t = 0 shows x0's -0.0
    assert _same_bits(general[0], one[0])


def _sphere_problem():
    import integrators

    return integrators.Problem(drift=sphere_drift, p=SPHERE_P, geometry=SPHERE)


def _signed_problem():
    import integrators

    return integrators.Problem(drift=signed_drift, p=np.array([1.0]), geometry=EUCLIDEAN)
