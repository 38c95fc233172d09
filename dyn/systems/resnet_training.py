"""System `resnet_training` (physics.md §3): gradient descent on h_{k+1} = h_k + V_k sigma(W_k h_k)/L
from a smooth start (V = 0, identical W) or an i.i.d. one, and the largest weight increment
between consecutive layers after training. Run r trains on common data (and, from the smooth
start, common initial weights) drawn from SeedSequence(seed, spawn_key=(NETWORK_KEY, r)); the
i.i.d. initial layers come from the point's stream."""

from __future__ import annotations

import numpy as np

from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import Chunk, Draw, Output, System
from . import register

integrators = lazy("integrators")
training = lazy("dyn.resnet.training")
instances = lazy("dyn.resnet.instances")


@register
class ResNetTraining(System):
    name = "resnet_training"
    description = "GD training of h_{k+1} = h_k + V_k sigma(W_k h_k)/L: weight increments across depth"
    default_plot = "weight_increment"
    params = {
        "d": Field("int", 16, "data dimension d", lo=1, hi=4096),
        "width": Field("int", 32, "hidden width M", lo=1, hi=65536),
        "samples": Field("int", 100, "training samples (full batch)", lo=1, hi=10**6),
        "activation": Field("str", "tanh", "sigma", choices=("tanh", "relu", "gelu")),
        "depth": Field("int", 64, "number of layers L", lo=1, hi=10**6),
        "init": Field(
            "str", "smooth", "V = 0 and identical W (smooth), or i.i.d. Gaussian layers", choices=("smooth", "iid")
        ),
        "steps": Field("int", 200, "gradient descent steps", lo=0, hi=10**7),
        "lr": Field("float", 0.5, "learning rate, multiplied by L", lo=0.0, hi=1e3),
    }

    def outputs(self, setup) -> list[Output]:
        return [
            Output(
                "weight_increment",
                "max_k |theta_{k+1} - theta_k| after training (mean over runs)",
                "1",
                draw=Draw(slopes=(-1.0, 0.0)),
            ),
            Output("loss", "loss after training (mean over runs)", "1"),
            Output("initial_loss", "loss at initialization (mean over runs)", "1"),
        ]

    def simulate(self, spec, runs: range) -> Chunk:
        integrators.configure_jax()
        rows = []
        for r in runs:
            common = spec.setup.common_rng(instances.NETWORK_KEY, r)
            x, y = training.teacher_data(common, spec["samples"], spec["d"])
            init_rng = common if spec["init"] == "smooth" else spec.rng
            W, V = training.init_weights(init_rng, spec["depth"], spec["d"], spec["width"], spec["init"])
            start = training.loss(x, y, W, V, spec["activation"])
            W, V, final = training.train(x, y, W, V, steps=spec["steps"], lr=spec["lr"], activation=spec["activation"])
            rows.append([training.weight_increment(W, V) if spec["depth"] > 1 else 0.0, final, start])
        rows = np.array(rows)
        return Chunk({"weight_increment": rows[:, 0], "loss": rows[:, 1], "initial_loss": rows[:, 2]})
