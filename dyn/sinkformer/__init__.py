"""Sinkformers (physics.md §2): Sinkhorn attention and the particle flows it drives.

    K = Sinkhorn(exp(s)) after k alternating normalizations (k = 1: softmax; k -> inf: doubly
    stochastic),   dx_i/dt = sum_j K_ij W_V x_j   (or W_V (x_j - x_i): the heat setting)

with the discrete Sinkformer (residual layers), the self-transport energy F = 1/2 OT_1(mu, mu)
(a Wasserstein gradient-flow Lyapunov function when W = W_V is symmetric), and the per-coordinate
variance (which grows like s0^2 + 2 alpha t in the heat limit). Parameters are declared in
``params``. Names load on first use (importing the package loads no kernel).
"""

from ..core.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        ".flow": (
            "SINKFORMER",
            "flow_problem",
            "score_matrix",
            "sinkformer_drift",
            "sinkformer_drift_jax",
            "sinkformer_layers",
            "velocity",
            "work_size",
        ),
        ".observables": ("dissipation", "self_transport_energy", "variance"),
        ".params": ("FIELDS", "LAYOUT", "heat_params", "pack_params", "param_size", "unpack_params"),
        ".sinkhorn_numba": ("marginal_error", "sinkhorn", "softmax"),
    },
)
