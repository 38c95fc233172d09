"""System `attention_sphere`: self-attention particle flows on S^{d-1} (physics.md §1.1).

    dx_i/dt = P_{x_i}( sum_j A_ij V x_j ),   A_ij = exp(beta <Q x_i, K x_j>) / Z_i
    SA: Z_i = sum_k exp(beta <Q x_i, K x_k>)    USA: Z_i = n

`form = "flow"` solves the ODE with the scenario's integrator; `form = "network"` runs the
post-norm transformer of `depth` layers, x_i <- normalize(x_i + h sum_j A_ij V x_j), h = T/depth.
Each run starts from its own random tokens; outputs are ensemble statistics at the save times.
"""
from __future__ import annotations

import numpy as np

from ..attention.params import FIELDS
from ..ensemble import bytes_of
from ..errors import ScenarioError
from ..lazy import lazy
from ..schema import Field
from . import register
from .base import INTEGRATOR_KEYS, Chunk, Output, System, state_dims

attention = lazy("dyn.attention")

MAX_RUN_BYTES = 2**30  # the states one run keeps: (saves + 1) x n x d doubles


@register
class AttentionSphere(System):
    name = "attention_sphere"
    description = "self-attention particle flow on the sphere (SA/USA), or its post-norm network"
    default_plot = "pair_fraction"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    jax_methods = frozenset({"euler", "heun", "rk4"})
    params = {
        **FIELDS,
        "init": Field("str", "uniform", "initial law", choices=("uniform", "hemisphere")),
        "form": Field("str", "flow", "continuous flow or discrete network", choices=("flow", "network")),
        "depth": Field("int", 100, "layers of the network over [0, T]", lo=1, hi=10**8),
        "delta": Field("float", 1e-3, "clustering threshold delta: <x_i,x_j> > 1 - delta",
                       lo=0.0, hi=2.0),
    }

    def validate(self, spec) -> None:
        d, saves = spec["d"], spec.setup.saves
        for name in ("Q", "K", "V"):
            if spec.get(name) is not None and len(spec[name]) != d:
                raise ScenarioError(f"params.{name}", f"must be {d} x {d} (d = {d}), "
                                    f"got {len(spec[name])} x {len(spec[name])}")
        if self.run_bytes(spec) > MAX_RUN_BYTES:
            raise ScenarioError("output.saves", f"one run would keep {self.run_bytes(spec) / 2**30:.1f}"
                                " GiB of states ((saves + 1) x n x d doubles); lower output.saves, n or d")
        if spec["form"] == "network" and spec["depth"] % saves:
            raise ScenarioError("params.depth", f"depth {spec['depth']} must be a multiple of "
                                f"output.saves = {saves} (the network saves after whole layers)")

    def outputs(self, setup) -> list[Output]:
        return [
            Output("pair_fraction", "fraction of token pairs with <x_i,x_j> > 1 - delta (mean over runs)",
                   "1", ("time",)),
            Output("p_one_cluster", "fraction of runs whose tokens form one cluster", "1", ("time",),
                   "proportion"),
            Output("n_clusters", "number of clusters (mean over runs)", "1", ("time",)),
            Output("min_inner", "minimum pairwise inner product (mean over runs)", "1", ("time",)),
            Output("energy", "USA energy E = sum_ij exp(beta <x_i,x_j>) / (2 beta n^2) (mean over runs)",
                   "1", ("time",)),
        ]

    def trajectory_dims(self, setup) -> dict[str, int]:
        return state_dims(setup, token="n", coordinate="d")

    def run_bytes(self, spec) -> int:
        return bytes_of(len(spec.times), spec["n"], spec["d"])

    def simulate(self, spec, runs: range) -> Chunk:
        p = attention.pack(spec.values)
        x0 = _initial(spec, len(runs))
        if spec["form"] == "network":
            every = spec["depth"] // spec.setup.saves
            states = attention.postnorm_layers(x0, spec["depth"], spec.horizon, spec["beta"], p=p,
                                               save_every=every)
        else:
            states = spec.solver.get().solve(attention.flow_problem(p), x0, spec.times)
        return _observed(spec, states)

    def batch_key(self, spec) -> tuple:
        return spec["form"], spec["n"], spec["d"], spec["depth"], spec.runs

    def simulate_batch(self, specs) -> list[Chunk]:
        """The `jax` backend: the same starts as the numba path (drawn from each point's
        stream), all points and runs advanced by one JAX program (flow: the configured RK table
        on the sphere; network: Euler on the post-norm geometry, h = T / depth)."""
        from integrators import jax_batch, tableau
        from integrators.geometry import POSTNORM, SPHERE

        spec = specs[0]
        x0 = np.stack([_initial(s, s.runs) for s in specs])
        p = np.stack([attention.pack(s.values) for s in specs])
        if spec["form"] == "network":
            states = jax_batch.rk_batch(attention.POSTNORM_NETWORK.drift_jax, POSTNORM,
                                        tableau.EULER, x0, p, spec.times, spec.horizon / spec["depth"])
        else:
            states = jax_batch.rk_batch(attention.FLOW.drift_jax, SPHERE,
                                        tableau.TABLEAUS[spec.solver.method], x0, p, spec.times,
                                        spec.solver.options.get("dt", 1e-2))
        return [_observed(s, states[i]) for i, s in enumerate(specs)]


def _initial(spec, runs: int) -> np.ndarray:
    init = attention.hemisphere if spec["init"] == "hemisphere" else attention.uniform_sphere
    return init(spec.rng, runs, spec["n"], spec["d"])


def _observed(spec, states) -> Chunk:
    """Per-run observables of states (runs, times, n, d) at the save times."""
    stats = attention.pair_statistics(states, spec["delta"], spec["beta"])
    clusters = attention.n_clusters(states, spec["delta"])
    return Chunk({"pair_fraction": stats[..., 0], "p_one_cluster": clusters == 1,
                  "n_clusters": clusters, "min_inner": stats[..., 1], "energy": stats[..., 2]},
                 states=states)
