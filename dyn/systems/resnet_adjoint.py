"""System `resnet_adjoint` (physics.md §3): the gradient of a regression loss w.r.t. every
layer's weights by the memory-free adjoint (activations rebuilt backwards by the inverse steps)
against backprop, over the common random networks of :mod:`dyn.resnet.instances`."""

from __future__ import annotations

import numpy as np

from ..core.lazy import lazy
from ..core.system import Chunk, Draw, Output, System
from ..resnet.params import NETWORK_PARAMS, layers, network
from . import register

integrators = lazy("integrators")
adjoint = lazy("dyn.resnet.adjoint")


@register
class ResNetAdjoint(System):
    name = "resnet_adjoint"
    description = "memory-free adjoint (activations rebuilt backwards) vs backprop: gradient agreement"
    default_plot = "relative_error"
    params = NETWORK_PARAMS

    def outputs(self, setup) -> list[Output]:
        return [
            Output("cosine", "cos(g_adjoint, g_backprop) (mean over networks)", "1"),
            # Euler's reconstruction errs by O(1/N), Heun's by O(1/N^3) (smooth weights)
            Output(
                "cosine_gap", "1 - cos(g_adjoint, g_backprop) (mean over networks)", "1", draw=Draw(slopes=(-2.0, -6.0))
            ),
            Output(
                "relative_error",
                "|g_adjoint - g_backprop| / |g_backprop| (mean over networks)",
                "1",
                draw=Draw(slopes=(-1.0, -3.0)),
            ),
        ]

    def simulate(self, spec, runs: range) -> Chunk:
        integrators.configure_jax()
        rows = []
        for r in runs:
            wf, x0, y = network(spec, r)
            W, V = layers(spec, wf)
            kw = dict(scheme=spec["scheme"], activation=spec["activation"])
            bp, adj = (
                np.concatenate([np.ravel(g) for g in adjoint.loss_and_grad(x0, y, W, V, adjoint=a, **kw)[1]])
                for a in (False, True)
            )
            cos = bp @ adj / (np.linalg.norm(bp) * np.linalg.norm(adj))
            rows.append([cos, 1.0 - cos, np.linalg.norm(adj - bp) / np.linalg.norm(bp)])
        rows = np.array(rows)
        return Chunk({"cosine": rows[:, 0], "cosine_gap": rows[:, 1], "relative_error": rows[:, 2]})
