"""Plain numpy oracles: log-domain Sinkhorn and the Sinkformer flow written the obvious way.

Slow on purpose (tests use them as references, the benchmark as its baseline); no numba.
"""

from __future__ import annotations

import numpy as np


def logsumexp(a, axis):
    m = a.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def sinkhorn_log(S, iterations):
    """K^k after k = ``iterations`` alternating normalizations (rows first) of exp(S)."""
    n, m = S.shape
    f, g = np.zeros(n), np.zeros(m)
    for k in range(1, iterations + 1):
        if k % 2 == 1:
            f = -logsumexp(S + g[None, :], axis=1)
        else:
            g = -logsumexp(S + f[:, None], axis=0)
    return np.exp(S + f[:, None] + g[None, :])


def heat_velocity(x, alpha, tau, iterations):
    """v_i = -(2 alpha / tau) (sum_j K_ij x_j - x_i), K = Sinkhorn of the Gaussian kernel."""
    diff = x[:, None, :] - x[None, :, :]
    S = -(diff**2).sum(axis=-1) / (2 * tau)
    K = sinkhorn_log(S, iterations)
    return -(2 * alpha / tau) * (K @ x - K.sum(axis=1)[:, None] * x)


def heat_flow_euler(x0, alpha, tau, iterations, dt, steps):
    """Explicit Euler on the heat-setting flow, the plan recomputed at every step."""
    x = np.array(x0, dtype=np.float64)
    for _ in range(steps):
        x = x + dt * heat_velocity(x, alpha, tau, iterations)
    return x
