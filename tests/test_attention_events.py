"""Merge events and early-token shares (dyn.attention.events): hand-made clusterings, and the
law that every recorded merge is a fall of the cluster count, on runs of the system."""

import numpy as np
import pytest

import dyn
from dyn import attention as att
from dyn.attention import events

TIMES = np.array([0.0, 1.0, 2.0, 3.0, 4.0])


def test_merges_of_hand_made_clusterings():
    # 6 tokens: {0,1} {2} {3} {4,5} -> {0,1,2} {3} {4,5} -> same -> {0,1,2,3,4,5} -> same
    labels = np.array(
        [[0, 0, 2, 3, 4, 4], [0, 0, 0, 3, 4, 4], [0, 0, 0, 3, 4, 4], [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]]
    )
    t, a, b = events.merges(labels, TIMES)
    assert t.shape == (5,)
    np.testing.assert_array_equal(t[:3], [1.0, 3.0, 3.0])
    assert np.isnan(t[3:]).all() and np.isnan(a[3:]).all()
    # at t = 3 the cluster {0,1,2} meets {3} (4 tokens) and then {4,5} (6 tokens): largest first
    np.testing.assert_array_equal(a[:3], [2, 4, 3])
    np.testing.assert_array_equal(b[:3], [1, 2, 1])


def test_a_split_in_the_same_interval_records_only_the_fall():
    # {0,1} {2,3}  ->  {0} {1,2,3}: the count stays 2, so nothing is recorded
    labels = np.array([[0, 0, 2, 2], [0, 1, 1, 1]])
    t, _, _ = events.merges(labels, TIMES[:2])
    assert np.isnan(t).all()
    # {0,1} {2} {3}  ->  {0} {1,2,3}: one fewer; candidates {1}+{2} (2) and {1,2}+{3} (3): keep 3
    labels = np.array([[0, 0, 2, 3], [0, 1, 1, 1]])
    t, a, b = events.merges(labels, TIMES[:2])
    np.testing.assert_array_equal(t[:1], [1.0])
    assert (a[0], b[0]) == (2, 1) and np.isnan(t[1:]).all()


def test_labels_and_early_shares():
    e1, e2 = np.eye(3)[:2]
    x = np.stack([e1, e2, e1, e2, -e1])
    labels = att.cluster_labels(x, 1e-6)
    np.testing.assert_array_equal(labels, [0, 1, 0, 1, 4])
    assert events.held_by(labels, 1) == pytest.approx(2 / 5)
    assert events.held_by(labels, 2) == pytest.approx(4 / 5)
    assert att.n_clusters(x, 1e-6) == len(np.unique(labels))
    with pytest.raises(ValueError, match="first must be"):
        events.held_by(labels, 0)


SCENARIO = """
[scenario]
name = "merges"
system = "attention_sphere"
[params]
n = 16
d = 2
events = true
early = 3
[sweep]
beta = [4.0, 9.0]
[ensemble]
runs = 6
seed = 11
[integrator]
backend = "numba"
method = "dopri5"
rtol = 1e-7
atol = 1e-9
horizon = 2000.0
[output]
saves = 60
spacing = "log"
t_min = 0.05
"""


def test_every_recorded_merge_is_a_fall_of_the_cluster_count(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(SCENARIO)
    with dyn.open(dyn.run(path, tmp_path / "m.h5", progress=False)) as ds:
        times = ds["time"].values
        count = ds["run_clusters"].values  # (beta, run, time): dyn.attention.n_clusters
        merge_t = ds["merge_time"].values  # (beta, run, merge): dyn.attention.events
        a, b = ds["merge_size_a"].values, ds["merge_size_b"].values
        assert merge_t.shape == (2, 6, 15)
        recorded = 0
        for beta in range(2):
            for run in range(6):
                c = count[beta, run]
                fall = np.maximum(c[:-1] - c[1:], 0)
                seen = merge_t[beta, run][np.isfinite(merge_t[beta, run])]
                assert len(seen) == fall.sum()  # as many merges as units of fall
                for k in range(1, len(times)):  # each at a save time where the count fell
                    assert np.sum(seen == times[k]) == fall[k - 1]
                ok = np.isfinite(merge_t[beta, run])
                assert (a[beta, run][ok] >= 1).all() and (b[beta, run][ok] >= 1).all()
                assert (a[beta, run][ok] + b[beta, run][ok] <= 16).all()
                assert np.all(np.diff(seen) >= 0)  # in time order
                recorded += len(seen)
        assert recorded > 20  # the runs did merge (metastable clusters at beta = 9 too)
        # the energy at each save, per run, averages to the reported mean energy
        np.testing.assert_allclose(ds["run_energy"].values.mean(axis=1), ds["energy"].values, rtol=1e-12)
        assert (ds["held_by_early"].values >= ds["held_by_first"].values - 1e-15).all()
