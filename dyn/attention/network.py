"""The discrete post-norm transformer whose depth limit is the attention flow.

One layer with step ``h = T / L``::

    x_i <- normalize(x_i + h m_i),     m_i = sum_j A_ij V x_j     (all tokens updated together)

``L`` layers of this map are the projected explicit Euler scheme of the attention flow on the
sphere, so the layer-L state converges to the flow at time ``T`` with error O(h). It is run as
exactly that: the integrators' Euler scheme on the raw mean field with the `POSTNORM` geometry
(retraction, no projection), so it shares their ensemble kernels.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import integrators
from integrators.core.geometry import POSTNORM

from ..core.dynamics import Dynamics, register
from .flow import _as_tokens, _example, attention_mean_field, attention_mean_field_jax, work_size
from .params import LAYOUT, pack_params

UNIT_TOLERANCE = 1e-12  # rows closer than this to unit norm are taken as they are

# Explicit Euler on the POSTNORM geometry (retraction, no projection) of the raw mean field is
# the post-norm residual layer x_i <- normalize(x_i + h m_i).
POSTNORM_NETWORK = register(
    Dynamics(
        "attention_postnorm",
        LAYOUT,
        attention_mean_field,
        attention_mean_field_jax,
        POSTNORM,
        example=_example,
        work=work_size,
    )
)


def save_layers(depth: int, save_every: int | None = None, save_at=None) -> np.ndarray:
    """Sorted unique layer indices to record: ``save_at`` if given, else every ``save_every``-th
    layer plus the last, else ``[0, depth]``. Layer 0 is the input; layer k is at time ``k h``."""
    if save_at is not None:
        layers = np.unique(np.asarray(save_at, dtype=np.int64))
        if layers.size == 0 or layers[0] < 0 or layers[-1] > depth:
            raise ValueError(f"save_at must hold layer indices in [0, {depth}]")
        return layers
    if save_every is None:
        return np.array([0, depth], dtype=np.int64)
    if int(save_every) < 1:
        raise ValueError(f"save_every must be >= 1, got {save_every}")
    return np.unique(np.append(np.arange(0, depth + 1, int(save_every)), depth)).astype(np.int64)


def network_layers(
    problem: integrators.Problem, x0, depth: int, horizon: float, *, save_every: int | None = None, save_at=None
) -> np.ndarray:
    """``depth`` layers x <- R(x + h P_x f(x)), h = horizon / depth, of ``problem`` (explicit
    Euler on its geometry: POSTNORM gives a post-norm residual layer, EUCLIDEAN a plain residual
    layer), from x0 of shape (E, n, d). States (E, S, n, d) at the layers of
    :func:`save_layers`; layer k is at time k h."""
    return network_solution(problem, x0, depth, horizon, save_every=save_every, save_at=save_at).states


def network_solution(
    problem: integrators.Problem,
    x0,
    depth: int,
    horizon: float,
    *,
    save_every: int | None = None,
    save_at=None,
    observer: integrators.Observer | None = None,
) -> integrators.Solution:
    """:func:`network_layers` as the solve's :class:`integrators.Solution`; with an `observer`
    its rows (E, S, columns) at the saved layers instead of the states (none is stored)."""
    x0 = np.ascontiguousarray(x0, dtype=np.float64)
    if isinstance(depth, bool) or int(depth) != depth or int(depth) < 1:
        raise ValueError(f"depth must be an integer >= 1, got {depth!r}")
    depth = int(depth)
    horizon = float(horizon)
    if not np.isfinite(horizon) or horizon <= 0:
        raise ValueError(f"horizon must be finite and > 0, got {horizon}")
    layers = save_layers(depth, save_every, save_at)
    h = horizon / depth
    start = [0] if layers[0] != 0 else []  # the solve starts at layer 0 whatever is saved
    ts = np.concatenate([start, layers]) * h
    sol = integrators.get("numba", "euler", dt=h).solve(problem, x0, ts, observer=observer)
    if not start:
        return sol
    if observer is None:
        return replace(sol, states=sol.states[:, len(start) :])
    return replace(sol, observations=sol.observations[:, len(start) :])


def postnorm_layers(
    x0,
    depth: int,
    horizon: float,
    beta: float,
    normalization: str = "SA",
    Q=None,
    K=None,
    V=None,
    *,
    save_every: int | None = None,
    save_at=None,
    p=None,
) -> np.ndarray:
    """Run ``depth`` post-norm layers ``x_i <- normalize(x_i + h sum_j A_ij V x_j)``, ``h = horizon / depth``.

    ``x0``: (E, n, d) or (n, d) (rows not of unit norm are normalized first). Returns states of shape
    (E, S, n, d) (or (S, n, d)) at the layers of :func:`save_layers` (default: input and output).
    A packed ``p`` (see ``params``) overrides beta/normalization/Q/K/V.
    """
    x0 = _as_tokens(x0)
    single = x0.ndim == 2
    x0 = x0[None] if single else x0
    d = x0.shape[-1]
    p = pack_params(beta, d, normalization, Q, K, V) if p is None else p
    norms = np.linalg.norm(x0, axis=-1, keepdims=True)
    if np.any(np.abs(norms - 1.0) > UNIT_TOLERANCE):  # unit tokens pass through bit for bit
        x0 = x0 / norms
    states = network_layers(POSTNORM_NETWORK.problem(p), x0, depth, horizon, save_every=save_every, save_at=save_at)
    return states[0] if single else states
