"""Damaged copies of three scenarios' sweep files: every reader and the resume, each timed.

Three small finished sweeps (attention on the sphere; the same with saved states and common
random numbers along `form`; momentum_linear, whose file holds theory curves over a grid of
their own) are damaged at random, FILES copies in all, each by one of: bits flipped, a block
zeroed, two blocks swapped, mostly in the HDF5 metadata (the bytes outside the datasets' raw
data: headers, heaps, B-trees) and otherwise anywhere. On each copy every reader runs (`dyn
show` plain and `--errors`, `dyn plot`, `dyn.open` with every variable loaded, and where the file
saved states `dyn plot --tokens`, `dyn compare`, `dyn animate`), then a resume of its scenario
into it. Each is timed in a worker process of its own (this file run as a script).

Counted, and each must be 0:
- tracebacks: anything but success, or exactly one line ``dyn: error: ...`` with exit 2 (a
  resume may also end with 3, points that diverged); a crash of the worker counts here;
- hangs: a reader or a resume that took longer than HANG_SECONDS (the worker is stopped at
  STOP_SECONDS);
- damaged numbers kept: a resume that ended with 0 or 3 and left any dataset or attribute other
  than the file's records of the run (command, creation time) different from the undamaged
  file's (same seed, same numbers: a point computed again equals its original bit for bit).

The damage is drawn from one seeded generator, so a run is reproducible; DYN_FUZZ_FILES sets the
count (default FILES). The counts are printed at the end (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

FILES = 510
HANG_SECONDS = 10.0
STOP_SECONDS = 60.0
SEED = 51
STATES = [
    "sweep.beta=[1.0, 1000.0]",
    "sweep.normalization=['USA']",
    "ensemble.runs=2",
    "sweep.form=['flow', 'network']",
    "params.depth=4",
    "output.trajectories=true",
    "ensemble.common=['form']",
]
PLAIN = ["sweep.beta=[1.0, 2.0, 1000.0]", "sweep.normalization=['SA', 'USA']", "ensemble.runs=2"]
LINEAR = ["sweep.a=[-8.0, -4.0, 0.0]", "sweep.eps=[0.1, 1.0]", "params.depth=16"]
READERS = [["show"], ["show", "--errors"], ["plot"]]
STATE_READERS = [
    ["plot", "--tokens"],
    ["compare", "--along", "form", "--reference", "flow", "--against", "beta"],
    ["animate"],
]
RECORDS = {"command", "created"}  # root attributes a resume does not vouch for


# -- the worker (this file run as a script) ---------------------------------------------------


def _serve() -> None:
    os.environ.setdefault("MPLBACKEND", "Agg")
    reply = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        request = json.loads(line)
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                answer = _answer(request)
            finally:
                import gc

                gc.collect()
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            err.seek(0)
            answer["err"] = err.read().decode("utf-8", "replace")
        reply.write(json.dumps(answer) + "\n")
        reply.flush()


def _answer(request: dict) -> dict:
    try:
        if "argv" in request:
            from dyn.presentation.cli import main

            try:
                return {"code": main(request["argv"])}
            except SystemExit as exc:
                return {"code": exc.code}
        if "open" in request:
            return _open_all(request["open"])
        return {"code": 0, "differ": _differences(*request["differ"])}
    except BaseException:  # noqa: BLE001 - what escaped is the finding
        traceback.print_exc()
        return {"code": "raised"}


def _open_all(path: str) -> dict:
    import dyn
    from dyn.core.errors import ScenarioError

    try:
        with dyn.open(path) as ds:
            for name in ds.variables:
                ds[name].load()
    except ScenarioError as exc:
        print(f"dyn: error: {exc}", file=sys.stderr)
        return {"code": 2}
    return {"code": 0}


def _differences(resumed: str, base: str) -> list[str]:
    """What of the resumed file differs from the undamaged one: datasets (values, NaN where
    NaN) and attributes, but the run's records (RECORDS) and the saved states' virtual dataset."""
    import h5py
    import numpy as np

    found = []

    def same(a, b) -> bool:
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind == "f":
            return bool(np.array_equal(a, b, equal_nan=True))
        if a.dtype.kind == "O":
            return [str(x) for x in a.reshape(-1)] == [str(x) for x in b.reshape(-1)]
        return bool(np.array_equal(a, b))

    def attrs(where: str, x, y) -> None:
        for key in set(x.attrs) | set(y.attrs):
            if where == "/" and key in RECORDS or key in ("DIMENSION_LIST", "REFERENCE_LIST"):
                continue
            if key not in x.attrs or key not in y.attrs or not same(x.attrs[key], y.attrs[key]):
                found.append(f"{where} attribute {key}")

    with h5py.File(resumed, "r") as f, h5py.File(base, "r") as g:
        attrs("/", f, g)
        for name in set(f) | set(g):
            if name not in f or name not in g:
                found.append(f"{name} missing")
                continue
            x, y = f[name], g[name]
            attrs(name, x, y)
            if isinstance(y, h5py.Dataset) and not y.is_virtual and not same(x[()], y[()]):
                found.append(f"{name} values")
    return found


# -- the pytest side ----------------------------------------------------------------------------


class Worker:
    def __init__(self):
        self.process = None

    def ask(self, request: dict) -> tuple[dict, float]:
        import selectors

        if self.process is None or self.process.poll() is not None:
            env = dict(os.environ, NUMBA_NUM_THREADS="1", MPLBACKEND="Agg", DYN_FUZZ_PARENT=str(os.getpid()))
            self.process = subprocess.Popen(
                [sys.executable, __file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=env,
                cwd=Path(__file__).parent,
            )
        started = time.monotonic()
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            ready = selector.select(STOP_SECONDS)
        took = time.monotonic() - started
        if not ready:
            self.stop()
            return {"code": "hung", "err": ""}, took
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            self.process = None
            return {"code": f"worker died (exit {code})", "err": ""}, took
        return json.loads(line), took

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def _metadata(path: Path) -> list[tuple[int, int]]:
    """The byte ranges of `path` outside the raw data of its contiguous datasets."""
    import h5py

    with h5py.File(path, "r") as f:
        extents = sorted(
            (v.id.get_offset(), v.id.get_offset() + v.id.get_storage_size())
            for v in f.values()
            if isinstance(v, h5py.Dataset) and not v.is_virtual and v.chunks is None and v.id.get_offset() is not None
        )
    size, ranges, at = path.stat().st_size, [], 0
    for a, b in extents:
        if a > at:
            ranges.append((at, a))
        at = max(at, b)
    if at < size:
        ranges.append((at, size))
    return ranges


def damage(data: bytes, metadata: list[tuple[int, int]], rng: random.Random) -> tuple[bytes, str]:
    """`data` damaged by one of: bits flipped, a block zeroed, two blocks swapped; in the
    metadata three times in four, else anywhere. Returns the bytes and the damage in words."""
    regions = metadata if rng.random() < 0.75 else [(0, len(data))]
    total = sum(b - a for a, b in regions)

    def spot() -> int:
        at = rng.randrange(total)
        for a, b in regions:
            if at < b - a:
                return a + at
            at -= b - a
        return regions[-1][1] - 1

    data = bytearray(data)
    kind = rng.choice(["flip", "flip", "zero", "swap"])
    if kind == "flip":
        spots = [spot() for _ in range(rng.randint(1, 6))]
        for at in spots:
            data[at] ^= 1 << rng.randrange(8)
        return bytes(data), f"flip {spots}"
    length = rng.choice([1, 2, 4, 8, 16, 64, 256])
    a = spot()
    if kind == "zero":
        data[a : a + length] = bytes(len(data[a : a + length]))
        return bytes(data), f"zero {length} at {a}"
    b = spot()
    length = max(1, min(length, len(data) - a, len(data) - b))
    block_a, block_b = bytes(data[a : a + length]), bytes(data[b : b + length])
    data[a : a + length], data[b : b + length] = block_b, block_a
    return bytes(data), f"swap {length} at {a} and {b}"


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict:
    import tomli_w

    import dyn
    from _scenarios import SCENARIOS, SMALL_SCENARIO
    from dyn.engine.scenario import apply_overrides, parse_toml, read_file

    folder = tmp_path_factory.mktemp("fuzz3")
    made = {}
    for name, text, sets in (
        ("plain", SMALL_SCENARIO, PLAIN),
        ("states", SMALL_SCENARIO, STATES),
        ("linear", None, LINEAR),
    ):
        doc = parse_toml(text) if text else read_file(SCENARIOS / "momentum_linear.toml")
        scenario = folder / f"{name}.toml"
        scenario.write_text(tomli_w.dumps(apply_overrides(doc, sets)))
        out = dyn.run(scenario, folder / f"{name}.h5", progress=False, log=io.StringIO())
        made[name] = (scenario, out, _metadata(out))
    return made


def _problem(answer: dict, resume: bool = False) -> str | None:
    code, err = answer["code"], answer.get("err", "")
    lines = err.strip().splitlines()
    if "Traceback" in err or "Exception ignored" in err:
        return f"traceback (exit {code}): {err[-800:]}"
    if code == 0 or (resume and code == 3):
        return None
    if code == 2 and lines and lines[-1].startswith("dyn: error: ") and (resume or len(lines) == 1):
        return None
    return f"exit {code}: {err[-800:]!r}"


def _one(worker: Worker, bases: dict, name: str, data: bytes, folder: Path, counts: dict, words: str) -> None:
    scenario, base, _ = bases[name]
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    path = folder / base.name
    path.write_bytes(data)
    if Path(f"{base}.d").is_dir():
        shutil.copytree(f"{base}.d", f"{path}.d")
    requests = []
    for command in READERS + (STATE_READERS if name == "states" else []):
        argv = [command[0], str(path), *command[1:]]
        if command[0] in ("plot", "compare"):
            argv += ["--out", str(folder / "picture.png")]
        if command[0] == "animate":
            argv += ["--out", str(folder / "movie.gif")]
        requests.append((" ".join(command), {"argv": argv}, False))
    requests.append(("dyn.open", {"open": str(path)}, False))
    requests.append(("resume", {"argv": ["run", str(scenario), "--out", str(path), "--no-progress"]}, True))
    for label, request, resume in requests:
        answer, took = worker.ask(request)
        counts["runs"] += 1
        counts.setdefault("seconds", {}).setdefault(label, []).append(round(took, 2))
        if resume and answer["code"] == 2:
            counts.setdefault("reasons", []).append(answer.get("err", "")[-200:])
        if took > HANG_SECONDS:
            counts["hangs"] += 1
            counts["found"].append(f"{name} {words}: {label} took {took:.1f} s")
        problem = _problem(answer, resume)
        if problem:
            counts["tracebacks"] += 1
            counts["found"].append(f"{name} {words}: {label}: {problem}")
        if resume and answer["code"] in (0, 3):
            counts["resumed"] += 1
            after, _ = worker.ask({"differ": [str(path), str(base)]})
            if after["code"] != 0 or after["differ"]:
                counts["kept"] += 1
                counts["found"].append(
                    f"{name} {words}: resume kept {after.get('differ')} {after.get('err', '')[-300:]}"
                )
        elif resume:
            counts["refused"] += 1


@pytest.mark.slow
def test_damaged_files_of_three_scenarios(bases, tmp_path):
    count = int(os.environ.get("DYN_FUZZ_FILES", FILES))
    rng = random.Random(SEED)
    worker = Worker()
    counts = {"files": 0, "runs": 0, "tracebacks": 0, "hangs": 0, "kept": 0, "resumed": 0, "refused": 0, "found": []}
    try:
        for name in bases:  # warm: the worker's imports and kernels are not a reader's time
            warm = {
                "files": 0,
                "runs": 0,
                "tracebacks": 0,
                "hangs": 0,
                "kept": 0,
                "resumed": 0,
                "refused": 0,
                "found": [],
            }
            _one(worker, bases, name, bases[name][1].read_bytes(), tmp_path / "warm", warm, "")
            # the undamaged file: read, and resumed unchanged (its times are the cold start's)
            assert warm["tracebacks"] == 0 and warm["kept"] == 0, warm
        names = sorted(bases)
        for i in range(count):
            name = names[i % len(names)]
            _, base, metadata = bases[name]
            data, words = damage(base.read_bytes(), metadata, rng)
            _one(worker, bases, name, data, tmp_path / "damaged", counts, words)
            counts["files"] += 1
    finally:
        worker.stop()
    summary = {k: v for k, v in counts.items() if k not in ("found", "seconds", "reasons")}
    print({k: sum(v) / len(v) for k, v in counts.get("seconds", {}).items()})
    print(counts.get("reasons", [])[:10])
    print("\nfuzz of three scenarios:", json.dumps(summary))
    for line in counts["found"][:40]:
        print("  ", line[:1200])
    assert counts["tracebacks"] == 0 and counts["hangs"] == 0 and counts["kept"] == 0, (summary, counts["found"][:20])


if __name__ == "__main__":
    from dyn.engine.lifetime import die_with

    die_with(int(os.environ["DYN_FUZZ_PARENT"]))
    with contextlib.suppress(KeyboardInterrupt):
        _serve()
