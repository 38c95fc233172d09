r"""Gradient flows written through dyn.gradient_flow (docs/your_own_system.md), named by import
path from scenarios in tests/test_gradient_flow.py:

- Quadratic: L(W) = (scale / 2) tr(W^T A W), A symmetric positive definite drawn per point, so
  W' = -scale A W and W(t) = expm(-scale A t) W(0);
- Ball: the same loss under the heavy ball, (W, V)' = (V, -gamma V - scale A W);
- Hot: L(w) = a |w|^2 / 2 with Langevin noise, an Ornstein-Uhlenbeck process whose entries
  have variance T / a + (w0^2 - T / a) e^{-2 a t};
- Kinked: a loss that leaves JAX for numpy, which JAX cannot differentiate.
"""

import jax.numpy as jnp
import numpy as np

import dyn

PARAMS = {"scale": dyn.Field("float", 1.0, "loss scale", gt=0.0)}


def spd(spec, rng):
    m = rng.standard_normal((3, 3))
    return {"A": m @ m.T / 3 + 0.5 * np.eye(3)}


def quadratic(theta, data, scale):
    w = theta["W"]
    return 0.5 * scale * jnp.sum(w * (data["A"] @ w))


def first_row(theta):
    return jnp.sum(theta["W"][0])


def weighted(theta, data, scale):
    """scale tr(W^T A W) = 2 L: an observable reading the point's data and a parameter."""
    return scale * jnp.trace(theta["W"].T @ data["A"] @ theta["W"])


Quadratic = dyn.gradient_flow(
    quadratic,
    name="quadratic_flow",
    weights={"W": (3, 2)},
    data=spd,
    params=PARAMS,
    observables={"row_sum": first_row, "twice_loss": weighted},
)
Ball = dyn.gradient_flow(
    quadratic, name="quadratic_ball", weights={"W": (3, 2)}, data=spd, params=PARAMS, momentum=True
)


def bowl(theta, data, a):
    return 0.5 * a * jnp.sum(theta["w"] ** 2)


Hot = dyn.gradient_flow(
    bowl, name="hot_bowl", weights={"w": (4,)}, noise=True, params={"a": dyn.Field("float", 2.0, "curvature", gt=0.0)}
)


def kinked(theta, data):
    return float(np.abs(np.asarray(theta["w"])).sum())


Kinked = dyn.gradient_flow(kinked, name="kinked", weights={"w": (2,)})
