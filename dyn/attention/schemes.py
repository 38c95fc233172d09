r"""Where the normalization sits: four transformer layers and their depth limits as dynamics.

Karagodin, Ge, Polyanskiy & Rigollet, "Normalization in attention dynamics" (2025; arXiv
2510.22026), model the residual stream of token i as z_i in R^d with LN(z) = z / |z| (RMS
normalization onto the unit sphere, no learned gain; the attention always reads normalized
tokens) and the layer output u_i(x) of :mod:`.architecture` (mask, bias, heads, feed-forward).
A layer of step h and its depth limit h -> 0, with x_i = LN(z_i) = z_i / r_i::

    post   x_i <- LN(x_i + h u_i(x))                 dx_i/dt = P_{x_i} u_i            on (S^{d-1})^n
    pre    z_i <- z_i + h u_i(LN z)                  dz_i/dt = u_i(x)                 in R^{n x d}
    peri   z_i <- z_i + h LN(u_i(LN z))              dz_i/dt = u_i / |u_i|            in R^{n x d}
    ngpt   x_i <- LN(x_i + alpha h (LN(u_i) - x_i))  dx_i/dt = alpha P_{x_i} u_i/|u_i| on (S^{d-1})^n

(P_x v = v - <x, v> x / |x|^2). In the unified form of the paper every scheme moves the
direction as dx_i/dt = P_{x_i} u_i / s_i, a speed regulation: s_i = 1 (post), r_i (pre: the
stream grows, r_i' = <x_i, u_i>, so the angular motion slows down), r_i |u_i| (peri:
r_i' = <x_i, u_i> / |u_i|), |u_i| / alpha (nGPT). Post-LN is the attention flow of physics.md
§1.1 (with the defaults of :mod:`.architecture`, :data:`dyn.attention.FLOW` to rounding).

Each scheme is two :class:`dyn.core.dynamics.Dynamics` records: its flow (post and nGPT on SPHERE,
pre and peri on EUCLIDEAN) and its network (explicit Euler of that record: post and nGPT on
POSTNORM, i.e. retraction without projection; pre and peri are Euler on the flow record
itself). The numba drifts return the raw layer update (post: u; nGPT: alpha (u/|u| - x)); the
geometry projects it for the flow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from integrators.core.geometry import EUCLIDEAN, POSTNORM, SPHERE
from integrators.numba.abi import DRIFT_SIG, NJIT
from integrators.numba.arrays import copy2
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import block
from ..numerics import attention_field as af
from .architecture import ARCH, SCHEMES, heads_of, pack_architecture

BETA, USA, DIM, HEADS, CAUSAL, SLOPE, M_ID, V_ID, ALPHA, FF = (
    ARCH.index(k) for k in ("beta", "usa", "d", "heads", "causal", "slope", "m_identity", "v_identity", "alpha", "ff")
)
M_AT, V_AT, W1_AT, W2_AT = (ARCH.block_at(k) for k in ARCH.blocks)


def work_size(n: int, d: int, p) -> int:
    """Scratch floats of every drift of this module: the field's, n x d normalized tokens, d
    (kept before the field's last NORMALIZERS floats, which stay at the end of the work)."""
    return af.work_size(n, d, heads_of(len(p), d)) + n * d + d


# Each scheme's drift comes in one kernel per regime of the attention field: with af.field,
# which picks its regime per call, and with one regime's kernel (af.REGIME_KERNELS) for the
# problems whose vector fixes the regime (:func:`fixed_regime`), which then load from numba's
# cache that regime's kernels only. The helpers the drifts share are compiled into each drift
# and never cached alone (UNCACHED): one that takes a kernel as an argument would be keyed in
# numba's cache index on that argument's type, whose unpickling makes a second dispatcher of
# the kernel; and one that calls a kernel, cached alone on numba's plain path, names a version
# of it that another process does not define.
UNCACHED = {k: v for k, v in NJIT.items() if k != "cache"}


# inlined into each drift: a library of its own would link the field's whole tree and optimize
# it once more, and the drift's library would do so again
@njit(inline="always", **UNCACHED)
def _attend(x, p, out, work, field):
    """out <- the attention field of x by the kernel `field` (af.field or a regime's kernel)."""
    field(
        x,
        p[BETA],
        p[USA] != 0.0,
        p[CAUSAL] != 0.0,
        p[SLOPE],
        int(p[HEADS]),
        block(p, M_AT),
        p[M_ID] != 0.0,
        block(p, V_AT),
        p[V_ID] != 0.0,
        out,
        work,
    )


@njit(**NJIT)
def _feed_forward(x, p, out, work):
    """out_i += gamma W2 tanh(W1 x_i) (nothing when gamma = 0). The d floats before the field's
    normalizers (the last of `work`) are its scratch."""
    n, d = x.shape
    gamma = p[FF]
    if gamma != 0.0:
        W1 = block(p, W1_AT).reshape((d, d))
        W2 = block(p, W2_AT).reshape((d, d))
        top = work.shape[0] - af.NORMALIZERS
        hidden = work[top - d : top]
        for i in range(n):
            for k in range(d):
                s = 0.0
                for l in range(d):
                    s += W1[k, l] * x[i, l]
                hidden[k] = math.tanh(s)
            for k in range(d):
                s = 0.0
                for l in range(d):
                    s += W2[k, l] * hidden[l]
                out[i, k] += gamma * s


_unit_rows = SPHERE.retract  # y_i <- y_i / |y_i| for every row (numba)


@njit(**UNCACHED)
def _stream_tokens(z, work):
    """The tokens x_i = z_i / |z_i| of the stream z (pre-LN, peri-LN), in the n x d floats of
    `work` before the feed-forward's scratch."""
    n, d = z.shape
    size = work.shape[0] - af.NORMALIZERS
    x = work[size - n * d - d : size - d].reshape((n, d))
    copy2(x, z)
    _unit_rows(x)
    return x


@njit(**UNCACHED)
def _ngpt_step(x, p, out):
    """out <- alpha (out / |out| - x) (nGPT: a step towards the normalized layer output)."""
    n, d = x.shape
    _unit_rows(out)
    a = p[ALPHA]
    for i in range(n):
        for k in range(d):
            out[i, k] = a * (out[i, k] - x[i, k])


@njit(DRIFT_SIG, **NJIT)
def layer_output(t, x, p, out, work):
    """Post-LN: out <- u_i(x) (unprojected), the attention field plus gamma W2 tanh(W1 x_i)."""
    _attend(x, p, out, work, af.field)
    _feed_forward(x, p, out, work)


@njit(DRIFT_SIG, **NJIT)
def layer_output_symmetric(t, x, p, out, work):
    """:func:`layer_output` where p fixes the symmetric path (no mask, symmetric M_h)."""
    _attend(x, p, out, work, af.symmetric)
    _feed_forward(x, p, out, work)


@njit(DRIFT_SIG, **NJIT)
def layer_output_columns(t, x, p, out, work):
    """:func:`layer_output` where p fixes the columns path (a mask or an asymmetric M_h)."""
    _attend(x, p, out, work, af.columns)
    _feed_forward(x, p, out, work)


@njit(DRIFT_SIG, **NJIT)
def pre_drift(t, z, p, out, work):
    """Pre-LN: out <- dz_i/dt = u_i(z / |z|) (the stream is not normalized)."""
    layer_output(t, _stream_tokens(z, work), p, out, work)


@njit(DRIFT_SIG, **NJIT)
def pre_drift_symmetric(t, z, p, out, work):
    layer_output_symmetric(t, _stream_tokens(z, work), p, out, work)


@njit(DRIFT_SIG, **NJIT)
def pre_drift_columns(t, z, p, out, work):
    layer_output_columns(t, _stream_tokens(z, work), p, out, work)


@njit(DRIFT_SIG, **NJIT)
def peri_drift(t, z, p, out, work):
    """Peri-LN: out <- dz_i/dt = u_i / |u_i| (the layer output is normalized too)."""
    pre_drift(t, z, p, out, work)
    _unit_rows(out)


@njit(DRIFT_SIG, **NJIT)
def peri_drift_symmetric(t, z, p, out, work):
    pre_drift_symmetric(t, z, p, out, work)
    _unit_rows(out)


@njit(DRIFT_SIG, **NJIT)
def peri_drift_columns(t, z, p, out, work):
    pre_drift_columns(t, z, p, out, work)
    _unit_rows(out)


@njit(DRIFT_SIG, **NJIT)
def ngpt_drift(t, x, p, out, work):
    """nGPT: out <- alpha (u_i / |u_i| - x_i), a step towards the normalized output."""
    layer_output(t, x, p, out, work)
    _ngpt_step(x, p, out)


@njit(DRIFT_SIG, **NJIT)
def ngpt_drift_symmetric(t, x, p, out, work):
    layer_output_symmetric(t, x, p, out, work)
    _ngpt_step(x, p, out)


@njit(DRIFT_SIG, **NJIT)
def ngpt_drift_columns(t, x, p, out, work):
    layer_output_columns(t, x, p, out, work)
    _ngpt_step(x, p, out)


# each scheme's drifts: whichever regime the field takes per call (None), and one per regime
# that p can fix (af.fixed_regime)
DRIFTS = {
    "post": {None: layer_output, af.SYMMETRIC: layer_output_symmetric, af.COLUMNS: layer_output_columns},
    "pre": {None: pre_drift, af.SYMMETRIC: pre_drift_symmetric, af.COLUMNS: pre_drift_columns},
    "peri": {None: peri_drift, af.SYMMETRIC: peri_drift_symmetric, af.COLUMNS: peri_drift_columns},
    "ngpt": {None: ngpt_drift, af.SYMMETRIC: ngpt_drift_symmetric, af.COLUMNS: ngpt_drift_columns},
}


def fixed_regime(p) -> int | None:
    """The regime of the attention field the vector p fixes for every n (af.fixed_regime of its
    d, mask and matrices M_h, read as the field reads them), or None where n decides."""
    p = np.asarray(p, dtype=np.float64)
    d, heads, causal = int(p[DIM]), int(p[HEADS]), p[CAUSAL] != 0.0
    M = p[int(p[M_AT]) : int(p[M_AT + 1])]
    symmetric_m = not causal and af.symmetric_matrices(heads, d, M, p[M_ID] != 0.0)
    return af.fixed_regime(d, causal, symmetric_m)


def _drift_for(scheme_name: str):
    """A record's ``drift_for``: the scheme's drift of the regime p fixes (the same numbers as
    the drift whose field picks it per call; loaded alone, not the other regimes' kernels)."""
    drifts = DRIFTS[scheme_name]

    def drift_for(p):
        return drifts[fixed_regime(p)]

    return drift_for


# ---------------------------------------------------------------------------------------------
# JAX twins (one member, the same vector; the number of heads is read from its length)


def layer_output_jax(t, x, p):
    """JAX twin of :func:`layer_output`."""
    import jax.numpy as jnp

    v = ARCH.unpack(p, {"d": x.shape[1]})
    u = af.field_jax(x, v["beta"], v["usa"], v["causal"], v["slope"], v["M"], v["V"])
    return u + v["ff"] * jnp.tanh(x @ v["W1"].T) @ v["W2"].T


def _unit_rows_jax(y):
    import jax.numpy as jnp

    return y / jnp.sqrt(jnp.sum(y * y, axis=-1, keepdims=True))


def pre_drift_jax(t, z, p):
    return layer_output_jax(t, _unit_rows_jax(z), p)


def peri_drift_jax(t, z, p):
    return _unit_rows_jax(pre_drift_jax(t, z, p))


def ngpt_drift_jax(t, x, p):
    alpha = ARCH.unpack(p, {"d": x.shape[1]})["alpha"]
    return alpha * (_unit_rows_jax(layer_output_jax(t, x, p)) - x)


# ---------------------------------------------------------------------------------------------
# records


def _example_for(stream: bool):
    """`example(rng)` of a record: a random architecture vector and a member (unit rows, or a
    residual stream of radii in [0.5, 3] when `stream`)."""

    def example(rng):
        n, d = int(rng.integers(2, 12)), int(rng.integers(2, 5))
        H = int(rng.integers(1, 4))
        x = rng.standard_normal((n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        if stream:
            x *= rng.uniform(0.5, 3.0, (n, 1))
        Q, K, V = (np.eye(d) + 0.5 * rng.standard_normal((H, d, d)) for _ in range(3))
        W1, W2 = rng.standard_normal((2, d, d))
        p = pack_architecture(
            rng.uniform(-3, 6),
            d,
            str(rng.choice(["SA", "USA"])),
            Q,
            K,
            V,
            mask=str(rng.choice(["none", "causal"])),
            bias_slope=float(rng.choice([0.0, rng.uniform(0, 2)])),
            feedforward=float(rng.choice([0.0, rng.normal()])),
            W1=W1,
            W2=W2,
            alpha=rng.uniform(0.2, 3),
        )
        return x, p

    return example


def _record(name, scheme_name, drift_jax, geometry, stream=False):
    return register(
        Dynamics(
            name,
            ARCH,
            DRIFTS[scheme_name][None],
            drift_jax,
            geometry,
            example=_example_for(stream),
            work=work_size,
            drift_for=_drift_for(scheme_name),
        )
    )


POST = _record("attention_post", "post", layer_output_jax, SPHERE)
POST_NETWORK = _record("attention_post_network", "post", layer_output_jax, POSTNORM)
PRE = _record("attention_pre", "pre", pre_drift_jax, EUCLIDEAN, stream=True)
PERI = _record("attention_peri", "peri", peri_drift_jax, EUCLIDEAN, stream=True)
NGPT = _record("attention_ngpt", "ngpt", ngpt_drift_jax, SPHERE)
NGPT_NETWORK = _record("attention_ngpt_network", "ngpt", ngpt_drift_jax, POSTNORM)


@dataclass(frozen=True)
class Scheme:
    """A normalization scheme: its flow, its network, and whether its state is the unnormalized
    stream z (tokens x = z / |z|, radius |z|) or the unit tokens themselves."""

    name: str
    flow: Dynamics
    network: Dynamics
    stream: bool


BY_NAME = {
    s.name: s
    for s in (
        Scheme("post", POST, POST_NETWORK, False),
        Scheme("pre", PRE, PRE, True),
        Scheme("peri", PERI, PERI, True),
        Scheme("ngpt", NGPT, NGPT_NETWORK, False),
    )
}
assert tuple(BY_NAME) == SCHEMES


def scheme(name: str) -> Scheme:
    """The :class:`Scheme` called `name` (post, pre, peri, ngpt)."""
    if name not in BY_NAME:
        raise ValueError(f"normalization_layer must be one of {SCHEMES}, got {name!r}")
    return BY_NAME[name]


def stream_tokens(name: str, states) -> np.ndarray:
    """The unit tokens x = z / |z| of states of scheme `name` (unchanged for post and nGPT)."""
    states = np.asarray(states, dtype=np.float64)
    if not scheme(name).stream:
        return states
    return states / np.linalg.norm(states, axis=-1, keepdims=True)


def stream_radius(name: str, states) -> np.ndarray:
    """Mean token radius (1/n) sum_i |z_i| of each configuration, shape (...): the stream's
    growth for pre and peri, 1 for the schemes that stay on the sphere."""
    states = np.asarray(states, dtype=np.float64)
    if not scheme(name).stream:
        return np.ones(states.shape[:-2])
    return np.linalg.norm(states, axis=-1).mean(axis=-1)
