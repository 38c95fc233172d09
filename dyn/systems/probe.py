"""System `probe`: no physics, only the engine's machinery — for overhead measurements and checks.

Each point draws `samples` standard normals from its own stream (seeded from the scenario seed
and the point index) and records their mean and the first few draws; each run records the first
normal of its own stream (a per-run output). With `samples = 0` a point costs nothing, which
isolates the executor's own per-point overhead (benchmarks/executors.py).
"""

from __future__ import annotations

import numpy as np

from ..core.schema import Field
from ..core.system import Chunk, Coord, Output, System
from . import register

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

    def coords(self, setup) -> dict[str, Coord]:
        return {"draw": Coord(np.arange(FIRST), "index of a leading draw")}

    def outputs(self, setup) -> list[Output]:
        return [
            Output("mean", "mean of the point's normal draws", reduce="point"),
            Output("first", "the point's first draws", "1", ("draw",), reduce="point"),
            Output("run_draw", "first normal of each run's own stream", "1", reduce="per_run"),
        ]

    def simulate(self, spec, runs: range) -> Chunk:
        return Chunk({"run_draw": np.array([spec.run_rng(r).standard_normal() for r in runs])})

    def point_values(self, spec) -> dict:
        draws = spec.rng.standard_normal(max(spec["samples"], FIRST))
        mean = float(draws[: spec["samples"]].mean()) if spec["samples"] else 0.0
        return {"mean": mean, "first": draws[:FIRST]}
