"""System `sinkformer` (physics.md §2, arXiv 2110.11773): particles x_i in R^d,
dx_i/dt = sum_j K_ij W_V x_j with K softmax or Sinkhorn (doubly stochastic).

  setting = "heat":      K from the Gaussian kernel exp(-|x_i - x_j|^2 / (2 tau)), values
                         -(2 alpha / tau) (x_j - x_i); the variance should follow s0^2 + 2 alpha t
                         under Sinkhorn (heat equation) and grow about twice as fast under softmax.
  setting = "attention": scores x_i^T W x_j, values W_V x_j (W_V defaults to W); with W symmetric
                         the Sinkhorn flow is the Wasserstein gradient flow of the energy.
  Starts are N(0, s0^2 I); outputs are ensemble means of the variance and of the self-transport
  energy F = 1/2 OT_1(mu, mu) at the save times. `form = "network"`: the discrete Sinkformer of
  `depth` residual layers over [0, T] instead of the ODE. The file holds the heat line
  s0^2 + 2 alpha t as the reference `variance_heat` (NaN for the attention setting), drawn over
  the variance.
"""

from __future__ import annotations

import numpy as np

from ..core.contract import bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import INTEGRATOR_KEYS, Chunk, Draw, Output, Reference, System, over_axes, state_dims
from ..sinkformer.params import ALPHA_MAX, FIELDS, MATRIX_MAX, S0_MAX
from . import register

sf = lazy("dyn.sinkformer")


@register
class Sinkformer(System):
    name = "sinkformer"
    description = "Sinkformer / softmax particle flows: heat-diffusion limit and energy descent"
    default_plot = "variance"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = {
        **FIELDS,
        "setting": Field(
            "str",
            "heat",
            "heat (Gaussian kernel, values on x_j - x_i) or attention (scores x^T W y, values W_V x_j)",
            choices=("heat", "attention"),
        ),
        # bounds: dyn.sinkformer.params (scores, values and the variance's squares stay finite)
        "alpha": Field("float", 0.5, "diffusion coefficient alpha (heat setting)", lo=-ALPHA_MAX, hi=ALPHA_MAX),
        # tau: any size above the floor is finite (a wide kernel is flat: scores -> 0)
        "tau": Field("float", 0.05, "kernel bandwidth tau (heat setting)", lo=1e-12),
        "s0": Field("float", 1.0, "standard deviation of the Gaussian start", lo=0.0, hi=S0_MAX),
        "W": Field(
            "matrix",
            None,
            "score matrix W = W_Q^T W_K (attention setting; default I)",
            sweepable=False,
            lo=-MATRIX_MAX,
            hi=MATRIX_MAX,
        ),
        "WV": Field(
            "matrix",
            None,
            "value matrix W_V (attention setting; default W)",
            sweepable=False,
            lo=-MATRIX_MAX,
            hi=MATRIX_MAX,
        ),
        "form": Field("str", "flow", "continuous flow or discrete network", choices=("flow", "network")),
        "depth": Field("int", 100, "layers of the network over [0, T]", lo=1, hi=10**8),
    }

    def validate(self, spec) -> None:
        for name in ("W", "WV"):
            if spec.get(name) is not None and len(spec[name]) != spec["d"]:
                raise ScenarioError(
                    f"params.{name}",
                    f"must be {spec['d']} x {spec['d']} (d = {spec['d']}), got {len(spec[name])} x {len(spec[name])}",
                )
        if spec["form"] == "network" and spec["depth"] % spec.setup.saves:
            raise ScenarioError(
                "params.depth", f"depth {spec['depth']} must be a multiple of output.saves = {spec.setup.saves}"
            )

    def outputs(self, setup) -> list[Output]:
        return [
            Output("variance", "per-coordinate variance of the particles (mean over runs)", "1", ("time",)),
            Output("energy", "self-transport energy F = OT_1(mu, mu) / 2 (mean over runs)", "1", ("time",)),
        ]

    def trajectory_dims(self, setup) -> dict[str, int]:
        return state_dims(setup, particle="n", coordinate="d")

    def run_bytes(self, spec) -> int:
        return bytes_of(len(spec.times), spec["n"], spec["d"])

    def simulate(self, spec, runs: range) -> Chunk:
        p = _pack(spec)
        x0 = spec["s0"] * spec.rng.standard_normal((len(runs), spec["n"], spec["d"]))
        status = None  # the integrator's per run (max_steps is named in the point's message)
        if spec["form"] == "network":
            every = spec["depth"] // spec.setup.saves
            states = sf.sinkformer_layers(x0, spec["depth"], spec.horizon, p, save_every=every)
        else:
            solution = spec.solver.get().solve(sf.flow_problem(p), x0, spec.times)
            states, status = solution.states, solution.status
        finite = np.isfinite(states).all(axis=(1, 2, 3))
        energy = np.full(states.shape[:2], np.nan)
        for e in np.flatnonzero(finite):
            energy[e] = sf.self_transport_energy(states[e], p)
        return Chunk({"variance": sf.variance(states), "energy": energy}, states=states, status=status)

    def references(self, setup) -> list[Reference]:
        """The heat line Var(t) = s0^2 + 2 alpha t (the heat equation's variance from N(0, s0^2),
        which the Sinkhorn flow follows), over the swept setting, s0 and alpha."""
        if "heat" not in setup.values_of("setting"):
            return []
        dims, cases = over_axes(setup, "setting", "s0", "alpha")
        t = setup.times
        line = np.full(tuple(len(setup.axes[a]) for a in dims) + (len(t),), np.nan)
        for index, v in cases:
            if v["setting"] == "heat":
                line[index] = v["s0"] ** 2 + 2 * v["alpha"] * t
        return [
            Reference(
                "variance_heat",
                "heat line s0^2 + 2 alpha t (heat setting)",
                line,
                (*dims, "time"),
                draw=Draw(over=("variance",), color="black", label="heat: s0^2 + 2 alpha t"),
            )
        ]


def _pack(spec) -> np.ndarray:
    common = dict(normalization=spec["normalization"], iterations=spec["iterations"], tol=spec["tol"])
    if spec["setting"] == "heat":
        return sf.heat_params(spec["d"], spec["alpha"], spec["tau"], **common)
    W = spec.get("W")
    return sf.pack_params(spec["d"], W=W, WV=spec.get("WV", W), **common)
