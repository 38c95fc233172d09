r"""The attention field of an architecture: masked, distance-biased, multi-head (numba and JAX).

For tokens x_i (rows of an (n, d) array) and H heads (M_h = Q_h^T K_h, V_h)::

    m_i = (1/H) sum_h sum_{j in N(i)} A^h_ij V_h x_j,      A^h_ij = exp(s^h_ij) / Z^h_i,
    s^h_ij = beta x_i^T M_h x_j + b_ij,                     b_ij = -lambda |i - j|  (lambda >= 0),
    N(i) = {1, ..., n} (no mask) or {j <= i} (causal mask),
    SA: Z^h_i = sum_{k in N(i)} exp(s^h_ik);   USA: Z^h_i = n (whatever the mask).

With no mask, lambda = 0 and one head this is the mean field of :mod:`.mean_field` (whose numba
form calls this kernel). Flags say that every M_h (or V_h) is the identity; the matrices are
then never read.

Scores are shifted before exponentiating so that nothing overflows: by the diagonal score
s^h_ii (b_ii = 0 and b <= 0, so s^h_ij - s^h_ii <= 2 |beta| max_h |M_h|_F R^2, R = max_k |x_k|,
and Z >= 1), with the diagonal weight exp(0) = 1 exactly, so under a causal mask with V = I
token 1 sees exactly itself; by the row maximum when that bound exceeds EXP_MAX_ARG; or, with no
mask and symmetric M_h, by one c >= |s_ij| for every pair (then e_ij = e_ji: half the exps).

Regimes, chosen by the work ``H n^2 d`` (at and above ``LARGE_WORK``, the GEMM regime):
- small (e.g. n = 32, d = 2, one member of an ensemble block): loops over column-stored weights
  that vectorize, one vectorised exp (:mod:`.vexp`) per head: :mod:`._field_symmetric` (no mask,
  symmetric M_h: the main ensembles) or :mod:`._field_small` (any mask, any M_h);
- large (e.g. n = 1024, d = 64): :mod:`._field_gemm`, one GEMM for the scores of all heads, a row
  loop, one GEMM for the output.
Every buffer comes from ``work`` (:func:`work_size` floats): a call allocates nothing. The last
NORMALIZERS floats of ``work`` are the symmetric path's normalizers, [c, sum_i Z_i] of head 0
(:mod:`._field_symmetric`); the other paths leave them as they were.
"""
from __future__ import annotations

from integrators.jit import njit
from integrators.numba_abi import NJIT

from . import _field_gemm, _field_small
from ._field_gemm import LARGE_WORK, gemm
from ._field_small import SIGNATURE, columns
from ._field_symmetric import symmetric, symmetric_blocks


def _large(n: int, d: int, heads: int) -> bool:
    return heads * n * n * d >= LARGE_WORK


NORMALIZERS = 2  # the last floats of the work: [c, sum_i Z_i] (the symmetric path)


def work_size(n: int, d: int, heads: int = 1) -> int:
    """Scratch floats :func:`field` needs for n tokens of dimension d and `heads` heads; a
    caller that keeps scratch of its own beside them keeps it before the last NORMALIZERS."""
    if _large(n, d, heads):
        return _field_gemm.work_size(n, d, heads) + NORMALIZERS
    return _field_small.work_size(n, d) + NORMALIZERS


@njit(SIGNATURE, **NJIT)
def field(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work):
    """out <- m_i (unprojected). M, V: the H blocks M_h, V_h (d x d, row-major) one after the
    other, H = `heads`; `work`: work_size(n, d, H) floats."""
    n, d = x.shape
    if heads * n * n * d >= LARGE_WORK:
        gemm(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work)
    elif not causal and symmetric_blocks(heads, d, M, m_id):
        symmetric(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work)
    else:
        columns(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work)


def field_jax(x, beta, usa, causal, slope, M, V):
    """JAX twin of :func:`field` for one member ``x`` (n, d); M, V of shape (H, d, d); `usa`,
    `causal` (0 or 1) and `slope` may be traced. Differentiable in x and the parameters."""
    import jax
    import jax.numpy as jnp

    n = x.shape[0]
    idx = jnp.arange(n)
    dist = jnp.abs(idx[:, None] - idx[None, :]).astype(x.dtype)
    S = beta * jnp.einsum("ik,hkl,jl->hij", x, M, x) - slope * dist
    allowed = jnp.logical_or(causal == 0, idx[None, :] <= idx[:, None])
    S = jnp.where(allowed, S, -jnp.inf)
    smax = jax.lax.stop_gradient(jnp.max(S, axis=-1, keepdims=True))
    log_z_sa = smax + jnp.log(jnp.sum(jnp.exp(S - smax), axis=-1, keepdims=True))
    log_z = jnp.where(usa != 0, jnp.log(float(n)), log_z_sa)
    values = jnp.einsum("jl,hkl->hjk", x, V)
    return jnp.mean(jnp.exp(S - log_z) @ values, axis=0)
