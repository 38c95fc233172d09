"""Attention flow on the sphere: the right-hand side, numba and JAX (physics.md §1.1).

For tokens ``x_i in S^{d-1}`` (rows of ``x``, shape ``(n, d)``), with the mean field
``m_i = sum_j A_ij V x_j`` of :mod:`dyn.numerics.mean_field` (scores ``beta x_i^T M x_j``,
``M = Q^T K``, SA or USA weights)::

    dx_i/dt = P_{x_i} m_i = m_i - (<x_i, m_i> / |x_i|^2) x_i

Dividing by ``|x_i|^2`` (instead of assuming unit rows) makes ``|x_i|`` an exact invariant of the
ambient flow, so an unconstrained solver drifts off the sphere only by its truncation error.
The parameter vector is :data:`dyn.attention.params.LAYOUT`.
"""

from __future__ import annotations

import numpy as np

import integrators
from integrators.core.geometry import SPHERE
from integrators.numba.abi import DRIFT_SIG, NJIT
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import block
from ..numerics import mean_field as mf
from .params import LAYOUT, pack_params

BETA, USA, M_ID, V_ID = (LAYOUT.index(k) for k in ("beta", "usa", "m_identity", "v_identity"))
M_AT, V_AT = LAYOUT.block_at("M"), LAYOUT.block_at("V")


def work_size(n: int, d: int, p=None) -> int:
    """Scratch floats of the drift for n tokens of dimension d."""
    return mf.work_size(n, d)


@njit(DRIFT_SIG, **NJIT)
def attention_mean_field(t, x, p, out, work):
    """out <- m_i = sum_j A_ij V x_j (unprojected; the post-norm layer map uses it)."""
    d = x.shape[1]
    mf.mean_field(
        x,
        p[BETA],
        p[USA] != 0.0,
        block(p, M_AT).reshape((d, d)),
        p[M_ID] != 0.0,
        block(p, V_AT).reshape((d, d)),
        p[V_ID] != 0.0,
        out,
        work,
    )


# The sphere's tangent projection, v_i <- v_i - (<x_i, v_i> / |x_i|^2) x_i, written once in
# integrators.core.geometry; a module-level alias so numba binds it at compile time.
_project_rows = SPHERE.project


@njit(DRIFT_SIG, **NJIT)
def attention_drift(t, x, p, out, work):
    """out <- dx_i/dt = P_{x_i}(sum_j A_ij V x_j), the tangent velocity of the attention flow."""
    attention_mean_field(t, x, p, out, work)
    _project_rows(x, out)


# ---------------------------------------------------------------------------------------------
# JAX twin (one member, same flat p; flags ignored, matrices always applied)


def attention_mean_field_jax(t, x, p):
    """m_i = sum_j A_ij V x_j for one member ``x`` of shape (n, d); differentiable in x and p."""
    v = LAYOUT.unpack(p, {"d": x.shape[1]})
    return mf.mean_field_jax(x, v["beta"], v["usa"], v["M"], v["V"])


def attention_drift_jax(t, x, p):
    """dx_i/dt = P_{x_i} m_i for one member (n, d): the JAX twin of :func:`attention_drift`."""
    return SPHERE.project_jax(x, attention_mean_field_jax(t, x, p))


def _example(rng):
    """A random member and parameter vector (general Q, K, V, either normalization)."""
    n, d = int(rng.integers(3, 12)), int(rng.integers(2, 6))
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    Q, K, V = (np.eye(d) + 0.5 * rng.standard_normal((d, d)) for _ in range(3))
    return x, pack_params(rng.uniform(-3, 6), d, str(rng.choice(["SA", "USA"])), Q, K, V)


FLOW = register(
    Dynamics("attention_flow", LAYOUT, attention_drift, attention_drift_jax, SPHERE, example=_example, work=work_size)
)


def flow_problem(p) -> integrators.Problem:
    """The attention flow on the sphere as an :class:`integrators.Problem` (both backends)."""
    return FLOW.problem(p)


# ---------------------------------------------------------------------------------------------
# numpy-facing entry points


def _as_tokens(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim not in (2, 3):
        raise ValueError(f"x must have shape (n, d) or (E, n, d), got {x.shape}")
    if x.shape[-1] < 2 or x.shape[-2] < 1:
        raise ValueError(f"x needs n >= 1 tokens of dimension d >= 2, got {x.shape}")
    return np.ascontiguousarray(x)


def _apply(kernel, x, p):
    x = _as_tokens(x)
    if p.shape[0] != LAYOUT.size({"d": x.shape[-1]}):
        raise ValueError(f"p was packed for another d than x.shape[-1] = {x.shape[-1]}")
    out = np.empty_like(x)
    work = np.empty(work_size(*x.shape[-2:]))
    for e in np.ndindex(x.shape[:-2]):
        kernel(0.0, x[e], p, out[e], work)
    return out


def velocity(x, beta, normalization="SA", Q=None, K=None, V=None) -> np.ndarray:
    """dx_i/dt = P_{x_i}(sum_j A_ij V x_j) for ``x`` of shape (n, d) or (E, n, d)."""
    x = _as_tokens(x)
    return _apply(attention_drift, x, pack_params(beta, x.shape[-1], normalization, Q, K, V))


def mean_field(x, beta, normalization="SA", Q=None, K=None, V=None) -> np.ndarray:
    """m_i = sum_j A_ij V x_j (unprojected) for ``x`` of shape (n, d) or (E, n, d)."""
    x = _as_tokens(x)
    return _apply(attention_mean_field, x, pack_params(beta, x.shape[-1], normalization, Q, K, V))
