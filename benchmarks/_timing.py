"""Shared by the benchmark scripts: best-of-N wall time (the least disturbed run)."""

import time


def best_of(fn, repeat: int, warmup: bool = True) -> float:
    """Smallest wall time of `repeat` calls of `fn` (after one untimed call when `warmup`)."""
    if warmup:
        fn()  # compile, fill caches
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def medians_in_turns(fns: dict, rounds: int, calls: int = 1) -> dict:
    """Median CPU time of this process per call of each callable over `rounds` rounds of
    `calls` calls, the callables in turns within a round (after one untimed call each). CPU
    time, not wall time: on a machine shared with other processes the time this process waits
    for a core is not counted (what the others still cost it, in caches and a shared core, hits
    the callables alike, being in turns)."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = time.process_time()
            for _ in range(calls):
                fn()
            times[name].append((time.process_time() - start) / calls)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


SMOKE_HELP = (
    "tiny sizes and one repeat: checks in seconds that the script still runs (its numbers "
    "mean nothing; tests/test_benchmarks.py runs every script so)"
)


def add_smoke(parser) -> None:
    """The `--smoke` flag every benchmark script takes."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
