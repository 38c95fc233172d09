"""Self-attention dynamics of tokens on the sphere S^{d-1} (physics.md §1.1, §1.4).

    dx_i/dt = P_{x_i}( sum_j A_ij V x_j ),   A_ij = exp(beta <Q x_i, K x_j>) / Z_i

with SA (softmax, Z_i = sum_k exp(s_ik)) or USA (Z_i = n) normalization, its discrete post-norm
transformer, observables and initial laws. Parameters are declared in ``params``.

Architectures (physics.md §1.4): masks, distance biases, heads and a feed-forward term
(``architecture``), the normalization schemes post / pre / peri / nGPT as flows and networks
(``schemes``), merge events and early-token shares (``events``), equiangular starts and their
scalar ODE (``equiangular``). Names load on first use (importing the package loads no kernel).
"""

from ..core.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        ".flow": (
            "FLOW",
            "attention_drift",
            "attention_drift_jax",
            "attention_mean_field",
            "attention_mean_field_jax",
            "flow_problem",
            "mean_field",
            "velocity",
            "work_size",
        ),
        ".init": ("hemisphere", "uniform_sphere"),
        ".network": ("POSTNORM_NETWORK", "network_layers", "network_solution", "postnorm_layers", "save_layers"),
        ".observer": ("pair_observer", "split_rows"),
        ".observables": (
            "cluster_labels",
            "count_clusters",
            "energy_usa",
            "min_inner",
            "n_clusters",
            "pair_fraction",
            "pair_statistics",
            "pairs_and_clusters",
        ),
        ".params": ("FIELDS", "LAYOUT", "pack", "pack_params", "param_size", "unpack_params"),
        ".architecture": ("ARCH", "pack_architecture", "unpack_architecture"),
        ".schemes": ("scheme", "stream_radius", "stream_tokens"),
        ".events": ("held_by", "merges"),
        ".equiangular": ("equiangular_rate", "equiangular_rho", "equiangular_start", "mean_inner"),
    },
)
