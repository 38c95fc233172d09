"""What a researcher reads off a file: the settings that made it (`dyn show --errors`), per-run
values (`[output] per_run`), and censored times (the share never reached, the Kaplan-Meier
median with its distribution-free interval)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

import dyn
from dyn.core.contract import Output
from dyn.core.errors import ScenarioError
from dyn.engine.ensemble import STEP_ERROR_ATTR, error_budget
from dyn.engine.reductions import Mean, TimeToEvent, median_rank
from dyn.engine.scenario import load
from dyn.presentation.cli import main

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

OU = """
[scenario]
name = "ou"
system = "ornstein_uhlenbeck"
[params]
sigma = 1.0
x0 = 0.0
d = 2
[sweep]
theta = [1.0]
[ensemble]
runs = 4
seed = 3
[integrator]
method = "euler_maruyama"
dt = 0.1
horizon = 10.0
check_step = true
[output]
saves = 100
"""


def test_the_error_budget_of_an_sde_says_check_step_is_on_when_it_is():
    """noisy_phase with check_step: its means are not rerun (the check covers the time
    averages), and the budget says so instead of `check_step = false`."""
    scenario = load(SCENARIOS / "noisy_phase.toml", ["integrator.check_step=true"])
    budget = error_budget(scenario.system, scenario.setup)
    assert budget["r_stationary"][STEP_ERROR_ATTR] == "r_stationary_step_error"
    for name in ("r", "n_clusters", "energy"):
        text = budget[name][STEP_ERROR_ATTR]
        assert "check_step = false" not in text and "check_step = true" in text, text
    off = load(SCENARIOS / "noisy_phase.toml")
    assert "check_step = false" in error_budget(off.system, off.setup)["r"][STEP_ERROR_ATTR]


def test_show_errors_reports_the_settings_the_file_was_made_with(tmp_path, capsys):
    src = tmp_path / "ou.toml"
    src.write_text(OU)
    out = dyn.run(src, tmp_path / "ou.h5", progress=False)
    assert "longer than save intervals" not in capsys.readouterr().err  # dt = the interval
    assert main(["show", str(out), "--errors"]) == 0
    text = capsys.readouterr().out
    settings = text.split("  outputs")[0]
    assert "check_step = true" in settings and "check_step = false" not in text
    assert "runs = 4, seed = 3" in settings and 'method = "euler_maruyama"' in settings
    assert "dt_requested = 0.1, dt_used_min = 0.1, dt_used_max = 0.1" in settings
    # a step larger than the save interval (0.1): the solver steps each interval, and says so
    coarse = dyn.run(
        src, tmp_path / "coarse.h5", progress=False, overrides=["integrator.dt=0.2", "integrator.check_step=false"]
    )
    assert (
        "dyn: note: dt = 0.2 is longer than save intervals, which the solver steps whole "
        "instead: its steps are 0.1 to 0.1" in capsys.readouterr().err
    )
    assert main(["show", str(coarse), "--errors"]) == 0
    text = capsys.readouterr().out
    assert "dt_requested = 0.2, dt_used_min = 0.1, dt_used_max = 0.1" in text
    assert "check_step = false" in text.split("  outputs")[0]


# -- censored times -----------------------------------------------------------------------------


def _kaplan_meier_median(times: np.ndarray, horizon: float) -> float:
    """The product-limit estimate S(t) = prod over event times s <= t of (1 - d_s / n_s), with
    runs censored at `horizon` (NaN) at risk throughout; its median, the smallest event time
    with S <= 1/2 (NaN when S stays above 1/2 up to the horizon). Written from the definition,
    independently of the reduction's order-statistic form."""
    events = np.sort(np.unique(times[np.isfinite(times)]))
    survival = 1.0
    for s in events:
        at_risk = np.sum(np.isnan(times) | (times >= s))
        survival *= 1.0 - np.sum(times == s) / at_risk
        if survival <= 0.5 + 1e-12:
            return float(s)
    return float("nan")


def test_median_ranks_are_the_binomial_ones():
    # tables of the distribution-free interval for the median: (t_(j), t_(n+1-j))
    assert [median_rank(n) for n in (5, 6, 10, 20, 100)] == [0, 1, 2, 6, 40]
    for n in (6, 7, 30, 101, 1000):
        j = median_rank(n)
        assert binom.cdf(j - 1, n, 0.5) <= 0.025 < binom.cdf(j, n, 0.5)


def test_median_ranks_in_integers_are_scipys(monkeypatch):
    """The exact integer count up to EXACT_RANKS runs against scipy's bdtr bisected (the path
    beyond it), at every n up to 600, around the switch and at 95% and 99%."""
    from dyn.engine import reductions

    ns = [*range(1, 601), *range(reductions.EXACT_RANKS - 3, reductions.EXACT_RANKS + 1)]
    for confidence in (0.95, 0.99):
        exact = [median_rank(n, confidence) for n in ns]
        with monkeypatch.context() as patch:
            patch.setattr(reductions, "EXACT_RANKS", 0)  # scipy's path for every n
            assert [median_rank(n, confidence) for n in ns] == exact


def test_censored_times_give_the_kaplan_meier_median_its_interval_and_the_censored_share():
    rng = np.random.default_rng(5)
    horizon = 3.0
    for runs, scale in ((40, 1.0), (41, 2.5), (7, 10.0), (5, 1.0)):
        # times on a save grid (ties), censored at the horizon
        t = np.round(rng.exponential(scale, runs) * 10) / 10
        t[t > horizon] = np.nan
        out = Output("t_hit", "time to hit", "1", (), "time_to_event")
        for splits in ([], [3, runs // 2]):  # where the chunks are cut changes no bit
            part = TimeToEvent(out, runs)
            part.horizon = horizon
            for chunk in np.split(t, splits):
                part.add(chunk)
            got = part.finish()
            mean = Mean(out, runs)
            for chunk in np.split(np.where(np.isnan(t), horizon, t), splits):
                mean.add(chunk)
            want = mean.finish()
            assert got["t_hit"] == want["t_hit"] and got["t_hit_se"] == want["t_hit_se"]
        assert got["t_hit_censored"] == np.isnan(t).mean()
        np.testing.assert_equal(got["t_hit_median"], _kaplan_meier_median(t, horizon))
        j = median_rank(runs)
        ordered = np.sort(t)
        if j:
            np.testing.assert_equal(got["t_hit_median_lower"], ordered[j - 1])
            np.testing.assert_equal(got["t_hit_median_upper"], ordered[runs - j])
        else:
            assert np.isnan(got["t_hit_median_lower"]) and np.isnan(got["t_hit_median_upper"])
    # more than half censored: the median is beyond the horizon (NaN, declared)
    part = TimeToEvent(Output("t_x", "x", "1", (), "time_to_event"), 4)
    part.horizon = 1.0
    part.add(np.array([0.5, np.nan, np.nan, np.nan]))
    got = part.finish()
    assert np.isnan(got["t_x_median"]) and got["t_x_censored"] == 0.75 and got["t_x"] == 0.875
    assert all(
        o.nan_means for o in TimeToEvent.companions(Output("t_x", "x", "1", (), "time_to_event")) if "median" in o.name
    )


def test_the_median_interval_covers_the_median_95_percent_of_the_time():
    """Exponential times of median log 2, censored at T = 2: the interval of 30 runs covers
    log 2 in at least 95% of 4000 samples (the exact coverage 1 - 2 P(B <= j - 1) = 0.957),
    within 3 standard errors; the censored mean lies below the true mean 1 (its bias)."""
    rng = np.random.default_rng(11)
    samples, runs, horizon = 4000, 30, 2.0
    t = rng.exponential(1.0, (runs, samples))
    t[t > horizon] = np.nan
    part = TimeToEvent(Output("t", "t", "1", ("sample",), "time_to_event"), runs)
    part.horizon = horizon
    part.add(t)
    got = part.finish()
    lo, hi = got["t_median_lower"], got["t_median_upper"]
    covered = (lo <= np.log(2)) & (np.log(2) <= np.where(np.isnan(hi), np.inf, hi))
    exact = 1 - 2 * binom.cdf(median_rank(runs) - 1, runs, 0.5)
    assert exact >= 0.95
    assert covered.mean() >= exact - 3 * np.sqrt(exact * (1 - exact) / samples)
    assert np.median(got["t_median"]) == pytest.approx(np.log(2), abs=0.05)
    assert got["t"].mean() < 1.0 - 0.1  # E min(t, 2) = 1 - e^-2 = 0.865


# -- [output] per_run ------------------------------------------------------------------------------


def test_per_run_keeps_every_runs_values_beside_the_same_statistics(small_scenario, tmp_path):
    kept = ["time_to_one_cluster", "pair_fraction", "p_one_cluster"]
    plain = dyn.run(small_scenario, tmp_path / "plain.h5", progress=False)
    runs = dyn.run(small_scenario, tmp_path / "runs.h5", progress=False, overrides={"output.per_run": kept})
    with dyn.open(plain) as a, dyn.open(runs) as b:
        for name in a.data_vars:  # the statistics are the same, bit for bit
            if name not in ("versions", "checksum"):
                np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
        pair = b["pair_fraction_per_run"]
        assert pair.dims == ("beta", "normalization", "run", "time") and b.sizes["run"] == 6
        np.testing.assert_allclose(pair.mean("run"), b["pair_fraction"], rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(pair.std("run", ddof=1) / np.sqrt(6), b["pair_fraction_se"], rtol=1e-9, atol=1e-15)
        hit = b["p_one_cluster_per_run"]
        assert set(np.unique(hit.values)) <= {0.0, 1.0}
        np.testing.assert_array_equal(hit.sum("run"), b["n_one_cluster"])
        # censored times: NaN where never reached, T in the mean
        t = b["time_to_one_cluster_per_run"]
        assert t.dims == ("beta", "normalization", "run") and t.attrs["dyn_nan_means"]
        np.testing.assert_allclose(t.fillna(2.0).mean("run"), b["time_to_one_cluster"], rtol=1e-14)
        np.testing.assert_array_equal(t.isnull().mean("run"), b["time_to_one_cluster_censored"])
        assert float(b["time_to_one_cluster_censored"].max()) > 0  # some runs never merge by T = 2
    assert load(small_scenario, ['output.per_run=["time_to_one_cluster"]']).hash != load(small_scenario).hash
    # beside saved states of fewer runs: those get their own run dimension
    both = dyn.run(
        small_scenario,
        tmp_path / "both.h5",
        progress=False,
        overrides={
            "output.per_run": ["n_clusters"],
            "output.trajectories": True,
            "output.trajectory_runs": 2,
            "sweep.beta": [1.0],
        },
    )
    with dyn.open(both) as c:
        assert c.sizes["run"] == 6 and c.sizes["trajectory_run"] == 2
        assert c["n_clusters_per_run"].dims == ("beta", "normalization", "run", "time")


@pytest.mark.parametrize(
    "value, fragment",
    [
        ('["pair_fractoin"]', "has no output 'pair_fractoin' (did you mean 'pair_fraction'?)"),
        ("[]", "names no output"),
        ('["radius"]', "has no output 'radius'"),
    ],
)
def test_per_run_names_outputs_with_per_run_values(small_scenario, value, fragment):
    with pytest.raises(ScenarioError, match=re.escape(fragment)):
        load(small_scenario, [f"output.per_run={value}"])
    with pytest.raises(ScenarioError, match="not among output.observables"):
        load(
            small_scenario,
            ['output.per_run=["energy"]', 'output.observables=["pair_fraction"]', "output.plot=pair_fraction"],
        )
