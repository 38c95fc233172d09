"""The first run against a warm one: what numba's compilation costs a user.

Runs a shipped scenario three times, each a fresh `python -m dyn run` process, side by side:
1. cold: an empty numba cache (NUMBA_CACHE_DIR in a temporary folder), as after a fresh clone;
2. warm: the same cache again, now filled by run 1;
3. import only: a process that imports every kernel module and compiles nothing (the floor a
   run pays before its first step).
It prints the three times, the cold/warm ratio (target: at most 1.5) and the compile share
(cold - warm) / cold. This machine's speed drifts by tens of percent within minutes, so
``--repeat N`` runs N cold-warm pairs and reports the median ratio.

``--compare BEFORE AFTER`` measures two checkouts side by side instead (each run's
``PYTHONPATH`` is its tree, each round with an empty numba cache of its own): the rounds
interleaved B A B A ... (``--repeat`` rounds of one cold run and ``--warm`` warm ones), each
run's wall seconds and CPU seconds (the process and the children it waited for: the steadier
measure on a shared machine), then a table of the medians, before against after.

    python benchmarks/first_run.py [scenario] [--set KEY=VALUE ...] [--repeat N]
    python benchmarks/first_run.py --compare ../before . --repeat 3 --warm 3

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


def timed_cpu(cmd: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of a command: user + system time of the process and of every
    child it waited for (os.wait4's account)."""
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise subprocess.CalledProcessError(child.returncode, cmd)
    return wall, usage.ru_utime + usage.ru_stime


def compare(trees: list[str], scenario: str, sets: list[str], rounds: int, warm: int = 1) -> None:
    """Cold and warm runs of two checkouts, interleaved (each round: one cold run on an empty
    cache, then `warm` runs on the cache it filled); the table of their medians."""
    names = ("before", "after")
    found = {name: {"cold": [], "warm": []} for name in names}
    order = [(name, tree) for _ in range(rounds) for name, tree in reversed(list(zip(names, trees, strict=True)))]
    for name, tree in order:
        tree = Path(tree).resolve()
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / "numba"), "PYTHONPATH": str(tree)}
            run = [sys.executable, "-m", "dyn", "run", str(tree / scenario), "--no-progress", *sets, "--out"]
            for k, kind in enumerate(("cold",) + ("warm",) * warm):
                wall, cpu = timed_cpu(run + [str(Path(tmp) / f"{kind}{k}.h5")], env, tree)
                found[name][kind].append((wall, cpu))
                print(f"  {name:6} {kind}  wall {wall:6.1f} s  CPU {cpu:6.1f} s   ({tree})", flush=True)
    print("\n  median              before wall  after wall   ratio   before CPU  after CPU   ratio   runs")
    for kind in ("cold", "warm"):
        b, a = (np.median(np.array(found[n][kind]), axis=0) for n in names)
        print(
            f"  {kind} run        {b[0]:9.1f} s {a[0]:9.1f} s {a[0] / b[0]:7.2f}  "
            f"{b[1]:9.1f} s {a[1]:9.1f} s {a[1] / b[1]:7.2f}   {len(found['after'][kind])} each"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/attention_clusters.toml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="cold-warm pairs, one after the other (this machine's speed drifts "
        "by tens of percent: compare within a pair, report the median)",
    )
    parser.add_argument(
        "--warm",
        type=int,
        default=1,
        help="with --compare: warm runs per round, each a new process on the round's cache "
        "(a warm run varies by tens of percent here: more of them narrow its median)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="two checkouts measured side by side, interleaved (see the doc)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a one-point run of the main job, "
        "both times on this checkout's warm cache (a cold one compiles for a "
        "minute): that the script runs, not what the compile costs",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.set = ["sweep.beta=[1.0]", "ensemble.runs=2", "integrator.horizon=1.0"]
        args.repeat = 1
    sets = [a for s in args.set for a in ("--set", s)]
    print(f"{args.scenario} {' '.join(args.set)}")
    if args.compare:
        compare(args.compare, args.scenario, sets, args.repeat, args.warm)
        return 0
    pairs = []
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ} if args.smoke else {**os.environ, "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
            run = [sys.executable, "-m", "dyn", "run", args.scenario, "--no-progress", *sets, "--out"]
            cold = timed(run + [str(Path(tmp) / "cold.h5")], env)
            warm = timed(run + [str(Path(tmp) / "warm.h5")], env)
            pairs.append((cold, warm))
            print(
                f"  cold (empty numba cache) {cold:6.1f} s   warm (cache from the cold run) "
                f"{warm:6.1f} s   cold / warm {cold / warm:.2f}",
                flush=True,
            )
            floor = math.nan if args.smoke else timed([sys.executable, "-c", IMPORT_EVERY_KERNEL], env)
    ratios = sorted(c / w for c, w in pairs)
    cold, warm = np.median([c for c, _ in pairs]), np.median([w for _, w in pairs])
    print(f"  import every kernel module   {floor:7.1f} s (compiles nothing)")
    print(
        f"  cold / warm = {np.median(ratios):.2f} (median of {len(pairs)}; target <= 1.5); "
        f"compile share of the first run {(cold - warm) / cold:.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
