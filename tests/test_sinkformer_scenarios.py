"""The shipped Sinkformer scenarios: variables and dimensions (a contract), run on tiny settings."""

import tomllib
from pathlib import Path

import numpy as np

import dyn

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_heat_scenario_contract(tmp_path):
    out = dyn.run(
        SCENARIOS / "sinkformer_heat.toml",
        tmp_path / "h.h5",
        progress=False,
        overrides={
            "params.n": 40,
            "params.tau": 0.3,
            "output.saves": 4,
            "integrator.horizon": 0.2,
            "integrator.dt": 0.05,
            "ensemble.runs": 1,
        },
    )
    with dyn.open(out) as ds:
        params = tomllib.loads(ds.attrs["scenario"])["params"]  # the resolved scenario
        assert {"alpha", "tau", "s0", "n", "d"} <= set(params)
        assert params["n"] == 40 and params["tau"] == 0.3  # the overrides, as run
        assert ds["variance"].dims == ("normalization", "time")
        assert list(ds["normalization"].values) == ["sinkhorn", "softmax"]
        assert np.isfinite(ds["variance"].values).all()
        from dyn.presentation.plot import plot

        png = plot(out, tmp_path / "h.png")
        assert png.stat().st_size > 0
        from dyn.presentation.plot import figure

        (heat,) = [line for line in figure(out).axes[0].lines if line.get_label().startswith("heat")]
        np.testing.assert_allclose(heat.get_ydata(), 1.0 + ds["time"].values)  # s0^2 + 2 alpha t


def test_energy_and_iterations_scenarios_run(tmp_path):
    out = dyn.run(
        SCENARIOS / "sinkformer_energy.toml",
        tmp_path / "e.h5",
        progress=False,
        overrides={
            "params.n": 10,
            "output.saves": 3,
            "integrator.horizon": 0.3,
            "integrator.dt": 0.05,
            "ensemble.runs": 1,
        },
    )
    with dyn.open(out) as ds:
        assert ds["energy"].dims == ("normalization", "time")
        assert np.all(np.diff(ds["energy"].sel(normalization="sinkhorn").values) < 0)
    out = dyn.run(
        SCENARIOS / "sinkhorn_iterations.toml",
        tmp_path / "i.h5",
        progress=False,
        overrides={"params.n": 20, "params.iterations": 5, "ensemble.runs": 1, "sweep.tau": [0.1, 1.0]},
    )
    with dyn.open(out) as ds:
        err = ds["marginal_error"]
        assert err.dims == ("scores", "tau", "iteration")
        # the sup-norm marginal error need not decrease at every step (only the L1 one must),
        # but five normalizations do reduce it
        assert np.all(err.values[..., -1] < err.values[..., 0])
