"""Speed of the random-init transformer / SDE engine: numba vs plain numpy vs diffrax.

    PYTHONPATH=. python benchmarks/tokens_sde.py [--runs 400] [--horizon 150]

1. ceiling: numpy's standard-normal rate on this machine (one core), normals/s;
2. one ensemble SDE step (Euler-Maruyama with retraction, E = 4096 members, n = 8, d = 4):
   numba kernel / vectorized numpy / diffrax, members x steps per second and normals per second;
3. two-token phase points (beta, d) with `runs` runs, horizon T, 100 layers per unit time:
   - reference: the plain numba loop a researcher writes (per run, per layer, draw a full d x d
     Gaussian with np.random and apply it to both tokens);
   - engine `network`: exact 2d-normal sampling, per-member streams, prange, early absorption;
   - engine `rho`: the exact two-token SDE in u, one normal per step, early absorption;
   - numpy: the network vectorized over runs with exact 2d-normal sampling;
   with P(antipodal) and its Wilson interval for each (same statistical answer), and ratios.
"""

# ruff: noqa: B023 (every timed closure runs within the loop iteration that defines it)

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from numba import njit

import integrators
from _timing import add_smoke
from dyn import tokens_sde as ts
from dyn.attention import uniform_sphere

POINTS = [(1.0, 3), (3.0, 8), (3.0, 32)]
LAYERS_PER_UNIT = 100


def timed(fn, repeat=1):
    fn()  # warm-up / compile
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def normal_rate(repeat=5, n=10_000_000):
    rng = np.random.default_rng(0)
    out = np.empty(n)
    t, _ = timed(lambda: rng.standard_normal(out=out), repeat)
    return n / t


# ----------------------------------------------------------------------------- 2. SDE step


def numpy_em_step(z, beta, sigma, h, rng):
    E, n, d = z.shape
    s = beta * z @ np.swapaxes(z, 1, 2)
    a = np.exp(s - s.max(-1, keepdims=True))
    m = (a / a.sum(-1, keepdims=True)) @ z
    dw = rng.standard_normal((E, d, d)) * math.sqrt(h) * sigma / math.sqrt(d)
    g = m @ np.swapaxes(dw, 1, 2)
    f = -(sigma**2) * (d - 1) / (2 * d) * np.sum(m * m, -1, keepdims=True) * z
    v = h * f + g
    v -= np.sum(z * v, -1, keepdims=True) * z
    y = z + v
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def bench_step(steps=50, E=4096, diffrax=True):
    n, d, h = 8, 4, 0.01
    rng = np.random.default_rng(1)
    x0 = uniform_sphere(rng, E, n, d)
    p = ts.pack(1.0, d)
    tt = np.array([0.0, steps * h])
    rows = []
    em = integrators.get("numba", "euler_maruyama", dt=h)
    t, _ = timed(lambda: em.solve(ts.problem(p), x0, tt, rng=np.random.default_rng(2)).states, 3)
    rows.append(("numba EM", t))

    def np_run():
        z = x0
        r = np.random.default_rng(3)
        for _ in range(steps):
            z = numpy_em_step(z, 1.0, 1.0, h, r)
        return z

    rows.append(("numpy EM", timed(np_run, 2)[0]))
    if diffrax:  # (--smoke leaves it out: its compile alone takes seconds)
        dx = integrators.get("diffrax", "euler_maruyama", dt=h)
        rows.append(
            ("diffrax EM", timed(lambda: dx.solve(ts.problem(p), x0, tt, rng=np.random.default_rng(4)).states, 2)[0])
        )
    print(f"\n2. ensemble SDE step, E={E}, n={n}, d={d}, {steps} steps ({d * d} normals/step/member)")
    base = rows[1][1]
    for name, t in rows:
        rate = E * steps / t
        print(
            f"   {name:<12} {t * 1e3:9.1f} ms  {rate / 1e6:7.2f} M member-steps/s  "
            f"{rate * d * d / 1e6:8.1f} M normals/s  x numpy {base / t:6.1f}"
        )


# ------------------------------------------------------------------------ 3. phase points


@njit(cache=True)
def reference_point(x0, layers, h, beta, sigma, threshold, seed):
    """The plain implementation: a loop over runs, a full d x d Gaussian per layer."""
    np.random.seed(seed)
    E, _, d = x0.shape
    anti = 0
    c = sigma * math.sqrt(h / d)
    for e in range(E):
        z1 = x0[e, 0].copy()
        z2 = x0[e, 1].copy()
        for _ in range(layers):
            G = np.random.standard_normal((d, d)) * c
            rho = np.dot(z1, z2)
            a = 1.0 / (1.0 + math.exp(beta * (rho - 1.0)))
            m1 = a * z1 + (1 - a) * z2
            m2 = (1 - a) * z1 + a * z2
            z1 = z1 + G @ m1
            z2 = z2 + G @ m2
            z1 /= np.linalg.norm(z1)
            z2 /= np.linalg.norm(z2)
        if math.log(np.sum((z1 + z2) ** 2)) < threshold:
            anti += 1
    return anti


def numpy_point(x0, layers, h, beta, sigma, rng):
    z1, z2 = x0[:, 0].copy(), x0[:, 1].copy()
    d = x0.shape[-1]
    c = sigma * math.sqrt(h / d)
    for _ in range(layers):
        rho = np.sum(z1 * z2, -1, keepdims=True)
        a = 1.0 / (1.0 + np.exp(beta * (rho - 1.0)))
        m1, m2 = a * z1 + (1 - a) * z2, (1 - a) * z1 + a * z2
        n1 = np.linalg.norm(m1, axis=-1, keepdims=True)
        u = m1 / n1
        l21 = np.sum(u * m2, -1, keepdims=True)
        l22 = np.linalg.norm(m2 - l21 * u, axis=-1, keepdims=True)
        e1, e2 = rng.standard_normal(z1.shape), rng.standard_normal(z1.shape)
        z1 = z1 + c * n1 * e1
        z2 = z2 + c * (l21 * e1 + l22 * e2)
        z1 /= np.linalg.norm(z1, axis=-1, keepdims=True)
        z2 /= np.linalg.norm(z2, axis=-1, keepdims=True)
    return int(np.sum(np.log(np.sum((z1 + z2) ** 2, -1)) < ts.THRESHOLD))


def bench_phase(runs, horizon):
    layers = int(horizon * LAYERS_PER_UNIT)
    h = horizon / layers
    print(
        f"\n3. two-token phase points: {runs} runs, T = {horizon}, {layers} layers (h = {h}); P(antipodal) [95% Wilson]"
    )
    uc, ua = ts.u_thresholds(ts.THRESHOLD)
    totals = {}
    for beta, d in POINTS:
        rng = np.random.default_rng(10)
        x0 = uniform_sphere(rng, runs, 2, d)
        p = ts.pack(beta, d)
        lo, hi = ts.absorbing_levels(beta, d, 1.0, 0.0, ts.THRESHOLD, 1e-6)
        res = {}
        small = x0[:2]
        reference_point(small, 10, h, beta, 1.0, ts.THRESHOLD, 0)  # compile outside the timing
        t0 = time.perf_counter()
        k = reference_point(x0, layers, h, beta, 1.0, ts.THRESHOLD, 1)
        res["reference numba"] = (time.perf_counter() - t0, k, runs * layers * d * d)

        def net():
            z, taken = ts.network(
                x0,
                layers,
                horizon,
                p,
                rng=np.random.default_rng(5),
                stop_minus=float(ts.log_gaps_u(lo)[0]),
                stop_plus=float(ts.log_gaps_u(hi)[1]),
            )
            return int(np.sum(ts.classify_pair(z) == ts.ANTIPODAL)), int(taken.sum()) * 2 * d

        t, (k, nn) = timed(net)
        res["engine network"] = (t, k, nn)

        def rho_form():
            u, taken = ts.two_token_u(
                ts.rho_to_u(np.sum(x0[:, 0] * x0[:, 1], -1)),
                horizon,
                h,
                p,
                np.random.default_rng(6),
                lo,
                hi,
            )
            return int(np.sum(u > ua)), int(taken.sum())

        t, (k, nn) = timed(rho_form)
        res["engine rho"] = (t, k, nn)
        n_np = max(1, runs // 4)
        t0 = time.perf_counter()
        k = numpy_point(x0[:n_np], layers, h, beta, 1.0, np.random.default_rng(7))
        t_np = (time.perf_counter() - t0) * runs / n_np  # scaled to `runs`
        res["numpy (scaled)"] = (t_np, k * runs / n_np, runs * layers * 2 * d)
        print(f"   beta = {beta}, d = {d} (beta_c = {float(ts.beta_critical(d)):.2f})")
        ref_t = res["reference numba"][0]
        for name, (t, k, nn) in res.items():
            lo_w, hi_w = ts.wilson(k, runs)
            print(
                f"     {name:<17} {t:8.2f} s  x ref {ref_t / t:7.1f}  "
                f"{nn / t / 1e6:8.1f} M normals/s  p = {k / runs:.3f} [{lo_w:.3f}, {hi_w:.3f}]"
            )
            totals[name] = totals.get(name, 0.0) + t
    print(
        "   all points: "
        + ", ".join(f"{k} {v:.2f} s (x ref {totals['reference numba'] / v:.1f})" for k, v in totals.items())
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--horizon", type=float, default=150.0)
    ap.add_argument("--skip-step", action="store_true")
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.horizon = 8, 0.5
    rate = normal_rate(*((1, 10_000) if args.smoke else ()))
    print(f"1. ceiling: numpy standard_normal {rate / 1e6:.0f} M normals/s (one core)")
    if not args.skip_step:
        bench_step(*((2, 8, False) if args.smoke else ()))
    bench_phase(args.runs, args.horizon)


if __name__ == "__main__":
    main()
