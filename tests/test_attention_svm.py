"""Max-margin token selection (dyn/frontier/attention_svm.py): the SVM solvers against closed
forms and their own certificates, the stable attention output against the plain formula, the
derived sign of the gradient on data with equal non-optimal scores, the clocked loss's flow, bad
values refused in one line; slow tier: the flow's direction against the SVMs, its norm growth
against ||W_F|| log t, and the regularization path."""
import io

import numpy as np
import pytest

import dyn
from dyn.frontier import attention_svm as svm
from dyn.frontier import attention_svm_math as sm
from dyn.presentation.cli import main

SMALL = """
[scenario]
name = "attention_svm_small"
system = "dyn.frontier.attention_svm:AttentionSVM"
[params]
n = 2
T = 3
d = 3
init_scale = 0.5
{line}
[sweep]
form = {forms}
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
    assert 0 <= gap < 1e-6
    assert sm.correlation(w, sm.frobenius_svm(a)[0]) < 0.95


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

    assert abs(float(plain(jnp.asarray(w)) - stable(jnp.asarray(w)))) < 1e-14
    gap = jax.grad(plain)(jnp.asarray(w)) - jax.grad(stable)(jnp.asarray(w))
    assert float(jnp.abs(gap).max()) < 1e-13
    # at a large W the attention is one-hot to e^-60; the stable gradient keeps its size
    big = jnp.asarray(60.0 * w / np.abs(x @ w @ z).max())
    small = np.asarray(jax.grad(stable)(big))
    assert np.isfinite(small).all() and 0 < np.abs(small).max() < 1e-10


def test_on_known_data_the_flow_climbs_the_svm_direction_everywhere():
    # derived: <-grad L(W), W_F> >= (1/n) sum_i |l'| p_opt (1 - p_opt) > 0 for every W
    jax, jnp = _jax()
    rng = np.random.default_rng(6)
    data = svm.dataset(3, 4, 4, "known", rng)
    opt = (data["y"][:, None] * (data["x"] @ data["v"])).argmax(axis=1)
    wf, _ = sm.frobenius_svm(sm.constraints(data["x"], data["z"], opt))
    jdata = {k: jnp.asarray(a) for k, a in data.items()}
    grad = jax.jit(jax.grad(lambda w: svm.risk(jdata["v"], w, jdata)))
    inner = [float(-jnp.sum(grad(jnp.asarray(3.0 * rng.standard_normal((4, 4)))) * wf))
             for _ in range(20)]
    assert min(inner) > 0


def test_the_clocked_loss_flows_at_the_speed_m_with_clock_log_t():
    jax, jnp = _jax()
    rng = np.random.default_rng(7)
    data = {k: jnp.asarray(a) for k, a in svm.dataset(2, 3, 3, "generic", rng).items()}
    theta = {"theta": jnp.asarray(rng.standard_normal((3, 3))), "clock": jnp.array([2.5])}
    g = jax.grad(svm.clocked_loss)(theta, data)
    m = svm.speed(theta["theta"], 2.5, data)
    grad_l = jax.grad(lambda w: svm.risk(data["v"], w, data))(theta["theta"])
    assert float(jnp.abs(g["theta"] - m * grad_l).max()) < 1e-14
    assert abs(float(g["clock"][0] + m * np.exp(-2.5))) < 1e-14
    assert 0 < float(m) < np.exp(2.5)


@pytest.mark.parametrize("line", ['form = "QK"', "d = 1", "T = 1", "n = 0", 'data = "mixed"'])
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, line):
    key = line.split(" = ")[0]
    text = SMALL.format(line=line, forms='["W"]', runs=1, horizon=1.0,
                        path=tmp_path / "bad.h5")
    if key == "form":
        text = text.replace('form = ["W"]', "")
    text = "\n".join(t for t in text.splitlines() if not t.startswith(f"{key} = ") or t == line)
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    assert main(["run", str(toml)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dyn: ") and key in err, err
    assert not (tmp_path / "bad.h5").exists()


@pytest.mark.slow  # diffrax compiles three programs and runs them to u = 160
def test_the_flows_go_to_their_svm_directions(tmp_path):
    toml = tmp_path / "small.toml"
    toml.write_text(SMALL.format(line="", forms='["W", "KQ"]', runs=3, horizon=160.0,
                                 path=tmp_path / "small.h5"))
    out = dyn.run(toml, progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        corr = ds["corr_final"].values  # (form, run)
        assert np.median(corr[0]) > 0.999  # W against the Frobenius SVM
        assert np.median(corr[1]) > 0.97  # K Q^T against the nuclear-norm SVM (slow)
        # ||W||_F grows like ||W_F|| log t
        slope, law = ds["growth_slope"].values[0], ds["growth_theory"].values[0]
        assert abs(slope / law - 1) < 0.01
        assert (ds["svm_kkt"].values < 1e-8).all() and (ds["svm_gap"].values < 1e-6).all()
        path = ds["path_corr"].values[0]
        assert (np.diff(path) > 0).all() and path[-1] > 0.999
        assert np.isnan(ds["path_corr"].values[1]).all()
