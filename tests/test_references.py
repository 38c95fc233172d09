"""Theory is data in the file: the systems' references (boundaries, closed forms, curves) are
written when the file is made, with the closed-form values, and `dyn plot` draws them from the
file's attributes alone (checked on the drawn matplotlib lines, not on file sizes)."""

import h5py
import numpy as np
import pytest
import xarray as xr
from scipy.special import iv

from _scenarios import empty_sweep_file
from dyn.core.contract import REFERENCE, ROLE_ATTR, theory_grid
from dyn.presentation.marks import slope_lines
from dyn.presentation.plot import figure


def _fill(path, name, values) -> None:
    """Write a variable's values and mark every point done (a stand-in for a run)."""
    with h5py.File(path, "r+") as f:
        f[name][...] = values
        f["status"][...] = 1


def _lines(fig, label: str) -> list:
    found = [line for ax in fig.axes for line in ax.lines if line.get_label().startswith(label)]
    assert found, f"no line labelled {label!r}"
    return found


def test_theory_grid_spans_the_cells():
    grid = theory_grid([1.0, 2.0, 3.0, 4.0], 50)
    assert grid[0] <= 0.5 and grid[-1] >= 4.5 and {1.0, 2.0, 3.0, 4.0} <= set(grid)
    d = theory_grid([2, 3, 4, 8, 16, 32])
    assert 0 < d[0] < 2 and d[-1] > 32 and np.all(np.diff(d) > 0)  # positive axes stay positive
    assert list(theory_grid([5.0])) == [5.0]


def test_noisy_sigma_c_is_in_the_file_and_drawn_on_the_heat_map(tmp_path):
    path = empty_sweep_file(tmp_path, "noisy_phase", **{"sweep.beta": [0.5, 1.0, 2.0], "sweep.sigma": [0.5, 1.0, 1.5]})
    with xr.open_dataset(path, engine="h5netcdf") as ds:  # a plain xarray user gets it
        sc = ds["sigma_critical"]
        assert sc.attrs[ROLE_ATTR] == REFERENCE and sc.dims == ("beta_theory",)
        assert ds["beta_theory"].attrs["dyn_axis"] == "beta"
        beta = ds["beta_theory"].values
        assert beta[0] < 0.5 and beta[-1] > 2.0
        # USA on the circle: lambda_1 = I_1(beta)/beta - sigma^2/2
        np.testing.assert_allclose(sc.values, np.sqrt(2 * iv(1, beta) / beta), rtol=1e-12)
        assert "sigma_fold" not in ds  # beta < 2.45: no fold
    fig = figure(path, "r_stationary")
    (line,) = _lines(fig, r"$\sigma_c")
    np.testing.assert_array_equal(line.get_xdata(), beta)  # beta across, sigma up
    np.testing.assert_allclose(line.get_ydata(), np.sqrt(2 * iv(1, beta) / beta), rtol=1e-12)
    ax = fig.axes[0]
    assert ax.get_ylim()[1] < 2.0  # the reference did not stretch the heat map


def test_noisy_curves_against_sigma_get_sigma_c_the_fold_and_the_branches(tmp_path):
    path = empty_sweep_file(tmp_path, "noisy_hysteresis", **{"sweep.sigma": [2.9, 3.2, 3.5]})
    sc = np.sqrt(2 * iv(1, 5.0) / 5.0)
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert float(ds["sigma_critical"]) == pytest.approx(sc, rel=1e-12)
        fold = float(ds["sigma_fold"])
        assert 2.9 < sc < fold < 3.5  # subcritical: a clustered law above sigma_c
        stable = ds["r_branch_stable"]
        assert stable.dims == ("sigma_branch",) and np.nanmax(stable.values) > 0.5
    fig = figure(path, "r_stationary")
    (line,) = _lines(fig, r"$\sigma_c")
    np.testing.assert_allclose(line.get_xdata(), [sc, sc], rtol=1e-12)  # a vertical line
    (line,) = _lines(fig, "mean-field fold")
    assert line.get_xdata()[0] == pytest.approx(fold)
    (line,) = _lines(fig, "mean field: stable")
    np.testing.assert_array_equal(line.get_ydata(), stable.values)


def test_two_token_boundary_is_nan_without_solution_and_spans_d(tmp_path):
    path = empty_sweep_file(tmp_path, "two_token_phase", **{"sweep.beta": [0.0, 1.0, 2.0]})
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        b = ds["beta_boundary"]
        d = ds["d_theory"].values
        assert b.attrs[ROLE_ATTR] == REFERENCE and b.attrs["dyn_along"] == "beta"
        assert d[0] <= 2 and d[-1] >= 32  # the whole (beta, d) heat map
        assert np.isnan(b.values[d < 3]).all()  # cosh(2 beta) = d - 2 has no solution
        np.testing.assert_allclose(np.cosh(2 * b.values[d >= 3]), d[d >= 3] - 2, rtol=1e-12)
    fig = figure(path, "p_antipodal")
    (line,) = _lines(fig, r"$\cosh")
    x, y = line.get_xdata(), line.get_ydata()
    np.testing.assert_array_equal(y, d)
    assert np.isnan(x[y < 3]).all() and np.isfinite(x[y >= 3]).all()  # no segment below d = 3


def test_mean_field_zero_crossings_are_roots_and_ticks(tmp_path):
    from dyn import noisy

    path = empty_sweep_file(tmp_path, "mean_field_modes", **{"sweep.beta": [1.0, 4.0, 8.0, 12.0, 16.0]})
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        zero = ds["beta_zero"]
        assert zero.dims == ("mode", "crossing")
        roots = [(k, b) for k, row in zip(ds["mode"].values, zero.values, strict=True) for b in row if np.isfinite(b)]
        rates = np.zeros((5, 6))
        rates[:, :3] = 1.0  # the first three modes grow
    assert roots
    for k, b in roots:
        assert abs(noisy.growth_rates(b, 0.35, 2, "SA", [k])[0]) < 1e-10
    _fill(path, "growth_rate", rates)
    fig = figure(path, "growth_rate")
    (ticks,) = _lines(fig, "closed form")
    x, y = ticks.get_xdata(), ticks.get_ydata()
    segments = [
        (x[i], x[i + 1], y[i], y[i + 1])
        for i in range(len(x) - 1)
        if np.isfinite([x[i], x[i + 1], y[i], y[i + 1]]).all()
    ]
    # a tick across its mode's cell (k -+ 1/2, beta across) at each root
    assert all(x0 == x1 and y1 - y0 == 1.0 for x0, x1, y0, y1 in segments)
    np.testing.assert_array_equal(sorted((y0 + 0.5, x0) for x0, _, y0, _ in segments), sorted(roots))
    (plus,) = _lines(fig, "growth_rate > 0")
    assert len(plus.get_xdata()) == 15 and set(plus.get_ydata()) == {1, 2, 3}


def test_momentum_thresholds_are_vertical_lines_on_curves(tmp_path):
    path = empty_sweep_file(tmp_path, "momentum_linear", **{"sweep.a": [-8.0, -4.0, 0.0], "params.eps": 0.5})
    from dyn import momentum

    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert float(ds["a_discriminant"]) == -0.5
        first = float(ds["a_first_zero"])
        assert first == pytest.approx(momentum.negativity_threshold(0.5, 1.0))
    fig = figure(path, "psi_closed")
    assert list(_lines(fig, "a = -1/(4 eps)")[0].get_xdata()) == [-0.5, -0.5]
    assert _lines(fig, "first zero")[0].get_xdata()[0] == pytest.approx(first)


def test_sinkformer_heat_line_and_declared_slopes(tmp_path):
    path = empty_sweep_file(tmp_path, "sinkformer_heat")
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        t = ds["time"].values
        np.testing.assert_allclose(ds["variance_heat"].values, 1.0 + 2 * 0.5 * t)
    (line,) = _lines(figure(path, "variance"), "heat")
    np.testing.assert_allclose(line.get_ydata(), 1.0 + t)
    path = empty_sweep_file(tmp_path, "resnet_ode_limit", **{"sweep.depth": [16, 32, 64, 128]})
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert list(ds["error"].attrs["dyn_slopes"]) == [-1.0, -2.0]
        shape = ds["error"].shape
    depth = np.array([16, 32, 64, 128.0])
    _fill(path, "error", np.broadcast_to((1.0 / depth)[:, None, None], shape))
    fig = figure(path, "error")
    assert fig.axes[0].get_yscale() == "log"
    for slope in (-1.0, -2.0):
        (line,) = _lines(fig, f"slope {slope:g}")
        np.testing.assert_allclose(line.get_ydata(), (1 / 16) * (depth / 16) ** slope)


def test_slope_lines_need_a_log_axis():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    da = xr.DataArray([[1.0, 2.0], [0.5, 1.0]], dims=("depth", "k"), coords={"depth": [4, 8]})
    fig, ax = plt.subplots()
    assert not slope_lines(ax, da, "depth", [-1.0])
    ax.set_xscale("log")
    assert slope_lines(ax, da, "depth", [-1.0, 0.0])
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [2.0, 1.0])  # the largest curve
    np.testing.assert_allclose(ax.lines[1].get_ydata(), [1.5, 1.5])  # the median
    plt.close(fig)
