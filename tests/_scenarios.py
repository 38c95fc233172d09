"""Scenario texts shared by the tests."""

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
