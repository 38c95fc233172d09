"""System `attention_sphere`: self-attention particle flows on S^{d-1} (physics.md §1.1).

    dx_i/dt = P_{x_i}( sum_j A_ij V x_j ),   A_ij = exp(beta <Q x_i, K x_j>) / Z_i
    SA: Z_i = sum_k exp(beta <Q x_i, K x_k>)    USA: Z_i = n

`form = "flow"` solves the ODE with the scenario's integrator; `form = "network"` runs the
post-norm transformer of `depth` layers, x_i <- normalize(x_i + h sum_j A_ij V x_j), h = T/depth.
Each point simulates `ensemble.runs` independent random starts and records ensemble means of the
observables at `output.saves + 1` equally spaced times in [0, T].
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ScenarioError
from ..schema import Field
from . import register
from .base import DIVERGED, OK, Coord, Output, PointResult, System

if TYPE_CHECKING:
    from ..scenario import Scenario

# Runs are simulated in chunks so a point's memory stays bounded whatever `ensemble.runs` is;
# members are independent, so chunking does not change any number.
CHUNK_BYTES = 64 * 2**20
MAX_RUN_BYTES = 2**30


@register
class AttentionSphere(System):
    name = "attention_sphere"
    description = "self-attention particle flow on the sphere (SA/USA), or its post-norm network"
    default_plot = "pair_fraction"
    equation = "ode"
    params = {
        # n <= 10^4 keeps the n x n attention matrix of one run under 1 GiB
        "n": Field("int", 32, "number of tokens n", lo=1, hi=10_000),
        "d": Field("int", 2, "token dimension d", lo=2, hi=1024),
        "beta": Field("float", 1.0, "inverse temperature beta"),
        "normalization": Field("str", "SA", "attention normalization", choices=("SA", "USA")),
        "Q": Field("matrix", None, "query matrix (default identity)", sweepable=False),
        "K": Field("matrix", None, "key matrix (default identity)", sweepable=False),
        "V": Field("matrix", None, "value matrix (default identity)", sweepable=False),
        "init": Field("str", "uniform", "initial law", choices=("uniform", "hemisphere")),
        "form": Field("str", "flow", "continuous flow or discrete network", choices=("flow", "network")),
        "depth": Field("int", 100, "layers of the network over [0, T]", lo=1, hi=10**8),
        "delta": Field("float", 1e-3, "clustering threshold delta: <x_i,x_j> > 1 - delta",
                       lo=0.0, hi=2.0),
    }

    def validate(self, point: dict, scenario: "Scenario") -> None:
        d = point["d"]
        for name in ("Q", "K", "V"):
            if name in point and len(point[name]) != d:
                raise ScenarioError(f"params.{name}", f"must be {d} x {d} (d = {d}), "
                                    f"got {len(point[name])} x {len(point[name])}")
        saves = scenario.output["saves"]
        run_bytes = (saves + 1) * point["n"] * d * 8
        if run_bytes > MAX_RUN_BYTES:
            raise ScenarioError("output.saves", f"one run would keep {run_bytes / 2**30:.1f} GiB of "
                                f"states ((saves + 1) x n x d doubles); lower output.saves, n or d")
        if point["form"] == "network" and point["depth"] % saves:
            raise ScenarioError("params.depth", f"depth {point['depth']} must be a multiple of "
                                f"output.saves = {saves} (the network saves after whole layers)")

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {"time": Coord(_save_times(scenario), "time t", "1")}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("pair_fraction", "fraction of token pairs with <x_i,x_j> > 1 - delta (mean over runs)",
                   "1", ("time",)),
            Output("p_one_cluster", "fraction of runs whose tokens form one cluster", "1", ("time",)),
            Output("n_clusters", "number of clusters (mean over runs)", "1", ("time",)),
            Output("min_inner", "minimum pairwise inner product (mean over runs)", "1", ("time",)),
            Output("energy", "USA energy E = sum_ij exp(beta <x_i,x_j>) / (2 beta n^2) (mean over runs)",
                   "1", ("time",)),
        ]

    def trajectory_dims(self, scenario: "Scenario") -> dict[str, int]:
        for key in ("n", "d"):
            if key in scenario.axes:
                raise ScenarioError("output.trajectories", f"saving trajectories needs params.{key} "
                                    "fixed (every point's states must have one shape)")
        return {"token": scenario.params["n"], "coordinate": scenario.params["d"]}

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator,
                  trajectories=None) -> PointResult:
        from .. import attention

        runs = scenario.ensemble["runs"]
        ts = _save_times(scenario)
        p = attention.pack_params(point["beta"], point["d"], point["normalization"],
                                  point.get("Q"), point.get("K"), point.get("V"))
        per_run = len(ts) * point["n"] * point["d"] * 8
        n_chunks = max(1, -(-runs * per_run // CHUNK_BYTES))
        sums = {out.name: np.zeros(len(ts)) for out in self.outputs(scenario)}
        bad = 0
        for chunk in np.array_split(np.arange(runs), n_chunks):
            x0 = _initial(point["init"], rng, len(chunk), point["n"], point["d"])
            with np.errstate(over="ignore", invalid="ignore"):  # blow-ups are counted, not warned
                states = _solve(point, scenario, p, x0, ts)
                _accumulate(states, point, sums)
            if trajectories is not None:
                trajectories.write(int(chunk[0]), states)
            bad += int(np.sum(~np.isfinite(states).all(axis=(1, 2, 3))))
        values = {name: total / runs for name, total in sums.items()}
        if bad:
            return PointResult(values, DIVERGED, f"{bad} of {runs} runs left the sphere or overflowed")
        return PointResult(values, OK)


def _accumulate(states: np.ndarray, point: dict, sums: dict) -> None:
    """Add the observables of states (runs, times, n, d), summed over runs, into `sums`."""
    from .. import attention

    clusters = attention.n_clusters(states, point["delta"])
    pairs = attention.pair_statistics(states, point["delta"], point["beta"]).sum(axis=0)
    sums["pair_fraction"] += pairs[:, 0]
    sums["min_inner"] += pairs[:, 1]
    sums["energy"] += pairs[:, 2]
    sums["p_one_cluster"] += (clusters == 1).sum(axis=0)
    sums["n_clusters"] += clusters.sum(axis=0)


def _save_times(scenario: "Scenario") -> np.ndarray:
    return np.linspace(0.0, scenario.integrator["horizon"], scenario.output["saves"] + 1)


def _initial(law: str, rng: np.random.Generator, runs: int, n: int, d: int) -> np.ndarray:
    from .. import attention

    if law == "hemisphere":
        return attention.hemisphere(rng, runs, n, d)
    return attention.uniform_sphere(rng, runs, n, d)


def _solve(point: dict, scenario: "Scenario", p: np.ndarray, x0: np.ndarray, ts: np.ndarray) -> np.ndarray:
    from .. import attention

    if point["form"] == "network":
        every = point["depth"] // (len(ts) - 1)
        return attention.postnorm_layers(x0, point["depth"], ts[-1], point["beta"], p=p,
                                         save_every=every)
    import integrators
    from integrators.geometry import SPHERE

    from ..scenario import solver_options

    cfg = scenario.integrator
    integ = integrators.get(cfg["backend"], cfg["method"], **solver_options(cfg))
    problem = integrators.Problem(attention.attention_drift, attention.attention_drift_jax, p, SPHERE)
    return integ.solve(problem, x0, ts)
