r"""Momentum ResNets in JAX, with backprop that stores activations or rebuilds them by inversion.

Forward, N layers (``lax.scan``)::

    v_{n+1} = gamma v_n + (1 - gamma) f(x_n, theta_n),     x_{n+1} = x_n + v_{n+1}

``memory_free=False``: plain reverse-mode autodiff; the scan keeps every layer's activations,
memory O(N). ``memory_free=True``: a ``jax.custom_vjp`` keeps only the output (x_N, v_N) and walks
back layer by layer, rebuilding

    x_n = x_{n+1} - v_{n+1},   v_n = (v_{n+1} - (1 - gamma) f(x_n, theta_n)) / gamma

(one evaluation of f, whose VJP is taken at the same time) and pulling the cotangents through:
with a = gx_{n+1} + gv_{n+1} (x_{n+1} depends on v_{n+1}),

    gx_n = gx_{n+1} + (1 - gamma) (df/dx)^T a,   gv_n = gamma a,   gtheta_n = (1 - gamma) (df/dtheta)^T a.

Activation memory is O(1) in depth. The rebuilt activations carry the float inversion error
(growing like gamma^{-N} times the rounding unit), so gradients agree with ordinary backprop to
that accuracy, not bit for bit.

``shared=True``: one theta for every layer (``[function] * N`` in PyTorch); else theta's leaves
have a leading axis of length N.
"""
from __future__ import annotations

from typing import Callable


def momentum_net(f: Callable, gamma: float, depth: int, *, shared: bool = True, memory_free: bool = True):
    """``apply(theta, x0, v0) -> (x_N, v_N)`` for residual ``f(x, theta)``; differentiable in all
    three arguments. ``memory_free`` needs gamma != 0."""
    import jax
    from jax import lax

    gamma = float(gamma)
    depth = int(depth)
    if memory_free and gamma == 0.0:
        raise ValueError("memory-free backprop inverts the network: gamma must be nonzero")

    def run(theta, x0, v0):
        def body(carry, th):
            x, v = carry
            v = gamma * v + (1.0 - gamma) * f(x, theta if shared else th)
            return (x + v, v), None

        (x, v), _ = lax.scan(body, (x0, v0), None if shared else theta, length=depth)
        return x, v

    if not memory_free:
        return run

    @jax.custom_vjp
    def apply(theta, x0, v0):
        return run(theta, x0, v0)

    def fwd(theta, x0, v0):
        x, v = run(theta, x0, v0)
        return (x, v), (theta, x, v)

    def bwd(res, cotangents):
        theta, x, v = res
        gx, gv = cotangents
        zero = jax.tree_util.tree_map(lambda t: t * 0, theta) if shared else None

        def body(carry, th):
            x, v, gx, gv, acc = carry
            th = theta if shared else th
            x = x - v
            fx, pullback = jax.vjp(f, x, th)
            v = (v - (1.0 - gamma) * fx) / gamma
            a = gx + gv
            dx, dth = pullback((1.0 - gamma) * a)
            gx, gv = gx + dx, gamma * a
            if shared:
                acc = jax.tree_util.tree_map(lambda s, t: s + t, acc, dth)
                return (x, v, gx, gv, acc), None
            return (x, v, gx, gv, acc), dth

        xs = None if shared else theta
        (_, _, gx, gv, acc), per_layer = lax.scan(body, (x, v, gx, gv, zero), xs, length=depth, reverse=True)
        return (acc if shared else per_layer), gx, gv

    apply.defvjp(fwd, bwd)
    return apply


def layer_jacobian_logdet(f: Callable, gamma: float, theta, x, v) -> float:
    """log |det| of the Jacobian of one layer (x, v) -> (x', v') in R^{2d} (jax.jacfwd): equals
    d log gamma, since the map is a shear (x, v) -> (x, gamma v + (1-gamma) f(x)) then (x + v', v')."""
    import jax
    import jax.numpy as jnp

    d = x.shape[-1]

    def layer(z):
        xx, vv = z[:d], z[d:]
        vn = gamma * vv + (1.0 - gamma) * f(xx, theta)
        return jnp.concatenate([xx + vn, vn])

    J = jax.jacfwd(layer)(jnp.concatenate([x, v]))
    return float(jnp.linalg.slogdet(J)[1])
