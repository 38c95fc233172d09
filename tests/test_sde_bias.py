"""The stationary step bias against dt (benchmarks/sde_bias.py): Euler-Maruyama's falls like
dt, stochastic Heun's like dt^2, on the shipped noisy_phase system (tokens on the circle) and on
the user's noisy Kuramoto model (examples/your_own_dynamics), each at one point, on coupled
Brownian paths. The fitted log-log slope is checked within 0.3 of the weak order.

False-failure rate: over four seeds (benchmarks/sde_bias.py) Heun's slopes scatter with a
standard deviation of about 0.05 around 1.94 (noisy_phase) and 2.01 (Kuramoto), and
Euler-Maruyama's stay at 1.15 and 1.08 within 0.01: the nearest bound, 2 - 0.3, is about 5
standard deviations away, a false-failure rate near 1e-6 for a normal scatter. A scheme of
weak order 1 would fail it (its slope is 0.7 from 2)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _benchmark():
    spec = importlib.util.spec_from_file_location("sde_bias", ROOT / "benchmarks" / "sde_bias.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sde_bias", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("case", ["noisy_phase_case", "kuramoto_case"])
def test_the_stationary_bias_falls_with_the_weak_order(case):
    bench = _benchmark()
    tables = bench.biases(getattr(bench, case)(), seed=11)
    for method, order in (("euler_maruyama", 1.0), ("stochastic_heun", 2.0)):
        rate = bench.slope(tables[method])
        assert abs(rate.slope - order) <= 0.3, (case, method, rate, tables[method])
