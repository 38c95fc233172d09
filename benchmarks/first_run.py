"""The first run against a warm one: what numba's compilation costs a user (issue 25, item 3).

Runs a shipped scenario three times, each a fresh `python -m dyn run` process, side by side:
1. cold: an empty numba cache (NUMBA_CACHE_DIR in a temporary folder), as after a fresh clone;
2. warm: the same cache again, now filled by run 1;
3. import only: a process that imports every kernel module and compiles nothing (the floor a
   run pays before its first step).
It prints the three times, the cold/warm ratio (target: at most 1.5) and the compile share
(cold - warm) / cold. This machine's speed drifts by tens of percent within minutes, so
``--repeat N`` runs N cold-warm pairs and reports the median ratio; ``--plain`` runs numba's
plain path (``DYN_PLAIN_NUMBA=1``: none of :mod:`integrators.numba.internals`' optimizations).

    python benchmarks/first_run.py [scenario] [--set KEY=VALUE ...] [--repeat N] [--plain]

The default is the main job (attention_clusters); `--set ensemble.runs=32` shrinks it.
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent

IMPORT_EVERY_KERNEL = """
import importlib, pkgutil
import dyn, integrators
for package in (dyn, integrators):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not info.name.endswith(("__main__", "jax", "jax_batch")) and not info.name.startswith(
                ("integrators.jax", "integrators.diffrax")):
            importlib.import_module(info.name)
"""


def timed(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/attention_clusters.toml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--repeat", type=int, default=1,
                        help="cold-warm pairs, one after the other (this machine's speed drifts "
                             "by tens of percent: compare within a pair, report the median)")
    parser.add_argument("--plain", action="store_true",
                        help="DYN_PLAIN_NUMBA=1 for the runs (numba's public API only)")
    parser.add_argument("--smoke", action="store_true", help="a one-point run of the main job, "
                        "both times on this checkout's warm cache (a cold one compiles for a "
                        "minute): that the script runs, not what the compile costs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.set = ["sweep.beta=[1.0]", "ensemble.runs=2", "integrator.horizon=1.0"]
        args.repeat = 1
    sets = [a for s in args.set for a in ("--set", s)]
    print(f"{args.scenario} {' '.join(args.set)}")
    pairs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ} if args.smoke else {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
            if args.plain:
                env["DYN_PLAIN_NUMBA"] = "1"
            run = [sys.executable, "-m", "dyn", "run", args.scenario, "--no-progress", *sets,
                   "--out"]
            cold = timed(run + [str(Path(tmp) / "cold.h5")], env)
            warm = timed(run + [str(Path(tmp) / "warm.h5")], env)
            pairs.append((cold, warm))
            print(f"  cold (empty numba cache) {cold:6.1f} s   warm (cache from the cold run) "
                  f"{warm:6.1f} s   cold / warm {cold / warm:.2f}", flush=True)
            floor = math.nan if args.smoke else timed([sys.executable, "-c", IMPORT_EVERY_KERNEL], env)
    ratios = sorted(c / w for c, w in pairs)
    cold, warm = np.median([c for c, _ in pairs]), np.median([w for _, w in pairs])
    print(f"  import every kernel module   {floor:7.1f} s (compiles nothing)")
    print(f"  cold / warm = {np.median(ratios):.2f} (median of {len(pairs)}; target <= 1.5); "
          f"compile share of the first run {(cold - warm) / cold:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
