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

``exact=True`` (needs ``jax_enable_x64``): the memory-free network runs in fixed-point int64
arithmetic with gamma = num / 2^k and a multi-limb information buffer (the scheme of
:mod:`dyn.momentum.network`, vectorized in JAX), so the backward pass rebuilds every activation
bit for bit whatever gamma^-N is. The buffer holds ~log2(1/gamma) bits per entry and layer (32-bit
limbs; e.g. 7 limbs per entry for gamma = 0.9 at depth 1000), the information-theoretic minimum,
instead of 2 floats per entry and layer. The float residual is evaluated at x_int 2^-F (in the
dtype of x0) and quantized, so the inverse recomputes it exactly.

``shared=True``: one theta for every layer (``[function] * N`` in PyTorch); else theta's leaves
have a leading axis of length N.
"""
from __future__ import annotations

from typing import Callable


# Exact mode: fractional bits F of the int64 fixed point (|v| < 2^(63 - F - k) = 2^11 real
# units), bits k of the denominator of gamma, bits per buffer limb (products stay < 2^63).
EXACT_FRAC_BITS = 28
EXACT_GAMMA_BITS = 24
LIMB_BITS = 32


def momentum_net(f: Callable, gamma: float, depth: int, *, shared: bool = True, memory_free: bool = True,
                 exact: bool = False):
    """``apply(theta, x0, v0) -> (x_N, v_N)`` for residual ``f(x, theta)``; differentiable in all
    three arguments. ``memory_free`` needs gamma != 0; ``exact`` implies memory_free."""
    import jax
    from jax import lax

    gamma = float(gamma)
    depth = int(depth)
    if (memory_free or exact) and gamma == 0.0:
        raise ValueError("memory-free backprop inverts the network: gamma must be nonzero")
    if exact:
        return _exact_net(f, gamma, depth, shared)

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


class _Exact:
    """Fixed-point layer and its inverse on int64 arrays; the buffer has a leading limb axis."""

    def __init__(self, f, gamma, depth, shared):
        import math

        self.f, self.shared, self.depth = f, shared, depth
        self.F, self.k = EXACT_FRAC_BITS, EXACT_GAMMA_BITS
        self.den = 1 << self.k
        self.num = max(1, round(gamma * self.den))
        self.gamma = self.num / self.den  # the gamma actually used
        bits = depth * math.log2(self.den / self.num) + 2 * self.k + 2
        self.limbs = max(2, math.ceil(bits / LIMB_BITS) + 1)

    def residual(self, x, th, dtype):
        import jax.numpy as jnp

        xf = x.astype(dtype) * dtype(2.0 ** -self.F)
        r = (1.0 - self.gamma) * self.f(xf, th)
        return jnp.round(r * dtype(2.0 ** self.F)).astype(jnp.int64), xf

    def push_pow2(self, buf, low):
        """buf <- buf 2^k + low  (0 <= low < 2^k)."""
        import jax.numpy as jnp

        mask = (1 << LIMB_BITS) - 1
        carry = buf >> (LIMB_BITS - self.k)
        return ((buf << self.k) & mask) | jnp.concatenate([low[None], carry[:-1]])

    def pop_pow2(self, buf):
        """(buf mod 2^k, buf div 2^k)."""
        import jax.numpy as jnp

        mask = (1 << LIMB_BITS) - 1
        low = buf[0] & (self.den - 1)
        upper = jnp.concatenate([buf[1:], jnp.zeros_like(buf[:1])])
        return low, (buf >> self.k) | ((upper << (LIMB_BITS - self.k)) & mask)

    def push_small(self, buf, digit, base):
        """buf <- buf base + digit  (0 <= digit < base < 2^k), limb by limb with carry."""
        import jax.numpy as jnp

        mask = (1 << LIMB_BITS) - 1
        out, carry = [], digit
        for i in range(self.limbs):
            t = buf[i] * base + carry
            out.append(t & mask)
            carry = t >> LIMB_BITS
        return jnp.stack(out)

    def pop_small(self, buf, base):
        """(buf mod base, buf div base), long division from the top limb."""
        import jax.numpy as jnp

        rem = jnp.zeros_like(buf[0])
        out = [None] * self.limbs
        for i in reversed(range(self.limbs)):
            cur = (rem << LIMB_BITS) | buf[i]
            q = cur // base
            rem = cur - q * base
            out[i] = q
        return rem, jnp.stack(out)

    def forward_layer(self, x, v, buf, th, dtype):
        r, _ = self.residual(x, th, dtype)
        buf = self.push_pow2(buf, v & (self.den - 1))  # v <- v num / 2^k, exactly invertibly
        v = (v >> self.k) * self.num
        digit, buf = self.pop_small(buf, self.num)
        v = v + digit + r
        return x + v, v, buf

    def inverse_layer(self, x, v, buf, th, dtype):
        x = x - v
        r, xf = self.residual(x, th, dtype)
        v = v - r
        buf = self.push_small(buf, v % self.num, self.num)  # v <- v 2^k / num
        v = (v // self.num) << self.k
        digit, buf = self.pop_pow2(buf)
        return x, v + digit, buf, xf


def _exact_net(f, gamma, depth, shared):
    import jax
    import jax.numpy as jnp
    from jax import lax

    if not jax.config.jax_enable_x64:
        raise ValueError("exact mode needs 64-bit integers: jax.config.update('jax_enable_x64', True)")
    ex = _Exact(f, gamma, depth, shared)

    def to_fixed(a):
        return jnp.round(a.astype(jnp.float64) * 2.0 ** ex.F).astype(jnp.int64)

    def run(theta, x0, v0):
        dtype = x0.dtype.type
        buf = jnp.zeros((ex.limbs,) + x0.shape, jnp.int64)

        def body(carry, th):
            x, v, buf = carry
            return ex.forward_layer(x, v, buf, theta if shared else th, dtype), None

        (x, v, buf), _ = lax.scan(body, (to_fixed(x0), to_fixed(v0), buf), None if shared else theta, length=depth)
        return x, v, buf

    def out(x, v, dtype):
        return (x.astype(dtype) * dtype(2.0 ** -ex.F), v.astype(dtype) * dtype(2.0 ** -ex.F))

    @jax.custom_vjp
    def apply(theta, x0, v0):
        x, v, _ = run(theta, x0, v0)
        return out(x, v, x0.dtype.type)

    def fwd(theta, x0, v0):
        x, v, buf = run(theta, x0, v0)
        return out(x, v, x0.dtype.type), (theta, x, v, buf, jnp.zeros((), x0.dtype))

    def bwd(res, cotangents):
        theta, x, v, buf, like = res
        dtype = like.dtype.type
        gx, gv = cotangents
        zero = jax.tree_util.tree_map(jnp.zeros_like, theta) if shared else None

        def body(carry, th):
            x, v, buf, gx, gv, acc = carry
            th = theta if shared else th
            x, v, buf, xf = ex.inverse_layer(x, v, buf, th, dtype)
            _, pullback = jax.vjp(f, xf, th)
            a = gx + gv
            dx, dth = pullback((1.0 - ex.gamma) * a)
            gx, gv = gx + dx, ex.gamma * a
            if shared:
                return (x, v, buf, gx, gv, jax.tree_util.tree_map(jnp.add, acc, dth)), None
            return (x, v, buf, gx, gv, acc), dth

        carry = (x, v, buf, gx, gv, zero)
        (*_, gx, gv, acc), per_layer = lax.scan(body, carry, None if shared else theta, length=depth, reverse=True)
        return (acc if shared else per_layer), gx, gv

    apply.defvjp(fwd, bwd)
    apply.exact = ex
    return apply


def exact_roundtrip(f, gamma: float, depth: int, theta, x0, v0, *, shared: bool = True):
    """Run the exact JAX network forward then backward by inversion; returns the rebuilt integer
    input and buffer next to the quantized input (for tests: they must be equal, buffer 0)."""
    import jax.numpy as jnp
    from jax import lax

    ex = _Exact(f, float(gamma), int(depth), shared)
    dtype = x0.dtype.type
    fix = lambda a: jnp.round(a.astype(jnp.float64) * 2.0 ** ex.F).astype(jnp.int64)
    x, v = fix(x0), fix(v0)
    buf = jnp.zeros((ex.limbs,) + x0.shape, jnp.int64)
    seq = None if shared else theta

    def fwd(c, th):
        return ex.forward_layer(*c, theta if shared else th, dtype), None

    def back(c, th):
        return ex.inverse_layer(*c, theta if shared else th, dtype)[:3], None

    out, _ = lax.scan(fwd, (x, v, buf), seq, length=depth)
    rebuilt, _ = lax.scan(back, out, seq, length=depth, reverse=True)
    return (x, v), rebuilt, out


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
