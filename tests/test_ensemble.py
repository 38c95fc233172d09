"""The engine's ensemble reductions (dyn.engine.ensemble): chunking never changes a number, and each
reduction is the statistic it names."""

import numpy as np
import pytest

from dyn.core.stats import wilson
from dyn.core.system import Output
from dyn.engine.ensemble import chunks
from dyn.engine.reductions import Reductions, companions

OUTPUTS = [
    Output("m", "m", dims=("time",)),
    Output("p_hit", "fraction of runs hitting", "1", reduce="proportion"),
    Output("top", "top", reduce="max"),
    Output("err", "err", reduce="rms"),
    Output("s", "s", reduce="mean_se"),
]


def _reduce(values, splits):
    reduction = Reductions(OUTPUTS, len(values["m"]))
    for part in np.split(np.arange(len(values["m"])), splits):
        reduction.add({k: v[part] for k, v in values.items()})
    return reduction.finish()


def test_reductions_are_their_statistics_and_do_not_depend_on_chunks():
    rng = np.random.default_rng(0)
    runs = 37
    values = {
        "m": rng.standard_normal((runs, 5)),
        "p_hit": rng.random(runs) < 0.3,
        "top": rng.standard_normal(runs),
        "err": rng.standard_normal(runs),
        "s": rng.standard_normal(runs),
    }
    one = _reduce(values, [])
    for splits in ([5], [1, 2, 30], list(range(1, runs))):
        many = _reduce(values, splits)
        for name, value in one.items():
            np.testing.assert_array_equal(many[name], value)  # bit for bit
    np.testing.assert_allclose(one["m"], values["m"].mean(axis=0), rtol=1e-15)
    k = values["p_hit"].sum()
    assert one["p_hit"] == k / runs and one["n_hit"] == k
    assert (one["p_hit_lo"], one["p_hit_hi"]) == tuple(wilson(k, runs))
    assert one["top"] == values["top"].max()
    assert one["err"] == pytest.approx(np.sqrt(np.mean(values["err"] ** 2)), rel=1e-15)
    assert one["s_se"] == pytest.approx(values["s"].std(ddof=1) / np.sqrt(runs), rel=1e-12)
    assert [o.name for o in companions(OUTPUTS[1])] == ["p_hit", "n_hit", "p_hit_lo", "p_hit_hi"]


@pytest.mark.parametrize("offset, spread", [(1.0, 1e-15), (1e8, 1.0), (-3.0, 0.0)])
def test_standard_error_holds_for_runs_that_nearly_agree(offset, spread):
    """Runs equal to rounding (a collapsed cluster: min_inner = 1 - O(eps)) or spread far below
    their size: the standard error is the sample's, not the ~sqrt(eps) |mean| that
    E[v^2] - E[v]^2 leaves, and it does not depend on where the chunks are cut."""
    rng = np.random.default_rng(1)
    runs = 16
    values = {
        "m": rng.standard_normal((runs, 5)),
        "p_hit": rng.random(runs) < 0.3,
        "top": rng.standard_normal(runs),
        "err": rng.standard_normal(runs),
        "s": offset + spread * rng.standard_normal(runs),
    }
    want = values["s"].std(ddof=1) / np.sqrt(runs)
    for splits in ([], [3, 9]):
        got = _reduce(values, splits)["s_se"]
        assert abs(got - want) <= 1e-3 * want + 1e-16 * abs(offset), (got, want)


def test_wilson_bounds_solve_the_score_equation():
    # independent of the closed form used: the bounds are the p with |k/n - p| = z sqrt(p(1-p)/n),
    # and at k = 0 (k = n) the lower (upper) bound is 0 (1), the other z^2 / (n + z^2) away
    z = 1.959963984540054
    n = np.array([10, 10, 10, 250, 7])
    k = np.array([0, 5, 10, 37, 1])
    lo, hi = wilson(k, n)
    for b in (lo, hi):
        inside = (b > 0) & (b < 1)
        resid = (k / n - b) ** 2 - z**2 * b * (1 - b) / n
        np.testing.assert_allclose(resid[inside], 0.0, atol=1e-14)
    assert lo[0] == 0.0 and hi[0] == pytest.approx(z**2 / (10 + z**2), rel=1e-12)
    assert hi[2] == 1.0 and lo[2] == pytest.approx(10 / (10 + z**2), rel=1e-12)
    # exactly 0 (1) at 0 (n) successes for every n: the closed form's centre - half rounds to
    # 1e-18 or so at some n, which a printed bound or a log axis shows as a number
    many = np.arange(1, 2001)
    lo0, _ = wilson(np.zeros_like(many), many)
    _, hin = wilson(many, many)
    assert np.all(lo0 == 0.0) and np.all(hin == 1.0)
    assert np.all(lo < k / n + 1e-15) and np.all(hi > k / n - 1e-15) and np.all(lo < hi)


def test_chunks_fit_the_budget_and_cover_the_runs():
    parts = chunks(100, 10**6, 3 * 10**6)  # ceil(100 MB / 3 MB) = 34 chunks of 3 or 2 runs
    assert len(parts) == 34 and {len(c) for c in parts} == {2, 3}
    assert all(len(c) * 10**6 <= 3 * 10**6 for c in parts)
    assert [r for c in parts for r in c] == list(range(100))
    assert chunks(5, 0, 1) == [range(0, 5)]
    assert chunks(3, 10**9, 1) == [range(0, 1), range(1, 2), range(2, 3)]
