"""JAX twin of :mod:`.sinkhorn_numba` (one score matrix; iterations, tol and the symmetric flag traced).

Same semantics: ``tol == 0``: exactly ``iterations`` alternating normalizations (rows first);
``tol > 0``: the first plan with all marginals within tol (alternating, or the averaged symmetric
fixed point when ``symmetric``), ``iterations`` being the cap.
"""

from __future__ import annotations


def sinkhorn_jax(S, iterations, tol, symmetric):
    import jax
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp

    n = S.shape[0]

    def plan(f, g):
        return jnp.exp(S + f[:, None] + g[None, :])

    def error(f, g):
        K = plan(f, g)
        return jnp.maximum(jnp.abs(K.sum(1) - 1).max(), jnp.abs(K.sum(0) - 1).max())

    def alt_body(state):
        k, f, g, _ = state
        rows = k % 2 == 0
        f2 = jnp.where(rows, -logsumexp(S + g[None, :], axis=1), f)
        g2 = jnp.where(rows, g, -logsumexp(S + f2[:, None], axis=0))
        err = jnp.where(tol > 0, error(f2, g2), jnp.inf)
        return k + 1, f2, g2, err

    def sym_body(state):
        k, f, _, _ = state
        f2 = 0.5 * (f - logsumexp(S + f[None, :], axis=1))
        return k + 1, f2, f2, error(f2, f2)

    def cond(state):
        k, _, _, err = state
        return (k < iterations) & ~(err <= tol)

    zero = jnp.zeros(n, dtype=S.dtype)
    start = (jnp.asarray(0, dtype=jnp.int64), zero, zero, jnp.asarray(jnp.inf, dtype=S.dtype))
    use_sym = (tol > 0) & (symmetric != 0)
    _, f, g, _ = jax.lax.cond(
        use_sym, lambda s: jax.lax.while_loop(cond, sym_body, s), lambda s: jax.lax.while_loop(cond, alt_body, s), start
    )
    return plan(f, g)
