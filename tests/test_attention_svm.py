"""Max-margin token selection (dyn/frontier/attention_svm.py): the SVM solvers against closed
forms and their own certificates, the stable attention output against the plain formula, the
derived sign of the gradient on data with equal non-optimal scores, the clocked loss's flow, bad
values refused in one line; slow tier: the flow's direction against the SVMs, its norm growth
against ||W_F|| log t, and the regularization path."""

import io

import numpy as np
import pytest

import dyn
from dyn.frontier import attention_svm as svm, attention_svm_math as sm
from dyn.presentation.cli import main

SMALL = """
[scenario]
name = "attention_svm_small"
system = "dyn.frontier.attention_svm:AttentionSVM"
[params]
T = 3
d = 3
init_scale = 0.5
{line}
[sweep]
form = {forms}
{sweep}
[ensemble]
runs = {runs}
seed = 3
[integrator]
backend = "diffrax"
method = "dopri5"
rtol = 1e-8
atol = 1e-8
horizon = {horizon}
[output]
path = "{path}"
saves = 9
"""


def _jax():
    import integrators

    integrators.configure_jax()
    import jax
    import jax.numpy as jnp

    return jax, jnp


def test_frobenius_svm_of_one_constraint_is_a_over_its_norm_squared():
    a = np.random.default_rng(0).standard_normal((1, 3, 3))
    w, kkt = sm.frobenius_svm(a)
    assert np.abs(w - a[0] / np.sum(a[0] ** 2)).max() < 1e-9
    assert kkt < 1e-9


def test_nuclear_svm_of_one_constraint_is_the_top_singular_pair():
    # min ||W||_* s.t. <A, W> >= 1 is u1 v1^T / sigma1 (dual: max lambda, lambda ||A||_op <= 1);
    # the Frobenius answer A / ||A||_F^2 differs when A has two singular values
    u, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((3, 3)))
    vt, _ = np.linalg.qr(np.random.default_rng(2).standard_normal((3, 3)))
    a = (u @ np.diag([2.0, 1.0, 0.0]) @ vt.T)[None]
    w, gap = sm.nuclear_svm(a, starts=2)
    assert np.abs(w - np.outer(u[:, 0], vt[:, 0]) / 2.0).max() < 1e-6
    assert abs(gap) < 1e-6
    assert sm.correlation(w, sm.frobenius_svm(a)[0]) < 0.95


def _one_constraint():
    # A = U diag(2, 1, 0) V^T: W_* = u1 v1^T / 2 (||W_*||_* = 1/2), its certificate G = A / 2
    # has singular values (1, 1/2, 0), and W_F = A / ||A||_F^2 has ||W_F||_* = 3 / 5
    u, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((3, 3)))
    vt, _ = np.linalg.qr(np.random.default_rng(2).standard_normal((3, 3)))
    a = (u @ np.diag([2.0, 1.0, 0.0]) @ vt.T)[None]
    return a, np.outer(u[:, 0], vt[:, 0]) / 2.0


def test_excess_nuclear_norm_and_spurious_exponent_of_one_constraint():
    a, w_star = _one_constraint()
    assert abs(sm.spurious_exponent(a, w_star) - 0.5) < 1e-12
    for w in (w_star, 7.0 * w_star):  # a direction: any positive multiple is at the optimum
        assert abs(sm.nuclear_excess(a, w, 0.5)) < 1e-12
    assert abs(sm.nuclear_excess(a, a[0] / np.sum(a[0] ** 2), 0.5) - 0.2) < 1e-12
    assert np.isnan(sm.nuclear_excess(a, -w_star, 0.5))
    assert np.isnan(sm.spurious_exponent(np.eye(2)[None], np.eye(2) / 2.0))  # full rank: none left


def test_the_factored_flow_sheds_the_spurious_direction_at_the_certificate_exponent():
    # derived (module doc): on L = e^{-<A, K Q^T>} the flow K' = e^{-gap} A Q, Q' = e^{-gap} A^T K
    # grows each singular value of W = K Q^T like sigma_k' = 2 sigma_k u_k^T G v_k, so
    # sigma_2 / sigma_1 ~ (log t)^-(1 - sigma_2(G)) = (log t)^-1/2; integrated in s = log t
    from scipy.integrate import solve_ivp

    a, w_star = _one_constraint()
    law = sm.spurious_exponent(a, w_star)
    u, _, vt = np.linalg.svd(a[0])

    def rhs(s, y):
        k, q = y[:9].reshape(3, 3), y[9:].reshape(3, 3)
        e = np.exp(s - np.sum(a[0] * (k @ q.T)))  # dt/ds e^{-gap}, O(1) along the flow
        return np.concatenate([(e * a[0] @ q).ravel(), (e * a[0].T @ k).ravel()])

    # a start near A's singular frame (K = 0.3 U, Q = 0.3 V), perturbed: from far off it the
    # O(start^2) part of W off A's range keeps sigma_2 until log t is far past this window
    noise = 0.05 * np.random.default_rng(0).standard_normal((2, 3, 3))
    start = np.concatenate([(0.3 * u + noise[0]).ravel(), (0.3 * vt.T + noise[1]).ravel()])
    sol = solve_ivp(rhs, (0.0, 400.0), start, rtol=1e-10, atol=1e-12, dense_output=True)
    s = np.linspace(100.0, 400.0, 13)
    sv = np.array([np.linalg.svd(y[:9].reshape(3, 3) @ y[9:].reshape(3, 3).T, compute_uv=False) for y in sol.sol(s).T])
    slope = np.polyfit(np.log(s), np.log(sv[:, 1] / sv[:, 0]), 1)[0]
    assert sol.status == 0 and abs(slope + law) < 0.02, slope


def test_known_data_has_equal_non_optimal_scores():
    data = svm.dataset(5, 4, 3, "known", np.random.default_rng(4))
    scores = data["y"][:, None] * (data["x"] @ data["v"])
    assert np.allclose(np.sort(scores, axis=1), [[0, 0, 0, 1]] * 5, atol=1e-13)


def test_the_stable_output_is_the_attention_formula_and_its_gradient():
    jax, jnp = _jax()
    rng = np.random.default_rng(5)
    x, z, v, w = (rng.standard_normal(s) for s in ((4, 3), (3,), (3,), (3, 3)))

    def plain(w):
        return jnp.asarray(v) @ (jnp.asarray(x).T @ jax.nn.softmax(jnp.asarray(x) @ w @ z))

    def stable(w):
        return svm.output_of(jnp.asarray(x), jnp.asarray(z), jnp.asarray(v), w)[0]

    plain_grad, stable_grad = jax.jit(jax.grad(plain)), jax.jit(jax.grad(stable))
    assert abs(float(plain(jnp.asarray(w)) - stable(jnp.asarray(w)))) < 1e-14
    assert float(jnp.abs(plain_grad(jnp.asarray(w)) - stable_grad(jnp.asarray(w))).max()) < 1e-13
    # at a W whose top score leads by 60 the attention is one-hot to e^-60: the gradient
    # sum_t p_t (g_t - f) x_t z^T, with g_t - f = (g_t - g_k) - sum_{r != k} p_r (g_r - g_k),
    # is formed here in numpy from the small p_t alone; the stable gradient matches it to 1e-12
    s = x @ w @ z
    top = np.sort(s)
    big = w * 60.0 / (top[-1] - top[-2])
    s = x @ big @ z
    k = int(np.argmax(s))
    e = np.exp(s - s[k])
    p = e / e.sum()
    g = x @ v
    others = np.arange(4) != k
    shift = np.sum(p[others] * (g[others] - g[k]))
    exact = np.einsum("t,ti,j->ij", p * ((g - g[k]) - shift), x, z)
    got = np.asarray(stable_grad(jnp.asarray(big)))
    assert 0 < np.abs(exact).max() < 1e-20
    assert np.abs(got - exact).max() < 1e-12 * np.abs(exact).max()


def test_on_known_data_the_flow_climbs_the_svm_direction_everywhere():
    # derived: <-grad L(W), W_F> >= (1/n) sum_i |l'| p_opt (1 - p_opt) > 0 for every W
    jax, jnp = _jax()
    rng = np.random.default_rng(6)
    data = svm.dataset(3, 4, 4, "known", rng)
    opt = (data["y"][:, None] * (data["x"] @ data["v"])).argmax(axis=1)
    wf, _ = sm.frobenius_svm(sm.constraints(data["x"], data["z"], opt))
    jdata = {k: jnp.asarray(a) for k, a in data.items()}
    grad = jax.jit(jax.grad(lambda w: svm.risk(jdata["v"], w, jdata)))
    inner = [float(-jnp.sum(grad(jnp.asarray(3.0 * rng.standard_normal((4, 4)))) * wf)) for _ in range(20)]
    assert min(inner) > 0


def test_the_clocked_loss_flows_at_the_speed_m_with_clock_log_t():
    jax, jnp = _jax()
    rng = np.random.default_rng(7)
    data = {k: jnp.asarray(a) for k, a in svm.dataset(2, 3, 3, "generic", rng).items()}
    theta = {"theta": jnp.asarray(rng.standard_normal((3, 3))), "clock": jnp.array([2.5])}
    g = jax.jit(jax.grad(svm.clocked_loss))(theta, data)
    m = jax.jit(svm.speed)(theta["theta"], 2.5, data)
    grad_l = jax.jit(jax.grad(lambda w: svm.risk(data["v"], w, data)))(theta["theta"])
    assert float(jnp.abs(g["theta"] - m * grad_l).max()) < 1e-14
    assert abs(float(g["clock"][0] + m * np.exp(-2.5))) < 1e-14
    assert 0 < float(m) < np.exp(2.5)


@pytest.mark.parametrize("line", ['form = "QK"', "d = 1", "T = 1", "n = 0", 'data = "mixed"'])
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, line):
    key = line.split(" = ")[0]
    text = SMALL.format(line=line, forms='["W"]', sweep="", runs=1, horizon=1.0, path=tmp_path / "bad.h5")
    if key == "form":
        text = text.replace('form = ["W"]', "")
    text = "\n".join(t for t in text.splitlines() if not t.startswith(f"{key} = ") or t == line)
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    assert main(["run", str(toml)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dyn: ") and key in err, err
    assert not (tmp_path / "bad.h5").exists()


@pytest.mark.slow  # diffrax compiles four programs and runs them to u = 160
def test_the_flows_go_to_their_svm_directions(tmp_path):
    toml = tmp_path / "small.toml"
    toml.write_text(
        SMALL.format(
            line="", forms='["W", "KQ"]', sweep="n = [1, 2]", runs=3, horizon=160.0, path=tmp_path / "small.h5"
        )
    )
    out = dyn.run(toml, progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        assert (ds["svm_kkt"].values < 1e-8).all() and (np.abs(ds["svm_gap"].values) < 1e-6).all()
        one, two = dict(n=1), dict(n=2)
        # one input: p_opt increases along the flow (dp/dt = |l'| |grad p|^2), so every run
        # selects the optimal token; ||W||_F grows like ||W_F|| log t
        assert (ds["p_global"].sel(one).values == 1).all()
        assert (ds["corr_final"].sel(form="W", **one).values > 0.999).all()
        assert (ds["corr_final"].sel(form="KQ", **one).values > 0.99).all()
        slope, law = (ds[k].sel(form="W", **one).values for k in ("growth_slope", "growth_theory"))
        assert abs(slope / law - 1) < 0.01
        # two inputs: W goes to the Frobenius SVM (one run of three keeps an input on a
        # non-optimal token: near its own selection's SVM, not at it); K Q^T goes to the
        # nuclear-norm SVM, not to the Frobenius one
        assert np.median(ds["corr_final"].sel(form="W", **two).values) > 0.999
        assert (ds["corr_reached"].sel(form="W", **two).values > 0.98).all()
        assert np.median(ds["corr_final"].sel(form="KQ", **two).values) > 0.98
        kq = ds.sel(form="KQ", **two).isel(time=-1)
        assert float(kq["corr_nuclear"]) > float(kq["corr_frobenius"]) + 0.01
        # the regularization path of W: corr(W_R, W_F) rises to 1 with R
        for n in (1, 2):
            path = ds["path_corr"].sel(form="W", n=n).values
            assert (np.diff(path) > -1e-9).all() and path[-1] > 0.999
        assert np.isnan(ds["path_corr"].sel(form="KQ").values).all()
