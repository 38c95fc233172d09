r"""Sigmoid attention on the sphere: tokens x_1 .. x_n on S^{d-1} move by

    dx_i/dt = P_{x_i}( sum_j A_ij x_j ),   A_ij = w_ij / sum_k w_ik,
    w_ij = sigmoid(beta <x_i, x_j> + b) = 1 / (1 + exp(-(beta <x_i, x_j> + b))),

self-attention with the softmax's exponential replaced by a sigmoid (a kernel dyn does not ship).
Written once: the interaction is a scalar function of s = <x_i, x_j> and the named parameters;
dyn.particles builds the drift, its normalization, the initial law and the cluster observables.
Run it with `dyn run sync.toml` from this folder.
"""

import numpy as np

import dyn


def sigmoid(s, beta, b):  # numba compiles it: the numba backend
    return 1.0 / (1.0 + np.exp(-(beta * s + b)))


def sigmoid_jax(s, beta, b):  # the same in JAX, on the matrix of all s: diffrax and jax backends
    import jax.numpy as jnp

    return 1.0 / (1.0 + jnp.exp(-(beta * s + b)))


def potential(s, beta, b):  # Phi with Phi' = sigmoid: the energy sum_ij Phi / (2 n^2)
    return np.logaddexp(0.0, beta * s + b) / beta


Sync = dyn.particles(
    sigmoid,
    interaction_jax=sigmoid_jax,
    potential=potential,
    name="sigmoid_sphere",
    description="sigmoid attention on the sphere",
    geometry="sphere",
    normalization="SA",
    params={
        "beta": dyn.Field("float", 4.0, "inverse temperature beta", gt=0.0),
        "b": dyn.Field("float", 0.0, "bias b of the sigmoid"),
    },
)
