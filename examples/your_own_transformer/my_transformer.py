r"""Top-k attention with random query, key and value matrices: tokens x_1 .. x_n on the sphere
S^{d-1} move by

    dx_i/dt = P_{x_i}( sum_j A_ij V x_j ),   A_i. = topk(beta <Q x_i, K x_j>),

where topk keeps the k largest scores of each row and takes their softmax (zero elsewhere).
Q, K and V are drawn per run by the laws in transformer.toml (Gaussian, orthogonal), so each
run is one random transformer; beta, a factor of Q^T K, is swept. dyn.attention_particles
builds the drift (numba), the initial law (uniform on the sphere) and the cluster observables.
Run it with `dyn run transformer.toml` from this folder.
"""

import dyn

TopK = dyn.attention_particles(
    name="topk_transformer",
    description="top-k attention with random Q, K, V per run",
    normalization="topk",
    geometry="sphere",
    residual="x_j",
)
