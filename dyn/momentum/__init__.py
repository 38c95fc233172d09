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

Names load on first use.
"""

from ..core.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        ".backprop": ("layer_jacobian_logdet", "momentum_net"),
        ".fields": (
            "FIRST_ORDER",
            "LAYOUT",
            "SECOND_ORDER",
            "field_jax",
            "field_numpy",
            "first_order_drift",
            "first_order_drift_jax",
            "pack_field",
            "random_tanh_field",
            "second_order_drift",
            "second_order_drift_jax",
            "unpack_field",
        ),
        ".limit": ("gamma_for", "network_states", "ode_residual", "solve_first_order", "solve_second_order"),
        ".linear": ("discriminant_threshold", "negativity_threshold", "psi", "psi_network", "psi_simulated"),
        ".network": (
            "ExactState",
            "FixedPoint",
            "exact_forward",
            "exact_inverse",
            "exact_layers",
            "forward",
            "inverse",
            "inversion_error",
            "quantized_gamma",
        ),
        ".optimize": ("contraction_rate", "heavy_ball", "heavy_ball_layer", "layer_matrix", "random_quadratic"),
    },
)
