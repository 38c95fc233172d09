"""Self-attention dynamics of tokens on the sphere S^{d-1} (physics.md §1.1).

    dx_i/dt = P_{x_i}( sum_j A_ij V x_j ),   A_ij = exp(beta <Q x_i, K x_j>) / Z_i

with SA (softmax, Z_i = sum_k exp(s_ik)) or USA (Z_i = n) normalization, its discrete post-norm
transformer, observables and initial laws. Parameters are declared in ``params``. Names load on
first use (importing the package loads no kernel).
"""
from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    ".flow": ("FLOW", "attention_drift", "attention_drift_jax", "attention_mean_field",
              "attention_mean_field_jax", "flow_problem", "mean_field", "velocity", "work_size"),
    ".init": ("hemisphere", "uniform_sphere"),
    ".network": ("POSTNORM_NETWORK", "postnorm_layers", "save_layers"),
    ".observables": ("energy_usa", "min_inner", "n_clusters", "pair_fraction", "pair_statistics"),
    ".params": ("FIELDS", "LAYOUT", "pack", "pack_params", "param_size", "unpack_params"),
})
