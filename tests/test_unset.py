"""Settings the command line can escape: `--unset TABLE.KEY` removes what the file sets, and a
new method drops the file's solver options it does not take, saying which. The steps actually
taken are in the file (dt_requested, dt_used_min, dt_used_max: test_statistics and
test_reliability_results)."""

from __future__ import annotations

import pytest

import dyn
from dyn.core.errors import ScenarioError
from dyn.engine.scenario import apply_overrides, load, read_file
from dyn.presentation.cli import main


def test_unset_removes_a_key_which_then_takes_its_default(small_scenario):
    assert load(small_scenario).integrator["dt"] == 0.1
    scenario = load(small_scenario, ["integrator.method=dopri5"], unset=["integrator.dt"])
    assert "dt" not in scenario.integrator and scenario.integrator["method"] == "dopri5"
    # a swept axis unset takes the parameter's default; several keys at once
    swept = load(small_scenario, unset=["sweep.beta", "params.delta"])
    assert "beta" not in swept.axes and swept.params["beta"] == 1.0
    assert swept.params["delta"] == swept.system.params["delta"].default != 0.01
    # unset first, then --set: the key comes back with the new value
    again = load(small_scenario, ["integrator.dt=0.05"], unset=["integrator.dt"])
    assert again.integrator["dt"] == 0.05


@pytest.mark.parametrize(
    "key, fragment",
    [
        (
            "integrator.dtt",
            "integrator.dtt: --unset names a key the scenario does not set (it sets "
            "integrator.backend, integrator.method, integrator.dt, integrator.horizon)",
        ),
        ("bogus", "--unset: keys are TABLE.KEY"),
        ("nosuch.key", "(it has no [nosuch] table)"),
    ],
)
def test_unsetting_what_the_file_does_not_set_is_one_line_exit_2(tmp_path, capsys, small_scenario, key, fragment):
    out = tmp_path / "never.h5"
    assert main(["run", str(small_scenario), "--out", str(out), "--unset", key]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1 and not out.exists()


def test_a_new_method_drops_the_files_options_it_does_not_take_and_says_which(small_scenario, capsys):
    doc = read_file(small_scenario)
    changed = apply_overrides(doc, ["integrator.method=dopri5", "integrator.rtol=1e-8"])
    assert "dt" not in changed["integrator"] and doc["integrator"]["dt"] == 0.1  # a copy
    err = capsys.readouterr().err
    assert err.strip() == (
        "dyn: note: integrator.dt = 0.1 dropped: numba/dopri5 does not take it "
        "(of dt, rtol, atol, max_steps it takes rtol, atol, max_steps)"
    )
    # back to a fixed step: the tolerances go, the step stays
    adaptive = {**doc, "integrator": {"method": "dopri5", "rtol": 1e-6, "atol": 1e-9, "horizon": 2.0}}
    fixed = apply_overrides(adaptive, ["integrator.method=rk4"])
    assert set(fixed["integrator"]) == {"method", "horizon"}
    assert capsys.readouterr().err.count("dropped") == 2
    # a method the file already has drops nothing; a dt given on the command line is not
    # dropped but refused, as any option the method does not take
    assert apply_overrides(doc, ["integrator.method=rk4"])["integrator"]["dt"] == 0.1
    assert capsys.readouterr().err == ""
    with pytest.raises(ScenarioError, match="integrator.dt: not an option of numba/dopri5"):
        load(small_scenario, ["integrator.method=dopri5", "integrator.dt=0.1"])


def test_run_with_unset_and_a_new_method_records_what_it_ran(tmp_path, small_scenario, capsys):
    """`--set integrator.method=dopri5` on a file with dt: with --unset, and without (the
    dropped key is named); both runs hold the same numbers and neither file keeps a dt."""
    out = tmp_path / "unset.h5"
    args = [
        "run",
        str(small_scenario),
        "--no-progress",
        "--set",
        "integrator.method=dopri5",
        "--set",
        "integrator.rtol=1e-8",
        "--set",
        "sweep.beta=[1.0]",
    ]
    assert main([*args, "--out", str(out), "--unset", "integrator.dt"]) == 0
    assert "dropped" not in capsys.readouterr().err
    assert main([*args, "--out", str(tmp_path / "dropped.h5")]) == 0
    assert "integrator.dt = 0.1 dropped" in capsys.readouterr().err
    with dyn.open(out) as a, dyn.open(tmp_path / "dropped.h5") as b:
        assert 'method = "dopri5"' in a.attrs["scenario"] and "dt =" not in a.attrs["scenario"]
        assert a.attrs["scenario_hash"] == b.attrs["scenario_hash"]
        assert "dt_used_max" not in a.attrs  # an adaptive method: no fixed step to record
        assert (a["pair_fraction"].values == b["pair_fraction"].values).all()
    # dyn.run takes the same keys
    path = dyn.run(
        small_scenario,
        tmp_path / "api.h5",
        progress=False,
        unset=["integrator.dt"],
        overrides=["integrator.method=dopri5", "integrator.rtol=1e-8", "sweep.beta=[1.0]"],
    )
    with dyn.open(path) as c, dyn.open(out) as a:
        assert (c["pair_fraction"].values == a["pair_fraction"].values).all()


def test_bad_input_after_a_dropped_key_is_still_one_line(tmp_path, capsys, small_scenario):
    out = tmp_path / "never.h5"
    assert (
        main(
            [
                "run",
                str(small_scenario),
                "--out",
                str(out),
                "--set",
                "integrator.method=dopri5",
                "--set",
                "integrator.rtol=-0.01",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == "dyn: error: integrator.rtol: must be > 0, got -0.01" and not out.exists()
    assert (
        main(["run", str(small_scenario), "--out", str(out), "--set", "integrator.method=dopri5", "--workers", "0"])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith("dyn: error: --workers") and len(err.splitlines()) == 1
