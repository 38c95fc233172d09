"""The stationary step bias against dt (benchmarks/sde_bias.py): Euler-Maruyama's falls like
dt, stochastic Heun's like dt^2, on the shipped noisy_phase system (tokens on the circle) and on
the user's noisy Kuramoto model (examples/your_own_dynamics), each at one point, on coupled
Brownian paths. The fitted log-log slope is checked within 0.3 of the weak order.

False-failure rate: over four seeds (benchmarks/sde_bias.py) Heun's slopes scatter with a
standard deviation of about 0.05 around 1.94 (noisy_phase) and 2.01 (Kuramoto), and
Euler-Maruyama's stay at 1.15 and 1.08 within 0.01: the nearest bound, 2 - 0.3, is about 5
standard deviations away, a false-failure rate near 1e-6 for a normal scatter. A scheme of
weak order 1 would fail it (its slope is 0.7 from 2).

The same slopes are measured as a user does, by `dyn run` of a scenario sweeping method and dt
(scenarios/sde_bias_noisy_phase.toml, examples/your_own_dynamics/kuramoto_bias.toml) and
`dyn compare --observable r_stationary --against dt`, on the same points (seed 11: Heun 1.94
and 2.05, Euler-Maruyama 1.09 and 1.05 over all points)."""

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


# The same measurement as the user runs it (`dyn run` a scenario that sweeps method and dt on
# one Brownian path, then `dyn compare --observable r_stationary --against dt`), at the
# benchmark's points: 64 runs, the window [20, 420], the reference stochastic Heun at min(dt)/4.
SCENARIO_FILES = {
    "noisy_phase": (ROOT / "scenarios" / "sde_bias_noisy_phase.toml", "0.0125"),
    "kuramoto": (ROOT / "examples" / "your_own_dynamics" / "kuramoto_bias.toml", "0.00625"),
}


@pytest.mark.slow  # 30-50 s a model on 2 cores (64 runs over 420 time units, 10 points)
@pytest.mark.parametrize("model", sorted(SCENARIO_FILES))
def test_dyn_compare_measures_the_weak_orders_against_dt(model, tmp_path):
    import shutil

    import dyn
    from dyn.presentation.bias import compare_bias
    from dyn.presentation.comparison import plot, rates

    path, reference = SCENARIO_FILES[model]
    for source in (path, path.parent / "noisy_kuramoto.py") if model == "kuramoto" else (path,):
        shutil.copy(source, tmp_path / source.name)
    out = dyn.run(tmp_path / path.name, tmp_path / "bias.h5", progress=False)
    result = compare_bias(out, "dt", reference, "r_stationary", {"method": "stochastic_heun"})
    assert plot(result, "dt", tmp_path / "bias.png").stat().st_size > 10_000  # what --against draws
    found = rates(result, "dt")
    for method, order in (("euler_maruyama", 1.0), ("stochastic_heun", 2.0)):
        rate = found[(("method", method),)]
        assert abs(rate.slope - order) <= 0.3, (model, method, rate, result["bias"].values)
