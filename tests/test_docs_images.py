"""The pictures of docs/images are made by one command, `python docs/make_images.py`, and say
what a fresh run would: every picture has its recipe (a shipped scenario and the `dyn` command
that draws it), and the labels each `dyn plot` picture was drawn with (docs/images/labels.json,
written by the same command) are those a fresh, cut-down run of its scenario gets now."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"


def _make_images():
    spec = importlib.util.spec_from_file_location("docs_make_images", ROOT / "docs" / "make_images.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorded() -> dict:
    return json.loads((IMAGES / "labels.json").read_text())


def test_every_picture_has_its_recipe_and_every_recipe_its_picture():
    make = _make_images()
    pictures = {p.name for p in IMAGES.iterdir() if p.suffix in (".png", ".gif")}
    assert pictures == set(make.RECIPES)
    scenarios = {p.stem for p in (ROOT / "scenarios").glob("*.toml")}
    assert {r.scenario for r in make.RECIPES.values()} <= scenarios
    assert {r.draw for r in make.RECIPES.values()} == {"plot", "compare", "tokens", "animate"}


def test_the_recorded_labels_are_of_plot_pictures_and_hold_the_docs_front_picture():
    make = _make_images()
    recorded = _recorded()
    assert "attention_clusters.png" in recorded  # docs/index.md shows it
    for name, entry in recorded.items():
        recipe = make.RECIPES[name]
        assert recipe.draw == "plot" and entry["scenario"] == recipe.scenario, name
        assert entry["title"].startswith(f"{recipe.scenario}: ") and entry["axes"], name
    clusters = recorded["attention_clusters.png"]
    assert ["inverse temperature beta", "time t"] in clusters["axes"]
    assert "(delta = 0.001)" in clusters["title"]  # a threshold in a title shows its value


def test_the_cut_down_run_keeps_every_axis_at_two_values():
    make = _make_images()
    assert make.quick_sets("attention_clusters") == ("ensemble.runs=2", "sweep.beta={start = 0.1, stop = 9.0, num = 2}")
    sets = make.quick_sets("normalization_speed")
    assert sets[0] == "ensemble.runs=2" and all(s.count(",") == 1 or "num = 2" in s for s in sets[1:])


# slow tier: a run per recorded picture (seconds each once numba's cache holds the kernels,
# minutes when it compiles them)
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_recorded()))
def test_a_recorded_picture_has_the_labels_of_a_fresh_run(name, tmp_path):
    recorded = dict(_recorded()[name])
    recorded.pop("scenario")
    fresh = _make_images().fresh_labels(name, tmp_path)
    assert fresh == recorded, (
        f"docs/images/{name} is older than the code that labels it: run `python docs/make_images.py {name}`"
    )
