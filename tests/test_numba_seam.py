"""numba's internals behind one seam (issue 37, item 2): integrators.numba.internals is the only
module that imports numba.core or names a private numba attribute; the plain path
(``DYN_PLAIN_NUMBA=1``: numba's public API only, what every unchecked numba version runs) defers
its compiles, keeps declared signatures and gives the default path's numbers.

**The rounding bound: none, bit for bit.** The main job (attention_clusters, shrunk to 2 betas x 4
runs) and the two-token phase point (two_token_phase, its first point) give the same bytes in every
file variable on both paths (checked below; the main job's case in the slow tier). Why: callers are
linked on the plain path and called on the optimized one, and :mod:`integrators.jit` loads every
callee before its caller on both, so a call LLVM did not inline binds to the callee's own code
either way; the kernels' own code is the same. A kernel where LLVM inlines a linked callee and
re-rounds it (fastmath contraction across the call) would break this; it would show here first.
"""
from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
SEAM = ROOT / "integrators" / "numba" / "internals.py"
PRIVATE = re.compile(r"numba\.core|\.(_[a-z]\w*)")
# private names of other libraries that our code reads, with where
NOT_NUMBAS = {"_exit": "os._exit, in children that must not run atexit handlers",
              "_data": "xarray's lazy backend array (dyn/presentation/analysis.py)",
              "_getframe": "sys._getframe: the module that called dyn.particles (dyn/user)"}


def _sources(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def _our_private_names() -> set[str]:
    """Every ``_name`` the project defines: functions, classes, assignments (attributes too,
    by setattr also), parameters and modules."""
    found = set()
    for path in _sources("dyn", "integrators", "tests", "benchmarks"):
        text = path.read_text()
        found |= set(re.findall(r"(?:def|class)\s+(_[a-z]\w*)", text))
        found |= set(re.findall(r"\b(_[a-z]\w*)\s*(?::[^=\n]*)?=(?!=)", text))
        found |= set(re.findall(r"[(,]\s*(_[a-z]\w*)\s*[,):=]", text))
        found |= set(re.findall(r"setattr\w*\(\w+, [\"'](_[a-z]\w*)[\"']", text))
        if path.stem.startswith("_"):
            found.add(path.stem)
    return found


def test_private_numba_names_live_in_the_seam_only():
    """The issue's ``grep -rn "numba.core\\|\\._[a-z]" integrators dyn``: outside the seam every
    match is a name of our own (or one of NOT_NUMBAS); inside it, numba's."""
    ours = _our_private_names()
    strays = []
    for path in _sources("dyn", "integrators"):
        if path == SEAM:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in PRIVATE.finditer(line):
                name = match.group(1)
                if name is None or (name not in ours and name not in NOT_NUMBAS):
                    strays.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not strays, "\n".join(strays)
    seam = {m.group(1) for m in PRIVATE.finditer(SEAM.read_text())}
    assert None in seam  # the seam imports numba.core and names numba's privates (the check's
    assert {"_get_module_for_linking", "_can_compile", "_reload_init"} <= seam - ours  # teeth)


SEAM_KERNELS = """
from numba import types
from integrators import jit
from integrators.numba_abi import F1, NJIT

@jit.njit(types.float64(types.float64, F1), **NJIT)
def scaled_sum(c, v):
    total = 0.0
    for x in v:
        total += x
    return c * total

@jit.njit(types.float64(F1), **NJIT)
def calls_scaled_sum(v):
    return scaled_sum(2, v)  # an int typed against the declared float64
"""

CACHE_HITS = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from seam_kernels import calls_scaled_sum, scaled_sum
calls_scaled_sum(np.array([1.0, 2.0]))
print(sum(scaled_sum.stats.cache_hits.values()), sum(scaled_sum.stats.cache_misses.values()))
"""

PLAIN_KERNELS = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from integrators import jit
from integrators.numba import internals
from seam_kernels import calls_scaled_sum, scaled_sum
from dyn.engine import warmup
share = warmup.share_of(0, 1)  # imports every kernel module, as the test workers' shares do
compiled_at_import = [jit.qualified(k) for k in jit.declared_kernels() if k.signatures]
smallest = min(share, key=warmup.source_cost)
jit.ensure(smallest)
first = calls_scaled_sum(np.array([1.0, 2.0]))
second = scaled_sum(3, np.array([1.0, 2.0]))
try:
    scaled_sum(1.0, np.arange(3.0)[::2])
    refused = False
except TypeError:
    refused = True
json.dump(dict(optimized=jit.optimized(), calls=jit.calls_kernels(),
               memo=internals.argument_memo_installed(),
               compiled_at_import=compiled_at_import, values=[first, second],
               signatures=[len(scaled_sum.signatures), len(calls_scaled_sum.signatures)],
               refused=refused, cls=type(scaled_sum).__name__,
               share=[len(share), len(jit.declared_kernels()), jit.pending(smallest),
                      len(smallest.signatures)],
               cached=[sum(scaled_sum.stats.cache_hits.values()),
                       sum(scaled_sum.stats.cache_misses.values())]), sys.stdout)
"""


def _plain(code: str, *args: str, **env: str) -> str:
    env = {**os.environ, "DYN_PLAIN_NUMBA": "1", "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_plain_path_defers_compiles_and_keeps_declared_signatures(tmp_path):
    """Under DYN_PLAIN_NUMBA=1: importing every kernel module compiles nothing, and the compile
    share of one process (tests/conftest.py's) holds every kernel and ensures; a kernel compiles for
    its declared signature only (an int converted, a non-contiguous array refused, as an eager
    numba.njit(sig) does), callers link (no call patch) and the kernel is numba's own dispatcher
    class again once ensured; a second process loads it from the cache."""
    (tmp_path / "seam_kernels.py").write_text(SEAM_KERNELS)
    cache = str(tmp_path / "nb")
    out = json.loads(_plain(PLAIN_KERNELS, str(tmp_path), NUMBA_CACHE_DIR=cache))
    assert out["cached"] == [0, 1]  # (hits, misses): compiled ...
    assert _plain(CACHE_HITS, str(tmp_path), NUMBA_CACHE_DIR=cache).split() == ["1", "0"]  # loaded
    assert out["optimized"] is False and out["calls"] is False and out["memo"] is False
    assert out["compiled_at_import"] == []
    count, declared, pending, signatures = out["share"]
    assert count == declared > 40 and not pending and signatures >= 1
    assert out["values"] == [6.0, 9.0] and out["signatures"] == [1, 1] and out["refused"]
    assert not out["cls"].startswith("Waiting")


def _shrunk(name: str, points: int | None) -> dict:
    """A shipped scenario as benchmarks/fingerprints.py shrinks it; `points`=1 keeps the sweep's
    first value only."""
    from dyn.engine import scenario as scenario_mod

    doc = scenario_mod.read_file(ROOT / "scenarios" / f"{name}.toml")
    for axis, raw in doc.get("sweep", {}).items():
        if isinstance(raw, dict) and "num" in raw:
            raw["num"] = min(int(raw["num"]), 2)
            if points == 1:
                doc["sweep"][axis] = [raw["start"]]
        elif isinstance(raw, list):
            doc["sweep"][axis] = raw[:1] if points == 1 else [raw[0], raw[-1]]
    doc.setdefault("ensemble", {})["runs"] = min(int(doc["ensemble"].get("runs", 1)), 4)
    doc.setdefault("output", {}).pop("path", None)
    return doc


def _variables(path: Path) -> dict[str, str]:
    """Each file variable's bytes, in hex (the machine's versions and the checksum over them
    left out)."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset) and name.rsplit("/", 1)[-1] not in ("versions", "checksum"):
            data = np.ascontiguousarray(obj[()])
            out[name] = (data.tobytes() if data.dtype != object else repr(data.tolist())
                         .encode()).hex()
    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


RUN_JOBS = """
import io, json, sys
from pathlib import Path
sys.path.insert(0, "tests")
import dyn
from dyn.engine import scenario as scenario_mod
from test_numba_seam import JOBS, _shrunk, _variables

found = {}
for name, points in JOBS:
    if name not in sys.argv[2:]:
        continue
    out = Path(sys.argv[1]) / f"{name}.h5"
    dyn.run(scenario_mod.resolve(_shrunk(name, points), f"scenarios/{name}.toml"), out,
            progress=False, log=io.StringIO())
    found[name] = _variables(out)
json.dump(found, sys.stdout)
"""
JOBS = [("attention_clusters", None), ("two_token_phase", 1)]


# The main job's case compiles every kernel of the attention flow a second time, linked (the
# plain path keeps its own cache entries): ~25 s of one worker on a cold cache, an eighth of the
# default tier; it runs in the slow tier, the two-token point (~3 s) in the default one.
@pytest.mark.parametrize("job", [pytest.param("attention_clusters", marks=pytest.mark.slow),
                                 "two_token_phase"])
def test_the_plain_path_gives_the_main_job_and_the_two_token_point_bit_for_bit(tmp_path, job):
    """The main job (shrunk) and the two-token phase point on the plain path, in a process of
    its own, against this process's default path: every file variable the same bytes (the bound
    is zero; see the module doc)."""
    import dyn
    from dyn.engine import scenario as scenario_mod

    plain = json.loads(_plain(RUN_JOBS, str(tmp_path), job))
    for name, points in [j for j in JOBS if j[0] == job]:
        out = tmp_path / f"{name}-default.h5"
        dyn.run(scenario_mod.resolve(_shrunk(name, points), str(ROOT / "scenarios" / f"{name}.toml")),
                out, progress=False, log=io.StringIO())
        default = _variables(out)
        assert len(default) > 5 and set(plain[name]) == set(default), name
        differ = [v for v in default if plain[name][v] != default[v]]
        assert not differ, f"{name}: {differ} differ between the plain and the default path"
