"""Residual fields g(x, t) in R^d and the ODEs built on them, numba and JAX.

Two kinds of field share one flat parameter layout (so a sweep keeps one shape):

    tanh:    g(x, t) = W2 tanh(W1 x + b + t c)        (a smooth, time-dependent one-hidden-layer net)
    affine:  g(x, t) = M x + b                        (linear maps a x, and -grad F for quadratics)

The vector (:data:`LAYOUT`): eps (the mass of the second-order ODE); kind (0 tanh, 1 affine); d;
then the blocks W1 (tanh) or M (affine) (d x d, row-major), b (d), c (d; tanh only) and W2
(d x d; tanh only).

Second-order ODE ``eps x'' + x' = g(x, t)`` as a first-order system on the (2, d) state
``[x; u]``, ``u = x'``:  ``x' = u``,  ``u' = (g(x, t) - u) / eps``.  First-order ODE ``x' = g`` on
a (1, d) state. Both follow the numba ABI (``integrators.numba.abi.DRIFT_SIG``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

import integrators
from integrators.numba.abi import DRIFT_SIG, F1, NJIT
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import Layout, block

KINDS = {"tanh": 0.0, "affine": 1.0}
LAYOUT = Layout(
    "momentum_field",
    scalars=("eps", "kind", "d"),
    blocks={"W1": ("d", "d"), "b": ("d",), "c": ("d",), "W2": ("d", "d")},
)
EPS, KIND = LAYOUT.index("eps"), LAYOUT.index("kind")
W1_AT, B_AT, C_AT, W2_AT = (LAYOUT.block_at(k) for k in LAYOUT.blocks)


def param_size(d: int) -> int:
    return LAYOUT.size({"d": d})


def pack_field(kind: str, d: int, *, eps: float = 1.0, W1=None, b=None, c=None, W2=None) -> np.ndarray:
    """The flat vector ``p`` of a field (see the module table). Missing arrays are zero,
    except W1 (affine: M) which is required."""
    if kind not in KINDS:
        raise ValueError(f"unknown field kind {kind!r}; allowed: {sorted(KINDS)}")
    d = int(d)
    blocks = {}
    for name, arr in (("W1", W1), ("b", b), ("c", c), ("W2", W2)):
        shape = LAYOUT.shape(name, {"d": d})
        blocks[name] = np.zeros(shape) if arr is None else np.asarray(arr, dtype=np.float64)
        if blocks[name].shape != shape:
            raise ValueError(f"field array of shape {blocks[name].shape}, expected {shape}")
    return LAYOUT.pack(eps=float(eps), kind=KINDS[kind], d=d, **blocks)


def unpack_field(p) -> tuple[str, float, dict]:
    p = np.asarray(p, dtype=np.float64)
    v = LAYOUT.unpack(p, {"d": int(p[LAYOUT.index("d")])})
    kind = "tanh" if v["kind"] == 0.0 else "affine"
    return kind, float(v["eps"]), {name: v[name] for name in LAYOUT.blocks}


def random_tanh_field(rng: np.random.Generator, d: int, eps: float = 1.0, scale: float = 1.0) -> np.ndarray:
    """W1, W2 ~ N(0, scale^2 / d) entries, b, c ~ N(0, 1): a generic smooth field of size O(scale)."""
    s = scale / math.sqrt(d)
    return pack_field(
        "tanh",
        d,
        eps=eps,
        W1=s * rng.standard_normal((d, d)),
        b=rng.standard_normal(d),
        c=rng.standard_normal(d),
        W2=s * rng.standard_normal((d, d)),
    )


def field_numpy(t: float, x: np.ndarray, p) -> np.ndarray:
    """g(x, t) for x of shape (..., d) (any leading axes), in float64 numpy."""
    kind, _, a = unpack_field(p)
    if kind == "affine":
        return x @ a["W1"].T + a["b"]
    return np.tanh(x @ a["W1"].T + a["b"] + t * a["c"]) @ a["W2"].T


def field_jax(t, x, p):
    """g(x, t) for one x of shape (d,) (JAX; p traced, d from the static shape of x)."""
    import jax.numpy as jnp

    v = LAYOUT.unpack(p, {"d": x.shape[0]})
    affine = v["W1"] @ x + v["b"]
    tanh = v["W2"] @ jnp.tanh(v["W1"] @ x + v["b"] + t * v["c"])
    return jnp.where(v["kind"] == 0.0, tanh, affine)


_G_SIG = types.void(types.float64, F1, F1, F1, F1)


@njit(_G_SIG, **NJIT)
def _field_row(t, x, p, out, work):
    """out <- g(x, t) for one x of shape (d,); ``work``: d scratch floats."""
    d = x.shape[0]
    affine = p[KIND] != 0.0
    W1 = block(p, W1_AT).reshape((d, d))
    b = block(p, B_AT)
    c = block(p, C_AT)
    W2 = block(p, W2_AT).reshape((d, d))
    if affine:
        for i in range(d):
            acc = b[i]
            for j in range(d):
                acc += W1[i, j] * x[j]
            out[i] = acc
        return
    h = work[:d]
    for i in range(d):
        acc = b[i] + t * c[i]
        for j in range(d):
            acc += W1[i, j] * x[j]
        h[i] = math.tanh(acc)
    for i in range(d):
        acc = 0.0
        for j in range(d):
            acc += W2[i, j] * h[j]
        out[i] = acc


@njit(DRIFT_SIG, **NJIT)
def second_order_drift(t, x, p, out, work):
    """State rows [x; u]:  x' = u,  u' = (g(x, t) - u) / eps."""
    inv_eps = 1.0 / p[EPS]
    _field_row(t, x[0], p, out[1], work)
    for k in range(x.shape[1]):
        out[0, k] = x[1, k]
        out[1, k] = (out[1, k] - x[1, k]) * inv_eps


@njit(DRIFT_SIG, **NJIT)
def first_order_drift(t, x, p, out, work):
    """State row [x]:  x' = g(x, t)."""
    _field_row(t, x[0], p, out[0], work)


def second_order_drift_jax(t, x, p):
    import jax.numpy as jnp

    g = field_jax(t, x[0], p)
    return jnp.stack([x[1], (g - x[1]) / p[EPS]])


def first_order_drift_jax(t, x, p):
    return field_jax(t, x[0], p)[None]


def work_size(n: int, d: int, p=None) -> int:
    """Scratch floats of either drift (one hidden row of the field)."""
    return d


def _example(rows: int):
    def example(rng):
        d = int(rng.integers(1, 6))
        kind = str(rng.choice(["tanh", "affine"]))
        if kind == "tanh":
            p = random_tanh_field(rng, d, eps=rng.uniform(0.1, 2), scale=2.0)
        else:
            p = pack_field(
                "affine", d, eps=rng.uniform(0.1, 2), W1=rng.standard_normal((d, d)), b=rng.standard_normal(d)
            )
        return rng.standard_normal((rows, d)), p

    return example


SECOND_ORDER = register(
    Dynamics(
        "momentum_second_order",
        LAYOUT,
        second_order_drift,
        second_order_drift_jax,
        integrators.EUCLIDEAN,
        example=_example(2),
        work=work_size,
    )
)
FIRST_ORDER = register(
    Dynamics(
        "momentum_first_order",
        LAYOUT,
        first_order_drift,
        first_order_drift_jax,
        integrators.EUCLIDEAN,
        example=_example(1),
        work=work_size,
    )
)
