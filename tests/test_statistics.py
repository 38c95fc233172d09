"""What a researcher reads off a file: the settings that made it (`dyn show --errors`), per-run
values (`[output] per_run`), and censored times (the share never reached, the Kaplan-Meier
median with its distribution-free interval)."""
from __future__ import annotations

from pathlib import Path

import dyn
from dyn.engine.ensemble import STEP_ERROR_ATTR, error_budget
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
    capsys.readouterr()
    assert main(["show", str(out), "--errors"]) == 0
    text = capsys.readouterr().out
    settings = text.split("  outputs")[0]
    assert "check_step = true" in settings and "check_step = false" not in text
    assert "runs = 4, seed = 3" in settings and 'method = "euler_maruyama"' in settings
    assert "dt_requested = 0.1, dt_used_min = 0.1, dt_used_max = 0.1" in settings
    # a step larger than the save interval (0.1): the solver steps each interval, and says so
    coarse = dyn.run(src, tmp_path / "coarse.h5", progress=False,
                     overrides=["integrator.dt=0.2", "integrator.check_step=false"])
    capsys.readouterr()
    assert main(["show", str(coarse), "--errors"]) == 0
    text = capsys.readouterr().out
    assert "dt_requested = 0.2, dt_used_min = 0.1, dt_used_max = 0.1" in text
    assert "check_step = false" in text.split("  outputs")[0]
