"""Common random numbers across chosen axes, and `dyn compare` (discrete against continuous,
run by run on saved states)."""

from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest

import dyn
from dyn.presentation import comparison
from dyn.presentation.cli import main
from test_engine import DIE_MID_WRITE, _run_cmd

FORMS = [
    "sweep.form=['flow', 'network']",
    "params.depth=8",
    "output.trajectories=true",
    "sweep.beta=[1.0, 2.0]",
    "sweep.normalization=['SA']",
]


def _states(path):
    with dyn.open(path) as ds:
        return ds["trajectory"].values.copy(), ds["pair_fraction"].values.copy()


def test_common_axes_share_starts_and_nothing_else_changes(small_scenario, tmp_path):
    shared = dyn.run(small_scenario, tmp_path / "c.h5", progress=False, overrides=FORMS + ["ensemble.common=['form']"])
    apart = dyn.run(small_scenario, tmp_path / "a.h5", progress=False, overrides=FORMS)
    with dyn.open(shared) as ds:
        x0 = ds["trajectory"].isel(trajectory_time=0)
        np.testing.assert_array_equal(x0.sel(form="flow"), x0.sel(form="network"))
        assert not np.array_equal(x0.sel(beta=1.0), x0.sel(beta=2.0))  # beta is not common
    with dyn.open(apart) as ds:
        x0 = ds["trajectory"].isel(trajectory_time=0)
        assert not np.array_equal(x0.sel(form="flow"), x0.sel(form="network"))
        # by default every point draws from its own stream: no axis is common
        first = dyn.load(small_scenario, FORMS).spec(1)
        np.testing.assert_array_equal(
            x0.isel(beta=0, normalization=0, form=1).values, dyn.attention.uniform_sphere(first.rng, 6, 5, 3)
        )


@pytest.mark.slow  # ~40 s: three executors (a dask cluster) and a kill; the default tier checks
# the common numbers themselves (test_common_axes_share_starts...) and executors and kills
# on plain sweeps (tests/test_engine.py)
def test_common_numbers_are_the_same_across_executors_and_after_a_kill(small_scenario, tmp_path):
    sets = FORMS + ["ensemble.common=['form']"]
    serial = _states(dyn.run(small_scenario, tmp_path / "s.h5", progress=False, overrides=sets))
    for executor in ("process", "dask"):
        other = _states(
            dyn.run(
                small_scenario,
                tmp_path / f"{executor}.h5",
                executor=executor,
                workers=2,
                progress=False,
                overrides=sets,
            )
        )
        for a, b in zip(serial, other, strict=True):
            np.testing.assert_array_equal(a, b)
    script = tmp_path / "die.py"
    script.write_text(DIE_MID_WRITE)
    out = tmp_path / "killed.h5"
    cmd = _run_cmd(small_scenario, out, overrides=sets)
    proc = subprocess.run([sys.executable, str(script), *cmd[3:]], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    dyn.run(small_scenario, out, progress=False, overrides=sets)  # resume
    for a, b in zip(serial, _states(out), strict=True):
        np.testing.assert_array_equal(a, b)


def test_attention_depth_limit_rate_is_minus_one(tmp_path):
    # the shipped scenario at reduced size; the post-norm network is Euler: rate -1 (measured
    # -0.96 on the full grid, where the smallest depths carry an O(1/L^2) correction)
    path = dyn.run(
        "scenarios/attention_depth_limit.toml",
        out=tmp_path / "adl.h5",
        progress=False,
        overrides={"sweep.depth": [32, 64, 128, 256], "ensemble.runs": 8},
    )
    result = dyn.compare(path, "form", "flow")
    assert result["distance"].dims == ("form", "depth", "run")
    rate = comparison.rates(result, "depth")[(("form", "network"),)]
    assert abs(rate.slope + 1.0) < 0.1, rate


@pytest.mark.slow  # long runs; test_depth_limit_matches_numba_to_rounding checks the same slope in the default tier
def test_sde_depth_limit_rate_is_one_half(tmp_path):
    # the network against itself at the finest depth, on one Brownian path refined dyadically:
    # strong order 1/2 (the rate transformer_depth_limit reports from its own EM reference)
    path = dyn.run(
        "scenarios/transformer_depth_limit.toml",
        out=tmp_path / "tdl.h5",
        progress=False,
        overrides={"sweep.depth": [8, 16, 32, 64, 128, 4096], "params.reference_depth": 4096, "ensemble.runs": 100},
    )
    result = dyn.compare(path, "depth", 4096, at="final")
    rate = comparison.rates(result, "depth")[()]
    assert abs(rate.slope + 0.5) < 0.1, rate
    with dyn.open(path) as ds:  # the system's own strong error has the same rate
        own = ds["strong_error"].sel(depth=[8, 16, 32, 64, 128])
        assert abs(comparison.fit_rate(own, "depth").slope + 0.5) < 0.1


@pytest.mark.slow  # a second compare run; `dyn plot --style paper` (the same styles module) stays default
def test_compare_draws_a_paper_figure(small_scenario, tmp_path, capsys):
    shared = dyn.run(small_scenario, tmp_path / "c.h5", progress=False, overrides=FORMS + ["ensemble.common=['form']"])
    args = ["compare", str(shared), "--along", "form", "--reference", "flow"]
    assert main(args + ["--against", "beta", "--style", "paper"]) == 0
    assert (tmp_path / "c_compare_form.pdf").read_bytes().startswith(b"%PDF")
    capsys.readouterr()
    assert main(args + ["--against", "beta", "--style", "paper", "--out", str(tmp_path / "x.png")]) == 2
    assert main(args + ["--style", "paper"]) == 2  # no curve to style
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("dyn: error: --out: --style paper writes vector pictures")
    assert err[1] == "dyn: error: --style: styles the error curve: give --against too"


@pytest.mark.slow  # several sweeps written to compare against (seconds each)
def test_compare_refuses_what_it_cannot_compare(small_scenario, tmp_path, capsys):
    shared = dyn.run(small_scenario, tmp_path / "c.h5", progress=False, overrides=FORMS + ["ensemble.common=['form']"])
    apart = dyn.run(small_scenario, tmp_path / "a.h5", progress=False, overrides=FORMS)
    plain = dyn.run(small_scenario, tmp_path / "p.h5", progress=False, overrides=["ensemble.common=['beta']"])
    capsys.readouterr()
    cases = [
        (shared, ["--along", "depth", "--reference", "8"], "--along: 'depth' is not a sweep axis"),
        (shared, ["--along", "form", "--reference", "euler"], "--reference: 'euler' is not a value"),
        (apart, ["--along", "form", "--reference", "flow"], "do not share random numbers along form"),
        (plain, ["--along", "beta", "--reference", "1.0"], "has no saved states"),
        (shared, ["--along", "form", "--reference", "flow", "--against", "form"], "not numeric"),
    ]
    for path, args, words in cases:
        assert main(["compare", str(path), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("dyn: error: ") and words in err and len(err.splitlines()) == 1
    assert (
        main(
            [
                "compare",
                str(shared),
                "--along",
                "form",
                "--reference",
                "flow",
                "--against",
                "beta",
                "--out",
                str(tmp_path / "c.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "c.png").exists() and "rate against beta" in capsys.readouterr().out


def test_per_run_outputs_keep_every_run(tmp_path):
    scenario = tmp_path / "probe.toml"
    scenario.write_text(
        '[scenario]\nname = "probe"\nsystem = "probe"\n[sweep]\nlabel = [1.0, 2.0]\n'
        '[ensemble]\nruns = 5\nseed = 3\ncommon = ["label"]\n'
    )
    with dyn.open(dyn.run(scenario, tmp_path / "p.h5", progress=False)) as ds:
        assert ds["run_draw"].dims == ("label", "run") and ds["run"].values.tolist() == [0, 1, 2, 3, 4]
        np.testing.assert_array_equal(ds["run_draw"].sel(label=1.0), ds["run_draw"].sel(label=2.0))
        assert len(np.unique(ds["run_draw"].values)) == 5  # each run its own stream


@pytest.mark.parametrize(
    "scenario, sets, dims",
    [
        (
            "sinkformer_heat",
            {"params.n": 20, "ensemble.runs": 2, "output.saves": 5, "integrator.horizon": 0.2},
            ("particle", "coordinate"),
        ),
        (
            "two_token_phase",
            {
                "sweep.beta": [3.0],
                "sweep.d": [3],
                "params.until": "horizon",
                "integrator.horizon": 20.0,
                "output.saves": 4,
                "ensemble.runs": 50,
            },
            ("angle",),
        ),
        (
            "antipodal_census",
            {
                "sweep.n": [4],
                "sweep.beta": [3.0],
                "sweep.d": [3],
                "params.until": "horizon",
                "integrator.horizon": 5.0,
                "output.saves": 5,
                "ensemble.runs": 4,
            },
            ("token", "coordinate"),
        ),
        # its reference solve compiles (~5 s); the other systems' states stay default
        pytest.param(
            "resnet_ode_limit",
            {"sweep.depth": [16], "ensemble.runs": 1, "params.inputs": 3, "output.saves": 4},
            ("input", "coordinate"),
            marks=pytest.mark.slow,
        ),
        (
            "momentum_limit",
            {
                "sweep.depth": [64],
                "sweep.eps": [0.5],
                "sweep.arithmetic": ["float"],
                "ensemble.runs": 2,
                "output.saves": 4,
            },
            ("coordinate",),
        ),
    ],
)
def test_systems_save_their_states(tmp_path, scenario, sets, dims):
    path = dyn.run(
        f"scenarios/{scenario}.toml",
        out=tmp_path / "t.h5",
        progress=False,
        overrides={**sets, "output.trajectories": True},
    )
    with dyn.open(path) as ds:
        traj = ds["trajectory"]
        assert traj.dims[-len(dims) :] == dims and np.isfinite(traj.values).all()
        assert traj.sizes["trajectory_time"] == ds.sizes["time"]
        if scenario == "two_token_phase":  # antipodal runs: |z_1 + z_2|^2 = 4 cos^2(theta/2) < e^-20
            theta = traj.isel(trajectory_time=-1).values.ravel()
            antipodal = np.log(4 * np.cos(theta / 2) ** 2) < -20
            assert np.mean(antipodal) == ds["p_antipodal"].item()
