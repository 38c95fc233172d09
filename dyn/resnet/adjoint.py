r"""ResNets in JAX, and the memory-free adjoint (Sander, Ablin, Peyre, arXiv 2205.14612).

Forward: ``x_{n+1} = Phi_n(x_n)`` (the Euler or Heun step of :mod:`.network`) as one
``lax.scan``. Ordinary backprop (``jax.grad`` through the scan) stores every activation: memory
O(N). The adjoint stores only ``x_N`` and walks back::

    x_n     ~ Phi_n^{-1}(x_{n+1})                       (the inverse step of :mod:`.network`)
    a_n     = (d Phi_n / d x)(x_n)^T a_{n+1}            (vector-Jacobian products, jax.vjp)
    g_theta += (d Phi_n / d theta)(x_n)^T a_{n+1}

with ``a_N = dL/dx_N``: a ``jax.custom_vjp`` over the forward scan whose backward pass is a
reverse scan carrying ``(x_n, a_n)`` only, so activation memory is O(1) in depth. Its gradient
differs from backprop's only through the reconstruction error of ``x_n``.

Two weight layouts:
- per layer (:func:`resnet_output`): ``W (N+1, M, d)``, ``V (N+1, d, M)``; the parameter
  gradient is itself O(N) (one slice per layer, emitted by the scan);
- weight functions (:func:`fourier_output`): the cosine coefficients of :mod:`.weights`,
  ``theta_n = theta(n/N)`` computed on the fly; the gradient is accumulated in the scan carry,
  so the whole forward+backward pass is O(1) in depth.

Importing this module switches JAX to float64 (as :mod:`integrators` does): the comparisons with
backprop resolve differences far below float32 rounding.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .network import SCHEMES
from .ode import sigma_jax

jax.config.update("jax_enable_x64", True)


def _steps(scheme: str, activation: str):
    """(step, inverse) for one layer: both ``(x, th0, th1, h) -> x'`` with th = (W, V)."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    sigma = sigma_jax(activation)

    def f(x, th):
        return sigma(x @ th[0].T) @ th[1].T

    if scheme == "euler":

        def step(x, th0, th1, h):
            return x + h * f(x, th0)

        def inverse(x1, th0, th1, h):
            return x1 - h * f(x1, th0)
    else:

        def step(x, th0, th1, h):
            f0 = f(x, th0)
            return x + (0.5 * h) * (f0 + f(x + h * f0, th1))

        def inverse(x1, th0, th1, h):
            g1 = f(x1, th1)
            return x1 - (0.5 * h) * (g1 + f(x1 - h * g1, th0))

    return step, inverse


def _scan_network(step, inverse, theta, h):
    """``(run, run_adjoint)``: ``(x0, glob, xs) -> x_N`` with layer n's ``(th0, th1) =
    theta(glob, xs[n])``; ``glob`` is shared by all layers, ``xs`` is scanned. ``run`` is
    differentiated by JAX (backprop); ``run_adjoint`` by the reconstruction (module doc)."""

    def layer(x, glob, xs_n):
        th0, th1 = theta(glob, xs_n)
        return step(x, th0, th1, h)

    def run(x0, glob, xs):
        xN, _ = jax.lax.scan(lambda x, xs_n: (layer(x, glob, xs_n), None), x0, xs)
        return xN

    @jax.custom_vjp
    def run_adjoint(x0, glob, xs):
        return run(x0, glob, xs)

    def fwd(x0, glob, xs):
        xN = run(x0, glob, xs)
        return xN, (xN, glob, xs)

    def bwd(res, aN):
        xN, glob, xs = res

        def back(carry, xs_n):
            x1, a1, g_acc = carry
            th0, th1 = theta(glob, xs_n)
            x0 = inverse(x1, th0, th1, h)
            _, vjp = jax.vjp(layer, x0, glob, xs_n)
            a0, g_glob, g_xs = vjp(a1)
            return (x0, a0, jax.tree_util.tree_map(jnp.add, g_acc, g_glob)), g_xs

        zero = jax.tree_util.tree_map(jnp.zeros_like, glob)
        (_, a0, g_glob), g_xs = jax.lax.scan(back, (xN, aN, zero), xs, reverse=True)
        return a0, g_glob, g_xs

    run_adjoint.defvjp(fwd, bwd)
    return run, run_adjoint


@functools.cache
def _per_layer(scheme: str, activation: str, depth: int, adjoint: bool):
    step, inverse = _steps(scheme, activation)
    run, run_adj = _scan_network(step, inverse, lambda g, xs: ((xs[0], xs[1]), (xs[2], xs[3])), 1.0 / depth)
    fn = run_adj if adjoint else run

    def output(x0, W, V):
        return fn(x0, (), (W[:-1], V[:-1], W[1:], V[1:]))

    return output


@functools.cache
def _functional(scheme: str, activation: str, depth: int, adjoint: bool):
    step, inverse = _steps(scheme, activation)
    h = 1.0 / depth

    def theta(glob, s):
        AW, AV = glob
        k = jnp.pi * jnp.arange(AW.shape[0])
        c0, c1 = jnp.cos(k * s), jnp.cos(k * (s + h))
        return (
            (jnp.tensordot(c0, AW, axes=1), jnp.tensordot(c0, AV, axes=1)),
            (jnp.tensordot(c1, AW, axes=1), jnp.tensordot(c1, AV, axes=1)),
        )

    run, run_adj = _scan_network(step, inverse, theta, h)
    fn = run_adj if adjoint else run

    def output(x0, AW, AV):
        s = jnp.arange(depth, dtype=AW.dtype) * h
        return fn(x0, (AW, AV), jax.lax.stop_gradient(s))

    return output


def resnet_output(x0, W, V, *, scheme: str = "euler", activation: str = "tanh", adjoint: bool = False):
    """x_N for inputs ``x0`` (B, d) and per-layer weights ``W (N+1, M, d)``, ``V (N+1, d, M)``;
    differentiable, by backprop or (``adjoint=True``) by the memory-free adjoint."""
    return _per_layer(scheme, activation, int(W.shape[0]) - 1, bool(adjoint))(x0, W, V)


def fourier_output(x0, AW, AV, *, depth: int, scheme: str = "euler", activation: str = "tanh", adjoint: bool = False):
    """x_N for weights given as cosine coefficients ``AW (K, M, d)``, ``AV (K, d, M)``
    (:mod:`.weights`) sampled at ``s = n/depth``; the adjoint's memory is O(1) in depth."""
    return _functional(scheme, activation, int(depth), bool(adjoint))(x0, AW, AV)


def mse(xN, y):
    """0.5 * mean_i |x_N,i - y_i|^2, the loss of the gradient comparisons."""
    return 0.5 * jnp.mean(jnp.sum((xN - y) ** 2, axis=-1))


@functools.cache
def _grad_fn(scheme: str, activation: str, adjoint: bool):
    def loss(W, V, x0, y):
        return mse(resnet_output(x0, W, V, scheme=scheme, activation=activation, adjoint=adjoint), y)

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def loss_and_grad(x0, y, W, V, *, scheme: str = "euler", activation: str = "tanh", adjoint: bool = False):
    """``(L, (dL/dW, dL/dV))`` of :func:`mse` at the per-layer weights, by backprop or adjoint."""
    return _grad_fn(scheme, activation, bool(adjoint))(W, V, x0, y)
