"""The provenance of a user's system covers every file of code it runs from its folder: the
named module, the modules it imports beside it or in a subpackage, and its generated kernels.
A resume against a set that differs in any byte is refused in one line naming the changed file
(a helper the drift calls, edited alone, would otherwise leave points of two models under one
scenario hash); `--overwrite` starts afresh; a file in the folder the model never imports
changes nothing."""

from __future__ import annotations

import io
import sys
import tomllib
from pathlib import Path

import h5py
import pytest

from dyn.presentation import cli
from dyn.user import reach

MODEL = """
import numpy as np

import dyn
{imports}


class Decay(dyn.Model):
    name, description, default_plot = "decay", "x' = -rate(theta) x", "x2"
    params = {{"theta": dyn.Field("float", 1.0, "rate")}}

    def drift(t, x, theta):
        return {call}(theta) * x

    def outputs(self, setup):
        return [dyn.Output("x2", "mean x^2", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 1, 1))

    def observe(self, spec, states):
        return dyn.Chunk({{"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))}})
"""
HELPER = """
import numba


@numba.njit
def rate(theta):
    return -{factor} * theta
"""
SCENARIO = """
[scenario]
name = "decay"
system = "prov_model:Decay"

[sweep]
theta = [0.5, 1.0]

[integrator]
method = "rk4"
dt = 0.1
horizon = 1.0

[output]
saves = 4
"""
OWN = ("prov_model", "prov_helper", "prov_pkg", "helper", "sub")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """An empty working folder; the test's modules forgotten afterwards (the next test's copy
    must import its own)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] in OWN]:
        del sys.modules[name]


def _cli(*args) -> tuple[int, str]:
    err = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        code = cli.main(list(args))
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    return code, err.getvalue()


def _write(folder: Path, where: str, factor: float = 1.0) -> Path:
    """The model, its helper at `where` ("helper.py" or "sub/helper.py"), the scenario."""
    if where == "helper.py":
        imports, call = "import helper", "helper.rate"
    else:
        (folder / "sub").mkdir(exist_ok=True)
        (folder / "sub" / "__init__.py").write_text("")
        imports, call = "from sub.helper import rate", "rate"
    (folder / "prov_model.py").write_text(MODEL.format(imports=imports, call=call))
    (folder / where).write_text(HELPER.format(factor=factor))
    (folder / "decay.toml").write_text(SCENARIO)
    return folder / "decay.toml"


def _interrupted(path: Path) -> None:
    """The file of a sweep stopped before its last point: that point pending again."""
    with h5py.File(path, "r+") as f:
        f["status"][-1] = 0


def _recorded(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        text = f.attrs["scenario"]
    return tomllib.loads(text.decode() if isinstance(text, bytes) else text)["scenario"]


@pytest.mark.parametrize("where", ["helper.py", "sub/helper.py"])
def test_a_resume_after_an_edit_of_only_a_helper_is_refused_naming_it(folder, where):
    scenario = _write(folder, where)
    code, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5")
    assert code == 0, err
    _interrupted(folder / "out.h5")
    before = (folder / "out.h5").read_bytes()
    (folder / where).write_text(HELPER.format(factor=2.0))  # only the helper changes
    code, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dyn: "), err
    assert f"code changed since: {where}" in lines[0]
    assert "prov_model.py" not in lines[0]  # only what changed is named
    assert (folder / "out.h5").read_bytes() == before  # nothing written
    code, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5", "--overwrite")
    assert code == 0, err
    assert _recorded(folder / "out.h5")["system_files"][where] == reach.listing(sys.modules["prov_model"].Decay)[where]


def test_the_provenance_lists_the_module_its_helpers_and_its_kernel(folder):
    scenario = _write(folder, "sub/helper.py")
    (folder / "unused.py").write_text("X = 1\n")  # in the folder, never imported
    code, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5")
    assert code == 0, err
    head = _recorded(folder / "out.h5")
    files = head["system_files"]
    assert set(files) == {"prov_model.py", "sub/__init__.py", "sub/helper.py", "<generated drift kernel>"}
    assert files["sub/helper.py"] == reach.identity.file_digest(str(folder / "sub" / "helper.py"))
    assert head["system_sha256"] == reach.combined(files)
    # a file the model does not import: edited, the resume goes on
    (folder / "unused.py").write_text("X = 2\n")
    _interrupted(folder / "out.h5")
    code, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5")
    assert code == 0, err
    assert "resuming" in err and "1 of 2 points already done" in err


def test_the_refusal_names_new_and_dropped_files_and_reads_files_of_before_the_listing():
    old = {"system_files": {"m.py": "a", "helper.py": "b"}, "system_sha256": "x"}
    now = {"system_files": {"m.py": "a", "sub/new.py": "c"}, "system_sha256": "y"}
    assert reach.changed(old, now) == (
        ": the system's code changed since: helper.py (no longer imported), sub/new.py (new)"
    )
    assert reach.changed(now, now) == ""
    # a file that records only the module's sha256 (no listing)
    before = {"system_sha256": "x"}
    assert reach.changed(before, dict(now, system_file="/a/m.py")) == (": the system's module /a/m.py changed since")
    assert reach.changed(before, {"system_sha256": "x"}) == ""


def test_the_combined_hash_changes_with_any_byte_and_any_name():
    files = {"m.py": "0" * 64, "helper.py": "1" * 64}
    assert reach.combined(files) == reach.combined(dict(reversed(files.items())))
    assert reach.combined(files) != reach.combined({"m.py": "0" * 64, "helper.py": "2" * 64})
    assert reach.combined(files) != reach.combined({"m.py": "0" * 64, "other.py": "1" * 64})


def test_a_model_inside_a_package_lists_the_package_its_helpers_and_nothing_outside(folder):
    (folder / "prov_pkg" / "sub").mkdir(parents=True)
    (folder / "prov_pkg" / "__init__.py").write_text("")
    (folder / "prov_pkg" / "sub" / "__init__.py").write_text("")
    (folder / "prov_pkg" / "sub" / "helper.py").write_text("def rate(theta):\n    return theta\n")
    (folder / "prov_pkg" / "model.py").write_text(
        "import json\nfrom .sub import helper\n\n\nclass System:\n    rate = helper.rate\n"
    )
    (folder / "prov_helper.py").write_text("X = 1\n")  # beside the package, never imported
    sys.path.insert(0, str(folder))
    import prov_pkg.model

    files = reach.listing(prov_pkg.model.System)
    assert set(files) == {
        "prov_pkg/__init__.py",
        "prov_pkg/model.py",
        "prov_pkg/sub/__init__.py",
        "prov_pkg/sub/helper.py",
    }
