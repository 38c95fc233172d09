r"""The Ito SDE of tokens on the sphere driven by one matrix Brownian motion (physics.md §1.2).

For unit tokens z_i (rows of an (n, d) array), softmax weights A_ij = e^{beta <z_i,z_j>} / Z_i,
m_i = sum_j A_ij z_j, and W a d x d Brownian motion shared by all tokens of a member:

    dZ_i = P_{Z_i} dW m_i  +  b(Z_i, m_i) dt  +  P_{Z_i} Vbar m_i dt.

Noise laws (``params.NOISES``), W = (sigma / sqrt d) S(B) with B a standard d x d Brownian motion:
- ``gaussian``: S(B) = B (entries of W of variance sigma^2/d per unit time);
- ``goe``: S(B) = (B + B^T)/sqrt 2 (symmetric; off-diagonal variance sigma^2/d, diagonal 2 sigma^2/d).

The mean field m_i is the shared softmax kernel :func:`dyn.numerics.mean_field.mean_field`
(M = V = I). Normalization drift b. The network step y = z + sqrt(h) G m, z <- y/|y| gives, with xi = G m
split as xi = <z, xi> z + P_z xi, z' - z = P_z xi - <z, xi> P_z xi - |P_z xi|^2 z / 2 + O(|xi|^3).
If Cov((G m)_a, (G m)_b) = (sigma^2/d) C_ab per unit time,

    b = -(1/2) E|P_z G m|^2 z - E[<z, G m> P_z G m] = -(sigma^2/2d) tr(P_z C) z - (sigma^2/d) P_z C z.

- gaussian, C = |m|^2 I:        b = -(sigma^2 (d-1)/(2d)) |m|^2 z;
- goe, C = |m|^2 I + m m^T:     b = -(sigma^2/2d) ((d-1)|m|^2 + |P_z m|^2) z - (sigma^2/d) <z,m> P_z m.

The radial part of b keeps |Z| = 1 (d|Z|^2 = 2<Z, b> dt + (sigma^2/d) tr(P C) dt = 0); the
tangential part (GOE only) is the correlation of the radial and tangential noise, which the
normalization turns into a drift.

In the integrator's convention ``diffusion(t, z, p, dB) = (sigma / sqrt d) P_z (S(dB) m)`` and
``drift`` is the full Ito drift b + P_z Vbar m. The projected scheme drops the radial part of b
and the retraction restores it (see :mod:`integrators.numba.sde`); the tangential GOE part is
kept by the projection, which is right: the scheme projects the noise before normalizing, so it
does not generate that term itself.
"""

from __future__ import annotations

import math

import numpy as np

from integrators.core.geometry import SPHERE
from integrators.numba.abi import DIFFUSION_SIG, DRIFT_SIG, NJIT
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import block
from ..numerics import mean_field as mf
from .params import LAYOUT, pack

BETA, SIGMA, VBAR, DIM, NOISE = (LAYOUT.index(k) for k in ("beta", "sigma", "vbar", "d", "noise"))
VBAR_AT = LAYOUT.block_at("Vbar")  # a general Vbar (empty when Vbar = vbar I)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def work_size(n: int, d: int, p=None) -> int:
    """Scratch floats of the drift and the diffusion for n tokens of dimension d."""
    return mf.work_size(n, d) + n * d + d


@njit(DRIFT_SIG, **NJIT)
def token_drift(t, z, p, out, work):
    """out_i <- P_{z_i} Vbar m_i - sigma^2 (d-1)/(2d) |m_i|^2 z_i  (the Ito drift), and for GOE
    noise also - (sigma^2/d) [ |P_{z_i} m_i|^2 z_i / 2 + <z_i, m_i> P_{z_i} m_i ]."""
    n, d = z.shape
    sigma, vbar = p[SIGMA], p[VBAR]
    k2 = sigma * sigma / p[DIM]
    c = k2 * (p[DIM] - 1.0) / 2.0
    goe = p[NOISE] != 0.0
    Vbar = block(p, VBAR_AT)
    matrix = Vbar.shape[0] > 0
    mf.mean_field(z, p[BETA], False, z, True, z, True, out, work)  # M = V = I: never read
    v = work[work.shape[0] - d :]
    for i in range(n):
        zm = 0.0
        zz = 0.0
        mm = 0.0
        for k in range(d):
            zm += z[i, k] * out[i, k]
            zz += z[i, k] * z[i, k]
            mm += out[i, k] * out[i, k]
        for k in range(d):  # v = Vbar m_i
            if matrix:
                acc = 0.0
                for q in range(d):
                    acc += Vbar[k * d + q] * out[i, q]
                v[k] = acc
            else:
                v[k] = vbar * out[i, k]
        zv = 0.0
        for k in range(d):
            zv += z[i, k] * v[k]
        radial = c * mm
        if goe:
            radial += 0.5 * k2 * (mm - zm * zm / zz)
        for k in range(d):
            val = v[k] - zv / zz * z[i, k] - radial * z[i, k]
            if goe:
                val -= k2 * zm * (out[i, k] - zm / zz * z[i, k])
            out[i, k] = val


@njit(DIFFUSION_SIG, **NJIT)
def token_diffusion(t, z, p, dw, out, work):
    """out_i <- (sigma / sqrt d) P_{z_i} (dW m_i): the common matrix noise applied to every token,
    dW = dw (gaussian) or (dw + dw^T) / sqrt 2 (goe)."""
    n, d = z.shape
    scale = p[SIGMA] / math.sqrt(p[DIM])
    goe = p[NOISE] != 0.0
    m = work[: n * d].reshape((n, d))
    mf.mean_field(z, p[BETA], False, z, True, z, True, m, work[n * d :])  # M = V = I: never read
    for i in range(n):
        for k in range(d):
            acc = 0.0
            if goe:
                for l in range(d):
                    acc += (dw[k, l] + dw[l, k]) * m[i, l]
                acc *= _INV_SQRT2
            else:
                for l in range(d):
                    acc += dw[k, l] * m[i, l]
            out[i, k] = scale * acc
        zv = 0.0
        zz = 0.0
        for k in range(d):
            zv += z[i, k] * out[i, k]
            zz += z[i, k] * z[i, k]
        for k in range(d):
            out[i, k] -= zv / zz * z[i, k]


# ---------------------------------------------------------------------------------- JAX twins


def _value_jax(z, p, m):
    """Vbar m_i for every row (Vbar = vbar I unless p carries a matrix; decided from p's static
    length)."""
    v = LAYOUT.unpack(p, {"d": z.shape[-1]})
    return m @ v["Vbar"].T if "Vbar" in v else v["vbar"] * m


def token_drift_jax(t, z, p):
    """JAX twin of :func:`token_drift` (one member)."""
    m = mf.mean_field_jax(z, p[BETA], 0.0)
    k2 = p[SIGMA] ** 2 / p[DIM]
    c = k2 * (p[DIM] - 1.0) / 2.0
    zz = (z * z).sum(-1, keepdims=True)
    zm = (z * m).sum(-1, keepdims=True)
    mm = (m * m).sum(-1, keepdims=True)
    pm = SPHERE.project_jax(z, m)
    goe = p[NOISE]  # 0 or 1 (traced)
    extra = goe * k2 * (0.5 * (mm - zm * zm / zz) * z + zm * pm)
    return SPHERE.project_jax(z, _value_jax(z, p, m)) - c * mm * z - extra


def token_diffusion_jax(t, z, p, dw):
    """JAX twin of :func:`token_diffusion`: (sigma / sqrt d) P_z (dW m)."""
    import jax.numpy as jnp

    m = mf.mean_field_jax(z, p[BETA], 0.0)
    dw = jnp.where(p[NOISE] != 0.0, (dw + dw.T) * _INV_SQRT2, dw)
    return SPHERE.project_jax(z, p[SIGMA] / jnp.sqrt(p[DIM]) * (m @ dw.T))


def _noise(p) -> tuple[int, int]:
    d = int(p[DIM])
    return (d, d)


def _example(rng):
    """A random member and parameter vector (either noise law, with or without a Vbar)."""
    n, d = int(rng.integers(2, 9)), int(rng.integers(2, 6))
    z = rng.standard_normal((n, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    Vbar = rng.standard_normal((d, d)) if rng.random() < 0.5 else None
    return z, pack(
        rng.uniform(0, 5),
        d,
        rng.uniform(0.2, 2),
        rng.uniform(-1, 1),
        noise=str(rng.choice(["gaussian", "goe"])),
        Vbar=Vbar,
    )


TOKEN_SDE = register(
    Dynamics(
        "token_sde",
        LAYOUT,
        token_drift,
        token_drift_jax,
        SPHERE,
        example=_example,
        diffusion=token_diffusion,
        diffusion_jax=token_diffusion_jax,
        noise=_noise,
        work=work_size,
    )
)


def problem(p):
    """The :class:`integrators.Problem` of this SDE on the sphere (noise: one (d, d) matrix)."""
    return TOKEN_SDE.problem(p)
