r"""State geometries: a manifold M given by a tangent projection and a retraction.

For a state x in R^{n x d} (n rows of dimension d):

- ``project(x, v)``: v <- P_x v, the tangent part of v at x (in place);
- ``retract(x)``: x <- R(x), the nearest point of M (in place).

EUCLIDEAN: M = R^{n x d}, P_x = I, R = id.
SPHERE:    M = (S^{d-1})^n, each row x_i a unit vector;
           (P_x v)_i = v_i - (<x_i, v_i> / |x_i|^2) x_i,   R(x)_i = x_i / |x_i|.

Each geometry carries both a numba pair (ABI in :mod:`integrators.numba.abi`) and a JAX pair
``project_jax(x, v) -> v'``, ``retract_jax(x) -> x'`` (pure, one member).
"""

from collections.abc import Callable
from dataclasses import dataclass

from ..numba.abi import NJIT, PROJECT_SIG, RETRACT_SIG
from ..numba.jit import njit


@dataclass(frozen=True)
class Geometry:
    """A manifold as (project, retract) in numba and JAX form. ``flat``: both are identities."""

    name: str
    project: Callable  # numba, PROJECT_SIG
    retract: Callable  # numba, RETRACT_SIG
    project_jax: Callable
    retract_jax: Callable
    flat: bool = False


# --- Euclidean --------------------------------------------------------------------------------
@njit(PROJECT_SIG, **NJIT)
def _euclid_project(x, v):
    pass


@njit(RETRACT_SIG, **NJIT)
def _euclid_retract(x):
    pass


def _euclid_project_jax(x, v):
    return v


def _euclid_retract_jax(x):
    return x


# --- Product of unit spheres ----------------------------------------------------------------
@njit(PROJECT_SIG, **NJIT)
def _sphere_project(x, v):
    n, d = x.shape
    if d == 2:  # the loops below written out (same operations, same order): the rows vectorize
        for i in range(n):
            a, b = x[i, 0], x[i, 1]
            s = ((0.0 + a * v[i, 0]) + b * v[i, 1]) / ((0.0 + a * a) + b * b)
            v[i, 0] -= s * a
            v[i, 1] -= s * b
        return
    for i in range(n):
        xv = 0.0
        xx = 0.0
        for k in range(d):
            xv += x[i, k] * v[i, k]
            xx += x[i, k] * x[i, k]
        s = xv / xx
        for k in range(d):
            v[i, k] -= s * x[i, k]


@njit(RETRACT_SIG, **NJIT)
def _sphere_retract(x):
    n, d = x.shape
    if d == 2:  # as in _sphere_project: the general loop's arithmetic, written out
        for i in range(n):
            a, b = x[i, 0], x[i, 1]
            r = 1.0 / ((0.0 + a * a) + b * b) ** 0.5
            x[i, 0] = a * r
            x[i, 1] = b * r
        return
    for i in range(n):
        xx = 0.0
        for k in range(d):
            xx += x[i, k] * x[i, k]
        r = 1.0 / xx**0.5
        for k in range(d):
            x[i, k] *= r


def _sphere_project_jax(x, v):
    import jax.numpy as jnp

    s = jnp.sum(x * v, axis=-1, keepdims=True) / jnp.sum(x * x, axis=-1, keepdims=True)
    return v - s * x


def _sphere_retract_jax(x):
    import jax.numpy as jnp

    return x / jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))


EUCLIDEAN = Geometry(
    "euclidean",
    _euclid_project,
    _euclid_retract,
    _euclid_project_jax,
    _euclid_retract_jax,
    flat=True,
)
SPHERE = Geometry("sphere", _sphere_project, _sphere_retract, _sphere_project_jax, _sphere_retract_jax)
# Retraction without projection: a step x <- R(x + h f(x)) of the raw field f. Explicit Euler on
# this geometry IS a post-norm residual network, x_i <- normalize(x_i + h f_i(x)).
POSTNORM = Geometry("postnorm", _euclid_project, _sphere_retract, _euclid_project_jax, _sphere_retract_jax)

__all__ = ["Geometry", "EUCLIDEAN", "SPHERE", "POSTNORM"]
