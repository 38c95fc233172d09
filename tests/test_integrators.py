"""The numba backend, the Butcher tables, the geometry and the public API: the mathematics.

Convergence orders are fitted as the slope of log(error) against log(dt). Tolerance +-0.25:
with the dt ranges below the errors sit in the asymptotic regime (next-order terms shift the
fitted slope by < 0.1 here) and stay far above the reference error (closed form, or DOP853 at
rtol 1e-13), so a wrong order (off by >= 1) can never pass and a right one never fails.
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
    rk_oracle,
    sphere_drift,
    sphere_drift_np,
    sphere_project_np,
    sphere_reference,
)
from integrators.core.base import step_grid, step_times
from integrators.core.geometry import EUCLIDEAN, SPHERE
from integrators.core.tableau import TABLEAUS

ORDER_TOL = 0.25
# dt ranges per method: small enough to be asymptotic, large enough to stay above round-off.
DTS = {
    "euler": 2.0 ** -np.arange(4, 9),
    "heun": 2.0 ** -np.arange(3, 8),
    "rk4": 2.0 ** -np.arange(2, 6),
}
T01 = np.array([0.0, 1.0])

LOGISTIC = integrators.Problem(drift=logistic_drift, p=LOGISTIC_P)
SPHERE_PROBLEM = integrators.Problem(drift=sphere_drift, p=SPHERE_P, geometry=SPHERE)


def _slope(dts, errors):
    return np.polyfit(np.log(dts), np.log(errors), 1)[0]


def _unit_error(x):
    return np.abs(np.linalg.norm(x, axis=-1) - 1.0).max()


@pytest.fixture(scope="module")
def sphere_ref():
    return sphere_reference(SPHERE_X0, SPHERE_P, T01)[:, -1]


# --- Butcher tables ---------------------------------------------------------------------------

# Order conditions (b, A, c) -> value, grouped by the order they belong to.
ORDER_CONDITIONS = {
    1: [lambda A, b, c: b.sum() - 1.0],
    2: [lambda A, b, c: b @ c - 1 / 2],
    3: [lambda A, b, c: b @ c**2 - 1 / 3, lambda A, b, c: b @ A @ c - 1 / 6],
    4: [
        lambda A, b, c: b @ c**3 - 1 / 4,
        lambda A, b, c: b @ (c * (A @ c)) - 1 / 8,
        lambda A, b, c: b @ A @ c**2 - 1 / 12,
        lambda A, b, c: b @ A @ A @ c - 1 / 24,
    ],
}


@pytest.mark.parametrize("name", sorted(TABLEAUS))
def test_tableau_invariants(name):
    tab = TABLEAUS[name]
    A, b, c = tab.A, tab.b, tab.c
    assert np.all(np.triu(A) == 0.0), "explicit: A strictly lower triangular"
    np.testing.assert_allclose(A.sum(axis=1), c, atol=1e-15)
    for order in range(1, tab.order + 1):
        for cond in ORDER_CONDITIONS[order]:
            assert abs(cond(A, b, c)) < 1e-15, (name, order)
    # ...and the declared order is the exact order: some next-order condition fails.
    if tab.order + 1 in ORDER_CONDITIONS:
        assert max(abs(cond(A, b, c)) for cond in ORDER_CONDITIONS[tab.order + 1]) > 1e-3


# --- Geometry ---------------------------------------------------------------------------------


def test_sphere_geometry_numba():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4))
    v = rng.normal(size=(5, 4))
    pv = v.copy()
    SPHERE.project(x, pv)
    np.testing.assert_allclose(np.sum(x * pv, axis=1), 0.0, atol=1e-14)
    np.testing.assert_allclose(pv, sphere_project_np(x, v), atol=1e-15)
    pv2 = pv.copy()
    SPHERE.project(x, pv2)  # a projection: P P = P
    np.testing.assert_allclose(pv2, pv, atol=1e-15)
    r = x.copy()
    SPHERE.retract(r)
    np.testing.assert_allclose(r, x / np.linalg.norm(x, axis=1, keepdims=True), atol=1e-15)
    e = x.copy()
    EUCLIDEAN.project(x, e)
    EUCLIDEAN.retract(e)
    np.testing.assert_array_equal(e, x)


def test_sphere_geometry_at_d2_is_the_general_loop_bit_for_bit():
    """d = 2 takes a written-out path (it vectorizes); it must keep the general loop's numbers,
    signed zeros, infinities and NaN included. The general loop, as the module had it, compiled
    here."""
    from numba import njit

    @njit(error_model="numpy")
    def project_loop(x, v):
        for i in range(x.shape[0]):
            xv = 0.0
            xx = 0.0
            for k in range(x.shape[1]):
                xv += x[i, k] * v[i, k]
                xx += x[i, k] * x[i, k]
            s = xv / xx
            for k in range(x.shape[1]):
                v[i, k] -= s * x[i, k]

    @njit(error_model="numpy")
    def retract_loop(x):
        for i in range(x.shape[0]):
            xx = 0.0
            for k in range(x.shape[1]):
                xx += x[i, k] * x[i, k]
            r = 1.0 / xx**0.5
            for k in range(x.shape[1]):
                x[i, k] *= r

    rng = np.random.default_rng(2)
    x = rng.normal(size=(64, 2)) * np.exp(rng.normal(scale=3.0, size=(64, 1)))
    v = rng.normal(size=(64, 2))
    x[:6] = [[-0.0, 1.0], [0.0, -0.0], [np.inf, 1.0], [np.nan, 2.0], [1e-300, -1e-300], [3.0, 4.0]]
    v[:6] = [[-0.0, 0.0], [1.0, -0.0], [2.0, np.nan], [1.0, 1.0], [-0.0, -0.0], [-4.0, 3.0]]
    for fast, loop, args in ((SPHERE.project, project_loop, (x, v)), (SPHERE.retract, retract_loop, (x,))):
        got, want = [a.copy() for a in args], [a.copy() for a in args]
        fast(*got)
        loop(*want)
        np.testing.assert_array_equal(got[-1].view(np.int64), want[-1].view(np.int64))


# --- Step grid --------------------------------------------------------------------------------


def test_step_grid_uniform_and_nonuniform():
    ts = np.linspace(0.0, 1.0, 11)
    counts, steps = step_grid(ts, 0.1)  # 0.1 / 0.1 must not round up to 2 steps
    assert np.all(counts == 1)
    counts, steps = step_grid(ts, 0.03)  # largest step <= dt dividing 0.1 evenly: 0.025
    assert np.all(counts == 4)
    np.testing.assert_allclose(steps, 0.025)
    counts, steps = step_grid(np.array([0.0, 0.1, 0.35, 1.0]), 0.1)
    np.testing.assert_array_equal(counts, [1, 3, 7])
    assert np.all(steps <= 0.1)
    grid = step_times(np.array([0.0, 0.1, 0.35, 1.0]), 0.1)
    assert grid.shape == (12,) and grid[-1] == 1.0 and np.all(np.diff(grid) > 0)


# --- Convergence orders -----------------------------------------------------------------------


@pytest.mark.parametrize("method", ["euler", "heun", "rk4"])
def test_order_euclidean(method):
    exact = logistic_exact(LOGISTIC_X0, LOGISTIC_P, 1.0)
    errors = [
        np.abs(integrators.get("numba", method, dt=h).solve(LOGISTIC, LOGISTIC_X0, T01).states[:, -1] - exact).max()
        for h in DTS[method]
    ]
    order = TABLEAUS[method].order
    assert abs(_slope(DTS[method], errors) - order) < ORDER_TOL, errors


@pytest.mark.parametrize("method", ["euler", "heun", "rk4"])
def test_order_sphere(method, sphere_ref):
    errors = []
    for h in DTS[method]:
        x = integrators.get("numba", method, dt=h).solve(SPHERE_PROBLEM, SPHERE_X0, T01).states
        assert _unit_error(x) < 1e-12
        errors.append(np.abs(x[:, -1] - sphere_ref).max())
    order = TABLEAUS[method].order
    assert abs(_slope(DTS[method], errors) - order) < ORDER_TOL, errors


@pytest.mark.parametrize("method", ["euler", "heun", "rk4"])
def test_kernel_matches_numpy_oracle(method):
    """The fused kernel is the projection method, step for step."""
    tab = TABLEAUS[method]
    x = integrators.get("numba", method, dt=0.1).solve(SPHERE_PROBLEM, SPHERE_X0, T01).states[:, -1]

    def f(t, y):
        return sphere_drift_np(t, y, SPHERE_P)

    def retract(y):
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    for xe, x0 in zip(x, SPHERE_X0, strict=True):
        ref = rk_oracle(f, sphere_project_np, retract, tab, x0, 0.0, 1.0, 10)
        np.testing.assert_allclose(xe, ref, rtol=0, atol=1e-13)


def test_projection_variants_orders(sphere_ref):
    """Why stages are projected at their own points: for RK4 on the sphere,
    projecting each stage at its own point keeps order 4; projecting the summed increment at x
    afterwards caps it at 2; projecting only the increment of raw stages drops it to 1."""
    tab = TABLEAUS["rk4"]
    dts = 2.0 ** -np.arange(3, 7)

    def f(t, y):
        return sphere_drift_np(t, y, SPHERE_P)

    def retract(y):
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    for mode, order in [("stages", 4), ("increment", 2), ("increment_only", 1)]:
        errors = [
            max(
                np.abs(rk_oracle(f, sphere_project_np, retract, tab, x0, 0.0, 1.0, int(round(1 / h)), mode) - r).max()
                for x0, r in zip(SPHERE_X0, sphere_ref, strict=True)
            )
            for h in dts
        ]
        assert abs(_slope(dts, errors) - order) < ORDER_TOL, (mode, errors)


# --- Saving, non-uniform times, divergence ----------------------------------------------------


def test_saves_and_nonuniform_times():
    ts = np.array([0.0, 0.1, 0.35, 1.0, 1.25])
    x = integrators.get("numba", "rk4", dt=0.01).solve(LOGISTIC, LOGISTIC_X0, ts).states
    assert x.shape == (3, 5, 1, 2)
    np.testing.assert_array_equal(x[:, 0], LOGISTIC_X0)
    exact = np.stack([logistic_exact(LOGISTIC_X0, LOGISTIC_P, t) for t in ts], axis=1)
    np.testing.assert_allclose(x, exact, rtol=0, atol=1e-9)
    one = integrators.get("numba", "rk4").solve(LOGISTIC, LOGISTIC_X0, ts[:1]).states
    np.testing.assert_array_equal(one[:, 0], LOGISTIC_X0)


def test_divergence_returns_nonfinite_without_raising():
    prob = integrators.Problem(drift=blowup_drift, p=np.zeros(0))
    x0 = np.array([[[0.1]], [[1.0]]])  # blows up at t = 10 and t = 1
    x = integrators.get("numba", "euler", dt=0.05).solve(prob, x0, np.array([0.0, 3.0])).states
    assert np.all(np.isfinite(x[0])) and not np.all(np.isfinite(x[1]))


# --- Validation and registry ------------------------------------------------------------------


def test_available_and_registry():
    av = integrators.available()
    assert av["numba"] == ["bosh3", "dopri5", "euler", "euler_maruyama", "heun", "rk4", "stochastic_heun"]
    assert set(av["diffrax"]) == {"tsit5", "dopri5", "euler", "euler_maruyama", "heun", "rk4"}
    assert integrators.options("numba", "rk4") == {"dt": 1e-2}
    with pytest.raises(ValueError, match="backend 'torch'.*allowed"):
        integrators.get("torch", "rk4")
    with pytest.raises(ValueError, match="method 'rk45'.*allowed.*rk4"):
        integrators.get("numba", "rk45")
    with pytest.raises(ValueError, match="option.*'rtol'.*allowed.*dt"):
        integrators.get("numba", "rk4", rtol=1e-3)


@pytest.mark.parametrize("dt", [-0.1, 0.0, np.nan, "fast"])
def test_bad_dt(dt):
    with pytest.raises(ValueError, match="dt"):
        integrators.get("numba", "euler", dt=dt)


def test_bad_inputs():
    integ = integrators.get("numba", "rk4", dt=0.1)
    ts = np.linspace(0, 1, 3)
    with pytest.raises(ValueError, match=r"x0 must have shape \(E, n, d\)"):
        integ.solve(LOGISTIC, LOGISTIC_X0[0], ts)
    with pytest.raises(ValueError, match="non-finite"):
        integ.solve(LOGISTIC, np.full((1, 1, 2), np.nan), ts)
    with pytest.raises(ValueError, match="increasing"):
        integ.solve(LOGISTIC, LOGISTIC_X0, ts[::-1])
    with pytest.raises(ValueError, match="1-D"):
        integ.solve(LOGISTIC, LOGISTIC_X0, ts[:, None])
    with pytest.raises(ValueError, match="drift"):
        integ.solve(integrators.Problem(p=LOGISTIC_P), LOGISTIC_X0, ts)
    with pytest.raises(ValueError, match="flat"):
        integrators.Problem(drift=logistic_drift, p=np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="flat"):  # a batch of points (P, m) is the jax backend's
        integ.solve(integrators.Problem(logistic_drift, p=np.zeros((2, 2))), LOGISTIC_X0, ts)
