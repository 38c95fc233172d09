"""The attention flow on the sphere against slow numpy oracles and its physical laws."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from dyn import attention as att
from dyn.attention.flow import _project_rows
from dyn.numerics import _field_gemm, _field_small, _field_symmetric
from dyn.numerics.vexp import exp_inplace

# ---------------------------------------------------------------- oracles (slow and obvious)


def ref_velocity(x, beta, norm="SA", Q=None, K=None, V=None):
    n, d = x.shape
    Q, K, V = (np.eye(d) if a is None else a for a in (Q, K, V))
    v = np.zeros_like(x)
    for i in range(n):
        s = np.array([beta * (Q @ x[i]) @ (K @ x[j]) for j in range(n)])
        a = np.exp(s - s.max()) / np.exp(s - s.max()).sum() if norm == "SA" else np.exp(s) / n
        m = sum(a[j] * (V @ x[j]) for j in range(n))
        v[i] = m - (x[i] @ m) / (x[i] @ x[i]) * x[i]
    return v


def ref_clusters(x, delta):
    n = len(x)
    label = list(range(n))
    changed = True
    while changed:  # propagate the smallest label along edges until nothing changes
        changed = False
        for i in range(n):
            for j in range(n):
                if i != j and x[i] @ x[j] > 1 - delta and label[j] > label[i]:
                    label[j] = label[i]
                    changed = True
    return len(set(label))


def sphere(rng, *shape):
    return att.uniform_sphere(rng, 1, *shape)[0] if len(shape) == 2 else att.uniform_sphere(rng, *shape)


# ---------------------------------------------------------------- right-hand side

# The regimes of the attention field the mean field calls (dyn.numerics.attention_field); the
# half-exp one needs a symmetric M, which Q^T K is not.
REGIMES = {"columns": _field_small.columns, "gemm": _field_gemm.gemm, "symmetric": _field_symmetric.symmetric}


def _kernel(regime, x, p):
    """One regime of the shared field on the arguments the attention drift passes."""
    n, d = x.shape
    u = att.unpack_params(p)
    out = np.empty_like(x)
    work = np.empty(max(_field_small.work_size(n, d), _field_gemm.work_size(n, d, 1)))
    REGIMES[regime](
        x,
        u["beta"],
        u["normalization"] == "USA",
        False,
        0.0,
        1,
        u["M"].ravel(),
        u["M_identity"],
        u["V"].ravel(),
        u["V_identity"],
        out,
        work,
    )
    return out


@pytest.mark.parametrize("norm", ["SA", "USA"])
@pytest.mark.parametrize("mats", [False, True])
@pytest.mark.parametrize("n,d", [(7, 2), (32, 3), (130, 4)])
def test_drift_matches_oracle_both_branches(norm, mats, n, d):
    rng = np.random.default_rng(n * d)
    x = sphere(rng, n, d)
    Q, K, V = [np.eye(d) + 0.3 * rng.standard_normal((d, d)) for _ in range(3)] if mats else [None] * 3
    beta = 1.7
    want = ref_velocity(x, beta, norm, Q, K, V)
    p = att.pack_params(beta, d, norm, Q, K, V)
    scale = np.abs(want).max()
    for regime in ("columns", "gemm") + (() if mats else ("symmetric",)):
        out = _kernel(regime, x, p)
        _project_rows(x, out)
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(att.velocity(x, beta, norm, Q, K, V), want, rtol=0, atol=1e-12 * scale)


def test_gemm_branch_large_beta_uses_true_max():
    # 2 beta |M| R^2 > 700 switches the GEMM regime from the diagonal shift to the row maximum
    rng = np.random.default_rng(3)
    x = sphere(rng, 20, 3)
    for beta in (50.0, 400.0, -400.0):
        out = _kernel("gemm", x, att.pack_params(beta, 3))
        _project_rows(x, out)
        np.testing.assert_allclose(out, ref_velocity(x, beta), atol=1e-12)


def test_velocity_is_tangent_and_batched():
    rng = np.random.default_rng(1)
    x = sphere(rng, 5, 9, 3)
    v = att.velocity(x, 2.0, "USA")
    assert v.shape == x.shape
    assert np.abs(np.einsum("eid,eid->ei", x, v)).max() < 1e-14
    np.testing.assert_allclose(v[2], att.velocity(x[2], 2.0, "USA"), atol=0)


def test_mean_field_is_unprojected():
    rng = np.random.default_rng(2)
    x = sphere(rng, 6, 3)
    m = att.mean_field(x, 1.0)
    a = np.exp(x @ x.T)
    a /= a.sum(1, keepdims=True)
    np.testing.assert_allclose(m, a @ x, atol=1e-14)


def test_jax_twin_matches_numba():
    import jax

    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(4)
    for norm in ("SA", "USA"):
        for n, d in ((10, 2), (150, 5)):
            x = sphere(rng, n, d)
            Q, K, V = (np.eye(d) + 0.2 * rng.standard_normal((d, d)) for _ in range(3))
            p = att.pack_params(1.3, d, norm, Q, K, V)
            got = np.asarray(jax.jit(att.attention_drift_jax)(0.0, x, p))
            want = att.velocity(x, 1.3, norm, Q, K, V)
            np.testing.assert_allclose(got, want, atol=1e-12)


def test_vectorized_exp():
    y = np.concatenate([-np.linspace(0, 708, 100001), np.linspace(0, 700, 1001)])
    w = y.copy()
    exp_inplace(w, 0.0)
    np.testing.assert_allclose(w, np.exp(y), rtol=1e-15)
    w = np.array([np.nan, -1.0])
    exp_inplace(w, 0.0)
    assert np.isnan(w[0]) and w[1] == pytest.approx(np.exp(-1.0), rel=1e-15)


def test_params_validation_and_layout():
    p = att.pack_params(2.5, 3, "usa", V=2 * np.eye(3))
    assert p.shape == (att.param_size(3),) and p[0] == 2.5 and p[1] == 1.0 and p[2] == 3
    assert p[3] == 1.0 and p[4] == 0.0
    u = att.unpack_params(p)
    np.testing.assert_array_equal(u["V"], 2 * np.eye(3))
    Q = np.arange(9.0).reshape(3, 3)
    np.testing.assert_array_equal(att.unpack_params(att.pack_params(1, 3, Q=Q))["M"], Q.T)
    for bad, words in (
        (dict(beta=np.inf), "beta must be finite"),
        (dict(beta="x"), "beta must be a real number"),
        (dict(d=1), "d must be an integer >= 2"),
        (dict(normalization="XA"), "normalization must be one of"),
        (dict(Q=np.eye(2)), r"Q must have shape \(3, 3\)"),
        (dict(V=np.full((3, 3), np.nan)), "V has non-finite entries"),
    ):
        kw = dict(beta=1.0, d=3) | bad
        with pytest.raises(ValueError, match=words):
            att.pack_params(**kw)
    with pytest.raises(ValueError, match="x must have shape"):
        att.velocity(np.ones(3), 1.0)


# ---------------------------------------------------------------- laws of the flow


def _solve(x0, beta, norm, t_eval, rtol=1e-12):
    shape = x0.shape
    sol = solve_ivp(
        lambda t, y: att.velocity(y.reshape(shape), beta, norm).ravel(),
        (t_eval[0], t_eval[-1]),
        x0.ravel(),
        t_eval=t_eval,
        rtol=rtol,
        atol=1e-13,
        method="DOP853",
    )
    return sol.y.T.reshape((len(t_eval),) + shape)


def test_usa_energy_identity_along_solution():
    rng = np.random.default_rng(5)
    n, beta, h = 8, 1.5, 1e-3
    x0 = sphere(rng, n, 3)
    ts = np.array([0.0, 0.5 - h, 0.5, 0.5 + h])
    xs = _solve(x0, beta, "USA", ts)
    e = att.energy_usa(xs, beta)
    de_dt = (e[3] - e[1]) / (2 * h)
    v = att.velocity(xs[2], beta, "USA")
    assert de_dt == pytest.approx((v * v).sum() / n, rel=1e-5)
    assert np.all(np.diff(att.energy_usa(_solve(x0, beta, "USA", np.linspace(0, 3, 7)), beta)) > 0)


def test_two_tokens_sa_match_scalar_ode():
    beta = 2.0
    a = np.array([1.0, 0.0, 0.0])
    b = np.array([np.cos(2.5), np.sin(2.5), 0.0])
    ts = np.linspace(0, 4, 9)
    xs = _solve(np.stack([a, b]), beta, "SA", ts)
    rho = np.einsum("td,td->t", xs[:, 0], xs[:, 1])

    def f(t, r):
        return 2 * (1 - r**2) * np.exp(beta * r) / (np.exp(beta) + np.exp(beta * r))

    want = solve_ivp(f, (0, 4), [a @ b], t_eval=ts, rtol=1e-12, atol=1e-14).y[0]
    np.testing.assert_allclose(rho, want, atol=1e-9)


def test_hemisphere_start_collapses_to_one_cluster():
    rng = np.random.default_rng(6)
    x0 = att.hemisphere(rng, 1, 12, 3)[0]
    assert np.all(x0[:, 0] > 0)
    xs = _solve(x0, 1.0, "SA", np.array([0.0, 30.0]), rtol=1e-8)
    assert att.n_clusters(xs[-1], 1e-6) == 1
    assert att.min_inner(xs[-1]) > 1 - 1e-6
    assert att.min_inner(xs[0]) < 0.9


def test_postnorm_network_stays_on_sphere_and_clusters():
    rng = np.random.default_rng(7)
    x0 = att.hemisphere(rng, 3, 10, 3)
    s = att.postnorm_layers(x0, 200, 30.0, 1.0, save_every=50)
    assert s.shape == (3, 5, 10, 3)
    np.testing.assert_allclose(s[:, 0], x0, atol=1e-15)
    assert np.abs(np.linalg.norm(s, axis=-1) - 1).max() < 1e-14
    np.testing.assert_array_equal(att.n_clusters(s[:, -1], 1e-4), [1, 1, 1])
    # one layer by hand
    one = att.postnorm_layers(x0[0], 1, 0.1, 1.0, "USA")[-1]
    y = x0[0] + 0.1 * att.mean_field(x0[0], 1.0, "USA")
    np.testing.assert_allclose(one, y / np.linalg.norm(y, axis=1, keepdims=True), atol=1e-15)


# ---------------------------------------------------------------- observables


def test_observables_against_brute_force():
    rng = np.random.default_rng(8)
    x = sphere(rng, 4, 9, 3)
    beta, delta = 0.7, 0.6
    for e in range(4):
        g = x[e] @ x[e].T
        assert att.energy_usa(x, beta)[e] == pytest.approx(np.exp(beta * g).sum() / (2 * beta * 81))
        pairs = [g[i, j] for i in range(9) for j in range(i + 1, 9)]
        assert att.pair_fraction(x, delta)[e] == pytest.approx(np.mean(np.array(pairs) > 1 - delta))
        assert att.min_inner(x)[e] == pytest.approx(min(pairs))
        assert att.n_clusters(x, delta)[e] == ref_clusters(x[e], delta)


def test_a_blown_up_configuration_never_looks_clustered():
    """One NaN coordinate: the minimum inner product and the energy are NaN (the vectorised
    minimum may not see it; the kernel's own NaN flag must), its token joins no cluster, and the
    other configurations of the batch keep their values."""
    rng = np.random.default_rng(9)
    x = sphere(rng, 3, 7, 2)
    bad = x.copy()
    bad[1, 4, 0] = np.nan
    stats, labels = att.pairs_and_clusters(bad, 0.3, 1.5)
    clean, clean_labels = att.pairs_and_clusters(x, 0.3, 1.5)
    assert np.isnan(stats[1, 1]) and np.isnan(stats[1, 2])
    assert labels[1, 4] == 4 and np.all(labels[1][np.arange(7) != 4] != 4)
    np.testing.assert_array_equal(stats[[0, 2]], clean[[0, 2]])
    np.testing.assert_array_equal(labels[[0, 2]], clean_labels[[0, 2]])
    alone, none = att.pairs_and_clusters(bad, 0.3, 1.5, labels=False)  # no union-find
    assert none is None
    np.testing.assert_array_equal(alone, stats)


def test_n_clusters_hand_made():
    e1, e2, e3 = np.eye(3)
    c = np.cos(0.01)
    s = np.sin(0.01)
    # a chain a - b - c whose ends are not linked directly is one component
    chain = np.stack([e1, c * e1 + s * e2, np.cos(0.02) * e1 + np.sin(0.02) * e2])
    delta = 1 - np.cos(0.015)
    assert att.n_clusters(chain, delta) == 1
    assert att.pair_fraction(chain, delta) == pytest.approx(2 / 3)
    three = np.stack([e1, e1, e2, -e1, e3, e3])
    assert att.n_clusters(three, 1e-3) == 4
    batch = np.stack([three, np.stack([e1] * 6)])
    np.testing.assert_array_equal(att.n_clusters(batch[None], 1e-3), [[4, 1]])
    assert att.min_inner(three) == pytest.approx(-1.0)
