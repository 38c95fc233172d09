"""The time left that a run's progress shows leaves out the start-up: the first point's time is
mostly numba compiling its kernels (or JAX its programs), and a rate that counts it makes the first
estimates many times too long (issue 39: "about 23 min left" for a 75 s run). Checked with a fake
clock: a 60 s compile, then a point a second."""

from __future__ import annotations

import io

import pytest
from tqdm import tqdm

from dyn.engine import runner


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(runner.time, "monotonic", fake)
    return fake


def test_the_log_line_measures_the_rate_after_the_first_point(clock):
    log = io.StringIO()
    progress = runner.LogProgress("x", 100, log)
    clock.now = 60.0  # the compile: the first point ends at 60 s
    progress.update()
    assert log.getvalue().splitlines()[-1] == (
        "x: 1/100 points in 60 s, measuring the rate (the first point's time is mostly start-up: "
        "compiling kernels on first use)"
    )
    for _ in range(20):  # then a point a second
        clock.now += 1.0
        progress.update()
    last = log.getvalue().splitlines()[-1]
    # 21 done at 80 s; 79 left at 1 point/s: 79 s (counting the compile: 79 x 80/21 = 301 s)
    assert last == "x: 21/100 points, 1 points/s, about 79 s left"


def test_the_bar_restarts_its_clock_at_the_first_point():
    clock = Clock()
    bar = tqdm(total=100, file=io.StringIO(), mininterval=0, miniters=1, disable=False)
    bar._time = clock
    bar.reset(total=100)
    bar.set_postfix_str(runner.STARTING, refresh=False)
    clock.now = 60.0
    bar.update()
    runner._restart_clock(bar)
    assert bar.n == 1 and bar.postfix == ""
    for _ in range(20):
        clock.now += 1.0
        bar.update()
    rate = bar.format_dict["rate"]
    assert rate == pytest.approx(1.0, rel=1e-9)  # the compile's minute is not in it
    assert "00:01:19" in bar.format_meter(**bar.format_dict) or "01:19" in bar.format_meter(**bar.format_dict)
    bar.close()


def test_a_run_without_a_terminal_says_it_is_starting_then_the_rate(tmp_path, monkeypatch):
    """The whole path: `dyn.run` writing to a log that is not a terminal."""
    import dyn

    monkeypatch.setattr(runner, "LOG_SECONDS", 0.0)  # a line per point
    scenario = tmp_path / "probe.toml"
    scenario.write_text(
        '[scenario]\nname = "probe"\nsystem = "probe"\n[params]\nsamples = 10\n[sweep]\nlabel = [1.0, 2.0, 3.0]\n'
    )
    log = io.StringIO()
    dyn.run(scenario, tmp_path / "p.h5", log=log)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("probe: ")]
    assert lines[0].startswith("probe: 1/3 points in ") and "measuring the rate" in lines[0]
