"""Noisy attention on the circle: the O(nK) Fourier drift against the direct O(n^2) numba drift,
and the particle ensemble against a plain numpy implementation, next to the exp ceilings.

    PYTHONPATH=. python benchmarks/noisy_attention.py [--beta 4] [--sizes 1000 10000 100000]

1. exp ceilings measured in this run: np.exp on a 4M array, and the numba vexp on rows;
2. one drift evaluation (USA, Q = K = V = I, tol = 1e-12) at each n:
   - direct: dyn.attention.attention_drift (n^2 exps; it keeps an n x n matrix, so above 10^4 the
     benchmark's own row-by-row O(n^2)-time, O(n)-memory numba kernel stands in, checked against
     it at the smaller sizes);
   - fast: dyn.noisy.fourier_drift (O(nK));
   with max |fast - direct| / e^beta and the speed-up;
3. the particle ensemble, E members x n tokens x steps of Euler-Maruyama with retraction: the
   engine (numba, Fourier drift and direct drift) against a plain numpy implementation
   vectorised over members (n x n exps per member and step), member-steps per second.
"""

from __future__ import annotations

import argparse
import math
from functools import partial

import numpy as np
from numba import njit

import integrators
from _timing import add_smoke, best_of
from dyn import noisy
from dyn.attention import FLOW, attention_drift, pack_params
from dyn.numerics.vexp import exp_inplace
from integrators.numba.abi import FASTMATH, NJIT


def exp_ceilings():
    rng = np.random.default_rng(0)
    big = -5 * rng.random(4_000_000)
    t_np = best_of(lambda: np.exp(big), 5)
    rows = -5 * rng.random((64, 4096))

    def run():
        for _ in range(10):
            for r in rows:
                exp_inplace(r, 0.0)

    t_v = best_of(run, 3)
    return big.size / t_np, 10 * rows.size / t_v


@njit(**NJIT, fastmath=FASTMATH)
def direct_rows(x, beta, out):
    """USA attention velocity row by row: out_i = P_{x_i} (1/n) sum_j e^{beta <x_i,x_j>} x_j
    (O(n^2) time, O(1) extra memory; single thread like the fast drift)."""
    n = x.shape[0]
    for i in range(n):
        m0 = 0.0
        m1 = 0.0
        for j in range(n):
            w = math.exp(beta * (x[i, 0] * x[j, 0] + x[i, 1] * x[j, 1]))
            m0 += w * x[j, 0]
            m1 += w * x[j, 1]
        m0 /= n
        m1 /= n
        s = m0 * x[i, 0] + m1 * x[i, 1]
        out[i, 0] = m0 - s * x[i, 0]
        out[i, 1] = m1 - s * x[i, 1]


def drift_table(sizes, beta, rate_vexp):
    print(
        f"\n2. one drift evaluation, USA, beta = {beta}, tol = 1e-12 "
        f"(K = {noisy.fourier_order_of(noisy.pack_fourier(beta, 0.0, 10, 'USA'))})"
    )
    print(
        f"{'n':>8s} {'direct':>22s} {'[s]':>9s} {'Mexp/s':>7s} {'fast [s]':>10s} "
        f"{'speed-up':>9s} {'max|fast-direct|/e^beta':>24s}"
    )
    rng = np.random.default_rng(1)
    for n in sizes:
        x = noisy.uniform_tokens(rng, 1, n, 2)[0]
        pf = noisy.pack_fourier(beta, 0.0, n, "USA")
        fast = np.empty_like(x)
        work = np.empty(noisy.FOURIER.problem(pf).work_size(n, 2))
        t_fast = best_of(partial(noisy.fourier_drift, 0.0, x, pf, fast, work), 5)
        direct = np.empty_like(x)
        if n <= noisy.DIRECT_MAX_N:
            p = pack_params(beta, 2, "USA")
            w = np.empty(FLOW.work(n, 2, p))
            repeat = 3 if n <= 2000 else 1
            t_direct = best_of(partial(attention_drift, 0.0, x, p, direct, w), repeat)
            name = "attention_drift"
            rows = np.empty_like(x)
            direct_rows(x, beta, rows)  # the stand-in agrees with it
            assert np.abs(rows - direct).max() <= 1e-12 * math.exp(beta)
        else:
            direct_rows(x[:10], beta, direct[:10])  # compile
            t_direct = best_of(partial(direct_rows, x, beta, direct), 1, warmup=False)
            name = "row kernel (O(n) mem)"
        err = np.abs(fast - direct).max() / math.exp(beta)
        print(
            f"{n:8d} {name:>22s} {t_direct:9.4f} {n * n / t_direct / 1e6:7.0f} "
            f"{t_fast:10.6f} {t_direct / t_fast:9.0f} {err:24.1e}"
        )
    print(f"(vexp ceiling {rate_vexp / 1e6:.0f} Mexp/s: the direct drift at best n^2 / ceiling)")


def numpy_em(x0, beta, sigma, h, steps, rng):
    """Plain numpy Euler-Maruyama with projection and retraction, vectorised over members."""
    x = x0.copy()
    n = x.shape[1]
    for _ in range(steps):
        A = np.exp(beta * np.einsum("eik,ejk->eij", x, x))
        m = A @ x / n
        v = h * m + sigma * math.sqrt(h) * rng.standard_normal(x.shape)
        v -= np.sum(v * x, -1, keepdims=True) * x
        x = x + v
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return x


def ensemble_table(beta, E=64, n=256, steps=200, h=0.005, sigma=1.0):
    print(
        f"\n3. particle ensemble: E = {E} members x n = {n} tokens x {steps} steps, USA, beta = {beta}, sigma = {sigma}"
    )
    rng = np.random.default_rng(2)
    x0 = noisy.uniform_tokens(rng, E, n, 2)
    ts = np.array([0.0, steps * h])
    em = integrators.get("numba", "euler_maruyama", dt=h)
    fourier = noisy.fourier_problem(noisy.pack_fourier(beta, sigma, n, "USA"))
    direct = noisy.noisy_problem(noisy.pack(beta, 2, sigma, n, "USA"))
    rows = [
        ("numba, Fourier drift", best_of(lambda: em.solve(fourier, x0, ts, rng=rng).states, 3)),
        ("numba, direct drift", best_of(lambda: em.solve(direct, x0, ts, rng=rng).states, 2)),
        ("plain numpy", best_of(lambda: numpy_em(x0, beta, sigma, h, steps, rng), 1)),
    ]
    ref = rows[-1][1]
    print(f"{'':24s} {'total [s]':>10s} {'member-steps/s':>15s} {'n^2 exp-equiv/s [M]':>20s} {'vs numpy':>9s}")
    for name, t in rows:
        print(f"{name:24s} {t:10.3f} {E * steps / t:15.0f} {E * steps * n * n / t / 1e6:20.0f} {ref / t:9.1f}")
    # same law: r(T) of the engine (Fourier drift) and of numpy, means over members
    a = noisy.order_parameter(em.solve(fourier, x0, ts, rng=np.random.default_rng(3)).states[:, -1])
    b = noisy.order_parameter(numpy_em(x0, beta, sigma, h, steps, np.random.default_rng(4)))
    print(
        f"mean r(T): engine {a.mean():.4f} +- {a.std() / math.sqrt(E):.4f}, "
        f"numpy {b.mean():.4f} +- {b.std() / math.sqrt(E):.4f}"
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--beta", type=float, default=4.0)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    add_smoke(ap)
    a = ap.parse_args()
    if a.smoke:
        a.sizes = [200]
    rate_np, rate_vexp = exp_ceilings()
    print(f"1. exp ceilings: np.exp {rate_np / 1e6:.0f} Mexp/s, vexp (numba) {rate_vexp / 1e6:.0f} Mexp/s")
    drift_table(a.sizes, a.beta, rate_vexp)
    ensemble_table(a.beta, **(dict(E=2, n=16, steps=5) if a.smoke else {}))


if __name__ == "__main__":
    main()
