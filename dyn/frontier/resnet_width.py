r"""A ResNet of depth L whose layers are width-M random-feature blocks (residual scale
alpha/(L M)), against its mean ODE (Chizat, "The hidden width of deep ResNets", arXiv
2509.10167; the model and the derivation of the rate O(1/L + alpha/sqrt(L M)) are in
:mod:`dyn.frontier.random_features`).

Written through the public API (a ``dyn.System``: the network is discrete and the mean ODE is
solved by scipy, so neither is one vector field for ``dyn.Model``). Run r is common network r:
its coupling B(s) and its inputs are drawn from ``spec.setup.common_rng(NETWORK_KEY, r)``, the
same at every point. ``form = "network"`` draws the units of its L layers from the point's
stream, run after run; ``form = "ode"`` solves the mean ODE (scipy's DOP853, rtol 1e-12:
``[integrator]`` sets only the horizon, 1), once per network for the whole sweep
(``spec.setup.shared``, keyed by ``spec.key_without`` the network-only parameters). The hidden
states at the save depths s = k / saves are the trajectories, so
``dyn compare FILE --along form --reference ode --against depth`` measures the distance run by
run (with ``[ensemble] common = ["form"]``); ``error`` is the same distance at s = 1, mean over
inputs.
"""
from __future__ import annotations

import numpy as np

import dyn

from . import random_features as features

NETWORK_KEY = 0x5D7  # spawn-key salt of the common random networks (any constant)
NETWORK_ONLY = ("depth", "width", "form", "noise")  # what the mean ODE does not depend on


def _network(spec, r: int):
    """(coefficients of B(s), inputs) of common network r at this point's sizes."""
    d, inputs, modes = spec["d"], spec["inputs"], spec["modes"]

    def draw():
        rng = spec.setup.common_rng(NETWORK_KEY, r)
        return features.draw_coupling(rng, d, modes), rng.standard_normal((inputs, d))

    return spec.setup.shared(("width_network", r, d, inputs, modes), draw)


def _fixed(setup, key: str) -> int:
    """The one value of `key` over the sweep (trajectories need one state shape)."""
    sizes = set(setup.values_of(key))
    if len(sizes) != 1:
        raise dyn.ScenarioError("output.trajectories", f"saving trajectories needs params.{key} "
                                "fixed (every point's states must have one shape)")
    return int(sizes.pop())


class ResNetWidth(dyn.System):
    name = "resnet_width"
    description = "ResNet of depth L with width-M random-feature blocks (scale alpha/(L M)) vs its mean ODE"
    default_plot = "error"
    integrator = frozenset({"horizon"})
    params = {
        "d": dyn.Field("int", 4, "embedding dimension d", lo=1, hi=1024),
        "inputs": dyn.Field("int", 4, "inputs per network (rows of x0)", lo=1, hi=10**5),
        "activation": dyn.Field("str", "erf", "sigma of the units: erf(u / sqrt 2) or ReLU",
                                choices=("erf", "relu")),
        "modes": dyn.Field("int", 3, "cosine modes K of the coupling B(s)", lo=1, hi=64),
        "alpha": dyn.Field("float", 4.0, "residual scale alpha (each layer adds alpha/(L M) x "
                           "the sum of its M units)", gt=0.0, hi=100.0),
        "noise": dyn.Field("float", 0.0, "tau: V = B(s) W + tau xi (unit noise independent of "
                           "W)", lo=0.0, hi=100.0),
        "depth": dyn.Field("int", 100, "number of layers L", lo=1, hi=10**6),
        "width": dyn.Field("int", 16, "units per layer M", lo=1, hi=10**7),
        "form": dyn.Field("str", "network", "the network, its infinitely wide network (mean: "
                          "Euler layers of the mean field), or its mean ODE",
                          choices=("network", "mean", "ode")),
    }

    def validate(self, spec) -> None:
        if spec.horizon != 1.0:
            raise dyn.ScenarioError("integrator.horizon", "the depth variable s runs over [0, 1]: "
                                    f"horizon must be 1.0, got {spec.horizon}")
        if spec["depth"] % spec.setup.saves:
            raise dyn.ScenarioError("output.saves", f"{spec.setup.saves} saves must divide depth "
                                    f"{spec['depth']} (the network saves after whole layers)")

    def trajectory_dims(self, setup) -> dict[str, int]:
        return {"input": _fixed(setup, "inputs"), "coordinate": _fixed(setup, "d")}

    def outputs(self, setup) -> list:
        return [dyn.Output("error", "|x_L - x(1)| against the mean ODE (mean over inputs; 0 for "
                           "the ODE itself, Euler's bias for the mean form)", "1", draw=dyn.Draw(slopes=(-1.0, -0.5))),
                dyn.Output("displacement", "|x(1) - x(0)| of the mean ODE (mean over inputs)",
                           "1")]

    def run_bytes(self, spec) -> int:
        # the saved states, and one layer's units and activations
        return 8 * (len(spec.times) * spec["inputs"] * spec["d"]
                    + spec["width"] * (2 * spec["d"] + spec["inputs"]))

    def _reference(self, spec, r: int, coeffs, x0) -> np.ndarray:
        """The mean ODE's states at the save depths, once per network for the whole sweep."""
        key = ("width_reference", r, spec.key_without(*NETWORK_ONLY))
        return spec.setup.shared(key, lambda: features.mean_ode(
            x0, coeffs, spec["alpha"], spec["activation"], spec.times))

    def _mean(self, spec, r: int, coeffs, x0) -> np.ndarray:
        """The infinitely wide network's states (M = infinity: no units drawn), once per network
        and depth for the whole sweep (the same at every width)."""
        every = spec["depth"] // spec.setup.saves
        key = ("width_mean", r, spec["depth"], spec.key_without(*NETWORK_ONLY))
        return spec.setup.shared(key, lambda: features.mean_states(
            x0, coeffs, spec["depth"], spec["alpha"], spec["activation"], every))

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        errors, moved, states = [], [], []
        every = spec["depth"] // spec.setup.saves
        for r in runs:
            coeffs, x0 = _network(spec, r)
            ref = self._reference(spec, r, coeffs, x0)
            if spec["form"] == "ode":
                path = ref
            elif spec["form"] == "mean":
                path = self._mean(spec, r, coeffs, x0)
            else:
                path = features.forward_states(x0, coeffs, spec["depth"], spec["width"],
                                               spec["alpha"], spec["activation"], spec["noise"],
                                               spec.rng, every)
            errors.append(np.linalg.norm(path[-1] - ref[-1], axis=-1).mean())
            moved.append(np.linalg.norm(ref[-1] - x0, axis=-1).mean())
            states.append(path)
        return dyn.Chunk({"error": np.array(errors), "displacement": np.array(moved)},
                         states=np.stack(states) if spec.setup.trajectories else None)
