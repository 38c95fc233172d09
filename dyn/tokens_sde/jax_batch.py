r"""The two-token forms of the random-init transformer as one JAX computation per batch of points
(the `jax` backend, :mod:`dyn.batched`): every run of every point advances together.

- :func:`u_batch`: the exact two-token SDE in u = -artanh(rho) by Euler-Maruyama (the numba
  kernel of :mod:`.rho`), rho_0 ~ 2 Beta((d-1)/2, (d-1)/2) - 1;
- :func:`pair_batch`: the two-token network with (G m_1, G m_2) sampled exactly, 2d normals per
  layer (the numba kernel of :mod:`.transformer`), tokens i.i.d. uniform;
- :func:`network_batch`: the network of n tokens driven by given Brownian increments
  sqrt(h) G_k = (sigma / sqrt d) S(dB_k) (the coupling of the depth limit).

Both stop a run once it crosses its absorbing levels (lo / hi in u, stop_minus / stop_plus in
log|z_1 -+ z_2|^2) and run at most `steps` steps; a point's numbers come from its key alone
(fold_in(key, run) per run, fold_in(run key, step) per step), never from its batch. Per point the
vector ``q`` holds what the loop reads; only the number of runs and d are static.
"""
from __future__ import annotations

import functools

import numpy as np

# q: the per-point vector of traced values
Q_FIELDS = ("beta", "sigma", "vbar", "d", "h", "steps", "lo", "hi")
BETA, SIGMA, VBAR, DIM, H, STEPS, LO, HI = range(len(Q_FIELDS))


def _jax():
    from integrators import _jax_backend

    _jax_backend.enable_compilation_cache()
    import jax

    return jax


@functools.lru_cache(maxsize=16)
def _u_program(runs: int):
    jax = _jax()
    jnp = jax.numpy

    def point(q, key):
        beta, sigma, vbar, d, h = q[BETA], q[SIGMA], q[VBAR], q[DIM], q[H]
        k2 = sigma * sigma / d
        noise = sigma * jnp.sqrt(2.0 * h / d)
        start, walk = jax.random.split(key)
        half = (d - 1.0) / 2.0
        rho0 = 2.0 * jax.random.beta(start, half, half, (runs,), dtype=jnp.float64) - 1.0
        u0 = -jnp.arctanh(jnp.clip(rho0, -1.0, 1.0))
        run_keys = jax.vmap(lambda r: jax.random.fold_in(walk, r))(jnp.arange(runs))

        def body(state):
            k, u, active, taken = state
            g = jax.vmap(lambda rk: jax.random.normal(jax.random.fold_in(rk, k),
                                                      dtype=jnp.float64))(run_keys)
            t = jnp.tanh(u)
            a = 1.0 / (1.0 + jnp.exp(-beta * (1.0 + t)))
            b = 1.0 - a
            pp = 2.0 * a * b
            ss = 1.0 - pp
            moved = u + h * (k2 * (ss * t - (d - 2.0) * pp) - 2.0 * vbar * b) \
                - noise * jnp.sqrt(ss) * g
            u = jnp.where(active, moved, u)
            taken = taken + active
            active = active & (u >= q[LO]) & (u <= q[HI])
            return k + 1, u, active, taken

        def cond(state):
            k, _, active, _ = state
            return (k < q[STEPS]) & jnp.any(active)

        start_state = (jnp.asarray(0, jnp.int64), u0, jnp.ones(runs, bool),
                       jnp.zeros(runs, jnp.int64))
        _, u, _, taken = jax.lax.while_loop(cond, body, start_state)
        return u, taken

    return jax.jit(jax.vmap(point))


def u_batch(q: np.ndarray, keys: np.ndarray, runs: int):
    """(u_final (P, runs), steps taken (P, runs)) for P points (q: (P, len(Q_FIELDS)))."""
    jax = _jax()
    u, taken = _u_program(int(runs))(jax.numpy.asarray(q), jax.numpy.asarray(keys, jax.numpy.uint32))
    return np.array(u), np.array(taken)


@functools.lru_cache(maxsize=16)
def _pair_program(runs: int, d: int):
    jax = _jax()
    jnp = jax.numpy

    def point(q, key, stop):
        beta, sigma, vbar, h = q[BETA], q[SIGMA], q[VBAR], q[H]
        c = sigma * jnp.sqrt(h / d)
        start, walk = jax.random.split(key)
        z = jax.random.normal(start, (runs, 2, d), dtype=jnp.float64)
        z = z / jnp.linalg.norm(z, axis=-1, keepdims=True)
        run_keys = jax.vmap(lambda r: jax.random.fold_in(walk, r))(jnp.arange(runs))

        def layer(z1, z2, eps):
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
            y1 = z1 + h * vbar * m1 + c * n1 * eps[:d]
            y2 = z2 + h * vbar * m2 + c * (um2 * eps[:d] + l22 * eps[d:])
            return y1 / jnp.linalg.norm(y1), y2 / jnp.linalg.norm(y2)

        def body(state):
            k, z, active, taken = state
            eps = jax.vmap(lambda rk: jax.random.normal(jax.random.fold_in(rk, k), (2 * d,),
                                                        dtype=jnp.float64))(run_keys)
            z1, z2 = jax.vmap(layer)(z[:, 0], z[:, 1], eps)
            moved = jnp.stack([z1, z2], axis=1)
            z = jnp.where(active[:, None, None], moved, z)
            taken = taken + active
            gm = jnp.log(jnp.sum((z[:, 0] - z[:, 1]) ** 2, -1))
            gp = jnp.log(jnp.sum((z[:, 0] + z[:, 1]) ** 2, -1))
            active = active & ~((gm < stop[0]) | (gp < stop[1]))
            return k + 1, z, active, taken

        def cond(state):
            k, _, active, _ = state
            return (k < q[STEPS]) & jnp.any(active)

        _, z, _, taken = jax.lax.while_loop(
            cond, body, (jnp.asarray(0, jnp.int64), z, jnp.ones(runs, bool),
                         jnp.zeros(runs, jnp.int64)))
        return z, taken

    return jax.jit(jax.vmap(point))


def pair_batch(q: np.ndarray, keys: np.ndarray, stops: np.ndarray, runs: int, d: int):
    """(final tokens (P, runs, 2, d), layers taken (P, runs)); ``stops`` (P, 2): stop_minus,
    stop_plus (-inf: never)."""
    jax = _jax()
    jnp = jax.numpy
    z, taken = _pair_program(int(runs), int(d))(jnp.asarray(q), jnp.asarray(keys, jnp.uint32),
                                                jnp.asarray(stops))
    return np.array(z), np.array(taken)


@functools.lru_cache(maxsize=16)
def _network_program():
    jax = _jax()
    jnp = jax.numpy
    from ..numerics.mean_field import mean_field_jax
    from .params import LAYOUT

    def run(z, p, increments, horizon):
        """One run: layers z_i <- normalize(z_i + h Vbar m_i + sqrt(h) G_k m_i) over the given
        standard increments dB_k (steps, d, d), sqrt(h) G_k = (sigma / sqrt d) S(dB_k)."""
        v = LAYOUT.unpack(p, {"d": z.shape[-1]})
        c = v["sigma"] / jnp.sqrt(v["d"])
        h = horizon / increments.shape[0]

        def layer(z, dw):
            g = c * jnp.where(v["noise"] != 0.0, (dw + dw.T) / jnp.sqrt(2.0), dw)
            m = mean_field_jax(z, v["beta"], 0.0)
            drift = m @ v["Vbar"].T if "Vbar" in v else v["vbar"] * m
            y = z + h * drift + m @ g.T
            return y / jnp.linalg.norm(y, axis=-1, keepdims=True), None

        return jax.lax.scan(layer, z, increments)[0]

    point = jax.vmap(run, in_axes=(0, None, 0, None))
    return jax.jit(jax.vmap(point, in_axes=(0, 0, 0, None)))


def network_batch(x0: np.ndarray, p: np.ndarray, increments: np.ndarray, horizon: float):
    """Final tokens (P, R, n, d) of the network driven by ``increments`` (P, R, depth, d, d)
    from ``x0`` (P, R, n, d), one parameter vector per point (``p`` (P, m))."""
    jax = _jax()
    jnp = jax.numpy
    return np.array(_network_program()(jnp.asarray(x0), jnp.asarray(p), jnp.asarray(increments),
                                       float(horizon)))
