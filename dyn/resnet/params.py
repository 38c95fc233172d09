"""The ResNet sweeps' shared declaration: the network's scenario fields, and the common random
networks and layer weights of a point (used by the systems resnet_ode and resnet_adjoint).

Light to import: the kernels load on first use.
"""

from __future__ import annotations

from ..core.lazy import lazy
from ..core.schema import Field

resnet = lazy("dyn.resnet")
instances = lazy("dyn.resnet.instances")

NETWORK_PARAMS = {
    "d": Field("int", 8, "state dimension d", lo=1, hi=4096),
    "width": Field("int", 16, "hidden width M of the residual V sigma(W x)", lo=1, hi=65536),
    "inputs": Field("int", 32, "inputs per network (rows of x0)", lo=1, hi=10**6),
    "activation": Field("str", "tanh", "sigma", choices=("tanh", "relu", "gelu")),
    "modes": Field("int", 4, "cosine modes K of the weight function theta(s)", lo=1, hi=64),
    "scale": Field("float", 1.0, "amplitude of theta(s) (residual size)", lo=0.0, hi=100.0),
    "weights": Field(
        "str", "smooth", "layers theta(n/N) (smooth) or theta(n/N) + xi_n (rough)", choices=("smooth", "rough")
    ),
    "roughness": Field("float", 1.0, "size of the layer-to-layer fluctuation xi_n of rough weights", lo=0.0, hi=100.0),
    "rough_law": Field(
        "str", "iid", "fluctuation law: i.i.d. Gaussian or (-1)^n Delta", choices=("iid", "alternating")
    ),
    "depth": Field("int", 64, "number of layers N", lo=1, hi=10**6),
    "scheme": Field("str", "euler", "ResNet form", choices=("euler", "heun")),
}


def network(spec, r: int):
    """(weight function, inputs, targets) of common network r at this point's sizes, drawn once
    per sweep (the engine's cache: every depth and scheme reuses them)."""
    sizes = (spec["d"], spec["width"], spec["inputs"], spec["modes"], spec["scale"])
    return spec.setup.shared(("network", r, *sizes), lambda: instances.network(spec.setup.seed, r, *sizes))


def layers(spec, wf):
    """The layer weights (W, V) of this point's depth (rough parts from the point's stream)."""
    rough = spec["roughness"] if spec["weights"] == "rough" else 0.0
    return resnet.layer_weights(wf, spec["depth"], rough, spec["rough_law"], spec.rng)
