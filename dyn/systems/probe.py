"""System `probe`: no physics, only the engine's machinery — for overhead measurements and checks.

Each point draws `samples` standard normals from its own generator (seeded from the scenario seed
and the point index) and records their mean and the first few draws. With `samples = 0` a point
costs nothing, which isolates the executor's own per-point overhead (benchmarks/executors.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..schema import Field
from . import register
from .base import OK, Coord, Output, PointResult, System

if TYPE_CHECKING:
    from ..scenario import Scenario

FIRST = 4  # leading draws recorded, so stream identity can be checked value by value


@register
class Probe(System):
    name = "probe"
    description = "engine probe: a point draws normals from its own stream (overhead, reproducibility)"
    default_plot = "mean"
    params = {
        "samples": Field("int", 1000, "normals drawn per point", lo=0, hi=10**9),
        "label": Field("float", 0.0, "a free axis to sweep over"),
    }

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {"draw": Coord(np.arange(FIRST), "index of a leading draw")}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [Output("mean", "mean of the point's normal draws"),
                Output("first", "the point's first draws", "1", ("draw",))]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        draws = rng.standard_normal(max(point["samples"], FIRST))
        mean = float(draws[: point["samples"]].mean()) if point["samples"] else 0.0
        return PointResult({"mean": np.float64(mean), "first": draws[:FIRST]}, OK)
