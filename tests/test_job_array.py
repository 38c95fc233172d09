"""`--executor submitit` (dyn/engine/job_array.py) in submitit's local mode, the path a SLURM
array takes with local processes for nodes: the same numbers as the serial run bit for bit, a
killed driver resumed to the same numbers, a failed task's points failed with its log, and the
options checked in one line."""

from __future__ import annotations

import io
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.core.errors import ScenarioError
from dyn.engine import job_array

SETS = ["ensemble.runs=4", "sweep.beta=[1.0,2.0,4.0]", "sweep.n=[8]", "integrator.horizon=2.0"]
ARRAY = {"cluster": "local", "points_per_task": 1}


def _values(path: Path) -> dict:
    with dyn.open(path) as ds:
        assert (ds["status"].values == 1).all()
        return {v: ds[v].values for v in ds.data_vars if ds[v].dtype.kind == "f"}


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    out = tmp_path_factory.mktemp("serial") / "serial.h5"
    return _values(dyn.run("attention_clusters", out, overrides=SETS, progress=False, log=io.StringIO()))


@pytest.mark.slow  # a local submitit job array of processes
def test_a_local_array_gives_the_serial_numbers_bit_for_bit(serial, tmp_path):
    out = dyn.run(
        "attention_clusters",
        tmp_path / "array.h5",
        overrides=SETS,
        executor="submitit",
        array=ARRAY,
        progress=False,
        log=io.StringIO(),
    )
    got = _values(out)
    assert got.keys() == serial.keys()
    for name in serial:
        np.testing.assert_array_equal(got[name], serial[name], err_msg=name)
    assert not job_array.folder_for(out).exists()  # every task came back: nothing left over


KILL_AFTER_FIRST_WRITE = """
import os, signal, sys
from dyn.presentation import cli
from dyn.engine import store
write = store.Writer.write
def writing(self, index, result):
    write(self, index, result)
    os.kill(os.getpid(), signal.SIGKILL)
store.Writer.write = writing
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.slow  # a driver process killed mid-array and started again (tens of seconds)
def test_a_killed_driver_resumes_to_the_serial_numbers(serial, tmp_path):
    script = tmp_path / "kill.py"
    script.write_text(KILL_AFTER_FIRST_WRITE)
    out = tmp_path / "killed.h5"
    command = [
        "run",
        "attention_clusters",
        "--out",
        str(out),
        "--no-progress",
        "--executor",
        "submitit",
        "--slurm-points-per-task",
        "1",
    ]
    command += [arg for s in SETS for arg in ("--set", s)]
    env_sets = ["--set", "executor.cluster='local'"]
    killed = subprocess.run(
        [sys.executable, str(script), *command, *env_sets], capture_output=True, text=True, timeout=600
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).sum() == 1  # one point written before the kill
    dyn.run(
        "attention_clusters", out, overrides=SETS, executor="submitit", array=ARRAY, progress=False, log=io.StringIO()
    )
    got = _values(out)
    for name in serial:
        np.testing.assert_array_equal(got[name], serial[name], err_msg=name)


DYING_MODEL = """
import os
from toy_model import ToyOU


class Dying(ToyOU):
    def observe(self, spec, states):  # called in the point only (the driver validates the rest)
        if spec["x0"] > 1.0:
            print("leaving now", flush=True)
            os._exit(7)  # the task's process ends: a node lost, as the driver sees it
        return super().observe(spec, states)
"""

DYING_SCENARIO = """
[scenario]
name = "dying"
system = "dying_model:Dying"
[sweep]
x0 = [0.5, 2.0]
[ensemble]
runs = 2
[integrator]
backend = "numba"
method = "euler_maruyama"
dt = 0.01
horizon = 0.1
[output]
saves = 2
[executor]
cluster = "local"
points_per_task = 1
"""


@pytest.mark.slow  # a local job array whose task fails, then its log read (tens of seconds)
def test_a_failed_task_fails_its_points_with_the_end_of_its_log(tmp_path):
    shutil.copy(Path(__file__).with_name("toy_model.py"), tmp_path / "toy_model.py")
    (tmp_path / "dying_model.py").write_text(textwrap.dedent(DYING_MODEL))
    scenario = tmp_path / "dying.toml"
    scenario.write_text(DYING_SCENARIO)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dyn",
            "run",
            str(scenario),
            "--out",
            str(tmp_path / "dying.h5"),
            "--executor",
            "submitit",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 3, done.stderr  # some points failed
    with dyn.open(tmp_path / "dying.h5") as ds:
        assert ds["status"].values.tolist() == [1, 3]
        message = ds["message"].values[1]
        message = message.decode() if isinstance(message, bytes) else str(message)
        assert message.startswith("array task ") and "failed" in message, message
        assert "leaving now" in message  # the end of the task's log
    assert job_array.folder_for(tmp_path / "dying.h5").is_dir()  # the failed task's log stays


def test_chunks_follow_the_calibration_or_the_fixed_size():
    options = job_array.ArrayOptions(task_minutes=10.0)
    assert job_array.points_per_task(options, 30.0, 100) == 20  # 600 s of 30 s points
    assert job_array.points_per_task(options, 1e4, 100) == 1  # a point longer than a task: one
    assert job_array.points_per_task(job_array.ArrayOptions(array_parallelism=8), None, 100) == 13
    assert job_array.points_per_task(job_array.ArrayOptions(points_per_task=3), 30.0, 100) == 3
    assert job_array.chunk([5, 6, 7, 8, 9], 2) == [[5, 6], [7, 8], [9]]


@pytest.mark.parametrize(
    "table, key",
    [
        ({"partiton": "gpu"}, "executor.partiton"),
        ({"cpus_per_task": 0}, "executor.cpus_per_task"),
        ({"mem_gb": -1.0}, "executor.mem_gb"),
        ({"cluster": "pbs"}, "executor.cluster"),
    ],
)
def test_bad_options_are_one_line_naming_the_key(table, key):
    with pytest.raises(ScenarioError) as info:
        job_array.array_options(table)
    assert str(info.value).startswith(key) and "\n" not in str(info.value)


def test_the_executor_table_is_not_part_of_the_scenario_hash():
    from dyn.engine.scenario import load

    plain = load("attention_clusters", ["ensemble.runs=4"])
    placed = load("attention_clusters", ["ensemble.runs=4", "executor.partition='gpu'"])
    assert plain.hash == placed.hash and placed.executor == {"partition": "gpu"}
    assert "[executor]" not in placed.text
