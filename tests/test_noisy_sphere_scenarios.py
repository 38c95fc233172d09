"""Noisy attention on S^2 and S^3 (issue 22, item 3): the noise in units of sigma_c
(`sigma_over_sigma_c`), the shipped scenarios `noisy_hysteresis_sphere` and `transition_order`
(they load; their references are those of dyn.noisy.branches; tiny runs keep the qualitative
law; `dyn plot` draws the particles against the mean field with the right labels), and the
branches and fold of the plain `sigma` axis for d >= 3."""

from pathlib import Path

import h5py
import numpy as np
import pytest

import dyn
from dyn import noisy
from dyn.engine import scenario as scenario_mod, store
from dyn.presentation.cli import main
from dyn.presentation.plot import figure
from dyn.systems.noisy_attention import clustered_r, noise_of

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
RATIO_LABEL = "noise in units of sigma_c(beta, d): sigma / sigma_c"
# a fixed window (burn_in, and a cap at the horizon: no extension), n = 64, 2 runs
TINY = {
    "params.n": 64,
    "ensemble.runs": 2,
    "integrator.horizon": 1.0,
    "integrator.burn_in": 0.5,
    "integrator.horizon_cap": 1.0,
    "output.saves": 8,
}


def _load(name, **values):
    doc = scenario_mod.apply_values(scenario_mod.read_file(SCENARIOS / f"{name}.toml"), values)
    return scenario_mod.resolve(doc, name)


def _made(tmp_path, name, **values) -> Path:
    """The empty sweep file of a scenario (every point pending): what creation writes."""
    path = tmp_path / f"{name}.h5"
    store.create(path, _load(name, **values), "test")
    return path


def _fill(path, values) -> None:
    """Write r_stationary (and a standard error) and mark every point done."""
    with h5py.File(path, "r+") as f:
        f["r_stationary"][...] = values
        f["r_stationary_se"][...] = 0.01
        f["status"][...] = 1


def _labelled(ax, label: str) -> list:
    return [line for line in ax.lines if line.get_label().startswith(label)]


def _panel(fig, title: str):
    (ax,) = [ax for ax in fig.axes if ax.get_title() == title]
    return ax


def test_scenarios_load_and_give_the_noise_in_units_of_sigma_c():
    hys = _load("noisy_hysteresis_sphere")
    assert hys.axes["d"] == [3, 4] and hys.axes["init"] == ["uniform", "cluster"]
    low, high = hys.axes["beta"]  # one beta below beta_*(d), one above, for d = 3 and 4
    assert all(low < noisy.bessel_beta_star(d) < high for d in (3, 4))
    ratios = hys.axes["sigma_over_sigma_c"]
    assert min(ratios) < 1 < max(ratios)
    for d in (3, 4):  # beyond the bistable window [sigma_c, sigma_fold] on both sides
        assert max(ratios) > noisy.sigma_fold(high, d) / noisy.sigma_critical(high, d)
    order = _load("transition_order")
    assert order.axes["d"] == [2, 3, 4] and order.params["sigma_over_sigma_c"] == 1.0
    assert all(min(order.axes["beta"]) < noisy.bessel_beta_star(d) < max(order.axes["beta"]) for d in (2, 3, 4))
    setup = hys.setup
    for index in range(setup.count):  # sigma = ratio x sigma_c(beta, d) at every point
        spec = setup.spec(index, hys.system)
        sc = noisy.sigma_critical(spec["beta"], spec["d"], "USA")
        assert noise_of(spec.values) == pytest.approx(spec["sigma_over_sigma_c"] * sc, rel=1e-15)
        p = hys.system.problem(spec).p
        assert noisy.LAYOUT.unpack(p)["sigma"] == pytest.approx(noise_of(spec.values), rel=1e-15)
    plain = _load("noisy_hysteresis").setup.spec(0)  # a plain sigma axis
    assert noise_of(plain.values) == plain["sigma"]


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["sweep.sigma=[1.0,2.0]"], "sweep.sigma_over_sigma_c: gives the noise in units of sigma_c"),
        (["params.sigma=2.0"], "sweep.sigma_over_sigma_c: gives the noise in units of sigma_c"),
        (
            ["sweep.d=[3]", "params.Q=[[1.0,0.0,0.0],[0.0,2.0,0.0],[0.0,0.0,1.0]]"],
            "sigma_c(beta, d) is known for Q = K = V = I, but Q is not",
        ),
        (["sweep.sigma_over_sigma_c=[-0.5]"], "must be >= 0"),
    ],
)
def test_bad_ratio_input_is_one_line_and_exit_2(tmp_path, capsys, overrides, key):
    out = tmp_path / "x.h5"
    argv = ["run", str(SCENARIOS / "noisy_hysteresis_sphere.toml"), "--out", str(out), "--no-progress"]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err, err
    assert not out.exists()


@pytest.mark.slow  # traces the branch per panel; the plain hysteresis references stay default below
def test_hysteresis_references_are_the_branch_and_are_drawn_per_panel(tmp_path):
    path = _made(tmp_path, "noisy_hysteresis_sphere")
    with dyn.open(path) as ds:
        b = noisy.branch(4.0, 3)
        sc = ds["sigma_critical"].sel(d=3)
        np.testing.assert_allclose(sc, [noisy.sigma_critical(1.0, 3), b.attrs["sigma_critical"]], rtol=1e-14)
        fold = ds["sigma_fold"].sel(d=3)
        assert np.isnan(fold.sel(beta=1.0))  # below beta_*: no fold
        assert float(fold.sel(beta=4.0)) == pytest.approx(noisy.sigma_fold(4.0, 3), rel=1e-12)
        assert float(fold.sel(beta=4.0)) == pytest.approx(1.7985603438, rel=1e-9)  # docs table
        ratio_fold = float(ds["sigma_over_sigma_c_fold"].sel(d=3, beta=4.0))
        assert ratio_fold == pytest.approx(float(fold.sel(beta=4.0) / sc.sel(beta=4.0)), rel=1e-14)
        assert float(ds["beta_star"].sel(d=3)) == pytest.approx(1.8161545254, rel=1e-9)
        # the branch at beta = 4 in units of sigma_c: its stable and unstable points, then the
        # uniform law (r = 0: unstable below 1, stable above)
        x = ds["sigma_over_sigma_c_branch"].values
        stable = ds["r_branch_stable"].sel(d=3, beta=4.0).values
        unstable = ds["r_branch_unstable"].sel(d=3, beta=4.0).values
        own = np.isfinite(stable) | np.isfinite(unstable)
        xb, rb = b.sigma.values / b.attrs["sigma_critical"], b.r.values
        inside = (xb >= 0.9 * 0.9) & (xb <= 1.1 * 1.3)
        on = b.stable.values & inside
        np.testing.assert_array_equal(stable[own][: xb.size][on], rb[on])
        off = ~b.stable.values
        np.testing.assert_array_equal(unstable[own][: xb.size][off], rb[off])
        np.testing.assert_array_equal(x[own][: xb.size], xb)
        assert np.nanmax(unstable) < np.nanmax(stable) and np.nanmin(stable) == 0.0
        values = np.where(ds["init"] == "cluster", 0.9, 0.1) * np.ones(ds["r_stationary"].shape)
    _fill(path, values)
    png = tmp_path / "hysteresis.png"
    assert main(["plot", str(path), "--out", str(png)]) == 0 and png.stat().st_size > 0
    fig = figure(path)
    # a panel per (d, beta), r against sigma/sigma_c inside
    assert len([ax for ax in fig.axes if ax.get_visible()]) == 4
    with dyn.open(path) as ds:
        for beta, title in ((1.0, "d = 3, beta = 1"), (4.0, "d = 3, beta = 4")):
            ax = _panel(fig, title)
            assert ax.get_xlabel() == RATIO_LABEL
            (line,) = _labelled(ax, r"$\sigma_c$")
            np.testing.assert_array_equal(line.get_xdata(), [1.0, 1.0])
            folds = _labelled(ax, "mean-field fold")
            assert len(folds) == (beta == 4.0)  # the fold only where the transition jumps
            if folds:
                assert folds[0].get_xdata()[0] == pytest.approx(ratio_fold, rel=1e-14)
            (line,) = _labelled(ax, "mean field: stable")
            np.testing.assert_array_equal(line.get_ydata(), ds["r_branch_stable"].sel(d=3, beta=beta).values)
            np.testing.assert_array_equal(line.get_xdata(), x)
            assert [c.get_label() for c in ax.containers] == ["init = uniform", "init = cluster"]
            for bars, init in zip(ax.containers, ("uniform", "cluster"), strict=True):
                np.testing.assert_array_equal(
                    bars.lines[0].get_ydata(), ds["r_stationary"].sel(d=3, beta=beta, init=init).values
                )
                assert bars.has_yerr


@pytest.mark.slow  # traces branches in d = 3, 4; sigma_c, the fold and the branches stay default in test_references
def test_transition_order_reference_is_the_jump_at_sigma_c(tmp_path):
    path = _made(tmp_path, "transition_order", **{"sweep.d": [3, 4], "sweep.beta": [1.5, 3.0]})
    with dyn.open(path) as ds:
        r = ds["r_mean_field"]
        beta = ds["beta_mean_field"].values
        assert r.dims == ("d", "beta_mean_field") and {1.5, 3.0} <= set(beta)
        for d in (3, 4):
            star = noisy.bessel_beta_star(d)
            assert star in beta and float(ds["beta_star"].sel(d=d)) == star
            row = r.sel(d=d)
            assert (row.sel(beta_mean_field=beta[beta <= star]) == 0).all()  # continuous
            above = row.sel(beta_mean_field=beta[beta > star]).values
            assert (above > 0).all() and np.all(np.diff(above) > 0)  # the jump grows with beta
            # the law solved at sigma_c itself; the traced branch, interpolated at sigma_c
            law = noisy.stationary_law(3.0, noisy.sigma_critical(3.0, d), d)
            assert float(row.sel(beta_mean_field=3.0)) == pytest.approx(law[1] / np.sqrt(d), rel=1e-9)
            branch = noisy.branch(3.0, d)
            stable = branch.stable.values & (branch.r.values > 0.1)
            s, rr = branch.sigma.values[stable], branch.r.values[stable]
            assert float(row.sel(beta_mean_field=3.0)) == pytest.approx(
                np.interp(branch.attrs["sigma_critical"], s[::-1], rr[::-1]), abs=2e-3
            )
            assert float(ds["sigma_fold"].sel(d=d, beta=3.0)) == pytest.approx(noisy.sigma_fold(3.0, d), rel=1e-12)
            assert np.isnan(ds["sigma_fold"].sel(d=d, beta=1.5))
    # just above beta_* the crossing of sigma_c lies next to the fold: still found, small
    star = noisy.bessel_beta_star(3)
    near, further = (clustered_r(star + h, 3, "USA", 1.0) for h in (1e-3, 0.01))
    assert 0 < near < further < 0.15
    _fill(path, 0.5)
    fig = figure(path)
    with dyn.open(path) as ds:
        for d in (3, 4):
            ax = _panel(fig, f"d = {d}")  # a panel per d, r against beta
            assert ax.get_xlabel() == ds["beta"].attrs["long_name"]
            (line,) = _labelled(ax, "mean field: stable clustered law at")
            np.testing.assert_array_equal(line.get_xdata(), ds["beta_mean_field"].values)
            np.testing.assert_array_equal(line.get_ydata(), ds["r_mean_field"].sel(d=d).values)
            (line,) = _labelled(ax, r"$\beta_*(d)$")
            assert line.get_xdata()[0] == pytest.approx(noisy.bessel_beta_star(d), rel=1e-15)


def test_tiny_runs_keep_the_qualitative_law(tmp_path):
    # S^2 at beta = 4 > beta_*(3), sigma = 1.1 sigma_c, inside the bistable window (fold 1.124):
    # a cluster stays a cluster, the uniform law stays uniform (mean field: both stable)
    out = dyn.run(
        SCENARIOS / "noisy_hysteresis_sphere.toml",
        tmp_path / "h.h5",
        progress=False,
        overrides={**TINY, "sweep.d": [3], "sweep.beta": [4.0], "sweep.sigma_over_sigma_c": [1.1]},
    )
    with dyn.open(out) as ds:
        assert (ds["status"] == 1).all()
        r = ds["r_stationary"].sel(d=3, beta=4.0, sigma_over_sigma_c=1.1)
        assert float(r.sel(init="cluster")) > 0.8 and float(r.sel(init="uniform")) < 0.35
        np.testing.assert_allclose(ds["sigma_used"], 1.1 * noisy.sigma_critical(4.0, 3), rtol=1e-15)
    # cluster starts at sigma_c: above beta_*(3) they stay on the mean-field jump; below they
    # dissolve (r falls fast far below the jump at beta = 3, then critically slowly)
    out = dyn.run(
        SCENARIOS / "transition_order.toml",
        tmp_path / "t.h5",
        progress=False,
        overrides={
            **TINY,
            "integrator.horizon": 3.0,
            "integrator.burn_in": 1.5,
            "integrator.horizon_cap": 3.0,
            "sweep.d": [3],
            "sweep.beta": [1.0, 3.0],
        },
    )
    with dyn.open(out) as ds:
        assert (ds["status"] == 1).all()
        jump = float(ds["r_mean_field"].sel(d=3, beta_mean_field=3.0))
        assert float(ds["r_stationary"].sel(d=3, beta=3.0)) == pytest.approx(jump, abs=0.06)
        below = ds["r"].sel(d=3, beta=1.0).values
        assert below[0] == 1.0 and below[len(below) // 2 :].max() < min(0.75, jump - 0.15)


def test_plain_sigma_gets_the_fold_and_branches_for_any_d(tmp_path):
    path = _made(tmp_path, "noisy_hysteresis", **{"params.d": 3, "params.beta": 4.0, "sweep.sigma": [1.5, 1.7, 1.9]})
    b = noisy.branch(4.0, 3)
    with dyn.open(path) as ds:
        assert float(ds["sigma_critical"]) == pytest.approx(b.attrs["sigma_critical"], rel=1e-14)
        assert float(ds["sigma_fold"]) == pytest.approx(b.attrs["sigma_fold"], rel=1e-12)
        x = ds["sigma_branch"].values
        np.testing.assert_array_equal(x[: b.sigma.size], b.sigma.values)
        unstable = ds["r_branch_unstable"].values[: b.sigma.size]
        np.testing.assert_array_equal(unstable[~b.stable.values], b.r.values[~b.stable.values])
        assert "zonal laws on S^{d-1}" in ds["r_branch_stable"].attrs["long_name"]
    _fill(path, 0.5)
    fig = figure(path)
    ax = fig.axes[0]
    (line,) = _labelled(ax, "mean-field fold")
    assert line.get_xdata()[0] == pytest.approx(b.attrs["sigma_fold"], rel=1e-12)
    assert _labelled(ax, "mean field: unstable")
