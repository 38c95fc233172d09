"""A number is only an answer when it has converged: time averages until stationary (window,
effective sample size, stationarity tests), the step check against a known Euler-Maruyama bias,
dt = "auto", and the error budget in the file, in `dyn show --errors`, in plots and in `dyn run`."""

import math
from pathlib import Path

import numpy as np
import pytest

import dyn
import integrators
from dyn.engine import stationarity
from dyn.engine.verdicts import NONSTATIONARY, unresolved
from dyn.noisy import sigma_critical
from dyn.presentation.analysis import marks_for
from dyn.presentation.cli import main
from dyn.systems.ornstein_uhlenbeck import ou_problem

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

OU = """
[scenario]
name = "ou"
system = "ornstein_uhlenbeck"
[params]
sigma = 1.0
x0 = 3.0
d = 4
[sweep]
theta = [0.5, 1.0]
[ensemble]
runs = 8
seed = 7
[integrator]
method = "euler_maruyama"
dt = 0.1
horizon = 20.0
step_tol = 0.05
[output]
saves = 200
"""


def _ou(tmp_path, *overrides, text=OU, name="ou"):
    src = tmp_path / f"{name}.toml"
    src.write_text(text)
    return dyn.run(src, tmp_path / f"{name}.h5", progress=False, overrides=list(overrides))


def _ar1(rng, runs, n, phi):
    """Stationary AR(1) runs of unit innovation variance: tau_int = (1 + phi) / (2 (1 - phi))."""
    e = rng.standard_normal((runs, n))
    x = np.empty((runs, n))
    x[:, 0] = e[:, 0] / math.sqrt(1 - phi**2)
    for k in range(1, n):
        x[:, k] = phi * x[:, k - 1] + e[:, k]
    return x


@pytest.mark.parametrize("runs", [1, 8])
def test_standard_error_uses_the_effective_sample_size(runs):
    # AR(1), phi = 0.9: Var(mean of N) = (1/(1-phi^2)) (1+phi)/(1-phi) / N per run, 19 times the
    # naive variance/N; the estimate must find tau = 9.5 and that error, not the naive one
    rng = np.random.default_rng(3)
    phi, n = 0.9, 20_000
    tau_exact = (1 + phi) / (2 * (1 - phi))
    se_exact = math.sqrt((1 / (1 - phi**2)) * 2 * tau_exact / n / runs)
    found = [stationarity.assess(_ar1(rng, runs, n, phi), 0) for _ in range(12)]
    ratio = np.mean([s.se for s in found]) / se_exact
    # the se is the larger of the within-run and across-run estimates: a little above 1 on average
    assert 0.85 < ratio < 1.25, ratio
    assert abs(np.mean([s.tau for s in found]) / tau_exact - 1) < 0.1
    naive = math.sqrt(1 / (1 - phi**2) / (n * runs))
    assert np.mean([s.se for s in found]) > 3.5 * naive  # sqrt(19) = 4.4 times the naive error
    assert np.mean([s.ess for s in found]) == pytest.approx(runs * n / (2 * tau_exact), rel=0.1)
    assert all(s.stationary for s in found)


def test_a_slowly_drifting_series_is_not_stationary():
    rng = np.random.default_rng(4)
    y = _ar1(rng, 4, 4000, 0.9) + np.linspace(0.0, 1.5, 4000)  # a drift of 1.5 sd over the run
    s = stationarity.assess(y)
    assert not s.stationary and s.drifting
    assert stationarity.assess(_ar1(rng, 4, 4000, 0.9)).stationary  # the same without the drift


def test_burn_in_skips_the_transient_and_stuck_runs_fail_mixing():
    rng = np.random.default_rng(5)
    k = np.arange(4000)
    y = 0.1 * _ar1(rng, 4, 4000, 0.5) + np.where(k < 800, -3.0 + 3.0 * k / 800, 0.0)
    s = stationarity.assess(y)
    # the ramp ends at 800; MSER may cut a few batches of 5 later (it trades the residual bias
    # of the first samples against their count), never most of the window
    assert 760 <= s.start <= 900 and s.stationary
    # runs frozen at different levels (metastable states): each flat, together inconsistent
    stuck = 0.01 * _ar1(rng, 4, 4000, 0.5) + np.array([0.2, 0.5, 0.5, 0.8])[:, None]
    s = stationarity.assess(stuck)
    assert not s.stationary and s.unmixed and not s.drifting
    assert s.mixing_ratio > 1 >= stationarity.assess(_ar1(rng, 4, 4000, 0.5)).mixing_ratio


def test_refined_increments_follow_the_same_brownian_path():
    # pure noise (theta = 0): a step h with refine = 2 sums the two half-step increments, so it
    # lands exactly where two steps of h/2 land
    problem = ou_problem(0.0, 1.0, 3)
    x0 = np.zeros((5, 1, 3))
    ts = np.linspace(0.0, 1.0, 5)
    coarse = (
        integrators.get("numba", "euler_maruyama", dt=0.01, refine=2)
        .solve(problem, x0, ts, rng=np.random.default_rng(9))
        .states
    )
    fine = (
        integrators.get("numba", "euler_maruyama", dt=0.005).solve(problem, x0, ts, rng=np.random.default_rng(9)).states
    )
    np.testing.assert_allclose(coarse, fine, atol=1e-12)
    other = (
        integrators.get("numba", "euler_maruyama", dt=0.005)
        .solve(problem, x0, ts, rng=np.random.default_rng(10))
        .states
    )
    assert np.abs(other - fine).max() > 0.1


def test_ou_time_average_and_step_check_against_the_exact_bias(tmp_path):
    out = _ou(tmp_path, "integrator.check_step=true")
    with dyn.open(out) as ds:
        assert (ds["stationary"] == 1).all()
        # the window skips the decay from x0 = 3 (relaxation time of x^2: 1 / (2 theta))
        assert (ds["burn_in_used"] * 2 * ds["theta"] > 1.0).all()
        # the time average is Euler-Maruyama's stationary law, within 4 standard errors
        assert (abs(ds["x2"] - ds["x2_euler"]) < 4 * ds["x2_se"]).all()
        # the step check finds the known bias x2_euler - x2_exact ~ theta h / 2 within a factor 2
        bias = ds["x2_euler"] - ds["x2_exact"]
        ratio = ds["x2_step_error"] / bias
        assert ((ratio > 0.5) & (ratio < 2.0)).all(), ratio.values
        assert (ds["x2_step_error_se"] < 0.5 * bias).all()


def test_dt_auto_is_step_tol_over_the_rate(tmp_path):
    out = _ou(tmp_path, 'integrator.dt="auto"', "integrator.step_tol=0.01")
    with dyn.open(out) as ds:
        # OU: rate theta / 2 (relative bias theta h / 2)
        np.testing.assert_allclose(ds["dt_used"], 0.01 / (ds["theta"] / 2))
        assert ds["x2"].attrs["dyn_step_error"].startswith("not checked")


def test_a_drifting_point_is_extended_to_the_cap_then_marked_everywhere(tmp_path, capsys):
    # theta = 0.01 from x0 = 10: x^2 decays over ~50 time units, far beyond the cap 8
    out = _ou(
        tmp_path,
        "sweep.theta=[0.01, 2.0]",
        "params.x0=10.0",
        "integrator.horizon=4.0",
        "integrator.horizon_cap=8.0",
        "output.saves=40",
        "integrator.dt=0.01",
    )
    log = capsys.readouterr().err
    with dyn.open(out) as ds:
        slow, fast = ds.sel(theta=0.01), ds.sel(theta=2.0)
        assert float(slow["stationary"]) == 0 and float(slow["horizon_used"]) == 8.0
        assert float(fast["stationary"]) == 1 and float(fast["horizon_used"]) == 4.0
        assert 0 <= float(fast["x2_mixing"]) <= 1  # its runs agree: the verdict is in the file
        # a trend over the whole window reads as one long correlation: too few effective samples
        assert float(slow["x2_ess"]) / 8 < stationarity.MIN_EFFECTIVE
        assert list(unresolved(ds)[NONSTATIONARY].values) == [True, False]
        assert NONSTATIONARY in marks_for(ds, "x2")
        assert NONSTATIONARY not in marks_for(ds, "x2_exact")
    assert "1 points are non-stationary" in log
    assert main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "non-stationary 1 points" in text and "theta = 0.01" in text
    assert main(["show", str(out), "--errors"]) == 0
    text = capsys.readouterr().out
    assert "theta = 0.01  [ok; non-stationary]" in text and "theta = 2  [ok]" in text
    assert "x2_se (from the effective sample size x2_ess)" in text


@pytest.mark.slow  # a process pool; pools keep the numbers in the default tier's test_engine executors test
def test_same_numbers_through_every_executor(tmp_path):
    serial = _ou(tmp_path, "integrator.horizon=5.0", "output.saves=50", "integrator.dt=0.05")
    pooled = dyn.run(
        tmp_path / "ou.toml",
        tmp_path / "pooled.h5",
        progress=False,
        executor="process",
        workers=2,
        overrides=["integrator.horizon=5.0", "output.saves=50", "integrator.dt=0.05"],
    )
    with dyn.open(serial) as a, dyn.open(pooled) as b:
        assert float(a["horizon_used"].max()) > 5.0  # the runs were extended
        for name in ("x2", "x2_se", "burn_in_used", "horizon_used", "stationary"):
            np.testing.assert_array_equal(a[name].values, b[name].values)


def test_a_coarse_fixed_step_is_refused_and_auto_accepted():
    # noisy_hysteresis at beta = 8, sigma = 10.7 with dt = 0.001: sigma^2 dt = 0.11, a
    # step-size artefact (r_stationary 0.82 instead of 0.89); refused, dt = "auto" accepted
    base = ["params.beta=8.0", "sweep.sigma=[10.7]"]
    with pytest.raises(dyn.ScenarioError, match="integrator.dt: dt = 0.001 is too coarse at sigma = 10.7"):
        dyn.load(SCENARIOS / "noisy_hysteresis.toml", base)
    sc = dyn.load(SCENARIOS / "noisy_hysteresis.toml", base + ['integrator.dt="auto"'])
    spec = sc.spec(0)
    assert spec.dt * 2 * 10.7**2 == pytest.approx(0.01)  # step_tol / (2 sigma^2) on the circle


@pytest.mark.slow
@pytest.mark.parametrize("beta", [1.0, 2.0])
def test_noisy_phase_as_shipped_agrees_with_a_run_five_times_longer(tmp_path, beta):
    sigma = 0.85 * float(sigma_critical(beta, 2, "USA"))
    point = {"sweep.beta": [beta], "sweep.sigma": [sigma]}
    sc = dyn.load(SCENARIOS / "noisy_phase.toml")
    horizon, cap = sc.integrator["horizon"], sc.integrator["horizon_cap"]
    shipped = dyn.run(SCENARIOS / "noisy_phase.toml", tmp_path / "a.h5", progress=False, overrides=point)
    longer = dyn.run(
        SCENARIOS / "noisy_phase.toml",
        tmp_path / "b.h5",
        progress=False,
        overrides={**point, "integrator.horizon": 5 * horizon, "integrator.horizon_cap": 5 * cap},
    )
    with dyn.open(shipped) as a, dyn.open(longer) as b:
        a, b = a.squeeze(), b.squeeze()
        assert float(a["stationary"]) == 1
        diff = float(a["r_stationary"] - b["r_stationary"])
        assert abs(diff) < 3 * math.hypot(float(a["r_stationary_se"]), float(b["r_stationary_se"]))
