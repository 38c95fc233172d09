"""ResNets as discretized neural ODEs (physics.md §3): weights across depth, the Euler and Heun
networks with 1/N scaling and their inverse steps, the neural ODE they discretize (numba and JAX
right-hand sides for :mod:`integrators`), the memory-free adjoint, and the implicit
regularization of training. JAX-only parts (``adjoint``, ``training``) import on first use.
"""
from .network import SCHEMES, forward, reconstruct
from .ode import HEADER, pack_params, problem, resnet_drift, resnet_drift_jax, solve
from .weights import (
    ACTIVATIONS,
    ROUGH_LAWS,
    WeightFunction,
    activation_numpy,
    evaluate,
    layer_weights,
    smooth_weights,
)

__all__ = [
    "ACTIVATIONS", "HEADER", "ROUGH_LAWS", "SCHEMES", "WeightFunction", "activation_numpy",
    "evaluate", "forward", "layer_weights", "pack_params", "problem", "reconstruct",
    "resnet_drift", "resnet_drift_jax", "smooth_weights", "solve",
]
