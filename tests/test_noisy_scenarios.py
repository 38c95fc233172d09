"""The shipped noisy-attention scenarios on tiny settings (variables, dimensions, reproducibility,
the plots with their overlays) and their bad inputs (one line, exit status 2, no file), with
those of the engine's time-average and step settings."""

from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.presentation.cli import main
from dyn.presentation.plot import figure, plot

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
# a fixed window [0.25, 0.5] (burn_in, and a cap at the horizon: no extension); a step coarser
# than the shipped scenarios admit (step_tol raised): these check the plumbing, not the law
TINY = {
    "params.n": 16,
    "ensemble.runs": 2,
    "integrator.horizon": 0.5,
    "integrator.dt": 0.01,
    "integrator.burn_in": 0.25,
    "integrator.horizon_cap": 0.5,
    "integrator.step_tol": 0.05,
    "output.saves": 4,
}


def _run(name, tmp_path, **overrides):
    return dyn.run(SCENARIOS / f"{name}.toml", tmp_path / f"{name}.h5", progress=False, overrides={**TINY, **overrides})


@pytest.mark.slow  # two runs; noisy_phase's picture and references stay default (test_plot_labels, test_references)
def test_phase_scenario_contract_and_reproducibility(tmp_path):
    axes = {"sweep.beta": [0.5, 3.0], "sweep.sigma": [0.3, 2.0]}
    out = _run("noisy_phase", tmp_path, **axes)
    again = dyn.run(SCENARIOS / "noisy_phase.toml", tmp_path / "again.h5", progress=False, overrides={**TINY, **axes})
    with dyn.open(out) as ds, dyn.open(again) as ds2:
        assert ds["r_stationary"].dims == ("beta", "sigma")
        assert ds["r_stationary_se"].dims == ("beta", "sigma")
        assert ds["r"].dims == ("beta", "sigma", "time")
        assert ds["r_modes"].dims == ("beta", "sigma", "time", "mode")
        assert list(ds["mode"].values) == [1, 2, 3, 4, 5, 6]
        assert (ds["status"] == 1).all()
        # r_1 is r; r_stationary is the mean over runs of the window average of r
        np.testing.assert_allclose(ds["r_modes"].sel(mode=1), ds["r"], atol=1e-14)
        window = ds["r"].sel(time=slice(0.25, None)).mean("time")
        np.testing.assert_allclose(ds["r_stationary"], window, atol=1e-14)
        assert np.all((ds["r"] >= 0) & (ds["r"] <= 1))
        for var in ("r", "r_modes", "r_stationary", "r_stationary_se", "n_clusters", "energy"):
            np.testing.assert_array_equal(ds[var].values, ds2[var].values)  # same seed, same numbers
    png = plot(out, tmp_path / "phase.png")
    assert png.stat().st_size > 0
    drawn = {line.get_label(): line for line in figure(out).axes[0].lines}
    with dyn.open(out) as ds:  # sigma_c(beta) across the (beta, sigma) map, the fold from 2.45
        sigma_c = drawn[ds["sigma_critical"].attrs["dyn_label"]]
        np.testing.assert_array_equal(sigma_c.get_xdata(), ds["beta_theory"].values)
        np.testing.assert_array_equal(sigma_c.get_ydata(), ds["sigma_critical"].values)
        fold = drawn[ds["sigma_fold"].attrs["dyn_label"]]
        np.testing.assert_array_equal(fold.get_xdata(), ds["beta_fold"].values)
        assert fold.get_xdata()[0] == 2.45 and np.isfinite(fold.get_ydata()[1:]).all()


@pytest.mark.slow  # three scenarios; the hysteresis pictures (test_plot_labels) and the modes' rates stay default
def test_hysteresis_sphere_and_modes_scenarios_run(tmp_path):
    out = _run("noisy_hysteresis", tmp_path, **{"sweep.sigma": [3.0, 3.3]})
    with dyn.open(out) as ds:
        assert ds["r_stationary"].dims == ("sigma", "init")
        # at t = 0 the cluster start has r = 1, the uniform one r ~ n^{-1/2}
        assert float(ds["r"].sel(init="cluster").isel(time=0).min()) == 1.0
    assert plot(out, tmp_path / "hysteresis.png").stat().st_size > 0
    ax = figure(out).axes[0]  # one curve per start, each with its standard errors as bars
    with dyn.open(out) as ds:
        for bars, init in zip(ax.containers, ds["init"].values, strict=True):
            np.testing.assert_array_equal(bars.lines[0].get_ydata(), ds["r_stationary"].sel(init=init).values)
            assert bars.has_yerr
        assert len(ax.containers) == ds.sizes["init"]
    out = _run("noisy_sphere", tmp_path, **{"sweep.beta": [1.0], "sweep.sigma": [0.5, 1.5]})
    with dyn.open(out) as ds:
        assert "r_modes" not in ds and "mode" not in ds.dims
        assert (ds["status"] == 1).all()
    out = dyn.run(
        SCENARIOS / "mean_field_modes.toml",
        tmp_path / "modes.h5",
        progress=False,
        overrides={"params.n": 200, "ensemble.runs": 2, "sweep.beta": [1.0, 4.0], "integrator.horizon": 0.3},
    )
    with dyn.open(out) as ds:
        assert ds["growth_rate"].dims == ("beta", "mode")
        assert float(ds["growth_rate_error"].max()) < 1e-8
        np.testing.assert_allclose(ds["growth_rate"], ds["growth_rate_theory"], atol=1e-8)
        assert np.isfinite(ds["growth_rate_particles"]).all()
    assert plot(out, tmp_path / "modes.png").stat().st_size > 0
    labels = [line.get_label() for line in figure(out).axes[0].lines]
    assert labels == ["growth_rate > 0", r"closed form: $\lambda_k = 0$"]


@pytest.mark.slow  # JAX compiles; test_noisy_sde's path-by-path agreement stays default
def test_diffrax_backend_runs_the_system(tmp_path):
    out = _run("noisy_phase", tmp_path, **{"sweep.beta": [1.0], "sweep.sigma": [0.5], "integrator.backend": "diffrax"})
    with dyn.open(out) as ds:
        assert (ds["status"] == 1).all()


@pytest.mark.parametrize(
    "scenario, overrides, key",
    [
        ("noisy_phase", ["params.sigma=-1.0"], "params.sigma: must be >= 0"),
        ("noisy_phase", ["integrator.burn_in=1000.0"], "integrator.burn_in: burn_in = 1000 leaves no"),
        ("noisy_phase", ["integrator.horizon_cap=1.0"], "integrator.horizon_cap: must be >= horizon"),
        ("noisy_phase", ["integrator.step_tol=-0.01"], "integrator.step_tol: must be > 0"),
        # the engine's settings of time averages and steps (tests/test_convergence.py)
        ("equiangular", ["integrator.check_step=true"], "integrator.check_step: dopri5 is adaptive"),
        ("two_token_phase", ["integrator.burn_in=3.0"], "integrator.burn_in: system random_transformer"),
        ("noisy_phase", ["integrator.dt=0.05"], "integrator.dt: dt = 0.05 is too coarse at beta"),
        (
            "noisy_phase",
            ['integrator.backend="jax"', "integrator.check_step=true"],
            "integrator.check_step: the step check reruns runs",
        ),
        (
            "noisy_phase",
            ['output.spacing="log"', "output.t_min=0.1"],
            "output.spacing: system noisy_attention averages in time",
        ),
        ("noisy_phase", ["params.init=ring"], "params.init: must be one of uniform, cluster"),
        (
            "noisy_phase",
            ["params.drift=fourier", "params.Q=[[1.0,0.5],[0.0,1.0]]"],
            "params.drift: the Fourier drift needs Q = K = V = I",
        ),
        ("noisy_sphere", ["params.drift=fourier"], "params.drift: the Fourier drift lives on the circle"),
        ("noisy_sphere", ["params.n=20000"], "params.n: the direct drift"),
        ("mean_field_modes", ["params.beta=30.0", "params.grid=64"], "params.grid: grid 64 too coarse for beta = 30"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, scenario, overrides, key):
    out = tmp_path / "x.h5"
    argv = ["run", str(SCENARIOS / f"{scenario}.toml"), "--out", str(out), "--no-progress"]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err, err
    assert not out.exists() and not list(tmp_path.iterdir())
