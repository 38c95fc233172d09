"""Scenario texts and files shared by the tests."""

from pathlib import Path

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def empty_sweep_file(tmp_path: Path, name: str, **values) -> Path:
    """The empty sweep file of a shipped scenario (every point pending): what creation writes."""
    from dyn.engine import scenario as scenario_mod, store

    doc = scenario_mod.apply_values(scenario_mod.read_file(SCENARIOS / f"{name}.toml"), values)
    path = tmp_path / f"{name}.h5"
    store.create(path, scenario_mod.resolve(doc, name), "test")
    return path


SMALL_SCENARIO = """
[scenario]
name = "small"
system = "attention_sphere"
description = "tiny sweep for engine tests"

[params]
n = 5
d = 3
init = "uniform"
delta = 0.01

[sweep]
beta = [0.5, 1.0, 2.0]
normalization = ["SA", "USA"]

[ensemble]
runs = 6
seed = 7

[integrator]
backend = "numba"
method = "rk4"
dt = 0.1
horizon = 2.0

[output]
saves = 4
"""
