"""Slow tier: the soak of benchmarks/soak.py, shortened (400 points, 3 driver kills, a worker
kill, a full disk): every resume bit for bit, no orphan process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parent.parent / "benchmarks" / "soak.py"


@pytest.mark.slow
def test_short_soak_has_no_difference_and_no_orphan(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SOAK), "--points", "400", "--kills", "3", "--samples", "2000", "--folder", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "orphans                    0" in done.stdout
    assert "differences                0 after driver kills, 0 after the worker kill, 0 after" in done.stdout
