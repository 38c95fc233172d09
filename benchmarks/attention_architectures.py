"""Speed of the attention architectures (issue 12): masked / multi-head drifts, the small-n ensemble
drift, and a long-horizon adaptive solve, each against a plain reference and a hardware ceiling
measured in the same run.

    PYTHONPATH=. python benchmarks/attention_architectures.py [--repeat 7] [--quick]

The exp ceiling is measured in turns with the drifts it scales (best of `repeat` each), so load
from other processes hits both alike; the GEMM ceiling before and after its cases.

1. Large drift (E = 1, n = 1024, d = 64): the post-LN layer output u (dyn.attention.schemes) with
   a causal mask, 4 random heads, both, against plain numpy. Rate: counted flops / time against
   numpy's float64 GEMM rate (2048^3 matmul). Counted: the GEMMs of a dense evaluation,
   4 H n^2 d (scores and output), plus 4 H n d^2 for X M_h^T and X V_h^T when the heads are
   not the identity: the dense-equivalent count, as for the plain attention RHS. A causal mask is
   counted the same; the kernel runs block-triangular GEMMs (4 row blocks, 5/8 of the dense
   products), and the "useful" column counts only the products a causal mask keeps (half).
2. Small-n ensemble drift (E = 2048, n = 32, d = 2, SA, no mask): the post-LN drift called
   through a first-class function pointer in a prange over members, as the integrators call it;
   the §1.1 drift of dyn.attention.FLOW (the shared mean-field kernel) the same way; plain numpy.
   Rate: E n^2 exps / time against the vectorised exp (dyn.numerics.vexp) on all cores, each
   thread exponentiating a cache-resident row of n^2 = 1024 floats again and again.
3. Long horizon (n = 32, d = 2, beta = 16, T = 1e5, 200 log-spaced saves, 2 runs): numba dopri5
   at rtol = atol = 1e-8 against fixed-step RK4, the error being the largest |x - x_ref| over
   saves and tokens with x_ref from dopri5 at 1e-12. RK4's step is halved from 0.2 until its
   error is at most the adaptive run's; drift evaluations are compared (--quick: T = 1e4).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit, prange, types

import integrators
from _timing import add_smoke, best_of
from dyn import attention as att
from dyn.attention import architecture as arch, schemes
from dyn.numerics.vexp import exp_inplace
from integrators.numba.abi import DRIFT_FN, F1, F2, F3, NJIT_PARALLEL

BETA = 1.0
# the sizes of each section; --smoke makes them tiny (seconds: the script runs, nothing measured)
SIZES = {"gemm": 2048, "exp_reps": 2000, "large": (1024, 64), "small": 2048, "long": (1e5, 1e4)}
SMOKE_SIZES = {"gemm": 64, "exp_reps": 5, "large": (32, 4), "small": 8, "long": (10.0, 10.0)}


def interleaved(fns: dict, repeat: int) -> dict:
    """Best-of-`repeat` wall time of each callable, measured in turns (a ceiling beside the
    cases it scales), so that load from other processes hits all of them alike."""
    for fn in fns.values():
        fn()  # compile, fill caches
    best = {name: np.inf for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def gemm_rate(repeat, N=None):
    N = N or SIZES["gemm"]
    a = np.random.default_rng(0).random((N, N))
    out = np.empty_like(a)
    return 2.0 * N**3 / best_of(lambda: np.matmul(a, a, out=out), repeat)


@njit(types.void(F2, types.int64), **NJIT_PARALLEL)
def _exp_rows(w, reps):
    for r in prange(w.shape[0]):
        for _ in range(reps):
            exp_inplace(w[r], 1.0)  # w <- exp(w - 1) keeps w in (0, 1]


def _exp_call(row=1024, reps=None):
    reps = reps or SIZES["exp_reps"]
    """The vectorised exp on all cores: one cache-resident row per thread, `reps` times."""
    from numba import get_num_threads

    rows = get_num_threads()
    w = np.random.default_rng(0).random((rows, row))
    return (lambda: _exp_rows(w, reps)), float(rows * row * reps)


def exp_rate(repeat):
    call, exps = _exp_call()
    return exps / best_of(call, repeat)


@njit(types.void(F3, F1, F3, F2, DRIFT_FN), **NJIT_PARALLEL)
def ensemble_drift(x, p, out, work, drift):
    """Every member's drift, through a function pointer (the integrators' calling convention)."""
    for e in prange(x.shape[0]):
        drift(0.0, x[e], p, out[e], work[e])


# ------------------------------------------------------------------------ plain numpy references


def _softmax_rows(s, allowed=None):
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    a = np.exp(s)
    return a / a.sum(axis=-1, keepdims=True)


def numpy_field(x, beta, causal, M, V):
    """(1/H) sum_h softmax(beta X M_h X^T + mask) X V_h^T, one member or a batch (E, n, d)."""
    n = x.shape[-2]
    allowed = np.tril(np.ones((n, n), dtype=bool)) if causal else None
    out = 0.0
    for Mh, Vh in zip(M, V, strict=True):
        a = _softmax_rows(beta * (x @ Mh) @ np.swapaxes(x, -1, -2), allowed)
        out = out + a @ (x @ Vh.T)
    return out / len(M)


def numpy_drift(x, beta):
    m = numpy_field(x, beta, False, [np.eye(x.shape[-1])], [np.eye(x.shape[-1])])
    return m - (np.sum(x * m, -1) / np.sum(x * x, -1))[..., None] * x


# ------------------------------------------------------------------------------------ sections


def large_drift(repeat):
    n, d = SIZES["large"]
    rng = np.random.default_rng(1)
    x = att.uniform_sphere(rng, 1, n, d)[0]
    ceiling = gemm_rate(repeat)
    print(
        f"1. large drift, n = {n}, d = {d} (GEMM ceiling {ceiling / 1e9:.1f} GFLOP/s; not "
        "measured in turns: numpy's GEMM and numba's np.dot use two OpenBLAS pools, whose "
        "spinning threads slow each other)"
    )
    hdr = (
        f"{'case':>20} {'numba':>9} {'numpy':>9} {'x numpy':>8} {'GFLOP/s':>8} {'ceil%':>6} "
        f"{'useful%':>8} {'Gexp/s':>7}"
    )
    print(hdr + "\n" + "-" * len(hdr))
    rows = []
    for H, mask in ((1, "none"), (1, "causal"), (4, "none"), (4, "causal")):
        if H == 1:
            Q = K = V = None
            M = Vs = [np.eye(d)]
        else:
            Q, K, V = arch.random_heads(np.random.default_rng(2), H, d, 1.0)
            M, Vs = list(np.einsum("hlk,hlm->hkm", Q, K)), list(V)
        p = arch.pack_architecture(BETA, d, "SA", Q, K, V, mask=mask)
        out = np.empty_like(x)
        work = np.empty(schemes.work_size(n, d, p))
        causal = mask == "causal"
        want = numpy_field(x, BETA, causal, M, Vs)
        schemes.layer_output(0.0, x, p, out, work)
        assert np.abs(out - want).max() < 1e-10, "numba and numpy disagree"
        # two rounds, the best: the first calls after numpy's GEMM run slow while its OpenBLAS
        # threads still spin (numba's np.dot uses another pool)
        t = min(
            best_of(lambda: schemes.layer_output(0.0, x, p, out, work), repeat)  # noqa: B023 timed within this iteration
            for _ in range(2)
        )
        t_np = best_of(lambda: numpy_field(x, BETA, causal, M, Vs), max(3, repeat // 2))  # noqa: B023 timed within this iteration
        flops = 4 * H * n * n * d + (4 * H * n * d * d if H > 1 else 0)
        heads_products = flops - 4 * H * n * n * d
        useful = (2 * H * n * (n + 1) * d if causal else 4 * H * n * n * d) + heads_products
        exps = H * (n * (n + 1) // 2 if causal else n * n)
        rate = flops / t
        name = f"{'causal' if causal else 'no mask'}, H = {H}"
        rows.append((name, rate / ceiling))
        print(
            f"{name:>20} {t * 1e3:7.2f}ms {t_np * 1e3:7.2f}ms {t_np / t:8.2f} {rate / 1e9:8.1f} "
            f"{100 * rate / ceiling:5.1f}% {100 * useful / t / ceiling:7.1f}% "
            f"{exps / t / 1e9:7.3f}"
        )
    print(f"   GEMM ceiling re-measured after the cases: {gemm_rate(repeat) / 1e9:.1f} GFLOP/s")
    roofline_large(n, d, ceiling, exp_rate(repeat))
    return rows


def roofline_large(n, d, gemm, exp):
    """Why the large drift stays below the GEMM ceiling: the exps run between the two GEMMs, and
    the n x n weights make a round trip through the caches (8 n^2 bytes, past L2)."""
    flops, exps, weights = 4 * n * n * d, n * n, 8 * n * n
    t_gemm, t_exp = flops / gemm, exps / exp
    print(
        f"   roofline (no mask, H = 1): {flops / 1e6:.0f} Mflop in GEMMs ({t_gemm * 1e3:.2f} ms at "
        f"the ceiling) + {exps / 1e6:.2f} M exps ({t_exp * 1e3:.2f} ms at the exp ceiling), one "
        f"after the other; the weights ({weights / 2**20:.0f} MiB) written, exponentiated in "
        f"place, read: at best {100 * t_gemm / (t_gemm + t_exp):.0f}% of GEMM\n"
    )


def small_ensemble(repeat):
    E, n, d = SIZES["small"], 32, 2
    rng = np.random.default_rng(3)
    x = att.uniform_sphere(rng, E, n, d)
    out = np.empty_like(x)
    exp_call, exp_count = _exp_call()
    print(
        f"2. small-n ensemble drift, E = {E}, n = {n}, d = {d} (exp ceiling on all cores, "
        "measured in turns with the drifts)"
    )
    fns = {"exp ceiling": exp_call}
    new = arch.pack_architecture(BETA, d)
    old = att.pack_params(BETA, d)
    for name, record, p in (
        ("post-LN (attention_field)", schemes.POST, new),
        ("§1.1 FLOW (shared mean_field)", att.FLOW, old),
    ):
        problem = record.problem(p)
        work = np.empty((E, problem.work_size(n, d)))
        pw = np.array(problem.p)
        drift = record.drift.compiled()
        fns[name] = lambda pw=pw, work=work, drift=drift: ensemble_drift(x, pw, out, work, drift)
    fns["numpy"] = lambda: numpy_drift(x, BETA)
    ensemble_drift(x, np.array(new), out, np.empty((E, schemes.work_size(n, d, new))), schemes.POST.drift.compiled())
    m = numpy_field(x, BETA, False, [np.eye(d)], [np.eye(d)])
    assert np.abs(out - m).max() < 1e-12, "numba and numpy disagree"
    times = interleaved(fns, repeat)
    ceiling = exp_count / times.pop("exp ceiling")
    print(f"   exp ceiling: {ceiling / 1e9:.3f} Gexp/s")
    hdr = f"{'drift':>34} {'time':>9} {'x numpy':>8} {'Gexp/s':>7} {'ceil%':>6}"
    print(hdr + "\n" + "-" * len(hdr))
    result = {}
    for name, t in times.items():
        rate = E * n * n / t
        result[name] = rate / ceiling
        print(f"{name:>34} {t * 1e3:7.3f}ms {times['numpy'] / t:8.2f} {rate / 1e9:7.3f} {100 * rate / ceiling:5.1f}%")
    print(
        "   (rates count n^2 exps per member; the post-LN kernel computes n(n+1)/2 of them, "
        "the symmetric weights serving both rows)"
    )
    pairs = n * (n + 1) // 2
    other = pairs * (6 * d + 3)  # per pair: score 2d + 1, row sums (1 + d) twice, as FMAs
    t_exp, t_flops = E * pairs / ceiling, E * other / gemm_rate(repeat)
    print(
        f"   roofline per member: {pairs} exps and {other} other flops on {8 * 3 * pairs // 1024}"
        f" KiB of weights (L1/L2): at the exp ceiling and the GEMM rate, {E * n * n / (t_exp + t_flops) / 1e9:.2f} "
        f"n^2-exps/s = {100 * E * n * n / (t_exp + t_flops) / ceiling:.0f}% of the exp ceiling; "
        "the rest is loop and call overhead on rows of 32\n"
    )
    result.pop("numpy")
    return result


def long_horizon(quick):
    T = SIZES["long"][1] if quick else SIZES["long"][0]
    n, d, beta, tol = 32, 2, 16.0, 1e-8
    x0 = att.uniform_sphere(np.random.default_rng(4), 2, n, d)
    ts = np.concatenate([[0.0], np.geomspace(0.1, T, 200)])
    problem = schemes.POST.problem(arch.pack_architecture(beta, d))
    print(f"3. long horizon, n = {n}, d = {d}, beta = {beta:g}, T = {T:g}, 2 runs")
    start = time.perf_counter()
    ref = integrators.get("numba", "dopri5", rtol=1e-12, atol=1e-12).solve(problem, x0, ts).states
    print(f"   reference dopri5 rtol 1e-12: {time.perf_counter() - start:.1f} s")
    integ = integrators.get("numba", "dopri5", rtol=tol, atol=tol)
    start = time.perf_counter()
    sol = integ.solve(problem, x0, ts)
    err = np.abs(sol.states - ref).max()
    wall = time.perf_counter() - start
    evals = sol.stats["evaluations"].mean()
    print(
        f"   dopri5 rtol {tol:g}: error {err:.2e}, {evals:.0f} drift evaluations per run "
        f"({sol.stats['steps'].mean():.0f} steps, {sol.stats['rejections'].mean():.0f} "
        f"rejected), {wall:.1f} s"
    )
    dt = 0.2
    while True:
        start = time.perf_counter()
        rk = integrators.get("numba", "rk4", dt=dt).solve(problem, x0, ts).states
        wall = time.perf_counter() - start
        rk_err = np.abs(rk - ref).max()
        rk_evals = 4 * int(integrators.core.base.step_grid(ts, dt)[0].sum())
        print(f"   rk4 dt {dt:g}: error {rk_err:.2e}, {rk_evals} drift evaluations per run, {wall:.1f} s")
        if rk_err <= err or dt < 0.01:
            break
        dt /= 2
    ratio = rk_evals / evals
    print(f"   fixed-step RK4 at the same accuracy needs {ratio:.1f}x the drift evaluations\n")
    return ratio


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="long horizon T = 1e4 instead of 1e5")
    add_smoke(ap)
    args = ap.parse_args()
    if args.smoke:
        SIZES.update(SMOKE_SIZES)
        args.repeat = 1
    gemm, exp = gemm_rate(args.repeat), exp_rate(args.repeat)
    large = large_drift(args.repeat)
    small = small_ensemble(args.repeat)
    ratio = long_horizon(args.quick)
    gemm_again, exp_again = gemm_rate(args.repeat), exp_rate(args.repeat)
    print(
        f"ceilings at start and end: GEMM {gemm / 1e9:.1f} and {gemm_again / 1e9:.1f} GFLOP/s, "
        f"exp {exp / 1e9:.3f} and {exp_again / 1e9:.3f} Gexp/s; far apart: the machine was "
        "shared (each section measured its ceiling in turns with its cases)"
    )
    print(
        "goals: large drift >= 50% of GEMM: "
        + ", ".join(f"{name} {100 * r:.0f}%" for name, r in large)
        + "; small ensemble >= 50% of exp: "
        + ", ".join(f"{name} {100 * r:.0f}%" for name, r in small.items())
        + f"; long horizon >= 10x fewer evaluations: {ratio:.1f}x"
    )


if __name__ == "__main__":
    main()
