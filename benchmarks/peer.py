"""The main job's work against the closest public peer, side by side in one run (issues 25, 41).

The peer is ``phase-diagrams.py`` of the repository ``borjanG/2023-transformers-rotf`` (torch;
it hard-codes CUDA). It is not part of this project: fetch it yourself, install torch in any
environment, and point this script at both::

    git clone <that repository> /tmp/rotf
    python -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch numpy tqdm matplotlib
    python benchmarks/peer.py --peer /tmp/rotf/phase-diagrams.py --peer-python /tmp/torchenv/bin/python

How the peer is run: its source is read, every ``'cuda'`` device string becomes ``'cpu'`` (the
only change), and its own ``do_results`` is called in a fresh process with the arguments of its
command line ``--use_softmax --step 0.1 --maxtime 30 --betamin 0.1 --betamax 9 --betas 45
--batch 256 --ntokens 32 --dmodel 2`` (post-norm softmax layers x <- normalize(x + h A x), float64,
the fraction of token pairs with <x_i, x_j> > 0.999 at 200 checkpoints). Its pickling and plot
(which needs LaTeX) are left out of the time; torch keeps its default threads (all cores).

This project's side is the same work through the engine: the main scenario with ``form =
"network"``, 300 layers of step 0.1, ``delta = 1e-3`` (the peer's 0.999), serial executor
(ensembles over all cores), after a first run that fills numba's cache, in two modes:
- **equal work**: the peer's one observable only (``output.observables = ["pair_fraction"]``),
  at every layer by default (300 against the peer's 200 checkpoints; ``--saves 150`` observes
  every second layer);
- **all outputs**: every output of the scenario (nine) at the same layers.

Each mode is timed end to end as a user runs it, ``python -m dyn run SCENARIO --set ...`` in a
fresh process (interpreter start, imports, numba's cache, the sweep and its file), and in this
process beside it (``dyn.run``, kernels loaded). Each peer run sits between two command line runs
of each mode; the ratio of a mode is the median over ``--repeat`` (3) such sandwiched pairs
(targets: equal work >= 8x, all outputs >= 6x). Beside each: the end-to-end rate against the
vectorised-exp ceiling measured in the same run (the exps are the bound at n = 32, d = 2).

The machine's load is measured over the whole comparison (CPU time other processes used, from
/proc/stat, as a share of all cores): above ``--max-load`` (10%) nothing is reported and the
script exits 3. Last, the mean |difference| of the two pictures (pair fraction over beta and
time) at the peer's checkpoints beside what two independent ensembles of this size would show
(from the file's standard error over runs). Without ``--peer`` only this project's side is
timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "attention_clusters.toml"
BETAS, RUNS, LAYERS, N, D, STEP = 45, 256, 300, 32, 2, 0.1

# Runs in the peer's interpreter: its module with the device string swapped, its own loop.
PEER_DRIVER = r"""
import argparse, json, sys, time, types
import numpy as np
source = open(sys.argv[1]).read().replace("'cuda'", "'cpu'")
peer = types.ModuleType("peer")
exec(compile(source, sys.argv[1], "exec"), peer.__dict__)
a = argparse.Namespace(dmodel=%(d)d, ntokens=%(n)d, batch=%(runs)d, betamin=0.1, betamax=9.0,
                       betas=%(betas)d, maxtime=%(horizon)r, step=%(step)r, use_softmax=True,
                       randomV=0, randomKQ=0, cluster_sizes=False, disable_tqdm=True, noanneal=0,
                       rawstep=False, regen_period=0.0, plotdim=False)
peer.args = a  # step_1 reads the module-level args of the peer's __main__ block
import io, contextlib
import torch
with contextlib.redirect_stdout(io.StringIO()):
    start = time.perf_counter()
    res = peer.do_results(a)
    wall = time.perf_counter() - start
np.savez(sys.argv[2], fraction=res["density_tensor"].numpy(), times=res["times_list"].numpy(),
         betas=res["betas_list"].numpy())
print(json.dumps({"wall": wall, "threads": torch.get_num_threads(), "torch": torch.__version__}))
"""


def run_peer(peer: Path, python: str, tmp: Path) -> tuple[float, dict, dict]:
    driver = PEER_DRIVER % {"d": D, "n": N, "runs": RUNS, "betas": BETAS, "horizon": LAYERS * STEP, "step": STEP}
    out = tmp / "peer.npz"
    done = subprocess.run([python, "-c", driver, str(peer), str(out)], capture_output=True, text=True, cwd=tmp)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise PeerError(f"the peer failed under {python} (exit {done.returncode}): {last}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    return info["wall"], info, dict(np.load(out))


class PeerError(Exception):
    """What keeps the peer from running, in one line."""


def check_peer(peer: Path | None, python: str) -> None:
    """The peer's file and interpreter exist (the README's PATH and PY are placeholders)."""
    if peer is None:
        return
    if not peer.is_file():
        raise PeerError(
            f"--peer {peer}: no such file; fetch the peer's phase-diagrams.py first (this script's header says how)"
        )
    if shutil.which(python) is None:
        raise PeerError(
            f"--peer-python {python}: no such interpreter; give one with torch "
            "installed (this script's header says how)"
        )


def our_overrides(saves: int, every_output: bool) -> dict:
    overrides = {
        "params.form": "network",
        "params.depth": LAYERS,
        "output.saves": saves,
        "sweep.beta": {"start": 0.1, "stop": 9.0, "num": BETAS},
        "ensemble.runs": RUNS,
        "integrator.horizon": LAYERS * STEP,
        "params.delta": 1e-3,
    }
    if not every_output:
        overrides["output.observables"] = ["pair_fraction"]
    return overrides


def run_ours(path: Path, overrides: dict) -> float:
    """Wall time of ``dyn.run`` in this process (numba's kernels already loaded)."""
    import dyn

    start = time.perf_counter()
    dyn.run(SCENARIO, path, overrides=overrides, progress=False, log=open(os.devnull, "w"))
    return time.perf_counter() - start


def toml_value(value) -> str:
    """A value of :func:`our_overrides` as the TOML text of ``dyn run --set``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)  # str, int, float: TOML's spelling is JSON's here


def run_cli(path: Path, overrides: dict) -> float:
    """Wall time of the command line a user types: ``python -m dyn run SCENARIO --set ...`` in a
    fresh process (interpreter start, imports, numba's cache loads, the sweep, the file)."""
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={toml_value(value)}")]
    command = [
        sys.executable,
        "-m",
        "dyn",
        "run",
        str(SCENARIO),
        "--out",
        str(path),
        "--no-progress",
        "--overwrite",
        *sets,
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise PeerError(f"dyn run failed (exit {done.returncode}): {last}")
    return wall


class MachineLoad:
    """CPU time the rest of the machine used while a block ran, as a share of all cores' time:
    the busy jiffies of /proc/stat less this process's and its children's CPU time. A ratio is
    only a ratio when both sides ran on a quiet machine; None where /proc/stat is absent."""

    def __enter__(self):
        self.start = (_busy_seconds(), _own_cpu_seconds(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        busy0, own0, wall0 = self.start
        busy1, own1, wall1 = _busy_seconds(), _own_cpu_seconds(), time.perf_counter()
        cores = os.cpu_count() or 1
        self.others = (
            None
            if busy0 is None or busy1 is None
            else max(0.0, (busy1 - busy0) - (own1 - own0)) / (cores * (wall1 - wall0))
        )
        return False


def _busy_seconds() -> float | None:
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is inside user


def _own_cpu_seconds() -> float:
    import resource

    me, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def exp_ceiling(repeat: int = 7) -> float:
    """exps per second of the vectorised exp on all cores (dyn.numerics.vexp, a cache-resident
    row of n^2 floats per thread), the bound of the small-n field."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from attention_architectures import exp_rate  # noqa: E402

    return exp_rate(repeat)


def picture_difference(peer: dict, path: Path) -> tuple[float, float]:
    """Mean |ours - peer| over betas and the peer's checkpoints (each taken at the first layer
    whose time reaches it, as the peer records it), and the mean |difference| two independent
    ensembles would show: sqrt(2) se sqrt(2 / pi), se the file's standard error over runs (the
    pairs of one run are not independent, so the runs are the samples)."""
    import xarray as xr

    with xr.open_dataset(path, engine="h5netcdf") as ds:
        ours = ds["pair_fraction"].values  # (beta, time), time = layer * STEP
        se = ds["pair_fraction_se"].values
        t_ours = ds["time"].values
    layers = np.ceil(np.asarray(peer["times"], dtype=float) / STEP - 1e-9).astype(int)
    saved = np.round(t_ours / STEP).astype(int)
    idx = np.minimum(np.searchsorted(saved, layers), len(saved) - 1)
    both = saved[idx] == layers  # checkpoints at a layer both sides recorded
    theirs = np.asarray(peer["fraction"])[:, both]
    diff = np.abs(ours[:, idx[both]] - theirs)
    return float(diff.mean()), float(np.mean(np.sqrt(2.0) * se[:, idx[both]]) * np.sqrt(2.0 / np.pi))


def main(argv=None) -> int:
    global BETAS, RUNS, LAYERS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", type=Path, help="path of the peer's phase-diagrams.py")
    ap.add_argument("--peer-python", default=sys.executable, help="an interpreter with torch")
    ap.add_argument(
        "--saves",
        type=int,
        default=LAYERS,
        help=f"layers this project records (a divisor of {LAYERS}; the peer records 200 checkpoints)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="sandwiched pairs: each peer run sits between two of this project's "
        "(the median ratio of the pairs is printed)",
    )
    ap.add_argument(
        "--max-load",
        type=float,
        default=0.10,
        help="the largest share of the machine's CPU other processes may use during "
        "the runs; above it nothing is reported (default 0.10)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="2 betas x 4 runs x 10 layers (and the "
        "peer, if given, as it is): that the script runs, in seconds; no refusal",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        BETAS, RUNS, LAYERS = 2, 4, 10
        args.saves, args.repeat = LAYERS, 1
    try:
        check_peer(args.peer, args.peer_python)
        return compare(args)
    except PeerError as exc:
        print(f"peer.py: {exc}", file=sys.stderr)
        return 2


MODES = (("equal work", False), ("all outputs", True))


def compare(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for _, every in MODES:  # fills numba's cache (and this process's kernels) for both
            run_ours(
                tmp / f"warm{every}.h5",
                {**our_overrides(args.saves, every), "sweep.beta": {"start": 0.1, "stop": 9.0, "num": 2}},
            )
        ceiling = exp_ceiling(1 if args.smoke else 7)
        exps = BETAS * RUNS * LAYERS * N * (N + 1) / 2  # the symmetric field: n(n+1)/2 per layer
        print(
            f"work: {BETAS} betas x {RUNS} runs x {LAYERS} post-norm layers, n = {N}, d = {D}; "
            f"this project observes {args.saves} layers (equal work: the pair fraction; all "
            f"outputs: all nine), the peer the pair fraction at 200 checkpoints; "
            f"exp ceiling {ceiling / 1e9:.2f} Gexp/s on all cores"
        )
        cli = {mode: [] for mode, _ in MODES}
        inproc = {mode: [] for mode, _ in MODES}
        peer_walls, ratios, peer, info = [], {mode: [] for mode, _ in MODES}, None, {}
        with MachineLoad() as load:

            def ours_once(i):  # one command line run of each mode, one in-process run beside it
                for mode, every in MODES:
                    overrides = our_overrides(args.saves, every)
                    cli[mode].append(run_cli(tmp / f"cli{every}{i}.h5", overrides))
                    inproc[mode].append(run_ours(tmp / f"in{every}{i}.h5", overrides))

            ours_once(0)
            for i in range(1, 1 + (args.repeat if args.peer or not args.smoke else 0)):
                if args.peer:
                    wall, info, peer = run_peer(args.peer.resolve(), args.peer_python, tmp)
                    peer_walls.append(wall)
                ours_once(i)
                for mode, _ in MODES:
                    if args.peer:
                        ratios[mode].append(2 * wall / (cli[mode][-2] + cli[mode][-1]))
        others = load.others
        loaded = others is not None and others > args.max_load
        print(
            f"other processes used {'an unknown share' if others is None else f'{100 * others:.0f}%'}"
            f" of the machine's CPU during the runs (at most {100 * args.max_load:.0f}% to report)"
        )
        if loaded and not args.smoke:
            print("peer.py: the machine was busy: no ratio is reported; run again on a quiet machine", file=sys.stderr)
            return 3
        print(
            f"  {'':12s} {'dyn run (CLI)':>14s} {'in-process':>11s} {'Gexp/s':>7s} "
            f"{'of ceiling':>10s} {'peer / ours':>12s}"
        )
        for mode, _ in MODES:
            t = float(np.median(cli[mode]))
            ratio = f"{np.median(ratios[mode]):.1f}x" if ratios[mode] else "-"
            print(
                f"  {mode:12s} {t:12.2f} s {np.median(inproc[mode]):9.2f} s "
                f"{exps / t / 1e9:7.2f} {100 * exps / t / ceiling:9.0f}% {ratio:>12s}"
            )
        print(
            f"  (medians of {len(cli['equal work'])} runs of each; a ratio: the median over "
            f"{len(peer_walls)} peer runs, each between two command line runs of each mode)"
        )
        if args.peer is None:
            print("  (no --peer: the peer's side is not run)")
            return 0
        print(
            f"  peer (torch {info['torch']}, {info['threads']} threads): " + ", ".join(f"{w:.2f} s" for w in peer_walls)
        )
        diff, se = picture_difference(peer, tmp / "cliFalse0.h5")
        print(f"  pictures: mean |difference| {diff:.4f}; two independent ensembles: {se:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
