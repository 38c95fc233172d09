"""The diffrax backend: same schemes as numba, on the manifold, compiled once per sweep."""

import numpy as np
import pytest

import integrators
from _problems import (
    LOGISTIC_P,
    LOGISTIC_X0,
    SPHERE_P,
    SPHERE_X0,
    blowup_drift_jax,
    logistic_drift,
    logistic_drift_jax,
    logistic_exact,
    sphere_drift,
    sphere_drift_jax,
    sphere_reference,
)
from integrators.core.geometry import SPHERE

TS = np.linspace(0.0, 1.0, 6)
LOGISTIC = integrators.Problem(logistic_drift, logistic_drift_jax, LOGISTIC_P)
SPHERE_PROBLEM = integrators.Problem(sphere_drift, sphere_drift_jax, SPHERE_P, SPHERE)


def _unit_error(x):
    return np.abs(np.linalg.norm(x, axis=-1) - 1.0).max()


# one diffrax compile each: rk4 on R^d in the default tier, the lower orders and the sphere (whose
# retracting wrapper test_attention_backends runs in the default tier) in the slow one
@pytest.mark.parametrize("method", ["rk4", *(pytest.param(m, marks=pytest.mark.slow) for m in ("euler", "heun"))])
@pytest.mark.parametrize(
    "problem", [LOGISTIC, pytest.param(SPHERE_PROBLEM, marks=pytest.mark.slow)], ids=["euclidean", "sphere"]
)
def test_fixed_step_matches_numba(method, problem):
    """Same table, same step grid, same projection/retraction: equal to rounding."""
    x0 = LOGISTIC_X0 if problem is LOGISTIC else SPHERE_X0
    a = integrators.get("numba", method, dt=0.03).solve(problem, x0, TS).states
    b = integrators.get("diffrax", method, dt=0.03).solve(problem, x0, TS).states
    assert b.shape == a.shape == (x0.shape[0], TS.shape[0]) + x0.shape[1:]
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
    if problem is SPHERE_PROBLEM:
        assert _unit_error(b) < 1e-12


# JAX compiles each method: diffrax's tsit5 on the sphere against numba stays default in
# test_attention_backends
@pytest.mark.slow
@pytest.mark.parametrize("method", ["tsit5", "dopri5"])
def test_adaptive_sphere(method):
    """Tight adaptive solve = RK4 at a small step = DOP853 reference, and stays on the sphere."""
    ref = sphere_reference(SPHERE_X0, SPHERE_P, TS)
    rk4 = integrators.get("numba", "rk4", dt=2.0**-8).solve(SPHERE_PROBLEM, SPHERE_X0, TS).states
    x = integrators.get("diffrax", method, rtol=1e-12, atol=1e-12).solve(SPHERE_PROBLEM, SPHERE_X0, TS).states
    assert _unit_error(x) < 1e-12
    np.testing.assert_allclose(x, rk4, rtol=0, atol=1e-8)
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-9)


@pytest.mark.slow  # JAX compiles; an adaptive diffrax solve against numba stays default in test_attention_backends
def test_adaptive_euclidean_exact():
    integ = integrators.get("diffrax", "tsit5", rtol=1e-10, atol=1e-12)
    x = integ.solve(LOGISTIC, LOGISTIC_X0, TS).states
    exact = np.stack([logistic_exact(LOGISTIC_X0, LOGISTIC_P, t) for t in TS], axis=1)
    np.testing.assert_allclose(x, exact, rtol=0, atol=1e-8)


def test_new_parameters_do_not_recompile():
    integ = integrators.get("diffrax", "tsit5", rtol=1e-8, atol=1e-10)
    a = integ.solve(LOGISTIC, LOGISTIC_X0, TS).states
    program = integ.program(LOGISTIC)
    n = program.traces
    assert n >= 1
    p2 = LOGISTIC_P * np.array([0.5, 2.0])
    b = (
        integrators.get("diffrax", "tsit5", rtol=1e-8, atol=1e-10)
        .solve(integrators.Problem(None, logistic_drift_jax, p2), LOGISTIC_X0 + 0.01, TS + 0.5)
        .states
    )
    assert program.traces == n, "a new p, x0 or ts of the same shapes must not retrace"
    assert not np.allclose(a, b)
    exact = np.stack([logistic_exact(LOGISTIC_X0 + 0.01, p2, t, 0.5) for t in TS + 0.5], axis=1)
    np.testing.assert_allclose(b, exact, rtol=0, atol=1e-6)


@pytest.mark.slow  # JAX compiles; the same contract for numba's adaptive integrator (test_numba_adaptive) stays default
def test_failed_member_is_nan_not_raised():
    prob = integrators.Problem(drift_jax=blowup_drift_jax)
    x0 = np.array([[[0.1]], [[1.0]]])  # x' = x^2 blows up at t = 10 and t = 1
    x = integrators.get("diffrax", "tsit5", max_steps=200).solve(prob, x0, np.array([0.0, 2.0])).states
    np.testing.assert_allclose(x[0, -1], 0.1 / (1 - 0.1 * 2.0), rtol=1e-5)
    assert np.all(np.isnan(x[1]))


def test_diffrax_validation():
    with pytest.raises(ValueError, match="drift_jax"):
        integrators.get("diffrax", "rk4").solve(integrators.Problem(logistic_drift), LOGISTIC_X0, TS)
    with pytest.raises(ValueError, match="rtol"):
        integrators.get("diffrax", "tsit5", rtol=-1.0)
    with pytest.raises(ValueError, match="max_steps"):
        integrators.get("diffrax", "tsit5", max_steps=0.5)
    with pytest.raises(ValueError, match="allowed.*atol"):
        integrators.get("diffrax", "dopri5", dt=0.1)
