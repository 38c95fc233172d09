"""Linear in-context learning (dyn/frontier/linear_icl_flow.py): the layer's prediction is
x_q^T u U^T h on the paper's invariant set, the population loss is the Monte Carlo mean of the
squared error, Gamma* = ((1 + 1/N) Lambda + tr(Lambda)/N I)^{-1} is its minimizer, the flow
from the paper's start reaches it with u^2 = ||U||_F^2, the isotropic flow is the logistic
closed form, and (slow tier) the shipped scenarios: Gamma to 1e-8, gradient descent against the
flow at rate 1 in the step."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

import dyn
from dyn.frontier import linear_icl_flow as icl
from dyn.presentation.cli import main

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def _flow(theta0, lam_cov, n, times):
    return solve_ivp(
        lambda _, y: icl.field(y, lam_cov, n),
        (0.0, times[-1]),
        theta0,
        method="DOP853",
        rtol=1e-12,
        atol=1e-14,
        t_eval=times,
    ).y.T


def _paper_start(d, sigma):
    x0 = np.zeros(1 + icl.D * icl.D)
    x0[0] = sigma
    x0[1:] = (sigma * icl.padded(np.eye(d) / np.sqrt(d))).ravel()
    return x0


def test_the_layer_predicts_with_gamma_u_times_u_transpose():
    # f(E) = E + W^PV E (E^T W^KQ E)/N with only the last entry u of W^PV and the top-left
    # block U of W^KQ nonzero: its entry (d+1, N+1) is x_q^T (u U^T) (1/N) sum_i y_i x_i
    rng = np.random.default_rng(1)
    d, n = 3, 5
    x, xq, w = rng.standard_normal((n, d)), rng.standard_normal(d), rng.standard_normal(d)
    y = x @ w
    e = np.zeros((d + 1, n + 1))
    e[:d, :n], e[:d, n], e[d, :n] = x.T, xq, y
    u, big = 0.7, rng.standard_normal((d, d))
    pv, kq = np.zeros((d + 1, d + 1)), np.zeros((d + 1, d + 1))
    pv[d, d], kq[:d, :d] = u, big
    f = e + pv @ e @ (e.T @ kq @ e) / n
    h = (y[:, None] * x).mean(axis=0)
    assert abs(f[d, n] - xq @ (u * big.T) @ h) < 1e-12


def _full_layer_loss(pv, kq, x, xq, w):
    """1/2 mean over prompts of (f(E)_{d+1, N+1} - y_q)^2 for the full layer
    f(E) = E + W^PV E (E^T W^KQ E) / N (x (P, N, d), xq (P, d), w (P, d))."""
    prompts, n, d = x.shape
    e = np.zeros((prompts, d + 1, n + 1))
    e[:, :d, :n], e[:, :d, n], e[:, d, :n] = np.swapaxes(x, 1, 2), xq, np.einsum("pnd,pd->pn", x, w)
    f = e + pv @ e @ (np.swapaxes(e, 1, 2) @ kq @ e) / n
    return 0.5 * np.mean((f[:, d, n] - np.einsum("pd,pd->p", xq, w)) ** 2)


def test_from_the_papers_start_only_u_and_u_block_move():
    # the gradient of the full layer's loss over prompts paired by w -> -w (the symmetry that
    # makes the population gradient vanish off the set), at W^PV = [[0, 0], [0, u]],
    # W^KQ = [[U, 0], [0, 0]]: zero along every other entry that reaches the prediction (the
    # last row of W^PV, the last row of W^KQ; the others never do), by central differences
    rng = np.random.default_rng(6)
    d, n, prompts = 3, 4, 500
    lam_cov = icl.covariance(d, 1.0, 3.0, 0.4)
    root = np.linalg.cholesky(lam_cov)
    x = rng.standard_normal((prompts, n, d)) @ root.T
    xq = rng.standard_normal((prompts, d)) @ root.T
    w = rng.standard_normal((prompts, d))
    x, xq, w = np.concatenate([x, x]), np.concatenate([xq, xq]), np.concatenate([w, -w])
    theta = rng.standard_normal((d, d))
    pv, kq = np.zeros((d + 1, d + 1)), np.zeros((d + 1, d + 1))
    pv[d, d], kq[:d, :d] = 0.3, 0.3 * theta @ theta.T / np.linalg.norm(theta @ theta.T)
    h = 1e-5
    moved = []
    for which, i, j in [(0, d, k) for k in range(d)] + [(1, d, k) for k in range(d)] + [(0, d, d), (1, 0, 1)]:
        plus, minus = [pv.copy(), kq.copy()], [pv.copy(), kq.copy()]
        plus[which][i, j] += h
        minus[which][i, j] -= h
        moved.append((_full_layer_loss(*plus, x, xq, w) - _full_layer_loss(*minus, x, xq, w)) / (2 * h))
    assert np.abs(moved[: 2 * d]).max() < 1e-9  # off the set: no force
    assert min(abs(moved[-2]), abs(moved[-1])) > 1e-3  # u and U do move


def test_the_population_loss_is_the_mean_squared_error():
    # 1/2 E (x_q^T Gamma h - y_q)^2 over 200000 prompts against the closed form; the tolerance
    # is 5 standard errors (false-failure rate about 6e-7; the seed is fixed)
    rng = np.random.default_rng(2)
    d, n, prompts = 3, 4, 200_000
    lam_cov = icl.covariance(d, 1.3, 3.0, 0.5)
    root = np.linalg.cholesky(lam_cov)
    gamma = icl.gamma_star(lam_cov, n) + 0.3 * rng.standard_normal((d, d))
    x = rng.standard_normal((prompts, n + 1, d)) @ root.T
    w = rng.standard_normal((prompts, d))
    y = np.einsum("pnd,pd->pn", x, w)
    h = np.einsum("pn,pnd->pd", y[:, :n], x[:, :n]) / n
    half_sq = 0.5 * (np.einsum("pd,de,pe->p", x[:, n], gamma, h) - y[:, n]) ** 2
    se = half_sq.std() / np.sqrt(prompts)
    assert abs(half_sq.mean() - icl.loss_of_gamma(gamma, lam_cov, n)) < 5 * se


@pytest.mark.parametrize("d, n, kappa, angle", [(2, 1, 1.0, 0.0), (4, 10, 4.0, 0.6), (7, 3, 30.0, -1.1)])
def test_gamma_star_minimizes_the_population_loss(d, n, kappa, angle):
    lam_cov = icl.covariance(d, 0.8, kappa, angle)
    star = icl.gamma_star(lam_cov, n)
    b = (1 + 1 / n) * lam_cov @ lam_cov + np.trace(lam_cov) / n * lam_cov
    assert np.abs(lam_cov @ star @ b - lam_cov @ lam_cov).max() < 1e-12  # gradient zero
    assert np.abs(star - star.T).max() < 1e-12
    rng = np.random.default_rng(3)
    for _ in range(5):  # a convex quadratic: every other Gamma is above L*
        other = star + 1e-3 * rng.standard_normal((d, d))
        assert icl.loss_of_gamma(other, lam_cov, n) > icl.loss_star(lam_cov, n)
    assert abs(icl.loss_of_gamma(star, lam_cov, n) - icl.loss_star(lam_cov, n)) < 1e-13
    eig = np.linalg.eigvalsh(lam_cov)  # Lambda: the spectrum asked for
    assert np.allclose(np.sort(eig), np.sort(0.8 * kappa ** (-np.arange(d) / max(d - 1, 1))))


@pytest.mark.slow  # imports and compiles JAX (several seconds)
def test_the_field_is_minus_the_jax_gradient_of_the_loss():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(4)
    d, n = 5, 7
    lam_cov = icl.padded(icl.covariance(d, 1.0, 3.0, 0.4))
    theta = np.zeros(1 + icl.D**2)
    theta[0] = 0.4
    theta[1:] = icl.padded(rng.standard_normal((d, d))).ravel()
    grad = jax.grad(
        lambda t: icl.population_loss(
            {"u": t[:1], "U": t[1:].reshape(icl.D, icl.D)}, {"Lam": jnp.asarray(lam_cov)}, float(n)
        )
    )
    assert np.abs(-np.asarray(grad(jnp.asarray(theta))) - icl.field(theta, lam_cov, n)).max() < 1e-13


@pytest.mark.parametrize("d, n, kappa, angle", [(3, 5, 2.0, 0.6), (6, 20, 1.5, -0.3)])
def test_the_flow_reaches_gamma_star_balanced(d, n, kappa, angle):
    lam_cov = icl.covariance(d, 1.0, kappa, angle)
    rng = np.random.default_rng(5)
    theta = rng.standard_normal((d, d))
    block = theta @ theta.T / np.linalg.norm(theta @ theta.T)
    x0 = np.zeros(1 + icl.D**2)
    x0[0], x0[1:] = 0.1, (0.1 * icl.padded(block)).ravel()
    path = _flow(x0, icl.padded(lam_cov), n, np.array([0.0, 50.0, 200.0]))
    u, big = path[-1, 0], path[-1, 1:].reshape(icl.D, icl.D)
    star = icl.gamma_star(lam_cov, n)
    assert np.abs(u * big.T - icl.padded(star)).max() < 1e-8
    assert np.abs(path[:, 0] ** 2 - (path[:, 1:] ** 2).sum(axis=1)).max() < 1e-10
    assert abs(u - np.linalg.norm(star) ** 0.5) < 1e-8  # u -> ||Gamma*||_F^{1/2}
    assert np.abs(big[d:]).max() == 0.0 and np.abs(big[:, d:]).max() == 0.0  # padding stays 0


@pytest.mark.parametrize("d, n, lam, sigma", [(1, 1, 1.0, 0.1), (4, 10, 0.7, 0.3), (8, 3, 2.0, 0.05)])
def test_the_isotropic_flow_is_logistic(d, n, lam, sigma):
    times = np.concatenate([[0.0], np.geomspace(0.01, 60.0, 40)])
    path = _flow(_paper_start(d, sigma), icl.padded(lam * np.eye(d)), n, times)
    gamma = path[:, :1, None] * np.swapaxes(path[:, 1:].reshape(-1, icl.D, icl.D), 1, 2)
    p, loss = icl.closed_form(d, n, lam, sigma, times)
    assert np.abs(gamma - p[:, None, None] * icl.padded(np.eye(d))[None]).max() < 1e-10
    numeric = [icl.loss_of_gamma(g[:d, :d], lam * np.eye(d), n) for g in gamma]
    assert np.abs(np.array(numeric) - loss).max() < 1e-10
    assert abs(p[-1] - icl.gamma_star(lam * np.eye(d), n)[0, 0]) < 1e-10


def test_the_reference_continues_the_flow_in_time():
    x0 = _paper_start(3, 0.2)[None, :]
    args = (3, 10, 1.0, 2.0, 0.3)
    late = icl.reference(x0, *args, 5.0)
    early = icl.reference(x0 + 0.0, *args, 2.0)  # an earlier time: solved afresh
    again = icl.reference(x0, *args, 5.0)
    direct = _flow(x0[0], icl.padded(icl.covariance(3, 1.0, 2.0, 0.3)), 10, np.array([0.0, 2.0, 5.0]))
    assert np.abs(late[0] - direct[2]).max() < 1e-10
    assert np.abs(early[0] - direct[1]).max() < 1e-10
    assert np.abs(again[0] - direct[2]).max() < 1e-10


@pytest.mark.parametrize(
    "setting, key",
    [
        ("params.d=9", "params.d"),
        ("params.kappa=0.5", "params.kappa"),
        ('params.start="ones"', "params.start"),
        ("params.steps=-1", "params.steps"),
        ("params.init_scale=0", "params.init_scale"),
        ("params.steps=8", "params.steps"),
    ],
)
def test_bad_values_are_one_line_and_exit_2(setting, key, tmp_path, capsys):
    # the last one: steps > 0 (gradient descent) under an adaptive method is refused
    code = main(["run", str(SCENARIOS / "linear_icl_flow.toml"), "--out", str(tmp_path / "x.h5"), "--set", setting])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("dyn: ") and key in err[0]
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.slow  # the shipped sweep, 72 points (about a minute)
def test_the_shipped_flow_reaches_gamma_star_to_1e_8(tmp_path):
    out = dyn.run(SCENARIOS / "linear_icl_flow.toml", tmp_path / "f.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        assert float(ds["gamma_error"].isel(time=-1).max()) < 1e-8
        assert float(ds["imbalance"].max()) < 1e-9
        closed = ds["loss_closed_error"].sel(kappa=1.0, start="paper")
        assert float(closed.max()) < 1e-10
        assert np.isnan(ds["loss_closed_error"].sel(kappa=4.0).values).all()


@pytest.mark.slow  # gradient descent at six step sizes and the scipy reference (about a minute)
def test_gradient_descent_is_first_order_in_the_step(tmp_path):
    from dyn.presentation import comparison
    from dyn.presentation.exact import compare_exact

    out = dyn.run(SCENARIOS / "linear_icl_gd.toml", tmp_path / "g.h5", progress=False, log=io.StringIO())
    result = compare_exact(out)
    ((fit, used),) = comparison.asymptotic_rates(result, "steps").values()
    assert fit.lo <= -1.0 <= fit.hi  # slope -1 in steps = slope 1 in eta = 1/steps
    (whole,) = comparison.rates(result, "steps").values()
    assert abs(whole.slope + 1.0) < 0.02
