"""Observation inside the step loop against states stored and observed after (issue 41, item 1).

The main job's two runs of ``benchmarks/peer.py`` (form = network, 300 layers, 256 runs per
beta, every layer saved): the equal-work run (``observables = ["pair_fraction"]``) and the
all-outputs run, each through ``dyn.run`` in this one process, old path (states stored, then
:func:`dyn.systems.attention_sphere._observed`) and fused path (the observer of
:mod:`dyn.attention.observer`) interleaved A/B/A/B. Printed: each pair's times, the median
time of each path and the median of the pairs' ratios old / fused, and whether the two paths'
files agree (pair fraction, min inner product and the cluster outputs bit for bit; the energy
and the first alignment to rounding).

    python benchmarks/fused_observation.py [--betas 9] [--pairs 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer  # noqa: E402
from _timing import add_smoke  # noqa: E402
from peer import SCENARIO, our_overrides  # noqa: E402

EXACT = ("pair_fraction", "min_inner", "n_clusters", "p_one_cluster", "held_by_first",
         "held_by_early", "time_to_one_cluster")
ROUNDED = ("energy", "first_alignment")


def timed(path: Path, overrides: dict, fused: bool) -> float:
    import dyn
    from dyn.systems import attention_sphere

    stock = attention_sphere._fusable
    if not fused:
        attention_sphere._fusable = lambda spec: False
    try:
        start = time.perf_counter()
        dyn.run(SCENARIO, path, overrides=overrides, progress=False, log=open(os.devnull, "w"))
        return time.perf_counter() - start
    finally:
        attention_sphere._fusable = stock


def agreement(old: Path, new: Path) -> str:
    import xarray as xr

    with xr.open_dataset(old, engine="h5netcdf") as a, xr.open_dataset(new, engine="h5netcdf") as b:
        exact = [v for v in EXACT if v in a and not np.array_equal(a[v].values, b[v].values,
                                                                    equal_nan=True)]
        moved = {v: float(np.nanmax(np.abs(a[v].values - b[v].values) /
                                    np.maximum(np.abs(a[v].values), 1e-300)))
                 for v in ROUNDED if v in a}
    text = "bit for bit: " + ("all" if not exact else f"NOT {exact}")
    return text + "".join(f"; {v} max rel {m:.1e}" for v, m in moved.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--betas", type=int, default=9)
    ap.add_argument("--pairs", type=int, default=3)
    add_smoke(ap)
    args = ap.parse_args(argv)
    if args.smoke:  # the sizes our_overrides reads, as peer.py's own smoke sets them
        peer.RUNS, peer.LAYERS = 4, 10
        args.betas, args.pairs = 2, 1
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for label, every in (("equal work (pair_fraction)", False), ("all outputs", True)):
            run = tmp / ("all" if every else "equal")
            run.mkdir()
            overrides = our_overrides(peer.LAYERS, every)
            overrides["sweep.beta"] = {"start": 0.1, "stop": 9.0, "num": args.betas}
            warm = {**overrides, "sweep.beta": {"start": 0.1, "stop": 9.0, "num": 2}}
            timed(run / "warm_old.h5", warm, False)  # numba's cache, both paths
            timed(run / "warm_new.h5", warm, True)
            olds, news = [], []
            for i in range(args.pairs):
                olds.append(timed(run / f"old{i}.h5", overrides, False))
                news.append(timed(run / f"new{i}.h5", overrides, True))
                print(f"  {label}: pair {i}: old {olds[-1]:.2f} s, fused {news[-1]:.2f} s",
                      flush=True)
            ratios = np.array(olds) / np.array(news)
            print(f"{label}, {args.betas} betas x {peer.RUNS} runs x {peer.LAYERS} layers: old {np.median(olds):.2f}"
                  f" s, fused {np.median(news):.2f} s, ratio old / fused {np.median(ratios):.2f}x"
                  f" (median of {args.pairs} pairs); {agreement(run / 'old0.h5', run / 'new0.h5')}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
