"""Every field kind sweeps: a bool axis is stored as int8 with its kind recorded (NetCDF has no
boolean type), read back by `dyn.open` as bool, and show, plot and compare take it; the bool
point's numbers are those of the same setting run as a fixed parameter."""
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import dyn

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "hardmax_limit.toml"
SMALL = ["--set", "sweep.beta=[4.0]", "--set", "ensemble.runs=2", "--set", "integrator.horizon=5.0",
         "--set", "output.saves=6"]


def _dyn(*args, cwd):
    return subprocess.run([sys.executable, "-m", "dyn", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def switch_file(tmp_path_factory):
    """hardmax_limit swept over its bool switch, with common random numbers along it."""
    folder = tmp_path_factory.mktemp("kinds")
    done = _dyn("run", str(SCENARIO), *SMALL, "--set", "sweep.hardmax=[false,true]",
                "--set", 'ensemble.common=["beta","hardmax"]', "--out", "switch.h5", cwd=folder)
    assert done.returncode == 0, done.stderr
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
    done = _dyn("run", str(SCENARIO), *SMALL, "--set", "params.hardmax=true",
                "--set", 'ensemble.common=["beta"]', "--out", "fixed.h5", cwd=folder)
    assert done.returncode == 0, done.stderr
    with dyn.open(switch_file) as swept, dyn.open(folder / "fixed.h5") as fixed:
        for name in ("distance", "deviation", "crossed"):
            a = swept[name].sel(hardmax=True).values
            assert np.isfinite(a).all()
            np.testing.assert_array_equal(a.ravel(), fixed[name].values.ravel())
        # and the axis is not one value read twice: the hardmax point is its own limit (deviation
        # 0), the softmax point at beta = 4 is far from it
        assert swept["deviation"].sel(hardmax=True).item() == 0.0
        assert swept["deviation"].sel(hardmax=False).item() > 0.1


def test_show_plot_and_compare_read_a_bool_axis(switch_file):
    folder = switch_file.parent
    shown = _dyn("show", "switch.h5", cwd=folder)
    assert shown.returncode == 0, shown.stderr
    assert "False, True" in shown.stdout
    plotted = _dyn("plot", "switch.h5", "--out", "switch.png", cwd=folder)
    assert plotted.returncode == 0, plotted.stderr
    assert (folder / "switch.png").stat().st_size > 0
    for spelling in ("false", "False"):
        compared = _dyn("compare", "switch.h5", "--along", "hardmax", "--reference", spelling,
                        cwd=folder)
        assert compared.returncode == 0, compared.stderr
        assert "True" in compared.stdout
    wrong = _dyn("compare", "switch.h5", "--along", "hardmax", "--reference", "maybe", cwd=folder)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
