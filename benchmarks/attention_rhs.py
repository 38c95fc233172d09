"""Speed of the attention right-hand side and of one ensemble step, numba / JAX / numpy; the
small-n drift against the exp ceiling; the crossover of the attention field's regimes.

    PYTHONPATH=. python benchmarks/attention_rhs.py [--repeat 7] [--only rhs|drift|crossover]

1. Cases (E=2048, n=32, d=2) and (E=1, n=1024, d=64). Flops are counted as the two GEMMs of the
   right-hand side, 4 n^2 d per member (``X X^T`` and ``A X``), and n^2 exps per member; the
   ceiling is numpy's float64 GEMM rate on this machine (2048^3 matmul, 2 N^3 flops), measured
   here.
2. The small-n drift (E = 2048, n = 32, d = 2, SA, no mask: the post-LN layer output through
   the integrators' function pointer, all cores) as a fraction of the exp ceiling
   (:mod:`dyn.numerics.vexp` on all cores, a cache-resident row of 1024 per thread), counting
   n^2 exps per member, measured in turns with it (median of `repeat` rounds): every member
   with its own scratch (a cold cache, as attention_architectures.py measures it), and each
   thread's members on one scratch (hot, as a solver's member loop sees it).
3. The crossover table: seconds per call / n^2 of each regime of
   :mod:`dyn.numerics.attention_field` (symmetric and columns paths of the small regime, GEMM)
   for one member on one thread, over n and d (SA, M = V = I, one head), in turns (median of
   `repeat`), in a child process with BLAS on one thread (an ensemble's members each hold one
   core); the first n at which GEMM wins, beside the table the field uses
   (``attention_field.CROSSOVER``), and at d = 2 the rise of the chosen regime's time per pair
   from one n to the next.
"""

# ruff: noqa: B023 (every timed closure runs within the loop iteration that defines it)

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
from numba import njit, prange, types

import integrators
from _timing import add_smoke, best_of
from dyn import attention as att
from dyn.attention import architecture as arch, schemes
from dyn.numerics import _field_gemm, _field_small, _field_symmetric, attention_field as af
from integrators.numba.abi import DRIFT_FN, F1, F2, F3, NJIT, NJIT_PARALLEL

CASES = [(2048, 32, 2), (1, 1024, 64)]
BETA = 1.0


def gemm_rate(repeat, N=2048):
    a = np.random.default_rng(0).random((N, N))
    out = np.empty_like(a)
    return 2 * N**3 / best_of(lambda: np.matmul(a, a, out=out), repeat)


def numpy_rhs(x, beta):
    """Reference: batched numpy softmax attention, projected."""
    s = beta * (x @ np.swapaxes(x, -1, -2))
    s -= s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    a /= a.sum(axis=-1, keepdims=True)
    m = a @ x
    return m - (np.sum(x * m, -1) / np.sum(x * x, -1))[..., None] * x


def numpy_rk4_step(x, beta, h):
    k1 = numpy_rhs(x, beta)
    k2 = numpy_rhs(x + 0.5 * h * k1, beta)
    k3 = numpy_rhs(x + 0.5 * h * k2, beta)
    k4 = numpy_rhs(x + h * k3, beta)
    y = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


@njit(**NJIT_PARALLEL)
def numba_ensemble_rhs(x, p, out, work):
    for e in prange(x.shape[0]):
        att.attention_drift(0.0, x[e], p, out[e], work[e])


def interleaved_medians(fns: dict, repeat: int) -> dict:
    """Median wall time of each callable over `repeat` rounds, the callables in turns within a
    round (load from other processes hits them alike)."""
    for fn in fns.values():
        fn()  # compile, fill caches
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


@njit(types.void(F3, F1, F3, F2, DRIFT_FN), **NJIT_PARALLEL)
def _hot_ensemble(x, p, out, work, drift):
    """Every member's drift, each thread's members on one scratch row (a solver's member loop)."""
    E = x.shape[0]
    threads = work.shape[0]
    for t in prange(threads):
        for e in range(t * E // threads, (t + 1) * E // threads):
            drift(0.0, x[e], p, out[e], work[t])


def small_drift(repeat, E=2048, n=32, d=2):
    """Section 2: the small-n drift's fraction of the exp ceiling, measured in turns."""
    from numba import get_num_threads

    from attention_architectures import _exp_call, ensemble_drift

    x = att.uniform_sphere(np.random.default_rng(3), E, n, d)
    out = np.empty_like(x)
    p = np.array(arch.pack_architecture(BETA, d))
    size = schemes.work_size(n, d, p)
    cold = np.empty((E, size))
    hot = np.empty((get_num_threads(), size))
    exp_call, exp_count = _exp_call()
    drift = schemes.POST.drift.compiled()  # numba takes the dispatcher as a first-class function
    times = interleaved_medians(
        {
            "exp ceiling": exp_call,
            "drift, scratch per member": lambda: ensemble_drift(x, p, out, cold, drift),
            "drift, scratch per thread": lambda: _hot_ensemble(x, p, out, hot, drift),
        },
        repeat,
    )
    ceiling = exp_count / times.pop("exp ceiling")
    print(
        f"small-n drift, E = {E}, n = {n}, d = {d}, post-LN (SA, no mask), "
        f"{get_num_threads()} threads; exp ceiling {ceiling / 1e9:.3f} Gexp/s (median of "
        f"{repeat}, in turns)"
    )
    for name, t in times.items():
        rate = E * n * n / t
        print(
            f"{name:>28} {t / E * 1e9:8.0f} ns/member {rate / 1e9:7.3f} n^2-exps/s "
            f"{100 * rate / ceiling:5.1f}% of the exp ceiling"
        )
    print("   (n^2 exps counted per member; the kernel computes n(n+1)/2, the weights being symmetric)\n")


# ------------------------------------------------------------------- the regimes' crossover

CROSSOVER_D = (2, 3, 4, 8, 16, 64)
CROSSOVER_N = (16, 32, 64, 128, 256, 512, 1024, 2048)
REGIME_NAMES = {af.SYMMETRIC: "symmetric", af.COLUMNS: "columns", af.GEMM: "gemm"}


def _looped(kernel):
    @njit(**NJIT)
    def loop(x, M, out, work, reps):
        for _ in range(reps):
            kernel(x, BETA, False, False, 0.0, 1, M, True, M, True, out, work)

    return loop


def _per_pair(loops, n, d, repeat, target=0.002):
    """Median seconds per call / n^2 of each looped kernel on one member, in turns."""
    x = att.uniform_sphere(np.random.default_rng(5), 1, n, d)[0]
    M, out = np.zeros(1), np.empty((n, d))
    work = np.empty(max(_field_small.work_size(n, d), _field_gemm.work_size(n, d, 1)))
    reps = {}
    for name, loop in loops.items():
        start = time.perf_counter()
        loop(x, M, out, work, 1)
        reps[name] = max(1, int(target / max(time.perf_counter() - start, 1e-9)))
    fns = {name: (lambda loop=loop, r=reps[name]: loop(x, M, out, work, r)) for name, loop in loops.items()}
    t = interleaved_medians(fns, repeat)
    return {name: t[name] / reps[name] / (n * n) for name in loops}


def _first_gemm(ns, per_pair, path):
    """The first n from which GEMM is faster than `path` at every larger n measured."""
    first = None
    for n in ns:
        if per_pair[n]["gemm"] < per_pair[n][path]:
            first = first or n
        else:
            first = None
    return first


def crossover(repeat, ds=CROSSOVER_D, ns=CROSSOVER_N):
    """Section 3 (run with BLAS on one thread: see main)."""
    loops = {
        "symmetric": _looped(_field_symmetric.symmetric),
        "columns": _looped(_field_small.columns),
        "gemm": _looped(_field_gemm.gemm),
    }
    print(
        "crossover of the attention field's regimes: ns per pair (s per call / n^2), one "
        f"member, one thread, BLAS on one thread, median of {repeat} in turns; chosen: the "
        "regime the field picks for each path, its time against the faster of the path and GEMM"
    )
    hdr = f"{'d':>3} {'n':>5} {'symmetric':>10} {'columns':>9} {'gemm':>8} {'chosen (sym)':>15} {'chosen (cols)':>15}"
    print(hdr + "\n" + "-" * len(hdr))
    chosen = {}
    for d in ds:
        per_pair = {}
        for n in ns:
            t = per_pair[n] = _per_pair(loops, n, d, repeat)
            picks = []
            for path, sym in (("symmetric", True), ("columns", False)):
                which = REGIME_NAMES[af.regime(n, d, 1, not sym, True)]
                chosen[d, n, path] = t[which]
                picks.append(f"{which} {t[which] / min(t[path], t['gemm']):4.2f}x")
            print(
                f"{d:3d} {n:5d} {t['symmetric'] * 1e9:10.3f} {t['columns'] * 1e9:9.3f} "
                f"{t['gemm'] * 1e9:8.3f} {picks[0]:>15} {picks[1]:>15}",
                flush=True,
            )
        table = af.CROSSOVER.get(d)
        shown = ["never" if v == af.NEVER else str(v) for v in table] if table else ["-", "-"]
        measured = [_first_gemm(ns, per_pair, path) or "never" for path in ("symmetric", "columns")]
        print(
            f"    d = {d}: GEMM faster from n = {measured[0]} on (symmetric path), {measured[1]} "
            f"(columns path); attention_field.CROSSOVER: {shown[0]}, {shown[1]}"
        )
    if 2 in ds:
        for path, column in (("symmetric", 0), ("columns", 1)):
            first = af.CROSSOVER[2][column]
            later = [n for n in ns if n >= 64]
            rises = [chosen[2, b, path] / chosen[2, a, path] for a, b in zip(later, later[1:], strict=False)]
            text = (
                f"d = 2, {path} path: time per pair of the chosen regime, largest rise from one "
                f"n to the next for n >= 64: {max(rises):.2f}x"
                if rises
                else ""
            )
            if first in ns and ns.index(first) > 0:
                before = ns[ns.index(first) - 1]
                text += (
                    f"; across the crossover (n = {before} -> {first}, small -> GEMM): "
                    f"{chosen[2, first, path] / chosen[2, before, path]:.2f}x (goal <= 1.3x)"
                )
            else:
                text += "; no crossover up to n = " + str(ns[-1])
            print(text)
    print()


def _crossover_in_child(repeat):
    """Section 3 in a child process with BLAS on one thread (numba's np.dot calls the BLAS
    that scipy links; its thread pool is sized when it loads)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = [sys.executable, __file__, "--only", "crossover", "--repeat", str(repeat), "--in-child"]
    done = subprocess.run(args, env=env, check=True, capture_output=True, text=True)
    print(done.stdout, end="")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--only", choices=("rhs", "drift", "crossover"), help="one section")
    ap.add_argument("--in-child", action="store_true", help=argparse.SUPPRESS)
    add_smoke(ap)
    args = ap.parse_args()
    cases, gemm_n = CASES, 2048
    if args.smoke:
        cases, gemm_n, args.repeat = [(4, 8, 2), (1, 16, 4)], 64, 1
    if args.only == "crossover" and args.in_child:
        crossover(args.repeat)
        return
    if args.only in (None, "drift"):
        small_drift(args.repeat, *((8, 8, 2) if args.smoke else ()))
    if args.only in (None, "crossover"):
        if args.smoke:  # nothing measured: the table's code runs, in this process
            crossover(1, (2, 8), (16, 32))
        else:
            _crossover_in_child(args.repeat)
    if args.only not in (None, "rhs"):
        return
    import jax

    jax.config.update("jax_enable_x64", True)
    jrhs = jax.jit(jax.vmap(att.attention_drift_jax, in_axes=(None, 0, None)))

    ceiling = gemm_rate(args.repeat, gemm_n)
    print(f"numpy float64 GEMM ceiling (2048^3): {ceiling / 1e9:.1f} GFLOP/s\n")
    hdr = f"{'case':>16} {'what':>22} {'time':>10} {'x numpy':>8} {'GFLOP/s':>8} {'Gexp/s':>7} {'ceil%':>6}"
    print(hdr)
    print("-" * len(hdr))
    rng = np.random.default_rng(1)
    for E, n, d in cases:
        x = att.uniform_sphere(rng, E, n, d)
        p = att.pack_params(BETA, d)
        out = np.empty_like(x)
        work = np.empty((E, att.work_size(n, d)))  # the integrators allocate it once per member
        flops, exps = 4.0 * E * n * n * d, float(E) * n * n
        h = 0.01
        rk4 = integrators.get("numba", "rk4", dt=h)
        prob = att.flow_problem(p)
        ts = np.array([0.0, h])
        xj = jax.numpy.array(x, copy=True)  # asarray may alias and freeze x / p (read-only for numba)
        pj = jax.numpy.array(p, copy=True)
        rows = [
            ("rhs numpy", 1, lambda: numpy_rhs(x, BETA)),
            # one member: on the calling thread, as the integrators do (BLAS keeps its threads)
            (
                "rhs numba",
                1,
                (lambda: att.attention_drift(0.0, x[0], p, out[0], work[0]))
                if E == 1
                else (lambda: numba_ensemble_rhs(x, p, out, work)),
            ),
            ("rhs jax jit+vmap", 1, lambda: jrhs(0.0, xj, pj).block_until_ready()),
            ("rk4 step numpy", 4, lambda: numpy_rk4_step(x, BETA, h)),
            ("rk4 step numba", 4, lambda: rk4.solve(prob, x, ts).states),
            ("postnorm layer numba", 1, lambda: att.postnorm_layers(x, 1, h, BETA, p=p)),
        ]
        base = {}
        for name, n_rhs, fn in rows:
            t = best_of(fn, args.repeat)
            kind = name.split()[0]
            base.setdefault(kind, t)
            rate = n_rhs * flops / t
            print(
                f"{f'E={E} n={n} d={d}':>16} {name:>22} {t * 1e3:8.3f}ms {base[kind] / t:8.2f} "
                f"{rate / 1e9:8.1f} {n_rhs * exps / t / 1e9:7.3f} {100 * rate / ceiling:5.1f}%"
            )
        print()
    again = gemm_rate(args.repeat, gemm_n)
    print(
        f"GEMM ceiling re-measured: {again / 1e9:.1f} GFLOP/s; if far from the first, the machine "
        "was shared and the ceil% column is unreliable"
    )


if __name__ == "__main__":
    main()
