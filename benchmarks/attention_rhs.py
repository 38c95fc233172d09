"""Speed of the attention right-hand side and of one ensemble step, numba / JAX / numpy.

    PYTHONPATH=. python benchmarks/attention_rhs.py [--repeat 7]

Cases: (E=2048, n=32, d=2) and (E=1, n=1024, d=64). Flops are counted as the two GEMMs of the
right-hand side, 4 n^2 d per member (``X X^T`` and ``A X``), and n^2 exps per member; the ceiling
is numpy's float64 GEMM rate on this machine (2048^3 matmul, 2 N^3 flops), measured here.
"""
from __future__ import annotations

import argparse

import numpy as np
from numba import njit, prange

import integrators
from dyn import attention as att
from integrators.numba_abi import NJIT_PARALLEL

from _timing import add_smoke, best_of

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    add_smoke(ap)
    args = ap.parse_args()
    cases, gemm_n = CASES, 2048
    if args.smoke:
        cases, gemm_n, args.repeat = [(4, 8, 2), (1, 16, 4)], 64, 1
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
            ("rhs numba", 1, (lambda: att.attention_drift(0.0, x[0], p, out[0], work[0])) if E == 1
             else (lambda: numba_ensemble_rhs(x, p, out, work))),
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
            print(f"{f'E={E} n={n} d={d}':>16} {name:>22} {t * 1e3:8.3f}ms {base[kind] / t:8.2f} "
                  f"{rate / 1e9:8.1f} {n_rhs * exps / t / 1e9:7.3f} {100 * rate / ceiling:5.1f}%")
        print()
    again = gemm_rate(args.repeat, gemm_n)
    print(f"GEMM ceiling re-measured: {again / 1e9:.1f} GFLOP/s; if far from the first, the machine "
          "was shared and the ceil% column is unreliable")


if __name__ == "__main__":
    main()
