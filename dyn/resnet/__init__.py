"""ResNets as discretized neural ODEs (physics.md §3): weights across depth, the Euler and Heun
networks with 1/N scaling and their inverse steps, the neural ODE they discretize (numba and JAX
right-hand sides for :mod:`integrators`), the memory-free adjoint, and the implicit
regularization of training (networks of width-M random-feature blocks against their mean ODE
live in :mod:`dyn.frontier.random_features`). Names load on first use (JAX-only parts, ``adjoint``
and ``training``, are submodules).
"""

from ..core.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        ".network": ("SCHEMES", "forward", "forward_states", "reconstruct"),
        ".ode": (
            "LAYOUT",
            "RESNET_ODE",
            "pack_params",
            "problem",
            "resnet_drift",
            "resnet_drift_jax",
            "solve",
            "solve_with_status",
        ),
        ".weights": (
            "ACTIVATIONS",
            "ROUGH_LAWS",
            "WeightFunction",
            "activation_numpy",
            "evaluate",
            "layer_weights",
            "smooth_weights",
        ),
    },
)
