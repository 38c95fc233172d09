"""Repulsive attention on the circle (issue 23, item 2): the angle form of SA/USA against the
sphere kernels at beta < 0, the equilibria and their stability (splay states, the triangle's
-2/3, three clusters), the classifier, synchronization near beta = 0, and the system
`attention_circle` with the shipped scenario `repulsive_sync` end to end."""

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import iv

import dyn
import integrators
from dyn import attention
from dyn.attention import circle
from dyn.attention.architecture import pack_architecture
from dyn.attention.schemes import POST
from dyn.core.contract import PROBABILITY, REFERENCE, ROLE_ATTR, UNDECIDED
from dyn.engine import scenario as scenario_mod, store
from dyn.engine.verdicts import HORIZON_LIMITED, count_unresolved
from dyn.presentation.plot import figure

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
SCENARIO = SCENARIOS / "repulsive_sync.toml"


def _theta_dot(x, v):
    """theta_i' from a tangent (or unprojected) velocity v_i of tokens x_i on the circle."""
    return -x[..., 1] * v[..., 0] + x[..., 0] * v[..., 1]


@pytest.mark.parametrize("n", [5, 40, 256])  # 256: the BLAS / GEMM regimes of the sphere kernels
@pytest.mark.parametrize("normalization", ["SA", "USA"])
def test_angle_form_is_the_sphere_drift_at_negative_beta(n, normalization):
    rng = np.random.default_rng(n)
    theta = rng.uniform(-np.pi, 3 * np.pi, n)
    x = circle.tokens(theta)
    for beta in (-1.5, -0.4, 0.0):
        # the attention flow of dyn.attention.flow (dyn.numerics.mean_field)
        want = _theta_dot(x, attention.velocity(x, beta, normalization))
        # the architecture's field (dyn.numerics.attention_field), default post-LN layer
        p = pack_architecture(beta, 2, normalization)
        u = np.empty_like(x)
        POST.drift(0.0, np.ascontiguousarray(x), p, u, np.empty(POST.problem(p).work_size(n, 2)))
        scale = max(1.0, np.abs(want).max())
        np.testing.assert_allclose(_theta_dot(x, u), want, rtol=0, atol=1e-12 * scale)
        for kernel in circle.KERNELS:
            got = circle.velocity(theta, beta, normalization, kernel)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * scale)
    # repulsive: a token's own weight e^beta is its smallest, the antipode's e^{-beta} its largest
    pair = circle.velocity(np.array([0.0, 0.5]), -1.0, normalization)
    assert pair[0] > 0 > pair[1]  # they still attract: both weights are positive


def test_splay_states_are_equilibria_with_the_closed_form_rates():
    for n in (3, 8, 32):
        for beta in (-1.5, -0.5, 0.0, 2.0):
            drift = circle.velocity(circle.splay(n, 0.3), beta)
            assert np.abs(drift).max() < 1e-14
            # SA rates = lambda_k / G, G = sum_m e^{beta cos(2 pi m / n)} (circulant H)
            G = np.exp(beta * np.cos(2 * np.pi * np.arange(n) / n)).sum()
            np.testing.assert_allclose(
                circle.linear_rates(circle.splay(n), beta), np.sort(circle.splay_rates(n, beta)) / G, atol=1e-12
            )
    # n = 3: lambda_1 = 3 e^{-beta/2} (1/2 + 3 beta/4), zero at beta = -2/3
    for beta in (-1.0, -2.0 / 3.0, -0.5):
        closed = 3 * math.exp(-beta / 2) * (0.5 + 0.75 * beta)
        np.testing.assert_allclose(circle.splay_rates(3, beta), [closed, closed], atol=1e-14)
    assert circle.linear_rates(circle.splay(3), -0.67)[-1] < 0 < circle.linear_rates(circle.splay(3), -0.66)[-1]
    # many tokens: the SA rates tend to k^2 I_k / (beta I_0), the uniform law's modes (§1.3);
    # mode 1 grows at every beta
    n, k = 256, np.arange(1, 4)
    for beta in (-1.5, -0.7, -0.2, 1.0):
        G = np.exp(beta * np.cos(2 * np.pi * np.arange(n) / n)).sum()
        np.testing.assert_allclose(
            circle.splay_rates(n, beta)[:3] / G, k**2 * iv(k, beta) / (beta * iv(0, beta)), rtol=1e-9
        )
        assert circle.splay_rates(n, beta)[0] > 0


def test_classifier_tells_equilibria_from_saddles_and_synchronized_runs():
    args = ("SA", 0.1, 1e-6)

    def code(theta, beta):
        return circle.classify(theta, circle.pack_circle(beta), beta, *args)[0]

    # the triangle: zero drift at every beta; stable below -2/3, a saddle above
    assert code(circle.splay(3), -1.0) == circle.EQUILIBRIUM
    assert code(circle.splay(3), -0.5) == circle.UNDECIDED
    assert code(circle.splay(8), -1.5) == circle.UNDECIDED  # eight: mode 1 unstable
    near = circle.splay(3) + np.array([0.0, 1e-3, -2e-3])  # off the equilibrium: moving
    assert code(near, -1.0) == circle.UNDECIDED
    # one arc shorter than sync_arc, across theta = 0: synchronized; wider: not yet
    assert code(np.array([2 * np.pi - 0.04, 0.01, 0.05]), -1.0) == circle.SYNCHRONIZED
    assert code(np.array([-0.06, 0.01, 0.05]), -1.0) == circle.UNDECIDED
    np.testing.assert_allclose(circle.arc(np.array([6.2, 0.1, 3.0])), 2 * np.pi - 3.2)
    assert list(circle.cluster_count(np.array([[0.0, 0.01, 2.1, 4.2], [0.0, 0.01, 0.02, 0.0]]), 0.1)) == [3, 1]


def test_three_cluster_states_reduced_and_full_stability_agree():
    # sizes (3, 3, 2) at beta = -1.5: the reduced K x K analysis is the full Hessian's
    beta, sizes = -1.5, circle.three_sizes(8)
    assert list(sizes) == [3, 3, 2]
    gaps, stable = circle._three_cluster_state(sizes, beta, np.array([1.8, 4.0]))
    assert stable
    phi = np.concatenate([[0.0], gaps])
    theta = np.repeat(phi, sizes)
    assert np.abs(circle.velocity(theta, beta)).max() < 1e-12
    H = circle.hessian(theta, beta)
    Q = np.linalg.qr(np.column_stack([np.ones(8), np.eye(8)[:, :7]]))[0][:, 1:]
    full = np.linalg.eigvalsh(Q.T @ H @ Q)[-1]
    assert full < 0 and circle.cluster_top_rate(phi, sizes, beta) == pytest.approx(full, rel=1e-9)
    assert circle.linear_rates(theta, beta)[-1] < 0
    # onsets: -2/3 exactly when 3 | n (three equal clusters are the triangle); below otherwise
    for n in (3, 6):
        assert circle.three_cluster_onset(n) == pytest.approx(-2.0 / 3.0, abs=1e-8)
    assert circle.three_cluster_onset(8) == pytest.approx(-1.2222968, abs=1e-6)
    assert math.isnan(circle.three_cluster_onset(2))


def test_synchronizes_at_zero_and_slightly_negative_beta_from_a_generic_start():
    rng = np.random.default_rng(5)
    theta0 = rng.uniform(0, 2 * np.pi, (4, 16, 1))
    ts = np.linspace(0.0, 30.0, 31)
    for beta in (0.0, -0.1):
        p = circle.pack_circle(beta)
        states = integrators.get("numba", "rk4", dt=0.1).solve(circle.circle_problem(p), theta0, ts).states
        theta = states[..., 0]  # (runs, times, n)
        codes = circle.classify(theta[:, -1], p, beta, "SA", 0.1, 1e-6)
        assert (codes == circle.SYNCHRONIZED).all()
        # SA is gradient ascent of E = sum_ij e^{beta cos} / (2 beta): the sum of e^{beta cos}
        # over pairs (2 sum_{i<j} cos(theta_i - theta_j) at beta = 0) never falls (beta >= 0) or
        # rises (beta < 0) from save to save
        u = theta[..., :, None] - theta[..., None, :]
        energy = (np.cos(u) if beta == 0 else np.exp(beta * np.cos(u)) / beta).sum(axis=(-2, -1))
        assert (np.diff(energy, axis=1) > -1e-9).all()
        assert (energy[:, -1] - energy[:, 0] > 1.0).all()


def test_run_until_decided_end_to_end_with_the_triangle(tmp_path):
    # n = 3: the triangle is stable below -2/3 (some runs end there), a saddle above (none do)
    path = dyn.run(
        SCENARIO,
        out=tmp_path / "tri.h5",
        progress=False,
        overrides={"sweep.beta": [-1.0, -0.5], "sweep.n": [3], "ensemble.runs": 200},
    )
    with dyn.open(path) as ds:
        total = ds.p_synchronized + ds.p_equilibrium + ds.p_undecided
        np.testing.assert_allclose(total, 1.0)
        assert float(ds.p_equilibrium.sel(beta=-1.0, n=3)) > 0.02  # measured 0.0575 (400 runs)
        assert float(ds.p_equilibrium.sel(beta=-0.5, n=3)) == 0.0
        assert float(ds.p_undecided.max()) == 0.0
        assert float(ds.clusters_max.sel(beta=-1.0, n=3)) == 3
        assert float(ds.horizon_cap.max()) == 1000.0
        assert ds.p_undecided.attrs[ROLE_ATTR] == UNDECIDED
        assert ds.p_equilibrium.attrs[ROLE_ATTR] == PROBABILITY
        assert float(ds.p_equilibrium_lo.sel(beta=-1.0, n=3)) > 0  # Wilson bounds of the engine
        assert float(ds.beta_three_clusters.sel(n=3)) == pytest.approx(-2.0 / 3.0, abs=1e-8)


def test_undecided_runs_are_counted_listed_and_hatched(tmp_path):
    # a cap of one short stretch: no run can be decided (the arc shrinks for longer)
    path = dyn.run(
        SCENARIO,
        out=tmp_path / "cut.h5",
        progress=False,
        overrides={
            "sweep.beta": [-1.0, -0.2],
            "sweep.n": [8, 32],
            "ensemble.runs": 20,
            "integrator.horizon": 0.4,
            "integrator.horizon_cap": 0.4,
        },
    )
    with dyn.open(path) as ds:
        assert float(ds.p_undecided.min()) == 1.0
        assert float(ds.decision_time.max()) == pytest.approx(0.4)
    assert count_unresolved(path) == {HORIZON_LIMITED: 4}
    assert "horizon-limited 4 points" in dyn.presentation.analysis.summary(path)
    ax = figure(path).axes[0]
    assert any(patch.get_hatch() == "///" for patch in ax.patches)


def test_shipped_scenario_writes_the_bounds_and_draws_them(tmp_path):
    doc = scenario_mod.read_file(SCENARIO)
    scenario = scenario_mod.resolve(doc, "repulsive_sync")
    beta = scenario.axes["beta"]
    assert scenario.axes["n"] == [8, 32, 128] and min(beta) == -1.5 and max(beta) == 0.0
    path = tmp_path / "rs.h5"
    store.create(path, scenario, "test")
    with dyn.open(path) as ds:
        for name, value in (("beta_sync", -0.16), ("beta_no_sync", -2.0 / 3.0)):
            assert ds[name].attrs[ROLE_ATTR] == REFERENCE and ds[name].attrs["dyn_along"] == "beta"
            np.testing.assert_array_equal(ds[name].values, [value] * 3)
        onset = ds["beta_three_clusters"].values
        np.testing.assert_allclose(onset, [-1.2222968, -0.9075708, -0.7802061], atol=1e-6)
        assert np.all(onset < -2.0 / 3.0)  # none of 8, 32, 128 is a multiple of 3
    fig = figure(path)
    labels = {line.get_label() for line in fig.axes[0].lines}
    assert {r"sync proved: $\beta \geq -0.16$", r"no global sync: $\beta < -2/3$"} <= labels


@pytest.mark.parametrize(
    "change, key",
    [
        (["sweep.beta=[-60.0]"], "sweep.beta"),
        (["params.sync_arc=3.2"], "params.sync_arc"),
        (["integrator.horizon_cap=5.0"], "integrator.horizon_cap"),
    ],
)
def test_bad_input_names_the_key(change, key):
    with pytest.raises(dyn.ScenarioError, match=key.replace(".", r"\.")):
        dyn.load(SCENARIO, change)


@pytest.mark.slow
def test_eight_tokens_stop_out_of_sync_only_below_the_three_cluster_onset(tmp_path):
    # beta_3(8) = -1.2223: (3, 3, 2) clusters are stable below it and no non-synchronized state
    # is reached above it (measured 41, 26 and 0 of 800 at -1.5, -1.3, -1.2 in repulsive_sync)
    path = dyn.run(
        SCENARIO,
        out=tmp_path / "eight.h5",
        progress=False,
        overrides={"sweep.beta": [-1.5, -1.3, -1.1, -0.6], "sweep.n": [8], "ensemble.runs": 1500},
    )
    with dyn.open(path) as ds:
        p = ds.p_equilibrium.sel(n=8)
        assert float(p.sel(beta=-1.5)) > 0.03 and float(p.sel(beta=-1.3)) > 0.01
        assert float(p.sel(beta=-1.1)) == 0.0 and float(p.sel(beta=-0.6)) == 0.0
        assert float(ds.p_undecided.max()) == 0.0
