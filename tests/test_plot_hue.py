"""`dyn plot --hue AXIS`: one curve per value of AXIS on a panel, each curve the file's values at
that value (checked line by line against the data), a legend entry per value; a series is drawn
against its time with panels per point; a threshold a title names shows its value."""

from __future__ import annotations

import io

import numpy as np
import pytest

import dyn
from dyn.core.errors import ScenarioError
from dyn.presentation.analysis import scenario_of
from dyn.presentation.cli import main
from dyn.presentation.plot import figure
from dyn.presentation.words import value_text

SETS = ["ensemble.runs=3", "sweep.beta=[0.5,1.0,2.0,4.0]", "sweep.n=[6,12]", "integrator.horizon=3.0", "output.saves=4"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("hue") / "hue.h5"
    return dyn.run("attention_clusters", out, overrides=SETS, progress=False, log=io.StringIO())


def _lines(ax):
    """(label, data line) of each labelled curve (an errorbar container: its line first)."""
    return [(c.get_label(), c.lines[0]) for c in ax.containers if not c.get_label().startswith("_")]


def test_one_curve_per_value_of_the_hue_axis_on_one_panel(swept):
    fig = figure(swept, "pair_fraction", sel=["time=3"], hue="n")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_lines()]
    assert len(panels) == 1
    lines = _lines(panels[0])
    assert [label for label, _ in lines] == ["n = 6", "n = 12"]
    with dyn.open(swept) as ds:
        for (_, line), n in zip(lines, (6, 12), strict=True):
            want = ds["pair_fraction"].sel(n=n, time=3.0).values
            np.testing.assert_array_equal(line.get_xdata(), ds["beta"].values)
            np.testing.assert_array_equal(line.get_ydata(), want)


def test_a_series_is_drawn_against_time_with_a_panel_per_point(swept):
    fig = figure(swept, "pair_fraction", hue="n")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_lines()]
    assert len(panels) == 4  # one per beta
    assert all("time" in ax.get_xlabel() for ax in panels)
    assert all(len(_lines(ax)) == 2 for ax in panels)


def test_a_threshold_in_the_title_shows_its_value(swept):
    with dyn.open(swept) as ds:
        delta = scenario_of(ds)["params"]["delta"]
    fig = figure(swept, "pair_fraction", sel=["time=3"], hue="n")
    assert f"delta = {value_text(delta)}" in fig.get_suptitle()


@pytest.mark.parametrize(
    "hue, sel, said", [("gamma", [], "is not an axis"), ("n", ["time=3", "beta=1"], "no numeric axis besides n")]
)
def test_a_hue_without_curves_to_draw_is_one_line(swept, hue, sel, said):
    with pytest.raises(ScenarioError, match=said):
        figure(swept, "pair_fraction", sel=sel, hue=hue)


def test_the_command_line_takes_hue(swept, tmp_path, capsys):
    assert (
        main(
            [
                "plot",
                str(swept),
                "--var",
                "pair_fraction",
                "--sel",
                "time=3",
                "--hue",
                "n",
                "--out",
                str(tmp_path / "hue.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "hue.png").stat().st_size > 0
    assert main(["plot", str(swept), "--hue", "gamma"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_an_integer_axis_is_drawn_as_categories_ticked_at_its_values(swept):
    fig = figure(swept, "pair_fraction", sel=["time=3"], hue="beta")
    (ax,) = [ax for ax in fig.axes if ax.get_visible() and ax.get_lines()]
    np.testing.assert_array_equal(ax.get_xticks(), [6, 12])  # n: no ticks between counts
    assert [label for label, _ in _lines(ax)] == ["beta = 0.5", "beta = 1", "beta = 2", "beta = 4"]
