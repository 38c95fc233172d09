"""The integrator's step as a sweep axis (`[sweep] dt`, `[sweep] method`), one Brownian path
shared by every step with `[ensemble] common = ["dt"]`, and the weak error of `dyn compare
--observable` (a bias paired run by run, fitted against dt)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import dyn
from dyn.core.errors import ScenarioError
from dyn.presentation import comparison
from dyn.presentation.bias import compare_bias, paired_bias
from dyn.presentation.cli import main

ROOT = Path(__file__).resolve().parents[1]

OU = """
[scenario]
name = "ou_steps"
system = "ornstein_uhlenbeck"

[params]
theta = 1.0

[sweep]
sigma = [1.0]
dt = [0.2, 0.1, 0.05]

[ensemble]
runs = 4
seed = 3
common = ["dt"]

[integrator]
backend = "numba"
method = "euler_maruyama"
horizon = 2.0
horizon_cap = 2.0
burn_in = 0.5

[output]
saves = 10
per_run = ["x2"]
"""


def _ou(tmp_path, text=OU) -> Path:
    path = tmp_path / "ou.toml"
    path.write_text(text)
    return path


def test_a_step_axis_sets_each_points_step_method_and_refine(tmp_path):
    text = OU.replace('method = "euler_maruyama"\n', "").replace(
        "[sweep]\n", '[sweep]\nmethod = ["euler_maruyama", "stochastic_heun"]\n'
    )
    scenario = dyn.load(_ou(tmp_path, text), ['ensemble.common=["dt", "method"]'])
    solvers = [scenario.spec(i).solver for i in range(scenario.count)]
    assert [(s.method, s.options["dt"], s.options["refine"]) for s in solvers] == [
        (m, dt, r) for m in ("euler_maruyama", "stochastic_heun") for dt, r in ((0.2, 4), (0.1, 2), (0.05, 1))
    ]
    spec = scenario.spec(0)
    assert "dt" not in spec.values and "method" not in spec.values and spec.dt == 0.2
    assert len({scenario.spec(i).stream for i in range(scenario.count)}) == 1  # one stream for all
    # not common: each point its own stream, no refine
    apart = dyn.load(_ou(tmp_path), ["ensemble.common=[]"])
    assert "refine" not in apart.spec(0).solver.options and apart.spec(0).stream != apart.spec(1).stream


@pytest.mark.parametrize(
    "sets, fragment",
    [
        (["sweep.dt=[0.2, 0.15]"], "sweep.dt: with dt in ensemble.common, dt = 0.2 is not an integer multiple"),
        (["integrator.dt=0.1"], "integrator.dt: dt is both set in [integrator] and swept in [sweep]"),
        (["output.saves=8"], "the save interval 0.25 must hold whole steps of every dt (dt = 0.2 does not)"),
        (['output.spacing="log"', "output.t_min=0.1"], "a common dt needs save times evenly spaced"),
        (["integrator.backend=diffrax"], "has no option refine (use backend numba)"),
    ],
)
def test_a_step_axis_refuses_what_it_cannot_share(tmp_path, sets, fragment):
    with pytest.raises(ScenarioError, match=re.escape(fragment)):
        dyn.load(_ou(tmp_path), sets)


def test_a_step_axis_needs_a_fixed_step_and_a_system_that_reads_it(small_scenario, capsys):
    with pytest.raises(ScenarioError, match=re.escape("sweep.dt: numba/dopri5 has no fixed step to sweep")):
        dyn.load(small_scenario, ["sweep.dt=[0.1, 0.05]", "integrator.method=dopri5"], unset=["integrator.dt"])
    doc = ROOT / "scenarios" / "transformer_depth_limit.toml"
    assert main(["run", str(doc), "--set", "sweep.dt=[0.1, 0.05]", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sweep.dt: system transformer_depth_limit does not read integrator.dt" in err[0], err


def test_every_step_follows_one_start_and_one_brownian_path(tmp_path):
    """Kuramoto at K = 0 (no drift, additive noise): every scheme at every step is the sum of the
    same increments from the same drawn start, so each run's time average agrees to rounding."""
    folder = ROOT / "examples" / "your_own_dynamics"
    for name in ("noisy_kuramoto.py", "kuramoto_bias.toml"):
        shutil.copy(folder / name, tmp_path / name)
    sets = {
        "params.K": 0.0,
        "params.n": 4,
        "sweep.dt": [0.4, 0.2, 0.1],
        "ensemble.runs": 3,
        "integrator.horizon": 0.8,
        "integrator.horizon_cap": 0.8,
        "integrator.burn_in": 0.0,
        "output.saves": 2,
    }
    out = dyn.run(tmp_path / "kuramoto_bias.toml", tmp_path / "k.h5", progress=False, overrides=sets)
    with dyn.open(out) as ds:
        v = ds["r_stationary_per_run"].transpose("method", "dt", "run").values
    assert np.ptp(v[:, :, 0]) > 0 or np.ptp(v[0, 0]) > 0  # the runs differ from each other
    np.testing.assert_allclose(v, np.broadcast_to(v[0, -1], v.shape), rtol=0, atol=1e-12)


def _synthetic(p_of, c_of, noise):
    """Per-run values v[method, dt, run] = a_r + c_m dt^p_m + noise_r dt, the reference at
    (stochastic_heun, 0.0125) having c dt^p too: the bias is c_m dt^p_m - c_ref 0.0125^p_ref."""
    dts = np.array([0.4, 0.2, 0.1, 0.05, 0.0125])
    methods = list(p_of)
    start = np.array([0.3, 0.5, 0.7, 0.9])
    v = np.array([[start + c_of[m] * h ** p_of[m] + noise * h for h in dts] for m in methods])
    coords = {"method": methods, "dt": dts, "run": np.arange(start.size)}
    values = xr.DataArray(v, dims=("method", "dt", "run"), coords=coords)
    status = xr.DataArray(np.ones((len(methods), dts.size), np.int8), dims=("method", "dt"))
    return values, status.assign_coords(method=methods, dt=dts)


def test_the_bias_is_the_mean_of_the_paired_differences_and_its_slope_the_order():
    p_of, c_of = {"euler_maruyama": 1.0, "stochastic_heun": 2.0}, {"euler_maruyama": -0.02, "stochastic_heun": 0.01}
    noise = np.array([1.0, -1.0, 2.0, -2.0]) * 1e-6  # mean 0: the bias is exact, its spread known
    values, status = _synthetic(p_of, c_of, noise)
    result = paired_bias(values, status, {"method": 1, "dt": 4})
    dts = values["dt"].values
    ref = 0.01 * 0.0125**2
    for m, method in enumerate(p_of):
        want = c_of[method] * dts ** p_of[method] - ref
        got = result["bias"].isel(method=m).values
        se = result["bias_se"].isel(method=m).values
        if method == "stochastic_heun":  # the reference itself: no pair
            assert np.isnan(got[-1]) and result["runs"].isel(method=m, dt=-1) == 0
            want, got, se = want[:-1], got[:-1], se[:-1]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-15)
        spread = np.std(noise[:, None] * (dts[: got.size] - 0.0125), axis=0, ddof=1) / 2
        np.testing.assert_allclose(se, spread, rtol=1e-6, atol=1e-15)
    result.attrs.update(along="dt", reference="0.0125")
    rates = comparison.rates(result, "dt")
    for method, bias in (
        ("stochastic_heun", 0.01 * (dts[:-1] ** 2 - 0.0125**2)),  # the reference's own bias bends it
        ("euler_maruyama", np.abs(-0.02 * dts - ref)),
    ):
        h = dts[: bias.size]
        want = np.polyfit(np.log(h), np.log(bias), 1)[0]
        assert rates[(("method", method),)].slope == pytest.approx(want, rel=1e-6)
        assert abs(want - p_of[method]) < 0.05
    # the asymptotic fit takes the points nearest to the reference's step, among those with a bias
    tail = comparison.asymptotic_rates(result, "dt")
    np.testing.assert_array_equal(tail[(("method", "stochastic_heun"),)][1], [0.05, 0.1, 0.2])
    np.testing.assert_array_equal(tail[(("method", "euler_maruyama"),)][1], [0.0125, 0.05, 0.1])
    # a failed point has no pair; a window that differs is refused
    status[0, 1] = 3
    assert np.isnan(paired_bias(values, status, {"method": 1, "dt": 4})["bias"][0, 1])
    window = xr.DataArray(np.zeros((2, 5)), dims=("method", "dt"), coords=status.coords)
    window[0, 0] = 1.0
    with pytest.raises(ScenarioError, match="different windows"):
        paired_bias(values, status, {"method": 1, "dt": 4}, {"burn_in_used": window})
    # fixed along dt alone, each method is paired with its own finest step, windows per method
    status[0, 1] = 1
    own = paired_bias(values, status, {"dt": 4}, {"burn_in_used": xr.zeros_like(window)})
    for m, method in enumerate(p_of):
        want = c_of[method] * (dts[:-1] ** p_of[method] - 0.0125 ** p_of[method])
        np.testing.assert_allclose(own["bias"].isel(method=m).values[:-1], want, rtol=1e-9, atol=1e-15)
    with pytest.raises(ScenarioError, match="different windows"):
        paired_bias(values, status, {"dt": 4}, {"burn_in_used": window})


@pytest.fixture(scope="module")
def ou_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ou")
    return dyn.run(_ou(folder), folder / "ou.h5", progress=False)


def test_compare_reads_each_runs_time_average_and_pairs_them(ou_file, capsys):
    with dyn.open(ou_file) as ds:
        v = ds["x2_per_run"].isel(sigma=0).transpose("dt", "run").values
        mean = ds["x2"].isel(sigma=0).values
    np.testing.assert_allclose(v.mean(axis=1), mean, rtol=1e-12)  # X is the mean of X_per_run
    result = compare_bias(ou_file, "dt", "0.05", "x2")
    diff = v - v[-1]
    np.testing.assert_allclose(result["bias"].isel(sigma=0).values[:2], diff[:2].mean(axis=1), rtol=1e-12)
    se = diff[:2].std(axis=1, ddof=1) / 2
    np.testing.assert_allclose(result["bias_se"].isel(sigma=0).values[:2], se, rtol=1e-12)
    assert comparison.rate_lines(result, "dt")[0].startswith("rate of the |bias| against dt (sigma = 1.0)")
    # the command prints the table (its picture, with --against, is drawn in tests/test_sde_bias.py)
    assert main(["compare", str(ou_file), "--observable", "x2", "--along", "dt", "--reference", "0.05"]) == 0
    assert "bias_se" in capsys.readouterr().out


@pytest.mark.parametrize(
    "reference, at, observable, fragment",
    [
        ("0.05", {}, "x3", "--observable: "),
        ("0.05", {}, "x2_exact", "keeps no per-run values of x2_exact: rerun with --set 'output.per_run"),
        ("0.3", {}, "x2", "--reference: '0.3' is not a value of dt"),
        ("0.05", {"theta": "1.0"}, "x2", "--reference-at: 'theta' is not a sweep axis"),
        ("0.05", {"sigma": "1.0"}, "x2", "do not share random numbers along sigma"),
    ],
)
def test_compare_refuses_a_bias_it_cannot_pair(ou_file, reference, at, observable, fragment):
    with pytest.raises(ScenarioError, match=re.escape(fragment)):
        compare_bias(ou_file, "dt", reference, observable, at)


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--observable", "x3"], "--observable: "),
        (["--observable", "x2", "--reference-at", "sigma"], "takes AXIS=VALUE"),
        (["--observable", "x2", "--at", "final"], "--at: chooses a distance between paths"),
        (["--reference-at", "sigma=1.0"], "--reference-at: places the reference of a bias: give --observable"),
    ],
)
def test_compare_refuses_a_bias_in_one_line(ou_file, capsys, extra, fragment):
    assert main(["compare", str(ou_file), "--along", "dt", "--reference", "0.05", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
