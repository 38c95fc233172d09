r"""The neural ODE of a ResNet with smooth weights, as a right-hand side for the integrators.

    dx/ds = f(x; theta(s)) = sigma(x W(s)^T) V(s)^T,     s in [0, 1]

(one input per row of the state ``x``, shape ``(B, d)``; see :mod:`.weights`). The parameter
vector (:data:`LAYOUT`) read by both the numba drift and its JAX twin: d, M (width), K (modes),
the activation code, then the blocks A^W (K, M, d) and A^V (K, d, M), row-major.
"""

from __future__ import annotations

import functools
import math

import numpy as np

import integrators
from integrators.numba.abi import DRIFT_SIG, NJIT
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import Layout, block
from .weights import ACTIVATIONS, WeightFunction, smooth_weights

LAYOUT = Layout(
    "resnet_ode",
    scalars=("d", "width", "modes", "activation"),
    blocks={"AW": ("modes", "width", "d"), "AV": ("modes", "d", "width")},
)
DIM, WIDTH, MODES, ACTIVATION = (LAYOUT.index(k) for k in LAYOUT.scalars)
AW_AT, AV_AT = LAYOUT.block_at("AW"), LAYOUT.block_at("AV")
SQRT1_2 = 1.0 / math.sqrt(2.0)


def pack_params(wf: WeightFunction, activation: str) -> np.ndarray:
    """Flat ``p`` of the neural ODE (layout in the module doc)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    K, M, d = wf.AW.shape
    if wf.AV.shape != (K, d, M):
        raise ValueError(f"AV must have shape {(K, d, M)}, got {wf.AV.shape}")
    return LAYOUT.pack(d=d, width=M, modes=K, activation=ACTIVATIONS[activation], AW=wf.AW, AV=wf.AV)


def work_size(n: int, d: int, p) -> int:
    """Scratch floats of the drift: W(t) (M x d), V(t) (d x M) and one hidden row (M)."""
    M = int(p[WIDTH])
    return 2 * M * d + M


@njit(**NJIT)
def _sigma(z, code):
    if code == 0:
        return math.tanh(z)
    if code == 1:
        return z if z > 0.0 else 0.0
    return 0.5 * z * (1.0 + math.erf(z * SQRT1_2))


@njit(DRIFT_SIG, **NJIT)
def resnet_drift(t, x, p, out, work):
    """out <- sigma(x W(t)^T) V(t)^T with (W, V)(t) = sum_k A_k cos(pi k t)."""
    d, M, K, code = int(p[DIM]), int(p[WIDTH]), int(p[MODES]), int(p[ACTIVATION])
    AW = block(p, AW_AT).reshape((K, M, d))
    AV = block(p, AV_AT).reshape((K, d, M))
    W = work[: M * d].reshape((M, d))
    V = work[M * d : 2 * M * d].reshape((d, M))
    h = work[2 * M * d : 2 * M * d + M]
    W[:, :] = 0.0
    V[:, :] = 0.0
    for k in range(K):
        c = math.cos(math.pi * k * t)
        for m in range(M):
            for j in range(d):
                W[m, j] += c * AW[k, m, j]
                V[j, m] += c * AV[k, j, m]
    for i in range(x.shape[0]):
        for m in range(M):
            z = 0.0
            for j in range(d):
                z += W[m, j] * x[i, j]
            h[m] = _sigma(z, code)
        for j in range(d):
            acc = 0.0
            for m in range(M):
                acc += V[j, m] * h[m]
            out[i, j] = acc


def sigma_jax(name: str):
    """sigma in JAX, by name."""
    import jax
    import jax.numpy as jnp

    return {"tanh": jnp.tanh, "relu": jax.nn.relu, "gelu": lambda z: jax.nn.gelu(z, approximate=False)}[name]


@functools.cache
def resnet_drift_jax(modes: int, width: int, activation: str):
    """JAX twin of :func:`resnet_drift` for a given (K, M, activation): ``(t, x, p) -> dx``.

    The integrators trace ``p``, so the shapes and the activation cannot be read from it; they
    are fixed here, and the cache returns the same function for the same key (one compile).
    """
    import jax.numpy as jnp

    sigma = sigma_jax(activation)
    K, M = int(modes), int(width)

    def drift(t, x, p):
        v = LAYOUT.unpack(p, {"d": x.shape[1], "modes": K, "width": M})
        c = jnp.cos(jnp.pi * jnp.arange(K) * t)
        return sigma(x @ jnp.tensordot(c, v["AW"], axes=1).T) @ jnp.tensordot(c, v["AV"], axes=1).T

    return drift


def _static(p) -> tuple:
    """(K, M, activation) of a concrete vector: what the JAX twin is specialised to."""
    names = {code: name for name, code in ACTIVATIONS.items()}
    return int(p[MODES]), int(p[WIDTH]), names[int(p[ACTIVATION])]


def _example(rng):
    """Random inputs and the vector of a random smooth weight function and activation."""
    d, M, K = (int(rng.integers(1, 6)) for _ in range(3))
    wf = smooth_weights(rng, d, M, K, rng.uniform(0.5, 2.0))
    return rng.standard_normal((int(rng.integers(1, 5)), d)), pack_params(wf, str(rng.choice(sorted(ACTIVATIONS))))


RESNET_ODE = register(
    Dynamics(
        "resnet_ode",
        LAYOUT,
        resnet_drift,
        resnet_drift_jax,
        integrators.EUCLIDEAN,
        example=_example,
        work=work_size,
        jax_static=_static,
    )
)


def problem(wf: WeightFunction, activation: str) -> integrators.Problem:
    """The neural ODE as an :class:`integrators.Problem` (Euclidean), both backends filled in."""
    return RESNET_ODE.problem(pack_params(wf, activation))


def solve(wf: WeightFunction, activation: str, x0, integrator) -> np.ndarray:
    """x(1) for inputs ``x0`` (B, d): the ODE solved by ``integrator`` over s in [0, 1]."""
    return solve_with_status(wf, activation, x0, integrator)[0]


def solve_with_status(wf: WeightFunction, activation: str, x0, integrator) -> tuple[np.ndarray, int]:
    """(x(1), status): :func:`solve` and the integrator's status of the solve (the inputs are one
    run of the solver: ``integrators.OK``, ``MAX_STEPS`` or ``NONFINITE``), so that a reference
    cut short by max_steps is named as such rather than read as a non-finite number."""
    x0 = np.ascontiguousarray(x0, dtype=np.float64)
    solution = integrator.solve(problem(wf, activation), x0[None], np.array([0.0, 1.0]))
    return solution.states[0, -1], int(solution.status[0])
