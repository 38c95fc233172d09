"""Reliability, issue 35, items 7, 8 and 10: the readers of sweep files (`dyn show`, `plot`,
`compare`, `animate`, `dyn.open`).

- 7: a file with damaged metadata, a variable holding inf, `--var message`, an `--out` suffix no
  writer knows: one line `dyn: error: ...` and exit 2 (or, for inf, a picture of the finite part
  that says how many values are infinite); never a traceback.
- 8: a FIFO or a device given as the scenario file or as the file to read, and a scenario file
  past the size limit: refused in one line, without blocking.
- 10: points that are not ok (diverged, failed) read as NaN in every output through `dyn.open`,
  whatever the file holds there (older files hold the diverged runs' numbers), and every picture
  marks them, the legend saying "diverged" / "failed".
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import dyn
from _scenarios import SMALL_SCENARIO
from dyn.core.errors import ScenarioError
from dyn.engine import scenario as scenario_module
from dyn.presentation import plot, tokens
from dyn.presentation.cli import main

# beta = 1000 with USA weights overflows: those points diverge (status 2)
DIVERGING = ["sweep.beta=[1.0, 1000.0]", "sweep.normalization=['USA']", "ensemble.runs=2"]
STATES = [
    *DIVERGING,
    "sweep.form=['flow', 'network']",
    "params.depth=4",
    "output.trajectories=true",
    "ensemble.common=['form']",
]
BARS = ["params.beta=1000.0", "sweep.normalization=['SA', 'USA']", "ensemble.runs=2"]
READERS = [
    ["show"],
    ["show", "--errors"],
    ["show", "--scenario"],
    ["plot"],
    ["plot", "--tokens"],
    ["compare", "--along", "form", "--reference", "flow", "--against", "beta"],
    ["animate"],
]
# HDF5 metadata blocks (object headers and their continuations, fractal heaps of attributes and
# links, their direct and indirect blocks) all carry a checksum; xarray reads every one of them when
# it opens a file, so a byte flipped in any of them makes the file unreadable
READ_AT_OPEN = [b"OHDR", b"OCHK", b"FRHP", b"FHDB", b"FHIB"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """`plain`: beta x time, beta = 1000 diverged; `states`: the same with saved states and a
    form axis (flow, network) for `dyn compare`; `bars`: SA and USA at beta = 1000 (USA
    diverged), no numeric axis."""
    folder = tmp_path_factory.mktemp("readers")
    scenario = folder / "small.toml"
    scenario.write_text(SMALL_SCENARIO)
    made = {
        name: dyn.run(scenario, folder / f"{name}.h5", overrides=sets, progress=False, log=io.StringIO())
        for name, sets in (("plain", DIVERGING), ("states", STATES), ("bars", BARS))
    }
    scenario.unlink()
    return made


def _copy(path: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / path.name
    shutil.copyfile(path, out)
    side = Path(f"{path}.d")
    if side.is_dir():
        shutil.copytree(side, Path(f"{out}.d"))
    return out


def _cli(capsys, argv: list[str]) -> tuple[object, str]:
    """Exit status (or the name of what escaped main) and stderr of the CLI, in-process."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    except Exception as exc:  # a traceback: recorded as the exception's name
        code = f"raised {type(exc).__name__}: {exc}"
    return code, capsys.readouterr().err


def _one_line(code, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2, f"{code}: {err}"
    assert len(lines) == 1 and lines[0].startswith("dyn: error: "), err
    return lines[0]


def _argv(command: list[str], path: Path, tmp_path: Path) -> list:
    argv = [command[0], path, *command[1:]]
    if command[0] in ("plot", "compare"):
        argv += ["--out", tmp_path / "out.png"]
    if command[0] == "animate":
        argv += ["--out", tmp_path / "out.gif"]
    return argv


# -- 7: damaged metadata, inf, text variables, unknown suffixes --------------------------------------


# the default tier damages the object header (the block every reader opens first); the other
# structures, ~3 s each, in the slow tier (the default tier's 3-minute budget)
@pytest.mark.parametrize(
    "signature", [READ_AT_OPEN[0]] + [pytest.param(s, marks=pytest.mark.slow) for s in READ_AT_OPEN[1:]]
)
def test_damaged_metadata_is_one_line_for_every_reader(files, tmp_path, capsys, signature):
    blocks = [m.start() for m in re.finditer(signature, files["states"].read_bytes())]
    assert blocks, signature
    path = _copy(files["states"], tmp_path / "damaged")
    data = bytearray(path.read_bytes())
    data[blocks[len(blocks) // 2] + 8] ^= 0x5A  # inside the block: its checksum fails
    path.write_bytes(bytes(data))
    for command in READERS:
        line = _one_line(*_cli(capsys, _argv(command, path, tmp_path)))
        assert str(path) in line, line
    with pytest.raises(ScenarioError, match="damaged"):
        dyn.open(path)


def test_a_global_heap_that_would_make_hdf5_loop_is_one_line(files, tmp_path, capsys):
    """Zeroed bytes in a global heap collection (dimension-scale references live there) read as
    an empty free-space object, on which HDF5 loops for ever (found by
    tests/test_reliability_fuzz.py): refused before HDF5 reads it."""
    path = _copy(files["states"], tmp_path / "heap")
    data = bytearray(path.read_bytes())
    heap = data.index(b"GCOL\x01\x00\x00\x00")
    at = heap + 16
    for _ in range(4):  # past the first objects (index, refcount, reserved, size, padded data)
        at += 16 + -(-int.from_bytes(data[at + 8 : at + 16], "little") // 8) * 8
    data[at : at + 64] = bytes(64)
    path.write_bytes(bytes(data))
    done = subprocess.run(
        [sys.executable, "-m", "dyn", "show", str(path)], capture_output=True, text=True, timeout=300
    )  # HDF5 looping: subprocess.TimeoutExpired
    _one_line(done.returncode, done.stderr)
    for command in READERS[1:]:
        line = _one_line(*_cli(capsys, _argv(command, path, tmp_path)))
        assert "global heap" in line, line
    with pytest.raises(ScenarioError, match="global heap"):
        dyn.open(path)
    scenario = tmp_path / "small.toml"  # a resume into it verifies the file: refused the same way
    scenario.write_text(SMALL_SCENARIO)
    sets = [arg for value in STATES for arg in ("--set", value)]
    done = subprocess.run(
        [sys.executable, "-m", "dyn", "run", str(scenario), "--out", str(path), "--no-progress", *sets],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "global heap" in _one_line(done.returncode, done.stderr.splitlines()[-1])


def _zeroed_mapping_heap(files, tmp_path) -> Path:
    """The states file with zeroed bytes in the global heap of its virtual dataset's mapping
    (around the source file's name): HDF5 loops for ever already listing the file's datasets
    (found by tests/test_reliability_fuzz.py's slow tier: it hung `dyn show`, and the walk of
    the heaps, which listed them in-process)."""
    path = _copy(files["states"], tmp_path / "mapping")
    data = bytearray(path.read_bytes())
    name = data.index(b"states.h5.d/point_0000000.h5")
    data[name - 17 : name + 45] = bytes(62)
    data[name + 56 : name + 77] = bytes(21)
    path.write_bytes(bytes(data))
    return path


def test_a_mapping_heap_on_which_hdf5_loops_is_refused_in_time(files, tmp_path):
    """The datasets are listed in a child process, stopped after its time (here 2 s)."""
    from dyn.engine.heaps import heap_problem

    path = _zeroed_mapping_heap(files, tmp_path)
    problem = heap_problem(path, seconds=2.0)
    assert problem.startswith("the HDF5 library did not finish listing its datasets in 2 s")
    assert heap_problem(files["states"], seconds=30.0) == ""  # the undamaged file


def test_a_threaded_process_lists_every_file_in_one_kept_child_replaced_after_a_stop(files, tmp_path):
    """With a second thread running (no fork then), the listing goes to one lister child kept
    across files; a file on which HDF5 loops gets that child killed, the next file a new one;
    and the child ends when its input closes."""
    import threading

    from dyn.engine import heaps

    hold = threading.Event()
    other = threading.Thread(target=hold.wait)
    other.start()
    try:
        assert not heaps._single_threaded()
        heaps.Lister.close()
        assert heaps.heap_problem(files["states"]) == ""
        first = heaps.Lister.mine().process
        assert [heaps.heap_problem(files["states"]) for _ in range(2)] == ["", ""]
        assert heaps.Lister.mine().process is first  # the same child answered all three
        problem = heaps.heap_problem(_zeroed_mapping_heap(files, tmp_path), seconds=1.0)
        assert problem.startswith("the HDF5 library did not finish listing its datasets in 1 s")
        assert first.poll() is not None  # killed
        assert heaps.heap_problem(files["states"]) == ""
        second = heaps.Lister.mine().process
        assert second is not first and second.poll() is None
        heaps.Lister.close()
        assert second.poll() == 0  # its input closed, it returned
        code, text = heaps._started(files["states"], 30.0)  # where there is no alarm: one child
        assert code == 0 and json.loads(text) == [list(e) for e in heaps._extents(files["states"])]
    finally:
        hold.set()
        other.join()


@pytest.mark.slow  # 30 s of waiting each, the default time; the default check above is the same walk
def test_a_mapping_heap_on_which_hdf5_loops_is_one_line_for_readers_and_resume(files, tmp_path):
    path = _zeroed_mapping_heap(files, tmp_path)
    done = subprocess.run([sys.executable, "-m", "dyn", "show", str(path)], capture_output=True, text=True, timeout=120)
    assert "did not finish listing" in _one_line(done.returncode, done.stderr)
    scenario = tmp_path / "small.toml"
    scenario.write_text(SMALL_SCENARIO)
    sets = [arg for value in STATES for arg in ("--set", value)]
    done = subprocess.run(
        [sys.executable, "-m", "dyn", "run", str(scenario), "--out", str(path), "--no-progress", *sets],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "did not finish listing" in _one_line(done.returncode, done.stderr.splitlines()[-1])


def test_dimensions_that_are_not_the_layout_are_one_line(files, tmp_path, capsys):
    """A damaged dimension-scale reference may name another dimension of the same length (the
    save times `time` for the states' `trajectory_time`): HDF5 reads it fine, the readers would
    index the wrong axes (found by tests/test_reliability_fuzz.py)."""
    path = _copy(files["states"], tmp_path / "dims")
    with h5py.File(path, "r+") as f:
        states = f["trajectory"]
        states.dims[4].detach_scale(f["trajectory_time"])
        states.dims[4].attach_scale(f["time"])
    for command in (["show"], ["plot", "--tokens"], READERS[5]):
        line = _one_line(*_cli(capsys, _argv(command, path, tmp_path)))
        assert "trajectory_time" in line or "save times" in line, line
    with pytest.raises(ScenarioError, match="damaged"):
        dyn.open(path)


def test_a_truncated_file_is_one_line(files, tmp_path, capsys):
    path = _copy(files["states"], tmp_path / "cut")
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size * 2 // 3)
    for command in READERS:
        _one_line(*_cli(capsys, _argv(command, path, tmp_path)))
    with pytest.raises(ScenarioError):
        with dyn.open(path) as ds:
            ds.load()


# the second case, ~2 s, in the slow tier (the default tier's 3-minute budget)
@pytest.mark.parametrize(
    "text, byte", [(b'mask = "none"', 10), pytest.param(b'system = "attention_sphere"', 20, marks=pytest.mark.slow)]
)
def test_a_damaged_byte_of_the_scenario_text_is_read_or_refused_in_one_line(files, tmp_path, capsys, text, byte):
    """HDF5 reads a string attribute whatever its bytes: one that is no longer UTF-8 reads as
    lone surrogates, which neither print nor draw (found by tests/test_reliability_fuzz.py)."""
    path = _copy(files["states"], tmp_path / "text")
    data = bytearray(path.read_bytes())
    at = data.index(text) + byte
    data[at] = 0xF7  # no UTF-8 text holds this byte
    path.write_bytes(bytes(data))
    for command in (["show", "--scenario"], ["plot"], READERS[5]):  # they printed and drew it
        code, err = _cli(capsys, _argv(command, path, tmp_path))
        if code != 0:
            _one_line(code, err)
    with dyn.open(path) as ds:
        assert "\ufffd" in ds.attrs["scenario"]  # the damaged byte, shown as such
        ds.attrs["scenario"].encode("utf-8")


def _set(path: Path, name: str, where, value) -> None:
    with h5py.File(path, "r+") as f:
        data = f[name][...]
        data[where] = value
        f[name][...] = data


def test_plot_of_infinite_values_draws_the_finite_part_and_says_so(files, tmp_path, capsys):
    path = _copy(files["plain"], tmp_path / "inf")
    _set(path, "pair_fraction", (0, 0, slice(1, 3)), [np.inf, -np.inf])  # beta = 1, 2 of 5 times
    _set(path, "time_to_one_cluster", (0, 0), np.inf)
    fig = plot.figure(path, "pair_fraction")
    title = fig._suptitle.get_text()
    assert re.search(r"2 of 10 values are infinite", title.replace("\n", " ")), title
    (mesh,) = [c for c in fig.axes[0].collections if hasattr(c, "get_array")]
    drawn = np.ma.masked_invalid(mesh.get_array())
    assert drawn.count() == 3  # the finite part (beta = 1000 diverged: no value)
    assert np.isfinite(mesh.norm.vmin) and np.isfinite(mesh.norm.vmax)
    title = plot.figure(path, "time_to_one_cluster")._suptitle.get_text()
    assert re.search(r"1 of 2 values is infinite", title.replace("\n", " ")), title
    for var in ("pair_fraction", "time_to_one_cluster"):
        code, err = _cli(capsys, ["plot", path, "--var", var, "--out", tmp_path / f"{var}.png"])
        assert code == 0, err


@pytest.mark.parametrize("var", ["message", "trajectory", "status"])
def test_plot_of_a_variable_that_is_no_number_per_point_is_one_line(files, tmp_path, capsys, var):
    line = _one_line(*_cli(capsys, ["plot", files["states"], "--var", var, "--out", tmp_path / "x.png"]))
    assert "--var" in line and "pair_fraction" in line, line
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["plot"],
        ["plot", "--tokens"],
        ["plot", "--style", "paper"],
        ["compare", "--along", "form", "--reference", "flow", "--against", "beta"],
    ],
)
@pytest.mark.parametrize("name", ["x.jpgx", "x.txt", "x.h5"])
def test_an_unsupported_out_suffix_is_one_line(files, tmp_path, capsys, command, name):
    argv = [command[0], files["states"], *command[1:], "--out", tmp_path / name]
    line = _one_line(*_cli(capsys, argv))
    assert "--out" in line, line
    assert not (tmp_path / name).exists()


# -- 8: FIFOs, devices, huge scenario files ---------------------------------------------------------

# a watchdog process: each SLEEP it reads where the test process's threads wait in the kernel
# (wchan); a thread blocked opening a FIFO waits in wait_for_partner: it is counted (a line in
# OPENED) and let go (an open for writing completes its open). After about LAST seconds it lets
# any reader go, counted too, should the kernel not say where threads wait.
WATCHDOG = """n=0
while :; do
  for t in /proc/{pid}/task/*/wchan; do
    if [ "$(cat "$t" 2>/dev/null)" = wait_for_partner ]; then echo >> '{opened}'; : > '{fifo}'; fi
  done
  n=$((n + 1))
  if [ $n -gt {last} ]; then echo >> '{opened}'; : > '{fifo}'; fi
  sleep 0.05
done"""


def _returns_without_blocking(call, fifo: Path):
    """`call()`, watched by WATCHDOG (a thread could not do it: h5py holds the GIL while HDF5
    opens a file). Fails if the call blocked opening the FIFO (a count, not a time); an open
    that cannot block (O_NONBLOCK, to check the file) is not counted."""
    opened = fifo.with_name(fifo.name + ".opened")
    script = WATCHDOG.format(pid=os.getpid(), opened=opened, fifo=fifo, last=20 * 600)
    watchdog = subprocess.Popen(["sh", "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        value = call()
    finally:
        watchdog.kill()
        watchdog.wait()
    assert not opened.exists(), f"blocked opening the FIFO {fifo}"
    return value


@pytest.mark.parametrize("command", [["run"], *READERS])
def test_a_fifo_is_refused_without_blocking(tmp_path, capsys, command):
    fifo = tmp_path / ("fifo.toml" if command == ["run"] else "fifo.h5")
    os.mkfifo(fifo)
    argv = _argv(command, fifo, tmp_path) + (["--out", tmp_path / "o.h5"] if command == ["run"] else [])
    code, err = _returns_without_blocking(lambda: _cli(capsys, argv), fifo)
    line = _one_line(code, err)
    assert "not a regular file" in line and "FIFO" in line, line


@pytest.mark.parametrize("command", READERS[-3:])
def test_a_fifo_among_the_saved_states_is_refused_without_blocking(files, tmp_path, capsys, command):
    path = _copy(files["states"], tmp_path / "states")
    fifo = Path(f"{path}.d") / "point_0000000.h5"
    fifo.unlink()
    os.mkfifo(fifo)
    line = _one_line(*_returns_without_blocking(lambda: _cli(capsys, _argv(command, path, tmp_path)), fifo))
    assert "not a regular file" in line, line


def _refusal(reader, path) -> str:
    try:
        reader(path)
    except ScenarioError as exc:
        return str(exc)
    return "no refusal"


@pytest.mark.parametrize("reader", [dyn.open, dyn.load])
def test_dyn_open_and_load_refuse_a_fifo_without_blocking(tmp_path, reader):
    fifo = tmp_path / "fifo.h5"
    os.mkfifo(fifo)
    message = _returns_without_blocking(lambda: _refusal(reader, fifo), fifo)
    assert "not a regular file" in message, message


@pytest.mark.parametrize("command", [["run"], ["show"], ["plot"]])
def test_a_device_is_refused(tmp_path, capsys, command):
    argv = _argv(command, Path(os.devnull), tmp_path) + (["--out", tmp_path / "o.h5"] if command == ["run"] else [])
    line = _one_line(*_cli(capsys, argv))
    assert "not a regular file" in line and "device" in line, line


def test_a_scenario_file_past_the_size_limit_is_refused(small_scenario, tmp_path, capsys):
    limit = getattr(scenario_module, "MAX_SCENARIO_BYTES", 2**20)
    assert limit == 2**20
    text = SMALL_SCENARIO + "#" * (limit - len(SMALL_SCENARIO) - 1) + "\n"
    small_scenario.write_text(text)
    assert small_scenario.stat().st_size == limit
    assert scenario_module.read_file(small_scenario)["scenario"]["name"] == "small"  # at the limit
    small_scenario.write_text(text + "#")
    with pytest.raises(ScenarioError, match="larger than 1 MiB"):
        scenario_module.read_file(small_scenario)
    line = _one_line(*_cli(capsys, ["run", small_scenario, "--out", tmp_path / "o.h5"]))
    assert "1 MiB" in line and not (tmp_path / "o.h5").exists()


# -- 10: points not ok read as NaN and are marked --------------------------------------------------


def _older(path: Path, folder: Path, value: float = 7.0) -> Path:
    """A copy of `path` as an older engine left it: the outputs of not-ok points hold numbers."""
    out = _copy(path, folder)
    with h5py.File(out, "r+") as f:
        bad = f["status"][...] != 1
        for name, var in f.items():
            if (
                isinstance(var, h5py.Dataset)
                and var.dtype.kind == "f"
                and name != "trajectory"
                and var.ndim >= bad.ndim
                and var.shape[: bad.ndim] == bad.shape
                and var.attrs.get("dyn_role", b"") not in ("reference", b"reference")
            ):
                data = var[...]
                data[bad] = value
                var[...] = data
    return out


def _raw(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return {n: v[...] for n, v in f.items() if isinstance(v, h5py.Dataset) and n != "trajectory"}


def test_points_not_ok_read_as_nan_in_every_output(files, tmp_path):
    path = _older(files["states"], tmp_path / "older")
    _set(path, "status", (0, 0, 1), 3)  # beta = 1, network: failed, its numbers left in the file
    raw = _raw(path)
    status = raw["status"]
    bad = status != 1
    assert bad.sum() == 3 and np.isfinite(raw["pair_fraction"][bad]).all()  # numbers in the file
    with dyn.open(path) as ds:
        outputs = [
            n
            for n, v in ds.data_vars.items()
            if v.dims[:3] == ds["status"].dims and v.dtype.kind == "f" and n != "trajectory"
        ]
        assert {"pair_fraction", "pair_fraction_se", "time_to_one_cluster", "p_one_cluster_lo", "n_one_cluster"} <= set(
            outputs
        )
        for name in outputs:
            values = ds[name].values
            assert np.isnan(values[bad]).all(), name
            np.testing.assert_array_equal(values[~bad], raw[name][~bad], err_msg=name)
        # lazily too: a selection reads NaN at the bad points
        assert np.isnan(ds["pair_fraction"].sel(beta=1000.0).values).all()
        assert np.isnan(ds["pair_fraction"].isel(form=[1, 0], time=-1).values[0, 0, 0])
        np.testing.assert_array_equal(ds["status"].values, status)
        assert "non-finite" in str(ds["message"].values.reshape(-1)[2])
        for coord in ("beta", "time", "form"):
            stored = [v.decode() if isinstance(v, bytes) else v for v in raw[coord].tolist()]
            assert ds[coord].values.tolist() == stored, coord
        assert np.isfinite(ds["trajectory"].sel(beta=1000.0).isel(trajectory_time=0).values).all()


def _hatched(ax, label: str) -> list:
    """The heat-map cells drawn for the mark whose legend starts with `label`: (x0, x1) each."""
    from matplotlib.patches import Rectangle

    hatches = {p.get_hatch() for p in ax.patches if str(p.get_label()).startswith(label)}
    cells = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_hatch() in hatches]
    return [(p.get_x(), p.get_x() + p.get_width()) for p in cells]


def _legend(fig) -> list[str]:
    return [t.get_text() for legend in fig.legends for t in legend.get_texts()]


def test_diverged_and_failed_points_are_marked_on_heat_maps(files, tmp_path):
    path = _older(files["plain"], tmp_path / "older")
    fig = plot.figure(path, "pair_fraction")
    assert any(t.startswith("diverged") for t in _legend(fig)), _legend(fig)
    cells = _hatched(fig.axes[0], "diverged")
    assert len(cells) == 5 and all(lo < 1000.0 < hi for lo, hi in cells)  # beta = 1000, 5 times
    _set(path, "status", (0, 0), 3)  # beta = 1 failed: its numbers are no answer either
    fig = plot.figure(path, "pair_fraction")
    assert any(t.startswith("failed") for t in _legend(fig)), _legend(fig)
    cells = _hatched(fig.axes[0], "failed")
    assert len(cells) == 5 and all(lo < 1.0 < hi for lo, hi in cells)
    (mesh,) = [c for c in fig.axes[0].collections if hasattr(c, "get_array")]
    assert np.ma.masked_invalid(mesh.get_array()).count() == 0  # neither is painted as a value


def test_diverged_points_are_marked_on_curves_bars_tokens_and_comparisons(files, tmp_path, capsys):
    path = _older(files["states"], tmp_path / "older")
    fig = plot.figure(path, "time_to_one_cluster")  # curves against beta, one per form
    assert any(t.startswith("diverged") for t in _legend(fig)), _legend(fig)
    marked = [
        line
        for line in fig.axes[0].lines
        if line.get_label().startswith("_") and np.asarray(line.get_xdata(), dtype=float).tolist() == [1000.0]
    ]
    assert len(marked) == 2  # at beta = 1000, one mark per curve (flow, network)
    for line in fig.axes[0].lines:  # the curves themselves hold no value there
        x, y = (np.asarray(v, dtype=float) for v in line.get_data())
        assert line in marked or not np.isfinite(y[x == 1000.0]).any()
    bars = _older(files["bars"], tmp_path / "bars")  # no numeric axis: a bar per normalization
    fig = plot.figure(bars, "time_to_one_cluster")
    assert any(t.startswith("diverged") for t in _legend(fig)), _legend(fig)
    picture = tokens.figure(path, ["beta=1000", "form=network"], None, 0)
    assert "diverged" in picture._suptitle.get_text(), picture._suptitle.get_text()
    from dyn.presentation import comparison

    result = comparison.compare(path, "form", "flow")
    assert np.isnan(result["error"].sel(beta=1000.0).values).all()
    fig = comparison.figure(result, "beta")
    assert any(t.startswith("diverged") for t in _legend(fig)), _legend(fig)
    code, err = _cli(
        capsys,
        ["compare", path, "--along", "form", "--reference", "flow", "--against", "beta", "--out", tmp_path / "c.png"],
    )
    assert code == 0, err
