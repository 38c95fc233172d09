"""A resume meets whatever lies at --out: every file gets one line (exit 2) or a resume that
keeps nothing damaged. A plain HDF5 file, a sweep file whose scenario attributes are damaged or
missing, a file of another scenario: one line each. The theory curves written once with the
file (references, and the grids they lie on) carry a checksum like the points: a resume writes
a damaged one back from the theory, and refuses when the theory no longer gives the recorded
numbers. `dyn show` says when the saved states' folder is missing, rather than only "8/8 ok".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from dyn.engine.model_facts import CHECKSUM_ATTR, values_checksum
from dyn.presentation.cli import main

LINEAR = [
    "--set",
    "sweep.a=[-8.0, -4.0, 0.0]",
    "--set",
    "sweep.eps=[0.1, 1.0]",
    "--set",
    "params.depth=16",
    "--no-progress",
]
THEORY = ("a_first_zero", "a_discriminant", "eps_theory")


@pytest.fixture(scope="module")
def linear(tmp_path_factory) -> Path:
    """A finished small momentum_linear sweep: references over a theory grid eps_theory."""
    path = tmp_path_factory.mktemp("linear") / "linear.h5"
    assert main(["run", "momentum_linear", "--out", str(path), *LINEAR]) == 0
    return path


def _resume(path: Path, capsys) -> tuple[int, list[str]]:
    code = main(["run", "momentum_linear", "--out", str(path), *LINEAR])
    return code, capsys.readouterr().err.strip().splitlines()


def _flip(path: Path, name: str, element: int, byte: int = 3) -> None:
    """Flip one bit of element `element` of the contiguous dataset `name`, in the bytes."""
    with h5py.File(path, "r") as f:
        at = f[name].id.get_offset() + 8 * element + byte
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def test_references_carry_a_checksum_of_their_values_and_grid(linear):
    with h5py.File(linear, "r") as f:
        for name in ("a_first_zero", "a_discriminant"):
            var = f[name]
            grid = [d[0][()] for d in var.dims]
            assert int(var.attrs[CHECKSUM_ATTR][0]) == values_checksum(var[()], *grid)


@pytest.mark.parametrize("name", THEORY)
def test_a_damaged_theory_curve_is_written_back_by_a_resume(linear, tmp_path, capsys, name):
    path = tmp_path / "linear.h5"
    shutil.copy(linear, path)
    _flip(path, name, 5)
    with h5py.File(path, "r") as f, h5py.File(linear, "r") as g:
        assert not np.array_equal(f[name][()], g[name][()])
    code, err = _resume(path, capsys)
    assert code == 0
    assert any(name in line and "written again" in line for line in err), err
    with h5py.File(path, "r") as f, h5py.File(linear, "r") as g:
        for var in THEORY:
            np.testing.assert_array_equal(f[var][()], g[var][()])


def test_a_theory_curve_whose_checksum_is_damaged_too_is_refused(linear, tmp_path, capsys):
    path = tmp_path / "linear.h5"
    shutil.copy(linear, path)
    _flip(path, "a_first_zero", 5)
    with h5py.File(path, "r+") as f:
        f["a_first_zero"].attrs[CHECKSUM_ATTR] = np.int64(12345)
    code, err = _resume(path, capsys)
    assert code == 2 and len(err) == 1 and "a_first_zero" in err[0] and "checksum" in err[0], err


@pytest.mark.parametrize(
    "where, key, value",
    [
        ("psi_simulated", "long_name", "a label written"),  # a variable's label
        ("status", "flag_values", np.array([0, 2, 1, 3], "i1")),  # the flags that read the statuses
        ("/", "dyn_default_plot", "exp_a"),
    ],
)  # a record for readers
def test_a_resume_refuses_a_file_whose_attributes_changed(linear, tmp_path, capsys, where, key, value):
    """The attributes that say what the numbers are carry one checksum: a resume never keeps
    a changed one under good numbers (one line, exit 2); an unchanged file resumes."""
    path = tmp_path / "linear.h5"
    shutil.copy(linear, path)
    assert _resume(path, capsys)[0] == 0  # the checksum holds on the file as made
    with h5py.File(path, "r+") as f:
        target = f if where == "/" else f[where]
        assert key in target.attrs, sorted(target.attrs)
        target.attrs[key] = value
    code, err = _resume(path, capsys)
    assert code == 2 and len(err) == 1 and "attribute" in err[0], err


def test_a_reader_refuses_a_reference_that_fails_its_checksum(linear, tmp_path, capsys):
    path = tmp_path / "linear.h5"
    shutil.copy(linear, path)
    _flip(path, "a_discriminant", 2)
    code = main(["plot", str(path), "--out", str(tmp_path / "p.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "a_discriminant" in err[0], err


def _plain(path: Path) -> None:
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3.0)


def _no_scenario(path: Path) -> None:
    del_attrs(path, "scenario")


def _no_hash(path: Path) -> None:
    del_attrs(path, "scenario_hash")


def _number_scenario(path: Path) -> None:
    with h5py.File(path, "r+") as f:
        f.attrs["scenario"] = 7


def _other_scenario(path: Path) -> None:
    with h5py.File(path, "r+") as f:
        f.attrs["scenario_hash"] = "0" * 64


def del_attrs(path: Path, *names: str) -> None:
    with h5py.File(path, "r+") as f:
        for name in names:
            del f.attrs[name]


@pytest.mark.parametrize("make", [_plain, _no_scenario, _no_hash, _number_scenario, _other_scenario])
def test_a_resume_onto_any_file_is_one_line(linear, tmp_path, capsys, make):
    path = tmp_path / "linear.h5"
    shutil.copy(linear, path)
    make(path)
    code, err = _resume(path, capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("dyn: error: --out: "), err


def test_show_says_when_the_saved_states_folder_is_missing(tmp_path, capsys):
    from _scenarios import SMALL_SCENARIO

    scenario = tmp_path / "small.toml"
    scenario.write_text(SMALL_SCENARIO)
    sets = [
        "sweep.beta=[1.0]",
        "sweep.normalization=['SA']",
        "ensemble.runs=2",
        "output.trajectories=true",
        "params.depth=4",
    ]
    args = [a for s in sets for a in ("--set", s)]
    made = tmp_path / "made" / "states.h5"
    assert main(["run", str(scenario), "--out", str(made), "--no-progress", *args]) == 0
    capsys.readouterr()
    assert main(["show", str(made)]) == 0
    assert "MISSING" not in capsys.readouterr().out
    alone = tmp_path / "alone" / "states.h5"
    alone.parent.mkdir()
    shutil.copy(made, alone)  # without its folder
    assert main(["show", str(alone)]) == 0
    out = capsys.readouterr().out
    assert "MISSING: no folder states.h5.d" in out and "1 ok points read as NaN" in out, out


def test_dyn_open_refuses_a_device_as_the_command_line_does():
    import os

    from dyn.core.errors import ScenarioError

    with pytest.raises(ScenarioError, match="not a regular file .*device"):
        dyn_open(os.devnull)


def dyn_open(path):
    import dyn

    return dyn.open(path)
