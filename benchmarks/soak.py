"""Soak: kill-and-resume under load, measured (issue 20).

    python benchmarks/soak.py                     # 10^4 points, 20 driver kills (a few minutes)
    python benchmarks/soak.py --points 600 --kills 4   # the shortened run of the slow test tier

Phases, each followed by a resume, each checked bit for bit against an uninterrupted run:
1. a sweep of `--points` cheap points (system `probe`) through `--executor process --workers 2`,
   its driver SIGKILLed `--kills` times at random moments;
2. one pool worker SIGKILLed mid-run (the driver must stop with one line and exit 2);
3. a full disk halfway through a run that saves trajectories (ENOSPC injected into the
   point-file writer of a serial run).

Printed figures: kills survived, points computed more than once (work lost to kills), peak RSS
of the driver and of a worker, differences from the uninterrupted run, orphan processes (pool
workers or resource trackers alive 3 s after their driver was killed). Exit status 1 when a
difference or an orphan is found.

Points computed are counted by a driver wrapper (this file run with --driver): it swaps the
executors' batch function for one that logs each point index to a file before computing it; the
pool workers, spawned from this file, log through it too.
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROBE = """[scenario]
name = "soak"
system = "probe"
[params]
samples = {samples}
[sweep]
label = {{ start = 0, stop = {last}, num = {points} }}
[ensemble]
runs = 2
seed = 20
"""
TRAJECTORIES = """[scenario]
name = "soak_disk"
system = "attention_sphere"
[params]
n = 5
d = 3
[sweep]
beta = [0.5, 1.0, 2.0, 4.0]
[ensemble]
runs = 400
seed = 21
[integrator]
method = "rk4"
dt = 0.1
horizon = 2.0
[output]
saves = 40
trajectories = true
"""
LOG_ENV = "DYN_SOAK_LOG"


def counting_batch(setup, indices, sidecar=None):
    """compute_batch, logging each point index first (O_APPEND: one whole line per write)."""
    from dyn.engine import executors

    log = os.environ.get(LOG_ENV)
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, "".join(f"{int(i)}\n" for i in indices).encode())
        finally:
            os.close(fd)
    real = getattr(executors, "_real_compute_batch", executors.compute_batch)  # workers: unpatched
    return real(setup, indices, sidecar)


def _driver(argv: list[str]) -> int:
    """`dyn` itself, with point counting (and, with DYN_SOAK_FULL_AT=k, ENOSPC from point k on)."""
    from dyn.engine import executors, trajectories
    from dyn.presentation import cli

    executors._real_compute_batch = executors.compute_batch
    executors.compute_batch = counting_batch
    full_at = os.environ.get("DYN_SOAK_FULL_AT")
    if full_at is not None:
        real = trajectories.reserve

        def reserve(path, nbytes):
            if int(path.name.split("_")[1][:7]) >= int(full_at):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            real(path, nbytes)

        trajectories.reserve = reserve
    return cli.main(argv)


class Soak:
    def __init__(self, folder: Path, workers: int, seed: int):
        self.folder = folder
        self.workers = workers
        self.rng = random.Random(seed)
        self.log = folder / "computed.log"
        self.peak_driver = 0
        self.peak_worker = 0
        self.orphans = 0
        self.kills = 0
        self.differences = 0

    def command(self, scenario: Path, out: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            str(Path(__file__).resolve()),
            "--driver",
            "run",
            str(scenario),
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]

    def launch(self, cmd: list[str], env: dict | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, LOG_ENV: str(self.log), **(env or {})},
        )

    def watch(self, proc: subprocess.Popen, seconds: float) -> list:
        """Sample memory for `seconds` (or until the driver ends); the descendants last seen."""
        import psutil

        seen = []
        stop = time.monotonic() + seconds
        while proc.poll() is None and time.monotonic() < stop:
            try:
                driver = psutil.Process(proc.pid)
                self.peak_driver = max(self.peak_driver, driver.memory_info().rss)
                seen = driver.children(recursive=True)
                for child in seen:
                    try:
                        self.peak_worker = max(self.peak_worker, child.memory_info().rss)
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            time.sleep(0.05)
        return seen

    def kill(self, proc: subprocess.Popen, descendants: list) -> None:
        import psutil

        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.kills += 1
        _, alive = psutil.wait_procs(descendants, timeout=3)
        self.orphans += len(alive)
        for p in alive:  # do not leave them to the next phase
            p.kill()

    def finish(self, cmd: list[str], env: dict | None = None, want: int = 0) -> None:
        proc = self.launch(cmd, env)
        self.watch(proc, 3600)
        err = proc.stderr.read()
        if proc.wait() != want:
            raise SystemExit(f"soak: {cmd[3:]} exited with {proc.returncode}, not {want}: {err}")

    def computed(self) -> int:
        return len(self.log.read_text().split()) if self.log.exists() else 0

    def compare(self, a: Path, b: Path) -> int:
        import numpy as np

        import dyn

        with dyn.open(a) as x, dyn.open(b) as y:
            bad = sum(
                0 if np.array_equal(x[n].values, y[n].values, equal_nan=x[n].dtype.kind == "f") else 1
                for n in y.data_vars
            )
        self.differences += bad
        return bad


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--points", type=int, default=10_000)
    args.add_argument("--kills", type=int, default=20)
    args.add_argument("--workers", type=int, default=2)
    args.add_argument("--samples", type=int, default=20_000, help="normals drawn per point (its cost)")
    args.add_argument("--seed", type=int, default=0, help="seeds the kill moments")
    args.add_argument("--folder", help="work folder (default: a temporary one)")
    args.add_argument(
        "--smoke",
        action="store_true",
        help="8 points, one kill, one worker: every phase once, in seconds (its numbers mean nothing)",
    )
    opts = args.parse_args(argv)
    if opts.smoke:
        opts.points, opts.kills, opts.workers, opts.samples = 8, 1, 1, 10
    with tempfile.TemporaryDirectory(prefix="dyn-soak-") as tmp:
        folder = Path(opts.folder or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        return _soak(folder, opts)


def _soak(folder: Path, opts) -> int:
    soak = Soak(folder, opts.workers, opts.seed)
    scenario = folder / "soak.toml"
    scenario.write_text(PROBE.format(samples=opts.samples, last=opts.points - 1, points=opts.points))
    pool = ("--executor", "process", "--workers", str(opts.workers))

    # the uninterrupted run, timed: kills are spread over its duration
    reference = folder / "reference.h5"
    start = time.monotonic()
    soak.finish(soak.command(scenario, reference, *pool))
    full = time.monotonic() - start
    start = time.monotonic()
    soak.finish(soak.command(scenario, reference, *pool))  # nothing left to do: start-up alone
    startup = time.monotonic() - start
    baseline = soak.computed()
    soak.log.unlink()

    # 1. the driver killed at random moments, then a resume after each
    out = folder / "killed.h5"
    survived = 0
    for _ in range(opts.kills):
        proc = soak.launch(soak.command(scenario, out, *pool))
        # late in start-up or somewhere in the work; on average 60% of the work is spread
        # over the kills, so that every kill lands before the sweep is done
        work = max(full - startup, 1.0)
        seen = soak.watch(proc, startup * soak.rng.uniform(0.7, 1.0) + soak.rng.uniform(0.0, 1.2) * work / opts.kills)
        if proc.poll() is not None:
            break  # it finished before this kill
        soak.kill(proc, seen)
        survived += 1
    soak.finish(soak.command(scenario, out, *pool))
    killed_diff = soak.compare(out, reference)
    computed = soak.computed()

    # 2. one pool worker killed: one line, exit 2; then the resume
    worker_out = folder / "worker.h5"
    proc = soak.launch(soak.command(scenario, worker_out, *pool))
    seen = []
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and not (worker_out.exists() and seen):
        seen = [p for p in soak.watch(proc, 0.2) if _is_worker(p)]
    worker_line, worker_status = "", None
    if seen:  # at once: a run of cheap points may be over before any fixed delay ends
        seen[0].kill()
        worker_line = proc.stderr.read().strip()
        worker_status = proc.wait()
    else:
        proc.wait()
    soak.finish(soak.command(scenario, worker_out, *pool))
    worker_diff = soak.compare(worker_out, reference)

    # 3. a full disk halfway through a run with trajectories, then the resume once space is freed
    disk_diff, disk_how = _full_disk(soak, folder)

    print(
        f"soak: {opts.points} points (probe, {opts.samples} normals each), "
        f"--executor process --workers {opts.workers}, uninterrupted run {full:.1f} s "
        f"(start-up {startup:.1f} s)"
    )
    print(
        f"  driver kills survived      {survived} of {opts.kills} asked "
        f"({soak.kills} SIGKILLs in all, resumes after each)"
    )
    print(
        f"  points computed            {computed} for {opts.points} "
        f"(recomputed after kills: {computed - baseline}; uninterrupted run: {baseline})"
    )
    print(
        f"  peak RSS                   driver {soak.peak_driver / 2**20:.0f} MiB, "
        f"worker {soak.peak_worker / 2**20:.0f} MiB"
    )
    print(f"  worker killed              exit {worker_status}: {worker_line or '(no worker seen)'}")
    print(f"  full disk halfway          {disk_how}")
    print(
        f"  differences                {killed_diff} after driver kills, {worker_diff} after the "
        f"worker kill, {disk_diff} after the full disk (variables differing from the "
        "uninterrupted run)"
    )
    print(f"  orphans                    {soak.orphans}")
    return 1 if soak.differences or soak.orphans or worker_status != 2 else 0


def _is_worker(process) -> bool:
    import psutil

    try:
        return "multiprocessing.spawn" in " ".join(process.cmdline())
    except psutil.Error:  # gone meanwhile
        return False


def _full_disk(soak: Soak, folder: Path) -> tuple[int, str]:
    scenario = folder / "disk.toml"
    scenario.write_text(TRAJECTORIES)
    reference = folder / "disk_reference.h5"
    soak.finish(soak.command(scenario, reference))
    disk = folder / "disk"
    disk.mkdir()
    # ENOSPC injected into the point-file writer: a real small file system (a tmpfs) cannot fill
    # mid-run any more, since a run refuses to start past the free space and reserves each
    # point's states before writing them
    out = disk / "full.h5"
    soak.finish(soak.command(scenario, out), env={"DYN_SOAK_FULL_AT": "2"}, want=3)
    how = "ENOSPC injected from point 2 on (serial executor): exit 3; resumed"
    partial = list(disk.glob("*.h5.d/*.partial"))
    soak.finish(soak.command(scenario, out))
    if partial:
        how += f"; {len(partial)} .partial files were left"
    return soak.compare(out, reference), how


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--driver":
        sys.exit(_driver(sys.argv[2:]))
    sys.exit(main())
