"""System `transformer_depth_limit`: the random-init transformer of `depth` layers per unit time
against its Ito SDE limit, driven by one and the same Brownian path (physics.md §1.2).

Run r's path W of the d x d Brownian motion is built by Levy's dyadic construction from the
run's own stream (`RunSpec.run_rng`, :func:`integrators.dyadic_increments`) on the fine grid of
`reference_depth` steps per unit time. The reference solution is Euler-Maruyama (with retraction)
on that grid; the network uses sqrt(h) G_k = W_{(k+1)h} - W_{kh} (sums of fine increments;
symmetrized on both sides for `noise = "goe"`). Depths are powers of two, so with `depth` a
common axis (`[ensemble] common = ["depth"]`) every depth sees one and the same path, refined
consistently, and `dyn compare --along depth` measures the network against itself at the finest
depth run by run. Saved states (`[output] trajectories`) are the network's tokens.

    strong_error    = sqrt(E max_i |z_i^network(T) - Z_i^ref(T)|^2)
    strong_error_em = the same for Euler-Maruyama at the network's step (the scheme's own error)

Both Euler-Maruyama solves use the scenario's `[integrator]` backend; their steps come from
`depth` and `reference_depth`, so `integrator.dt` is refused.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.contract import bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import Chunk, Draw, Output, Solve, System, state_dims
from ..tokens_sde.params import FIELDS
from . import register

integrators = lazy("integrators")
ts = lazy("dyn.tokens_sde")
attention = lazy("dyn.attention")


@register
class TransformerDepthLimit(System):
    name = "transformer_depth_limit"
    description = "random-init transformer vs its SDE limit on a shared Brownian path: strong error"
    default_plot = "strong_error"
    equation = "sde"
    integrator = frozenset({"backend", "method", "horizon"})
    jax_methods = frozenset({"euler_maruyama"})
    params = {
        **FIELDS,
        "n": replace(FIELDS["n"], default=4, lo=1, hi=1024),
        "d": replace(FIELDS["d"], hi=256),
        "depth": Field("int", 64, "network layers per unit time", lo=1, hi=2**20),
        "reference_depth": Field(
            "int", 2**14, "steps per unit time of the reference path", lo=1, hi=2**22, sweepable=False
        ),
    }

    def validate(self, spec) -> None:
        T = spec.horizon
        ref, depth = spec["reference_depth"], spec["depth"]
        for key, value in (("reference_depth", ref), ("depth", depth)):
            if value & (value - 1):
                raise ScenarioError(
                    f"params.{key}", f"must be a power of two (the Brownian path is refined dyadically), got {value}"
                )
        if ref % depth:
            raise ScenarioError("params.depth", f"depth {depth} must divide reference_depth {ref}")
        fine = T * ref
        if abs(fine - round(fine)) > 1e-9 * fine or round(fine) & (round(fine) - 1):
            raise ScenarioError("integrator.horizon", "horizon * reference_depth must be a power of two")
        if spec.solver.backend == "jax" and spec.setup.trajectories:
            raise ScenarioError("integrator.backend", "backend jax keeps no states here")
        if spec.setup.trajectories and round(T * depth) % spec.setup.saves:
            raise ScenarioError(
                "output.saves",
                f"{spec.setup.saves} saves must divide the network's {round(T * depth)} layers to keep its states",
            )
        V = spec.get("Vbar")
        if V is not None and len(V) != spec["d"]:
            raise ScenarioError("params.Vbar", f"must be d x d = {spec['d']} x {spec['d']}, got {len(V)} x {len(V)}")

    def outputs(self, setup) -> list[Output]:
        return [
            # strong order 1/2 of an Euler-Maruyama-type scheme
            Output(
                "strong_error",
                "RMS over runs of max_i |z_i(network) - Z_i(SDE)| at T",
                "1",
                reduce="rms",
                draw=Draw(slopes=(-0.5,)),
            ),
            Output(
                "strong_error_em",
                "same for Euler-Maruyama at the network's step",
                "1",
                reduce="rms",
                draw=Draw(slopes=(-0.5,)),
            ),
        ]

    def run_bytes(self, spec) -> int:  # the fine Brownian increments of one run
        return bytes_of(_fine(spec), spec["d"], spec["d"])

    def trajectory_dims(self, setup) -> dict[str, int]:
        return state_dims(setup, token="n", coordinate="d")

    def batch_key(self, spec) -> tuple:
        return (spec["n"], spec["d"], spec["depth"], spec["reference_depth"], spec.runs, spec.get("Vbar") is None)

    def solves(self, spec) -> dict[str, Solve]:
        """The `jax` backend: the numba path's starts and Brownian paths (so the same numbers up
        to rounding): Euler-Maruyama on the fine grid (the reference) and at the network's step,
        and the network's layers (its own step) on the summed increments."""
        T, fine = spec.horizon, _fine(spec)
        factor = spec["reference_depth"] // spec["depth"]
        layers = fine // factor
        p = ts.pack_values(spec.values)
        x0, dw = _noise(spec, range(spec.runs))
        coarse = integrators.coarsen(dw, factor)
        grid = np.array([0.0, T])
        sde = ts.problem(p)
        return {
            "reference": Solve("euler_maruyama", T / fine, sde, x0, grid, increments=dw),
            "euler_maruyama": Solve("euler_maruyama", T / layers, sde, x0, grid, increments=coarse),
            "network": Solve("step_map", T / layers, ts.network_problem(p), x0, grid, increments=coarse),
        }

    def observe(self, spec, solved) -> Chunk:
        ref = solved["reference"][:, -1]
        return Chunk(
            {
                "strong_error": _worst_token(solved["network"][:, -1], ref),
                "strong_error_em": _worst_token(solved["euler_maruyama"][:, -1], ref),
            }
        )

    def simulate(self, spec, runs: range) -> Chunk:
        T = spec.horizon
        fine = _fine(spec)
        factor = spec["reference_depth"] // spec["depth"]
        p = ts.pack_values(spec.values)
        problem = ts.problem(p)
        grid = np.array([0.0, T])
        x0, dw = _noise(spec, runs)
        ref = spec.solver.get(dt=T / fine).solve(problem, x0, grid, increments=dw).states[:, -1]
        coarse = integrators.coarsen(dw, factor)
        layers = fine // factor
        states, _ = ts.network_states(
            x0, layers, T, p, layers // spec.setup.saves if spec.setup.trajectories else layers, increments=coarse
        )
        approx = spec.solver.get(dt=T / layers).solve(problem, x0, grid, increments=coarse).states[:, -1]
        return Chunk(
            {"strong_error": _worst_token(states[:, -1], ref), "strong_error_em": _worst_token(approx, ref)},
            states=states if spec.setup.trajectories else None,
        )


def _fine(spec) -> int:
    return int(round(spec.horizon * spec["reference_depth"]))


def _noise(spec, runs: range):
    """The runs' starts (from the point's stream) and Brownian paths (each from its run's own
    stream, dyadic: the same path at every depth) on the fine grid."""
    d = spec["d"]
    x0 = attention.uniform_sphere(spec.rng, len(runs), spec["n"], d)
    return x0, integrators.dyadic_increments([spec.run_rng(r) for r in runs], spec.horizon, _fine(spec), (d, d))


def _worst_token(z, ref) -> np.ndarray:
    """max_i |z_i - ref_i| per run."""
    return np.sqrt(np.max(np.sum((z - ref) ** 2, -1), -1))
