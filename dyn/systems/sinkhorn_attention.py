"""System `sinkhorn_attention` (physics.md §2): how far the attention matrix of Gaussian tokens is
from doubly stochastic after k = 1..N alternating normalizations (k = 1 is softmax), with
bandwidth tau: scores -|x_i - x_j|^2 / (2 tau) (`sqdist`) or x_i^T x_j / tau (`dot`).
"""

from __future__ import annotations

import numpy as np

from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import Chunk, Coord, Output, System
from ..sinkformer.params import S0_MAX
from . import register

sf = lazy("dyn.sinkformer")


@register
class SinkhornAttention(System):
    name = "sinkhorn_attention"
    description = "distance from doubly stochastic after k Sinkhorn normalizations"
    default_plot = "log10_marginal_error"
    params = {
        "n": Field("int", 200, "number of tokens n", lo=2, hi=20_000),
        "d": Field("int", 2, "token dimension d", lo=1, hi=1_000),
        # tau: any size above the floor is finite (a wide kernel is flat: scores -> 0)
        "tau": Field("float", 0.1, "bandwidth tau", lo=1e-12),
        # s0 <= S0_MAX: the scores stay finite (dyn.sinkformer.params)
        "s0": Field("float", 1.0, "standard deviation of the Gaussian tokens", lo=0.0, hi=S0_MAX),
        "scores": Field(
            "str", "sqdist", "sqdist: -|x_i - x_j|^2/(2 tau); dot: x_i^T x_j / tau", choices=("sqdist", "dot")
        ),
        "iterations": Field("int", 100, "largest number of normalizations N", lo=1, hi=100_000, sweepable=False),
    }

    def coords(self, setup) -> dict[str, Coord]:
        N = setup.params["iterations"]
        return {"iteration": Coord(np.arange(1, N + 1), "Sinkhorn iterations k", "1")}

    def outputs(self, setup) -> list[Output]:
        return [
            Output("marginal_error", "max |row or column sum - 1| of K^k (mean over runs)", "1", ("iteration",)),
            Output(
                "log10_marginal_error", "log10 max |row or column sum - 1| of K^k (mean over runs)", "1", ("iteration",)
            ),
        ]

    def simulate(self, spec, runs: range) -> Chunk:
        n, d, N = spec["n"], spec["d"], spec["iterations"]
        if spec["scores"] == "sqdist":
            p = sf.pack_params(d, scores="sqdist", tau=spec["tau"])
        else:
            p = sf.pack_params(d, scores="dot", W=np.eye(d) / spec["tau"])
        errors = np.empty((len(runs), N))
        for e in range(len(runs)):
            S = sf.score_matrix(spec["s0"] * spec.rng.standard_normal((n, d)), p)
            errors[e] = sf.sinkhorn(S, N + 1)[4][:N]  # pass k + 1 measures K^k
        # the exact side is at rounding level; floor the log at 1e-17 for the picture
        return Chunk({"marginal_error": errors, "log10_marginal_error": np.log10(np.maximum(errors, 1e-17))})
