r"""The discrete transformer at random initialization (physics.md §1.2), L layers of step h:

    y_i = z_i + h Vbar m_i + sqrt(h) G_k m_i,     z_i <- y_i / |y_i|,

with Vbar = vbar I or a general d x d matrix (see :mod:`.params`) and G_k a d x d random matrix,
fresh at each layer and shared by all tokens: i.i.d. N(0, sigma^2/d) entries (noise
``gaussian``), or G_k = (sigma/sqrt d)(A + A^T)/sqrt 2 with A i.i.d. N(0, 1) (noise ``goe``:
symmetric, off-diagonal variance sigma^2/d, diagonal variance 2 sigma^2/d). Its depth limit is
the Ito SDE of :mod:`dyn.tokens_sde.sde` (whose normalization drift depends on the noise law).

Noise, three ways (all exact for the network's law):
- explicit standard increments ``dB`` (E, L, d, d): ``sqrt(h) G_k = (sigma / sqrt d) S(dB_k)``,
  S(B) = B (gaussian) or (B + B^T)/sqrt 2 (goe), the coupling to the SDE driven by the same path;
- n != 2, or GOE noise: G_k drawn in the kernel (d^2 normals per layer, symmetrized for GOE)
  from per-member streams;
- n = 2, gaussian noise: (G m_1, G m_2) drawn exactly as a 2d-normal vector: with u = m_1/|m_1| and w the unit
  part of m_2 orthogonal to u, G u and G w are independent N(0, sigma^2/d I) vectors, so
  G m_1 = |m_1| G u and G m_2 = <m_2, u> G u + |P_u^perp m_2| G w (2d normals per layer).
  |P_u^perp m_2| is computed from m_2 -+ m_1 = (a-b)(z_2 - z_1) or z_1 + z_2, whichever is
  smaller, so it keeps full relative precision when the tokens nearly coincide or are antipodal.

Either kernel may stop a run early once every pair of tokens has crossed an absorbing level of
log|z_i -+ z_j|^2 (see :mod:`dyn.tokens_sde.rho`; for two tokens: once the pair is decided).
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import NJIT
from integrators.numba.arrays import copy1, copy2
from integrators.numba.jit import njit
from integrators.numba.sde_rng import STREAM, STREAMS, fill_normals, member_streams
from integrators.numba.threads import over_members

from ..core.layout import block
from ..numerics import mean_field as mf
from .params import LAYOUT, noise_law
from .sde import BETA, DIM, NOISE, SIGMA, VBAR, VBAR_AT

_SQRT2 = math.sqrt(2.0)
_INV_SQRT2 = 1.0 / _SQRT2
_F3 = types.float64[:, :, ::1]
_F4 = types.float64[:, :, :, ::1]

_LAYER_SIG = types.void(
    types.float64[:, ::1],
    types.float64[::1],
    STREAM,
    _F4,
    types.int64,
    types.int64,
    types.boolean,
    types.float64,
    types.float64,
    types.boolean,
    types.boolean,
    types.float64[::1],
    types.float64,
)


@njit(_LAYER_SIG, **NJIT)
def layer_matrix(g, g_flat, s, increments, e, k, given, c, sq, goe, matrix, Vbar, h):
    """g <- layer k's matrix sqrt(h) G_k (+ h Vbar) of member e (g_flat: g's flat view): from
    the given increments (c times them), else from the member's stream s (c sq times normals),
    made symmetric for GOE noise ((dB + dB^T)/sqrt 2)."""
    d = g.shape[0]
    if given:
        for r in range(d):
            for q in range(d):
                g[r, q] = c * increments[e, k, r, q]
    else:
        fill_normals(s, g_flat)
        for r in range(d * d):
            g_flat[r] *= c * sq
    if goe:
        for r in range(d):
            g[r, r] *= _SQRT2
            for q in range(r + 1, d):
                sym = (g[r, q] + g[q, r]) * _INV_SQRT2
                g[r, q] = sym
                g[q, r] = sym
    if matrix:
        for r in range(d):
            for q in range(d):
                g[r, q] += h * Vbar[r * d + q]


_FULL_SIG = types.void(
    _F3,
    types.int64,
    types.float64,
    types.float64[::1],
    STREAMS,
    _F4,
    types.float64,
    types.float64,
    types.int64,
    types.int64,
    _F4,
    types.int64[::1],
)


@njit(types.boolean(types.float64[:, ::1], types.float64, types.float64), **NJIT)
def _all_pairs_decided(z, gap_minus, gap_plus):
    """Every pair has |z_i - z_j|^2 < gap_minus or |z_i + z_j|^2 < gap_plus."""
    n, d = z.shape
    for i in range(n):
        for j in range(i + 1, n):
            gm = 0.0
            gp = 0.0
            for r in range(d):
                gm += (z[i, r] - z[j, r]) ** 2
                gp += (z[i, r] + z[j, r]) ** 2
            if not (gm < gap_minus or gp < gap_plus):
                return False
    return True


@njit(_FULL_SIG, **NJIT)
def _network_full(x0, depth, h, p, streams, increments, stop_minus, stop_plus, work_size, save_every, out, layers):
    """Layers with a full d x d matrix per layer (given increments, or d^2 normals drawn;
    symmetrized as (B + B^T)/sqrt 2 for GOE noise). A run stops early once every pair has
    log|z_i - z_j|^2 < stop_minus or log|z_i + z_j|^2 < stop_plus (-inf: never). ``work_size``:
    scratch floats of the shared mean-field kernel. ``out`` (E, S, n, d): the states after
    layers 0, save_every, 2 save_every, ... (a run stopped early keeps its last state)."""
    n_members, n, d = x0.shape
    given = increments.shape[0] > 0
    check = stop_minus > -np.inf or stop_plus > -np.inf
    gap_minus = math.exp(stop_minus)
    gap_plus = math.exp(stop_plus)
    c = p[SIGMA] / math.sqrt(p[DIM])
    sq = math.sqrt(h)
    vbar, beta = p[VBAR], p[BETA]
    goe = p[NOISE] != 0.0
    Vbar = block(p, VBAR_AT)
    matrix = Vbar.shape[0] > 0
    hv = h * vbar if not matrix else 0.0  # with a matrix, h Vbar is added to G_k instead
    for e in range(n_members):
        z = x0[e].copy()
        m = np.empty((n, d))
        w = np.empty(work_size)
        g_flat = np.empty(d * d)
        g = g_flat.reshape((d, d))
        s = streams[e].copy()
        copy2(out[e, 0], z)
        k = 0
        while k < depth:
            layer_matrix(g, g_flat, s, increments, e, k, given, c, sq, goe, matrix, Vbar, h)
            mf.mean_field(z, beta, False, z, True, z, True, m, w)  # softmax, M = V = I
            for i in range(n):
                nrm = 0.0
                for r in range(d):
                    acc = z[i, r] + hv * m[i, r]
                    for q in range(d):
                        acc += g[r, q] * m[i, q]
                    z[i, r] = acc  # row i of m was computed before this row changed
                    nrm += acc * acc
                inv = 1.0 / math.sqrt(nrm)
                for r in range(d):
                    z[i, r] *= inv
            k += 1
            if k % save_every == 0:
                copy2(out[e, k // save_every], z)
            if check and _all_pairs_decided(z, gap_minus, gap_plus):
                break
        for j in range(k // save_every + 1, out.shape[1]):
            copy2(out[e, j], z)
        layers[e] = k
        copy1(streams[e], s)


_PAIR_SIG = types.void(
    _F3,
    types.int64,
    types.float64,
    types.float64[::1],
    STREAMS,
    types.float64,
    types.float64,
    types.int64,
    _F4,
    types.int64[::1],
)


@njit(_PAIR_SIG, **NJIT)
def _network_pair(x0, depth, h, p, streams, stop_minus, stop_plus, save_every, out, layers):
    """Two tokens, (G m_1, G m_2) sampled exactly (2d normals per layer; gaussian noise only). A run stops early once
    log|z1 - z2|^2 < stop_minus or log|z1 + z2|^2 < stop_plus (-inf: never)."""
    n_members, _, d = x0.shape
    c = p[SIGMA] * math.sqrt(h / p[DIM])
    vbar, beta = p[VBAR], p[BETA]
    Vbar = block(p, VBAR_AT)
    matrix = Vbar.shape[0] > 0
    check = stop_minus > -np.inf or stop_plus > -np.inf
    for e in range(n_members):
        z1 = x0[e, 0].copy()
        z2 = x0[e, 1].copy()
        m1 = np.empty(d)
        m2 = np.empty(d)
        v1 = np.empty(d)
        v2 = np.empty(d)
        dm = np.empty(d)
        eps = np.empty(2 * d)
        s = streams[e].copy()
        copy1(out[e, 0, 0], z1)
        copy1(out[e, 0, 1], z2)
        k = 0
        while k < depth:
            rho = 0.0
            for r in range(d):
                rho += z1[r] * z2[r]
            a = 1.0 / (1.0 + math.exp(beta * (rho - 1.0)))  # self weight
            b = 1.0 - a
            near = rho > 0.0  # m2 - m1 = (a - b)(z2 - z1) is small; else m2 + m1 = z1 + z2 is
            for r in range(d):
                m1[r] = a * z1[r] + b * z2[r]
                m2[r] = b * z1[r] + a * z2[r]
                dm[r] = (a - b) * (z2[r] - z1[r]) if near else z1[r] + z2[r]
            n1 = 0.0
            udm = 0.0
            for r in range(d):
                n1 += m1[r] * m1[r]
            n1 = math.sqrt(n1)
            for r in range(d):
                udm += m1[r] * dm[r] / n1
            um2 = n1 + udm if near else udm - n1  # <m2, u> from m2 = +-m1 + dm
            l22 = 0.0
            for r in range(d):
                w = dm[r] - udm * m1[r] / n1
                l22 += w * w
            l22 = math.sqrt(l22)
            for r in range(d):  # h Vbar m
                if matrix:
                    acc1 = 0.0
                    acc2 = 0.0
                    for q in range(d):
                        acc1 += Vbar[r * d + q] * m1[q]
                        acc2 += Vbar[r * d + q] * m2[q]
                    v1[r] = h * acc1
                    v2[r] = h * acc2
                else:
                    v1[r] = h * vbar * m1[r]
                    v2[r] = h * vbar * m2[r]
            fill_normals(s, eps)
            nz1 = 0.0
            nz2 = 0.0
            for r in range(d):
                y1 = z1[r] + v1[r] + c * n1 * eps[r]
                y2 = z2[r] + v2[r] + c * (um2 * eps[r] + l22 * eps[d + r])
                z1[r] = y1
                z2[r] = y2
                nz1 += y1 * y1
                nz2 += y2 * y2
            nz1 = 1.0 / math.sqrt(nz1)
            nz2 = 1.0 / math.sqrt(nz2)
            for r in range(d):
                z1[r] *= nz1
                z2[r] *= nz2
            k += 1
            if k % save_every == 0:
                copy1(out[e, k // save_every, 0], z1)
                copy1(out[e, k // save_every, 1], z2)
            if check:
                gm = 0.0
                gp = 0.0
                for r in range(d):
                    gm += (z1[r] - z2[r]) ** 2
                    gp += (z1[r] + z2[r]) ** 2
                if math.log(gm) < stop_minus or math.log(gp) < stop_plus:
                    break
        for j in range(k // save_every + 1, out.shape[1]):
            copy1(out[e, j, 0], z1)
            copy1(out[e, j, 1], z2)
        layers[e] = k
        copy1(streams[e], s)


def _tokens(x0) -> np.ndarray:
    x0 = np.asarray(x0, dtype=np.float64)
    if x0.ndim != 3 or x0.shape[-1] < 2 or x0.shape[1] < 1:
        raise ValueError(f"x0 must have shape (E, n, d) with d >= 2, got {x0.shape}")
    return np.ascontiguousarray(x0 / np.linalg.norm(x0, axis=-1, keepdims=True))


def network(
    x0,
    depth: int,
    horizon: float,
    p,
    *,
    rng=None,
    increments=None,
    stop_minus: float = -np.inf,
    stop_plus: float = -np.inf,
    exact_pair=None,
):
    """Run ``depth`` layers of step ``h = horizon / depth`` from ``x0`` (E, n, d).

    Noise: ``increments`` (E, depth, d, d) standard Brownian increments of step h (coupling), or
    ``rng`` (per-member streams; n = 2 with gaussian noise uses the exact 2d-normal sampling
    unless ``exact_pair=False``; it is derived for i.i.d. Gaussian G only, so ``exact_pair=True``
    with GOE noise is an error, and ``None`` picks it where it applies). Returns ``(z, layers)``:
    final tokens (E, n, d) and layers run per member (int64; < depth where a run stopped early:
    once every pair has log|z_i - z_j|^2 < ``stop_minus`` or log|z_i + z_j|^2 < ``stop_plus``;
    ignored with ``increments``). :func:`network_states` also keeps intermediate layers.
    """
    states, layers = network_states(
        x0,
        depth,
        horizon,
        p,
        depth,
        rng=rng,
        increments=increments,
        stop_minus=stop_minus,
        stop_plus=stop_plus,
        exact_pair=exact_pair,
    )
    return states[:, -1], layers


def network_states(
    x0,
    depth: int,
    horizon: float,
    p,
    save_every: int,
    *,
    rng=None,
    increments=None,
    stop_minus: float = -np.inf,
    stop_plus: float = -np.inf,
    exact_pair=None,
):
    """:func:`network`, keeping the tokens after layers 0, save_every, ..., depth:
    ``(states (E, depth / save_every + 1, n, d), layers)`` (a run stopped early keeps its last
    state at later saves). The same random numbers as :func:`network`."""
    x0 = _tokens(x0)
    E, n, d = x0.shape
    depth, save_every = int(depth), int(save_every)
    if depth < 1 or not horizon > 0:
        raise ValueError(f"need depth >= 1 and horizon > 0, got {depth}, {horizon}")
    if save_every < 1 or depth % save_every:
        raise ValueError(f"save_every = {save_every} must divide depth = {depth}")
    p = np.ascontiguousarray(p, dtype=np.float64)
    if int(p[DIM]) != d:
        raise ValueError(f"p was packed for d = {int(p[DIM])}, tokens have d = {d}")
    LAYOUT.unpack(p, {"d": d})  # ValueError unless a vector of this layout for d
    gaussian = noise_law(p) == "gaussian"
    if exact_pair and not gaussian:
        raise ValueError(f"exact_pair sampling is derived for gaussian noise only, got noise = {noise_law(p)!r}")
    if exact_pair is None:
        exact_pair = gaussian
    h = float(horizon) / depth
    out = np.empty((E, depth // save_every + 1, n, d))
    layers = np.full(E, depth, dtype=np.int64)
    if increments is not None:
        inc = np.ascontiguousarray(increments, dtype=np.float64)
        if inc.shape != (E, depth, d, d):
            raise ValueError(f"increments must have shape {(E, depth, d, d)}, got {inc.shape}")
        streams, stop_minus, stop_plus = np.ones((E, 4), np.uint64), -np.inf, -np.inf
    else:
        inc, streams = np.empty((0, 0, 0, 0)), member_streams(rng, E)
    stops = (float(stop_minus), float(stop_plus))
    if n == 2 and exact_pair and increments is None:
        over_members(
            E, lambda a, b: _network_pair(x0[a:b], depth, h, p, streams[a:b], *stops, save_every, out[a:b], layers[a:b])
        )
    else:
        over_members(
            E,
            lambda a, b: _network_full(
                x0[a:b],
                depth,
                h,
                p,
                streams[a:b],
                inc[a:b],
                *stops,
                mf.work_size(n, d),
                save_every,
                out[a:b],
                layers[a:b],
            ),
        )
    return out, layers
