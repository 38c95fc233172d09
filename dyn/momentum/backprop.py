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
bit for bit whatever gamma^-N is. The buffer holds ~log2(1/gamma) bits per entry and layer (42-bit
limbs; e.g. 5 limbs per entry for gamma = 0.9 at depth 1000), the information-theoretic minimum,
instead of 2 floats per entry and layer. The float residual is evaluated at x_int 2^-F (in the
dtype of x0) and quantized, so the inverse recomputes it exactly.

``shared=True``: one theta for every layer (``[function] * N`` in PyTorch); else theta's leaves
have a leading axis of length N.
"""

from __future__ import annotations

from collections.abc import Callable

# Exact mode. gamma = num / 2^k; the exact product v num / 2^k deviates from v gamma by up to num
# units of 2^-F (dropped low bits plus the buffer digit), i.e. 2^(k-F) = 2^-32 per layer here, below
# float32 rounding; the gamma used differs from the float gamma by <= 2^-(k+1) (5e-7). int64
# headroom: (v >> k) num < 2^63 and x < 2^63 need |x|, |v| < 2^(63-F) = 2048 (wraps silently beyond).
EXACT_FRAC_BITS = 52
EXACT_GAMMA_BITS = 20
LIMB_BITS = 42  # limb * num + carry and (rem << LIMB) | limb stay below 2^63 with num <= 2^20
LIMB_MASK = (1 << LIMB_BITS) - 1
MAX_SEGMENTS = 8  # separate scans, each on the limbs its layers can fill


def momentum_net(
    f: Callable, gamma: float, depth: int, *, shared: bool = True, memory_free: bool = True, exact: bool = False
):
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
    """Fixed-point layer and its inverse on int64 arrays; the buffer has a leading limb axis.

    The buffer after n layers has at most n log2(2^k/num) + log2(1 + 1/(2^k/num - 1)) + 1 bits
    (B_{n+1} + 1 <= (2^k/num)(B_n + 1) + 1), plus k while a layer is half done. The layers are cut
    into at most MAX_SEGMENTS scans, each working on only the limbs its layers can fill.
    """

    def __init__(self, f, gamma, depth, shared):
        import math

        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"exact mode needs 0 < gamma <= 1, got {gamma}")
        self.f, self.shared, self.depth = f, shared, depth
        self.F, self.k = EXACT_FRAC_BITS, EXACT_GAMMA_BITS
        self.den = 1 << self.k
        self.num = max(1 << 11, round(gamma * self.den))  # divmod needs num > 2^10
        self.gamma = self.num / self.den  # the gamma actually used
        rho = self.den / self.num
        beta = math.log2(rho)
        extra = 0.0 if self.num == self.den else math.log2(1.0 + 1.0 / (rho - 1.0)) + 1.0

        def limbs(n):
            return max(1, math.ceil((n * beta + extra + self.k + 2) / LIMB_BITS))

        cuts = sorted({round(depth * i / MAX_SEGMENTS) for i in range(MAX_SEGMENTS + 1)})
        self.segments = [(a, b, limbs(b)) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
        self.limbs = self.segments[-1][2] if self.segments else 1

    def residual(self, x, th, dtype):
        import jax.numpy as jnp

        xf = x.astype(dtype) * dtype(2.0**-self.F)
        r = (1.0 - self.gamma) * self.f(xf, th)
        return jnp.round(r * dtype(2.0**self.F)).astype(jnp.int64), xf

    def push_pow2(self, buf, low):
        """buf <- buf 2^k + low  (0 <= low < 2^k)."""
        import jax.numpy as jnp

        carry = buf >> (LIMB_BITS - self.k)
        return ((buf & (LIMB_MASK >> self.k)) << self.k) | jnp.concatenate([low[None], carry[:-1]])

    def pop_pow2(self, buf):
        """(buf mod 2^k, buf div 2^k)."""
        import jax.numpy as jnp

        low = buf[0] & (self.den - 1)
        upper = jnp.concatenate([buf[1:], jnp.zeros_like(buf[:1])])
        return low, (buf >> self.k) | ((upper & (self.den - 1)) << (LIMB_BITS - self.k))

    def push_small(self, buf, digit, base):
        """buf <- buf base + digit  (0 <= digit < base <= 2^k), limb by limb with carry."""
        import jax.numpy as jnp

        out, carry = [], digit
        for i in range(buf.shape[0]):
            t = buf[i] * base + carry
            out.append(t & LIMB_MASK)
            carry = t >> LIMB_BITS
        return jnp.stack(out)

    @staticmethod
    def divmod(n, base):
        """Floor (n div base, n mod base) for int64 n and a constant base: the quotient estimated
        in float64 (within 1 of the true one: |n| < 2^63, base > 2^10) then corrected in int64.
        XLA's int64 division is scalar code, several times slower than this on CPU."""
        import jax.numpy as jnp

        q = jnp.floor(n.astype(jnp.float64) / base).astype(jnp.int64)
        r = n - q * base
        for _ in range(2):
            low, high = r < 0, r >= base
            q = q - low + high
            r = r + base * low - base * high
        return q, r

    def pop_small(self, buf, base):
        """(buf mod base, buf div base), long division from the top limb."""
        import jax.numpy as jnp

        rem = jnp.zeros_like(buf[0])
        out = [None] * buf.shape[0]
        for i in reversed(range(buf.shape[0])):
            out[i], rem = self.divmod((rem << LIMB_BITS) | buf[i], base)
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
        q, r = self.divmod(v, self.num)
        buf = self.push_small(buf, r, self.num)  # v <- v 2^k / num
        v = q << self.k
        digit, buf = self.pop_pow2(buf)
        return x, v + digit, buf, xf

    def to_fixed(self, a):
        import jax.numpy as jnp

        return jnp.round(a.astype(jnp.float64) * 2.0**self.F).astype(jnp.int64)

    def forward(self, theta, x, v, dtype):
        """All layers, segment by segment, from integer (x, v) and an empty buffer."""
        import jax
        import jax.numpy as jnp
        from jax import lax

        buf = jnp.zeros((1,) + x.shape, jnp.int64)
        for a, b, limbs in self.segments:
            buf = jnp.concatenate([buf, jnp.zeros((limbs - buf.shape[0],) + x.shape, jnp.int64)])
            seq = None if self.shared else jax.tree_util.tree_map(lambda t: t[a:b], theta)  # noqa: B023 tree_map calls it at once

            def body(carry, th):
                return self.forward_layer(*carry, theta if self.shared else th, dtype), None

            (x, v, buf), _ = lax.scan(body, (x, v, buf), seq, length=b - a)
        return x, v, buf

    def backward(self, theta, x, v, buf, dtype, step, extra):
        """Walk the segments backwards; ``step(carry_extra, xf, th) -> (carry_extra, out)`` sees each
        rebuilt float input x_n (e.g. to pull cotangents through). Returns the final state, the
        final ``extra`` and the per-layer outputs (concatenated in layer order, or None)."""
        import jax
        import jax.numpy as jnp
        from jax import lax

        outs = []
        for a, b, limbs in reversed(self.segments):
            buf = buf[:limbs]  # the upper limbs are zero from here down (the bound above)
            seq = None if self.shared else jax.tree_util.tree_map(lambda t: t[a:b], theta)  # noqa: B023 tree_map calls it at once

            def body(carry, th):
                x, v, buf, ext = carry
                th = theta if self.shared else th
                x, v, buf, xf = self.inverse_layer(x, v, buf, th, dtype)
                ext, out = step(ext, xf, th)
                return (x, v, buf, ext), out

            (x, v, buf, extra), out = lax.scan(body, (x, v, buf, extra), seq, length=b - a, reverse=True)
            outs.append(out)
        stacked = None
        if outs and outs[0] is not None:
            stacked = jax.tree_util.tree_map(lambda *o: jnp.concatenate(o), *reversed(outs))
        return x, v, buf, extra, stacked


def _exact_net(f, gamma, depth, shared):
    import jax
    import jax.numpy as jnp

    if not jax.config.jax_enable_x64:
        raise ValueError("exact mode needs 64-bit integers: jax.config.update('jax_enable_x64', True)")
    ex = _Exact(f, gamma, depth, shared)

    def out(x, v, dtype):
        return (x.astype(dtype) * dtype(2.0**-ex.F), v.astype(dtype) * dtype(2.0**-ex.F))

    def run(theta, x0, v0):
        return ex.forward(theta, ex.to_fixed(x0), ex.to_fixed(v0), x0.dtype.type)

    @jax.custom_vjp
    def apply(theta, x0, v0):
        x, v, _ = run(theta, x0, v0)
        return out(x, v, x0.dtype.type)

    def fwd(theta, x0, v0):
        x, v, buf = run(theta, x0, v0)
        return out(x, v, x0.dtype.type), (theta, x, v, buf, jnp.zeros((), x0.dtype))

    def bwd(res, cotangents):
        theta, x, v, buf, like = res
        gx, gv = cotangents
        zero = jax.tree_util.tree_map(jnp.zeros_like, theta) if shared else None

        def step(ext, xf, th):
            gx, gv, acc = ext
            _, pullback = jax.vjp(f, xf, th)
            a = gx + gv
            dx, dth = pullback((1.0 - ex.gamma) * a)
            gx, gv = gx + dx, ex.gamma * a
            if shared:
                return (gx, gv, jax.tree_util.tree_map(jnp.add, acc, dth)), None
            return (gx, gv, acc), dth

        *_, (gx, gv, acc), per_layer = ex.backward(theta, x, v, buf, like.dtype.type, step, (gx, gv, zero))
        return (acc if shared else per_layer), gx, gv

    apply.defvjp(fwd, bwd)
    apply.exact = ex
    return apply


def exact_roundtrip(f, gamma: float, depth: int, theta, x0, v0, *, shared: bool = True):
    """Run the exact JAX network forward then backward by inversion. Returns the quantized input
    (x, v), the rebuilt (x, v, buffer) (for tests: equal to the input, buffer 0) and the output."""
    ex = _Exact(f, float(gamma), int(depth), shared)
    dtype = x0.dtype.type
    x, v = ex.to_fixed(x0), ex.to_fixed(v0)
    out = ex.forward(theta, x, v, dtype)
    xr, vr, buf, _, _ = ex.backward(theta, *out, dtype, lambda e, xf, th: (e, None), 0)
    return (x, v), (xr, vr, buf), out


def layer_jacobian_logdet(f: Callable, gamma: float, theta, x, v) -> float:
    """log |det| of the Jacobian (jax.jacfwd) of one layer of :func:`momentum_net`,
    (x, v) -> (x', v') in R^{2d}: d log gamma, since the map is a shear
    (x, v) -> (x, gamma v + (1-gamma) f(x)) followed by (x + v', v')."""
    import jax
    import jax.numpy as jnp

    d = x.shape[-1]
    layer = momentum_net(f, gamma, 1, memory_free=False)

    def flat(z):
        return jnp.concatenate(layer(theta, z[:d], z[d:]))

    J = jax.jacfwd(flat)(jnp.concatenate([x, v]))
    return float(jnp.linalg.slogdet(J)[1])
