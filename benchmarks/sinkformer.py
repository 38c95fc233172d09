"""Sinkformer heat flow at n = 1000: plain numpy log-domain Sinkhorn vs the numba drift (and JAX).

    python benchmarks/sinkformer.py [--n 1000] [--iterations 10] [--steps 5] [--jax]

Same n, bandwidth, iteration count and steps for every contender: explicit Euler on
v_i = -(2 alpha/tau)(sum_j K_ij x_j - x_i), the plan recomputed by Sinkhorn at every step.
Reports time per Sinkhorn iteration (one normalization = n^2 exponentials) and exponentials per
second, next to the machine's exp ceilings measured in the same run (np.exp on an array, and the
numba vexp on cache-resident rows).
"""

from __future__ import annotations

import argparse

import numpy as np

import integrators
from _timing import add_smoke, best_of
from dyn import sinkformer as sf
from dyn.numerics.vexp import exp_inplace
from dyn.sinkformer import reference

ALPHA, TAU = 0.5, 0.1


def exp_ceilings(n):
    rng = np.random.default_rng(0)
    big = -5 * rng.random(4_000_000)
    t_np = best_of(lambda: np.exp(big), 5)
    rows = -5 * rng.random((64, n))

    def run_vexp():
        for _ in range(20):
            for r in rows:
                exp_inplace(r, 0.0)  # stays in [-700, 0]: 1 -> shrinking values

    run_vexp()
    t_v = best_of(run_vexp, 3)
    return big.size / t_np, 20 * rows.size / t_v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--d", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--jax", action="store_true")
    add_smoke(ap)
    a = ap.parse_args()
    if a.smoke:
        a.n, a.iterations, a.steps = 20, 2, 1
    n, d, it, steps = a.n, a.d, a.iterations, a.steps
    dt = 0.01
    x0 = np.random.default_rng(1).standard_normal((n, d))
    p = sf.heat_params(d, ALPHA, TAU, "sinkhorn", iterations=it, tol=0.0)
    ts = np.array([0.0, steps * dt])
    prob = sf.flow_problem(p)
    numba_euler = integrators.get("numba", "euler", dt=dt)
    numba_euler.solve(prob, x0[None], ts)  # compile / load cache

    rate_np, rate_vexp = exp_ceilings(n)
    t_ref = best_of(lambda: reference.heat_flow_euler(x0, ALPHA, TAU, it, dt, steps), 3)
    t_nb = best_of(lambda: numba_euler.solve(prob, x0[None], ts).states, 3)
    x_ref = reference.heat_flow_euler(x0, ALPHA, TAU, it, dt, steps)
    x_nb = numba_euler.solve(prob, x0[None], ts).states[0, -1]
    rows = [("numpy reference", t_ref), ("numba drift", t_nb)]
    if a.jax:
        jax_euler = integrators.get("diffrax", "euler", dt=dt)
        jax_euler.solve(prob, x0[None], ts)  # compile
        rows.append(("jax/diffrax", best_of(lambda: jax_euler.solve(prob, x0[None], ts).states, 3)))

    S = sf.score_matrix(x0, p)
    t_it_ref = best_of(lambda: reference.sinkhorn_log(S, it), 3) / it
    t_it_nb = best_of(lambda: sf.sinkhorn(S, it), 5) / it

    print(f"n = {n}, d = {d}, tau = {TAU}, iterations = {it}, Euler steps = {steps}")
    print(f"exp ceilings: np.exp {rate_np / 1e6:.0f} Mexp/s, vexp (numba) {rate_vexp / 1e6:.0f} Mexp/s")
    print(f"{'':18s} {'total [s]':>10s} {'per iteration [ms]':>19s} {'Mexp/s':>8s} {'speed-up':>9s}")
    for name, t in rows:
        per = t / (steps * it)
        print(f"{name:18s} {t:10.3f} {per * 1e3:19.3f} {n * n / per / 1e6:8.0f} {t_ref / t:9.2f}")
    print(
        f"Sinkhorn alone: numpy {t_it_ref * 1e3:.3f} ms/iteration ({n * n / t_it_ref / 1e6:.0f} Mexp/s), "
        f"numba {t_it_nb * 1e3:.3f} ms/iteration ({n * n / t_it_nb / 1e6:.0f} Mexp/s), "
        f"ratio {t_it_ref / t_it_nb:.2f}"
    )
    print(f"max |x_numba - x_numpy| after {steps} steps: {np.abs(x_nb - x_ref).max():.2e}")


if __name__ == "__main__":
    main()
