"""The jax backend of integrators: a batch of points in one solve (points x runs), the numba
backend's schemes on its step grid, noise from one key per point, the problem's own step map,
absorbing stops, and the refusals."""

import numpy as np
import pytest

import integrators
from _problems import SPHERE_P, SPHERE_X0, sphere_drift, sphere_drift_jax
from integrators import SPHERE, Problem
from integrators.numba.abi import DIFFUSION_SIG, DRIFT_SIG, NJIT
from integrators.numba.jit import njit

pytest.importorskip("jax")

TS = np.array([0.0, 0.3, 0.7, 1.0])


def _sphere_points():
    """Two points (the field at two frequencies w) x three runs on the sphere."""
    ps = [SPHERE_P, np.concatenate([SPHERE_P[:-1], [5.0]])]
    return [Problem(sphere_drift, sphere_drift_jax, p, SPHERE) for p in ps]


@pytest.mark.parametrize("method", ["euler", "heun", "rk4"])
def test_rk_batch_is_the_numba_scheme(method):
    problems = _sphere_points()
    x0 = np.stack([SPHERE_X0, SPHERE_X0[::-1]])
    sol = integrators.get("jax", method, dt=0.05).solve(Problem.stack(problems), x0, TS)
    states = sol.states
    assert states.shape == (2, 3, len(TS), 4, 3)
    assert sol.status.shape == (2, 3) and sol.ok.all()
    np.testing.assert_array_equal(sol.stats["steps"], 20)  # 1 / 0.05 on the shared grid
    np.testing.assert_array_equal(states[:, :, 0], x0)
    for i, problem in enumerate(problems):
        want = integrators.get("numba", method, dt=0.05).solve(problem, x0[i], TS)
        np.testing.assert_allclose(states[i], want.states, rtol=0, atol=1e-13)
        np.testing.assert_array_equal(want.stats["steps"], sol.stats["steps"][i])
        # one point is the same contract as every backend's: p (m,), x0 (R, n, d)
        # (a batch of one, which XLA compiles apart from the batch of two: an ulp may differ)
        one = integrators.get("jax", method, dt=0.05).solve(problem, x0[i], TS)
        np.testing.assert_allclose(one.states, states[i], rtol=0, atol=1e-14)
        assert one.status.shape == (3,)


@njit(DRIFT_SIG, **NJIT)
def _ou_drift(t, x, p, out, work):
    for k in range(x.shape[1]):
        out[0, k] = -p[0] * x[0, k]


@njit(DIFFUSION_SIG, **NJIT)
def _ou_diffusion(t, x, p, dw, out, work):
    for k in range(x.shape[1]):
        out[0, k] = p[1] * dw[0, k]


def _ou_drift_jax(t, x, p):
    return -p[0] * x


def _ou_diffusion_jax(t, x, p, dw):
    return p[1] * dw


def _ou(theta, sigma):
    return Problem(
        _ou_drift,
        _ou_drift_jax,
        [theta, sigma],
        diffusion=_ou_diffusion,
        diffusion_jax=_ou_diffusion_jax,
        noise_shape=(1, 2),
    )


def test_euler_maruyama_on_given_increments_is_the_numba_path():
    rng = np.random.default_rng(0)
    problems = [_ou(1.0, 0.5), _ou(3.0, 1.5)]
    x0 = rng.normal(size=(2, 5, 1, 2))
    steps = int(integrators.core.base.step_grid(TS, 0.01)[0].sum())
    dw = rng.normal(scale=0.1, size=(2, 5, steps, 1, 2))
    states = (
        integrators.get("jax", "euler_maruyama", dt=0.01).solve(Problem.stack(problems), x0, TS, increments=dw).states
    )
    for i, problem in enumerate(problems):
        want = integrators.get("numba", "euler_maruyama", dt=0.01).solve(problem, x0[i], TS, increments=dw[i]).states
        np.testing.assert_allclose(states[i], want, rtol=1e-13, atol=1e-14)


def test_keys_give_a_point_its_numbers_whatever_its_batch():
    rng = np.random.default_rng(1)
    problems = [_ou(1.0, 0.5), _ou(2.0, 1.0), _ou(0.5, 2.0)]
    x0 = rng.normal(size=(3, 4, 1, 2))
    keys = rng.integers(0, 2**32, (3, 2), dtype=np.uint32)
    sde = integrators.get("jax", "euler_maruyama", dt=0.02)
    full = sde.solve(Problem.stack(problems), x0, TS, rng=keys).states
    alone = sde.solve(Problem.stack(problems[1:2]), x0[1:2], TS, rng=keys[1:2]).states
    np.testing.assert_array_equal(alone[0], full[1])
    single = sde.solve(problems[1], x0[1], TS, rng=keys[1]).states  # one point, its own key
    np.testing.assert_array_equal(single, full[1])
    again = sde.solve(Problem.stack(problems), x0, TS, rng=keys).states
    np.testing.assert_array_equal(again, full)
    assert np.ptp(full[:, :, -1]) > 0.1  # noise moved the runs apart


def test_rows_of_save_times_are_each_points_own_grid():
    problems = _sphere_points()
    x0 = np.stack([SPHERE_X0, SPHERE_X0])
    rows = np.array([TS, 2.0 * TS])  # the second point over [0, 2]
    states = integrators.get("jax", "rk4", dt=0.05).solve(Problem.stack(problems), x0, rows).states
    for i in range(2):
        want = (
            integrators.get("jax", "rk4", dt=0.05)
            .solve(Problem.stack(problems[i : i + 1]), x0[i : i + 1], rows[i])
            .states
        )
        np.testing.assert_allclose(states[i], want[0], rtol=0, atol=1e-14)


def _walk_step(t, x, p, h, xi):
    return x + p[1] * xi


def _walk_stop(x, p):
    return x[0, 0] * x[0, 0] > p[0] * p[0]


def test_absorbing_runs_stop_where_the_free_path_first_leaves():
    # a random walk x' = x + s xi stopped at |x| > a: the absorbing solve ends each run at the
    # first step the free walk (same keys, same noise) leaves, and keeps it there
    h, steps = 0.1, 60
    problems = [
        Problem(p=[a, s], noise_shape=(1, 1), step_jax=_walk_step, stop_jax=_walk_stop)
        for a, s in ((1.0, 0.3), (2.0, 0.2), (50.0, 0.1))
    ]
    batch = Problem.stack(problems)
    x0 = np.zeros((3, 16, 1, 1))
    keys = np.random.default_rng(2).integers(0, 2**32, (3, 2), dtype=np.uint32)
    walk = integrators.get("jax", "step_map", dt=h)
    grid = np.arange(steps + 1) * h
    free = walk.solve(batch, x0, grid, rng=keys).states[..., 0, 0]  # every step saved
    stopped = integrators.get("jax", "step_map", dt=h, absorbing=True).solve(
        batch, x0, np.array([0.0, steps * h]), rng=keys
    )
    states, taken = stopped.states, stopped.stats["steps"]
    assert states.shape == (3, 16, 2, 1, 1) and taken.shape == (3, 16)
    for i, (a, _) in enumerate(((1.0, 0.3), (2.0, 0.2), (50.0, 0.1))):
        out = np.abs(free[i, :, 1:]) > a
        first = np.where(out.any(axis=1), np.argmax(out, axis=1) + 1, steps)
        np.testing.assert_array_equal(taken[i], first)
        np.testing.assert_array_equal(states[i, :, -1, 0, 0], free[i, np.arange(16), first])
    assert (taken[0] < steps).all() and (taken[2] == steps).all()  # all absorbed, none
    assert 0 < (taken[1] < steps).sum() < 16  # some runs absorbed, some not


def _unit_speed(t, x, p):
    return x * 0.0 + 1.0


def _past(x, p):
    return x[0, 0] > p[0]


def test_absorbing_keeps_the_stopped_state_at_later_saves():
    # x' = 1 from 0 with h = 0.1, stopped once x > a: a = 0.25 after 3 steps, 0.55 after 6,
    # never for a = 5 (all 10 steps); saves at t = 0, 0.5, 1
    problems = [Problem(drift_jax=_unit_speed, p=[a], stop_jax=_past) for a in (0.25, 0.55, 5.0)]
    sol = integrators.get("jax", "euler", dt=0.1, absorbing=True).solve(
        Problem.stack(problems), np.zeros((3, 2, 1, 1)), np.linspace(0.0, 1.0, 3)
    )
    states, taken = sol.states, sol.stats["steps"]
    np.testing.assert_array_equal(taken, [[3, 3], [6, 6], [10, 10]])
    np.testing.assert_allclose(
        states[:, 0, :, 0, 0], [[0.0, 0.3, 0.3], [0.0, 0.5, 0.6], [0.0, 0.5, 1.0]], rtol=0, atol=1e-14
    )


def test_problem_stack_pads_and_refuses_mixed_fields():
    a, b = (
        _ou(1.0, 0.5),
        Problem(
            _ou_drift,
            _ou_drift_jax,
            [1.0, 0.5, 7.0],
            diffusion=_ou_diffusion,
            diffusion_jax=_ou_diffusion_jax,
            noise_shape=(1, 2),
        ),
    )
    np.testing.assert_array_equal(Problem.stack([a, b]).p, [[1.0, 0.5, 0.0], [1.0, 0.5, 7.0]])
    with pytest.raises(ValueError, match="noise_shape differs"):
        Problem.stack(
            [
                a,
                Problem(
                    _ou_drift,
                    _ou_drift_jax,
                    [1.0, 0.5],
                    diffusion=_ou_diffusion,
                    diffusion_jax=_ou_diffusion_jax,
                    noise_shape=(1, 3),
                ),
            ]
        )
    with pytest.raises(ValueError, match="single points"):
        Problem.stack([Problem.stack([a])])


def test_jax_backend_registered_and_refusals():
    assert integrators.available()["jax"] == ["euler", "euler_maruyama", "heun", "rk4", "step_map"]
    assert integrators.options("jax", "rk4") == {"dt": integrators.core.base.DEFAULT_DT, "absorbing": False}
    ode, sde = integrators.get("jax", "rk4"), integrators.get("jax", "euler_maruyama")
    flow = Problem.stack(_sphere_points())
    x0 = np.stack([SPHERE_X0, SPHERE_X0])
    with pytest.raises(ValueError, match=r"\(R, n, d\) for one point"):
        ode.solve(_sphere_points()[0], x0, TS)
    with pytest.raises(ValueError, match=r"\(P, R, n, d\) with P = 2"):
        ode.solve(flow, SPHERE_X0, TS)
    with pytest.raises(ValueError, match="no rng or increments"):
        ode.solve(flow, x0, TS, rng=np.zeros((2, 2)))
    with pytest.raises(ValueError, match="needs noise"):
        sde.solve(flow, x0, TS, rng=np.zeros((2, 2)))
    noisy = Problem.stack([_ou(1.0, 0.5)])
    with pytest.raises(ValueError, match="exactly one"):
        sde.solve(noisy, np.zeros((1, 2, 1, 2)), TS)
    with pytest.raises(ValueError, match="increments must have shape"):
        sde.solve(noisy, np.zeros((1, 2, 1, 2)), TS, increments=np.zeros((1, 2, 3, 1, 2)))
    with pytest.raises(ValueError, match="stop_jax"):
        integrators.get("jax", "euler_maruyama", absorbing=True).solve(
            noisy, np.zeros((1, 2, 1, 2)), TS, rng=np.zeros((1, 2))
        )
    with pytest.raises(ValueError, match="step_jax"):
        integrators.get("jax", "step_map").solve(noisy, np.zeros((1, 2, 1, 2)), TS, rng=np.zeros((1, 2)))
    with pytest.raises(ValueError, match="'absorbing' must be true or false"):
        integrators.get("jax", "euler", absorbing="yes")
    with pytest.raises(ValueError, match="strictly increasing"):
        ode.solve(flow, x0, TS[::-1])
