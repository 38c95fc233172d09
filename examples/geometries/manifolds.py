r"""Two manifolds of your own through ``dyn.Geometry`` (docs/your_own_system.md, "Any geometry").

- The torus T^k = (S^1)^k, each row x_i in R^{2k} a list of k unit vectors of the plane
  (x_i[2j], x_i[2j+1]); its invariant: every pair has norm 1.
- The product of spheres S^2 x S^2, each row x_i in R^6 two unit vectors of R^3 (x_i[:3],
  x_i[3:]); its invariant: both blocks have norm 1.

Each is a pair project(x, v) -> P_x v (the tangent part, block by block v_b - <x_b, v_b> x_b
/ |x_b|^2) and retract(x) -> R(x) (each block divided by its norm), in plain numpy arithmetic (the
helpers they call are numba functions, as numba needs).
The models push the tokens by consensus, x_i' = P_{x_i}(mean_j x_j), the attention flow with
uniform weights.
"""

import numba
import numpy as np

import dyn


@numba.njit
def _project_blocks(x, v, size):
    out = v.copy()
    n, d = x.shape
    for i in range(n):
        for b in range(0, d, size):
            xv = 0.0
            xx = 0.0
            for k in range(b, b + size):
                xv += x[i, k] * v[i, k]
                xx += x[i, k] * x[i, k]
            for k in range(b, b + size):
                out[i, k] -= xv / xx * x[i, k]
    return out


@numba.njit
def _retract_blocks(x, size):
    out = x.copy()
    n, d = x.shape
    for i in range(n):
        for b in range(0, d, size):
            r = np.sqrt(np.sum(x[i, b : b + size] ** 2))
            for k in range(b, b + size):
                out[i, k] = x[i, k] / r
    return out


def torus_project(x, v):
    return _project_blocks(x, v, 2)


def torus_retract(x):
    return _retract_blocks(x, 2)


def spheres_project(x, v):
    return _project_blocks(x, v, 3)


def spheres_retract(x):
    return _retract_blocks(x, 3)


TORUS = dyn.Geometry(torus_project, torus_retract, name="torus")
SPHERES = dyn.Geometry(spheres_project, spheres_retract, name="sphere x sphere")


def block_norms(states, size):
    """|x_b| of every block of every row: (..., n, d / size)."""
    s = np.asarray(states)
    return np.sqrt((s.reshape(s.shape[:-1] + (-1, size)) ** 2).sum(axis=-1))


class _Consensus(dyn.Model):
    default_plot = "spread"
    block = 2
    params = {
        "n": dyn.Field("int", 8, "tokens", lo=1, hi=4096),
        "k": dyn.Field("int", 2, "blocks per token", lo=1, hi=64),
    }

    def drift(t, x):
        m = np.zeros_like(x[0])
        for i in range(x.shape[0]):
            m += x[i]
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = m / x.shape[0]
        return out

    def outputs(self, setup):
        return [dyn.Output("spread", "mean |x_i - mean x|^2", dims=("time",))]

    def trajectory_dims(self, setup):
        return {"token": max(setup.values_of("n")), "coordinate": self.block * max(setup.values_of("k"))}

    def initial_state(self, spec, runs):
        x = spec.rng.standard_normal((runs, spec["n"], self.block * spec["k"]))
        return x / np.repeat(block_norms(x, self.block), self.block, axis=-1)

    def observe(self, spec, states):
        s = np.asarray(states)
        spread = ((s - s.mean(axis=2, keepdims=True)) ** 2).sum(axis=-1).mean(axis=-1)
        return dyn.Chunk({"spread": spread}, states=s)


class TorusConsensus(_Consensus):
    name, description = "torus_consensus", "consensus of tokens on the torus (S^1)^k"
    geometry, block = TORUS, 2


class SpheresConsensus(_Consensus):
    name, description = "spheres_consensus", "consensus of tokens on S^2 x S^2"
    geometry, block = SPHERES, 3
    params = {
        "n": dyn.Field("int", 8, "tokens", lo=1, hi=4096),
        "k": dyn.Field("int", 2, "spheres per token", lo=2, hi=2),
    }
