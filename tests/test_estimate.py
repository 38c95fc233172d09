"""`dyn run --dry-run`: the file size is the run's own bound, the time is the sampled points'
seconds per run spread over the sweep, and nothing is written."""
import numpy as np

import dyn
from dyn.engine import store
from dyn.engine.estimate import estimate, sample_points
from dyn.presentation.cli import main


def test_sampled_points_spread_over_the_sweep_ends_included():
    assert sample_points(45) == [0, 22, 44]
    assert sample_points(2) == [0, 1] and sample_points(1) == [0]


def test_estimate_spreads_the_sampled_cost_over_every_point(small_scenario, tmp_path):
    sc = dyn.load(small_scenario)
    out = tmp_path / "never.h5"
    found = estimate(sc, out, workers=2)
    assert (found.points, found.runs, found.file) == (6, 6, out)
    assert found.file_bytes == store.estimated_bytes(sc)
    assert list(found.sampled) == [0, 2, 5] and all(v > 0 for v in found.sampled.values())
    # points 0, 1 take point 0's cost; 2, 3 point 2's; 4, 5 point 5's (nearest in sweep order)
    nearest = [0, 0, 2, 2, 5, 5]
    assert np.isclose(found.serial_seconds, 6 * sum(found.sampled[i] for i in nearest))
    text = str(found)
    assert text.splitlines()[0] == "dry run: small (attention_sphere): 6 points x 6 runs = 36 runs"
    assert "with 2 workers" in text and "compiling:" in text
    assert list(tmp_path.iterdir()) == [small_scenario]  # no file, no lock, no states


def test_dry_run_from_the_command_line_writes_nothing(small_scenario, tmp_path, capsys):
    out = tmp_path / "never.h5"
    assert main(["run", str(small_scenario), "--out", str(out), "--dry-run",
                 "--set", "ensemble.runs=3"]) == 0
    printed = capsys.readouterr().out
    assert "6 points x 3 runs = 18 runs" in printed and f"file: {out}, about" in printed
    assert list(tmp_path.iterdir()) == [small_scenario]
