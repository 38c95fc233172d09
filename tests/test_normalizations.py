"""Row normalizations of attention scores (dyn.user.normalize): each built-in maps a row of
scores to weights of its definition, checked against plain numpy references on random rows,
rows with ties included."""

from __future__ import annotations

import numpy as np
import pytest

from dyn.user import normalize


def _rows(seed=0, count=200):
    """Random rows of 1 to 40 scores; one row in three of small integers / 2 (many ties)."""
    rng = np.random.default_rng(seed)
    for r in range(count):
        n = int(rng.integers(1, 41))
        if r % 3 == 0:
            yield rng.integers(-3, 4, n) / 2.0
        else:
            yield rng.standard_normal(n) * rng.choice([0.1, 1.0, 10.0])


def _apply(fn, s, a=0.0):
    w = np.empty_like(s)
    fn(np.ascontiguousarray(s), w, a)
    return w


def sparsemax_reference(s):
    """The threshold tau = max_k (sum of the k largest - 1) / k, w = max(s - tau, 0)."""
    z = np.sort(s)[::-1]
    tau = np.max((np.cumsum(z) - 1.0) / np.arange(1, len(z) + 1))
    return np.maximum(s - tau, 0.0)


def test_sparsemax_matches_the_numpy_reference_ties_included():
    for s in _rows():
        w = _apply(normalize.sparsemax, s)
        assert np.abs(w - sparsemax_reference(s)).max() <= 1e-12
        assert abs(w.sum() - 1) <= 1e-12 and w.min() >= 0


def test_softmax_and_usa_are_their_formulas():
    for s in _rows(1, 50):
        e = np.exp(s)
        assert np.allclose(_apply(normalize.softmax, s), e / e.sum(), rtol=1e-13, atol=0)
        assert np.allclose(_apply(normalize.usa, s), e / len(s), rtol=1e-15, atol=0)


def test_hardmax_shares_equally_among_exact_ties():
    w = _apply(normalize.hardmax, np.array([0.5, 2.0, -1.0, 2.0, 2.0 - 1e-15]))
    assert np.array_equal(w, [0.0, 0.5, 0.0, 0.5, 0.0])


# slow tier: compiles entmax for its own arguments; by default entmax is checked against the
# bisection in test_entmax_at_1_5_is_the_bisection_solution
@pytest.mark.slow
def test_entmax_is_sparsemax_at_alpha_2_and_sums_to_one():
    for s in _rows(2, 60):
        assert np.abs(_apply(normalize.entmax, s, 2.0) - sparsemax_reference(s)).max() <= 1e-12
        w = _apply(normalize.entmax, s, 1.5)
        assert abs(w.sum() - 1) <= 1e-12 and w.min() >= 0
        # 1.5-entmax: w = [s/2 - tau]_+^2 for one tau: sqrt(w) + ... is affine in s on the support
        on = w > 1e-12
        if on.sum() >= 2:
            tau = s[on] / 2 - np.sqrt(w[on])
            assert np.ptp(tau) <= 1e-7 * (1 + np.abs(s).max())


def test_kth_largest_is_numpys_partition_value_ties_included():
    for s in _rows(7, 400):
        n = len(s)
        for k in sorted({1, n, (n + 1) // 2, min(3, n)}):
            assert normalize.kth_largest(s, k) == np.partition(s, n - k)[n - k], (s, k)


def test_topk_keeps_the_k_largest_ties_lowest_index_first():
    s = np.array([1.0, 3.0, 2.0, 3.0, 2.0, -1.0])
    w = _apply(normalize.topk, s, 3)
    kept = np.array([False, True, True, True, False, False])
    e = np.exp(s[kept])
    assert np.array_equal(w > 0, kept)
    assert np.allclose(w[kept], e / e.sum(), rtol=1e-14)
    for s in _rows(3, 60):
        k = min(4, len(s))
        w = _apply(normalize.topk, s, k)
        assert (w > 0).sum() == k and abs(w.sum() - 1) <= 1e-13
        assert s[w > 0].min() >= s[w == 0].max(initial=-np.inf)


@pytest.mark.parametrize(
    "bad, says", [(lambda s: s * 0 + 0.5, "summing to"), (lambda s: s - s.mean() + 1 / len(s), "negative")]
)
def test_row_check_names_weights_that_are_not_a_distribution(bad, says):
    scores = np.array([[0.1, -2.0, 0.3], [1.0, 1.0, 1.0]])
    assert says in normalize.row_check(bad, scores)
    assert normalize.row_check(lambda s: np.exp(s) / np.exp(s).sum(), scores) is None


def test_entmax_at_1_5_is_the_bisection_solution():
    """The sorted exact form at alpha = 1.5 against the bisection (alpha a hair above 1.5)."""
    for s in _rows(4, 80):
        exact = _apply(normalize.entmax, s, 1.5)
        assert abs(exact.sum() - 1) <= 1e-12 and exact.min() >= 0
        np.testing.assert_allclose(exact, _apply(normalize.entmax, s, 1.5 + 1e-13), atol=1e-9)


def test_row_weights_applies_a_built_in_by_name_row_by_row():
    """dyn.row_weights: the public call gives each row the built-in's own weights (sparsemax of
    (1, 0.8, -1) is (0.6, 0.4, 0) exactly: tau = 0.4); an unknown name or a 3-D array is a
    ValueError."""
    import dyn

    np.testing.assert_allclose(dyn.row_weights("sparsemax", [1.0, 0.8, -1.0]), [0.6, 0.4, 0.0], atol=1e-15)
    rows = np.random.default_rng(3).standard_normal((4, 7))
    for name, a in (("softmax", 0.0), ("entmax", 1.5), ("topk", 3.0)):
        got = dyn.row_weights(name, rows, a)
        for s, w in zip(rows, got, strict=True):
            np.testing.assert_array_equal(w, _apply(normalize.BUILTIN[name], s, a))
    with pytest.raises(ValueError, match="no row normalization 'soft'"):
        dyn.row_weights("soft", rows[0])
    with pytest.raises(ValueError, match="one row"):
        dyn.row_weights("softmax", rows[None])
