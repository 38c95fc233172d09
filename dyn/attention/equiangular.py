r"""Equiangular token configurations and their scalar ODE (physics.md §1.4).

n unit tokens with <x_i, x_j> = rho for all i != j (rho >= -1/(n-1)) stay equiangular under the
attention flow with Q = K = V = I (no mask, no bias, one head, post-LN), and rho follows

    rho' = 2 e^{beta rho} (1 - rho)(1 + (n - 1) rho) / Z,
    Z = e^beta + (n - 1) e^{beta rho}   (SA),     Z = n   (USA).

From m_i = (e^beta x_i + e^{beta rho} sum_{j != i} x_j) / Z: <m_i, x_j> - <m_i, x_i> rho =
e^{beta rho} (1 + (n - 2) rho - (n - 1) rho^2) / Z = e^{beta rho} (1 - rho)(1 + (n - 1) rho) / Z
is <dx_i/dt, x_j>, and rho' = <dx_i/dt, x_j> + <x_i, dx_j/dt> is twice that.

The start: x_i = sqrt(1 - rho) (e_i - 1/n) + sqrt((1 + (n - 1) rho) / n) e_{n+1} in R^{n+1} (or
R^n when rho = -1/(n-1)), then a uniformly random rotation of R^d, d >= n + 1 (d >= n at the
lower end).
"""

from __future__ import annotations

import math

import numpy as np


def lowest(n: int) -> float:
    """The smallest rho of n equiangular unit vectors, -1/(n - 1) (1 for n = 1)."""
    return -1.0 / (n - 1) if n > 1 else 1.0


def dimension_needed(n: int, rho: float) -> int:
    """The least d that holds n equiangular unit vectors with inner product rho < 1."""
    return n if rho == lowest(n) else n + 1


def check(n: int, d: int, rho: float) -> str | None:
    """Why (n, d, rho) has no equiangular start, or None."""
    if n < 2:
        return "an equiangular start needs n >= 2 tokens"
    if not lowest(n) <= rho < 1.0:
        return f"rho0 must lie in [-1/(n-1), 1) = [{lowest(n):.6g}, 1) for n = {n}, got {rho}"
    if d < dimension_needed(n, rho):
        return f"n = {n} equiangular tokens with rho0 = {rho} need d >= {dimension_needed(n, rho)}, got d = {d}"
    return None


def equiangular_start(rng: np.random.Generator, E: int, n: int, d: int, rho: float) -> np.ndarray:
    """(E, n, d) unit tokens with pairwise inner products rho, each run under its own uniformly
    random rotation (QR of a Gaussian matrix, signs fixed)."""
    problem = check(n, d, rho)
    if problem:
        raise ValueError(problem)
    base = np.zeros((n, d))
    base[:, :n] = math.sqrt(1.0 - rho) * (np.eye(n) - 1.0 / n)
    if n < d:
        base[:, n] = math.sqrt(max(1.0 + (n - 1) * rho, 0.0) / n)
    out = np.empty((E, n, d))
    for e in range(E):
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        out[e] = base @ (q * np.sign(np.diag(r))).T
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def equiangular_rate(rho, beta: float, n: int, usa: bool = False):
    """rho' of the equiangular configuration (see the module doc)."""
    rho = np.asarray(rho, dtype=np.float64)
    z = n if usa else np.exp(beta) + (n - 1) * np.exp(beta * rho)
    return 2.0 * np.exp(beta * rho) * (1.0 - rho) * (1.0 + (n - 1) * rho) / z


def equiangular_rho(times, rho0: float, beta: float, n: int, usa: bool = False, rtol: float = 1e-12) -> np.ndarray:
    """rho(t) at `times` (starting at times[0] from rho0) by an 8th-order adaptive solve of the
    scalar ODE (scipy's DOP853, atol 1e-14)."""
    from scipy.integrate import solve_ivp

    times = np.asarray(times, dtype=np.float64)
    sol = solve_ivp(
        lambda t, r: equiangular_rate(r, beta, n, usa),
        (times[0], times[-1]),
        [rho0],
        t_eval=times,
        rtol=rtol,
        atol=1e-14,
        method="DOP853",
    )
    if not sol.success:
        raise RuntimeError(f"the equiangular ODE solve failed: {sol.message}")
    return sol.y[0]


def mean_inner(x) -> np.ndarray:
    """Mean of <x_i, x_j> over the pairs i < j, shape (...)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-2]
    g = np.einsum("...id,...jd->...ij", x, x)
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    return g[..., upper].mean(axis=-1)
