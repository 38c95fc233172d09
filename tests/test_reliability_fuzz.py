"""Reliability, issue 35, item 9: damaged sweep files, property-based.

Finished sweep files are damaged at random (bytes flipped, ranges overwritten, the file cut
short), mostly in their HDF5 metadata (headers, heaps, B-trees: the bytes outside the datasets'
raw data), and every reader is run on each: `dyn show` (plain, `--errors`, `--scenario`),
`dyn plot`, and where states exist `dyn plot --tokens`, `dyn compare` and `dyn animate`, and
`dyn.open` with every variable loaded. Each either succeeds or prints exactly one line
`dyn: error: ...` and exits with 2: never a traceback, never a hang. A resume (`dyn run` of the
scenario into the damaged file) either refuses in one line (exit 2) or computes and ends with 0
or 3, leaving a file that reads whole with no ok point holding NaN.

The readers run in a worker process (this file run as a script), one request at a time, with
stdout and stderr captured at the file-descriptor level (what the HDF5 C library would print
too): a segfault or a hang of the C library kills or stalls the worker, not pytest, and is a
failure of the example (the worker is started again).

Default tier: READ_EXAMPLES damaged files for the readers and RESUME_EXAMPLES for resumes; slow
tier: SLOW_EXAMPLES of each. What it found, each now with a test of its own in
tests/test_reliability_readers.py: tracebacks of h5py (KeyError, RuntimeError) on damaged
metadata; text attributes that are no longer UTF-8 (lone surrogates that neither print nor
draw); a dimension-scale reference naming another dimension of the same length; and a global
heap on which HDF5 loops for ever.
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
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

# default tier: a few of each, to keep the tier within 3 minutes from a fresh clone (the slow
# tier's SLOW_EXAMPLES are the thorough check; every example there runs the same code). 6 and 4
# since the heap tests of test_reliability_readers.py grew: the tier measured 3:20 with 10 and 6
READ_EXAMPLES = 6
RESUME_EXAMPLES = 4
SLOW_EXAMPLES = 500
REQUEST_SECONDS = 120  # a reader (or a resume) taking longer is taken to hang
# beta = 1000 with USA weights overflows: a diverged point in each base file
BASES = {
    "states": [
        "sweep.beta=[1.0, 1000.0]",
        "sweep.normalization=['USA']",
        "ensemble.runs=2",
        "sweep.form=['flow', 'network']",
        "params.depth=4",
        "output.trajectories=true",
        "ensemble.common=['form']",
    ],
    "plain": ["sweep.beta=[1.0, 2.0, 1000.0]", "sweep.normalization=['SA', 'USA']", "ensemble.runs=2"],
}
READERS = [["show"], ["show", "--errors"], ["show", "--scenario"], ["plot"]]
STATE_READERS = [
    ["plot", "--tokens"],
    ["compare", "--along", "form", "--reference", "flow", "--against", "beta"],
    ["animate"],
]


# -- the worker (this file run as a script) ----------------------------------------------------------


def _serve() -> None:
    """Answer one JSON request per line on stdin with one JSON line on the original stdout."""
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

                gc.collect()  # what h5py objects print when collected lands in this request
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
        return _after_resume(request["resumed"])
    except BaseException:  # noqa: BLE001 - what escaped is the finding
        traceback.print_exc()
        return {"code": "raised"}


def _open_all(path: str) -> dict:
    """dyn.open and load every variable: code 0, or 2 with one line as the CLI would print it."""
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


def _after_resume(path: str) -> dict:
    """After a resume that ended with 0 or 3: whether the file reads whole, and the ok points
    holding NaN in an output that must be finite there (read with h5py, under no mask)."""
    import h5py
    import numpy as np

    read = _open_all(path)
    if read["code"] != 0:
        return {"code": "unreadable"}
    nan_at_ok = []
    with h5py.File(path, "r") as f:
        ok = f["status"][...] == 1
        for name, var in f.items():
            role = var.attrs.get("dyn_role", b"")
            role = role.decode() if isinstance(role, bytes) else role
            if (
                not isinstance(var, h5py.Dataset)
                or var.dtype.kind != "f"
                or name == "trajectory"
                or role == "reference"
                or "dyn_nan_means" in var.attrs
                or var.shape[: ok.ndim] != ok.shape
            ):
                continue
            values = var[...].reshape(ok.shape + (-1,))
            if np.isnan(values[ok]).any():
                nan_at_ok.append(name)
    return {"code": 0, "nan_at_ok": nan_at_ok}


# -- the pytest side -------------------------------------------------------------------------------


class Worker:
    """The worker process, started again after it crashed or hung."""

    def __init__(self):
        self.process = None

    def _start(self) -> None:
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

    def ask(self, request: dict) -> dict:
        if self.process is None or self.process.poll() is not None:
            self._start()
        import selectors

        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            ready = selector.select(REQUEST_SECONDS)
        if not ready:
            self.stop()
            return {"code": f"hung past {REQUEST_SECONDS} s", "err": ""}
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            self.process = None
            return {"code": f"worker died (exit {code}: a crash of the C library?)", "err": ""}
        return json.loads(line)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@dataclass(frozen=True)
class Damage:
    base: str
    kind: str  # flip | overwrite | truncate
    where: str  # metadata | anywhere
    spots: tuple  # fractions of the region: where each flip or range goes (truncate: the first)
    length: int  # bytes overwritten from each spot
    seed: int

    def apply(self, data: bytes, metadata: list[tuple[int, int]]) -> bytes:
        regions = metadata if self.where == "metadata" else [(0, len(data))]
        total = sum(b - a for a, b in regions)
        rng = random.Random(self.seed)

        def offset(fraction: float) -> int:
            at = int(fraction * total)
            for a, b in regions:
                if at < b - a:
                    return a + at
                at -= b - a
            return regions[-1][1] - 1

        data = bytearray(data)
        if self.kind == "truncate":
            return bytes(data[: offset(self.spots[0])])
        for fraction in self.spots:
            at = offset(fraction)
            if self.kind == "flip":
                data[at] ^= rng.randrange(1, 256)
            else:
                end = min(len(data), at + self.length)
                data[at:end] = (
                    bytes(end - at) if rng.random() < 0.3 else bytes(rng.randrange(256) for _ in range(end - at))
                )
        return bytes(data)


def _metadata(path: Path) -> list[tuple[int, int]]:
    """The byte ranges of `path` outside the raw data of its contiguous datasets."""
    import h5py

    with h5py.File(path, "r") as f:
        extents = []
        for var in f.values():
            if isinstance(var, h5py.Dataset) and not var.is_virtual and var.chunks is None:
                start = var.id.get_offset()
                if start is not None:
                    extents.append((start, start + var.id.get_storage_size()))
    size, ranges, at = path.stat().st_size, [], 0
    for a, b in sorted(extents):
        if a > at:
            ranges.append((at, a))
        at = max(at, b)
    if at < size:
        ranges.append((at, size))
    return ranges


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict:
    """Each base scenario as a TOML file (its overrides written in, so that `dyn run FILE` resumes
    a copy) and its finished sweep file, with the file's metadata ranges."""
    import tomli_w

    import dyn
    from _scenarios import SMALL_SCENARIO
    from dyn.engine.scenario import apply_overrides, parse_toml

    folder = tmp_path_factory.mktemp("fuzz_bases")
    made = {}
    for name, sets in BASES.items():
        scenario = folder / f"{name}.toml"
        scenario.write_text(tomli_w.dumps(apply_overrides(parse_toml(SMALL_SCENARIO), sets)))
        out = dyn.run(scenario, folder / f"{name}.h5", progress=False, log=io.StringIO())
        made[name] = (scenario, out, _metadata(out))
    return made


@pytest.fixture(scope="module")
def worker():
    running = Worker()
    yield running
    running.stop()


def _damaged(bases: dict, damage: Damage, folder: Path) -> tuple[Path, Path]:
    scenario, base, metadata = bases[damage.base]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / base.name
    path.write_bytes(damage.apply(base.read_bytes(), metadata))
    side = Path(f"{base}.d")
    if side.is_dir():
        shutil.copytree(side, Path(f"{path}.d"))
    return scenario, path


def _problem(label: str, answer: dict) -> str | None:
    """What is wrong with one reader's answer: None if it succeeded or refused in one line."""
    code, err = answer["code"], answer.get("err", "")
    lines = err.strip().splitlines()
    if "Traceback" in err or "Exception ignored" in err:
        return f"{label}: a traceback (exit {code}): {err[-1500:]}"
    if code == 0:
        return None
    if code == 2 and len(lines) == 1 and lines[0].startswith("dyn: error: "):
        return None
    return f"{label}: exit {code}, stderr {err[-1500:]!r}"


def _readers_succeed_or_refuse_in_one_line(bases, worker, tmp_path_factory, damage):
    folder = Path(tmp_path_factory.mktemp("damaged"))
    _, path = _damaged(bases, damage, folder)
    commands = READERS + (STATE_READERS if damage.base == "states" else [])
    problems = []
    for command in commands:
        argv = [command[0], str(path), *command[1:]]
        if command[0] in ("plot", "compare"):
            argv += ["--out", str(folder / "picture.png")]
        if command[0] == "animate":
            argv += ["--out", str(folder / "movie.gif")]
        problems.append(_problem(" ".join(command), worker.ask({"argv": argv})))
    problems.append(_problem("dyn.open + load", worker.ask({"open": str(path)})))
    problems = [p for p in problems if p]
    shutil.rmtree(folder, ignore_errors=True)
    assert not problems, f"{damage}:\n" + "\n".join(problems)


def _resume_refuses_or_computes(bases, worker, tmp_path_factory, damage):
    folder = Path(tmp_path_factory.mktemp("resumed"))
    scenario, path = _damaged(bases, damage, folder)
    answer = worker.ask({"argv": ["run", str(scenario), "--out", str(path), "--no-progress"]})
    code = answer["code"]
    lines = answer.get("err", "").strip().splitlines()
    if code == 2:  # one line of refusal (after what the run said of its kernels, if anything)
        errors = [line for line in lines if line.startswith("dyn: error: ")]
        assert errors and errors == lines[-1:] and "Traceback" not in answer["err"], (damage, answer)
    else:
        assert code in (0, 3), (damage, code, answer.get("err", "")[-2000:])
        after = worker.ask({"resumed": str(path)})
        assert after["code"] == 0, (damage, f"exit {code} left a file that does not read", after)
        assert not after["nan_at_ok"], (damage, f"exit {code} left ok points holding NaN in", after["nan_at_ok"])
    shutil.rmtree(folder, ignore_errors=True)


def _strategy():
    from hypothesis import strategies as st

    return st.builds(
        Damage,
        base=st.sampled_from(sorted(BASES)),
        kind=st.sampled_from(["flip", "flip", "overwrite", "truncate"]),
        where=st.sampled_from(["metadata", "metadata", "metadata", "anywhere"]),
        spots=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=6).map(tuple),
        length=st.integers(1, 512),
        seed=st.integers(0, 2**32 - 1),
    )


def _property(body, examples: int):
    from hypothesis import HealthCheck, given, settings

    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )(given(damage=_strategy())(body))


if __name__ != "__main__":
    # the few-example runs too are slow (each example reads or resumes a damaged copy in a
    # worker process): the default tier keeps tests/test_reliability_readers.py's damaged files
    test_damaged_files_are_read_or_refused_in_one_line = pytest.mark.slow(
        _property(_readers_succeed_or_refuse_in_one_line, READ_EXAMPLES)
    )
    test_damaged_files_thoroughly = pytest.mark.slow(_property(_readers_succeed_or_refuse_in_one_line, SLOW_EXAMPLES))
    test_damaged_files_are_resumed_or_refused = pytest.mark.slow(
        _property(_resume_refuses_or_computes, RESUME_EXAMPLES)
    )
    test_damaged_files_resumed_thoroughly = pytest.mark.slow(_property(_resume_refuses_or_computes, SLOW_EXAMPLES))
else:
    from dyn.engine.lifetime import die_with

    # a worker busy with a request when pytest is killed would run on: it dies with pytest
    die_with(int(os.environ["DYN_FUZZ_PARENT"]))
    with contextlib.suppress(KeyboardInterrupt):
        _serve()
