r"""Implicit regularization of deep ResNets towards neural ODEs (Marion, Wu, Sander, Biau,
arXiv 2309.01213).

Model, for inputs ``h_0 = x`` in R^d and layers ``k = 0..L-1``::

    h_{k+1} = h_k + (1/L) V_k sigma(W_k h_k),    W_k in R^{M x d},  V_k in R^{d x M}

trained on ``loss = (1/2B) sum_i |h_L(x_i) - y_i|^2`` by full-batch gradient descent with the
rate scaled by depth, ``theta_k <- theta_k - lr L grad_{theta_k} loss`` (each layer's gradient is
O(1/L), so the update of each layer is O(1): the discrete gradient flow of the paper).

- ``init="smooth"``: ``V_k = 0`` and ``W_k = W`` for every k. The gradients at layer k are smooth
  functions of k/L (they are built from the activations and the adjoint state, both discretized
  ODE solutions), so ``max_k |theta_{k+1} - theta_k| = O(1/L)`` all along training.
- ``init="iid"``: ``W_k, V_k`` i.i.d. Gaussian; the increments stay O(1).

Data: ``x_i ~ N(0, I_d)`` and the targets of a random teacher ``y = x + U tanh(Z x)``
(``Z ~ N(0, 1/d)``, ``U ~ N(0, 1/d)``), a map a ResNet can represent.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .ode import sigma_jax

jax.config.update("jax_enable_x64", True)

INITS = ("smooth", "iid")


def teacher_data(rng: np.random.Generator, samples: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``, ``x ~ N(0, I_d)`` (samples, d), ``y = x + U tanh(Z x)`` (module doc)."""
    x = rng.standard_normal((samples, d))
    Z = rng.standard_normal((d, d)) / np.sqrt(d)
    U = rng.standard_normal((d, d)) / np.sqrt(d)
    return x, x + np.tanh(x @ Z.T) @ U.T


def init_weights(
    rng: np.random.Generator, depth: int, d: int, width: int, init: str = "smooth"
) -> tuple[np.ndarray, np.ndarray]:
    """``W (L, M, d)``, ``V (L, d, M)``: smooth (V = 0, W_k = W ~ N(0, 1/d)) or i.i.d.
    (``W_k ~ N(0, 1/d)``, ``V_k ~ N(0, 1/M)``)."""
    if init == "smooth":
        W = np.broadcast_to(rng.standard_normal((width, d)) / np.sqrt(d), (depth, width, d))
        return np.array(W), np.zeros((depth, d, width))
    if init == "iid":
        return (
            rng.standard_normal((depth, width, d)) / np.sqrt(d),
            rng.standard_normal((depth, d, width)) / np.sqrt(width),
        )
    raise ValueError(f"init must be one of {INITS}, got {init!r}")


def weight_increment(W, V) -> float:
    """``max_k |theta_{k+1} - theta_k|``, the Frobenius norm of the stacked (W, V) difference."""
    dW = np.diff(np.asarray(W), axis=0)
    dV = np.diff(np.asarray(V), axis=0)
    return float(np.sqrt((dW**2).sum(axis=(1, 2)) + (dV**2).sum(axis=(1, 2))).max())


def _output(W, V, x, sigma):
    h = 1.0 / W.shape[0]

    def layer(hk, wv):
        Wk, Vk = wv
        return hk + h * (sigma(hk @ Wk.T) @ Vk.T), None

    return jax.lax.scan(layer, x, (W, V))[0]


@functools.cache
def _trainer(activation: str):
    sigma = sigma_jax(activation)

    def loss(W, V, x, y):
        return 0.5 * jnp.mean(jnp.sum((_output(W, V, x, sigma) - y) ** 2, axis=-1))

    grad = jax.grad(loss, argnums=(0, 1))

    @functools.partial(jax.jit, static_argnames="steps")
    def train(W, V, x, y, lr, steps):
        rate = lr * W.shape[0]  # learning rate scaled by depth L

        def body(_, wv):
            gW, gV = grad(wv[0], wv[1], x, y)
            return wv[0] - rate * gW, wv[1] - rate * gV

        W, V = jax.lax.fori_loop(0, steps, body, (W, V))
        return W, V, loss(W, V, x, y)

    return jax.jit(loss), train


def train(x, y, W, V, *, steps: int, lr: float, activation: str = "tanh"):
    """``(W, V, final loss)`` after ``steps`` full-batch gradient steps of rate ``lr * L``."""
    _, run = _trainer(activation)
    W, V, final = run(jnp.asarray(W), jnp.asarray(V), jnp.asarray(x), jnp.asarray(y), float(lr), int(steps))
    return np.asarray(W), np.asarray(V), float(final)


def loss(x, y, W, V, activation: str = "tanh") -> float:
    """The training loss at weights ``(W, V)``."""
    return float(_trainer(activation)[0](jnp.asarray(W), jnp.asarray(V), jnp.asarray(x), jnp.asarray(y)))
