"""The step check of ODE systems (`[integrator] check_step = true`, dyn/engine/stepcheck.py): the
first runs of a point again at half the step, from the same starts, give X_step_error, the
Richardson estimate of the step error of every simulated mean X, with the dims of X; a point is
step-limited where it exceeds X_se in any element (dyn/engine/verdicts.py). Against a known
solution (equiangular tokens and their scalar ODE), on the shipped lost_in_the_middle at
beta = 3 (RK4 past its stability limit at dt = 0.05), and where the check is refused."""

from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.core.errors import ScenarioError
from dyn.engine import scenario as scenario_mod
from dyn.engine.stepcheck import ode_check_runs
from dyn.engine.verdicts import STEP_LIMITED, count_unresolved, unresolved
from dyn.presentation.cli import main

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"

# n equiangular tokens stay equiangular; rho(t) solves a scalar ODE (rho_theory, DOP853 at
# rtol 1e-12): the error of the flow's rho is known to ~1e-12, far below the step errors here
EQUIANGULAR = """
[scenario]
name = "order"
system = "attention_sphere"
[params]
n = 4
d = 5
beta = 1.0
init = "equiangular"
rho0 = -0.2
[ensemble]
runs = 2
seed = 3
[integrator]
method = "rk4"
dt = 0.25
horizon = 4.0
[output]
saves = 8
observables = ["rho", "rho_theory"]
plot = "rho"
"""


def _run(tmp_path, name, *overrides, text=EQUIANGULAR):
    src = tmp_path / f"{name}.toml"
    src.write_text(text)
    return dyn.run(src, tmp_path / f"{name}.h5", progress=False, overrides=list(overrides))


# Richardson with the method's order p: a wrong p would be off by 2 / (16/15) = 1.9 (rk4 taken
# for order one) or 1.9 the other way (euler for order four), and (4/3) / 2 = 0.67 (heun for
# one); measured: within 1% (rk4, heun) and 9% (euler, where the error changes sign in time)
@pytest.mark.parametrize(
    "backend, method, dt",
    [
        ("numba", "rk4", 0.5),
        ("numba", "heun", 0.1),
        ("numba", "euler", 0.1),
        pytest.param("diffrax", "rk4", 0.5, marks=pytest.mark.slow),
    ],
)
def test_the_estimate_is_the_true_step_error(tmp_path, backend, method, dt):
    plain = _run(
        tmp_path, "plain", f'integrator.backend="{backend}"', f'integrator.method="{method}"', f"integrator.dt={dt}"
    )
    out = _run(
        tmp_path,
        "checked",
        f'integrator.backend="{backend}"',
        f'integrator.method="{method}"',
        f"integrator.dt={dt}",
        "integrator.check_step=true",
    )
    with dyn.open(out) as ds, dyn.open(plain) as base:
        true = np.abs(ds["rho"] - ds["rho_theory"]).values[1:]  # t = 0: the start, no error
        ratio = ds["rho_step_error"].values[1:] / true
        assert (true > 1e-6).all()  # a step error far above the reference's own
        assert ((ratio > 1 / 1.25) & (ratio < 1.25)).all(), ratio
        assert ds["rho_step_error"].dims == ds["rho"].dims
        assert float(ds["rho_step_error"][0]) == 0.0  # one start: at t = 0 nothing differs
        assert ds["rho"].attrs["dyn_step_error"] == "rho_step_error"
        # the check leaves the point's own numbers as they are, bit for bit
        for name in ("rho", "rho_se", "rho_theory"):
            assert np.array_equal(ds[name].values, base[name].values, equal_nan=True), name
        assert "rho_step_error" not in base
        assert base["rho"].attrs["dyn_step_error"].startswith("deterministic dynamics")
        # every run of an equiangular start has one rho: X_se is rounding, any step error marks
        assert bool(unresolved(ds)[STEP_LIMITED].values)


def test_one_run_is_ok_with_a_nan_standard_error(tmp_path):
    out = _run(tmp_path, "one", "ensemble.runs=1", "integrator.check_step=true")
    with dyn.open(out) as ds:
        assert int(ds["status"]) == 1
        assert np.isfinite(ds["rho_step_error"]).all()
        assert np.isnan(ds["rho_step_error_se"]).all()  # a spread needs two runs


def test_check_runs_grow_with_the_runs():
    assert [ode_check_runs(r) for r in (1, 5, 8, 32, 64, 256, 801)] == [1, 5, 8, 8, 16, 64, 201]


# lost_in_the_middle at beta = 3 (shipped: RK4, dt = 0.02, log-spaced saves), cut to 32 runs to
# t = 2 and two observables: at dt = 0.05, h lambda = beta e^beta dt = 3.0 inside tight clusters,
# past RK4's stability limit 2.8, and the sensitivities of soft_accuracy blow up there
# (measured: step error 15 times soft_accuracy_se at its worst element; on 256 runs to t = 4,
# 45 times); at dt = 0.01 the largest ratio is 0.02.
LOST = (
    "sweep.beta=[3.0]",
    "ensemble.runs=32",
    "integrator.horizon=2.0",
    "integrator.check_step=true",
    'output.observables=["alignment", "soft_accuracy"]',
)


def _lost(tmp_path, dt):
    return dyn.run(
        SCENARIOS / "lost_in_the_middle.toml",
        tmp_path / f"lost_{dt}.h5",
        progress=False,
        overrides=[*LOST, f"integrator.dt={dt}"],
    )


@pytest.mark.slow  # a physics check of a few seconds: the default tier's 3-minute budget
def test_lost_in_the_middle_is_step_limited_at_dt_0_05_not_at_0_01(tmp_path, capsys):
    coarse, fine = _lost(tmp_path, 0.05), _lost(tmp_path, 0.01)
    assert count_unresolved(coarse) == {STEP_LIMITED: 1}
    assert count_unresolved(fine) == {}
    for path, limited in ((coarse, True), (fine, False)):
        with dyn.open(path) as ds:
            assert int(ds["status"].values[0]) == 1
            err, se = ds["soft_accuracy_step_error"], ds["soft_accuracy_se"]
            assert err.dims == se.dims == ("beta", "time", "position")
            assert bool((err > se).any()) is limited
            assert float((err / se).max()) > 5 if limited else float((err / se).max()) < 0.2
            # the same starts: at t = 0 the two steps agree exactly
            assert (ds["alignment_step_error"].isel(time=0) == 0).all()
            assert bool(unresolved(ds)[STEP_LIMITED].values[0]) is limited
    capsys.readouterr()
    assert main(["show", str(coarse), "--errors"]) == 0
    text = capsys.readouterr().out
    assert "step         soft_accuracy_step_error" in text and "[ok; step-limited]" in text
    assert main(["show", str(coarse)]) == 0
    assert "soft_accuracy_step_error = " in capsys.readouterr().out


def _resolve(*overrides):
    return scenario_mod.load(SCENARIOS / "lost_in_the_middle.toml", list(overrides))


@pytest.mark.parametrize("method", ["dopri5", "bosh3"])
def test_adaptive_methods_are_refused(method):
    # an adaptive method bounds its error by rtol and atol: there is no step to halve
    doc = scenario_mod.read_file(SCENARIOS / "lost_in_the_middle.toml")
    del doc["integrator"]["dt"]
    doc["integrator"].update(method=method, check_step=True)
    with pytest.raises(ScenarioError, match="adaptive") as info:
        scenario_mod.resolve(doc)
    assert info.value.key == "integrator.check_step"
    doc["integrator"]["check_step"] = False
    scenario_mod.resolve(doc)  # the same without the check: accepted


def test_the_batched_jax_backend_is_refused():
    with pytest.raises(ScenarioError, match="numba or diffrax"):
        scenario_mod.resolve(
            scenario_mod.apply_overrides(
                scenario_mod.parse_toml(EQUIANGULAR), ['integrator.backend="jax"', "integrator.check_step=true"]
            )
        )


def test_check_step_false_leaves_the_scenario_as_it_was():
    plain = _resolve()
    assert _resolve("integrator.check_step=false").hash == plain.hash
    assert not plain.setup.check_step and _resolve("integrator.check_step=true").setup.check_step
