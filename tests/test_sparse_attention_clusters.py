"""Sparse attention clusters (dyn/frontier/sparse_attention_clusters.py): the cut-off angle of a
pair of tokens under sparsemax and entmax against the engine's normalization code (to 1e-10),
the cut in a crowd, the needle's weight against its closed forms (to 1e-10), the settled
certificate, and, in the slow tier, cut-down runs: every sparsemax run's last change is
finite at the default beta, and top-k leaves no final cluster of fewer than k tokens."""

import subprocess
import sys

import numpy as np
import pytest

import dyn
from dyn.frontier import sparse_attention_clusters as sa

BETAS = (0.75, 1.0, 2.0, 4.0, 8.0, 50.0, 300.0)


def _weights(norm, s, a=0.0):
    return dyn.row_weights(norm, s, a)


def _pair_weight(norm, beta, theta, alpha=1.5, crowd=1):
    """The weight row 0 puts on the last token: `crowd` tokens at score beta (the row's own
    cluster, itself included), one at beta cos(theta)."""
    s = np.full(crowd + 1, beta)
    s[-1] = beta * np.cos(theta)
    return _weights(norm, s, alpha if norm == "entmax" else 0.0)[-1]


def _bisect(positive, lo=0.0, hi=np.pi):
    """The boundary of {theta: positive(theta)} on [lo, hi], positive at lo, not at hi."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if positive(mid) else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("beta", BETAS)
def test_sparsemax_pairs_stop_interacting_exactly_at_theta_c(beta):
    # w_12 = (1 - beta (1 - cos theta)) / 2 before theta_c = arccos(1 - 1/beta), 0 after
    tc = sa.theta_c(beta)
    assert abs(tc - np.arccos(1 - 1 / beta)) < 1e-12
    assert _pair_weight("sparsemax", beta, tc + 1e-9) == 0.0
    assert _pair_weight("sparsemax", beta, tc - 1e-9) > 0.0
    for theta in np.linspace(0.0, np.pi, 13):
        want = max((1 - beta * (1 - np.cos(theta))) / 2, 0.0)
        assert abs(_pair_weight("sparsemax", beta, theta) - want) < 1e-14
    found = _bisect(lambda t: _pair_weight("sparsemax", beta, t) > 0.0)
    assert abs(found - tc) < 1e-10, (beta, found - tc)


@pytest.mark.parametrize("alpha", [1.5, 1.25, 3.0])
def test_entmax_pairs_stop_interacting_at_their_theta_c(alpha):
    # alpha-entmax cuts a pair when (alpha - 1) beta (1 - cos theta) >= 1
    for beta in (1.5, 4.0, 20.0):
        tc = sa.theta_c(beta, alpha - 1)
        found = _bisect(lambda t, b=beta: _pair_weight("entmax", b, t, alpha) > 0.0)
        assert abs(found - tc) < 1e-10, (alpha, beta, found - tc)
    assert sa.theta_c(1.0, 0.25) == np.pi  # (alpha - 1) beta < 1/2: never cut


@pytest.mark.parametrize("norm, alpha", [("sparsemax", 2.0), ("entmax", 1.5)])
def test_a_cluster_of_m_tokens_cuts_at_its_own_angle(norm, alpha):
    # a collapsed cluster of m tokens keeps another out exactly when
    # (alpha - 1) beta (1 - cos theta) >= m^(1 - alpha): theta_c(m^(alpha - 1) beta)
    beta = 4.0
    for m in (1, 2, 3, 7):
        tc = sa.theta_c(m ** (alpha - 1) * beta, alpha - 1)
        found = _bisect(lambda t, c=m: _pair_weight(norm, beta, t, alpha, crowd=c) > 0.0)
        assert abs(found - tc) < 1e-10, (m, found - tc)


def test_the_cut_holds_in_any_crowd():
    # row i weights no token j with (alpha - 1) beta (c - <x_i, x_j>) >= m^(1 - alpha), for any
    # clique of m tokens with inner products >= c with x_i, whatever the other tokens
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(300):
        n, d = rng.integers(2, 24), rng.integers(2, 4)
        norm, alpha = [("sparsemax", 2.0), ("entmax", 1.5), ("entmax", 1.8)][rng.integers(3)]
        beta = float(rng.uniform(0.6, 30.0))
        x = rng.standard_normal((n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        g = x @ x.T
        w = _weights(norm, beta * g[0], alpha if norm == "entmax" else 0.0)
        for m in range(1, n + 1):
            clique = np.argsort(-g[0])[:m]  # the m nearest, token 0 itself first
            c = g[0, clique].min()
            cut = (alpha - 1) * beta * (c - g[0]) >= m ** (1 - alpha)
            assert np.all(w[cut] == 0.0)
            checked += cut.sum()
    assert checked > 500


@pytest.mark.parametrize(
    "norm, alpha, k",
    [
        ("softmax", 1.5, 4),
        ("topk", 1.5, 4),
        ("topk", 1.5, 9),
        ("sparsemax", 2.0, 4),
        ("entmax", 1.5, 4),
        ("entmax", 1.25, 4),
        ("entmax", 3.0, 4),
        ("entmax", 2.0, 4),
    ],
)
def test_the_needle_weight_matches_its_closed_form(norm, alpha, k):
    for gap in (0.1, 0.5, 1.0, 1.7, 2.0, 2.5, 5.0):
        for n in (2, 3, 10, 100, 4096):
            want = float(sa.needle_exact(norm, gap, n, alpha, k))
            assert abs(sa.needle_code(norm, gap, n, alpha, k) - want) < 1e-10, (gap, n)


def test_softmax_disperses_and_entmax_does_not():
    n = np.array([10, 10**3, 10**6])
    for gap in (0.5, 1.0, 3.0):
        soft = sa.needle_exact("softmax", gap, n)
        assert np.all(np.diff(soft) < 0) and soft[-1] < 3e-5  # ~ e^gap / n -> 0
        ent = sa.needle_exact("entmax", gap, n, 1.5)
        assert np.all(ent >= min(1.0, gap**2 / 4) - 1e-15)  # bounded away from 0
        assert abs(ent[-1] - min(1.0, gap**2 / 4)) < 2e-3  # its limit
        sparse = sa.needle_exact("sparsemax", gap, n)
        assert abs(sparse[-1] - min(1.0, gap)) < 1e-5
    assert np.all(sa.needle_exact("entmax", 2.0, n, 1.5) == 1.0)


def test_the_count_reference_is_pi_over_theta_c_on_the_circle():
    for beta in (0.8, 2.0, 4.0, 50.0):
        assert abs(sa.count_reference(beta, 2) - np.pi / sa.theta_c(beta)) < 1e-12
        assert abs(sa.count_reference(beta, 3) - 2 * beta) < 1e-10  # 2 / (1 - cos theta_c)
        assert abs(sa.count_reference(2 * beta, 3, 0.5) - 2 * beta) < 1e-10  # 2 (alpha-1) beta
    assert sa.count_reference(0.3, 3) == 1.0  # nothing cut: one cap is the sphere
    assert abs(sa.crowd_scale(8.0, 64, 2) - 8.0) < 1e-12  # (beta n)^(1/3)
    assert abs(sa.crowd_scale(8.0, 32, 3) - 16.0) < 1e-12  # (beta n)^(1/2)


def _circle(angles, counts):
    t = np.repeat(np.asarray(angles, dtype=float), counts)
    return np.stack([np.cos(t), np.sin(t)], axis=1)


def test_the_certificate_reads_the_cut_of_each_cluster():
    beta, delta = 4.0, 1e-3
    tc = sa.theta_c(beta)
    for m in (1, 3, 6):
        cut = sa.theta_c(m * beta)  # sparsemax: the cut of collapsed clusters of m tokens
        for angle, want in ((cut * 1.01, True), (cut * 0.99, False)):
            x = _circle([0.0, angle], [m, m])
            labels = sa.clusters(x, delta)
            assert labels.max() == 1
            assert sa.settled(x, labels, "sparsemax", beta, delta, 1.0, 4) is want, (m, angle)
        assert cut <= tc
    # unequal clusters: the smaller one decides
    x = _circle([0.0, sa.theta_c(3 * beta) * 1.01], [3, 8])
    assert sa.settled(x, sa.clusters(x, delta), "sparsemax", beta, delta, 1.0, 4)
    x = _circle([0.0, sa.theta_c(3 * beta) * 0.99], [3, 8])
    assert not sa.settled(x, sa.clusters(x, delta), "sparsemax", beta, delta, 1.0, 4)
    # a cluster spread over its diameter is held to the bound with it
    x = _circle([0.0, 0.02, sa.theta_c(beta) * 1.01], [1, 1, 1])
    assert not sa.settled(x, sa.clusters(x, delta), "sparsemax", beta, delta, 1.0, 4)
    # top-k: clusters of k or more; softmax: one cluster
    x = _circle([0.0, 2.0], [4, 3])
    labels = sa.clusters(x, delta)
    assert sa.settled(x, labels, "topk", beta, delta, None, 3)
    assert not sa.settled(x, labels, "topk", beta, delta, None, 4)
    assert not sa.settled(x, labels, "softmax", beta, delta, None, 4)
    one = _circle([1.0], [5])
    assert sa.settled(one, sa.clusters(one, delta), "softmax", beta, delta, None, 4)
    # not a clique: not settled
    chain = _circle([0.0, 0.04, 0.08], [1, 1, 1])
    labels = sa.clusters(chain, delta)
    assert labels.max() == 0
    assert not sa.settled(chain, labels, "softmax", beta, delta, None, 4)


def test_last_change_is_the_first_save_of_the_final_count():
    times = np.arange(6) * 0.5
    assert sa.last_change(np.array([8, 6, 6, 5, 5, 5]), times) == 1.5
    assert sa.last_change(np.array([8, 6, 5, 6, 6, 6]), times) == 1.5
    assert sa.last_change(np.array([4, 4, 4, 4, 4, 4]), times) == 0.0
    assert np.allclose(sa.step_order([[16.0, 2.0, 0.5]]), [[3.0, 2.0]])


def test_the_system_takes_the_point_to_its_built_class():
    assert set(sa.TOKENS) == set(sa.NORMALIZATIONS)
    for norm, cls in sa.BUILT.items():
        assert cls.norm == norm and sa.TOKENS[norm].norm == norm
    assert {"alpha", "k", "beta", "n", "d", "normalization"} <= set(sa.PARAMS)


SMALL = """
[scenario]
name = "small"
system = "dyn.frontier.sparse_attention_clusters:SparseAttentionClusters"

[params]
{params}

[sweep]
{sweep}

[ensemble]
runs = {runs}
seed = 11

[integrator]
method = "rk4"
dt = 0.05
horizon = {horizon}

[output]
path = "{path}"
saves = {saves}
"""


def _run(tmp_path, name, params="n = 12", sweep='normalization = ["sparsemax"]', runs=4, horizon=2.0, saves=4):
    toml = tmp_path / f"{name}.toml"
    toml.write_text(
        SMALL.format(params=params, sweep=sweep, runs=runs, horizon=horizon, saves=saves, path=tmp_path / f"{name}.h5")
    )
    return dyn.open(dyn.run(str(toml)))


@pytest.mark.parametrize(
    "line, key",
    [
        ('normalization = "hardmax"', "normalization"),
        ("beta = -1.0", "beta"),
        ("k = 0", "k"),
        ("alpha = 1.0", "alpha"),
        ("order_time = 3.0", "order_time"),
        ("delta = 0.9", "delta"),
        ("n = 1", "n"),
        ("d = 17", "d"),
        ('Q = {law = "gaussian"}', "Q"),
    ],
)
def test_bad_values_are_refused_by_name(tmp_path, line, key):
    toml = tmp_path / "bad.toml"
    text = SMALL.format(params="n = 12\nd = 2", sweep="", runs=2, horizon=2.0, saves=2, path=tmp_path / "bad.h5")
    text = "\n".join(t for t in text.splitlines() if not t.startswith(f"{key} ="))
    toml.write_text(text.replace("[params]", f"[params]\n{line}"))
    with pytest.raises(dyn.ScenarioError, match=f"params.{key}"):
        dyn.run(str(toml))
    assert not (tmp_path / "bad.h5").exists()


@pytest.mark.slow
def test_bad_values_exit_2_in_one_line(tmp_path):
    toml = tmp_path / "bad.toml"
    toml.write_text(
        SMALL.format(params="beta = 2000.0", sweep="", runs=2, horizon=2.0, saves=2, path=tmp_path / "bad.h5")
    )
    done = subprocess.run([sys.executable, "-m", "dyn", "run", str(toml)], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "beta" in done.stderr, done.stderr


@pytest.mark.slow
def test_every_sparsemax_run_settles_at_the_default_beta(tmp_path):
    # the default beta (4) on the circle and S^2: every run certified, its last change finite;
    # softmax on the same starts is still drifting at T (censored)
    ds = _run(
        tmp_path,
        "settle",
        params="n = 24",
        runs=12,
        horizon=15.0,
        saves=75,
        sweep='normalization = ["sparsemax", "softmax"]\nd = [2, 3]',
    )
    assert sa.PARAMS["beta"].default == 4.0  # beta is left at its default
    sparse = ds.sel(normalization="sparsemax")
    assert np.all(sparse.p_settled.values == 1.0)
    assert np.all(sparse.last_change_censored.values == 0.0)
    assert np.all(np.isfinite(sparse.last_change_median.values))
    assert np.all(sparse.last_change.values < 15.0)
    assert np.all(ds.sel(normalization="softmax").last_change_censored.values > 0.5)
    assert float(ds.needle_error.max()) < 1e-10


@pytest.mark.slow
def test_topk_leaves_no_final_cluster_below_k(tmp_path):
    # at a horizon where every run is certified (a test of the dynamics: certification needs
    # every cluster to hold k tokens), no cluster holds fewer than k. A few tokens caught
    # between two clusters, each row's k kept scores pulling both ways, drift slowly (one run of
    # these 24 was still moving at t = 60): the horizon is long
    ds = _run(
        tmp_path,
        "topk",
        params='normalization = "topk"\nbeta = 2.0\nn = 16\norder_time = 0.0',
        sweep="k = [2, 3, 5]",
        runs=8,
        horizon=120.0,
        saves=60,
    )
    assert np.all(ds.p_settled.values == 1.0)
    assert np.all(ds.p_small_cluster.values == 0.0)
    assert np.all(ds.smallest_cluster.values >= ds.k.values)


def test_only_the_identity_passes_for_q_k_v():
    assert sa.is_identity(sa.IDENTITY, 2) and sa.is_identity({"law": "identity"}, 3)
    assert sa.is_identity([[1.0, 0.0], [0.0, 1.0]], 2)
    assert sa.is_identity([[[1.0, 0.0], [0.0, 1.0]]] * 2, 2)  # two heads of I: the same flow
    assert not sa.is_identity({"law": "identity", "scale": 2.0}, 2)
    assert not sa.is_identity({"law": "gaussian", "scale": 1.0}, 2)
    assert not sa.is_identity([[1.0, 0.5], [0.0, 1.0]], 2)


def test_a_jax_backend_is_refused_by_name(tmp_path):
    toml = tmp_path / "jax.toml"
    toml.write_text(
        SMALL.format(params="n = 12", sweep="", runs=2, horizon=2.0, saves=2, path=tmp_path / "jax.h5").replace(
            'method = "rk4"', 'backend = "diffrax"\nmethod = "rk4"'
        )
    )
    with pytest.raises(dyn.ScenarioError, match="integrator.backend"):
        dyn.run(str(toml))
