"""How the cost grows with the number of tokens and of runs, to size a sweep before starting it.

    PYTHONPATH=. python benchmarks/scaling.py [--max-n 16384] [--quick]

Three tables, each with the fitted exponent of cost ~ size^a per regime (least squares on
log-log points, the regime's smallest size left out when it has three or more) and the memory
one ensemble member needs:

1. the attention field (`dyn.numerics.attention_field.field`, SA, Q = K = V = I, one head) per
   call against n, on the circle (d = 2) and at d = 64: the small regime (loops, below the
   crossover of attention_field.CROSSOVER) and the GEMM regime. Memory per member: its
   scratch (the n x n weights: 8 n^2 bytes, 2 GB at n = 16384, 80 GB at n = 1e5) plus the state and the RK4 stages;
2. the Fourier drift on the circle (`dyn.noisy.fourier.fourier_drift`, O(nK), beta = 4: K = 18)
   per call against n up to 1e5 and beyond: the way to 1e5 tokens on the circle;
3. one sweep point of the main job's system (attention_sphere, n = 32, d = 2, RK4 dt = 0.1 to
   T = 30) against its number of runs: the cost per run once the threads are busy.

Beside them, this machine's float64 GEMM rate (numpy, 2048^3) as the ceiling of the GEMM regime.
`dyn run --dry-run` measures a sweep's own points instead (dyn.engine.estimate); these tables
say how that cost will move when n or the runs change.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from _timing import add_smoke, best_of
from attention_rhs import gemm_rate
from dyn.engine.executors import compute_point
from dyn.engine.scenario import load
from dyn.engine.store import size_text
from dyn.noisy.fourier import fourier_drift, work_size as fourier_work
from dyn.noisy.params import pack_fourier
from dyn.numerics import attention_field as af

BETA = 4.0
RK4_STATES = 6  # x, four stages, the stage point: what an RK4 member holds besides the scratch


def _unit_rows(n: int, d: int, rng) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _repeat_for(seconds: float) -> int:
    return 5 if seconds < 0.05 else 3 if seconds < 1.0 else 1


def field_rows(d: int, sizes, rng) -> list[tuple]:
    """(n, regime, seconds per call, flops per second, bytes per member) for each n."""
    eye = np.eye(d).ravel()
    rows = []
    for n in sizes:
        x = _unit_rows(n, d, rng)
        out = np.empty_like(x)
        work = np.empty(af.work_size(n, d, 1))

        def call():
            af.field(x, BETA, False, False, 0.0, 1, eye, True, eye, True, out, work)  # noqa: B023 timed within this iteration

        start = time.perf_counter()
        call()  # compile or load, and a first estimate
        seconds = best_of(call, _repeat_for(time.perf_counter() - start), warmup=False)
        regime = "gemm" if af.regime(n, d, 1, False, True) == af.GEMM else "small"
        memory = 8 * (work.size + RK4_STATES * n * d)
        rows.append((n, regime, seconds, 4 * n * n * d / seconds, memory))
    return rows


def fourier_rows(sizes, rng) -> list[tuple]:
    """(n, seconds per call, bytes per member) of the O(nK) circle drift."""
    rows = []
    for n in sizes:
        p = pack_fourier(BETA, 0.5, n, "SA")
        x = _unit_rows(n, 2, rng)
        out = np.empty_like(x)
        work = np.empty(fourier_work(n, 2, p))
        seconds = best_of(lambda: fourier_drift(0.0, x, p, out, work), 5)  # noqa: B023 timed within this iteration
        rows.append((n, seconds, 8 * (work.size + RK4_STATES * n * 2)))
    return rows


def runs_rows(counts) -> list[tuple]:
    """(runs, seconds per point, seconds per run) of one attention_clusters point."""
    setup = load("scenarios/attention_clusters.toml").setup
    rows = []
    for runs in counts:
        small = dataclasses.replace(setup, runs=runs, tag=f"scaling:{runs}")
        compute_point(small, 22)  # compile or load
        seconds = best_of(lambda: compute_point(small, 22), 3, warmup=False)  # noqa: B023 timed within this iteration
        rows.append((runs, seconds, seconds / runs))
    return rows


def exponent(sizes, seconds) -> float:
    """Slope of log seconds against log size, the smallest size dropped when 3+ remain."""
    sizes, seconds = np.asarray(sizes, float), np.asarray(seconds, float)
    if len(sizes) >= 4:
        sizes, seconds = sizes[1:], seconds[1:]
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0]) if len(sizes) >= 2 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-n", type=int, default=16384, help="largest n of the attention field")
    ap.add_argument("--quick", action="store_true", help="fewer sizes")
    add_smoke(ap)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    top = 7 if args.smoke else 11 if args.quick else 15
    sizes = [n for n in (2**k for k in range(5, top)) if n <= args.max_n]
    ceiling = gemm_rate(1, 64) if args.smoke else gemm_rate(3)
    print(f"float64 GEMM ceiling (numpy, 2048^3): {ceiling / 1e9:.1f} GFLOP/s\n")

    for d in (2, 64):
        rows = field_rows(d, sizes, rng)
        print(f"attention field, d = {d} (SA, one head; flops: 4 n^2 d per call)")
        print(f"{'n':>7} {'regime':>6} {'s/call':>10} {'GFLOP/s':>8} {'of GEMM':>8} {'memory/member':>14}")
        for n, regime, s, rate, mem in rows:
            print(f"{n:7d} {regime:>6} {s:10.3e} {rate / 1e9:8.2f} {100 * rate / ceiling:7.1f}% {size_text(mem):>14}")
        for regime in ("small", "gemm"):
            part = [(n, s) for n, r, s, _, _ in rows if r == regime]
            if len(part) >= 2:
                print(
                    f"  {regime}: cost ~ n^{exponent(*zip(*part, strict=True)):.2f} over n = "
                    f"{part[0][0]}..{part[-1][0]}"
                )
        print()

    fsizes = [10**k for k in range(2, 4 if args.smoke else 6 if args.quick else 7)]
    rows = fourier_rows(fsizes, rng)
    print(f"Fourier drift on the circle (beta = {BETA}, K = 18; O(nK))")
    print(f"{'n':>8} {'s/call':>10} {'ns/token':>9} {'memory/member':>14}")
    for n, s, mem in rows:
        print(f"{n:8d} {s:10.3e} {1e9 * s / n:9.1f} {size_text(mem):>14}")
    print(f"  cost ~ n^{exponent([r[0] for r in rows], [r[1] for r in rows]):.2f}\n")

    counts = [1, 2] if args.smoke else [1, 4, 16, 64, 256] if args.quick else [1, 4, 16, 64, 256, 1024]
    rows = runs_rows(counts)
    print("one attention_clusters point (n = 32, d = 2, RK4 dt = 0.1, T = 30) against its runs")
    print(f"{'runs':>6} {'s/point':>9} {'ms/run':>8}")
    for runs, s, per in rows:
        print(f"{runs:6d} {s:9.3f} {1e3 * per:8.2f}")
    print(
        f"  cost ~ runs^{exponent([r[0] for r in rows], [r[1] for r in rows]):.2f} (1 once every thread has runs to do)"
    )


if __name__ == "__main__":
    main()
