r"""The attention mean field of tokens x_i (rows of an (n, d) array), numba and JAX::

    s_ij = beta x_i^T M x_j,      A_ij = exp(s_ij) / Z_i,      m_i = sum_j A_ij V x_j
    softmax (SA): Z_i = sum_k exp(s_ik);   unnormalized (USA): Z_i = n

The one-head, unmasked, unbiased case of :mod:`.attention_field`: the numba form calls that
module's kernel, so the attention flow, the token SDE, the random-init network and the noisy
direct drift share its regimes (half the exps for symmetric M, GEMMs for large n) with the
architectures. M or V is skipped when its flag says it is the identity (the matrix argument is
then never read: pass any C-contiguous 2-D array). Every buffer comes from ``work``
(:func:`work_size` floats), so a call allocates nothing.
"""

from __future__ import annotations

from numba import types

from integrators.numba.abi import F1, F2, NJIT
from integrators.numba.jit import njit

from . import attention_field as af

_SIG = types.void(F2, types.float64, types.boolean, F2, types.boolean, F2, types.boolean, F2, F1)


def work_size(n: int, d: int) -> int:
    """Scratch floats :func:`mean_field` needs for n tokens of dimension d."""
    return af.work_size(n, d, 1)


@njit(_SIG, **NJIT)
def mean_field(x, beta, usa, M, m_id, V, v_id, out, work):
    """out <- m_i = sum_j A_ij V x_j (unprojected); `work`: at least work_size(n, d) floats."""
    af.field(x, beta, usa, False, 0.0, 1, M.reshape(M.size), m_id, V.reshape(V.size), v_id, out, work)


def mean_field_jax(x, beta, usa, M=None, V=None):
    """m_i = sum_j A_ij V x_j for one member ``x`` (n, d) in JAX; M, V None = identity; `usa`
    may be traced (0 or 1). Differentiable in x and the parameters."""
    import jax
    import jax.numpy as jnp

    n = x.shape[0]
    S = beta * (x if M is None else x @ M) @ x.T
    smax = jax.lax.stop_gradient(jnp.max(S, axis=1, keepdims=True))
    log_z_sa = smax + jnp.log(jnp.sum(jnp.exp(S - smax), axis=1, keepdims=True))
    log_z = jnp.where(usa != 0.0, jnp.log(float(n)), log_z_sa)
    return jnp.exp(S - log_z) @ (x if V is None else x @ V.T)
