"""Shared fixtures: a small, fast attention scenario written to a temporary directory."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from _scenarios import SMALL_SCENARIO

os.environ.setdefault("JAX_PLATFORMS", "cpu")



@pytest.fixture
def small_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL_SCENARIO)
    return path
