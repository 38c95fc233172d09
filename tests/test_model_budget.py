"""A dyn.Model's error budget: a declared step_rate opens dt = "auto" and check_step, a model
without one is refused them in one line, and every model's time average runs through the
default `extend` (tests/budget_model.py: OU processes with a known stationary law)."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.core.errors import ScenarioError

SCENARIO = """
[scenario]
name = "budget"
system = "budget_model:{cls}"
[params]
d = 2
sigma = 1.0
[sweep]
theta = [1.0, 2.0]
[ensemble]
runs = 16
seed = 3
[integrator]
method = "{method}"
dt = {dt}
horizon = 10.0
{extra}
[output]
saves = 20
"""


@pytest.fixture
def here(tmp_path):
    shutil.copy(Path(__file__).with_name("budget_model.py"), tmp_path / "budget_model.py")
    yield tmp_path
    sys.modules.pop("budget_model", None)


def _write(here, cls, dt='"auto"', method="euler_maruyama", extra=""):
    path = here / f"{cls}.toml"
    path.write_text(SCENARIO.format(cls=cls, dt=dt, method=method, extra=extra))
    return path


@pytest.mark.parametrize("method", ["euler_maruyama", "stochastic_heun"])
def test_a_declared_rate_gives_auto_step_check_step_and_time_averages(here, method):
    path = _write(here, "RatedOU", method=method, extra="step_tol = 0.02\ncheck_step = true")
    out = dyn.run(path, here / "rated.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        # dt = step_tol / rate = 0.02 / (theta / 2)
        np.testing.assert_allclose(ds["dt_used"].values, [0.04, 0.02], rtol=1e-14)
        x2, se, exact = ds["x2"].values, ds["x2_se"].values, ds["x2_exact"].values
        err, err_se = ds["x2_step_error"].values, ds["x2_step_error_se"].values
    # Monte Carlo (5 standard errors: false-failure rate below 1e-6 per point) plus the bias:
    # Euler-Maruyama's relative theta h / 2 = 0.02, stochastic Heun's (theta h)^2 / 4 = 1.6e-3
    assert (np.abs(x2 - exact) <= 5 * se + 0.02 * exact).all(), (x2, exact, se)
    assert np.isfinite(err).all() and np.isfinite(err_se).all()
    if method == "euler_maruyama":  # the step error estimate: 2 (A_h - A_h/2) ~ 0.02 x2
        assert (np.abs(err - 0.02 * exact) <= 5 * err_se + 0.01 * exact).all(), (err, err_se)
    else:  # weak order 2: (theta h)^2 / 4 of x2, far below Euler-Maruyama's
        assert (err <= 5 * err_se + 0.004 * exact).all(), (err, err_se)


def test_a_model_without_a_rate_is_refused_auto_and_check_step_in_one_line(here):
    with pytest.raises(ScenarioError, match="does not choose its step.*step_rate"):
        dyn.load(_write(here, "PlainOU"))
    with pytest.raises(ScenarioError, match="integrator.check_step.*does not use it"):
        dyn.load(_write(here, "PlainOU", dt="0.02", extra="check_step = true"))


def test_every_model_time_averages_through_the_default_extend(here, capsys):
    path = _write(here, "PlainOU", dt="0.01")
    out = dyn.run(path, here / "plain.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        x2, se, exact = ds["x2"].values, ds["x2_se"].values, ds["x2_exact"].values
        horizon = ds["horizon_used"].values
    assert (np.abs(x2 - exact) <= 5 * se + 0.01 * exact).all(), (x2, exact, se)
    assert (horizon >= 10.0).all()
    # the error budget suggests only what the model accepts
    from dyn.presentation.analysis import error_report

    text = error_report(out)
    assert "check_step = false" not in text
    assert "does not take integrator.check_step" in text


def test_the_guides_example_declares_only_a_rate(tmp_path):
    """examples/your_own_dynamics/kuramoto.toml: dt = "auto", check_step and a time average, from
    the model's step_rate alone (the dt each point takes: step_tol / (2 K))."""
    folder = Path(__file__).resolve().parent.parent / "examples" / "your_own_dynamics"
    for name in ("noisy_kuramoto.py", "kuramoto.toml"):
        shutil.copy(folder / name, tmp_path / name)
    try:
        scenario = dyn.load(tmp_path / "kuramoto.toml")
        assert scenario.integrator["check_step"] is True
        dts = [scenario.spec(i).dt for i in range(scenario.count)]
    finally:
        sys.modules.pop("noisy_kuramoto", None)
    np.testing.assert_allclose(dts, [0.02 / (2 * k) for k in (0.5, 2.0, 3.0)], rtol=1e-14)
