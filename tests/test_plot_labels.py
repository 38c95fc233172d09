"""Every shipped scenario's picture says what it shows, in words from the file: `dyn plot` on a
tiny run of each, checked on the matplotlib objects (issue 24, item 3).

- axis labels and colour-bar labels are the variables' `long_name` (with `units` unless "1"),
  never a bare variable name;
- the title names the scenario and the variable's long_name, then the settings: n where the
  scenario fixes it, and the runs per point;
- the legend is the figure's, below the panels, and its texts are what the file declares
  (references' labels, the curves' coordinates, the marks, the error notes); where a legend used
  to cover data, the laid-out figure shows it overlaps no axes.
Plus the paper style (vector files, a one-column width, 8-9 pt text), the plot-side analysis of
runs that split between states, reference curves clipped to the data, and `dyn compare`'s
reference slopes that leave the axes alone.

Each scenario runs with each sweep axis cut to its two ends, 2 runs per point, and the settings
below that make it cheap; the numbers mean nothing, only the words are checked.
"""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import dyn
from dyn.core.contract import LABEL_ATTR, OVER_ATTR
from dyn.presentation.plot import figure
from dyn.presentation.styles import output_path
from dyn.presentation.words import REMARK, settings

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
NAMES = sorted(p.stem for p in SCENARIOS.glob("*.toml"))
# noisy systems: a fixed window (burn_in and a cap at the horizon: no extension), few tokens
NOISY = {
    "params.n": 16,
    "integrator.horizon": 0.5,
    "integrator.burn_in": 0.25,
    "integrator.horizon_cap": 0.5,
    "output.saves": 4,
}
# what makes each scenario cheap, beyond the axes cut to their ends and 2 runs
TINY = {
    "antipodal_census": {"sweep.n": [2, 4], "integrator.horizon": 20.0},
    "hardmax_limit": {"integrator.horizon": 100.0},
    "positional_attention": {"integrator.horizon": 3.0, "output.saves": 3},
    "implicit_regularization": {"sweep.depth": [4, 8], "params.steps": 3, "params.samples": 8, "params.width": 8},
    "mean_field_modes": {"params.n": 100, "params.grid": 96, "integrator.horizon": 0.2},
    "next_token_scc": {"integrator.horizon": 100.0},
    "metastability": {"params.n": 8, "integrator.horizon": 10.0, "output.saves": 30},  # a band
    "metastable_counts": {"params.n": 16, "integrator.horizon": 10.0, "output.saves": 12},
    "momentum_limit": {"sweep.depth": [16, 32], "integrator.dt": 1e-3},
    "noisy_hysteresis": {**NOISY, "integrator.dt": 0.004},
    "noisy_hysteresis_sphere": {**NOISY, "integrator.step_tol": 0.05},
    "noisy_phase": {**NOISY, "integrator.step_tol": 0.05},
    "noisy_sphere": {**NOISY, "integrator.dt": 0.01},
    "resnet_adjoint": {"sweep.depth": [16, 32]},
    "resnet_ode_limit": {"sweep.depth": [16, 32]},
    "sinkformer_heat": {"params.n": 40, "integrator.horizon": 0.2, "output.saves": 4},
    "transition_order": {**NOISY, "integrator.step_tol": 0.05},
}
# The default tier draws the pictures of the defects and one of each kind (heat maps,
# panels of heat maps, curves with errors, bands and single runs, references along an axis and
# beside the values); the slow tier draws every shipped scenario. Each picture costs ~0.7 s CPU
# to open and draw whatever the run (28 of them would pass the ~20 s this file may take), and
# some runs stay costly even tiny: the JAX-compiled ResNet systems (2-4 s of compiling),
# mean-field branches and folds computed when the file is made (noisy_sphere, transition_order,
# noisy_hysteresis_sphere: 2-3 s), runs until decided (antipodal_census).
DEFAULT_TIER = {
    "two_token_phase",
    "noisy_phase",
    "noisy_hysteresis",
    "metastability",
    "attention_depth_limit",
    "sinkhorn_iterations",
    "sinkformer_heat",
    "transformer_depth_limit",
}


def _tiny_overrides(name: str) -> dict:
    doc = tomllib.loads((SCENARIOS / f"{name}.toml").read_text())
    found = {}
    for axis, raw in doc.get("sweep", {}).items():
        ends = [raw["start"], raw["stop"]] if isinstance(raw, dict) else [raw[0], raw[-1]]
        found[f"sweep.{axis}"] = ends if ends[0] != ends[-1] else ends[:1]
    found["ensemble.runs"] = min(int(doc.get("ensemble", {}).get("runs", 1)), 2)
    return {**found, **TINY.get(name, {})}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> the sweep file of a tiny run of that scenario (made on first use)."""
    folder = tmp_path_factory.mktemp("tiny")
    made = {}

    def get(name):
        if name not in made:
            made[name] = dyn.run(
                SCENARIOS / f"{name}.toml",
                folder / f"{name}.h5",
                progress=False,
                log=io.StringIO(),
                overrides=_tiny_overrides(name),
            )
        return made[name]

    return get


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def _words(text: str) -> str:
    """A label as one line (labels are wrapped to the panel's size)."""
    return " ".join(text.split())


class _File:
    """What the checks need of a sweep file, read with h5py (xarray takes ~0.3 s to open one):
    attributes of the file and of each variable, and each variable's dims."""

    def __init__(self, path):
        import h5py

        with h5py.File(path, "r") as f:
            self.attrs = {k: str(v) for k, v in f.attrs.items() if isinstance(v, str)}
            self.vars = {
                name: {k: v for k, v in f[name].attrs.items() if k.startswith(("long_name", "units", "dyn_"))}
                for name in f
                if isinstance(f[name], h5py.Dataset)
            }
            # which variables have finite Monte Carlo errors: X_se, or X_lo and X_hi
            self.errors = {
                name.removesuffix(tail): words
                for name in f
                for tail, words in (("_se", "one standard error"), ("_lo", "95% Wilson interval"))
                if name.endswith(tail) and np.isfinite(f[name][()]).any()
            }
            self.dims = {
                name: [f[name].dims[i][0].name.lstrip("/") for i in range(f[name].ndim) if len(f[name].dims[i])]
                for name in f
                if isinstance(f[name], h5py.Dataset)
            }

    def label(self, name: str) -> str:
        """What an axis or colour bar drawing variable `name` must say (a sweep axis: its
        parameter's doc without the remarks in parentheses, "(any sign)")."""
        attrs = self.vars[name]
        units = str(attrs.get("units", ""))
        text = str(attrs.get("long_name", name))
        if any(name in dims for dims in self.dims.values()):  # a coordinate: an axis
            text = REMARK.sub("", text)
        return _words(f"{text} [{units}]" if units not in ("", "1") else text)

    def legend_words(self, name: str) -> set[str]:
        """Every text the legend may hold for variable `name`, besides curves' coordinates."""
        from dyn.presentation.styles import MARK_STYLES

        attrs = self.vars[name]
        words = {s.label for s in MARK_STYLES.values()}
        words |= {f"{k}: {e}" for k in ("bands", "error bars") for e in ("one standard error", "95% Wilson interval")}
        words |= {f"dots: {e} > 5% of the colour range" for e in ("one standard error", "half the 95% Wilson interval")}
        for v, x in self.vars.items():
            if name in str(x.get(OVER_ATTR, "")).split():
                label = str(x.get(LABEL_ATTR) or x.get("long_name", v))
                words |= {label, *(f"{label} (first {k})" for k in range(1, 13))}
        words |= {f"slope {s:g}" for s in np.atleast_1d(attrs.get("dyn_slopes", []))}
        if "dyn_mark_above" in attrs:
            words.add(f"{name} > {float(np.ravel(attrs['dyn_mark_above'])[0]):g}")
        return words


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def _colorbars(fig):
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


# where the legend used to cover data (two_token_phase's d = 2 row): checked on the laid-out
# figure (a layout costs ~0.5 s, so not for every picture)
LAID_OUT = {"two_token_phase", "noisy_hysteresis", "noisy_phase"}


@pytest.mark.parametrize("name", [n if n in DEFAULT_TIER else pytest.param(n, marks=pytest.mark.slow) for n in NAMES])
def test_every_picture_labels_axes_bars_title_and_legend(runs, name):
    from types import SimpleNamespace

    path = runs(name)
    fig = figure(path)
    file = _File(path)
    doc = tomllib.loads(file.attrs["scenario"])
    var = doc["output"].get("plot") or dyn.systems.get(doc["scenario"]["system"]).default_plot
    dims = [d for d in file.dims[var] if d in file.vars]
    # the title: scenario and variable, then the settings with n and the runs
    title = fig._suptitle.get_text()
    assert _words(title).startswith(_words(f"{name}: {file.vars[var]['long_name']}"))
    assert _words(title).endswith(_words(settings(SimpleNamespace(attrs=file.attrs))))
    runs_per_point = doc["ensemble"]["runs"]
    assert f"{runs_per_point} run{'s' if runs_per_point != 1 else ''} per point" in title
    if "n" in doc.get("params", {}):
        assert f"n = {doc['params']['n']}" in title
    # axes and colour bars: long names, not variable names
    coords = {file.label(d) for d in dims}
    panels, bars = _panels(fig), _colorbars(fig)
    assert panels
    if len(panels) == 1:
        assert fig.get_size_inches()[0] == pytest.approx(7.0)  # the default style's width
    for ax in panels:
        x, y = _words(ax.get_xlabel()), _words(ax.get_ylabel())
        if bars:  # a heat map: both axes are sweep axes
            assert x in coords and y in coords and x != y, (x, y)
        else:  # curves against a sweep axis (or bars, whose ticks name the categories)
            assert x in coords or not x, x
            # profiles label the first panel of each row only (the row shares its quantity)
            assert y == file.label(var) or (not y and ax is not panels[0]), y
    texts = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    if not bars and var in file.errors:  # curves with errors: the legend says which
        assert {f"error bars: {file.errors[var]}", f"bands: {file.errors[var]}"} & set(texts)
    if bars and var in file.errors:  # heat maps with errors: their dots, and what they mean
        spread = {"one standard error": "one standard error", "95% Wilson interval": "half the 95% Wilson interval"}[
            file.errors[var]
        ]
        assert f"dots: {spread} > 5% of the colour range" in texts, texts
    assert {_words(b.get_ylabel()) for b in bars} <= {file.label(var)}
    assert len(bars) in (0, len(panels))
    # one legend, the figure's, saying only what the file declares, outside every panel
    assert not any(ax.get_legend() for ax in fig.axes) and len(fig.legends) <= 1
    for legend in fig.legends:
        texts = {_words(t.get_text()) for t in legend.get_texts()}
        for text in texts - file.legend_words(var):  # a curve's coordinates: "axis = value, ..."
            assert all(part.split(" = ")[0] in file.dims[var] for part in text.split(", ")), text
        if name in LAID_OUT:
            fig.draw_without_rendering()
            box = legend.get_window_extent()
            assert not any(box.overlaps(ax.get_window_extent()) for ax in panels)


@pytest.mark.parametrize("clim", [None, (0.0, 2.0)])
def test_heat_map_dots_the_cells_whose_error_exceeds_its_share_of_the_colours(clim):
    """A dot on exactly the cells whose error exceeds 5% of the colour range: the data's range
    (1) or the declared dyn_clim (2); none where the error is unknown (NaN)."""
    import matplotlib.pyplot as plt

    from dyn.presentation.plot import _heatmap

    values = np.linspace(0.0, 1.0, 12).reshape(4, 3)  # colour range 1 from the data
    spread = np.array([[0.01, 0.06, 0.04], [0.2, np.nan, 0.049], [0.051, 0.0, 0.11], [0.09, 0.3, 0.02]])
    coords = {"beta": [1.0, 2.0, 3.0, 4.0], "time": [0.5, 1.0, 1.5]}
    da = xr.DataArray(
        values,
        dims=("beta", "time"),
        coords=coords,
        name="r",
        attrs={"long_name": "order parameter"} | ({} if clim is None else {"dyn_clim": list(clim)}),
    )
    _, ax = plt.subplots()
    _heatmap(ax, da, spread=xr.DataArray(spread, dims=("beta", "time"), coords=coords))
    dots = [line for line in ax.lines if line.get_marker() == "."]
    span = 1.0 if clim is None else clim[1] - clim[0]
    with np.errstate(invalid="ignore"):
        i, j = np.nonzero(spread > 0.05 * span)
    expected = sorted(zip(np.asarray(coords["beta"])[i], np.asarray(coords["time"])[j], strict=True))
    drawn = sorted((x, y) for line in dots for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True))
    assert len(expected) == (6 if clim is None else 3)
    assert drawn == expected, (drawn, expected)


def test_paper_style_writes_vector_files_for_one_column(runs, tmp_path, capsys):
    from dyn.presentation.cli import main

    path = runs("two_token_phase")
    fig = figure(path, style="paper")
    width, _ = fig.get_size_inches()
    assert width == pytest.approx(3.4)
    (ax,) = _panels(fig)
    sizes = {ax.xaxis.label.get_size(), ax.yaxis.label.get_size(), fig._suptitle.get_size()}
    assert all(8 <= s <= 9 for s in sizes), sizes
    assert all(t.get_size() == 7 for t in ax.get_xticklabels())
    # the suffix chooses the format, PDF by default
    assert output_path(path, None, "paper") == path.with_suffix(".pdf")
    assert output_path(path, tmp_path / "p", "paper") == tmp_path / "p.pdf"
    assert output_path(path, tmp_path / "p.svg", "paper") == tmp_path / "p.svg"
    assert output_path(path, None) == path.with_suffix(".png")
    assert main(["plot", str(path), "--style", "paper", "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p.pdf").read_bytes().startswith(b"%PDF")
    capsys.readouterr()
    assert main(["plot", str(path), "--style", "paper", "--out", str(tmp_path / "p.png")]) == 2
    assert "--out: --style paper writes vector pictures" in capsys.readouterr().err


def test_branches_are_clipped_to_the_data_with_error_bars(runs):
    path = runs("noisy_hysteresis")
    fig = figure(path)
    (ax,) = _panels(fig)
    with dyn.open(path) as ds:
        sigma = ds["sigma"].values
        (line,) = [l for l in ax.lines if l.get_label() == "mean field: stable"]
        # the line keeps the file's values; only the part over the data's sigma is shown
        np.testing.assert_array_equal(line.get_ydata(), ds["r_branch_stable"].values)
        clip = line.get_clip_box() or line.get_clip_path().get_extents()
        (x0, _), (x1, _) = ax.transData.inverted().transform([[clip.x0, clip.y0], [clip.x1, clip.y1]])
        assert x0 == pytest.approx(sigma.min()) and x1 == pytest.approx(sigma.max())
        assert len(ax.containers) == ds.sizes["init"] and all(c.has_yerr for c in ax.containers)


def test_runs_split_between_states_are_inferred_from_the_file():
    from dyn.presentation.mixture import SPREAD_SHARE, split_points

    points = dict(dims=("sigma",), coords={"sigma": [3.0, 3.1, 3.2, 3.3]})
    scenario = "[ensemble]\nruns = 4\n"
    ds = xr.Dataset(
        {
            "r_stationary": xr.DataArray([0.9, 0.6, 0.5, 0.1], attrs={"dyn_role": "time_average"}, **points),
            # 3.1: passed drift and length, so the mixing check failed; 3.2: drifting, and its runs
            # spread over far more than SPREAD_SHARE of the span; 3.3: drifting, a narrow spread
            "r_stationary_drift": xr.DataArray([0.0, 1.0, 5.0, 5.0], **points),
            "r_stationary_ess": xr.DataArray([80.0, 80.0, 80.0, 80.0], **points),
            "r_stationary_se": xr.DataArray([0.01, 0.01, 0.2, 0.001], **points),
            "stationary": xr.DataArray([1.0, 0.0, 0.0, 0.0], attrs={"dyn_role": "stationary"}, **points),
        },
        attrs={"scenario": scenario},
    )
    assert 0.2 * 2 >= SPREAD_SHARE * 0.8 > 0.001 * 2
    assert split_points(ds, "r_stationary").values.tolist() == [False, True, True, False]
    one_run = ds.assign_attrs(scenario="[ensemble]\nruns = 1\n")
    assert split_points(one_run, "r_stationary") is None
    # a file with the mixing verdict itself: it alone decides (3.2 drifts with runs that agree)
    exact = ds.assign(r_stationary_mixing=xr.DataArray([0.3, 4.0, 0.9, 2.0], **points))
    assert split_points(exact, "r_stationary").values.tolist() == [False, True, False, True]


def test_compare_fits_the_asymptotic_range_and_its_slopes_leave_the_axes(tmp_path):
    import matplotlib
    from matplotlib.image import imread

    from dyn.presentation import comparison

    depth = np.array([8, 16, 32, 64, 128, 256, 512])
    rng = np.random.default_rng(0)
    # error 1/L plus a 1/L^2 correction at small L, 16 runs around it
    error = 1.0 / depth + 4.0 / depth**2
    distance = error[:, None] * (1 + 0.01 * rng.standard_normal((depth.size, 16)))
    result = xr.Dataset(
        {"distance": (("depth", "run"), distance)}, coords={"depth": ("depth", depth, {"long_name": "layers"})}
    )
    result["error"] = np.sqrt((result["distance"] ** 2).mean("run")).assign_attrs(long_name="strong error")
    result.attrs.update(along="form", reference="flow", at="all", source="x.h5", settings="n = 4; 16 runs per point")
    assert comparison.asymptotic(depth).tolist() == [False] * 3 + [True] * 4
    fit = comparison.fit_rate(result["error"].isel(depth=slice(3, None)), "depth")
    assert abs(fit.slope + 1) < abs(comparison.rates(result, "depth")[()].slope + 1)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    captured = {}
    real_close = plt.close
    plt.close = lambda fig=None: captured.setdefault("fig", fig)  # keep the figure to look at it
    try:
        out = comparison.plot(result, "depth", tmp_path / "c.png")
    finally:
        plt.close = real_close
    assert imread(out).shape[1] > 0
    fig = captured["fig"]
    (ax,) = fig.axes
    low, high = ax.get_ylim()
    values = result["error"].values
    assert low > values.min() / 3 and high < values.max() * 3  # the guides did not stretch it
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("fit on the filled points, depth = 64 ... 512") for t in texts)
    assert fig._suptitle.get_text().endswith("n = 4; 16 runs per point")
    assert ax.get_xlabel() == "layers" and ax.get_ylabel() == "strong error"
    real_close(fig)
