"""Metastable cluster counts (issue 23, item 1; dyn.attention.plateaus): the first-plateau detector
on hand-made staircases (exact answers), the most unstable mode k*(beta) against a direct argmax
of k^2 I_k(beta) and its large-beta form, the merge-rate fit on synthetic merge times, the
references in the file and in the picture, and small runs of the system whose first-plateau
count follows k*(beta)."""
from pathlib import Path

import numpy as np
import pytest
from scipy.special import ive

import dyn
from dyn.attention import plateaus
from dyn.engine import scenario as scenario_mod
from dyn.engine import store
from dyn.core.contract import REFERENCE, ROLE_ATTR
from dyn.presentation.plot import figure

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
# save times as a log axis with t_0 = 0: 0, 1, 2, 4, ..., 512
TIMES = np.concatenate([[0.0], 2.0 ** np.arange(10)])


def _steps(*levels) -> np.ndarray:
    """A count series at TIMES from (count, saves) pairs."""
    series = np.concatenate([[c] * k for c, k in levels]).astype(float)
    assert series.size == TIMES.size
    return series


# ---- the detector ---------------------------------------------------------------------------

@pytest.mark.parametrize("levels, expected", [
    # initial 40 (t = 0, 1), formation 12 (t = 2), plateau 5 over t = 4 .. 32, merges to 3, 2
    (((40, 2), (12, 1), (5, 4), (3, 2), (2, 2)), (5.0, 4.0, 64.0)),
    # the plateau holds to the last save: no merge seen
    (((40, 2), (9, 1), (6, 8)), (6.0, 4.0, np.nan)),
    # an early stretch (30 over t = 1 .. 4, a factor 4) is exceeded later (a chain splits): skipped
    (((31, 1), (30, 3), (33, 1), (7, 4), (4, 2)), (7.0, 16.0, 256.0)),
    # a stretch holding a factor 2 only (t = 2 .. 4) is not a plateau; the next (t = 8 ..) is
    (((20, 2), (8, 2), (3, 7)), (3.0, 8.0, np.nan)),
    # the initial count is never the first plateau, however long it holds
    (((5, 8), (4, 3)), (4.0, 128.0, np.nan)),
    # exactly a factor 3 is not reached on this grid (2 .. 4 is 2, 4 .. 8 is 2): stretches of 2
    # saves never qualify, a stretch of 3 (factor 4) does
    (((9, 1), (8, 2), (7, 2), (6, 3), (5, 3)), (6.0, 16.0, 128.0)),
])
def test_first_plateau_of_hand_made_staircases(levels, expected):
    count, start, end = plateaus.first_plateau(_steps(*levels), TIMES)
    np.testing.assert_array_equal([count, start, end], expected)


def test_no_plateau_gives_nan_and_the_ratio_is_inclusive():
    wandering = _steps((9, 1), (8, 2), (9, 2), (8, 2), (9, 2), (8, 2))  # each a factor 2 only
    assert np.isnan(plateaus.first_plateau(wandering, TIMES)).all()
    times = np.array([0.0, 1.0, 3.0, 9.0])  # a stretch over t = 1 .. 3 holds exactly a factor 3
    np.testing.assert_array_equal(plateaus.first_plateau([5, 2, 2, 1], times), (2.0, 1.0, 9.0))
    assert np.isnan(plateaus.first_plateau([5, 2, 2, 1], times, ratio=3.01)).all()


def test_first_plateau_over_runs_and_points():
    rows = [_steps((40, 2), (12, 1), (5, 4), (3, 2), (2, 2)), _steps((40, 2), (9, 1), (6, 8)),
            _steps((9, 1), (8, 2), (9, 2), (8, 2), (9, 2), (8, 2))]
    counts = np.stack([rows, rows[::-1]])  # (2 points, 3 runs, saves)
    count, start, end = plateaus.first_plateau(counts, TIMES)
    assert count.shape == start.shape == end.shape == (2, 3)
    np.testing.assert_array_equal(count[0], [5.0, 6.0, np.nan])
    np.testing.assert_array_equal(count[1], [np.nan, 6.0, 5.0])
    np.testing.assert_array_equal(end[0], [64.0, np.nan, np.nan])


@pytest.mark.parametrize("counts, times, ratio, match", [
    ([1, 2], [0.0, 1.0, 2.0], 3.0, "counts must be"),
    ([1, 2, 3], [0.0, 2.0, 1.0], 3.0, "increasing"),
    ([1, 2, 3], [-1.0, 1.0, 2.0], 3.0, "increasing"),
    ([1, 2, 3], [0.0, 1.0, 2.0], 1.0, "ratio"),
])
def test_first_plateau_refuses_bad_input(counts, times, ratio, match):
    with pytest.raises(ValueError, match=match):
        plateaus.first_plateau(counts, times, ratio)


# ---- the most unstable mode -----------------------------------------------------------------

def _direct_argmax(beta: float) -> int:
    k = np.arange(1, 400)
    return int(k[np.argmax(k * k * ive(k, beta))])  # e^{-beta} scales every k alike


BETAS = np.concatenate([np.linspace(0.05, 5.0, 60), np.linspace(5.0, 40.0, 80),
                        np.geomspace(40.0, 700.0, 30)])


def test_most_unstable_mode_is_the_direct_argmax_for_both_normalizations():
    sa = plateaus.most_unstable_mode(BETAS, "SA")
    usa = plateaus.most_unstable_mode(BETAS, "USA")
    direct = np.array([_direct_argmax(b) for b in BETAS])
    np.testing.assert_array_equal(sa, direct)
    np.testing.assert_array_equal(usa, direct)
    assert plateaus.most_unstable_mode(2.0) == 2.0 and plateaus.most_unstable_mode(40.0) == 9.0
    assert plateaus.most_unstable_mode(0.5) == 1.0  # small beta: the first mode
    # past beta ~ 700 SA's rates overflow (I_0(beta)); the scaled coefficients give the argmax
    assert [plateaus.most_unstable_mode(b) for b in (1000.0, 3000.0)] == [
        _direct_argmax(1000.0), _direct_argmax(3000.0)]
    assert np.isnan(plateaus.most_unstable_mode(0.0)) and np.isnan(plateaus.most_unstable_mode(-3.0))
    assert plateaus.most_unstable_mode(np.ones((2, 3)) * 8.0).shape == (2, 3)


def test_most_unstable_mode_sits_next_to_the_large_beta_maximizer():
    """k_c = sqrt(2 beta - 1/3) (the module's Debye expansion): the continuous maximizer of
    k^2 I_k(beta) over real orders to O(beta^{-3/2}), where sqrt(2 beta) is O(beta^{-1/2}) off;
    the integer argmax is floor or ceil of it."""
    from scipy.optimize import minimize_scalar

    for beta in (8.0, 10.0, 20.0, 40.0, 100.0, 300.0, 700.0):
        found = minimize_scalar(lambda k: -2 * np.log(k) - np.log(ive(k, beta)),
                                bounds=(0.5, 3 * np.sqrt(2 * beta)), method="bounded",
                                options={"xatol": 1e-12}).x
        kc = plateaus.mode_asymptote(beta)
        assert abs(found - kc) < 0.01 * (8.0 / beta) ** 1.5
        assert abs(found - kc) < 0.2 * abs(found - np.sqrt(2 * beta))
    big = BETAS[BETAS >= 0.5]
    k, kc = plateaus.most_unstable_mode(big), plateaus.mode_asymptote(big)
    assert np.all((np.floor(kc) <= k) & (k <= np.ceil(kc)))
    assert np.isnan(plateaus.mode_asymptote(0.1))


def test_count_scale():
    assert plateaus.count_scale(np.e) == pytest.approx(np.sqrt(np.e), rel=1e-15)
    np.testing.assert_allclose(plateaus.count_scale([4.0, 40.0]),
                               np.sqrt([4 * np.log(4.0), 40 * np.log(40.0)]), rtol=1e-15)
    assert np.isnan(plateaus.count_scale(1.0)) and np.isnan(plateaus.count_scale(0.5))


# ---- the merge-rate fit ---------------------------------------------------------------------

def test_merge_rate_recovers_an_exponential_law_and_leaves_out_censored_betas():
    beta = np.array([4.0, 8.0, 12.0, 16.0, 20.0])
    rng = np.random.default_rng(1)
    ends = np.exp(1.0 + 0.3 * beta[:, None] + 0.3 * rng.standard_normal((5, 41)))
    fit = plateaus.merge_rate(beta, ends, resamples=400)
    assert fit["lo"] < 0.3 < fit["hi"] and fit["hi"] - fit["lo"] < 0.1
    assert fit["rate"] == pytest.approx(0.3, abs=0.03)
    exact = plateaus.merge_rate(beta, np.exp(1.0 + 0.3 * beta[:, None]) * np.ones((5, 9)),
                                resamples=50)
    assert exact["rate"] == pytest.approx(0.3, rel=1e-10) and exact["residual"] < 1e-10
    assert exact["lo"] == pytest.approx(0.3, rel=1e-10) == exact["hi"]
    # half the runs of the last beta never merged: its median is unseen, it is left out
    ends[-1, :21] = np.nan
    fit = plateaus.merge_rate(beta, ends, resamples=400)
    np.testing.assert_array_equal(fit["used"], beta[:-1])
    assert fit["lo"] < 0.3 < fit["hi"]
    # a power law t = 2 beta^1.5 against log beta: the exponent
    power = plateaus.merge_rate(beta, 2 * beta[:, None] ** 1.5 * np.ones((5, 7)), "log_beta",
                                   resamples=50)
    assert power["rate"] == pytest.approx(1.5, rel=1e-10)
    with pytest.raises(ValueError, match=">= 3 values"):
        plateaus.merge_rate(beta[:2], ends[:2])


# ---- the system: references, outputs and runs -----------------------------------------------

def _load(name, **values):
    doc = scenario_mod.apply_values(scenario_mod.read_file(SCENARIOS / f"{name}.toml"), values)
    return scenario_mod.resolve(doc, name)


def test_shipped_scenario_covers_the_range_with_many_tokens():
    sc = _load("metastable_counts")
    assert sc.params["d"] == 2 and sc.params["n"] >= 256 and sc.params["events"]
    assert min(sc.axes["beta"]) == 2.0 and max(sc.axes["beta"]) == 40.0
    assert sc.setup.spacing == "log"


def test_references_are_in_the_file_and_drawn_over_the_plateau_count(tmp_path):
    path = tmp_path / "mc.h5"
    store.create(path, _load("metastable_counts"), "test")
    with dyn.open(path) as ds:
        mode, scale = ds["plateau_mode"], ds["plateau_scale"]
        assert mode.attrs[ROLE_ATTR] == REFERENCE == scale.attrs[ROLE_ATTR]
        assert mode.dims == ("beta_theory",) and ds["beta_theory"].attrs["dyn_axis"] == "beta"
        grid = ds["beta_theory"].values
        assert grid[0] < 2.0 and grid[-1] > 40.0
        np.testing.assert_array_equal(mode.values, [_direct_argmax(b) for b in grid])
        assert mode.attrs["dyn_over"] == "first_plateau_clusters"
        assert ds["run_plateau_clusters"].dims == ("beta", "run")
        assert ds["first_plateau_clusters_se"].dims == ("beta",)
    fig = figure(path)  # pending points: the references alone
    labels = {line.get_label() for ax in fig.axes for line in ax.lines}
    assert r"most unstable mode $k^*(\beta)$" in labels
    assert r"$\sqrt{\beta \log \beta}$" in labels
    # off the circle, or from another start, the mode does not apply: NaN (the scale stays)
    for key, value in (("params.d", 3), ("params.init", "hemisphere")):
        sc = _load("metastable_counts", **{key: value})
        refs = {r.name: r.values for r in sc.system.references(sc.setup)}
        assert np.isnan(refs["plateau_mode"]).all() and np.isfinite(refs["plateau_scale"]).any()


SMALL = """
[scenario]
name = "small_counts"
system = "attention_sphere"
[params]
n = 48
d = 2
init = "uniform"
events = true
[sweep]
beta = [4.0, 24.0]
[ensemble]
runs = 6
seed = 23
[integrator]
backend = "numba"
method = "dopri5"
rtol = 1e-6
atol = 1e-8
horizon = 120.0
[output]
saves = 50
spacing = "log"
t_min = 0.5
"""


def test_first_plateau_count_follows_the_most_unstable_mode(tmp_path):
    """48 tokens at beta = 4 (k* = 3) and 24 (k* = 7): every run's first plateau lies between
    k*/2 and k* + 1, later than the formation (t > 2), and the mean grows with k*; the file's
    per-run values are the detector's on the file's own count series."""
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    with dyn.open(dyn.run(path, tmp_path / "small.h5", progress=False)) as ds:
        count = ds["run_plateau_clusters"].values  # (beta, run)
        start, end = ds["run_plateau_time"].values, ds["run_plateau_end"].values
        again = plateaus.first_plateau(ds["run_clusters"].values, ds["time"].values)
        np.testing.assert_array_equal(count, again[0])
        np.testing.assert_array_equal(start, again[1])
        np.testing.assert_array_equal(end, again[2])
        np.testing.assert_allclose(ds["first_plateau_clusters"].values, count.mean(axis=1),
                                   rtol=1e-12)
        np.testing.assert_array_equal(ds["p_merged_after_plateau"].values,
                                      np.isfinite(end).mean(axis=1))
        k = plateaus.most_unstable_mode(ds["beta"].values)
        assert list(k) == [3.0, 7.0]
        assert np.all((count >= k[:, None] / 2) & (count <= k[:, None] + 1)), count
        assert np.all(start > 2.0)
        mean = count.mean(axis=1)
        assert mean[1] > mean[0] + 2


@pytest.mark.slow
def test_first_plateau_count_tracks_k_star_at_256_tokens(tmp_path):
    """The shipped scenario at three betas: the mean first-plateau count is within [0.65, 1] k*
    (it sits near 0.8 k*), and at beta = 32 well below sqrt(beta log beta) (10.5)."""
    sc = _load("metastable_counts", **{"sweep.beta": [8.0, 16.0, 32.0], "ensemble.runs": 8,
                                       "integrator.horizon": 300.0})
    with dyn.open(dyn.run(sc, tmp_path / "mc.h5", progress=False)) as ds:
        mean = ds["first_plateau_clusters"].values
        k = plateaus.most_unstable_mode(ds["beta"].values)
        assert np.all((mean >= 0.65 * k) & (mean <= k)), (mean, k)
        assert np.all(np.diff(mean) > 0)
        assert mean[-1] < 0.8 * plateaus.count_scale(32.0)
        assert ds["p_first_plateau"].values.min() == 1.0
