"""System `momentum_limit` (physics.md §4): the Momentum ResNet

    v <- gamma v + (1 - gamma) h g(x, t_n),   x <- x + v      (`depth` layers on [0, T], h = T/N)

against the second-order ODE eps x'' + x' = g (gamma = 1 - h/eps) and the first-order ODE x' = g,
solved by the scenario's integrator, in float or exact fixed-point arithmetic, with the error of
rebuilding the input from the output. Runs are inputs x_0 of one random tanh field g; field and
inputs are drawn from the sweep's common stream (:data:`INSTANCE_KEY`), the same at every
point, so a curve over depth is one problem.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import INTEGRATOR_KEYS, Chunk, Output, System, state_dims
from ..momentum.params import EPS_MAX, SCALE_MAX, check_second_order_gamma
from . import register

momentum = lazy("dyn.momentum")

INSTANCE_KEY = 0x40E  # spawn-key salt of the common problem instance (any constant)


@register
class MomentumLimit(System):
    name = "momentum_limit"
    description = "Momentum ResNet of depth N vs eps x'' + x' = g and x' = g; float or exact inversion"
    default_plot = "log10_error"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = {
        "d": Field("int", 2, "state dimension d", lo=1, hi=1000),
        "depth": Field("int", 256, "layers N on [0, T] (h = T/N)", lo=1, hi=10**7),
        # bounds: dyn.momentum.params (1 - h/eps stays distinguishable from 1; the states move
        # by at most scale x T)
        "eps": Field("float", 0.5, "mass eps of eps x'' + x' = g", lo=1e-12, hi=EPS_MAX),
        "gamma": Field("float", None, "fixed gamma (default: 1 - h/eps, the second-order scaling)", lo=0.0, hi=1.0),
        # > 0: with g = 0 every error is exactly 0, and its log10 -inf
        "scale": Field("float", 2.0, "size of the random tanh field g", gt=0.0, hi=SCALE_MAX),
        "arithmetic": Field("str", "float", "network arithmetic", choices=("float", "exact")),
    }

    def validate(self, spec) -> None:
        if spec.get("gamma") is None:
            check_second_order_gamma(spec)
        elif spec["gamma"] == 0.0:
            raise ScenarioError("params.gamma", "gamma = 0 is not invertible")
        if spec.setup.trajectories:
            if spec["arithmetic"] != "float":
                raise ScenarioError("output.trajectories", 'the hidden states are kept for arithmetic = "float" only')
            if spec["depth"] % spec.setup.saves:
                raise ScenarioError(
                    "output.saves",
                    f"{spec.setup.saves} saves must divide depth {spec['depth']} to keep the hidden states",
                )

    def trajectory_dims(self, setup) -> dict[str, int]:
        """The hidden state x over the layers (time = layer h), for every input."""
        return state_dims(setup, coordinate="d")

    def outputs(self, setup) -> list[Output]:
        return [
            Output("error", "max |x_N - x(T)|, network vs second-order ODE (over runs)", "1", reduce="max"),
            Output(
                "log10_error", "log10 of error (slope -log10(2) per doubling of depth at rate 1/N)", "1", reduce="max"
            ),
            Output("error_first_order", "max |x_N - x(T)|, network vs first-order ODE x' = g", "1", reduce="max"),
            Output(
                "inversion_error", "max |input - inverse(output)| over x_0 and v_0 (0: bit for bit)", "1", reduce="max"
            ),
            Output("gamma", "gamma used by the network", "1", reduce="point"),
        ]

    def point_values(self, spec) -> dict:
        return {"gamma": _gamma(spec)}

    def simulate(self, spec, runs: range) -> Chunk:
        T, d, solver = spec.horizon, spec["d"], spec.solver
        instance = spec.setup.common_rng(INSTANCE_KEY, 0)
        p = momentum.random_tanh_field(instance, d, eps=spec["eps"], scale=spec["scale"])
        x0 = instance.standard_normal((spec.runs, d))[runs.start : runs.stop]
        u0 = np.zeros_like(x0)
        opts = (solver.backend, solver.method)
        ref2 = momentum.solve_second_order(p, x0, u0, [0.0, T], *opts, **solver.options)[:, -1, 0]
        ref1 = momentum.solve_first_order(p, x0, [0.0, T], *opts, **solver.options)[:, -1]
        x, _, inv = momentum.network_states(
            p, x0, u0, T, spec["depth"], gamma=_gamma(spec), arithmetic=spec["arithmetic"]
        )
        err = np.max(np.abs(x - ref2), axis=-1)
        states = None
        if spec.setup.trajectories:  # the same float layers, kept every depth / saves layers
            xs, _ = momentum.forward(
                x0,
                T / spec["depth"] * u0,
                _gamma(spec),
                momentum.ode_residual(p, T, spec["depth"]),
                spec["depth"],
                save=True,
            )
            states = np.moveaxis(xs[:: spec["depth"] // spec.setup.saves], 0, 1)
        return Chunk(
            {
                "error": err,
                "log10_error": np.log10(err),
                "error_first_order": np.max(np.abs(x - ref1), axis=-1),
                "inversion_error": inv,
            },
            states=states,
        )


def _gamma(spec) -> float:
    gamma = spec.get("gamma")
    if gamma is None:
        gamma = momentum.gamma_for(spec["eps"], spec.horizon, spec["depth"])
    return momentum.quantized_gamma(gamma) if spec["arithmetic"] == "exact" else gamma
