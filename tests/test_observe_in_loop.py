"""Observation in the loop for a user's dyn.Model (tests/observe_model.py): observe_state runs at
the save times inside the numba solve, so a run holds its state and a row of values, not its
trajectory; the values equal those of the same function on stored states, and the radius
follows its closed form. A model that would store more than the memory budget is refused with
its size, in one line."""

from __future__ import annotations

import io
import shutil
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.core.spec import CHUNK_BYTES
from dyn.presentation.cli import main

SCENARIO = """
[scenario]
name = "watch"
system = "observe_model:{model}"
[params]
n = {n}
[sweep]
scale = [1.0, 2.0]
[ensemble]
runs = {runs}
seed = 8
common = ["scale"]
[integrator]
backend = "numba"
method = "{method}"
{step}
horizon = 1.5
[output]
saves = {saves}
trajectories = {trajectories}
"""


@pytest.fixture
def watch(tmp_path):
    shutil.copy(Path(__file__).with_name("observe_model.py"), tmp_path / "observe_model.py")
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    sys.modules.pop("observe_model", None)


def _write(folder, model="Watched", n=16, runs=8, method="rk4", dt=0.01, saves=6, trajectories="false"):
    path = folder / f"{model}_{n}_{method}.toml"
    step = f"dt = {dt}" if method == "rk4" else "rtol = 1e-10\natol = 1e-10"
    path.write_text(
        SCENARIO.format(model=model, n=n, runs=runs, method=method, step=step, saves=saves, trajectories=trajectories)
    )
    return path


def _values(path, folder):
    out = dyn.run(path, folder / (path.stem + ".h5"), progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        return ds["x2"].values, ds["radius"].values, ds["time"].values


@pytest.mark.slow  # two models compiled (seconds)
def test_in_loop_values_equal_those_of_stored_states(watch):
    """The same observe_state in the loop (rk4, no saved states), on the states stored for
    trajectories, and a model observing stored states itself: the same numbers to rounding;
    the radius contracts as e^{-t} (x_i - mean)' = -(x_i - mean)."""
    loop = _values(_write(watch), watch)
    stored = _values(_write(watch, model="Stored"), watch)
    np.testing.assert_allclose(loop[0], stored[0], rtol=1e-13)
    np.testing.assert_allclose(loop[1], stored[1], rtol=1e-13)
    np.testing.assert_allclose(loop[1], loop[1][:, :1] * np.exp(-loop[2]), rtol=1e-9)
    np.testing.assert_allclose(loop[0][1], 2.0 * loop[0][0], rtol=1e-15)  # scale, by name


@pytest.mark.slow  # 256 runs of 1024 tokens
def test_the_loop_holds_a_state_per_run_not_a_trajectory(watch):
    """n = 1024, 256 runs, 300 saves: in the loop a run holds its step's states and its rows
    (run_bytes), all 256 runs within one chunk of the default budget, and the run's Python
    allocations peak below the budget (tracemalloc counts numpy's buffers); storing the
    trajectories would need 256 x 301 x 1024 x 2 x 8 bytes = 1.2 GiB."""
    import observe_model

    path = _write(watch, n=1024, runs=256, dt=0.005, saves=300)
    scenario = dyn.load(path)
    spec = scenario.spec(0)
    model = observe_model.Watched()
    assert model.run_bytes(spec) * 256 <= CHUNK_BYTES
    tracemalloc.start()
    try:
        out = dyn.run(path, watch / "big.h5", progress=False, log=io.StringIO())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < CHUNK_BYTES, peak
    with dyn.open(out) as ds:
        assert ds["x2"].shape == (2, 301) and (ds["status"].values == 1).all()


def test_in_the_loop_a_run_is_sized_by_its_step_and_rows(watch):
    """What the engine chunks by: in the loop 6 states of (n, d) and (saves + 1) x 2 values a
    run, 256 runs of n = 1024 within the budget of one chunk; off the loop its stored states."""
    import observe_model

    model = observe_model.Watched()
    spec = dyn.load(_write(watch, n=1024, runs=256, dt=0.005, saves=300)).spec(0)
    assert model.run_bytes(spec) == 8 * (6 * 1024 * 2 + 301 * 2)
    assert 256 * model.run_bytes(spec) <= CHUNK_BYTES
    spec = dyn.load(_write(watch, n=1024, runs=256, method="dopri5", saves=300)).spec(0)
    assert model.run_bytes(spec) == 8 * 301 * 1024 * 2


def test_storing_the_same_model_is_refused_with_its_size(watch, capsys):
    path = _write(watch, model="Stored", n=1024, runs=256, dt=0.005, saves=300)
    out = watch / "never.h5"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dyn: error: ensemble.runs:"), err
    assert "1.2 GiB" in err and "256 runs x 301 saves x 1024 x 2" in err and "observe_state" in err
    assert not out.exists()


@pytest.mark.slow  # an adaptive kernel compiled (seconds)
def test_observe_state_off_the_loop_chunks_the_stored_states(watch):
    """An adaptive numba method (dopri5) cannot observe in the loop: the states are stored,
    chunked by run_bytes to the budget, and observed by the same function."""
    import observe_model

    path = _write(watch, method="dopri5")
    scenario = dyn.load(path)
    spec = scenario.spec(0)
    model = observe_model.Watched()
    assert model.run_bytes(spec) == 8 * 7 * 16 * 2  # its stored states: 7 saves of (16, 2)
    x2, radius, times = _values(path, watch)
    np.testing.assert_allclose(radius, radius[:, :1] * np.exp(-times), rtol=1e-5)


@pytest.mark.slow  # the edited model compiles afresh (seconds)
def test_observe_state_must_match_observed(watch, capsys):
    text = Path(watch / "observe_model.py").read_text()
    (watch / "observe_model.py").write_text(
        text.replace('observed = ("x2", "radius")', 'observed = ("x2", "radius", "extra")')
    )
    path = _write(watch)
    assert main(["run", str(path), "--out", str(watch / "never.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "observed names 3 values" in err, err
