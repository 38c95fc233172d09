"""Fingerprints of every shipped scenario, shrunk: record them before a refactor, compare after.

Each scenario runs with each sweep axis cut to its first and last value and at most 4 runs per
point (the seeds, streams and every other setting unchanged), then every variable of the file is
hashed bit for bit. Run as

    python benchmarks/fingerprints.py > before.txt      # on the old commit
    python benchmarks/fingerprints.py > after.txt       # on the new one
    diff before.txt after.txt

A line per (scenario, variable): `name variable sha256[:16]`. Scenarios given as arguments
restrict the run (`python benchmarks/fingerprints.py noisy_phase two_token_phase`);
`--keep DIR` keeps the files there, to measure how far differing variables moved; `--smoke`
fingerprints one cheap scenario (SMOKE), to check in seconds that the script runs.
"""

from __future__ import annotations

import hashlib
import io
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

import dyn
from dyn.engine import scenario as scenario_mod

ROOT = Path(__file__).resolve().parent.parent
MAX_RUNS = 4
# per point: the library versions (the machine's, not the computation's) and the checksum over
# the point's values and those versions
UNHASHED = ("versions", "checksum")
SMOKE = "sinkhorn_iterations"  # cheap: no integration


def shrunk(doc: dict) -> dict:
    """The scenario with each sweep axis cut to its ends and at most MAX_RUNS runs."""
    for axis, raw in doc.get("sweep", {}).items():
        if isinstance(raw, dict) and "num" in raw:
            raw["num"] = min(int(raw["num"]), 2)
        elif isinstance(raw, list) and len(raw) > 2:
            doc["sweep"][axis] = [raw[0], raw[-1]]
    ensemble = doc.setdefault("ensemble", {})
    ensemble["runs"] = min(int(ensemble.get("runs", 1)), MAX_RUNS)
    doc.setdefault("output", {}).pop("path", None)
    return doc


def digest(path: Path) -> dict[str, str]:
    """sha256 of each dataset's bytes (NaN payloads included), by dataset path."""
    out = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            data = np.ascontiguousarray(obj[()])
            out[name] = hashlib.sha256(
                data.tobytes() if data.dtype != object else repr(data.tolist()).encode()
            ).hexdigest()[:16]

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return out


def main(names: list[str]) -> None:
    if "--smoke" in names:
        names = [SMOKE]
    keep = None
    if "--keep" in names:
        at = names.index("--keep")
        keep = Path(names[at + 1])
        keep.mkdir(parents=True, exist_ok=True)
        names = names[:at] + names[at + 2 :]
    files = sorted((ROOT / "scenarios").glob("*.toml"))
    for toml in files:
        if names and toml.stem not in names:
            continue
        doc = shrunk(scenario_mod.read_file(toml))
        with tempfile.TemporaryDirectory() as tmp:
            out = (keep or Path(tmp)) / f"{toml.stem}.h5"
            out.unlink(missing_ok=True)
            dyn.run(scenario_mod.resolve(doc, str(toml)), out, progress=False, log=io.StringIO())
            for name, value in sorted(digest(out).items()):
                if name.startswith("points/") or "provenance" in name or name in UNHASHED:
                    continue  # per-point bookkeeping files and timings, not numbers
                print(toml.stem, name, value, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
