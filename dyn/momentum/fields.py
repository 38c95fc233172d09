"""Residual fields g(x, t) in R^d and the ODEs built on them, numba and JAX.

Two kinds of field share one flat parameter layout (so a sweep keeps one shape):

    tanh:    g(x, t) = W2 tanh(W1 x + b + t c)        (a smooth, time-dependent one-hidden-layer net)
    affine:  g(x, t) = M x + b                        (linear maps a x, and -grad F for quadratics)

=====================  ==================================================
``p[0]``               eps (the mass of the second-order ODE)
``p[1]``               kind: 0.0 = tanh, 1.0 = affine
``p[2]``               d (stored as a float)
``p[3:3+d*d]``         W1 (tanh) or M (affine), row-major
``p[3+d*d:3+d*d+d]``   b
next d                 c (tanh only)
next d*d               W2 (tanh only)
=====================  ==================================================

Second-order ODE ``eps x'' + x' = g(x, t)`` as a first-order system on the (2, d) state
``[x; u]``, ``u = x'``:  ``x' = u``,  ``u' = (g(x, t) - u) / eps``.  First-order ODE ``x' = g`` on
a (1, d) state. Both follow the numba ABI (``integrators.numba_abi.DRIFT_SIG``).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types

from integrators.numba_abi import DRIFT_SIG, NJIT

HEADER = 3
IDX_EPS, IDX_KIND, IDX_DIM = range(HEADER)
KINDS = {"tanh": 0.0, "affine": 1.0}


def param_size(d: int) -> int:
    return HEADER + 2 * d * d + 2 * d


def pack_field(kind: str, d: int, *, eps: float = 1.0, W1=None, b=None, c=None, W2=None) -> np.ndarray:
    """The flat vector ``p`` of a field (see the module table). Missing arrays are zero,
    except W1 (affine: M) which is required."""
    if kind not in KINDS:
        raise ValueError(f"unknown field kind {kind!r}; allowed: {sorted(KINDS)}")
    d = int(d)
    p = np.zeros(param_size(d))
    p[IDX_EPS], p[IDX_KIND], p[IDX_DIM] = float(eps), KINDS[kind], d
    parts = ((W1, (d, d)), (b, (d,)), (c, (d,)), (W2, (d, d)))
    at = HEADER
    for arr, shape in parts:
        size = int(np.prod(shape))
        if arr is not None:
            arr = np.asarray(arr, dtype=np.float64)
            if arr.shape != shape:
                raise ValueError(f"field array of shape {arr.shape}, expected {shape}")
            p[at:at + size] = arr.ravel()
        at += size
    return p


def unpack_field(p) -> tuple[str, float, dict]:
    p = np.asarray(p, dtype=np.float64)
    d = int(p[IDX_DIM])
    kind = "tanh" if p[IDX_KIND] == 0.0 else "affine"
    at = HEADER
    out = {}
    for name, shape in (("W1", (d, d)), ("b", (d,)), ("c", (d,)), ("W2", (d, d))):
        size = int(np.prod(shape))
        out[name] = p[at:at + size].reshape(shape)
        at += size
    return kind, float(p[IDX_EPS]), out


def with_eps(p, eps: float) -> np.ndarray:
    p = np.array(p, dtype=np.float64)
    p[IDX_EPS] = eps
    return p


def random_tanh_field(rng: np.random.Generator, d: int, eps: float = 1.0, scale: float = 1.0) -> np.ndarray:
    """W1, W2 ~ N(0, scale^2 / d) entries, b, c ~ N(0, 1): a generic smooth field of size O(scale)."""
    s = scale / math.sqrt(d)
    return pack_field("tanh", d, eps=eps, W1=s * rng.standard_normal((d, d)), b=rng.standard_normal(d),
                      c=rng.standard_normal(d), W2=s * rng.standard_normal((d, d)))


def field_numpy(t: float, x: np.ndarray, p) -> np.ndarray:
    """g(x, t) for x of shape (..., d) (any leading axes), in float64 numpy."""
    kind, _, a = unpack_field(p)
    if kind == "affine":
        return x @ a["W1"].T + a["b"]
    return np.tanh(x @ a["W1"].T + a["b"] + t * a["c"]) @ a["W2"].T


def field_jax(t, x, p):
    """g(x, t) for one x of shape (d,) (JAX; p traced, d read from the static length of p)."""
    import jax.numpy as jnp

    d = _dim_from_size(p.shape[0])
    W1 = p[HEADER:HEADER + d * d].reshape(d, d)
    b = p[HEADER + d * d:HEADER + d * d + d]
    c = p[HEADER + d * d + d:HEADER + d * d + 2 * d]
    W2 = p[HEADER + d * d + 2 * d:].reshape(d, d)
    affine = W1 @ x + b
    tanh = W2 @ jnp.tanh(W1 @ x + b + t * c)
    return jnp.where(p[IDX_KIND] == 0.0, tanh, affine)


def _dim_from_size(size: int) -> int:
    # size = HEADER + 2 d^2 + 2 d  ->  d = (-1 + sqrt(1 + 2 (size - HEADER))) / 2
    d = int(round((-1 + math.sqrt(1 + 2 * (size - HEADER))) / 2))
    if param_size(d) != size:
        raise ValueError(f"parameter vector of length {size} is not a field layout")
    return d


_G_SIG = types.void(types.float64, types.float64[::1], types.float64[::1], types.float64[::1])


@njit(_G_SIG, **NJIT)
def _field_row(t, x, p, out):
    """out <- g(x, t) for one x of shape (d,)."""
    d = x.shape[0]
    affine = p[IDX_KIND] != 0.0
    W1 = p[HEADER:HEADER + d * d]
    b = p[HEADER + d * d:HEADER + d * d + d]
    c = p[HEADER + d * d + d:HEADER + d * d + 2 * d]
    W2 = p[HEADER + d * d + 2 * d:HEADER + 2 * d * d + 2 * d]
    if affine:
        for i in range(d):
            acc = b[i]
            for j in range(d):
                acc += W1[i * d + j] * x[j]
            out[i] = acc
        return
    h = np.empty(d)
    for i in range(d):
        acc = b[i] + t * c[i]
        for j in range(d):
            acc += W1[i * d + j] * x[j]
        h[i] = math.tanh(acc)
    for i in range(d):
        acc = 0.0
        for j in range(d):
            acc += W2[i * d + j] * h[j]
        out[i] = acc


@njit(DRIFT_SIG, **NJIT)
def second_order_drift(t, x, p, out):
    """State rows [x; u]:  x' = u,  u' = (g(x, t) - u) / eps."""
    inv_eps = 1.0 / p[IDX_EPS]
    _field_row(t, x[0], p, out[1])
    for k in range(x.shape[1]):
        out[0, k] = x[1, k]
        out[1, k] = (out[1, k] - x[1, k]) * inv_eps


@njit(DRIFT_SIG, **NJIT)
def first_order_drift(t, x, p, out):
    """State row [x]:  x' = g(x, t)."""
    _field_row(t, x[0], p, out[0])


def second_order_drift_jax(t, x, p):
    import jax.numpy as jnp

    g = field_jax(t, x[0], p)
    return jnp.stack([x[1], (g - x[1]) / p[IDX_EPS]])


def first_order_drift_jax(t, x, p):
    return field_jax(t, x[0], p)[None]
