"""Reliability, issue 20, defects 4 and 5: every refusal is one line with exit status 2 and leaves
no file (not even a lock file); a finished run says by its exit status whether points diverged
or failed (3); bound messages agree; long values are cut; a huge sweep is refused before any
file is made."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

import dyn
from dyn.core.errors import ScenarioError
from dyn.engine import store
from dyn.engine.scenario import apply_values
from dyn.presentation.cli import main

FORMS = [
    "sweep.form=['flow', 'network']",
    "params.depth=4",
    "output.trajectories=true",
    "sweep.beta=[1.0, 2.0]",
    "sweep.normalization=['SA']",
    "ensemble.common=['form']",
    "ensemble.runs=2",
]


def _refused(capsys, args: list[str]) -> str:
    """Run the CLI; it must exit 2 with exactly one line `dyn: error: ...` and no traceback."""
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith("dyn: error: ") and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    return err


def _listing(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("where", ["file", "set"])
def test_toml_nested_800_levels_is_one_line(small_scenario, tmp_path, capsys, where):
    deep = "[" * 800 + "]" * 800
    if where == "file":
        small_scenario.write_text(small_scenario.read_text() + f"\n[output.deep]\nx = {deep}\n")
        sets = []
    else:
        sets = ["--set", f"params.beta={deep}"]
    before = _listing(tmp_path)
    err = _refused(capsys, ["run", str(small_scenario), "--out", str(tmp_path / "o.h5"), *sets])
    assert "nested more than" in err
    assert _listing(tmp_path) == before


def test_nesting_is_refused_from_python_too():
    value = []
    for _ in range(500):
        value = [value]
    with pytest.raises(ScenarioError, match="nested more than"):
        apply_values({"scenario": {}}, {"params.beta": value})


@pytest.fixture
def plain(tmp_path):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(3.0)
        f.attrs["scenario"] = "[scenario]\nname = 'not dyn'\n"  # an attribute alone is not enough
    return path


@pytest.mark.parametrize(
    "command", [["show"], ["show", "--scenario"], ["plot"], ["compare", "--along", "form", "--reference", "flow"]]
)
def test_a_plain_hdf5_file_is_refused_in_one_line(plain, capsys, command):
    err = _refused(capsys, [command[0], str(plain), *command[1:]])
    assert "not a dyn sweep file" in err


def test_compare_without_the_states_folder_is_one_line(small_scenario, tmp_path, capsys):
    out = dyn.run(small_scenario, tmp_path / "c.h5", progress=False, overrides=FORMS)
    assert (
        main(
            [
                "compare",
                str(out),
                "--along",
                "form",
                "--reference",
                "flow",
                "--against",
                "beta",
                "--out",
                str(tmp_path / "c.png"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    for path in (out.with_name("c.h5.d") / "point_0000000.h5", out.with_name("c.h5.d")):
        if path.is_dir():
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
        else:
            path.unlink()
        err = _refused(capsys, ["compare", str(out), "--along", "form", "--reference", "flow", "--against", "beta"])
        assert "c.h5.d/" in err


def test_refused_runs_leave_no_lock_file(small_scenario, tmp_path, capsys):
    text = tmp_path / "notes.txt"
    text.write_text("not a sweep file\n")
    other = dyn.run(
        small_scenario, tmp_path / "other.h5", progress=False, overrides=["sweep.beta=[1.0]", "ensemble.runs=1"]
    )
    capsys.readouterr()
    before = _listing(tmp_path)
    cases = [
        ["--out", str(text)],
        ["--out", str(other)],
        ["--out", str(small_scenario)],
        ["--out", str(tmp_path / "new.h5"), "--executor", "dask", "--scheduler", "bogus"],
    ]
    for extra in cases:
        _refused(capsys, ["run", str(small_scenario), "--no-progress", *extra])
        assert _listing(tmp_path) == before, extra


def test_a_finished_run_leaves_no_lock_file(small_scenario, tmp_path):
    out = dyn.run(small_scenario, tmp_path / "ok.h5", progress=False, overrides=["ensemble.runs=1"])
    assert not store.lock_path(out).exists()


def test_library_texts_with_newlines_stay_one_line():
    error = ScenarioError(
        "--out", "cannot open x.h5: file write failed: time = Tue\n, filename = 'x.h5'\r\n errno = 28\tmore"
    )
    assert "\n" not in str(error) and "\r" not in str(error) and "errno = 28" in str(error)


def test_exit_status_3_when_points_diverged_or_failed(small_scenario, tmp_path, capsys):
    ok = ["run", str(small_scenario), "--no-progress", "--set", "ensemble.runs=1"]
    assert main([*ok, "--out", str(tmp_path / "ok.h5")]) == 0
    # USA weights overflow at beta = 1000: that point diverges (and stays so on a resume)
    bad = [*ok, "--out", str(tmp_path / "bad.h5"), "--set", "sweep.beta=[1.0, 1000.0]"]
    assert main(bad) == 3
    assert main(bad) == 3
    assert "diverged" in capsys.readouterr().err


@pytest.mark.parametrize(
    "key, extra",
    [
        ("integrator.dt", []),
        ("output.t_min", ["output.spacing=log"]),
        ("integrator.atol", ["integrator.method=dopri5"]),
        ("integrator.rtol", ["integrator.method=dopri5"]),
    ],
)
def test_bound_messages_agree(small_scenario, tmp_path, capsys, key, extra):
    sets = [a for s in extra for a in ("--set", s)]
    base = ["run", str(small_scenario), "--out", str(tmp_path / "b.h5"), *sets]
    negative = _refused(capsys, [*base, "--set", f"{key}=-0.01"])
    zero = _refused(capsys, [*base, "--set", f"{key}=0"])
    assert negative.replace("-0.01", "X") == zero.replace("got 0", "got X"), (negative, zero)
    assert "must be > 0" in zero


@pytest.mark.parametrize("value", ["x" * 100_000, "[" + "1," * 50_000 + "]]", "a=b" * 30_000])
def test_a_100_kB_set_value_is_cut(small_scenario, tmp_path, capsys, value):
    for item in (f"params.normalization={value}", value):
        err = _refused(capsys, ["run", str(small_scenario), "--out", str(tmp_path / "l.h5"), "--set", item])
        assert len(err) < 700, len(err)


def test_a_huge_sweep_is_refused_before_any_file(small_scenario, tmp_path, capsys):
    """10^5 points of 101 saves: about 1.5 GB past the 1 GiB limit; refused in seconds."""
    huge = [
        "--set",
        "sweep.beta={start = 0.1, stop = 9.0, num = 1000}",
        "--set",
        "sweep.delta={start = 0.01, stop = 0.1, num = 100}",
        "--set",
        "sweep.normalization=['SA']",
        "--set",
        "output.saves=100",
    ]
    err = _refused(capsys, ["run", str(small_scenario), "--out", str(tmp_path / "h.h5"), *huge])
    assert "--force" in err and "GB" in err
    assert _listing(tmp_path) == ["small.toml"]


def test_force_goes_past_the_size_limit(small_scenario, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(store, "MAX_FILE_BYTES", 1000)
    args = ["run", str(small_scenario), "--no-progress", "--set", "ensemble.runs=1"]
    _refused(capsys, [*args, "--out", str(tmp_path / "f.h5")])
    assert main([*args, "--out", str(tmp_path / "f.h5"), "--force"]) == 0


def test_the_size_estimate_bounds_the_file(small_scenario, tmp_path):
    for sets in (["ensemble.runs=1"], ["ensemble.runs=1", *FORMS[:5]]):
        out = dyn.run(small_scenario, tmp_path / "e.h5", progress=False, overrides=sets)
        estimate = store.estimated_bytes(dyn.load(small_scenario, sets))
        assert out.stat().st_size <= estimate < out.stat().st_size + 4 * 2**20
        out.unlink()


def test_a_failed_point_message_is_one_line(small_scenario, tmp_path, capsys, monkeypatch):
    """A library error text with newlines (HDF5's are) becomes a one-line point message."""
    from dyn.systems.attention_sphere import AttentionSphere

    def broken(self, spec, runs):
        raise OSError("file write failed: time = Tue\n, filename = 'x.h5', errno = 28")

    monkeypatch.setattr(AttentionSphere, "simulate", broken)
    out = tmp_path / "f.h5"
    assert (
        main(
            [
                "run",
                str(small_scenario),
                "--out",
                str(out),
                "--no-progress",
                "--set",
                "sweep.beta=[1.0]",
                "--set",
                "sweep.normalization=['SA']",
            ]
        )
        == 3
    )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "errno = 28" in err[0]  # the point's line, then the summary
    with dyn.open(out) as ds:
        assert "\n" not in ds["message"].values.reshape(-1)[0]


def test_an_os_error_is_one_line(small_scenario, tmp_path, capsys, monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError(5, "Input/output error\nwhile writing")

    monkeypatch.setattr(store, "check_size", refuse)
    assert main(["run", str(small_scenario), "--out", str(tmp_path / "e.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dyn: error: ") and len(err.splitlines()) == 1
