"""Depth limits of the Momentum ResNet (physics.md §4).

With N layers on [0, T], h = T / N, residual f_n(x) = h g(x, n h) and

    gamma = 1 - h / eps,

the network is a consistent order-1 scheme of the second-order ODE

    eps x'' + x' = g(x, t),    x(0) = x_0,  x'(0) = v_0 / h,

(with V_n = v_n / h:  V_{n+1} = V_n + (h/eps)(g(x_n, t_n) - V_n),  x_{n+1} = x_n + h V_{n+1}),
so the layer-N state converges to x(T) at rate O(1/N). With gamma held fixed as N grows, v relaxes
to h g within O(1/(1 - gamma)) layers and the network tends to the first-order ODE x' = g instead.

The ODEs are solved by the project's integrators on EUCLIDEAN states: (2, d) rows [x; x'] for
the second-order system, (1, d) for the first-order one.
"""

from __future__ import annotations

import numpy as np

import integrators

from . import fields
from .network import FixedPoint, exact_forward, exact_inverse, forward, inverse


def gamma_for(eps: float, horizon: float, depth: int) -> float:
    """gamma = 1 - h / eps with h = horizon / depth."""
    return 1.0 - (horizon / depth) / eps


def ode_residual(p, horizon: float, depth: int):
    """The residual f_n(x) = h g(x, n h) of the network of ``depth`` layers on [0, horizon]."""
    h = horizon / depth

    def residual(n, x):
        return h * fields.field_numpy(n * h, x, p)

    return residual


def network_states(
    p,
    x0,
    u0,
    horizon: float,
    depth: int,
    *,
    gamma: float | None = None,
    arithmetic: str = "float",
    fmt: FixedPoint = FixedPoint(),
):
    """Layer-N state (x_N, V_N = v_N / h) of the network for the ODE field ``p`` from (x0, x'(0) = u0),
    arrays (E, d). ``gamma`` defaults to 1 - h/eps (eps = p[0]). ``arithmetic``: float or exact.
    Also returns the inversion error max |input - inverse(output)| (0 means bit for bit)."""
    h = horizon / depth
    gamma = gamma_for(p[fields.EPS], horizon, depth) if gamma is None else gamma
    residual = ode_residual(p, horizon, depth)
    x0 = np.asarray(x0, dtype=np.float64)
    v0 = h * np.asarray(u0, dtype=np.float64)
    if arithmetic == "float":
        x, v = forward(x0, v0, gamma, residual, depth)
        with np.errstate(over="ignore", invalid="ignore"):  # a blown-up inverse is the result
            xr, vr = inverse(x, v, gamma, residual, depth)
        err = np.maximum(np.max(np.abs(xr - x0), axis=-1), np.max(np.abs(vr - v0), axis=-1))
        return x, v / h, err
    if arithmetic != "exact":
        raise ValueError(f"arithmetic must be 'float' or 'exact', got {arithmetic!r}")
    start = exact_forward(x0, v0, gamma, residual, 0, fmt)  # the quantized input
    out = exact_forward(x0, v0, gamma, residual, depth, fmt)
    back = exact_inverse(out, gamma, residual, depth, fmt)
    err = np.maximum(
        np.max(np.abs(fmt.to_float(back.x) - fmt.to_float(start.x)), axis=-1),
        np.max(np.abs(fmt.to_float(back.v) - fmt.to_float(start.v)), axis=-1),
    )
    leftover = np.array([any(b != 0 for b in np.ravel(row)) for row in back.buffer])
    err[leftover] = np.inf  # the buffer must come back empty too
    return fmt.to_float(out.x), fmt.to_float(out.v) / h, err


def solve_second_order(p, x0, u0, ts, backend: str = "numba", method: str = "rk4", **options) -> np.ndarray:
    """Solve eps x'' + x' = g(x, t) from x(ts[0]) = x0, x'(ts[0]) = u0 (arrays (E, d)).
    Returns (E, len(ts), 2, d): rows x and x'."""
    x0 = np.asarray(x0, dtype=np.float64)
    state = np.stack([x0, np.broadcast_to(np.asarray(u0, dtype=np.float64), x0.shape)], axis=1)
    return (
        integrators.get(backend, method, **options)
        .solve(fields.SECOND_ORDER.problem(p), state, np.asarray(ts, dtype=np.float64))
        .states
    )


def solve_first_order(p, x0, ts, backend: str = "numba", method: str = "rk4", **options) -> np.ndarray:
    """Solve x' = g(x, t) from x(ts[0]) = x0 (E, d). Returns (E, len(ts), d)."""
    state = np.asarray(x0, dtype=np.float64)[:, None, :]
    return (
        integrators.get(backend, method, **options)
        .solve(fields.FIRST_ORDER.problem(p), state, np.asarray(ts, dtype=np.float64))
        .states[:, :, 0]
    )
