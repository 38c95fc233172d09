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
inputs. ``form = "mean"`` is the infinitely wide network (M = infinity: Euler layers of the mean
field, no units drawn): ``--reference ode`` on it is Euler's bias alone, ``--reference mean``
on the network is the units' fluctuation alone, at the same L.

**The law over (L, M), and the slope at M = 4.** ``dyn compare`` measures per run the largest
distance over saved depths and inputs, and its strong error is the RMS over runs. Writing the
network as mean network + fluctuation, x_L - x(1) = (xbar_L - x(1)) + eta_L with E eta_L = 0 to
leading order, the squares add (the RMS composes in quadrature, not the distances)::

    E^2(L, M) = a / L^2 + b / (L M) (1 - c / L).

a: Euler's bias of the mean network, a/L^2 (``form = "mean"`` against the ODE; a = 10.0 over
512 of the scenario's networks, the maximum over depths and inputs included). b and c: the
variance of eta_L. Linearized around the mean network (h = alpha/L, C_l one unit's covariance,
closed form in :func:`random_features.unit_covariance`)::

    Cov eta_{l+1} = P_l Cov eta_l P_l^T + h^2 C_l / M,    P_l = I + h dF/dx(xbar_l, s_l),

(:func:`random_features.fluctuation_covariance`). With S = (M/h) Cov this is Euler's step h, in
tau = alpha s, of the Lyapunov ODE dS/dtau = A S + S A^T + C, A = dF/dx (plus h^2 A S A^T): so
L M E|eta_L|^2 = b (1 - c/L + O(1/L^2)), b = alpha tr S(tau = alpha) the continuum variance, and
c the relative Euler error of the variance sum (for a constant scalar A = lambda/alpha, c =
lambda^2 e^{2 lambda} / (e^{2 lambda} - 1) + lambda/2: positive where the flow expands, as it
does on average here). Over the
scenario's first 128 networks (mean square at s = 1) the recursion gives b = 66.3, c = 1.18; the
scenario's observable (maximum over depths and inputs) measures b = 138 +- 6, c = 1.15 +- 0.30
at M = 64 (1024 networks x 2 unit draws; +- one bootstrap standard error over networks). So the
1/L^2 coefficient is a - b c / M: negative for M below b c / a, about 15 to 20, and then the
slope in L lies *above* -1/2 (at M = 4 the fluctuation's deficit at small L outweighs the bias),
positive above it (slope between -1/2 and -1).

Measured (2048 runs, L = 8 ... 128): slopes -0.450, -0.477, -0.503, -0.557 at M = 1, 4, 16, 64;
the law with a, b, c fitted on the bias and the fluctuation alone predicts -0.477 at M = 4 (b, c
from M = 16) and -0.482 (b, c from M = 64). Through the engine with 512 runs: M = 4 measured
-0.478 [-0.517, -0.439], law -0.472 (the law without c: -0.505). The nonlinearity is second: the
block's mean over the units is F exactly at every M (Stein), and the variance's dependence on the
random path adds c'/(L M) (c' about 1: c = 2.16 +- 0.22 fitted at M = 1, 1.52 +- 0.25 at M = 4),
3% of E^2 at L = 8, M = 4 against c/L = 14%.

The shipped scenario's M = 4 slope, -0.385 [-0.422, -0.348], is this -0.477 seen through 32
runs: the squared distances are heavy-tailed (the top 3% of runs carry 20 to 25% of E^2), so a
5-point slope from 32 runs per point scatters by 0.057 (P(slope >= -0.385) = 4%), more than its
least-squares interval (from the 5 points' residuals) says; the same 32 networks averaged over 64
unit draws give -0.471.
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
        raise dyn.ScenarioError(
            "output.trajectories",
            f"saving trajectories needs params.{key} fixed (every point's states must have one shape)",
        )
    return int(sizes.pop())


class ResNetWidth(dyn.System):
    name = "resnet_width"
    description = "ResNet of depth L with width-M random-feature blocks (scale alpha/(L M)) vs its mean ODE"
    default_plot = "error"
    integrator = frozenset({"horizon"})
    params = {
        "d": dyn.Field("int", 4, "embedding dimension d", lo=1, hi=1024),
        "inputs": dyn.Field("int", 4, "inputs per network (rows of x0)", lo=1, hi=10**5),
        "activation": dyn.Field("str", "erf", "sigma of the units: erf(u / sqrt 2) or ReLU", choices=("erf", "relu")),
        "modes": dyn.Field("int", 3, "cosine modes K of the coupling B(s)", lo=1, hi=64),
        "alpha": dyn.Field(
            "float",
            4.0,
            "residual scale alpha (each layer adds alpha/(L M) x the sum of its M units)",
            gt=0.0,
            hi=100.0,
        ),
        "noise": dyn.Field("float", 0.0, "tau: V = B(s) W + tau xi (unit noise independent of W)", lo=0.0, hi=100.0),
        "depth": dyn.Field("int", 100, "number of layers L", lo=1, hi=10**6),
        "width": dyn.Field("int", 16, "units per layer M", lo=1, hi=10**7),
        "form": dyn.Field(
            "str",
            "network",
            "the network, its infinitely wide network (mean: Euler layers of the mean field), or its mean ODE",
            choices=("network", "mean", "ode"),
        ),
    }

    def validate(self, spec) -> None:
        if spec.horizon != 1.0:
            raise dyn.ScenarioError(
                "integrator.horizon", f"the depth variable s runs over [0, 1]: horizon must be 1.0, got {spec.horizon}"
            )
        if spec["depth"] % spec.setup.saves:
            raise dyn.ScenarioError(
                "output.saves",
                f"{spec.setup.saves} saves must divide depth {spec['depth']} (the network saves after whole layers)",
            )

    def trajectory_dims(self, setup) -> dict[str, int]:
        return {"input": _fixed(setup, "inputs"), "coordinate": _fixed(setup, "d")}

    def outputs(self, setup) -> list:
        return [
            dyn.Output(
                "error",
                "|x_L - x(1)| against the mean ODE (mean over inputs; 0 for "
                "the ODE itself, Euler's bias for the mean form)",
                "1",
                draw=dyn.Draw(slopes=(-1.0, -0.5)),
            ),
            dyn.Output("displacement", "|x(1) - x(0)| of the mean ODE (mean over inputs)", "1"),
        ]

    def run_bytes(self, spec) -> int:
        # the saved states, and one layer's units and activations
        return 8 * (len(spec.times) * spec["inputs"] * spec["d"] + spec["width"] * (2 * spec["d"] + spec["inputs"]))

    def _reference(self, spec, r: int, coeffs, x0) -> np.ndarray:
        """The mean ODE's states at the save depths, once per network for the whole sweep."""
        key = ("width_reference", r, spec.key_without(*NETWORK_ONLY))
        return spec.setup.shared(
            key, lambda: features.mean_ode(x0, coeffs, spec["alpha"], spec["activation"], spec.times)
        )

    def _mean(self, spec, r: int, coeffs, x0) -> np.ndarray:
        """The infinitely wide network's states (M = infinity: no units drawn), once per network
        and depth for the whole sweep (the same at every width)."""
        every = spec["depth"] // spec.setup.saves
        key = ("width_mean", r, spec["depth"], spec.key_without(*NETWORK_ONLY))
        return spec.setup.shared(
            key, lambda: features.mean_states(x0, coeffs, spec["depth"], spec["alpha"], spec["activation"], every)
        )

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
                path = features.forward_states(
                    x0,
                    coeffs,
                    spec["depth"],
                    spec["width"],
                    spec["alpha"],
                    spec["activation"],
                    spec["noise"],
                    spec.rng,
                    every,
                )
            errors.append(np.linalg.norm(path[-1] - ref[-1], axis=-1).mean())
            moved.append(np.linalg.norm(ref[-1] - x0, axis=-1).mean())
            states.append(path)
        return dyn.Chunk(
            {"error": np.array(errors), "displacement": np.array(moved)},
            states=np.stack(states) if spec.setup.trajectories else None,
        )
