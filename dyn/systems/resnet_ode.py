"""System `resnet_ode` (physics.md §3): the ResNet of `depth` layers (Euler or Heun form, 1/N
scaling) against the neural ODE of its weight function, solved by the scenario's integrator (a
tight adaptive reference), and the input rebuilt backwards from the output by the inverse steps.

Runs are the common random networks of :mod:`dyn.resnet.instances` (the same at every point).
Rough weights theta_n = theta(n/N) + xi_n (size `roughness`, i.i.d. or alternating, drawn from
the point's stream): `error` is measured against the ODE of the smooth part theta(s). For a
residual not odd in the weights (ReLU) the layers average to another vector field,
E_xi f(x; theta + xi) != f(x; theta), so this gap tends to a non-zero constant.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.system import INTEGRATOR_KEYS, Chunk, Draw, Output, System, state_dims
from ..resnet.params import NETWORK_PARAMS, layers, network
from . import register

resnet = lazy("dyn.resnet")

# what the reference x(1) of the neural ODE does not depend on: the discrete network's form
NETWORK_ONLY = ("depth", "scheme", "weights", "roughness", "rough_law")


def _reference(spec, r: int, wf, x0) -> tuple[np.ndarray, int]:
    """(x(1), the solver's status) of the neural ODE of theta(s) for network r, computed once for
    all the depths and schemes of the sweep (the engine's cache, Setup.shared)."""
    return spec.setup.shared(
        ("reference", r, spec.key_without(*NETWORK_ONLY)),
        lambda: resnet.solve_with_status(wf, spec["activation"], x0, spec.solver.get()),
    )


@register
class ResNetODE(System):
    name = "resnet_ode"
    description = "ResNet of depth N (Euler/Heun, 1/N scaling) against its neural ODE; backward rebuild"
    default_plot = "error"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = NETWORK_PARAMS

    def validate(self, spec) -> None:
        if spec.horizon != 1.0:
            raise ScenarioError(
                "integrator.horizon", f"the depth variable s runs over [0, 1]: horizon must be 1.0, got {spec.horizon}"
            )
        if spec.setup.trajectories and spec["depth"] % spec.setup.saves:
            raise ScenarioError(
                "output.saves", f"{spec.setup.saves} saves must divide depth {spec['depth']} to keep the hidden states"
            )

    def trajectory_dims(self, setup) -> dict[str, int]:
        """The hidden states over depth s = k/N (time = s), for every input of the network."""
        return state_dims(setup, input="inputs", coordinate="d")

    def outputs(self, setup) -> list[Output]:
        return [
            Output("error", "ResNet vs ODE |x_N - x(1)| (mean over inputs)", "1", draw=Draw(slopes=(-1.0, -2.0))),
            # Heun's mirrored inverse step: local error O(h^4)
            Output(
                "reconstruction_error",
                "input rebuilt backwards |x0_rebuilt - x0| (mean over inputs)",
                "1",
                draw=Draw(slopes=(-1.0, -3.0)),
            ),
            Output("ode_displacement", "ODE displacement |x(1) - x(0)| (mean over inputs)", "1"),
        ]

    def simulate(self, spec, runs: range) -> Chunk:
        rows, states, status = [], [], []
        every = spec["depth"] // spec.setup.saves if spec.setup.trajectories else spec["depth"]
        for r in runs:
            wf, x0, _ = network(spec, r)
            ref, solved = _reference(spec, r, wf, x0)
            status.append(solved)
            W, V = layers(spec, wf)
            path = resnet.forward_states(x0, W, V, spec["scheme"], spec["activation"], every)
            xN = path[-1]
            back = resnet.reconstruct(xN, W, V, spec["scheme"], spec["activation"])
            rows.append(
                [
                    np.linalg.norm(xN - ref, axis=1).mean(),
                    np.linalg.norm(back - x0, axis=1).mean(),
                    np.linalg.norm(ref - x0, axis=1).mean(),
                ]
            )
            states.append(path)
        rows = np.array(rows)
        chunk = Chunk(
            {"error": rows[:, 0], "reconstruction_error": rows[:, 1], "ode_displacement": rows[:, 2]},
            states=np.stack(states) if spec.setup.trajectories else None,
        )
        chunk.status = np.array(status)  # a reference cut short by max_steps is named as such
        return chunk
