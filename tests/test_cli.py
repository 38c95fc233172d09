"""The `dyn` command as a user meets it: exit codes, one-line errors, no stray files, plots."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

import dyn
from dyn.engine import executors
from dyn.engine.scenario import load
from dyn.presentation.cli import main


@pytest.mark.parametrize(
    "text, sets, fragment",
    [
        ("[scenario\nname = 'x'", [], "malformed TOML"),
        ("", [], "missing required table [scenario]"),
        (None, ["params.bogus=1"], "params.bogus: unknown key"),
        (None, ["nosuch.key=1"], "nosuch.key: --set names no key"),
        (None, ["scenario.system=nope"], "scenario.system: unknown system"),
        (None, ["integrator.method=rk45"], "integrator.method: unknown ODE method"),
        (None, ["params.d=1", "sweep.d=[1]"], "sweep.d[0]: must be >= 2"),
        (None, ["ensemble.runs=-3"], "ensemble.runs: must be >= 1"),
        (None, ["sweep.beta=[1.0, inf]"], "sweep.beta[1]: must be finite"),
        (None, ["params.n='many'"], "params.n: expected an integer"),
    ],
)
def test_bad_input_one_line_exit_2_no_file(tmp_path, capsys, small_scenario, text, sets, fragment):
    scenario = small_scenario
    if text is not None:
        scenario = tmp_path / "bad.toml"
        scenario.write_text(text)
    out = tmp_path / "never.h5"
    args = ["run", str(scenario), "--out", str(out)] + [a for s in sets for a in ("--set", s)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "never.h5.partial").exists()


def test_missing_file_and_bad_flags(tmp_path, capsys, small_scenario):
    assert main(["run", str(tmp_path / "absent.toml")]) == 2
    assert "no such scenario file" in capsys.readouterr().err
    assert main(["run", str(small_scenario), "--out", str(tmp_path / "x.h5"), "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "absent.h5")]) == 2


def test_run_show_plot_list_end_to_end(tmp_path, small_scenario, capsys):
    """`python -m dyn run` as a user types it (a fresh process: the entry point, the progress
    line, the picture); then show, plot and list through the same `main` in this process (each
    fresh interpreter costs ~3 s of imports and proves nothing more)."""
    out = tmp_path / "cli.h5"
    run = subprocess.run(
        [sys.executable, "-m", "dyn", "run", str(small_scenario), "--out", str(out), "--plot"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert out.exists() and out.with_suffix(".png").stat().st_size > 10_000
    assert main(["show", str(out)]) == 0
    show = capsys.readouterr().out
    assert "completion 6/6 points" in show and "pair_fraction" in show and "beta" in show
    png = tmp_path / "energy.png"
    assert main(["plot", str(out), "--var", "energy", "--out", str(png)]) == 0
    assert png.stat().st_size > 10_000
    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "attention_sphere" in listing and "attention_clusters" in listing


def test_unreachable_scheduler_is_one_line_and_leaves_no_output(tmp_path, capsys, small_scenario, monkeypatch):
    out = tmp_path / "never.h5"
    # port 1 on loopback: nothing listens there; the client gives up after its timeout (10 s by
    # default; 1 s here, the refusal is the same)
    monkeypatch.setattr(executors, "SCHEDULER_TIMEOUT", "1s")
    assert main(["run", str(small_scenario), "--out", str(out), "--scheduler", "tcp://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dyn: error: --scheduler: cannot reach") and len(err.splitlines()) == 1
    assert not out.exists()


def test_overwrite_replaces_another_scenarios_file_after_saying_so(tmp_path, capsys, small_scenario):
    out = tmp_path / "o.h5"
    base = ["run", str(small_scenario), "--out", str(out), "--no-progress"]
    assert main(base) == 0
    first = out.read_bytes()
    capsys.readouterr()
    other = base + ["--set", "ensemble.runs=3"]
    assert main(other) == 2  # another scenario: refused, and the refusal names the way out
    assert "--overwrite" in capsys.readouterr().err and out.read_bytes() == first
    assert main(other + ["--overwrite"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"replacing {out}: it holds scenario small (hash ")
    with dyn.open(out) as ds:
        assert ds.attrs["scenario_hash"] == load(small_scenario, ["ensemble.runs=3"]).hash
        assert (ds["status"] == 1).all()
    assert main(other + ["--overwrite"]) == 0  # its own file: resumed (nothing to do), kept
    assert "replacing" not in capsys.readouterr().err
    junk = tmp_path / "junk.h5"  # not a sweep file: never deleted
    junk.write_bytes(b"not a sweep file")
    assert main(["run", str(small_scenario), "--out", str(junk), "--overwrite"]) == 2
    assert junk.read_bytes() == b"not a sweep file"
    assert not list(tmp_path.glob("*.lock"))  # refused or finished, no lock file stays


def test_without_a_terminal_progress_is_a_line_per_interval(tmp_path, small_scenario, monkeypatch):
    from dyn.engine import runner

    monkeypatch.setattr(runner, "LOG_SECONDS", 0.0)  # a line per point
    log = tmp_path / "log.txt"
    with open(log, "w") as stream:  # a file: no terminal
        dyn.run(small_scenario, tmp_path / "p.h5", log=stream)
    lines = [line for line in log.read_text().splitlines() if " points" in line]
    total = load(small_scenario).count
    assert [line.split(":")[1].split(",")[0].split(" in ")[0].strip() for line in lines] == [
        f"{k}/{total} points" for k in range(1, total + 1)
    ]
    # the rate is measured from the first point on (before it: the compile), over a second at least
    assert "measuring the rate" in lines[0]
    assert all(
        line.startswith("small: ") and (line.endswith(" left") or "measuring the rate" in line) for line in lines
    )


def test_pictures_say_what_they_show_and_at_which_settings(tmp_path, small_scenario):
    from dyn.presentation.plot import figure

    out = dyn.run(small_scenario, tmp_path / "s.h5", progress=False, log=io.StringIO())
    fig = figure(out, "energy")
    title = fig._suptitle.get_text()
    with dyn.open(out) as ds:
        long_name = ds["energy"].attrs["long_name"]
    assert title.replace("\n", " ").startswith(f"small: {long_name}"[:60])
    # init = "uniform" is the default, so it goes unsaid
    assert title.splitlines()[-1] == "n = 5, d = 3, delta = 0.01; 6 runs per point"
    bars = [a for a in fig.axes if a.get_label() == "<colorbar>"]
    assert len(bars) == 2  # one heat map (beta, time) per normalization, each with its scale
    assert {b.get_ylabel().replace("\n", " ") for b in bars} == {long_name}
