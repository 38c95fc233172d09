r"""The random-init transformer's steps for the `jax` backend (:mod:`integrators.jax.batch`,
method ``step_map``), each a pure function of one run, ``(t, x, p, h, xi) -> x'``:

- :func:`u_problem`: the exact two-token SDE in u = -artanh(rho) by Euler-Maruyama (the numba
  kernel of :mod:`.rho`), one standard normal xi per step, x = u of shape (1, 1); absorbed at
  u < lo or u > hi;
- :func:`pair_problem`: the two-token network with (G m_1, G m_2) sampled exactly, 2d normals per
  layer (the numba kernel of :mod:`.transformer`), x = (z_1, z_2); absorbed once
  log|z_1 - z_2|^2 < stop_minus or log|z_1 + z_2|^2 < stop_plus;
- :func:`network_problem`: the network of n tokens driven by given Brownian increments
  sqrt(h) G_k = (sigma / sqrt d) S(dB_k) (the coupling of the depth limit).

Per point the vector ``q`` (:data:`Q_LAYOUT`) holds what the two-token steps read (traced); the
step h and the steps come from the solve. :func:`two_token_starts` draws a point's starts from its
key (rho_0 ~ 2 Beta((d-1)/2, (d-1)/2) - 1, or tokens i.i.d. uniform) and gives the key of its
walk: with ``absorbing=True`` a point's numbers come from its key alone, never from its batch.
"""

from __future__ import annotations

import functools

import numpy as np

import integrators

from ..core.layout import Layout

# q: the per-point vector of traced values
Q_LAYOUT = Layout("tokens_sde_batch", scalars=("beta", "sigma", "vbar", "d", "lo", "hi", "stop_minus", "stop_plus"))
BETA, SIGMA, VBAR, DIM, LO, HI, STOP_MINUS, STOP_PLUS = (Q_LAYOUT.index(k) for k in Q_LAYOUT.scalars)


def _jax():
    import integrators

    integrators.configure_jax()
    import jax

    return jax


def u_step(t, x, q, h, xi):
    """One Euler-Maruyama step of u (state (1, 1)), xi ~ N(0, 1):

        u' = u + h (k2 (s r - (d - 2) p) - 2 vbar b) - sigma sqrt(2 h s / d) xi,

    r = tanh u, a = 1 / (1 + e^{-beta (1 + r)}), b = 1 - a, p = 2ab, s = 1 - p, k2 = sigma^2 / d."""
    jnp = _jax().numpy
    beta, sigma, vbar, d = q[BETA], q[SIGMA], q[VBAR], q[DIM]
    k2 = sigma * sigma / d
    noise = sigma * jnp.sqrt(2.0 * h / d)
    th = jnp.tanh(x)
    a = 1.0 / (1.0 + jnp.exp(-beta * (1.0 + th)))
    b = 1.0 - a
    pp = 2.0 * a * b
    ss = 1.0 - pp
    return x + h * (k2 * (ss * th - (d - 2.0) * pp) - 2.0 * vbar * b) - noise * jnp.sqrt(ss) * xi


def u_stop(x, q):
    """u has left [lo, hi] (NaN included)."""
    u = x[0, 0]
    return ~((u >= q[LO]) & (u <= q[HI]))


def u_problem(q) -> integrators.Problem:
    """The u SDE of one point (``q``: :data:`Q_LAYOUT`), state (1, 1)."""
    return integrators.Problem(p=q, noise_shape=(1, 1), step_jax=u_step, stop_jax=u_stop)


def pair_step(t, z, q, h, xi):
    """One layer of two tokens z (2, d) with (G m_1, G m_2) sampled exactly from xi (2, d)."""
    jnp = _jax().numpy
    d = z.shape[-1]
    beta, sigma, vbar = q[BETA], q[SIGMA], q[VBAR]
    c = sigma * jnp.sqrt(h / d)
    z1, z2 = z[0], z[1]
    rho = z1 @ z2
    a = 1.0 / (1.0 + jnp.exp(beta * (rho - 1.0)))
    b = 1.0 - a
    m1 = a * z1 + b * z2
    m2 = b * z1 + a * z2
    near = rho > 0.0  # the small one of m2 -+ m1 keeps its relative precision
    dm = jnp.where(near, (a - b) * (z2 - z1), z1 + z2)
    n1 = jnp.sqrt(m1 @ m1)
    udm = (m1 @ dm) / n1
    um2 = jnp.where(near, n1 + udm, udm - n1)
    w = dm - udm * m1 / n1
    l22 = jnp.sqrt(w @ w)
    y1 = z1 + h * vbar * m1 + c * n1 * xi[0]
    y2 = z2 + h * vbar * m2 + c * (um2 * xi[0] + l22 * xi[1])
    return jnp.stack([y1 / jnp.linalg.norm(y1), y2 / jnp.linalg.norm(y2)])


def pair_stop(z, q):
    """log|z_1 - z_2|^2 < stop_minus or log|z_1 + z_2|^2 < stop_plus."""
    jnp = _jax().numpy
    gm = jnp.log(jnp.sum((z[0] - z[1]) ** 2, -1))
    gp = jnp.log(jnp.sum((z[0] + z[1]) ** 2, -1))
    return (gm < q[STOP_MINUS]) | (gp < q[STOP_PLUS])


def pair_problem(q) -> integrators.Problem:
    """The two-token network of one point (``q``: :data:`Q_LAYOUT`), state (2, d)."""
    return integrators.Problem(p=q, noise_shape=(2, int(q[DIM])), step_jax=pair_step, stop_jax=pair_stop)


@functools.lru_cache(maxsize=16)
def _starts_program(form: str, runs: int, d: int):
    """key -> (starts, walk key): rho_0 ~ 2 Beta((d-1)/2, (d-1)/2) - 1 as u = -artanh(rho_0),
    d traced; or two tokens uniform on S^{d-1}."""
    jax = _jax()
    jnp = jax.numpy

    def point(key, q):
        start, walk = jax.random.split(key)
        if form == "rho":
            half = (q[DIM] - 1.0) / 2.0
            rho0 = 2.0 * jax.random.beta(start, half, half, (runs,), dtype=jnp.float64) - 1.0
            x0 = -jnp.arctanh(jnp.clip(rho0, -1.0, 1.0))[:, None, None]
        else:
            z = jax.random.normal(start, (runs, 2, d), dtype=jnp.float64)
            x0 = z / jnp.linalg.norm(z, axis=-1, keepdims=True)
        return x0, walk

    return jax.jit(jax.vmap(point))


def two_token_starts(form: str, key: np.ndarray, q: np.ndarray, runs: int):
    """(x0, walk key): the starts of a point's runs from the first half of its ``key`` split
    (form "rho": u (runs, 1, 1); "network": tokens (runs, 2, d)) and the key of its walk."""
    jnp = _jax().numpy
    program = _starts_program(form, int(runs), 0 if form == "rho" else int(q[DIM]))  # rho: d traced
    x0, walk = program(jnp.asarray(key, jnp.uint32)[None], jnp.asarray(q)[None])
    return np.array(x0[0]), np.array(walk[0])


def network_step(t, z, p, h, dw):
    """One layer z_i <- normalize(z_i + h Vbar m_i + sqrt(h) G m_i) from the standard increment
    dw (d, d): sqrt(h) G = (sigma / sqrt d) S(dw), S the identity or the GOE symmetrization."""
    jnp = _jax().numpy
    from ..numerics.mean_field import mean_field_jax
    from .params import LAYOUT

    v = LAYOUT.unpack(p, {"d": z.shape[-1]})
    c = v["sigma"] / jnp.sqrt(v["d"])
    g = c * jnp.where(v["noise"] != 0.0, (dw + dw.T) / jnp.sqrt(2.0), dw)
    m = mean_field_jax(z, v["beta"], 0.0)
    drift = m @ v["Vbar"].T if "Vbar" in v else v["vbar"] * m
    y = z + h * drift + m @ g.T
    return y / jnp.linalg.norm(y, axis=-1, keepdims=True)


def network_problem(p) -> integrators.Problem:
    """The network of n tokens (vector ``p`` of :func:`.params.pack`), driven by given
    increments (d, d) per layer."""
    from .params import LAYOUT

    d = int(p[LAYOUT.index("d")])
    return integrators.Problem(p=p, noise_shape=(d, d), step_jax=network_step)
