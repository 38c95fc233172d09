"""The shipped Momentum ResNet scenarios run end to end (on reduced sweeps) and keep their contract:
axis names, variable names, and the facts they are meant to show."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import dyn

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_momentum_limit_scenario(tmp_path):
    out = dyn.run(
        SCENARIOS / "momentum_limit.toml",
        tmp_path / "limit.h5",
        progress=False,
        overrides={"sweep.depth": [32, 64, 128, 256], "sweep.eps": [0.5, 1.0]},
    )
    with dyn.open(out) as ds:
        assert set(ds["error"].dims) == {"depth", "eps", "arithmetic"}
        assert ds["arithmetic"].values.tolist() == ["float", "exact"]
        assert (ds["status"].values == 1).all()
        err = ds["error"].sel(arithmetic="float", eps=0.5).values
        slope = np.polyfit(np.log([32, 64, 128, 256]), np.log(err), 1)[0]
        assert -1.1 < slope < -0.9  # O(1/N)
        assert (ds["inversion_error"].sel(arithmetic="exact").values == 0).all()  # bit for bit
        assert (ds["inversion_error"].sel(arithmetic="float").values < 1e-12).all()
        # exact and float networks agree far below the discretization error
        assert np.allclose(ds["error"].sel(arithmetic="exact"), ds["error"].sel(arithmetic="float"), rtol=1e-6)


def test_momentum_linear_scenario(tmp_path):
    out = dyn.run(
        SCENARIOS / "momentum_linear.toml",
        tmp_path / "linear.h5",
        progress=False,
        overrides={"sweep.a": [-12.0, -4.0, -1.0, 0.5], "sweep.eps": [0.1, 1.0]},
    )
    with dyn.open(out) as ds:
        for name in ("psi_simulated", "psi_closed", "psi_network", "exp_a"):
            assert set(ds[name].dims) == {"a", "eps"}
        assert float(ds["closed_error"].max()) < 1e-8  # RK4 at dt = 1e-3 (see test_momentum)
        a = ds["a"].values[:, None] + 0 * ds["eps"].values[None, :]
        eps = 0 * ds["a"].values[:, None] + ds["eps"].values[None, :]
        psi = ds["psi_closed"].transpose("a", "eps").values
        assert np.all(a[psi < 0] < -1 / (4 * eps[psi < 0]))
        assert np.any(psi < 0)
        assert np.all(ds["exp_a"].values > 0)


def test_momentum_optimize_scenario(tmp_path):
    out = dyn.run(
        SCENARIOS / "momentum_optimize.toml",
        tmp_path / "opt.h5",
        progress=False,
        overrides={"sweep.gamma": [0.0, 0.8, 1.0]},
    )
    with dyn.open(out) as ds:
        assert ds["log10_distance"].dims == ("gamma", "iteration")
        final = ds["final_distance"].values
        assert final[1] < 1e-8 < 0.1 < final[2]  # heavy ball converges, RevNet does not
        assert final[1] < final[0]  # momentum beats plain gradient descent
        np.testing.assert_allclose(ds["rate"].values[2], 1.0, atol=1e-9)  # volume preserving
        np.testing.assert_allclose(ds["volume_factor"].values, np.array([0.0, 0.8, 1.0]) ** 10)
