"""`dyn run --dry-run` against the run it estimates: five scenarios of different systems and
backends (numba ODE, numba SDE with time averages and dt = "auto", a user model on numba, a
gradient flow on diffrax, the batched jax backend), each cut down to a run of seconds.

This compares two wall times, not a time with a constant: the estimate (a calibration on this
machine) and the run that follows it in the same test, both on the same machine at the same
load, as a user would compare them (`dyn run ... --dry-run`, then `time dyn run ...`). The
claim is a ratio within 2x. A burst of load that hits one of the two measurements and not the
other can break it; each scenario is measured again once before it fails, so the test fails on
a load burst only if bursts hit both tries. Run with `-s` to see the ratios and the load.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "attention_clusters": ["sweep.beta=[1.0,4.0,8.0]", "ensemble.runs=64", "integrator.horizon=10.0"],
    "noisy_phase": ["sweep.beta=[1.0,3.0]", "sweep.sigma=[0.5,2.0]", "integrator.horizon_cap=24"],
    "gaussian_attention": ['sweep.kind=["softmax","l2"]', "sweep.d=[2]", "sweep.n=[128,256]"],
    "linear_icl_flow": [
        "sweep.kappa=[1.0,4.0]",
        "sweep.N=[10]",
        "sweep.d=[2]",
        "sweep.angle=[0.0]",
        'sweep.start=["paper"]',
        "integrator.horizon=30.0",
    ],
    "transformer_depth_limit": [
        "sweep.depth=[4,16,64]",
        "ensemble.runs=30",
        "params.reference_depth=256",
        "output.trajectories=false",
        'integrator.backend="jax"',
    ],
}
TRIES = 2


def _dyn(*args: str) -> tuple[str, float]:
    """stdout of `dyn ARGS` in a new process, and its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "dyn", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, seconds


def estimate_and_run(name: str, folder: Path) -> tuple[float, float, str]:
    """The dry run's estimated seconds, the run's wall seconds, and the dry run's text."""
    out = folder / f"{name}.h5"
    sets = [x for s in CASES[name] for x in ("--set", s)]
    text, _ = _dyn("run", f"scenarios/{name}.toml", "--out", str(out), *sets, "--dry-run")
    found = re.search(r"^time: about ([0-9.e+-]+) s", text, re.MULTILINE)
    assert found, text
    _, wall = _dyn("run", f"scenarios/{name}.toml", "--out", str(out), *sets, "--no-progress")
    for stale in folder.iterdir():  # the next try starts from no file, as this one did
        stale.unlink()
    return float(found.group(1)), wall, text


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_the_dry_run_estimate_is_within_2x_of_the_run(name, tmp_path):
    for _ in range(TRIES):
        estimated, wall, text = estimate_and_run(name, tmp_path)
        ratio = wall / estimated
        print(
            f"{name}: estimate {estimated:.3g} s, run {wall:.3g} s, run / estimate {ratio:.2f}, "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        if 0.5 <= ratio <= 2.0:
            break
    assert 0.5 <= ratio <= 2.0, text
    assert "calibrated on this machine in " in text
