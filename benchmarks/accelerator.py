"""Whole sweeps as one JAX computation (`[integrator] backend = "jax"`) against the numba path.

    PYTHONPATH=. python benchmarks/accelerator.py            # this machine (CPU or GPU)
    PYTHONPATH=. python benchmarks/accelerator.py --full     # the full two-token diagram

1. run-steps per second of the two-token phase diagram (form rho, and the exact-pair network),
   numba (every core) against the JAX path on the default JAX device, on the same points; and of
   noisy attention on the circle (n = 128 tokens, the O(nK) Fourier drift);
2. with --full: the whole two_token_phase diagram at 4000 runs x 225 points x 15 000 layers
   (until = horizon, T = 150, dt = 0.01: 1.35e10 run-steps) on the JAX path, compile time
   (first call) and steady time (second call) reported apart; numba timed on 1/25 of the points
   and scaled, for the ratio. Goal on one H200: the full diagram in <= 2 s after compilation.

`--smoke` runs every part (with --full, the full diagram's code too) at tiny sizes, in seconds on a
CPU: that the script works before a GPU is lent, not how fast.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import dyn
from dyn.engine import batched, ensemble

PHASE = "scenarios/two_token_phase.toml"
# the full diagram's settings; --smoke shrinks it to 2 x 2 points, 8 runs, T = 1
FULL = ["ensemble.runs=4000", 'params.until="horizon"']
FULL_SAMPLE = ["sweep.d=[8]", "sweep.beta=[0.0, 1.5, 3.0, 4.5, 6.0, 1.0, 2.0, 3.5, 5.5]"]
SMOKE_FULL = [
    "ensemble.runs=8",
    'params.until="horizon"',
    "sweep.beta=[1.0, 4.0]",
    "sweep.d=[3, 8]",
    "integrator.horizon=1.0",
]
SMOKE_SAMPLE = ["sweep.d=[8]", "sweep.beta=[1.0]"]


def scenario(points_beta, points_d, runs, horizon, form, backend):
    sets = {
        "sweep.beta": list(points_beta),
        "sweep.d": list(points_d),
        "ensemble.runs": runs,
        "params.until": "horizon",
        "integrator.horizon": horizon,
        "integrator.dt": 0.01,
        "params.form": form,
        "integrator.backend": backend,
    }
    return dyn.load(PHASE, [f"{k}={v!r}".replace("'", '"') for k, v in sets.items()])


def time_numba(sc, var="p_antipodal") -> tuple[float, float]:
    """Seconds and `var` averaged over points, point after point as dyn run does."""
    start = time.perf_counter()
    p = [ensemble.run_point(sc.system, sc.spec(i)).values[var] for i in range(sc.count)]
    return time.perf_counter() - start, float(np.mean(p))


def time_jax(sc, var="p_antipodal") -> tuple[float, float]:
    start = time.perf_counter()
    p = [r.values[var] for _, r in batched.iter_results(sc, range(sc.count))]
    return time.perf_counter() - start, float(np.mean(p))


def run_steps(sc) -> float:
    steps = round(sc.integrator["horizon"] / sc.integrator["dt"])
    return float(sc.count) * sc.setup.runs * steps


def compare(points_beta, points_d, runs, horizon, form):
    numba_sc = scenario(points_beta, points_d, runs, horizon, form, "numba")
    jax_sc = scenario(points_beta, points_d, runs, horizon, form, "jax")
    time_numba(scenario(points_beta[:1], points_d[:1], 8, 1.0, form, "numba"))  # compile
    first, _ = time_jax(jax_sc)  # compile + run
    t_jax, p_jax = time_jax(jax_sc)
    t_numba, p_numba = time_numba(numba_sc)
    work = run_steps(jax_sc)
    print(f"   {form:>8}: {jax_sc.count} points x {runs} runs x {round(horizon / 0.01)} steps = {work:.2e} run-steps")
    print(f"      numba {t_numba:8.2f} s  {work / t_numba / 1e6:9.1f} M run-steps/s  mean P(antipodal) {p_numba:.4f}")
    print(
        f"      jax   {t_jax:8.2f} s  {work / t_jax / 1e6:9.1f} M run-steps/s  "
        f"mean P(antipodal) {p_jax:.4f}  (first call incl. compile {first:.2f} s)"
    )
    print(f"      jax / numba speed: {t_numba / t_jax:.2f}x")


def compare_noisy(runs: int, horizon: float = 4.0):
    """noisy_phase points (n = 128 on the circle, Fourier drift), T = 4 at dt = 0.002, one
    window (burn-in T/2, no extension: every point takes the same steps on both paths)."""

    def load(backend, horizon):
        sets = [
            "sweep.beta=[1.0, 2.0, 3.0, 4.0]",
            "sweep.sigma=[0.5, 1.5]",
            f"ensemble.runs={runs}",
            f"integrator.horizon={horizon}",
            f"integrator.burn_in={horizon / 2}",
            f"integrator.horizon_cap={horizon}",
            "integrator.dt=0.002",
            "output.saves=8",
            f'integrator.backend="{backend}"',
        ]
        return dyn.load("scenarios/noisy_phase.toml", sets)

    time_numba(load("numba", 0.1), "r_stationary")  # compile
    jax_sc = load("jax", horizon)
    first, _ = time_jax(jax_sc, "r_stationary")
    t_jax, r_jax = time_jax(jax_sc, "r_stationary")
    t_numba, r_numba = time_numba(load("numba", horizon), "r_stationary")
    steps = round(horizon / 0.002)
    work = float(jax_sc.count) * runs * steps
    print(
        f"   noisy_attention: {jax_sc.count} points x {runs} runs x {steps} steps x 128 tokens = {work:.2e} run-steps"
    )
    print(f"      numba {t_numba:8.2f} s  {work / t_numba / 1e6:9.3f} M run-steps/s  mean r_stationary {r_numba:.4f}")
    print(
        f"      jax   {t_jax:8.2f} s  {work / t_jax / 1e6:9.3f} M run-steps/s  "
        f"mean r_stationary {r_jax:.4f}  (first call incl. compile {first:.2f} s)"
    )
    print(f"      jax / numba speed: {t_numba / t_jax:.2f}x")


def full_diagram(sets=FULL, sample_sets=FULL_SAMPLE):
    import jax

    sc = dyn.load(PHASE, [*sets, 'integrator.backend="jax"'])
    work = run_steps(sc)
    budget = batched.device_budget()
    plan = batched.batches(sc.system, [sc.spec(i) for i in range(sc.count)], budget)
    steps = round(sc.integrator["horizon"] / sc.integrator["dt"])
    print(
        f"\n2. full two_token_phase: {sc.count} points x {sc.setup.runs} runs x {steps} layers = "
        f"{work:.2e} run-steps on {jax.devices()[0]} ({len(plan)} batches, budget "
        f"{budget / 2**30:.1f} GiB)"
    )
    first, _ = time_jax(sc)
    steady, p = time_jax(sc)
    print(
        f"   jax: first call {first:.2f} s (compile + run), steady {steady:.2f} s = "
        f"{work / steady / 1e9:.2f} G run-steps/s; mean P(antipodal) {p:.4f}"
    )
    sample = dyn.load(PHASE, [*sets, *sample_sets])
    t_numba, _ = time_numba(sample)
    scaled = t_numba * sc.count / sample.count
    print(
        f"   numba on {sample.count} of the points: {t_numba:.2f} s, scaled to the diagram "
        f"{scaled:.1f} s; steady jax / numba speed {scaled / steady:.1f}x (goal on one H200: "
        f"steady <= 2 s)"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the full 225-point diagram")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="every part at tiny sizes, in seconds (with --full, the full diagram's code too): that the script works",
    )
    args = ap.parse_args()
    import jax

    print(
        f"JAX device: {jax.devices()[0]} ({jax.default_backend()}), batch budget "
        f"{batched.device_budget() / 2**30:.1f} GiB"
    )
    print("1. two-token phase points, until = horizon (every run takes every step)")
    betas, ds = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [3, 8, 16]
    horizon, noisy_horizon = 30.0, 4.0
    if args.smoke:
        betas, ds, args.runs, horizon, noisy_horizon = [1.0, 4.0], [3], 8, 0.5, 0.02
    compare(betas, ds, args.runs, horizon, "rho")
    compare(betas[::2], ds[:2], max(2, args.runs // 4), horizon, "network")
    compare_noisy(max(2, args.runs // 250), noisy_horizon)
    if args.full:
        full_diagram(*((SMOKE_FULL, SMOKE_SAMPLE) if args.smoke else ()))


if __name__ == "__main__":
    main()
