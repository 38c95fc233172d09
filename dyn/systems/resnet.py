"""Systems `resnet_ode`, `resnet_adjoint`, `resnet_training`: ResNets as discretized neural ODEs
(physics.md §3; the mathematics is in :mod:`dyn.resnet`).

- `resnet_ode`: the ResNet of `depth` layers (Euler or Heun form, 1/N scaling) against the neural
  ODE of its weight function, solved by the scenario's integrator (a tight adaptive reference);
  and the input rebuilt backwards from the output by the inverse steps.
- `resnet_adjoint`: the gradient of a regression loss w.r.t. every layer's weights, by the
  memory-free adjoint and by backprop.
- `resnet_training`: gradient descent from a smooth or an i.i.d. initialization, and the largest
  weight increment between consecutive layers after training.

Common random numbers: network `r` of `ensemble.runs` (its weight function, inputs and targets,
and the training data) is drawn from `SeedSequence(ensemble.seed, spawn_key=(NETWORK_KEY, r))`,
the same at every sweep point, so curves against depth compare the same networks. What depends on
the depth (rough fluctuations across layers, i.i.d. initial layers) comes from the point's rng.

Rough weights and "the" ODE: `theta_n = theta(n/N) + xi_n` with `xi_n` of size `roughness`
(i.i.d. or alternating). `error` is measured against the ODE of the smooth part `theta(s)`, the
function the layers fluctuate around. For a residual not odd in the weights (ReLU) the layers
average to a different vector field, `E_xi f(x; theta + xi) != f(x; theta)`, so this gap tends
to a non-zero constant instead of vanishing.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ScenarioError
from ..schema import Field
from . import register
from .base import DIVERGED, OK, Coord, Output, PointResult, System

if TYPE_CHECKING:
    from ..scenario import Scenario

NETWORK_KEY = 0x7E5  # spawn-key salt of the common random networks (any constant)

_NETWORK_PARAMS = {
    "d": Field("int", 8, "state dimension d", lo=1, hi=4096),
    "width": Field("int", 16, "hidden width M of the residual V sigma(W x)", lo=1, hi=65536),
    "inputs": Field("int", 32, "inputs per network (rows of x0)", lo=1, hi=10**6),
    "activation": Field("str", "tanh", "sigma", choices=("tanh", "relu", "gelu")),
    "modes": Field("int", 4, "cosine modes K of the weight function theta(s)", lo=1, hi=64),
    "scale": Field("float", 1.0, "amplitude of theta(s) (residual size)", lo=0.0, hi=100.0),
    "weights": Field("str", "smooth", "layers theta(n/N) (smooth) or theta(n/N) + xi_n (rough)",
                     choices=("smooth", "rough")),
    "roughness": Field("float", 1.0, "size of the layer-to-layer fluctuation xi_n of rough weights",
                       lo=0.0, hi=100.0),
    "rough_law": Field("str", "iid", "fluctuation law: i.i.d. Gaussian or (-1)^n Delta",
                       choices=("iid", "alternating")),
    "depth": Field("int", 64, "number of layers N", lo=1, hi=10**6),
    "scheme": Field("str", "euler", "ResNet form", choices=("euler", "heun")),
}


def _network_rng(scenario: "Scenario", r: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(scenario.ensemble["seed"],
                                                        spawn_key=(NETWORK_KEY, r)))


@functools.lru_cache(maxsize=64)
def _network(seed: int, r: int, d: int, width: int, inputs: int, modes: int, scale: float):
    """Weight function, inputs and targets of common network r (cached: shared by all depths)."""
    from .. import resnet

    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(NETWORK_KEY, r)))
    wf = resnet.smooth_weights(rng, d, width, modes, scale)
    return wf, rng.standard_normal((inputs, d)), rng.standard_normal((inputs, d))


def _networks(point: dict, scenario: "Scenario"):
    for r in range(scenario.ensemble["runs"]):
        yield r, _network(scenario.ensemble["seed"], r, point["d"], point["width"],
                          point["inputs"], point["modes"], point["scale"])


def _layers(point: dict, wf, rng: np.random.Generator):
    from .. import resnet

    rough = point["roughness"] if point["weights"] == "rough" else 0.0
    return resnet.layer_weights(wf, point["depth"], rough, point["rough_law"], rng)


_REFERENCES: dict = {}  # (network key, activation, integrator) -> x(1); shared by all depths
MAX_REFERENCES = 256


def _reference(point: dict, scenario: "Scenario", r: int, wf, x0) -> np.ndarray:
    """x(1) of the neural ODE of theta(s) for network r (cached across depths and schemes)."""
    import integrators

    from .. import resnet
    from ..scenario import solver_options

    cfg = scenario.integrator
    options = solver_options(cfg)
    key = (scenario.ensemble["seed"], r, point["d"], point["width"], point["inputs"],
           point["modes"], point["scale"], point["activation"], cfg["backend"], cfg["method"],
           tuple(sorted(options.items())))
    if key not in _REFERENCES:
        if len(_REFERENCES) >= MAX_REFERENCES:
            _REFERENCES.clear()
        _REFERENCES[key] = resnet.solve(wf, point["activation"], x0,
                                        integrators.get(cfg["backend"], cfg["method"], **options))
    return _REFERENCES[key]


def _slope_lines(ax, ds, var: str, slopes: dict) -> None:
    """Dashed reference lines ``c N^slope`` through the data's value at the smallest depth."""
    if ax.get_xscale() != "log" or "depth" not in ds.dims or var not in ds:
        return
    depth = ds["depth"].values.astype(float)
    values = ds[var].values.reshape(len(depth), -1) if ds[var].dims[0] == "depth" else None
    if values is None:
        return
    for slope, style in slopes.items():
        start = np.nanmax(values[0]) if slope < 0 else np.nanmedian(values[0])
        if not np.isfinite(start) or start <= 0:
            continue
        ax.plot(depth, start * (depth / depth[0]) ** slope, style, color="gray", lw=1,
                label=f"slope {slope:g}")
    ax.legend(fontsize=8)


@register
class ResNetODE(System):
    name = "resnet_ode"
    description = "ResNet of depth N (Euler/Heun, 1/N scaling) against its neural ODE; backward rebuild"
    default_plot = "error"
    equation = "ode"
    params = _NETWORK_PARAMS

    def validate(self, point: dict, scenario: "Scenario") -> None:
        if scenario.integrator["horizon"] != 1.0:
            raise ScenarioError("integrator.horizon", "the depth variable s runs over [0, 1]: "
                                f"horizon must be 1.0, got {scenario.integrator['horizon']}")

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("error", "ResNet vs ODE |x_N - x(1)| (mean over inputs)", "1"),
            Output("reconstruction_error", "input rebuilt backwards |x0_rebuilt - x0| (mean over inputs)",
                   "1"),
            Output("ode_displacement", "ODE displacement |x(1) - x(0)| (mean over inputs)", "1"),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        from .. import resnet

        sums = np.zeros(3)
        for r, (wf, x0, _) in _networks(point, scenario):
            ref = _reference(point, scenario, r, wf, x0)
            W, V = _layers(point, wf, rng)
            with np.errstate(over="ignore", invalid="ignore"):
                xN = resnet.forward(x0, W, V, point["scheme"], point["activation"])
                back = resnet.reconstruct(xN, W, V, point["scheme"], point["activation"])
            sums += [np.linalg.norm(xN - ref, axis=1).mean(),
                     np.linalg.norm(back - x0, axis=1).mean(),
                     np.linalg.norm(ref - x0, axis=1).mean()]
        values = dict(zip(("error", "reconstruction_error", "ode_displacement"),
                          sums / scenario.ensemble["runs"]))
        if not np.all(np.isfinite(sums)):
            return PointResult(values, DIVERGED, "the ResNet, its inverse or the ODE overflowed")
        return PointResult(values, OK)

    def decorate(self, ax, ds, var: str) -> None:
        if var == "error":
            _slope_lines(ax, ds, var, {-1.0: "--", -2.0: ":"})
        elif var == "reconstruction_error":  # Heun's mirrored inverse step: local error O(h^4)
            _slope_lines(ax, ds, var, {-1.0: "--", -3.0: ":"})


@register
class ResNetAdjoint(System):
    name = "resnet_adjoint"
    description = "memory-free adjoint (activations rebuilt backwards) vs backprop: gradient agreement"
    default_plot = "relative_error"
    params = _NETWORK_PARAMS

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("cosine", "cos(g_adjoint, g_backprop) (mean over networks)", "1"),
            Output("cosine_gap", "1 - cos(g_adjoint, g_backprop) (mean over networks)", "1"),
            Output("relative_error", "|g_adjoint - g_backprop| / |g_backprop| (mean over networks)",
                   "1"),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        import integrators

        from ..resnet import adjoint

        integrators.configure_jax()
        sums = np.zeros(3)
        for _, (wf, x0, y) in _networks(point, scenario):
            W, V = _layers(point, wf, rng)
            kw = dict(scheme=point["scheme"], activation=point["activation"])
            grads = [np.concatenate([np.ravel(g) for g in adjoint.loss_and_grad(
                x0, y, W, V, adjoint=a, **kw)[1]]) for a in (False, True)]
            bp, adj = grads
            cos = bp @ adj / (np.linalg.norm(bp) * np.linalg.norm(adj))
            sums += [cos, 1.0 - cos, np.linalg.norm(adj - bp) / np.linalg.norm(bp)]
        values = dict(zip(("cosine", "cosine_gap", "relative_error"), sums / scenario.ensemble["runs"]))
        if not np.all(np.isfinite(sums)):
            return PointResult(values, DIVERGED, "a gradient overflowed")
        return PointResult(values, OK)

    def decorate(self, ax, ds, var: str) -> None:
        if var in ("relative_error", "cosine_gap"):
            # Euler's reconstruction errs by O(1/N), Heun's by O(1/N^3) (smooth weights)
            slopes = {-1.0: "--", -3.0: ":"} if var == "relative_error" else {-2.0: "--", -6.0: ":"}
            _slope_lines(ax, ds, var, slopes)


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
        "init": Field("str", "smooth", "V = 0 and identical W (smooth), or i.i.d. Gaussian layers",
                      choices=("smooth", "iid")),
        "steps": Field("int", 200, "gradient descent steps", lo=0, hi=10**7),
        "lr": Field("float", 0.5, "learning rate, multiplied by L", lo=0.0, hi=1e3),
    }

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("weight_increment", "max_k |theta_{k+1} - theta_k| after training (mean over runs)",
                   "1"),
            Output("loss", "loss after training (mean over runs)", "1"),
            Output("initial_loss", "loss at initialization (mean over runs)", "1"),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        import integrators

        from ..resnet import training

        integrators.configure_jax()
        sums = np.zeros(3)
        for r in range(scenario.ensemble["runs"]):
            common = _network_rng(scenario, r)
            x, y = training.teacher_data(common, point["samples"], point["d"])
            init_rng = common if point["init"] == "smooth" else rng
            W, V = training.init_weights(init_rng, point["depth"], point["d"], point["width"],
                                         point["init"])
            start = training.loss(x, y, W, V, point["activation"])
            W, V, final = training.train(x, y, W, V, steps=point["steps"], lr=point["lr"],
                                         activation=point["activation"])
            sums += [training.weight_increment(W, V) if point["depth"] > 1 else 0.0, final, start]
        values = dict(zip(("weight_increment", "loss", "initial_loss"), sums / scenario.ensemble["runs"]))
        if not np.all(np.isfinite(sums)):
            return PointResult(values, DIVERGED, "training diverged (lower params.lr)")
        return PointResult(values, OK)

    def decorate(self, ax, ds, var: str) -> None:
        if var == "weight_increment":
            _slope_lines(ax, ds, var, {-1.0: "--", 0.0: ":"})
