"""Every field kind sweeps: a bool axis is stored as int8 with its kind recorded (NetCDF has no
boolean type), read back by `dyn.open` as bool, and show, plot and compare take it; the bool
point's numbers are those of the same setting run as a fixed parameter."""

from pathlib import Path

import h5py
import numpy as np
import pytest

import dyn
from dyn.presentation.cli import main

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "hardmax_limit.toml"
SMALL = [
    "--set",
    "sweep.beta=[4.0]",
    "--set",
    "ensemble.runs=2",
    "--set",
    "integrator.horizon=5.0",
    "--set",
    "output.saves=6",
]


@pytest.fixture(scope="module")
def switch_file(tmp_path_factory):
    """hardmax_limit swept over its bool switch, with common random numbers along it."""
    folder = tmp_path_factory.mktemp("kinds")
    assert (
        main(
            [
                "run",
                str(SCENARIO),
                *SMALL,
                "--set",
                "sweep.hardmax=[false,true]",
                "--set",
                'ensemble.common=["beta","hardmax"]',
                "--out",
                str(folder / "switch.h5"),
            ]
        )
        == 0
    )
    assert not (folder / "switch.h5.partial").exists()
    return folder / "switch.h5"


def test_a_bool_axis_is_int8_on_disk_and_bool_through_dyn_open(switch_file):
    with h5py.File(switch_file, "r") as f:
        assert f["hardmax"].dtype == np.int8
        assert f["hardmax"][()].tolist() == [0, 1]
        assert f["hardmax"].attrs["dyn_kind"] in ("bool", b"bool")
    with dyn.open(switch_file) as ds:
        assert ds["hardmax"].dtype == bool
        assert ds["hardmax"].values.tolist() == [False, True]
        assert (ds["status"].values == 1).all()


def test_the_swept_switch_gives_the_numbers_of_the_fixed_setting(switch_file):
    folder = switch_file.parent
    assert (
        main(
            [
                "run",
                str(SCENARIO),
                *SMALL,
                "--set",
                "params.hardmax=true",
                "--set",
                'ensemble.common=["beta"]',
                "--out",
                str(folder / "fixed.h5"),
            ]
        )
        == 0
    )
    with dyn.open(switch_file) as swept, dyn.open(folder / "fixed.h5") as fixed:
        for name in ("distance", "deviation", "crossed"):
            a = swept[name].sel(hardmax=True).values
            assert np.isfinite(a).all()
            np.testing.assert_array_equal(a.ravel(), fixed[name].values.ravel())
        # and the axis is not one value read twice: the hardmax point is its own limit (deviation
        # 0), the softmax point at beta = 4 is far from it
        assert swept["deviation"].sel(hardmax=True).item() == 0.0
        assert swept["deviation"].sel(hardmax=False).item() > 0.1


def test_show_plot_and_compare_read_a_bool_axis(switch_file, capsys, monkeypatch):
    folder = switch_file.parent
    monkeypatch.chdir(folder)
    assert main(["show", "switch.h5"]) == 0
    assert "False, True" in capsys.readouterr().out
    assert main(["plot", "switch.h5", "--out", "switch.png"]) == 0
    assert (folder / "switch.png").stat().st_size > 0
    for spelling in ("false", "False"):
        assert main(["compare", "switch.h5", "--along", "hardmax", "--reference", spelling]) == 0
        assert "True" in capsys.readouterr().out
    assert main(["compare", "switch.h5", "--along", "hardmax", "--reference", "maybe"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a value of hardmax" in err, err
