"""Row normalizations of attention (dyn.attention_particles), side by side.

1. One evaluation of the attention field at n = 32, 256, 1024 tokens (d = 8), per
   normalization, and its ratio to softmax on the same state (sparsemax and entmax sort or
   bisect each row, top-k selects); in turns, the median of 11 rounds of the process's CPU
   time.
2. Equal work, one field: a user model through dyn.particles (phi(s) = exp(beta s), SA), the
   same through dyn.attention_particles (softmax, Q = K = sqrt(beta) I, V = I; and sparsemax),
   and the engine's own attention field (dyn.particles("exp")), n = 64, 256, 1024, in turns
   (the median of 21 rounds of the process's CPU time: load from other processes hits them
   alike). Then both with one random Q, K (M = Q^T K not symmetric: the engine cannot halve its
   exps either, so both make n^2 of them) and V = I, with the largest difference of the two
   fields.
3. RK4's convergence order on a sparsemax flow: the error at t = 2 against a step 1/8 as small,
   for steps 0.1 .. 0.0125, and the slope of log error against log step (4 where the field is
   smooth; lower where rows' supports change during the solve).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/normalizations.py [--smoke]

(one BLAS thread: the engine's field calls BLAS, whose threads on a shared machine measure the
other processes). Part 2 runs at d = 3 and d = 8.
"""

from __future__ import annotations

import argparse

import numpy as np

import dyn
from _timing import add_smoke, medians_in_turns
from dyn.user import attention_jit, normalize


def _sphere(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _timer(drift, x, p, work):
    out = np.empty_like(x)
    return lambda: drift(0.0, x, p, out, work)


def field_times(sizes, d, rounds):
    print(
        f"1. one field evaluation, d = {d}, beta = 1 (CPU seconds a call, median of {rounds} "
        "rounds in turns; ratio to softmax)"
    )
    print(f"{'normalization':>14}" + "".join(f"{f'n={n}':>22}" for n in sizes))
    rng = np.random.default_rng(0)
    eye = np.eye(d)[None]
    drifts = {}
    for name in normalize.NAMES:
        cls = dyn.attention_particles(name=f"bench_{name}", normalization=name)
        a = 1.5 if name == "entmax" else 8 if name == "topk" else 0.0
        drifts[name] = (cls, attention_jit.pack(1.0, a, 20, eye, eye, eye))
    cells = {name: [] for name in drifts}
    for n in sizes:
        x = _sphere(rng, n, d)
        fns = {
            name: _timer(cls.numba_function("drift"), x, p, np.empty(cls.work_size(n, d, p)))
            for name, (cls, p) in drifts.items()
        }
        t = medians_in_turns(fns, rounds, max(1, 10**5 // n**2))
        for name in drifts:
            cells[name].append(f"{t[name]:12.3e} ({t[name] / t['softmax']:5.2f}x)")
    for name, row in cells.items():
        print(f"{name:>14}" + "".join(f"{c:>22}" for c in row))


def _exp(s, beta):
    return np.exp(beta * s)


def equal_work(sizes, d, rounds):
    print(
        f"\n2. equal work: one field, d = {d}, beta = 1.5, SA (CPU seconds a call, median of "
        f"{rounds} rounds in turns; ratio to the engine's; sparsemax's to softmax's)"
    )
    beta = 1.5
    user = dyn.particles(_exp, name="bench_user", params={"beta": dyn.Field("float", 1.0, "beta")})
    soft = dyn.attention_particles(name="bench_mine")
    sparse = dyn.attention_particles(name="bench_sparse", normalization="sparsemax")
    from dyn.attention import architecture, schemes

    problem = schemes.scheme("post").flow.problem(
        architecture.pack_values({"d": d, "beta": beta, "normalization": "SA"})
    )
    eye = np.eye(d)[None]
    mine = attention_jit.pack(beta, 0, 0, eye, eye, eye)
    rows = {
        "engine (particles('exp'))": (problem.drift, np.array(problem.p), lambda n: problem.work_size(n, d)),
        "dyn.particles, phi = exp": (
            user.numba_function("drift"),
            user.pack({"beta": beta}),
            lambda n: user.work_size(n, d, None),
        ),
        "attention_particles softmax": (soft.numba_function("drift"), mine, lambda n: soft.work_size(n, d, mine)),
        "attention_particles sparsemax": (sparse.numba_function("drift"), mine, lambda n: sparse.work_size(n, d, mine)),
    }
    print(f"{'':>30}" + "".join(f"{f'n={n}':>22}" for n in sizes))
    cells = {label: [] for label in rows}
    for n in sizes:
        x = _sphere(np.random.default_rng(1), n, d)
        fns = {label: _timer(drift, x, p, np.empty(size(n))) for label, (drift, p, size) in rows.items()}
        t = medians_in_turns(fns, rounds, max(1, 10**6 // n**2))
        engine = t["engine (particles('exp'))"]
        for label in rows:
            ratio = t[label] / (t["attention_particles softmax"] if "sparsemax" in label else engine)
            cells[label].append(f"{t[label]:12.3e} ({ratio:5.2f}x)")
    for label, row in cells.items():
        print(f"{label:>30}" + "".join(f"{c:>22}" for c in row))
    general_matrices(sizes, d, rounds, beta)


def general_matrices(sizes, d, rounds, beta):
    """The engine's field and dyn.attention_particles (softmax) with one random Q, K and V = I."""
    from dyn.attention import architecture, schemes

    q, k = np.random.default_rng(3).standard_normal((2, d, d)) / np.sqrt(d)
    v = np.eye(d)
    values = {"d": d, "beta": beta, "normalization": "SA", "Q": q, "K": k, "V": v}
    problem = schemes.scheme("post").flow.problem(architecture.pack_values(values))
    soft = dyn.attention_particles(name="bench_general")
    mine = attention_jit.pack(beta, 0, 0, q[None], k[None], v[None])
    rows = {
        "engine, random Q, K": (problem.drift, np.array(problem.p), lambda n: problem.work_size(n, d)),
        "attention_particles, same": (soft.numba_function("drift"), mine, lambda n: soft.work_size(n, d, mine)),
    }
    cells = {label: [] for label in rows}
    for n in sizes:
        x = _sphere(np.random.default_rng(1), n, d)
        fields = []
        for drift, p, size in rows.values():
            out = np.empty_like(x)
            drift(0.0, x, p, out, np.empty(size(n)))
            fields.append(out)
        gap = np.abs(fields[0] - fields[1]).max()
        fns = {label: _timer(drift, x, p, np.empty(size(n))) for label, (drift, p, size) in rows.items()}
        t = medians_in_turns(fns, rounds, max(1, 10**6 // n**2))
        for label in rows:
            cells[label].append(f"{t[label]:12.3e} ({t[label] / t['engine, random Q, K']:5.2f}x)")
        cells["attention_particles, same"][-1] += f" |diff| {gap:.0e}"
    for label, row in cells.items():
        print(f"{label:>30}" + "".join(f"{c:>22}" for c in row))


def rk4_order(n, d, smoke):
    print(f"\n3. RK4 on a sparsemax flow: n = {n}, d = {d}, beta = 4, random Q, K (one draw), V = I, t = 2")
    import integrators

    cls = dyn.attention_particles(name="bench_order", normalization="sparsemax")
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 1, d, d))
    p = attention_jit.pack(4.0, 0.0, 0, q, k, np.eye(d)[None])
    x0 = _sphere(rng, n, d)[None]
    problem = integrators.Problem(cls.numba_function("drift"), None, p, integrators.SPHERE, work=cls.work_size)
    times = np.array([0.0, 2.0])

    def end(dt):
        solver = integrators.get("numba", "rk4", dt=dt)
        return solver.solve(problem, x0, times).states[0, -1]

    steps = [0.1, 0.05] if smoke else [0.1, 0.05, 0.025, 0.0125]
    ref = end(steps[-1] / 8)
    errors = [np.abs(end(h) - ref).max() for h in steps]
    for h, e in zip(steps, errors, strict=True):
        print(f"   dt = {h:<8g} error {e:.3e}")
    slope = np.polyfit(np.log(steps), np.log(errors), 1)[0]
    print(f"   slope of log error against log dt: {slope:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_smoke(parser)
    args = parser.parse_args()
    sizes = [32] if args.smoke else [32, 256, 1024]
    field_times(sizes, 8, 1 if args.smoke else 11)
    for d in [8] if args.smoke else [3, 8]:
        equal_work([32] if args.smoke else [64, 256, 1024], d, 1 if args.smoke else 21)
    rk4_order(8 if args.smoke else 16, 3, args.smoke)


if __name__ == "__main__":
    main()
