"""Self-attention dynamics of tokens on the sphere S^{d-1} (physics.md §1.1).

    dx_i/dt = P_{x_i}( sum_j A_ij V x_j ),   A_ij = exp(beta <Q x_i, K x_j>) / Z_i

with SA (softmax, Z_i = sum_k exp(s_ik)) or USA (Z_i = n) normalization, its discrete post-norm
transformer, observables and initial laws. The flat parameter layout is documented in ``params``.
"""
from .flow import (
    attention_drift,
    attention_drift_jax,
    attention_mean_field,
    attention_mean_field_jax,
    flow_problem,
    mean_field,
    velocity,
)
from .init import hemisphere, uniform_sphere
from .network import postnorm_layers, save_layers
from .observables import energy_usa, gram, min_inner, n_clusters, pair_fraction, pair_statistics
from .params import HEADER, pack_params, param_size, unpack_params, with_beta

__all__ = [
    "HEADER", "attention_drift", "attention_drift_jax", "attention_mean_field",
    "attention_mean_field_jax", "energy_usa", "flow_problem", "gram", "hemisphere", "mean_field", "min_inner",
    "n_clusters", "pack_params", "pair_statistics", "param_size", "pair_fraction", "postnorm_layers", "save_layers",
    "uniform_sphere", "unpack_params", "velocity", "with_beta",
]
