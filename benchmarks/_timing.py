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
