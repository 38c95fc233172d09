"""The adaptive embedded Runge-Kutta pairs of the numba backend (integrators.numba.adaptive).

Orders are fitted as the slope of log(error) against log(h) on a uniform grid of save times with
a tolerance so loose that every step is accepted: each step is then clipped to the next save
time, i.e. fixed steps h = T/N through the adaptive kernel itself. Tolerance +-0.3 on the slope
(the fits give 5.2 and 3.04: dopri5's local slopes fall from 5.34 to 5.13 over this range, its
leading error constant is small; a wrong order is off by >= 1). With adaptation on, the error
must scale with the tolerance (slope 1 within 0.25: Hairer-type control keeps the global error
proportional to tol up to a constant; the fits give 0.93-1.05).
"""

import numpy as np
import pytest

import integrators
from _problems import (
    LOGISTIC_P,
    LOGISTIC_X0,
    SPHERE_P,
    SPHERE_X0,
    blowup_drift,
    logistic_drift,
    logistic_exact,
    sphere_drift,
    sphere_reference,
)
from integrators.core.geometry import SPHERE
from integrators.core.tableau import ButcherTableau
from integrators.numba import adaptive as na

LOGISTIC = integrators.Problem(drift=logistic_drift, p=LOGISTIC_P)
SPHERE_PROBLEM = integrators.Problem(drift=sphere_drift, p=SPHERE_P, geometry=SPHERE)
ORDERS = {"dopri5": 5, "bosh3": 3}
STEPS = {"dopri5": [16, 24, 32, 48, 64], "bosh3": [16, 32, 64, 128]}  # errors 7e-9..5e-12


def _slope(x, y):
    return np.polyfit(np.log(x), np.log(y), 1)[0]


@pytest.fixture(scope="module")
def sphere_ref():
    return sphere_reference(SPHERE_X0, SPHERE_P, np.array([0.0, 1.0]))[:, -1]


@pytest.mark.parametrize("method", sorted(ORDERS))
def test_order_from_log_log_slope_on_the_sphere(method, sphere_ref):
    errors, hs = [], []
    for N in STEPS[method]:
        ts = np.linspace(0.0, 1.0, N + 1)
        integ = integrators.get("numba", method, rtol=1e6, atol=1e6, dt0=1.0 / N)
        sol = integ.solve(SPHERE_PROBLEM, SPHERE_X0, ts)
        out = sol.states[:, -1]
        assert (sol.stats["steps"] == N).all() and (sol.stats["rejections"] == 0).all()
        errors.append(np.abs(out - sphere_ref).max())
        hs.append(1.0 / N)
    assert abs(_slope(hs, errors) - ORDERS[method]) < 0.3, (hs, errors)


@pytest.mark.parametrize("method", sorted(ORDERS))
def test_error_proportional_to_tolerance(method):
    T = np.array([0.0, 10.0])
    exact = logistic_exact(LOGISTIC_X0, LOGISTIC_P, 10.0)
    tols = [1e-5, 1e-6, 1e-7, 1e-8]
    errors, steps = [], []
    for tol in tols:
        integ = integrators.get("numba", method, rtol=tol, atol=tol)
        sol = integ.solve(LOGISTIC, LOGISTIC_X0, T)
        errors.append(np.abs(sol.states[:, -1] - exact).max())
        steps.append(sol.stats["steps"].sum())
        assert errors[-1] < 50 * tol  # the global error stays within a modest multiple of tol
    assert abs(_slope(tols, errors) - 1.0) < 0.25, errors
    # fewer steps at looser tolerance, at the rate of the order: steps ~ tol^{-1/p}
    assert abs(_slope(tols, steps) + 1.0 / ORDERS[method]) < 0.1, steps


def test_stays_on_the_sphere_and_hits_the_save_times(sphere_ref):
    ts = np.array([0.0, 0.3, 0.31, 0.7, 1.0])
    integ = integrators.get("numba", "dopri5", rtol=1e-10, atol=1e-12)
    out = integ.solve(SPHERE_PROBLEM, SPHERE_X0, ts).states
    assert np.abs(np.linalg.norm(out, axis=-1) - 1.0).max() < 1e-14
    np.testing.assert_array_equal(out[:, 0], SPHERE_X0)
    np.testing.assert_allclose(out[:, -1], sphere_ref, atol=1e-9)
    want = sphere_reference(SPHERE_X0, SPHERE_P, ts)
    np.testing.assert_allclose(out, want, atol=1e-9)


@pytest.mark.slow  # JAX compiles; the default tier keeps numba's slopes and diffrax's exact adaptive checks
def test_agrees_with_diffrax_tsit5():
    pytest.importorskip("jax")
    from dyn import attention as att

    rng = np.random.default_rng(21)
    x0 = att.uniform_sphere(rng, 3, 10, 3)
    ts = np.linspace(0.0, 3.0, 7)
    problem = att.flow_problem(att.pack_params(2.5, 3, "SA"))
    a = integrators.get("numba", "dopri5", rtol=1e-11, atol=1e-12).solve(problem, x0, ts).states
    b = integrators.get("diffrax", "tsit5", rtol=1e-11, atol=1e-12).solve(problem, x0, ts).states
    np.testing.assert_allclose(a, b, atol=1e-9)


def test_fsal_reuse_only_on_flat_geometry():
    # 8 fixed steps (loose tolerance, save grid of step 1/8), one evaluation at the start. Flat:
    # the last stage is the next first stage, 6 evaluations per step. Sphere: the retraction moves
    # x, so every step after the first evaluates its first stage again: 7 per step.
    N = 8
    ts = np.linspace(0.0, 1.0, N + 1)
    cases = ((LOGISTIC, LOGISTIC_X0, 1 + 6 * N), (SPHERE_PROBLEM, SPHERE_X0, 7 * N))
    for problem, x0, want in cases:
        integ = integrators.get("numba", "dopri5", rtol=1e6, atol=1e6, dt0=1.0 / N)
        sol = integ.solve(problem, x0, ts)
        assert (sol.stats["evaluations"] == want).all(), sol.stats


def test_failures_are_nan_not_raised():
    x0 = np.array([[[1.0]], [[0.2]]])  # x' = x^2 blows up at t = 1 / x0 = 1 (member 0 only)
    problem = integrators.Problem(drift=blowup_drift, p=np.zeros(1))
    integ = integrators.get("numba", "dopri5", rtol=1e-8, atol=1e-8)
    sol = integ.solve(problem, x0, np.array([0.0, 0.5, 2.0]))
    out = sol.states
    assert np.isfinite(out[0, 1]).all() and np.isnan(out[0, 2]).all()
    assert list(sol.status) == [integrators.NONFINITE, integrators.OK]  # blew up, not max_steps
    np.testing.assert_allclose(out[1, 2, 0, 0], 0.2 / (1 - 0.4), rtol=1e-7)
    capped = integrators.get("numba", "dopri5", max_steps=3)
    assert np.isnan(capped.solve(LOGISTIC, LOGISTIC_X0, np.array([0.0, 50.0])).states[:, 1]).all()


def test_options_are_checked():
    for bad, words in (
        (dict(rtol=0), "rtol"),
        (dict(atol=-1), "atol"),
        (dict(dt0=np.inf), "dt0"),
        (dict(max_steps=0), "max_steps"),
        (dict(max_steps=True), "max_steps"),
        (dict(dt=0.1), "unknown option"),
    ):
        with pytest.raises(ValueError, match=words):
            integrators.get("numba", "dopri5", **bad)
    assert {"dopri5", "bosh3"} <= set(integrators.available()["numba"])


def test_a_wrong_pair_fails_when_built():
    pair = na.DOPRI5
    sol = pair.solution
    b = sol.b.copy()
    b[2], b[3] = b[2] + 1e-3, b[3] - 1e-3  # still sums to 1 (order 1), breaks the rest
    with pytest.raises(ValueError, match="order condition"):
        na.EmbeddedPair("bad", ButcherTableau("bad", sol.A, b, sol.c, 1), pair.embedded, 5, False)
    A = sol.A.copy()
    A[6, 5] += 1e-3  # row sum kept and b_7 = 0: both tables still pass, the FSAL row does not
    A[6, 4] -= 1e-3
    with pytest.raises(ValueError, match="FSAL"):
        na.EmbeddedPair(
            "bad",
            ButcherTableau("bad", A, sol.b, sol.c, 4),
            ButcherTableau("bad_e", A, pair.embedded.b, sol.c, 1),
            5,
            True,
        )
    for name, value, target in na.order5_conditions(sol.A, sol.b, sol.c):
        assert abs(value - target) < 1e-14, name
