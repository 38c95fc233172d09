"""The main job's work against the closest public peer, side by side in one run (issue 25, item 1).

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

This project's side is the same work through the engine: ``dyn.run`` of the main scenario with
``form = "network"``, 300 layers of step 0.1, ``delta = 1e-3`` (the peer's 0.999), serial
executor (ensembles over all cores), after a first run that fills numba's cache, keeping the
peer's one observable (``output.observables = ["pair_fraction"]``: the others are not computed).
By default every layer is saved and observed, 300 against the peer's 200 checkpoints, so this
side does more than equal work; ``--saves 150`` observes every second layer, fewer than the
peer, and ``--all-observables`` computes all nine of the scenario's outputs as well.

Printed: both wall times and their ratio (target: at least 5; each peer run sits between two
of this project's, and ``--repeat N`` prints the median of N such ratios), the per-layer work
against the vectorised-exp ceiling (this project's side; the exps are the bound at n = 32,
d = 2), and the mean |difference| of the two pictures (pair fraction over beta and time) at the
peer's checkpoints beside what two independent ensembles of this size would show (from the
file's standard error over runs). Without ``--peer`` only this project's side is timed.
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
    driver = PEER_DRIVER % {"d": D, "n": N, "runs": RUNS, "betas": BETAS,
                            "horizon": LAYERS * STEP, "step": STEP}
    out = tmp / "peer.npz"
    done = subprocess.run([python, "-c", driver, str(peer), str(out)], capture_output=True,
                          text=True, cwd=tmp)
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
        raise PeerError(f"--peer {peer}: no such file; fetch the peer's phase-diagrams.py first "
                        "(this script's header says how)")
    if shutil.which(python) is None:
        raise PeerError(f"--peer-python {python}: no such interpreter; give one with torch "
                        "installed (this script's header says how)")


def our_overrides(saves: int, every_output: bool) -> dict:
    overrides = {"params.form": "network", "params.depth": LAYERS, "output.saves": saves,
                 "sweep.beta": {"start": 0.1, "stop": 9.0, "num": BETAS},
                 "ensemble.runs": RUNS, "integrator.horizon": LAYERS * STEP,
                 "params.delta": 1e-3}
    if not every_output:
        overrides["output.observables"] = ["pair_fraction"]
    return overrides


def run_ours(path: Path, overrides: dict) -> float:
    import dyn

    start = time.perf_counter()
    dyn.run(SCENARIO, path, overrides=overrides, progress=False, log=open(os.devnull, "w"))
    return time.perf_counter() - start


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
    ap.add_argument("--saves", type=int, default=LAYERS,
                    help=f"layers this project records (a divisor of {LAYERS}; the peer records "
                         "200 checkpoints)")
    ap.add_argument("--all-observables", action="store_true",
                    help="compute every output of the scenario, not only the peer's one")
    ap.add_argument("--repeat", type=int, default=1,
                    help="peer runs, each between two of this project's (this machine's speed "
                         "drifts by tens of percent within minutes: the median ratio is printed)")
    ap.add_argument("--smoke", action="store_true", help="2 betas x 4 runs x 10 layers (and the "
                    "peer, if given, as it is): that the script runs, in seconds")
    args = ap.parse_args(argv)
    if args.smoke:
        BETAS, RUNS, LAYERS = 2, 4, 10
        args.saves = LAYERS
    try:
        check_peer(args.peer, args.peer_python)
        return compare(args)
    except PeerError as exc:
        print(f"peer.py: {exc}", file=sys.stderr)
        return 2


def compare(args) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        overrides = our_overrides(args.saves, args.all_observables)
        run_ours(tmp / "warm.h5", {**overrides, "sweep.beta": {"start": 0.1, "stop": 9.0,
                                                               "num": 2}})  # fills numba's cache
        path = tmp / "ours0.h5"
        ours = [run_ours(path, overrides)]
        ceiling = exp_ceiling(1 if args.smoke else 7)
        exps = BETAS * RUNS * LAYERS * N * (N + 1) / 2  # the symmetric field: n(n+1)/2 per layer
        print(f"work: {BETAS} betas x {RUNS} runs x {LAYERS} post-norm layers, n = {N}, d = {D}; "
              f"{'every output' if args.all_observables else 'the pair fraction'} at "
              f"{args.saves} layers here, the pair fraction at 200 checkpoints in the peer")
        print(f"  this project (dyn.run, form = network)  {ours[0]:7.2f} s   "
              f"{exps / ours[0] / 1e9:.2f} Gexp/s = {100 * exps / ours[0] / ceiling:.0f}% of the "
              f"exp ceiling ({ceiling / 1e9:.2f} Gexp/s on all cores)")
        if args.peer is None:
            print("  (no --peer: the peer's side is not run)")
            return 0
        ratios = []
        for i in range(1, args.repeat + 1):
            wall, info, peer = run_peer(args.peer.resolve(), args.peer_python, tmp)
            ours.append(run_ours(tmp / f"ours{i}.h5", overrides))
            ratios.append(2 * wall / (ours[-2] + ours[-1]))
            print(f"  peer (torch {info['torch']}, {info['threads']} threads) {wall:7.2f} s, "
                  f"between this project's {ours[-2]:.2f} s and {ours[-1]:.2f} s: "
                  f"ratio {ratios[-1]:.1f}x", flush=True)
        print(f"  ratio peer / this project = {np.median(ratios):.1f}x (median of {len(ratios)}; "
              "target >= 5)")
        diff, se = picture_difference(peer, path)
        print(f"  pictures: mean |difference| {diff:.4f}; two independent ensembles: {se:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
