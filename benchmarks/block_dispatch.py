"""What a block kernel's call from Python costs beyond the kernel (issue 41): numba's own per-call
look-ups of the kernels passed as first-class arguments against the remembered ones of
:func:`integrators.numba.internals.install_argument_memo`.

**Per call** (first): the main job's observed one-stage block kernel (the post-norm attention
layer, n = 32, d = 2, the pair-fraction observer) on one member and one layer, called many times
from this thread; the two look-ups interleaved in one process, the median of the repeats'
microseconds per call; beside them the kernel's compiled entry point called directly (no
dispatch at all: arguments converted, the kernel run), the floor.

**End to end** (then, unless ``--no-run``): the equal-work run of ``benchmarks/peer.py`` (45 betas
x 256 runs x 300 layers; ``--betas`` fewer) through ``dyn.run`` in this process, the two look-ups
interleaved A/B/B/A; printed: the median wall and process CPU seconds of each and their ratios
(CPU time is the steadier on a shared machine: the look-ups ran holding the GIL).

    python benchmarks/block_dispatch.py [--calls 2000] [--repeats 9] [--pairs 3] [--betas 45]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import add_smoke  # noqa: E402

from integrators.core.base import step_grid  # noqa: E402
from integrators.jit import compile_ahead  # noqa: E402
from integrators.numba import fixed, internals  # noqa: E402


def block_call():
    """(kernel, arguments) of one observed block: one member, one layer of the main job."""
    from dyn.attention import architecture, schemes
    from dyn.attention.observer import pair_observer

    n, d = 32, 2
    problem = schemes.scheme("post").network.problem(architecture.pack_architecture(4.0, d, "SA"))
    geom = problem.geometry
    observer = pair_observer(n, d, 1e-3, beta=4.0, labels=False, min_inner=False)
    x0 = np.random.default_rng(0).normal(size=(1, n, d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    ts = np.array([0.0, 0.1])
    counts, steps = step_grid(ts, 0.1)
    tab = fixed.NumbaEuler.TABLEAU
    A, b, c, p, q = (np.array(a) for a in (tab.A, tab.b, tab.c, problem.p, observer.q))
    block = fixed.kernels(tab)[1]
    compile_ahead(block, problem.drift, geom.project, geom.retract, observer.kernel)
    args = (x0, ts, counts, steps, A, b, c, p, problem.drift, geom.project, geom.retract,
            problem.work_size(n, d), observer.kernel, q, observer.work,
            np.empty((1, 2, observer.columns)), np.empty_like(x0), np.empty(1, np.int64))
    return block, args


def per_call(fn, args, calls: int) -> float:
    """Microseconds per call of fn(*args), over `calls` calls (after a few untimed ones)."""
    for _ in range(min(calls, 20)):
        fn(*args)
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls * 1e6


def per_call_table(calls: int, repeats: int) -> None:
    block, args = block_call()
    entry = block.overloads[block.signatures[0]].entry_point
    own, remembered, floor = [], [], []
    for _ in range(repeats):
        with internals.numbas_own_lookups():
            own.append(per_call(block, args, max(1, calls // 8)))  # the slow one: fewer calls
        remembered.append(per_call(block, args, calls))
        floor.append(per_call(entry, args, calls))
    a, b, f = (statistics.median(v) for v in (own, remembered, floor))
    print(f"per call, one member and one layer (median of {repeats}; memo installed: "
          f"{internals.argument_memo_installed()})")
    print(f"  numba's own look-ups {a:9.1f} us")
    print(f"  remembered           {b:9.1f} us   ({a / b:.1f}x less)")
    print(f"  entry point direct   {f:9.1f} us   (no dispatch: the floor)")


def end_to_end(pairs: int, betas: int) -> None:
    import peer

    overrides = peer.our_overrides(300, False)
    overrides["sweep.beta"] = {**overrides["sweep.beta"], "num": betas}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.h5"

        def run(own: bool) -> tuple[float, float]:
            path.unlink(missing_ok=True)
            cpu = time.process_time()
            if own:
                with internals.numbas_own_lookups():
                    wall = peer.run_ours(path, overrides)
            else:
                wall = peer.run_ours(path, overrides)
            return wall, time.process_time() - cpu

        run(False)  # kernels loaded, caches warm
        own, remembered = [], []
        for i in range(pairs):
            for which in ("own", "remembered") if i % 2 == 0 else ("remembered", "own"):
                (own if which == "own" else remembered).append(run(which == "own"))
    print(f"equal-work run ({betas} betas), median of {pairs} interleaved pairs")
    for k, what in enumerate(("wall", "CPU")):
        a = statistics.median(r[k] for r in own)
        b = statistics.median(r[k] for r in remembered)
        print(f"  {what:4s} numba's own look-ups {a:7.3f} s, remembered {b:7.3f} s, "
              f"remembered/own {b / a:.3f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--betas", type=int, default=45)
    parser.add_argument("--no-run", action="store_true", help="the per-call table only")
    add_smoke(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.calls, args.repeats, args.no_run = 40, 1, True
    per_call_table(args.calls, args.repeats)
    if not args.no_run:
        end_to_end(args.pairs, args.betas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
