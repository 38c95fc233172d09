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

SMOKE_HELP = ("tiny sizes and one repeat: checks in seconds that the script still runs (its numbers "
              "mean nothing; tests/test_benchmarks.py runs every script so)")


def add_smoke(parser) -> None:
    """The `--smoke` flag every benchmark script takes."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
