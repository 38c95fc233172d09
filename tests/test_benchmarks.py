"""Every benchmark script runs: each has a `--smoke` mode (tiny sizes, seconds), and this test
runs them all, so that none can rot between the times someone measures with it (issue 39, item
7). They run one after the other in one child process (tests/_benchmark_smoke.py: the imports
paid once), and each script is a case of its own. No number is checked: a benchmark measures
the machine; what is checked is that it ends with status 0 and prints its tables.

Every smoke runs in the slow tier: from a fresh clone the scripts compile their kernels and
JAX programs, tens of seconds of the default tier's three minutes. The scripts whose smoke
costs most run one by one (SLOW); the others share one child process. The default tier checks
that every script is one of the two. The slow tier also runs the soak at length
(tests/test_reliability_soak.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
# (script: why) run in the slow tier
SLOW = {
    "accelerator.py": "JAX compiles the two-token and noisy programs: ~25 s on 2 cores",
    "soak.py": "a dozen dyn run processes, killed and resumed: ~30 s",
    "first_run.py": "two dyn run processes, ~4 s of CPU (the default tier runs dyn run elsewhere)",
    "peer.py": "two dyn run processes and four in-process sweeps, ~8 s of CPU",
    "fused_observation.py": "eight in-process sweeps on two paths, ~4 s of CPU",
    "executors.py": "process pools and a Dask cluster started and stopped, ~2.5 s",
    "momentum_memory.py": "JAX compiles two backprop programs, ~2 s",
    "gaussian_criterion.py": "two gaussian_attention runs cut to n = 128, ~5 s of CPU",
    "attention_rhs.py": "compiles the field's four paths at eight sizes and times them, ~10 s of "
    "CPU (the fields' values are checked by tests/test_attention_field.py)",
    "attention_architectures.py": "compiles the field of every architecture and regime, ~8 s of "
    "one worker warm, ~13 s cold",
}
FAST = [s for s in SCRIPTS if s not in SLOW]


def _run(scripts: list[str], timeout: float) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_benchmark_smoke.py"), *(str(BENCHMARKS / s) for s in scripts)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
            found[report["script"]] = report
    if len(found) < len(scripts):  # the driver itself died: say where
        found["(driver)"] = {"status": done.returncode, "tail": done.stderr[-3000:], "lines": 0}
    return found


@pytest.fixture(scope="module")
def fast_reports():
    return _run(FAST, timeout=300)


def test_every_script_is_covered():
    """A new script is a case of the slow tier's smoke by itself (the glob): in the shared child
    process, or one by one when it is named in SLOW."""
    assert len(SCRIPTS) >= 14 and set(SLOW) <= set(SCRIPTS)
    assert sorted(FAST + list(SLOW)) == SCRIPTS


@pytest.mark.slow
@pytest.mark.parametrize("script", FAST)
def test_benchmark_smoke(fast_reports, script):
    report = fast_reports.get(script) or fast_reports.get("(driver)")
    assert report is not None, f"{script}: no report"
    assert report["status"] == 0, f"{script} failed:\n{report['tail']}"
    assert report["lines"] >= 2, f"{script} printed nothing:\n{report['tail']}"


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(SLOW))
def test_slow_benchmark_smoke(script):
    report = _run([script], timeout=600)[script]
    assert report["status"] == 0, f"{script} failed:\n{report['tail']}"
    assert report["lines"] >= 2
