"""System `momentum_optimize` (physics.md §4): heavy ball  v <- gamma v - eta grad F(x),
x <- x + v  on a random quadratic F: gamma < 1 contracts phase space and converges; gamma = 1
(RevNet / leapfrog) preserves volume and oscillates forever. The quadratic and the starts are
drawn from the sweep's common stream (:data:`INSTANCE_KEY`), the same at every point.
"""

from __future__ import annotations

import numpy as np

from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import Chunk, Coord, Output, System
from ..momentum.params import ETA_MAX, check_heavy_ball_growth
from . import register

momentum = lazy("dyn.momentum")

INSTANCE_KEY = 0x40F  # spawn-key salt of the common problem instance (any constant)


@register
class MomentumOptimize(System):
    name = "momentum_optimize"
    description = "heavy ball (gamma < 1) vs volume-preserving RevNet (gamma = 1) on a quadratic"
    default_plot = "log10_distance"
    params = {
        "d": Field("int", 10, "dimension d", lo=1, hi=10_000),
        "kappa": Field("float", 100.0, "condition number of A (eigenvalues in [1/kappa, 1])", lo=1.0),
        # kappa: any condition number is finite (eigenvalues in [1/kappa, 1]); eta: a diverging
        # heavy ball is refused once it would pass float64 (validate; dyn.momentum.params)
        "eta": Field("float", 1.0, "step eta: v <- gamma v - eta grad F(x)", lo=0.0, hi=ETA_MAX),
        "gamma": Field("float", 0.9, "momentum gamma (1: RevNet/leapfrog)", lo=0.0, hi=1.0),
        "iterations": Field("int", 300, "layers (iterations)", lo=1, hi=10**6, sweepable=False),
    }

    def validate(self, spec) -> None:
        check_heavy_ball_growth(spec)

    def coords(self, setup) -> dict[str, Coord]:
        n = setup.params["iterations"]
        return {"iteration": Coord(np.arange(n + 1, dtype=np.float64), "iteration k", "1")}

    def outputs(self, setup) -> list[Output]:
        return [
            Output("distance", "|x_k - x*| (mean over runs)", "1", ("iteration",)),
            Output("log10_distance", "log10 |x_k - x*| (mean over runs)", "1", ("iteration",)),
            Output(
                "final_distance", "|x_K - x*| / |x_0 - x*| at the last iteration (max over runs)", "1", reduce="max"
            ),
            Output("rate", "spectral radius of the layer map (asymptotic contraction per layer)", "1", reduce="point"),
            Output("volume_factor", "phase-space volume factor per layer, gamma^d", "1", reduce="point"),
        ]

    def point_values(self, spec) -> dict:
        A, _, _ = _instance(spec)
        return {
            "rate": momentum.contraction_rate(A, spec["gamma"], spec["eta"]),
            "volume_factor": spec["gamma"] ** spec["d"],
        }

    def simulate(self, spec, runs: range) -> Chunk:
        A, xstar, x0 = _instance(spec)
        dist = momentum.heavy_ball(x0[runs.start : runs.stop], A, xstar, spec["gamma"], spec["eta"], spec["iterations"])
        return Chunk(
            {"distance": dist, "log10_distance": np.log10(dist), "final_distance": dist[:, -1] / dist[:, 0]},
            finite=np.isfinite(dist).all(axis=1),
        )


def _instance(spec):
    """(A, x*, starts (runs, d)) of the sweep's common quadratic."""
    rng = spec.setup.common_rng(INSTANCE_KEY, 0)
    A, xstar = momentum.random_quadratic(rng, spec["d"], spec["kappa"])
    return A, xstar, xstar + rng.standard_normal((spec.runs, spec["d"]))
