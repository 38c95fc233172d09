r"""Finite-time Lyapunov exponents of the random-init network (physics.md §1.2): the exact tangent
of its layer map, carried along the tokens with the same random matrices.

**The layer map.** One layer of :mod:`.transformer` (step h, G_k fresh at each layer, shared by
all tokens) sends the unit tokens z_i to

    y_i = z_i + h Vbar m_i + sqrt(h) G_k m_i,     z_i' = R(y_i) = y_i / |y_i|,

with scores s_ij = beta <z_i, z_j>, A_ij = e^{s_ij} / sum_l e^{s_il}, m_i = sum_j A_ij z_j. Write
M_k = h Vbar + sqrt(h) G_k (Vbar = vbar I unless a matrix is given), so y_i = z_i + M_k m_i.

**Its tangent.** For a tangent v = (v_i) (v_i in T_{z_i} S^{d-1}), differentiating term by term:

    ds_ij  = beta (<v_i, z_j> + <z_i, v_j>)
    dA_ij  = A_ij (ds_ij - dsbar_i),          dsbar_i = sum_l A_il ds_il   (softmax)
    dm_i   = sum_j A_ij v_j + sum_j A_ij (ds_ij - dsbar_i) z_j
    dy_i   = v_i + M_k dm_i
    v_i'   = DR(y_i) dy_i = (dy_i - <z_i', dy_i> z_i') / |y_i|,     DR(y) = (I - y y^T/|y|^2)/|y|,

so v' = J_k v with J_k the Jacobian of the layer on the product of spheres (each v_i' is tangent
at z_i'). A run carries the unit tangent u_k = v_k / |v_k| (|v|^2 = sum_i |v_i|^2), renormalized
after every layer, and sums the logs of the norms:

    log(|J_{L-1} ... J_0 v_0| / |v_0|) = sum_k log |J_k u_k|,     FTLE = (1/T) sum_k log |J_k u_k|

with T = L h the horizon. The tokens are the network's (:func:`.transformer.network` with
``exact_pair=False``: the same d^2 normals per layer from the same per-member streams, or the
same ``increments``, in the same order of operations), except that m_i is computed here from the
weights A_ij the tangent differentiates rather than by the shared mean-field kernel (2.4 times
faster for two tokens): they agree to rounding. An initial v_0 is projected onto the tangent
spaces (a radial part is no motion on the spheres).

**Two tokens: which tangent is which gap.** For every matrix M the layer map F commutes with
the swap (z_1, z_2) -> (z_2, z_1) and is odd, F(-Z) = -F(Z) (scores are quadratic, m_i and y_i
linear in Z). So:

- the cluster z_1 = z_2 = z is fixed by the swap, hence invariant, and J_k commutes with the
  swap's differential (v_1, v_2) -> (v_2, v_1): J_k keeps its eigenspaces, the rigid motions
  v_1 = v_2 (+1) and the separations v_1 = -v_2 = w, w perp z (-1). A pair z_1 = z + e w,
  z_2 = z - e w has z_1 - z_2 = 2 e w, so log|z_1 - z_2|^2 = 2 log|w| + const to first order.
- the antipodal pair z_1 = -z_2 = z is fixed by S = swap o (Z -> -Z), hence invariant (indeed
  m_1 = -m_2 = tanh(beta) z, y_2 = -y_1), and J_k keeps the eigenspaces of
  dS: (v_1, v_2) -> (-v_2, -v_1): the rigid rotations v_1 = -v_2 (+1, the pair stays antipodal:
  z_1 + z_2 = 0) and the *symmetric* direction v_1 = v_2 = w, w perp z (-1). A pair
  z_1 = z + e w, z_2 = -z + e w has z_1 + z_2 = 2 e w: the symmetric tangent is the one of
  log|z_1 + z_2|^2 = 2 log|w| + const.

Hence the FTLE of |v| along those directions is half the growth rate of log|z_1 -+ z_2|^2 that
:func:`.rho.lyapunov_plus` and :func:`.rho.lyapunov_minus` give (their rates are of the squared
gap).

**The exponents of the network** (gaussian noise, vbar = 0, the closed forms' assumptions). Let
w be the unit tangent, xi = sqrt(h) G_k z and eta = sqrt(h) G_k w: for z perp w unit these are
independent N(0, eps^2 I_d) with eps^2 = sigma^2 h / d. One layer multiplies |w| by

- cluster: ds = 0 and dm_i = (v_1 + v_2)/2 = 0, so dy_i = v_i, y = z + xi and
  log|w'| = (1/2) log(1 - <y, w>^2/|y|^2) - log|y|. With <y, w> = xi_w and
  log|y| = (1/2) log(1 + 2 xi_z + |xi|^2),
  E log|w'| = -eps^2/2 - (d - 2) eps^2/2 + O(eps^4) = -(d - 1) eps^2 / 2;
- antipodal (t = tanh beta = a - b, the two softmax weights at rho = -1): ds = 0 again, dm_i = w,
  y = z + t xi, dy = u = w + eta and log|w'| = (1/2) log|u|^2 + (1/2) log(1 - <y,u>^2/(|y||u|)^2)
  - log|y|, with E (1/2) log|u|^2 = (d - 2) eps^2/2, <y, u> = eta_z + t xi_w + O(eps^2),
  E log|y| = (d - 2) t^2 eps^2/2:  E log|w'| = (eps^2/2) [(d - 3) - (d - 1) t^2] + O(eps^4).

(Odd orders vanish by xi -> -xi, eta -> -eta.) Per unit time (divide by h):

    cluster:    -sigma^2 (d - 1) / (2d)                       = lambda_+ / 2,
    antipodal:  (sigma^2 / 2d) [(d - 3) - (d - 1) tanh^2 beta] = lambda_- / 2,

the second because (d - 1)/(1 + cosh 2 beta) = (d - 1)(1 - tanh^2 beta)/2. So the closed forms of
the Ito SDE hold for the discrete network up to an O(h) bias, with the factor 1/2 above. The
antipodal exponent changes sign at tanh^2 beta = (d - 3)/(d - 1), i.e. cosh 2 beta = d - 2: both
signs occur only for d >= 4 (for d = 3, cosh 2 beta > 1 = d - 2 whenever beta != 0: the
exponent is -sigma^2 tanh^2(beta)/3 <= 0).

**The O(h) bias.** One order further (moments of degree 4; all terms of degree 3 vanish by
parity). For xi ~ N(0, eps^2 I_d), log|e + xi|^2 = log(1 + delta), delta = 2 xi_1 + |xi|^2, with
E delta = d eps^2, E delta^2 = 4 eps^2 + d(d+2) eps^4, E delta^3 = 12 (d+2) eps^4, E delta^4 =
48 eps^4 (+ O(eps^6)) in log(1 + delta) = delta - delta^2/2 + delta^3/3 - delta^4/4 gives

    E log|e + xi|^2 = (d - 2) eps^2 - (d - 2)(d - 4) eps^4 / 2 + O(eps^6).

The angle terms, expanded the same way (1/|y|^2 = 1 - delta + delta^2, with <y, u> split into
its parts of degree 1 and 2): cluster E <y,w>^2/|y|^2 = eps^2 - (d - 2) eps^4 and its square
3 eps^4; antipodal, with c^2 = <y,u>^2/(|y|^2 |u|^2), E c^2 = (1 + t^2) eps^2
- [(d - 2)(1 + t^4) + d t^2] eps^4 and E c^4 = 3 (1 + t^2)^2 eps^4. Summing, in
log(1 - c^2) = -c^2 - c^4/2:

    cluster:    E log|w'| = -(d - 1) eps^2/2 + K_+ eps^4,   K_+ = (d^2 - 4d + 1)/4,
    antipodal:  E log|w'| = [(d - 3) - (d - 1) t^2] eps^2/2 + K_- eps^4,
                K_- = [(2d - 7)(1 + t^4) + 2 (d - 3) t^2 - (d - 2)(d - 4)(1 - t^4)] / 4,

so E FTLE = lambda_-+/2 + K sigma^4 h / d^2 + O(h^2). (Check: t = 0 makes y = z, and the
antipodal law is that of |P_z(w + eta)|, a (d-1)-dimensional |e + xi|: K_- = -(d-3)(d-5)/4,
as the formula above with d - 1 gives.) E.g. d = 3 cluster: -1/3 - h/18; d = 4 antipodal:
K_- = (1 + t^2)^2/4, bias (1 + t^2)^2 h/64.

**No transient.** One layer's log|w'| is a function f(z, w, G z, G w), with f(Q z, Q w, Q G z,
Q G w) = f(z, w, G z, G w) for every rotation Q, and the new pair (z', w'/|w'|) is orthonormal
again. Taking Q (z, w) = (e_1, e_2): the increment is f(e_1, e_2, Q G Q^T e_1, Q G Q^T e_2), and
Q G Q^T has the law of G, independent of the past. So on these invariant sets the per-layer logs
are i.i.d.: E FTLE = E log|J_0 u_0| / h exactly for every horizon, and the
spread over runs is the Monte Carlo error: to first order log|w'| = eta_w - t xi_z (antipodal)
or -xi_z (cluster), so Var FTLE = sigma^2 (1 + t^2) / (d T) (cluster: sigma^2 / (d T)).
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import NJIT
from integrators.numba.arrays import copy1, copy2
from integrators.numba.jit import njit
from integrators.numba.sde_rng import STREAMS, member_streams
from integrators.numba.threads import over_members

from ..core.layout import block
from .params import LAYOUT
from .sde import BETA, DIM, NOISE, SIGMA, VBAR, VBAR_AT
from .transformer import _tokens, layer_matrix

_SQRT2 = math.sqrt(2.0)
_INV_SQRT2 = 1.0 / _SQRT2
_F2 = types.float64[:, ::1]
_F3 = types.float64[:, :, ::1]
_F4 = types.float64[:, :, :, ::1]

_TANGENT_SIG = types.void(
    _F3, _F3, types.int64, types.float64, types.float64[::1], STREAMS, _F4, types.int64, _F2, _F3, _F3
)


@njit(_TANGENT_SIG, **NJIT)
def _tangent_network(x0, v0, depth, h, p, streams, increments, save_every, growth, z_out, v_out):
    """Layers of the network (as ``transformer._network_full``) with the tangent v carried by
    the exact Jacobian of each layer (module doc), renormalized after every layer. ``v0``: unit
    tangents. ``growth`` (E, S): sum of log|J_k u_k| after layers 0, save_every, ...;
    ``z_out``, ``v_out`` (E, n, d): the final tokens and unit tangent."""
    n_members, n, d = x0.shape
    given = increments.shape[0] > 0
    c = p[SIGMA] / math.sqrt(p[DIM])
    sq = math.sqrt(h)
    vbar, beta = p[VBAR], p[BETA]
    goe = p[NOISE] != 0.0
    Vbar = block(p, VBAR_AT)
    matrix = Vbar.shape[0] > 0
    hv = h * vbar if not matrix else 0.0  # with a matrix, h Vbar is added to G_k instead
    for e in range(n_members):
        z = x0[e].copy()
        v = v0[e].copy()
        m = np.empty((n, d))
        dm = np.empty((n, d))
        y = np.empty(d)
        dy = np.empty(d)
        a = np.empty(n)
        ds = np.empty(n)
        g_flat = np.empty(d * d)
        g = g_flat.reshape((d, d))
        s = streams[e].copy()
        total = 0.0
        growth[e, 0] = 0.0
        k = 0
        while k < depth:
            layer_matrix(g, g_flat, s, increments, e, k, given, c, sq, goe, matrix, Vbar, h)
            for i in range(n):  # m_i, dm_i: the softmax weights of row i and their derivative
                top = -np.inf
                for j in range(n):
                    zz = 0.0
                    for r in range(d):
                        zz += z[i, r] * z[j, r]
                    a[j] = beta * zz
                    top = max(top, a[j])
                tot = 0.0
                for j in range(n):
                    a[j] = math.exp(a[j] - top)
                    tot += a[j]
                dsbar = 0.0
                for j in range(n):
                    a[j] /= tot
                    vz = 0.0
                    for r in range(d):
                        vz += v[i, r] * z[j, r] + z[i, r] * v[j, r]
                    ds[j] = beta * vz
                    dsbar += a[j] * ds[j]
                for r in range(d):
                    acc = 0.0
                    dacc = 0.0
                    for j in range(n):
                        acc += a[j] * z[j, r]
                        dacc += a[j] * (v[j, r] + (ds[j] - dsbar) * z[j, r])
                    m[i, r] = acc
                    dm[i, r] = dacc
            nv = 0.0
            for i in range(n):  # rows of m, dm and v_i were read above: update z_i, v_i in place
                nrm = 0.0
                for r in range(d):
                    acc = z[i, r] + hv * m[i, r]
                    dacc = v[i, r] + hv * dm[i, r]
                    for q in range(d):
                        acc += g[r, q] * m[i, q]
                        dacc += g[r, q] * dm[i, q]
                    y[r] = acc
                    dy[r] = dacc
                    nrm += acc * acc
                inv = 1.0 / math.sqrt(nrm)
                zdy = 0.0
                for r in range(d):
                    z[i, r] = y[r] * inv
                    zdy += z[i, r] * dy[r]
                for r in range(d):  # DR(y) dy
                    val = (dy[r] - zdy * z[i, r]) * inv
                    v[i, r] = val
                    nv += val * val
            nv = math.sqrt(nv)
            total += math.log(nv)
            inv_v = 1.0 / nv
            for i in range(n):
                for r in range(d):
                    v[i, r] *= inv_v
            k += 1
            if k % save_every == 0:
                growth[e, k // save_every] = total
        copy2(z_out[e], z)
        copy2(v_out[e], v)
        copy1(streams[e], s)


def tangent_space(z, v) -> np.ndarray:
    """v_i - <v_i, z_i> z_i for unit tokens z (..., n, d)."""
    return v - np.sum(v * z, axis=-1, keepdims=True) * z


def tangent_run(x0, v0, depth: int, horizon: float, p, *, rng=None, increments=None, save_every: int | None = None):
    """Run ``depth`` layers of step ``h = horizon / depth`` from tokens ``x0`` (E, n, d) with
    the tangent ``v0`` (E, n, d; projected onto the tangent spaces of the normalized tokens,
    where each member's part must exceed 1e-12 of its norm). Noise as
    :func:`.transformer.network` with ``exact_pair=False``: ``increments`` (E, depth, d, d)
    standard Brownian increments of step h, or ``rng``.

    Returns ``(growth, z, v)``: ``growth`` (E, depth / save_every + 1) = log(|v_k| / |v_0|)
    after layers 0, save_every, ..., depth (``save_every`` defaults to depth); the final tokens
    z (E, n, d), the network's (to rounding); the final unit tangent v (E, n, d)."""
    x0 = _tokens(x0)
    E, _, d = x0.shape
    depth = int(depth)
    save_every = depth if save_every is None else int(save_every)
    if depth < 1 or not horizon > 0:
        raise ValueError(f"need depth >= 1 and horizon > 0, got {depth}, {horizon}")
    if save_every < 1 or depth % save_every:
        raise ValueError(f"save_every = {save_every} must divide depth = {depth}")
    v0 = np.asarray(v0, dtype=np.float64)
    if v0.shape != x0.shape:
        raise ValueError(f"v0 must have the shape of x0 {x0.shape}, got {v0.shape}")
    if not np.all(np.isfinite(v0)):
        raise ValueError("v0 must be finite")
    given = np.sqrt(np.sum(v0 * v0, axis=(1, 2)))
    v0 = tangent_space(x0, v0)
    norm = np.sqrt(np.sum(v0 * v0, axis=(1, 2)))
    if not np.all(norm > 1e-12 * given):  # a radial v0 leaves rounding (1e-16 |v0|) only
        raise ValueError("every member's tangent v0 must have a nonzero part tangent to the spheres")
    v0 = np.ascontiguousarray(v0 / norm[:, None, None])
    p = np.ascontiguousarray(p, dtype=np.float64)
    if int(p[DIM]) != d:
        raise ValueError(f"p was packed for d = {int(p[DIM])}, tokens have d = {d}")
    LAYOUT.unpack(p, {"d": d})  # ValueError unless a vector of this layout for d
    if increments is not None:
        inc = np.ascontiguousarray(increments, dtype=np.float64)
        if inc.shape != (E, depth, d, d):
            raise ValueError(f"increments must have shape {(E, depth, d, d)}, got {inc.shape}")
        streams = np.ones((E, 4), np.uint64)
    else:
        inc, streams = np.empty((0, 0, 0, 0)), member_streams(rng, E)
    h = float(horizon) / depth
    growth = np.empty((E, depth // save_every + 1))
    z, v = np.empty_like(x0), np.empty_like(x0)
    over_members(
        E,
        lambda lo, hi: _tangent_network(
            x0[lo:hi], v0[lo:hi], depth, h, p, streams[lo:hi], inc[lo:hi], save_every, growth[lo:hi], z[lo:hi], v[lo:hi]
        ),
    )
    return growth, z, v


def ftle(x0, v0, depth: int, horizon: float, p, *, rng=None, increments=None) -> np.ndarray:
    """Finite-time Lyapunov exponent of each run, (1/T) log(|J v_0| / |v_0|) over the horizon
    T (E,); arguments as :func:`tangent_run`."""
    growth, _, _ = tangent_run(x0, v0, depth, horizon, p, rng=rng, increments=increments)
    return growth[:, -1] / float(horizon)
