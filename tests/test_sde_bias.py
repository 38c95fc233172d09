"""The stationary step bias against dt (benchmarks/sde_bias.py): Euler-Maruyama's falls like
dt, stochastic Heun's like dt^2, on the shipped noisy_phase system (tokens on the circle) and on
the user's noisy Kuramoto model (examples/your_own_dynamics), each at one point, on coupled
Brownian paths. The fitted log-log slope is checked within 0.3 of the weak order.

False-failure rate: the slopes' scatter over seeds is measured in the benchmark's docstring;
0.3 is many standard deviations of it (below 1e-6 for a normal scatter), and what remains is
systematic (curvature of the bias over the dt range, the reference's own bias), below 0.1 in
every measured seed."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _benchmark():
    spec = importlib.util.spec_from_file_location("sde_bias", ROOT / "benchmarks" / "sde_bias.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("case", ["noisy_phase_case", "kuramoto_case"])
def test_the_stationary_bias_falls_with_the_weak_order(case):
    bench = _benchmark()
    tables = bench.biases(getattr(bench, case)(window=200.0), seed=11)
    for method, order in (("euler_maruyama", 1.0), ("stochastic_heun", 2.0)):
        rate = bench.slope(tables[method])
        assert abs(rate.slope - order) <= 0.3, (case, method, rate, tables[method])
