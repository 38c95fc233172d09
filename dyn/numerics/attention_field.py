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

Regimes, chosen from the problem's shapes by :func:`regime` (its Python twin
:func:`regime_of` sizes the scratch, :func:`work_size`):
- small: loops over column-stored weights that vectorize, the vectorised exp (:mod:`.vexp`):
  :mod:`._field_symmetric` (no mask, symmetric M_h: the main ensembles; the triangle in column
  blocks that stay in cache) or :mod:`._field_small` (any mask, any M_h);
- GEMM: :mod:`._field_gemm`, one GEMM for the scores of all heads, a row loop, one GEMM for the
  output.
The GEMM regime runs from the n of :data:`CROSSOVER` on (per d, per small path), measured (see
there). Every buffer comes from ``work`` (:func:`work_size` floats): a call allocates nothing.
The last NORMALIZERS floats of ``work`` are the symmetric path's normalizers, [c, sum_i Z_i] of
head 0 (:mod:`._field_symmetric`); the other paths leave them as they were.

Where the mask, the matrices and d alone fix the regime (:func:`fixed_regime`: the small path
whose GEMM crossover is NEVER, e.g. every unmasked field at d = 2), a caller that knows them
when its problem is built can call that regime's kernel (:data:`REGIME_KERNELS`) instead of
:func:`field`: the same numbers, and a process that loads it from numba's cache loads neither
the other regimes' kernels nor :func:`field`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import NJIT
from integrators.numba.jit import njit

from . import _field_gemm, _field_small
from ._field_gemm import gemm
from ._field_small import SIGNATURE, columns
from ._field_symmetric import symmetric, symmetric_blocks

COLUMNS, SYMMETRIC, GEMM = 0, 1, 2  # the regimes (the first two: the small regime's paths)
NEVER = 1 << 40

# The first n from which the GEMM regime is faster than the small one, per d: (symmetric path,
# columns path); NEVER: not up to n = 2048. Measured by benchmarks/attention_rhs.py's crossover
# section (one member, one thread, BLAS on one thread, M = V = I, SA, one head; median of 11
# interleaved rounds, on the 2-core machine shared with other jobs: ratios within ~15% are
# ties), n = 16 .. 2048: time per pair (s per call / n^2) in ns, symmetric / columns / GEMM:
#   d = 2:  n = 32: 1.49 / 1.79 / 2.91,  n = 256: 0.86 / 1.45 / 1.67,  n = 1024: 1.00 / 2.24 / 2.57
#   d = 3:  n = 32: 2.67 / 3.77 / 3.03,  n = 64: 2.24 / 3.41 / 2.38,   n = 512: 1.58 / 3.03 / 2.04
#   d = 4:  n = 32: 3.22 / 4.41 / 3.04,  n = 128: 2.36 / 3.87 / 1.96,  n = 2048: 3.81 / 8.23 / 5.26
#   d = 8:  n = 16: 7.72 / 8.75 / 6.24,  n = 256: 4.14 / 6.11 / 2.02
#   d = 16: n = 16: 13.8 / 15.5 / 6.93;  d = 64: n = 16: 50.2 / 55.7 / 13.6
# At d = 2 and 3 the symmetric path does half the exps and the GEMM's inner size is 2 or 3: GEMM
# never pays; at d = 2 not against the columns path (a causal mask) either. At d = 4 the
# symmetric path and GEMM trade places within 25% over n. Other d: log-log interpolation
# between the rows.
CROSSOVER = {2: (NEVER, NEVER), 3: (NEVER, 64), 4: (128, 32), 8: (16, 16), 16: (16, 16), 64: (16, 16)}
_MAX_D = 256


def _gemm_from_table() -> np.ndarray:
    """first[d, path]: the first n of the GEMM regime for d = 0.._MAX_D (path: COLUMNS,
    SYMMETRIC), interpolated in log n against log d between the rows of CROSSOVER, held
    constant outside them."""
    ds = sorted(CROSSOVER)
    first = np.empty((_MAX_D + 1, 2), dtype=np.int64)
    for d in range(_MAX_D + 1):
        lo = max([k for k in ds if k <= d], default=ds[0])
        hi = min([k for k in ds if k >= d], default=ds[-1])
        for path, column in ((SYMMETRIC, 0), (COLUMNS, 1)):
            a, b = CROSSOVER[lo][column], CROSSOVER[hi][column]
            if lo == hi or a == NEVER or b == NEVER:
                first[d, path] = b if a == NEVER else a
            else:
                f = (math.log(d) - math.log(lo)) / (math.log(hi) - math.log(lo))
                first[d, path] = round(math.exp((1 - f) * math.log(a) + f * math.log(b)))
    return first


_GEMM_FROM = _gemm_from_table()


@njit(types.int64(types.int64, types.int64, types.int64, types.boolean, types.boolean), **NJIT)
def regime(n, d, heads, causal, symmetric_m):
    """The regime of n tokens of dimension d: GEMM from the crossover of the small path they
    would take (SYMMETRIC: no mask and every M_h symmetric, else COLUMNS). `heads` scales every
    regime's work alike and does not move the crossover."""
    path = SYMMETRIC if symmetric_m and not causal else COLUMNS
    if n >= _GEMM_FROM[min(d, _MAX_D), path]:
        return GEMM
    return path


def regime_of(n: int, d: int, heads: int, causal: bool, symmetric_m: bool) -> int:
    """:func:`regime` in Python, the same table and rule (no kernel to load)."""
    path = SYMMETRIC if symmetric_m and not causal else COLUMNS
    return GEMM if n >= _GEMM_FROM[min(d, _MAX_D), path] else path


def fixed_regime(d: int, causal: bool, symmetric_m: bool) -> int | None:
    """The regime :func:`field` takes for every n at dimension d under this mask and these
    matrices: the small path whose GEMM crossover is NEVER (d = 2; d = 3 without a mask); None
    where n decides."""
    path = SYMMETRIC if symmetric_m and not causal else COLUMNS
    return path if _GEMM_FROM[min(d, _MAX_D), path] >= NEVER else None


def symmetric_matrices(heads: int, d: int, M: np.ndarray, m_id: bool) -> bool:
    """:func:`._field_symmetric.symmetric_blocks` in Python: every M_h (the H blocks of d x d
    floats, row-major, one after the other) equal to its transpose, exactly."""
    if m_id:
        return True
    blocks = np.asarray(M, dtype=np.float64)[: heads * d * d].reshape(heads, d, d)
    k, l = np.triu_indices(d, 1)
    return not bool((blocks[:, k, l] != blocks[:, l, k]).any())  # as the kernel: NaN is not equal


REGIME_KERNELS = {SYMMETRIC: symmetric, COLUMNS: columns, GEMM: gemm}  # field's signature each


NORMALIZERS = 2  # the last floats of the work: [c, sum_i Z_i] (the symmetric path)


def work_size(n: int, d: int, heads: int = 1) -> int:
    """Scratch floats :func:`field` needs for n tokens of dimension d and `heads` heads, for
    whichever path the mask and matrices pick (the larger need of the regimes these (n, d) may
    take); a caller that keeps scratch of its own beside them keeps it before the last
    NORMALIZERS. Each regime's kernel alone needs no more."""
    size = 0
    for causal, symmetric_m in ((False, True), (True, False)):
        if regime_of(n, d, heads, causal, symmetric_m) == GEMM:
            size = max(size, _field_gemm.work_size(n, d, heads))
        else:
            size = max(size, _field_small.work_size(n, d))
    return size + NORMALIZERS


@njit(SIGNATURE, **NJIT)
def field(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work):
    """out <- m_i (unprojected). M, V: the H blocks M_h, V_h (d x d, row-major) one after the
    other, H = `heads`; `work`: work_size(n, d, H) floats."""
    n, d = x.shape
    which = regime(n, d, heads, causal, not causal and symmetric_blocks(heads, d, M, m_id))
    if which == GEMM:
        gemm(x, beta, usa, causal, slope, heads, M, m_id, V, v_id, out, work)
    elif which == SYMMETRIC:
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
