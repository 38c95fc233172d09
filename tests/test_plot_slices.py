"""Pictures that slice, compare and say what they leave out (issue 39, item 3), checked on the
drawn matplotlib objects of files made by the store and filled with known values (no run):

- `--var X` writes NAME_X.png beside the file and leaves the scenario's NAME.png alone;
- `--sel AXIS=VALUE` cuts the file before drawing: a heat map at one beta is the curve of that
  row, and the theory drawn over it is cut with it (sigma_c at that beta); bad choices are one line;
- panels of a heat map share one colour scale, and a picture cut to 12 panels says which values
  it left out;
- `--log` (a log colour norm, non-positive cells blank and counted), a diverging map centred on
  zero for a signed variable (`dyn_signed`, or a symmetric `dyn_clim`);
- an axis label is its parameter's doc without the remark in parentheses;
- `dyn compare` prints the asymptotic fit naming its points, and its title is a sentence.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
from scipy.special import iv

from _scenarios import empty_sweep_file
from dyn.core.contract import CLIM_ATTR, SIGNED_ATTR
from dyn.core.errors import ScenarioError
from dyn.presentation import comparison
from dyn.presentation.cli import main
from dyn.presentation.plot import figure, plot


def _fill(path, values: dict, attrs: dict | None = None) -> None:
    with h5py.File(path, "r+") as f:
        for name, value in values.items():
            f[name][...] = value
        for name, extra in (attrs or {}).items():
            f[name].attrs.update(extra)
        f["status"][...] = 1


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture(scope="module")
def phase_file(tmp_path_factory):
    """noisy_phase on a 4 x 3 grid, r_stationary = (row * 3 + column) / 12."""
    path = empty_sweep_file(
        tmp_path_factory.mktemp("phase"),
        "noisy_phase",
        **{"sweep.beta": [0.5, 1.0, 2.0, 4.0], "sweep.sigma": [0.5, 1.0, 1.5]},
    )
    _fill(path, {"r_stationary": np.arange(12.0).reshape(4, 3) / 12})
    return path


@pytest.fixture
def phase(phase_file, tmp_path):
    """A copy of the file each test may change (made once: its theory takes a second)."""
    return Path(shutil.copy(phase_file, tmp_path / phase_file.name))


def _meshes(fig):
    from matplotlib.collections import QuadMesh

    return [
        c
        for ax in fig.axes
        if ax.get_label() != "<colorbar>"  # a colour bar's own mesh
        for c in ax.collections
        if isinstance(c, QuadMesh)
    ]


def test_a_var_picture_is_named_after_the_variable_and_keeps_the_scenarios_own(phase):
    own = plot(phase)
    assert own == phase.with_suffix(".png")
    before = own.read_bytes()
    other = plot(phase, var="r_stationary_se")
    assert other == phase.with_name("noisy_phase_r_stationary_se.png") and other.exists()
    assert own.read_bytes() == before  # the scenario's picture is untouched


def test_sel_cuts_a_heat_map_to_the_curve_of_one_row_with_its_theory(phase):
    fig = figure(phase, "r_stationary", sel=["beta=1.9"])  # nearest: beta = 2
    assert not _meshes(fig)
    (ax,) = [a for a in fig.axes if a.lines]
    data = [line for line in ax.lines if len(line.get_xdata()) == 3]
    np.testing.assert_array_equal(data[0].get_xdata(), [0.5, 1.0, 1.5])
    np.testing.assert_allclose(data[0].get_ydata(), np.array([6.0, 7.0, 8.0]) / 12)
    (sigma_c,) = [line for line in ax.lines if line.get_label().startswith(r"$\sigma_c")]
    # USA on the circle: sigma_c(beta) = sqrt(2 I_1(beta) / beta), at the chosen beta only
    np.testing.assert_allclose(sigma_c.get_xdata(), np.sqrt(2 * iv(1, 2.0) / 2.0), rtol=2e-2)
    assert not any("fold" in line.get_label() for line in ax.lines)  # no fold below beta 2.45
    assert "at beta = 2" in fig._suptitle.get_text()
    assert ax.get_xlabel() == "noise sigma per token"


BAD_SELECTIONS = [
    (["gamma=1"], "--sel: unknown dimension 'gamma'"),
    (["beta=9"], "--sel: beta = 9 is out of its range [0.5, 4]"),
    (["beta=high"], "--sel: beta: expected a number"),
    (["beta"], "--sel: expected AXIS=VALUE"),
    (["beta=1", "beta=2"], "--sel: beta is chosen twice"),
]


def test_bad_selections_are_one_line(phase, capsys):
    for sel, words in BAD_SELECTIONS:
        with pytest.raises(ScenarioError) as caught:
            figure(phase, "r_stationary", sel=sel)
        assert str(caught.value).startswith(words) and "\n" not in str(caught.value)
    sel, words = BAD_SELECTIONS[1]  # the command line says it in one line, exit 2, no picture
    assert main(["plot", str(phase), "--sel", sel[0]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dyn: error: {words}") and len(err.splitlines()) == 1, err
    assert not phase.with_suffix(".png").exists()


def test_point_without_tokens_points_to_sel(phase, capsys):
    assert main(["plot", str(phase), "--point", "beta=2"]) == 2
    assert "use --sel AXIS=VALUE" in capsys.readouterr().err


def test_panels_share_one_colour_scale_and_say_what_was_left_out(tmp_path):
    sizes = list(range(2, 16))  # 14 values of n: 14 x 2 times = 28 panels of (beta, d)
    path = empty_sweep_file(
        tmp_path,
        "attention_clusters",
        **{
            "sweep.beta": [1.0, 2.0],
            "sweep.d": [2, 3],
            "sweep.n": sizes,
            "output.saves": 1,
            "output.observables": ["pair_fraction"],
            "ensemble.runs": 2,
        },
    )
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        shape = ds["pair_fraction"].shape
        assert ds["pair_fraction"].dims == ("beta", "d", "n", "time")
    # each panel (n, time) its own range: panel k holds k + [0, 0.1, 0.2, 0.3]
    values = np.arange(shape[2] * shape[3], dtype=float).reshape(1, 1, shape[2], shape[3]) + 0.1 * np.arange(
        4.0
    ).reshape(2, 2, 1, 1)
    _fill(path, {"pair_fraction": values / values.max()}, {"pair_fraction": {CLIM_ATTR: [0.0, 1.0]}})
    # declared range: kept for every panel
    fig = figure(path, "pair_fraction")
    assert len(_meshes(fig)) == 12
    assert {(m.norm.vmin, m.norm.vmax) for m in _meshes(fig)} == {(0.0, 1.0)}
    text = fig._suptitle.get_text()
    assert "12 of 28 panels drawn, left out: n = 8, 9, 10, 11, 12, 13, ..." in " ".join(text.split())
    assert "--sel" in text
    # no declared range: the whole variable's, the same on every panel
    with h5py.File(path, "r+") as f:
        del f["pair_fraction"].attrs[CLIM_ATTR]
    fig = figure(path, "pair_fraction")
    norms = {(m.norm.vmin, m.norm.vmax) for m in _meshes(fig)}
    assert norms == {(0.0, 1.0)}  # the whole variable's min and max, not one panel's
    # --sel leaves one panel per time
    fig = figure(path, "pair_fraction", sel=["n=5"])
    assert len(_meshes(fig)) == 2 and "left out" not in fig._suptitle.get_text()


def test_log_scale_on_a_heat_map_blanks_what_is_not_positive(phase):
    from matplotlib.colors import LogNorm

    fig = figure(phase, "r_stationary", log=True)
    (mesh,) = _meshes(fig)
    assert isinstance(mesh.norm, LogNorm)
    assert mesh.norm.vmin == pytest.approx(1 / 12) and mesh.norm.vmax == pytest.approx(11 / 12)
    assert np.ma.count_masked(mesh.get_array()) == 1  # the cell holding 0
    assert "1 values <= 0 left blank on the log scale" in fig._suptitle.get_text()
    fig = figure(phase, "r_stationary", sel=["beta=4"], log=True)
    assert [a.get_yscale() for a in fig.axes if a.lines] == ["log"]


def test_a_signed_variable_gets_a_diverging_map_centred_on_zero(phase):
    signed = np.linspace(-0.5, 2.0, 12).reshape(4, 3)
    _fill(phase, {"r_stationary": signed}, {"r_stationary": {SIGNED_ATTR: 1}})
    fig = figure(phase, "r_stationary")
    (mesh,) = _meshes(fig)
    assert mesh.get_cmap().name == "RdBu_r"
    assert (mesh.norm.vmin, mesh.norm.vmax) == (-2.0, 2.0)  # zero is the middle colour
    (sigma_c,) = [line for line in mesh.axes.lines if line.get_label().startswith(r"$\sigma_c")]
    assert sigma_c.get_path_effects()  # white on the white middle: a dark rim shows it
    with h5py.File(phase, "r+") as f:
        del f["r_stationary"].attrs[SIGNED_ATTR]
    (mesh,) = _meshes(figure(phase, "r_stationary"))
    assert mesh.get_cmap().name == "viridis" and mesh.norm.vmin == pytest.approx(-0.5)
    _fill(phase, {}, {"r_stationary": {CLIM_ATTR: [-3.0, 3.0]}})  # a symmetric declared range
    (mesh,) = _meshes(figure(phase, "r_stationary"))
    assert mesh.get_cmap().name == "RdBu_r" and (mesh.norm.vmin, mesh.norm.vmax) == (-3.0, 3.0)


def test_growth_rates_are_declared_signed(tmp_path):
    path = empty_sweep_file(tmp_path, "mean_field_modes", **{"sweep.beta": [1.0, 2.0]})
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds["growth_rate"].attrs[SIGNED_ATTR] == 1
        assert ds["growth_rate_particles"].attrs[SIGNED_ATTR] == 1


def test_axis_labels_leave_out_the_parameters_remarks(tmp_path):
    path = empty_sweep_file(
        tmp_path, "attention_clusters", **{"sweep.beta": [1.0, 2.0, 4.0], "output.saves": 4, "ensemble.runs": 2}
    )
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds["beta"].attrs["long_name"] == "inverse temperature beta (any sign)"
        shape = ds["pair_fraction"].shape
    _fill(path, {"pair_fraction": np.full(shape, 0.5)})
    labels = [ax.get_xlabel() for ax in figure(path, "pair_fraction").axes]
    assert "inverse temperature beta" in labels and not any("any sign" in t for t in labels)


def _depth_result():
    depth = np.array([8, 16, 32, 64, 128, 256, 512])
    rng = np.random.default_rng(1)
    error = 1.0 / depth + 4.0 / depth**2  # rate -1 with a 1/L^2 correction at small depth
    distance = error[:, None] * (1 + 0.01 * rng.standard_normal((depth.size, 16)))
    result = xr.Dataset(
        {"distance": (("depth", "run"), distance)}, coords={"depth": ("depth", depth, {"long_name": "layers"})}
    )
    result["error"] = np.sqrt((result["distance"] ** 2).mean("run"))
    result.attrs.update(along="depth", reference="16384", at="final", source="t.h5")
    return result


def test_compare_prints_the_asymptotic_fit_and_names_its_points():
    result = _depth_result()
    lines = comparison.rate_lines(result, "depth")
    assert len(lines) == 2
    assert lines[0].startswith("rate against depth, all points: ") and "(7 points)" in lines[0]
    assert lines[1].startswith("rate against depth, asymptotic fit on depth = 64, 128, 256, 512: ")
    every = comparison.rates(result, "depth")[()]
    tail, used = comparison.asymptotic_rates(result, "depth")[()]
    assert used.tolist() == [64, 128, 256, 512] and tail.points == 4
    # the correction bends the all-points slope away from -1; the asymptotic fit holds it
    assert abs(tail.slope + 1) < 0.05 < abs(every.slope + 1)
    assert f"{tail}" in lines[1]


def test_compare_titles_are_sentences():
    result = _depth_result()
    assert comparison.heading(result.attrs) == (
        "t: distance of each depth to depth = 16384, the largest over tokens and the final saved time"
    )
    result.attrs.update(along="form", reference="flow", at="all")
    fig = comparison.figure(result, "depth")
    assert fig._suptitle.get_text().startswith(
        "t: distance of each form to form = flow, the largest over tokens and all saved times"
    )


def test_curves_cut_to_twelve_say_what_was_left_out():
    """(No shipped system has a categorical axis of more than 12 values: the words alone.)"""
    from dyn.presentation.plot import MAX_CURVES, _combinations, _left_out

    da = xr.DataArray(
        np.zeros((14, 3)),
        dims=("scheme", "time"),
        coords={"scheme": [f"s{k}" for k in range(14)], "time": [0.0, 1.0, 2.0]},
    )
    every = _combinations(da, ["scheme"])
    text = _left_out(da, ["scheme"], every, every[:MAX_CURVES], "curves")
    assert text == "12 of 14 curves drawn, left out: scheme = s12, s13 (choose curves with --sel AXIS=VALUE)"
    assert _left_out(da, ["scheme"], every, every, "curves") == ""
