"""User code cannot fake success or move the output: a model's module that calls sys.exit (at
import, or in a hook during the points) or os._exit in a pool worker ends the run in one line
naming the module and the hook, with exit status 2 before the points and 1 during them (never
the user's status: 0 would claim success); finished points stay, the rest stay pending. A
module that changes the working folder at import cannot move the output; a module named like a
library never replaces the library; `dyn list` survives a package that exits while loading."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from dyn.presentation import cli

ROOT = Path(__file__).resolve().parents[1]
MODEL = """
import os
import sys

import numpy as np

import dyn
{top}


class Decay(dyn.Model):
    name, description, default_plot = "decay", "x' = -theta x", "x2"
    params = {{"theta": dyn.Field("float", 1.0, "rate")}}

    def drift(t, x, theta):
        return -theta * x

    def outputs(self, setup):
        return [dyn.Output("x2", "mean x^2", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 1, 1))

    def observe(self, spec, states):
        if spec.values["theta"] > 0.75:  # the second point
            {observe}
        return dyn.Chunk({{"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))}})
"""
SCENARIO = """
[scenario]
name = "decay"
system = "{system}"

[sweep]
theta = [0.5, 1.0]

[integrator]
method = "rk4"
dt = 0.1
horizon = 1.0

[output]
saves = 10
"""
OWN = ("exit_model", "json")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    real = {name: sys.modules[name] for name in OWN if name in sys.modules}
    yield tmp_path
    for name in [m for m in sys.modules if m.split(".")[0] in OWN]:
        del sys.modules[name]
    sys.modules.update(real)


def _cli(*args) -> tuple[int, str]:
    err = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        code = cli.main(list(args))
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    return code, err.getvalue()


def _write(folder: Path, top: str = "", observe: str = "pass") -> Path:
    (folder / "exit_model.py").write_text(MODEL.format(top=top, observe=observe))
    (folder / "decay.toml").write_text(SCENARIO.format(system="exit_model:Decay"))
    return folder / "decay.toml"


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dyn: ") and "Traceback" not in err, err
    return lines[0]


def _error_line(err: str) -> str:
    """The one error line of a run that may have said it compiles first."""
    errors = [line for line in err.splitlines() if line.startswith("dyn: ")]
    assert len(errors) == 1 and errors[0].startswith("dyn: error: ") and "Traceback" not in err, err
    return errors[0]


def _statuses(path: Path) -> list[int]:
    with h5py.File(path, "r") as f:
        return [int(s) for s in f["status"][()]]


@pytest.mark.parametrize("code", ["0", "3", "None"])
def test_sys_exit_at_import_is_one_line_exit_2_naming_the_module(folder, code):
    scenario = _write(folder, top=f"sys.exit({code})")
    status, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5")
    assert status == 2
    line = _one_line(err)
    assert "exit_model" in line and "at import" in line
    assert not (folder / "out.h5").exists()


@pytest.mark.parametrize("code", ["0", "3"])
def test_sys_exit_in_observe_ends_the_run_with_1_keeping_the_finished_point(folder, code):
    scenario = _write(folder, observe=f"sys.exit({code})")
    status, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5")
    assert status == 1
    line = _error_line(err)
    assert "exit_model.observe" in line and f"sys.exit({code})" in line
    assert _statuses(folder / "out.h5") == [1, 0]  # the first point done, the second pending


def test_sys_exit_in_an_overridden_simulate_names_simulate(folder):
    scenario = _write(folder)
    with open(folder / "exit_model.py", "a") as f:
        f.write("\n\nclass Quits(Decay):\n    def simulate(self, spec, runs):\n        sys.exit(0)\n")
    scenario.write_text(SCENARIO.format(system="exit_model:Quits"))
    status, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5")
    assert status == 1
    assert "exit_model.simulate called sys.exit(0)" in _error_line(err)
    assert _statuses(folder / "out.h5") == [0, 0]


@pytest.mark.slow  # spawns a process pool (numba and the engine imported in each worker)
@pytest.mark.parametrize("call", ["sys.exit(0)", "os._exit(0)"])
def test_an_exit_in_a_process_pool_worker_names_the_hook_not_the_guard(folder, call):
    scenario = _write(folder, observe=call)
    status, err = _cli(
        "run", str(scenario), "--no-progress", "--out", "out.h5", "--executor", "process", "--workers", "1"
    )
    assert status == 1, err
    line = _error_line(err)
    assert "exit_model.observe" in line, err
    assert "__main__" not in line
    assert _statuses(folder / "out.h5") == [1, 0]


@pytest.mark.slow  # starts a Dask cluster; a worker that ends is retried before Dask gives up
@pytest.mark.parametrize("call", ["sys.exit(0)", "os._exit(0)"])
def test_an_exit_in_a_dask_worker_is_one_line_not_killed_worker(folder, call):
    scenario = _write(folder, observe=call)
    status, err = _cli("run", str(scenario), "--no-progress", "--out", "out.h5", "--executor", "dask", "--workers", "1")
    assert status == 1, err
    assert "KilledWorker" not in err and "Traceback" not in err, err
    assert "exit_model.observe" in _error_line(err), err
    assert _statuses(folder / "out.h5") == [1, 0]


def test_a_module_that_changes_the_working_folder_cannot_move_the_output(folder):
    (folder / "elsewhere").mkdir()
    scenario = _write(folder, top=f"os.chdir({str(folder / 'elsewhere')!r})")
    status, err = _cli("run", "decay.toml", "--no-progress", "--out", "out.h5")
    assert status == 0, err
    assert (folder / "out.h5").is_file()
    assert not (folder / "elsewhere" / "out.h5").exists()
    assert not list((folder / "elsewhere").iterdir())  # no lock, no partial file there
    assert scenario.is_file()


def test_a_module_named_like_an_imported_library_never_replaces_it(folder):
    (folder / "json.py").write_text("import dyn\nMARK = 1\nclass X(dyn.Model):\n    pass\n")
    (folder / "decay.toml").write_text(SCENARIO.format(system="json:X"))
    status, err = _cli("run", "decay.toml", "--no-progress", "--out", "out.h5")
    assert status == 2
    line = _one_line(err)
    assert "'json'" in line and "rename" in line
    assert sys.modules["json"] is json and not hasattr(json, "MARK")
    assert not (folder / "out.h5").exists()


PLUGIN = """
import dyn
import numpy as np


def repel(s, beta):
    return -beta * s


Repel = dyn.particles(repel, name="repel", description="repulsive tokens from a plugin",
                      params={"beta": dyn.Field("float", 1.0, "strength", gt=0.0)})
"""


def test_dyn_list_survives_packages_that_exit_or_raise_and_names_a_hidden_one(tmp_path):
    site = tmp_path / "site"
    for name, text in [
        ("good_plugin", PLUGIN),
        ("quitting_plugin", "import os\nos._exit(0)\n"),
        ("exiting_plugin", "import sys\nsys.exit(0)\n"),
        ("raising_plugin", "raise RuntimeError('no licence')\n"),
    ]:
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(text)
    info = site / "plugins-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugins\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[dyn.systems]\na_quitting = quitting_plugin:X\nb_exiting = exiting_plugin:X\n"
        "c_raising = raising_plugin:X\nz_good = good_plugin:Repel\n"
        "attention_sphere = good_plugin:Repel\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    listed = subprocess.run(
        [sys.executable, "-m", "dyn", "list"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
    )
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if line.startswith("  ")]
    by_name = {line.split()[0]: line for line in lines}
    assert "broken" in by_name["a_quitting"] and "ended the process" in by_name["a_quitting"]
    assert "broken" in by_name["b_exiting"] and "sys.exit" in by_name["b_exiting"]
    assert "broken" in by_name["c_raising"] and "no licence" in by_name["c_raising"]
    assert "from a plugin" in by_name["z_good"]  # listed after the broken ones
    hidden = [line for line in lines if "good_plugin:Repel is not used" in line]
    assert len(hidden) == 1 and hidden[0].split()[0] == "attention_sphere"
    assert "scenarios" in listed.stdout


def test_a_module_named_like_an_installed_package_not_yet_imported_is_refused(folder):
    if importlib.util.find_spec("ghp_import") is None:
        pytest.skip("ghp_import (installed with the docs' mkdocs) is not installed here")
    assert "ghp_import" not in sys.modules  # imported by nothing here
    (folder / "ghp_import.py").write_text("import dyn\nclass X(dyn.Model):\n    pass\n")
    (folder / "decay.toml").write_text(SCENARIO.format(system="ghp_import:X"))
    status, err = _cli("run", "decay.toml", "--no-progress", "--out", "out.h5")
    assert status == 2 and "'ghp_import'" in _one_line(err) and "installed" in err, err
    assert "ghp_import" not in sys.modules
