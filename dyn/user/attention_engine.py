r"""The drift of :func:`dyn.user.attention.attention_particles` where the normalization is the
engine's own (softmax; USA with the residual x_j): the field of :mod:`dyn.numerics.attention_field`
with the matrices of the heads M_h = Q_h^T K_h, since

    s^h_ij = beta <Q_h x_i, K_h x_j> = beta x_i^T (Q_h^T K_h) x_j,

and its values V_h x_j. The engine's field picks its regime per call (column-stored weights and
the vectorised exp for small n, GEMMs for large n; half the exps where every M_h is symmetric):
the work it does per pair is the engine's. Flags in the packed vector say that every M_h (or
V_h) is exactly the identity, so Q = K = V = I gives the calls of the engine's own attention
flow (the same bits).

With the residual x_j - x_i (softmax only: its rows sum to 1),

    sum_j A^h_ij V_h (x_j - x_i) = sum_j A^h_ij V_h x_j - V_h x_i,

so the drift subtracts (1/H) sum_h V_h x_i from the engine's field (x_i itself when V = I).

The packed vector is :func:`dyn.user.attention_jit.pack`'s (beta at slot 0, the heads at 3, the
identity flags, the normalization's and the residual's flags, then Q, K, V and the products M);
scratch: :func:`work_size`.
"""

from __future__ import annotations

from integrators.numba.abi import DRIFT_SIG, NJIT
from integrators.numba.jit import njit

from ..numerics import attention_field as af

BETA, HEADS, M_ID, V_ID, USA, DIFFERENCE, HEADER = 0, 3, 4, 5, 6, 7, 8  # attention_jit.pack's places

# The helpers are compiled into the drift, not cached alone (as the engine's own schemes:
# dyn.attention.schemes' UNCACHED); _attend is inlined, so that the drift's library is the one
# that links the engine field's code.
UNCACHED = {k: v for k, v in NJIT.items() if k != "cache"}


@njit(inline="always", **UNCACHED)
def _attend(x, p, out, work, field):
    """out <- (1/H) sum_h sum_j A^h_ij V_h x_j by the engine's `field` (SA, or USA)."""
    d = x.shape[1]
    heads = int(p[HEADS])
    size = heads * d * d
    v = p[HEADER + 2 * size : HEADER + 3 * size]
    m = p[HEADER + 3 * size : HEADER + 4 * size]
    field(x, p[BETA], p[USA] != 0.0, False, 0.0, heads, m, p[M_ID] != 0.0, v, p[V_ID] != 0.0, out, work)


@njit(**UNCACHED)
def _minus_own_value(x, p, out):
    """out_i -= (1/H) sum_h V_h x_i (x_i when every V_h is the identity)."""
    n, d = x.shape
    if p[V_ID] != 0.0:
        for i in range(n):
            for m in range(d):
                out[i, m] -= x[i, m]
        return
    heads = int(p[HEADS])
    size = heads * d * d
    v = p[HEADER + 2 * size : HEADER + 3 * size].reshape((heads, d, d))
    for i in range(n):
        for m in range(d):
            acc = 0.0
            for h in range(heads):
                for c in range(d):
                    acc += v[h, m, c] * x[i, c]
            out[i, m] -= acc / heads


@njit(DRIFT_SIG, **NJIT)
def drift(t, x, p, out, work):
    """The field, its normalization (softmax, or USA where p[USA] != 0) and its residual (x_j,
    or x_j - x_i where p[DIFFERENCE] != 0) read from p."""
    _attend(x, p, out, work, af.field)  # named here: the field is made before the drift (jit.callees)
    if p[DIFFERENCE] != 0.0:
        _minus_own_value(x, p, out)


def serves(normalization, euclidean_residual: bool) -> bool:
    """Whether :func:`drift` is the field of this normalization and residual: softmax, and USA
    with x_j. Every other normalization, and USA with x_j - x_i (whose rows do not sum to 1),
    runs in the generated drift of :mod:`dyn.user.attention_jit`."""
    return normalization == "softmax" or (normalization == "usa" and not euclidean_residual)


def work_size(n: int, d: int, heads: int) -> int:
    """Scratch floats of these drifts: the engine field's for H heads."""
    return af.work_size(n, d, heads)
