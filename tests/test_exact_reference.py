"""`dyn compare --reference exact`: each run of a model that declares reference(x0, <params>, t)
against the closed form from its own start, with the same distances, error bars and rates as a
comparison along an axis (tests/linear_model.py: x' = -(A + eps B) x, reference e^{-A t} x0)."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

import dyn
from dyn.presentation import comparison
from dyn.presentation.cli import main
from dyn.presentation.exact import compare_exact

SCENARIO = """
[scenario]
name = "linear"
system = "linear_model:Linear"
[sweep]
eps = [0.0, 0.01, 0.02, 0.04, 0.08]
[ensemble]
runs = 6
seed = 3
[integrator]
backend = "numba"
method = "rk4"
dt = 0.01
horizon = 1.0
[output]
saves = 4
trajectories = true
"""


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    folder = tmp_path_factory.mktemp("linear")
    shutil.copy(Path(__file__).with_name("linear_model.py"), folder / "linear_model.py")
    (folder / "linear.toml").write_text(SCENARIO)
    sys.path.insert(0, str(folder))
    out = dyn.run(folder / "linear.toml", folder / "linear.h5", progress=False, log=io.StringIO())
    yield out
    sys.path.remove(str(folder))
    sys.modules.pop("linear_model", None)


def test_each_run_is_measured_against_its_own_closed_form(linear):
    import linear_model

    result = compare_exact(linear, trust_model=True)
    with dyn.open(linear) as ds:
        traj = ds["trajectory"].values  # (eps, run, time, token, coordinate)
        times = ds["trajectory_time"].values
    # recomputed here: the largest over times and tokens of |x - e^{-(A + eps B) t} x0|
    for i, eps in enumerate([0.0, 0.01, 0.02, 0.04, 0.08]):
        x0 = traj[i, :, 0]
        flow = np.stack([x0 @ scipy.linalg.expm(-(linear_model.A + eps * linear_model.B) * t).T for t in times], axis=1)
        ref = np.stack([x0 @ scipy.linalg.expm(-linear_model.A * t).T for t in times], axis=1)
        assert np.abs(traj[i] - flow).max() <= 1e-8  # RK4 at dt = 0.01
        want = np.sqrt(((flow - ref) ** 2).sum(-1)).max(axis=(1, 2))
        np.testing.assert_allclose(result["distance"].values[i], want, rtol=1e-5, atol=1e-8)
    assert result["distance"].values[0].max() <= 1e-8  # eps = 0: the solver's error alone
    np.testing.assert_allclose(result["error"].values, np.sqrt((result["distance"].values ** 2).mean(-1)))


def test_the_rate_against_eps_is_one_with_an_interval(linear, tmp_path, capsys):
    result = compare_exact(linear, trust_model=True)
    nonzero = result.isel(eps=slice(1, None))
    rate = comparison.rates(nonzero, "eps")[()]
    assert rate.lo <= 1.0 <= rate.hi and abs(rate.slope - 1.0) < 0.05, rate
    assert main(["compare", str(linear), "--reference", "exact", "--at", "final", "--trust-model"]) == 0
    assert "error" in capsys.readouterr().out


@pytest.mark.slow  # matplotlib draws the picture (seconds)
def test_the_command_prints_the_rates_and_draws_the_error_bars(linear, tmp_path, capsys):
    picture = tmp_path / "exact.png"
    args = ["compare", str(linear), "--reference", "exact", "--against", "eps", "--out", str(picture), "--trust-model"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "rate against eps, all points" in printed and picture.stat().st_size > 10_000


def test_exact_without_a_declared_reference_is_one_line(tmp_path, capsys, small_scenario):
    out = tmp_path / "plain.h5"
    dyn.run(small_scenario, out, progress=False, log=io.StringIO(), overrides=["output.trajectories=true"])
    assert main(["compare", str(out), "--reference", "exact"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "declares no reference" in err
    assert main(["compare", str(out), "--reference", "flow"]) == 2
    assert "--along" in capsys.readouterr().err


def test_a_user_models_reference_runs_only_when_trusted(linear, capsys):
    """The reference is the model's code: without --trust-model the reader refuses in one line."""
    assert main(["compare", str(linear), "--reference", "exact"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--trust-model" in err
