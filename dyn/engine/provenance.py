"""Where a result came from: the root attributes of every output file."""
from __future__ import annotations

import datetime as _dt
import json
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .scenario import Scenario

PACKAGES = ("dyn", "numpy", "scipy", "numba", "jax", "jaxlib", "diffrax", "h5py", "h5netcdf", "xarray")
NUMERIC = ("numpy", "scipy", "numba", "jax", "jaxlib", "diffrax")  # what a point's numbers rest on


def versions() -> dict[str, str]:
    return dict(_installed())


@lru_cache(maxsize=1)
def _installed() -> tuple[tuple[str, str], ...]:
    """The installed versions, read once per process (35 ms a time: every file paid it)."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return tuple(found.items())


@lru_cache(maxsize=1)
def git_commit() -> str:
    """Commit of the source tree `dyn` runs from, with '+dirty' for uncommitted changes."""
    root = Path(__file__).resolve().parents[2]  # the repository holding dyn/
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def attributes(scenario: "Scenario", command: str) -> dict[str, str]:
    return {
        "title": f"dyn sweep: {scenario.name}",
        "system": scenario.data["scenario"]["system"],
        "scenario": scenario.text,
        "scenario_hash": scenario.hash,
        "versions": json.dumps(versions(), sort_keys=True),
        "git_commit": git_commit(),
        "command": command,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "Conventions": "CF-1.8",
    }
