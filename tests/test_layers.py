"""The structure drawing (tools/layers.py): `dyn/` and `integrators/` have no import circle and no
import that runs up a floor, read from the source alone; and the check finds each kind of
fault in a small tree made for it (an upward import, a circle through deferred imports, a
facade's lazy name, a package on no floor)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tools import layers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report() -> layers.Report:
    return layers.check(layers.read_graph(ROOT))


def test_the_repository_has_no_circle_and_no_upward_import(report):
    assert report.faults == 0, layers.drawing(report)
    assert len(report.graph.modules) > 100 and len(report.graph.edges) > 500  # the tree was read


def test_every_package_of_the_tree_stands_on_a_floor(report):
    units = {layers.unit_of(m, package=p.name == "__init__.py") for m, p in report.graph.modules.items()}
    named = {u for _, us in layers.FLOORS for u in us}
    assert units == named  # no floor names a package that is gone, and none is missing


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def _faulty(tmp_path) -> layers.Report:
    root = _tree(
        tmp_path,
        {
            "integrators/__init__.py": "",
            "dyn/__init__.py": 'from importlib import import_module\n_LAZY = {"run": ".engine.runner"}\n',
            "dyn/core/__init__.py": "",
            "dyn/core/spec.py": "def later():\n    from ..engine import runner\n",  # up, deferred
            "dyn/engine/__init__.py": "",
            "dyn/engine/runner.py": "from ..core import spec\nfrom . import store\n",
            "dyn/engine/store.py": "def later():\n    from .runner import run\n",  # circle, deferred
            "dyn/systems/__init__.py": "import dyn\n\ndyn.run\n",  # through the facade: up
            "dyn/newpackage/__init__.py": "import integrators\n",  # on no floor
        },
    )
    return layers.check(layers.read_graph(root))


def test_an_upward_import_is_found_where_it_is_deferred_or_behind_the_facade(tmp_path):
    report = _faulty(tmp_path)
    upward = {(e.source, e.target, e.deferred) for e in report.upward}
    assert upward == {("dyn.core.spec", "dyn.engine.runner", True), ("dyn.systems", "dyn.engine.runner", False)}


def test_a_circle_of_modules_and_of_units_is_found(tmp_path):
    report = _faulty(tmp_path)
    assert report.module_circles == [["dyn.core.spec", "dyn.engine.runner", "dyn.engine.store"]]
    assert ["dyn.core", "dyn.engine"] in report.unit_circles
    assert report.unplaced == ["dyn.newpackage"]
    text = layers.drawing(report)
    assert "circle: dyn.core.spec -> dyn.engine.runner -> dyn.core.spec" in text
    assert "upward: dyn.core.spec -> dyn.engine.runner (dyn/core/spec.py:2) (inside a function)" in text


def test_the_command_exits_1_on_a_fault_and_0_on_the_repository(tmp_path, capsys):
    _faulty(tmp_path)
    assert layers.main(["--root", str(tmp_path)]) == 1
    assert layers.main(["--root", str(ROOT), "--dot", str(tmp_path / "units.dot")]) == 0
    assert "0 module circles, 0 unit circles, 0 upward imports" in capsys.readouterr().out
    dot = (tmp_path / "units.dot").read_text()
    assert dot.startswith("digraph layers {") and '"engine" -> "core"' in dot
