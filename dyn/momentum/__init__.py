"""Momentum ResNets (physics.md §4; Sander, Ablin, Blondel & Peyre, arXiv 2102.07870).

    v_{n+1} = gamma v_n + (1 - gamma) f(x_n, theta_n),    x_{n+1} = x_n + v_{n+1}

- ``network``: the network and its inverse, in float and in exact fixed-point arithmetic
  (bit-for-bit inversion at any depth with an information buffer);
- ``fields``: residual fields g(x, t) and the ODEs eps x'' + x' = g and x' = g (numba ABI and JAX);
- ``limit``: gamma = 1 - h/eps, f = h g, the network of depth N against the ODE solved by the
  integrators, and the fixed-gamma (first-order) limit;
- ``linear``: psi_eps(a), the map reached at t = 1 by eps x'' + x' = a x, closed form and simulated;
- ``optimize``: heavy ball (gamma < 1) against the volume-preserving RevNet/leapfrog (gamma = 1);
- ``backprop``: JAX network with ordinary or memory-free (inversion-based) backprop.
"""
from .fields import (
    first_order_drift,
    first_order_drift_jax,
    field_jax,
    field_numpy,
    pack_field,
    random_tanh_field,
    second_order_drift,
    second_order_drift_jax,
    unpack_field,
    with_eps,
)
from .limit import gamma_for, network_states, ode_residual, solve_first_order, solve_second_order
from .linear import discriminant_threshold, negativity_threshold, psi, psi_network, psi_simulated
from .network import (
    ExactState,
    FixedPoint,
    exact_forward,
    exact_inverse,
    exact_layers,
    forward,
    inverse,
    inversion_error,
    quantized_gamma,
)
from .optimize import contraction_rate, heavy_ball, random_quadratic


def momentum_net(*args, **kwargs):
    """See :func:`dyn.momentum.backprop.momentum_net` (imported lazily: it needs JAX)."""
    from .backprop import momentum_net as impl

    return impl(*args, **kwargs)


__all__ = [
    "ExactState", "FixedPoint", "contraction_rate", "discriminant_threshold", "exact_forward",
    "exact_inverse", "exact_layers", "field_jax", "field_numpy", "first_order_drift",
    "first_order_drift_jax", "forward", "gamma_for", "heavy_ball", "inverse", "inversion_error",
    "momentum_net", "negativity_threshold", "network_states", "ode_residual", "pack_field", "psi",
    "psi_network", "psi_simulated", "quantized_gamma", "random_quadratic", "random_tanh_field",
    "second_order_drift", "second_order_drift_jax", "solve_first_order", "solve_second_order",
    "unpack_field", "with_eps",
]
