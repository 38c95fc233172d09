"""Observation inside the step loop against states stored and observed after (issue 41, item 1).

**Per member-layer** (first): the main job's layer (n = 32, d = 2, SA, post-norm network, step
0.1, 300 layers) on one thread, timed in thread CPU time (a busy machine's waits left out),
the variants interleaved in one process, the median of the repeats' ratios: the drift alone;
the general RK member loop (any table: stage arrays, a stage loop) against forward Euler's
one-stage loop (:func:`integrators.numba.fixed.kernels`), stored; and observed with the pair
observer, equal work (pair fraction alone) and all outputs, the general loop with the
observer as it was (:func:`previous_observer`: observables' close_fraction, close_rows then
join_rows) against the one-stage loop with :func:`dyn.attention.observer.pair_row`. Each
pair's rows are checked bit for bit. Printed beside them: the reference measured before these
loops (quiet machine, two threads, ns per member-layer, REFERENCE).

**End to end** (then):
The main job's two runs of ``benchmarks/peer.py`` (form = network, 300 layers, 256 runs per
beta, every layer saved): the equal-work run (``observables = ["pair_fraction"]``) and the
all-outputs run, each through ``dyn.run`` in this one process, old path (states stored, then
:func:`dyn.systems.attention_sphere._observed`) and fused path (the observer of
:mod:`dyn.attention.observer`) interleaved A/B/A/B. Printed: each pair's times, the median
time of each path and the median of the pairs' ratios old / fused, and whether the two paths'
files agree (pair fraction, min inner product and the cluster outputs bit for bit; the energy
and the first alignment to rounding).

    python benchmarks/fused_observation.py [--betas 9] [--pairs 3] [--repeats 11]
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

# ns per member-layer before the one-stage loop and the observer's passes here (quiet machine,
# two threads): the drift alone, a hand-written Euler loop, the general RK loop, the general
# loop observed (equal work), states stored then observed
REFERENCE = {
    "drift": 787,
    "hand-written Euler loop": 870,
    "general RK loop": 1053,
    "observed (equal work)": 1265,
    "stored then observed": 1425,
}
N, D, STEP = 32, 2, 0.1

EXACT = (
    "pair_fraction",
    "min_inner",
    "n_clusters",
    "p_one_cluster",
    "held_by_first",
    "held_by_early",
    "time_to_one_cluster",
)
ROUNDED = ("energy", "first_alignment")


def previous_observer():
    """The pair observer's kernel as it was before the passes of :mod:`dyn.attention.observer`
    (on the circle, from the field: observables' close_fraction for the pair fraction alone,
    else close_rows then join_rows), for the A/B of the per member-layer section."""
    import math

    from dyn.attention import observables as ob, observer as new
    from integrators.numba.abi import NJIT, OBSERVE_SIG
    from integrators.numba.jit import njit

    @njit(OBSERVE_SIG, **NJIT)
    def previous_row(t, x, q, row, drift_work, work):
        n, d = x.shape
        size = n * (n + 1) // 2
        g = work[:size]
        w = work[size : 2 * size]
        xt = work[3 * size : 3 * size + d * n].reshape((d, n))
        parent = work[3 * size + d * n : 3 * size + d * n + n].view(np.int64)
        join = q[new.JOIN] != 0.0
        beta = q[new.BETA]
        end = drift_work.shape[0]
        total = drift_work[end - 1]
        field = q[new.FROM_FIELD] != 0.0 and beta != 0.0 and 0.0 < total <= n * n
        if beta == 0.0 and not join and q[new.LEAST] == 0.0:
            row[0] = ob.close_fraction(x, q[new.THRESHOLD], xt)
            row[1] = np.nan
            row[2] = n * n
        else:
            row[0], row[1] = ob.close_rows(x, q[new.THRESHOLD], xt, g, w)
            row[2] = n * n
            if join:
                ob.join_rows(g, n, q[new.THRESHOLD], row[0] == 1.0, w, parent)
        if field:
            row[2] = math.exp(drift_work[end - 2]) * total
        at = ob.N_PAIR_STATS
        if join:
            for i in range(n):
                row[at + i] = parent[i]
            at += n
        if q[new.TOKEN_SUM] != 0.0:
            for k in range(d):
                acc = 0.0
                for i in range(n):
                    acc += x[i, k]
                row[at + k] = acc

    return previous_row


def member_layer(runs: int, layers: int, repeats: int, beta: float = 4.0) -> None:
    """Print the per member-layer section (see the module doc)."""
    import numba
    from numba import types

    from dyn.attention import architecture, schemes
    from dyn.attention.init import uniform_sphere
    from dyn.attention.observer import pair_observer
    from integrators.core.base import step_grid
    from integrators.core.tableau import TABLEAUS
    from integrators.numba import fixed
    from integrators.numba.abi import DRIFT_FN, F1, F3, NJIT
    from integrators.numba.jit import njit

    @njit(types.void(F3, F1, DRIFT_FN, types.int64, types.int64), **NJIT)
    def drift_alone(x, p, drift, work_size, layers):
        k = np.empty(x.shape[1:])
        work = np.empty(work_size)
        for e in range(x.shape[0]):
            for _ in range(layers):
                drift(0.0, x[e], p, k, work)

    stock = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        problem = schemes.scheme("post").network.problem(architecture.pack_architecture(beta, D, "SA"))
        x0 = uniform_sphere(np.random.default_rng(1), runs, N, D)
        ts = np.arange(layers + 1) * STEP
        counts, steps = step_grid(ts, STEP)
        tab = TABLEAUS["euler"]
        A, b, c, p = (np.array(a) for a in (tab.A, tab.b, tab.c, problem.p))
        geom, work = problem.geometry, problem.work_size(N, D)
        common = (ts, counts, steps, A, b, c, p, problem.drift, geom.project, geom.retract, work)

        def stored(block):
            out = np.empty((runs, len(ts), N, D))
            return lambda: (block(x0, *common, out), out)[1]

        def observed(block, kernel, every):
            obs = pair_observer(
                N, D, 1e-3, beta if every else 0.0, every, from_field=True, token_sum=every, min_inner=every
            )
            rows = np.empty((runs, len(ts), obs.columns))
            last, finite = np.empty_like(x0), np.empty(runs, dtype=np.int64)
            return lambda: (block(x0, *common, kernel, obs.q, obs.work, rows, last, finite), rows)[1]

        old_kernel = previous_observer()
        new_kernel = pair_observer(N, D, 1e-3).kernel
        one, one_observed = fixed.kernels(tab)
        pairs = {
            "stored": (stored(fixed._rk_block), stored(one)),
            "equal work": (
                observed(fixed._rk_block_observed, old_kernel, False),
                observed(one_observed, new_kernel, False),
            ),
            "all outputs": (
                observed(fixed._rk_block_observed, old_kernel, True),
                observed(one_observed, new_kernel, True),
            ),
        }
        same = {k: a().tobytes() == b().tobytes() for k, (a, b) in pairs.items()}
        alone = lambda: drift_alone(x0, p, problem.drift, work, layers)  # noqa: E731
        alone()
        times = {k: ([], []) for k in pairs}
        drift_times = []
        for _ in range(repeats):
            start = time.thread_time()
            alone()
            drift_times.append(time.thread_time() - start)
            for k, (a, b) in pairs.items():
                for f, into in ((a, times[k][0]), (b, times[k][1])):
                    start = time.thread_time()
                    f()
                    into.append(time.thread_time() - start)
        per = 1e9 / (runs * layers)
        print(
            f"per member-layer (n = {N}, d = {D}, SA, beta = {beta}, {runs} runs x {layers} layers,"
            f" one thread, thread CPU time, median of {repeats} interleaved repeats):"
        )
        print(f"  drift alone {np.median(drift_times) * per:.0f} ns")
        for k, (a, b) in times.items():
            a, b = np.array(a), np.array(b)
            print(
                f"  {k}: general loop{' + previous observer' if k != 'stored' else ''}"
                f" {np.median(a) * per:.0f} ns, one-stage loop{' + observer' if k != 'stored' else ''}"
                f" {np.median(b) * per:.0f} ns, ratio {np.median(b / a):.3f}"
                f" [{np.percentile(b / a, 25):.3f}, {np.percentile(b / a, 75):.3f}];"
                f" bit for bit: {same[k]}"
            )
        print(
            "  reference before (quiet machine, two threads): "
            + ", ".join(f"{k} {v} ns" for k, v in REFERENCE.items()),
            flush=True,
        )
    finally:
        numba.set_num_threads(stock)


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
        exact = [v for v in EXACT if v in a and not np.array_equal(a[v].values, b[v].values, equal_nan=True)]
        moved = {
            v: float(np.nanmax(np.abs(a[v].values - b[v].values) / np.maximum(np.abs(a[v].values), 1e-300)))
            for v in ROUNDED
            if v in a
        }
    text = "bit for bit: " + ("all" if not exact else f"NOT {exact}")
    return text + "".join(f"; {v} max rel {m:.1e}" for v, m in moved.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--betas", type=int, default=9)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=11, help="of the per member-layer section")
    ap.add_argument("--runs", type=int, default=64, help="of the per member-layer section")
    add_smoke(ap)
    args = ap.parse_args(argv)
    if args.smoke:  # the sizes our_overrides reads, as peer.py's own smoke sets them
        peer.RUNS, peer.LAYERS = 4, 10
        args.betas, args.pairs, args.repeats, args.runs = 2, 1, 1, 2
    member_layer(args.runs, peer.LAYERS, args.repeats)
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
                print(f"  {label}: pair {i}: old {olds[-1]:.2f} s, fused {news[-1]:.2f} s", flush=True)
            ratios = np.array(olds) / np.array(news)
            print(
                f"{label}, {args.betas} betas x {peer.RUNS} runs x {peer.LAYERS} layers: old {np.median(olds):.2f}"
                f" s, fused {np.median(news):.2f} s, ratio old / fused {np.median(ratios):.2f}x"
                f" (median of {args.pairs} pairs); {agreement(run / 'old0.h5', run / 'new0.h5')}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
