"""Where a result came from: the root attributes of every output file."""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import threading
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .scenario import Scenario

PACKAGES = ("dyn", "numpy", "scipy", "numba", "jax", "jaxlib", "diffrax", "h5py", "h5netcdf", "xarray")
NUMERIC = ("numpy", "scipy", "numba", "jax", "jaxlib", "diffrax")  # what a point's numbers rest on


_READING: list = []  # the thread prefetch() started, until someone waits for it


def prefetch() -> None:
    """Read the installed versions and the git commit in a thread, beside the start-up of a
    sweep (its system's import, its kernels' loads) rather than when its file is made: two git
    processes and ten packages' metadata are off the critical path of a short ``dyn run``.
    :func:`versions` and :func:`git_commit` wait for the thread; the values are the same."""
    if _READING or (_installed.cache_info().currsize and _git_commit.cache_info().currsize):
        return
    thread = threading.Thread(target=_read_all, name="dyn-provenance", daemon=True)
    _READING.append(thread)
    thread.start()


def _read_all() -> None:
    _installed()
    _git_commit()


def _settled() -> None:
    """Wait for :func:`prefetch`'s thread, if one runs (the cached reads then hit)."""
    while _READING:
        _READING.pop().join()


def versions() -> dict[str, str]:
    _settled()
    return dict(_installed())


@lru_cache(maxsize=1)
def _installed() -> tuple[tuple[str, str], ...]:
    """The installed versions, read once per process (reading package metadata is slow)."""
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return tuple(found.items())


def git_commit() -> str:
    """Commit of the source tree `dyn` runs from, with '+dirty' for uncommitted changes."""
    _settled()
    return _git_commit()


@lru_cache(maxsize=1)
def _git_commit() -> str:
    root = Path(__file__).resolve().parents[2]  # the repository holding dyn/
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def attributes(scenario: Scenario, command: str) -> dict[str, str]:
    return {
        "title": f"dyn sweep: {scenario.name}",
        "system": scenario.data["scenario"]["system"],
        "scenario": scenario.text,
        "scenario_hash": scenario.hash,
        "versions": json.dumps(versions(), sort_keys=True),
        "git_commit": git_commit(),
        "command": command,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "Conventions": "CF-1.8",
    }
