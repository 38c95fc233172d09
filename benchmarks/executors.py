"""Executor overheads and parallel efficiency (issue: scale-out and reliability).

Prints, measured side by side in one run:
1. per-point overhead of each executor (serial, process pool, Dask LocalCluster) on points that do
   no work (system `probe`, samples = 0): (T(5N points) - T(N points)) / 4N, start-up cancels;
2. start-up cost of each executor beyond the serial one (pool spawn, Dask's LocalCluster);
3. parallel efficiency of the process pool on this machine's cores for a real scenario (a slice of
   attention_clusters): T(serial, one numba thread) / (workers x T(process pool));
4. peak RSS of a streaming sweep writing ~2 GB of trajectories (run with --big; ~2 minutes).

    python benchmarks/executors.py [--points 200] [--big]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import add_smoke  # noqa: E402

EXECUTORS = ("serial", "process", "dask")
EFFICIENCY_SETS = ["sweep.beta=[0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0]", "ensemble.runs=128"]
PROBE = """[scenario]
name = "probe"
system = "probe"
[params]
samples = 0
[sweep]
label = {{ start = 0, stop = {last}, num = {num} }}
[ensemble]
seed = 1
"""


def timed_run(scenario: Path, out: Path, executor: str, workers: int) -> float:
    import dyn

    start = time.perf_counter()
    dyn.run(scenario, out, executor=executor, workers=workers, progress=False, log=io.StringIO())
    return time.perf_counter() - start


def overheads(folder: Path, points: int, workers: int) -> None:
    import dyn  # noqa: F401 - import cost is not an executor's

    few, many = folder / "few.toml", folder / "many.toml"
    few.write_text(PROBE.format(last=points - 1, num=points))
    many.write_text(PROBE.format(last=5 * points - 1, num=5 * points))
    timed_run(few, folder / "warm.h5", "serial", 1)  # numba caches, imports
    print(f"{'executor':<10} {'start-up s':>11} {'per point ms':>13}   (empty points, {workers} workers)")
    serial_start = None
    for executor in EXECUTORS:
        w = 1 if executor == "serial" else workers
        t_few = timed_run(few, folder / f"{executor}_few.h5", executor, w)
        t_many = timed_run(many, folder / f"{executor}_many.h5", executor, w)
        per_point = (t_many - t_few) / (4 * points)
        start = t_few - points * per_point
        serial_start = start if serial_start is None else serial_start
        print(f"{executor:<10} {start - serial_start:>11.2f} {1e3 * per_point:>13.2f}")


def efficiency(folder: Path, workers: int, smoke: bool = False) -> None:
    sets = [a for s in EFFICIENCY_SETS for a in ("--set", s)]
    scenario = str(ROOT / "scenarios" / "attention_clusters.toml")

    def run(tag, env_threads, *extra):
        env = {**os.environ, "NUMBA_NUM_THREADS": str(env_threads)}
        cmd = [
            sys.executable,
            "-m",
            "dyn",
            "run",
            scenario,
            "--out",
            str(folder / f"efficiency_{tag}.h5"),
            "--no-progress",
            *sets,
            *extra,
        ]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
        return time.perf_counter() - start

    t_serial1 = run("serial1", 1)
    if smoke:  # one run: the command works (three would cost seconds each)
        print(f"attention_clusters slice, serial, 1 numba thread: {t_serial1:.2f} s")
        return
    t_serial = run("serialn", workers)
    t_pool = run("pool", 1, "--executor", "process", "--workers", str(workers))
    print(f"attention_clusters slice ({', '.join(EFFICIENCY_SETS)}), wall seconds incl. start-up:")
    print(f"  serial, 1 numba thread        {t_serial1:7.2f}")
    print(f"  serial, {workers} numba threads       {t_serial:7.2f}   speed-up {t_serial1 / t_serial:.2f}")
    print(
        f"  process pool, {workers} workers       {t_pool:7.2f}   speed-up {t_serial1 / t_pool:.2f},"
        f" efficiency {t_serial1 / (workers * t_pool):.0%}"
    )


def streaming(folder: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_trajectories import _peak_rss_mib, _streaming_sets  # the slow test's configuration

    scenario = folder / "small.toml"
    from _scenarios import SMALL_SCENARIO

    scenario.write_text(SMALL_SCENARIO)
    peak, size = _peak_rss_mib(folder, scenario, folder / "big.h5", _streaming_sets(40, 4000))
    print(f"streaming sweep: {size:.0f} MiB of trajectories written, peak RSS {peak:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--big", action="store_true", help="also the ~2 GB streaming measurement")
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:  # two points, one worker; no Dask cluster (seconds to start), a one-point slice
        global EXECUTORS, EFFICIENCY_SETS
        args.points, args.workers, args.big = 2, 1, False
        EXECUTORS = ("serial", "process")
        EFFICIENCY_SETS = ["sweep.beta=[1.0]", "ensemble.runs=2", "integrator.horizon=1.0"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        overheads(folder, args.points, args.workers)
        efficiency(folder, args.workers, args.smoke)
        if args.big:
            streaming(folder)


if __name__ == "__main__":
    main()
