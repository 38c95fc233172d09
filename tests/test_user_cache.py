"""The cache of a user model's numba adapters (dyn/user/cache.py, docs/your_own_system.md): a
second process loads the adapter instead of compiling it, and an edit of anything the user's
drift compiles from (its own body, a constant of its module, a jitted helper in another file)
gives the new numbers in the next process, never the cached old ones."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dyn.user import cache, identity

ROOT = Path(__file__).resolve().parents[1]

MODEL = """
import numba
import numpy as np

import dyn
import edited_helper

OFFSET = {offset}


class Edited(dyn.Model):
    name, description, default_plot = "edited", "edited", "x2"
    params = {{"theta": dyn.Field("float", 1.0, "rate")}}

    def drift(t, x, theta):
        return {body}

    def outputs(self, setup):
        return [dyn.Output("x2", "x2", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 2, 3))

    def observe(self, spec, states):
        return dyn.Chunk({{"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))}})
"""
HELPER = """
import numba


@numba.njit
def gain(x):
    return {gain} * x
"""
# one process: the model's numba drift at x = 1, theta = 2, and whether it came from the cache
PROBE = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import edited_model
drift = edited_model.Edited.numba_function("drift")
x, out = np.ones((2, 3)), np.empty((2, 3))
drift(0.0, x, np.array([2.0]), out, np.empty(0))
print(json.dumps({"value": out[0, 0], "hits": sum(drift.stats.cache_hits.values())}))
"""
BODY = "edited_helper.gain(-theta * x) + OFFSET"


def _write(folder: Path, body=BODY, offset=0.0, gain=1.0) -> None:
    (folder / "edited_model.py").write_text(MODEL.format(body=body, offset=offset))
    (folder / "edited_helper.py").write_text(HELPER.format(gain=gain))


def _run(folder: Path, home: Path) -> dict:
    env = dict(os.environ, HOME=str(home), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_CACHE_DIR", None)  # the adapters' folder: ~/.cache/dyn/numba of this HOME
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(folder)], capture_output=True, text=True, env=env, cwd=folder, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def model(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    _write(folder)
    return folder, tmp_path / "home"


def test_a_second_process_loads_the_adapter_and_an_edited_drift_compiles_again(model):
    """Each probe is a process of its own, whose environment the test sets (HOME, no
    NUMBA_CACHE_DIR): this process's numba read NUMBA_CACHE_DIR when it was imported."""
    folder, home = model
    assert _run(folder, home) == {"value": -2.0, "hits": 0}  # -theta * x at theta = 2, compiled
    assert _run(folder, home) == {"value": -2.0, "hits": 1}  # another process: loaded
    _write(folder, body="edited_helper.gain(-theta * x * x * 3.0) + OFFSET")
    assert _run(folder, home) == {"value": -6.0, "hits": 0}  # the edit, not the cached drift


@pytest.mark.slow
@pytest.mark.parametrize(
    "edit, value",
    [
        (dict(gain=5.0), -10.0),  # a jitted helper in another file: numba keys the caller only
        (dict(offset=0.5), -1.5),  # a constant of the module, frozen into the compiled code
    ],
)
def test_an_edit_of_what_the_drift_calls_or_reads_compiles_again(model, edit, value):
    folder, home = model
    assert _run(folder, home)["value"] == -2.0
    _write(folder, **edit)
    assert _run(folder, home) == {"value": value, "hits": 0}


def _load(folder: Path, name: str):
    sys.path.insert(0, str(folder))
    try:
        for stale in ("edited_model", "edited_helper"):
            sys.modules.pop(stale, None)
        importlib.invalidate_caches()
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        for stale in ("edited_model", "edited_helper"):
            sys.modules.pop(stale, None)


def test_the_key_follows_every_file_and_constant_the_drift_reads(model):
    """In one process (nothing compiled): the digest of the drift changes with its body, with a
    constant of its module and with a helper in another file, and only then."""
    folder, _ = model

    def digest(**edit):
        _write(folder, **edit)
        return identity.digest(_load(folder, "edited_model").Edited.drift)

    base = digest()
    assert base is not None and digest() == base
    edits = [digest(body="edited_helper.gain(theta * x) + OFFSET"), digest(offset=1.0), digest(gain=2.0)]
    assert len({base, *edits}) == 4


def test_a_function_without_a_file_is_compiled_uncached(tmp_path, monkeypatch):
    """exec'd code has no file to key an edit on: its adapter runs from memory, uncached."""
    space = {}
    exec("def drift(t, x, theta):\n    return -theta * x\n", space)
    assert identity.digest(space["drift"]) is None
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    module = cache.load(
        "drift",
        textwrap.dedent("""
        import numba
        @numba.njit(cache=CACHED)
        def twice(x):
            return user(0.0, x, 2.0)
    """),
        space["drift"],
    )
    assert module.CACHED is False and not (tmp_path / "dyn-user").exists()


def test_the_key_is_the_same_in_every_process(tmp_path):
    """A set of strings among the drift's constants iterates in an order that changes with
    Python's hash seed: the key must not (else every process would miss the cache)."""
    (tmp_path / "with_set.py").write_text("def drift(t, x, a):\n    return x if a in {'u', 'v', 'w', 'z'} else -x\n")
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import with_set; "
        "from dyn.user import identity; print(identity.digest(with_set.drift))"
    )
    found = set()
    for seed in ("1", "2", "3"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300
        )
        assert done.returncode == 0, done.stderr
        found.add(done.stdout.strip())
    assert len(found) == 1 and None not in found and "None" not in found
