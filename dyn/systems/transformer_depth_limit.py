"""System `transformer_depth_limit`: the random-init transformer of `depth` layers per unit time
against its Ito SDE limit, driven by one and the same Brownian path (physics.md §1.2).

Per point, `ensemble.runs` paths W of the d x d Brownian motion are drawn on a fine grid of
`reference_depth` steps per unit time. The reference solution is Euler-Maruyama (with retraction)
on that fine grid; the network uses sqrt(h) G_k = W_{(k+1)h} - W_{kh} (sums of fine increments;
symmetrized on both sides for `noise = "goe"`).

    strong_error    = sqrt(E max_i |z_i^network(T) - Z_i^ref(T)|^2)
    strong_error_em = the same for Euler-Maruyama at the network's step (the scheme's own error)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ScenarioError
from ..schema import Field
from . import register
from .base import DIVERGED, OK, Output, PointResult, System

if TYPE_CHECKING:
    from ..scenario import Scenario

# Increments are drawn in chunks of runs so a point holds at most this many bytes of them.
CHUNK_BYTES = 64 * 2**20


@register
class TransformerDepthLimit(System):
    name = "transformer_depth_limit"
    description = "random-init transformer vs its SDE limit on a shared Brownian path: strong error"
    default_plot = "strong_error"
    params = {
        "n": Field("int", 4, "number of tokens n", lo=1, hi=1024),
        "d": Field("int", 3, "token dimension d", lo=2, hi=256),
        "beta": Field("float", 1.0, "inverse temperature beta"),
        "sigma": Field("float", 1.0, "noise scale sigma", lo=0.0),
        "noise": Field("str", "gaussian", "noise law of G_k: \"gaussian\" (i.i.d. N(0, sigma^2/d) "
                       "entries) or \"goe\" (G = sigma/sqrt(d) (A + A^T)/sqrt(2), A i.i.d. N(0, 1); "
                       "both sides then use the symmetrized path (B + B^T)/sqrt(2))",
                       choices=("gaussian", "goe")),
        "vbar": Field("float", 0.0, "deterministic value part Vbar = vbar I (unless Vbar is given)"),
        "Vbar": Field("matrix", None, "general deterministic value matrix (d x d; overrides vbar)",
                      sweepable=False),
        "score": Field("str", "unit", "score convention", choices=("unit", "sqrt_d")),
        "depth": Field("int", 64, "network layers per unit time", lo=1, hi=2**20),
        "reference_depth": Field("int", 2**14, "steps per unit time of the reference path",
                                 lo=1, hi=2**22, sweepable=False),
    }

    def validate(self, point: dict, scenario: "Scenario") -> None:
        T = scenario.integrator["horizon"]
        ref, depth = point["reference_depth"], point["depth"]
        if ref % depth:
            raise ScenarioError("params.depth", f"depth {depth} must divide reference_depth {ref}")
        if abs(T * ref - round(T * ref)) > 1e-9 * T * ref:
            raise ScenarioError("integrator.horizon", "horizon * reference_depth must be an integer")
        V = point.get("Vbar")
        if V is not None and len(V) != point["d"]:
            raise ScenarioError("params.Vbar", f"must be d x d = {point['d']} x {point['d']}, "
                                f"got {len(V)} x {len(V)}")

    def coords(self, scenario: "Scenario") -> dict:
        return {}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("strong_error", "RMS over runs of max_i |z_i(network) - Z_i(SDE)| at T", "1"),
            Output("strong_error_em", "same for Euler-Maruyama at the network's step", "1"),
        ]

    def decorate(self, ax, ds, var: str) -> None:
        """Log-log axes and a reference slope -1/2 (strong order of an Euler-Maruyama-type scheme)."""
        if ds[var].dims != ("depth",):
            return
        depth = ds["depth"].values.astype(float)
        err = ds[var].values
        ok = np.isfinite(err)
        if not ok.any():
            return
        ax.set_xscale("log")
        ax.set_yscale("log")
        anchor = np.flatnonzero(ok)[0]
        ax.plot(depth, err[anchor] * np.sqrt(depth[anchor] / depth), "k--", lw=1, label="slope -1/2")
        ax.legend(fontsize=8)

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        import integrators

        from .. import tokens_sde as ts
        from ..attention import uniform_sphere

        runs = scenario.ensemble["runs"]
        T = scenario.integrator["horizon"]
        n, d = point["n"], point["d"]
        fine = int(round(T * point["reference_depth"]))
        factor = point["reference_depth"] // point["depth"]
        p = ts.pack(point["beta"], d, point["sigma"], point["vbar"], point["score"],
                    noise=point["noise"], Vbar=point.get("Vbar"))
        problem = ts.problem(p)
        ts_ = np.array([0.0, T])
        ref_em = integrators.get("numba", "euler_maruyama", dt=T / fine)
        em = integrators.get("numba", "euler_maruyama", dt=T / (fine // factor))
        per_run = fine * d * d * 8
        chunks = max(1, -(-runs * per_run // CHUNK_BYTES))
        sq_net = sq_em = 0.0
        for chunk in np.array_split(np.arange(runs), chunks):
            x0 = uniform_sphere(rng, len(chunk), n, d)
            dw = integrators.brownian_increments(rng, len(chunk), ts_, T / fine, (d, d))
            ref = ref_em.solve(problem, x0, ts_, increments=dw)[:, -1]
            coarse = integrators.coarsen(dw, factor)
            net, _ = ts.network(x0, fine // factor, T, p, increments=coarse)
            approx = em.solve(problem, x0, ts_, increments=coarse)[:, -1]
            sq_net += float(np.sum(np.max(np.sum((net - ref) ** 2, -1), -1)))
            sq_em += float(np.sum(np.max(np.sum((approx - ref) ** 2, -1), -1)))
        values = {"strong_error": np.float64(np.sqrt(sq_net / runs)),
                  "strong_error_em": np.float64(np.sqrt(sq_em / runs))}
        if not all(np.isfinite(v) for v in values.values()):
            return PointResult(values, DIVERGED, "non-finite states")
        return PointResult(values, OK)
