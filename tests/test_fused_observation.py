"""Observation inside the solver's step loop (integrators.core.observer, dyn.attention.observer):
the observed rows equal the observables of the stored states, pair fraction, min inner product
and cluster labels bit for bit, the energy read off the field's normalizers to rounding; a run
whose outputs need the states still stores them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import integrators
from _scenarios import SCENARIOS
from dyn.attention import architecture, events, observables, schemes
from dyn.attention.init import uniform_sphere
from dyn.attention.observer import (
    MASK_TOKENS,
    PAD,
    close_fraction_paired,
    close_rows_counted,
    close_rows_joined,
    pair_observer,
    pair_row,
    split_rows,
)
from dyn.engine import scenario as scenario_mod
from dyn.systems import attention_sphere

EPS = np.finfo(float).eps


def _reference_pairs(x, delta):
    """Pair fraction, min inner product and labels of configurations (m, n, d) by numpy: the
    same IEEE sums G_ij = ((0 + x_i1 x_j1) + x_i2 x_j2) + ..., components by a graph search."""
    m, n, d = x.shape
    out, labels = np.empty((m, 2)), np.empty((m, n), dtype=np.int64)
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    for b in range(m):
        g = np.zeros((n, n))
        for k in range(d):
            g = g + x[b, :, k][:, None] * x[b, :, k][None, :]
        close = g > 1.0 - delta
        out[b] = (close & upper).sum() / upper.sum(), g[upper].min()
        label = -np.ones(n, dtype=np.int64)
        for i in range(n):  # a search from each unlabelled token, the smallest first
            if label[i] < 0:
                todo, label[i] = [i], i
                while todo:
                    j = todo.pop()
                    for k in np.flatnonzero(close[j] & (label < 0)):
                        label[k] = i
                        todo.append(k)
        labels[b] = label
    return out, labels


def _configurations(rng, m, n, d):
    """Uniform tokens and tight clusters whose pairs sit at the threshold's scale."""
    x = uniform_sphere(rng, m, n, d)
    centres = uniform_sphere(rng, m, 3, d)
    tight = centres[:, rng.integers(0, 3, n)] + 0.03 * rng.standard_normal((m, n, d))
    x[m // 2 :] = tight[m // 2 :] / np.linalg.norm(tight[m // 2 :], axis=-1, keepdims=True)
    return x


@pytest.mark.parametrize("d", [2, 3])
def test_pair_statistics_are_numpys_bit_for_bit(d):
    """The pair pass, with exps or without, gives numpy's pair fraction and min inner product
    (the same sums) bit for bit, and the components as labels; on the circle so do the
    observer's passes: the pair fraction alone (close_fraction, one loop per row keeping
    nothing), and the rows then the clusters (close_rows, join_rows; one cluster included)."""
    rng = np.random.default_rng(7)
    x = _configurations(rng, 12, 17, d)
    delta = 1e-3
    rows, labels = observables.pairs_and_clusters(x, delta, 0.0)
    tri, tri_labels = observables.pairs_and_clusters(x, delta, 2.5)
    want, want_labels = _reference_pairs(x, delta)
    assert np.array_equal(rows[:, :2], want) and np.array_equal(tri[:, :2], want)
    assert np.array_equal(labels, want_labels) and np.array_equal(tri_labels, want_labels)
    assert 0 < rows[:, 0].max() < 1  # the cases hold close pairs and far ones
    if d == 2:  # the observer's passes on the circle: the fraction alone, rows then clusters
        n = x.shape[1]
        x[4] = x[4, :1]  # one cluster: every pair close
        want, want_labels = _reference_pairs(x, delta)
        xt, g, near = np.empty((2, n)), np.empty(n * n), np.empty(n)
        parent = np.empty(n, dtype=np.int64)
        for c, stats, labels in zip(x, want, want_labels, strict=True):
            assert observables.close_fraction(c, 1.0 - delta, xt) == stats[0]
            assert observables.close_rows(c, 1.0 - delta, xt, g, near) == tuple(stats)
            observables.join_rows(g, n, 1.0 - delta, stats[0] == 1.0, near, parent)
            assert np.array_equal(parent, labels)
    x[3, 5, 0] = np.nan  # a blown-up configuration: NaN min, in both passes
    assert np.isnan(observables.pairs_and_clusters(x, delta, 0.0)[0][3, 1])
    assert np.isnan(observables.pairs_and_clusters(x, delta, 2.5)[0][3, 1])
    if d == 2:
        assert np.isnan(observables.close_rows(x[3], 1.0 - delta, xt, g, near)[1])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 17, 30, 32, 64])
def test_the_paired_pair_fraction_is_the_pass_count(n):
    """close_fraction_paired (rows four at a time over padded columns, no leading 0 + in G_ij)
    counts the pairs close_fraction counts, bit for bit: every n mod 4, clusters at the
    threshold's scale, a threshold equal to a pair's G (strictly greater counts), a negative
    threshold (the NaN padding never counts), tokens on the axes (signed zero products) and a
    NaN token."""
    rng = np.random.default_rng(n)
    x = _configurations(rng, 8, n, 2)
    x[1, :] = [(1.0, 0.0), (-0.0, 1.0), (-1.0, -0.0), (0.0, -1.0)] * (n // 4) + [(1.0, -0.0)] * (n % 4)
    x[2, n // 2, 0] = np.nan
    xt, cols = np.empty((2, n)), np.empty(2 * (n + PAD))
    for threshold in (1.0 - 1e-3, 0.0, -0.0, -0.5):
        for c in x:
            want = observables.close_fraction(c, threshold, xt)
            assert close_fraction_paired(c, threshold, cols) == want
    if n > 1:  # a pair at exactly the threshold
        c = x[5]
        g = (0.0 + c[0, 0] * c[n - 1, 0]) + c[0, 1] * c[n - 1, 1]
        assert close_fraction_paired(c, g, cols) == observables.close_fraction(c, g, xt)
        assert close_fraction_paired(c, np.nextafter(g, -1.0), cols) > close_fraction_paired(c, g, cols)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 17, 30, 32, 63, 64])
def test_the_masked_clusters_are_the_union_finds(n):
    """close_rows_joined (clusters from bit masks, the min from running column mins) gives
    close_rows' pair fraction and min inner product and join_rows' labels bit for bit, and
    close_rows_counted the same statistics and the labels' counts: uniform tokens, clusters at
    the threshold's scale, chains (tokens a step under the threshold's angle apart: one cluster
    through pairs that are not all close), one cluster, tokens on the axes, tokens in one
    quadrant on the axes (the min is a G of exactly 0, whose sign is the rows'); and the
    checked pass's cases: a NaN token, tokens whose products overflow (a NaN G from
    inf - inf), an infinite token; n <= 56 takes the padded pass where the tokens are
    bounded, n = 64 the checked one always."""
    rng = np.random.default_rng(100 + n)
    x = _configurations(rng, 11, n, 2)
    step = 0.9 * np.arccos(1.0 - 1e-3)  # each neighbour close, the next but one not
    angles = rng.permutation(n) * step
    x[1] = np.stack([np.cos(angles), np.sin(angles)], axis=-1)
    x[2] = x[2, :1]  # one cluster
    x[3, :] = [(1.0, 0.0), (-0.0, 1.0), (-1.0, -0.0), (0.0, -1.0)] * (n // 4) + [(1.0, -0.0)] * (n % 4)
    x[4, n // 2, 1] = np.nan
    x[5, :] = [(1.0, -0.0), (-0.0, 1.0), (0.0, 1.0), (1.0, 0.0)] * (n // 4) + [(-0.0, 1.0)] * (n % 4)
    x[6, :2] = [(1e200, 1e200), (1e200, -1e200)][:n]  # no NaN token, but a NaN G (inf - inf)
    x[7, -1] = (np.inf, 0.5)  # inf x 0.5 - 0.0 x ...: G = +-inf or NaN
    size = n * (n - 1) // 2
    xt, g, near = np.empty((2, n)), np.empty(size + 1), np.empty(n)
    padded, lows = np.empty(2 * (n + PAD)), np.empty(n + PAD)
    tags = np.empty(3 * n, dtype=np.int64)
    want_labels, got_labels = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    clusters = set()
    # a negative threshold (delta > 1) too: the padded columns must not count as close
    for c, threshold in itertools.product(x, (1.0 - 1e-3, -0.5)):
        want = observables.close_rows(c, threshold, xt, g, near)
        observables.join_rows(g, n, threshold, want[0] == 1.0, near, want_labels)
        got = close_rows_joined(c, threshold, padded, lows, tags, got_labels)
        assert np.array(got).tobytes() == np.array(want).tobytes()  # NaN and signed zeros too
        assert np.array_equal(got_labels, want_labels)
        for early in (1, 2, n, n + 1, 10**4):
            counted = close_rows_counted(c, threshold, padded, lows, tags, float(early))
            assert np.array(counted[:2]).tobytes() == np.array(want).tobytes()
            assert counted[2:] == (len(set(want_labels)), (want_labels < 1).sum(), (want_labels < early).sum())
        clusters.add(len(set(got_labels)))
    if n >= 4:  # the quadrant's min is a G of exactly +0 (-0.0 x 1.0 + 1.0 x 0.0 and the like)
        assert close_rows_joined(x[5], 1.0 - 1e-3, padded, lows, tags, got_labels)[1] == 0.0
    if n >= 17:
        assert len(clusters) >= 3  # one, a few and many clusters among the cases


@pytest.mark.parametrize("n, d", [(5, 2), (17, 2), (32, 2), (MASK_TOKENS, 2), (MASK_TOKENS + 3, 2), (17, 3)])
def test_the_observed_counts_are_the_labels_counts(n, d):
    """An observer given `early` writes in place of the n labels their three counts, and
    nothing else moves: the clusters are count_clusters of the labels, and the tokens labelled
    < 1 and < early over n are held_by's fractions bit for bit (numpy's mean of booleans: the
    exact sum, one division). Tight clusters at the threshold's scale and uniform tokens (many
    clusters), one cluster, a NaN token; odd n, n = MASK_TOKENS (the bit masks) and above it
    (the union-find), d = 3 (the pair pass); with and without exps; early = 1, a few and
    early > n (every token)."""
    rng = np.random.default_rng(200 + n + d)
    delta = 1e-3
    x = _configurations(rng, 8, n, d)
    x[1] = x[1, :1]  # one cluster
    x[2, n // 2, 0] = np.nan  # a blown-up configuration: the NaN token is a cluster of its own
    want_stats, labels = observables.pairs_and_clusters(x, delta, 0.0)
    clusters = observables.count_clusters(labels)
    assert clusters[1] == 1 and len(set(clusters)) >= 3
    drift_work = np.full(1, np.nan)  # no field's sums: the observer exponentiates itself

    def observed(observer):
        rows = np.empty((len(x), observer.columns))
        work = np.empty(observer.work)
        for c, row in zip(x, rows, strict=True):
            pair_row(0.0, c, observer.q, row, drift_work, work)
        return rows

    for beta in (0.0, 2.5):
        stats, found, sums = split_rows(observed(pair_observer(n, d, delta, beta, token_sum=True)), n, beta)
        assert np.array_equal(found, labels)
        assert np.array_equal(stats[:, :2], want_stats[:, :2], equal_nan=True)
        for early in (1, 3, n + 4):
            observer = pair_observer(n, d, delta, beta, token_sum=True, early=early)
            assert observer.columns == 3 + 3 + d
            got, counts, got_sums = split_rows(observed(observer), n, beta, counts=True)
            assert got.tobytes() == stats.tobytes() and got_sums.tobytes() == sums.tobytes()
            assert counts.dtype == np.int64 and np.array_equal(counts[:, 0], clusters)
            for column, first in ((1, 1), (2, early)):
                held = events.held_by(labels, first)
                assert (counts[:, column] / n).tobytes() == held.tobytes()
            if early > n:
                assert (counts[:, 2] == n).all()
            else:
                assert (counts[:, 2] < n).any()  # some run holds tokens outside those clusters
    for bad in (0, 1.5):
        with pytest.raises(ValueError, match="early"):
            pair_observer(n, d, delta, early=bad)


def _problem(form, beta, normalization):
    p = architecture.pack_architecture(beta, 2, normalization)
    scheme = schemes.scheme("post")
    return (scheme.network if form == "network" else scheme.flow).problem(p)


@pytest.mark.parametrize("form, method, normalization", [("network", "euler", "SA"), ("flow", "rk4", "USA")])
def test_observed_rows_equal_the_stored_states_observables(form, method, normalization):
    """A small ensemble solved twice, states stored then observed, and observed in the loop:
    pairs and labels bit for bit; the energy from the field's normalizers e^c sum_i Z_i to
    rounding (each of the n^2 terms e^{beta G - c} carries a relative error of a few eps from
    its score beta G - c, |beta G| <= 4 here, and the sums of 2 x 144 terms add at most n^2 eps;
    measured about 1e-15), and bit for bit when the observer exponentiates itself."""
    rng = np.random.default_rng(3)
    n, d, runs, beta = 12, 2, 6, 4.0
    x0 = uniform_sphere(rng, runs, n, d)
    ts = np.linspace(0.0, 6.0, 21)
    integ = integrators.get("numba", method, dt=0.1)
    problem = _problem(form, beta, normalization)
    states = integ.solve(problem, x0, ts).states
    want, labels = observables.pairs_and_clusters(states, 1e-3, beta)
    assert 0 < want[..., 0].mean() < 1
    for from_field in (True, False):
        sol = integ.solve(problem, x0, ts, observer=pair_observer(n, d, 1e-3, beta, from_field=from_field))
        assert sol.states is None and sol.observations.shape == (runs, len(ts), 3 + n)
        assert np.array_equal(sol.last_state, states[:, -1]) and sol.ok.all()
        got, got_labels, _ = split_rows(sol.observations, n, beta)
        assert np.array_equal(got[..., :2], want[..., :2])
        assert np.array_equal(got_labels, labels)
        if from_field:
            np.testing.assert_allclose(got[..., 2], want[..., 2], rtol=n * n * EPS, atol=0)
            assert not np.array_equal(got[..., 2], want[..., 2])  # the field's sum, not the exps
        else:
            assert np.array_equal(got[..., 2], want[..., 2])


def test_a_field_path_without_normalizers_leaves_the_exps_to_the_observer():
    """Under a causal mask the field takes its column path, which leaves no normalizers: the
    observer, told to read them, finds the NaN the solver started the workspace with and
    exponentiates itself, bit for bit the stored states' energy."""
    rng = np.random.default_rng(5)
    n, d, beta = 10, 2, 3.0
    p = architecture.pack_architecture(beta, d, "SA", mask="causal")
    problem = schemes.scheme("post").network.problem(p)
    x0 = uniform_sphere(rng, 4, n, d)
    ts = np.linspace(0.0, 2.0, 11)
    integ = integrators.get("numba", "euler", dt=0.1)
    want = observables.pairs_and_clusters(integ.solve(problem, x0, ts).states, 1e-3, beta)[0]
    sol = integ.solve(problem, x0, ts, observer=pair_observer(n, d, 1e-3, beta, from_field=True))
    assert np.array_equal(split_rows(sol.observations, n, beta)[0], want)


def test_an_observer_needs_a_fixed_step_numba_method():
    problem = _problem("flow", 1.0, "SA")
    x0 = uniform_sphere(np.random.default_rng(0), 2, 4, 2)
    with pytest.raises(ValueError, match="takes no observer"):
        integrators.get("numba", "dopri5").solve(problem, x0, [0.0, 1.0], observer=pair_observer(4, 2, 1e-3))


def _spec(**values):
    doc = scenario_mod.read_file(SCENARIOS / "attention_clusters.toml")
    base = {
        "params.form": "network",
        "params.depth": 40,
        "output.saves": 20,
        "integrator.horizon": 8.0,
        "sweep.beta": [3.0],
        "ensemble.runs": 5,
    }
    sc = scenario_mod.resolve(scenario_mod.apply_values(doc, {**base, **values}), "attention_clusters")
    return sc.system, sc.spec(0)


@pytest.mark.parametrize(
    "form, kept, more",
    [
        ("network", None, {}),
        ("flow", None, {}),
        ("network", ["pair_fraction"], {}),
        ("network", None, {"params.n": 17, "params.early": 3}),
        ("network", ["held_by_early", "time_to_one_cluster"], {"params.early": 2, "output.plot": "held_by_early"}),
    ],
)
def test_the_system_observes_in_the_loop_as_it_did_from_states(form, kept, more, monkeypatch):
    """attention_sphere: every kept output of the fused run equals the stored-states run's, bit
    for bit but the energy and the first alignment (<sum_i x_i, x_1(0)> / n instead of a sum
    over i and the coordinates at once: a few eps); no state is stored. With the pair fraction
    alone (the peer's equal work) the pass keeps no row and forms no min. The labelled outputs
    come from the labels' counts in the loop, from the labels of the states when stored: odd
    n, early > 1, and some of them kept alone."""
    values = {"params.form": form, **({"output.observables": kept} if kept else {}), **more}
    system, spec = _spec(**values)
    assert attention_sphere._fusable(spec)
    fused = system.simulate(spec, range(spec.runs))
    monkeypatch.setattr(attention_sphere, "_fusable", lambda spec: False)
    system, spec = _spec(**values)  # a fresh stream: the same starts
    stored = system.simulate(spec, range(spec.runs))
    assert fused.states is None and stored.states is not None
    assert set(fused.values) == set(stored.values)
    for name, value in stored.values.items():
        if not spec.setup.keeps(name):
            continue
        if name in ("energy", "first_alignment"):
            np.testing.assert_allclose(fused.values[name], value, rtol=1e-13, atol=1e-15)
        else:
            assert np.array_equal(fused.values[name], value, equal_nan=True), name
            assert fused.values[name].dtype == value.dtype, name
    if "params.early" in more and spec.setup.keeps("held_by_first"):  # early is seen
        assert not np.array_equal(fused.values["held_by_early"], fused.values["held_by_first"])


def test_outputs_that_need_the_states_still_get_them():
    """Trajectories, events and equiangular starts keep the stored states."""
    for values in (
        {"output.trajectories": True},
        {"params.events": True},
        {"params.init": "equiangular", "params.rho0": 0.3, "params.n": 3, "params.d": 4},
    ):
        system, spec = _spec(**values)
        assert not attention_sphere._fusable(spec)
        assert system.simulate(spec, range(spec.runs)).states is not None
