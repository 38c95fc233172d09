r"""Critical attention scaling (Chen, Lin, Polyanskiy, Rigollet, arXiv 2510.05554).

Scores ``beta_n <x_i, x_j>`` with ``beta_n = gamma log n`` (Q = K = V = I, softmax, post-LN flow
on the sphere). Only the abstract and public summaries of the paper could be read here; what
follows is derived in this module from the engine's equiangular reduction.

**One layer.** For n equiangular unit tokens (``<x_i, x_j> = rho``, i != j) the weight of a
token on itself is ``e^beta / (e^beta + (n - 1) e^{beta rho})``, i.e. with ``beta = gamma log n``::

    w_self = 1 / (1 + (n - 1) n^{-gamma (1 - rho)}).

As n grows, ``(n - 1) n^{-gamma(1 - rho)} ~ n^{1 - gamma(1 - rho)}`` tends to infinity (w_self
-> 0: every token averages all the others, collapse) for ``gamma < gamma_c`` and to 0 (w_self ->
1: attention is the identity) for ``gamma > gamma_c``, with

    gamma_c(rho) = 1 / (1 - rho).

At finite n, w_self = 1/2 exactly at ``gamma = log(n - 1) / ((1 - rho) log n)``, and w_self is a
logistic function of ``(gamma - gamma_c)(1 - rho) log n``: the window shrinks like 1 / log n.

**The flow.** Equiangular tokens stay equiangular, and rho follows the scalar ODE of
:mod:`dyn.attention.equiangular`, written here without overflow as

    rho' = 2 (1 - rho)(1 + (n - 1) rho) / (e^{beta (1 - rho)} + n - 1).

In R^{n+1}, ``x_i(t) = a(t) u_i + b(t) e`` with ``u_i = e_i - 1/n`` (``|u_i|^2 = (n - 1)/n``,
``sum_i u_i = 0``), ``a = sqrt(1 - rho)``, ``b = sqrt((1 + (n - 1) rho) / n)``: the flow is
equivariant under permutations of the tokens, so ``x_i(t) = a' x_i(0) + b' sum_j x_j(0)``, which
keeps the frame (u_i, e). A token's displacement over the horizon T is therefore, with no
cancellation at large n,

    |x_i(T) - x_i(0)|^2 = (a_T - a_0)^2 (n - 1)/n + (b_T - b_0)^2.

For a short horizon the displacement is T |x_i'(0)|, proportional to ``1 - w_self`` (the
direction towards the others does not depend on gamma), so the displacement's ratio to its
gamma = 0 value is ``(1 - w_self(gamma)) / (1 - 1/n)`` and crosses 1/2 where w_self ~ 1/2. Over a
horizon of order one the collapse feeds itself (rho grows, gamma_c(rho) = 1/(1 - rho) grows past
gamma), and the crossover gamma_1/2(n), where the displacement is half its gamma = 0 value, sits
above gamma_c by a correction that vanishes like log log n / log n. With ``gamma = gamma_c (1 +
eps)`` and ``rho = rho_0 + eta``, ``gamma (1 - rho) - 1 = eps - gamma eta``; for rho_0 > 0
(where ``1 + (n - 1) rho ~ n rho``) ``eta' ~ 2 rho_0 (1 - rho_0) e^{-log n (eps - gamma eta)}``,
so ``e^{-gamma eta log n}`` falls linearly in time and eta blows up at ``t* = n^eps / (2 rho_0
log n)`` (using gamma (1 - rho_0) ~ 1). The displacement is half its gamma = 0 value when t* is
a fixed fraction of T, so

    gamma_1/2(n) = gamma_c (1 + (log log n + C) / log n) + ...,   C = C(T, rho_0).

A straight line against 1/log n misses the log log n term (it extrapolates 7% above gamma_c
for rho = 0.5 and 0.9 over n = 10^4 ... 10^8); :func:`extrapolate` fits this law instead. For
rho_0 = 0 the collapse does not feed itself over the horizon (rho stays O(1/n)): the ratio is
``(e^{T s} - 1) / (e^T - 1)`` with ``s = 1 - w_self``, so ``gamma_1/2 = 1 - log(s/(1 - s)) /
log n`` with ``s = log((e^T + 1) / 2) / T``, a pure 1/log n correction (:func:`rho_zero_crossover`).

**Particles.** Starts near equiangular (``x_i = sqrt(rho) e + sqrt(1 - rho) g_i``, g_i uniform on
the unit sphere of e's complement in R^d) and i.i.d. starts (``x_i`` the direction of
``sqrt(rho/(1 - rho)) e + xi_i``, ``xi_i ~ N(0, I_d / d)``, mean inner product ~ rho) have
pairwise inner products ``rho + (1 - rho) zeta_ij`` with ``zeta_ij`` of variance about 1/d.
Then ``sum_{j != i} e^{beta <x_i, x_j>} ~ (n - 1) e^{beta rho + beta^2 (1 - rho)^2 / (2 d)}``
(annealed, while beta (1 - rho) / sqrt(d) is below sqrt(2 log n)), so w_self = 1/2 where
``v = gamma (1 - rho) log n`` solves ``v^2 / (2 d) - v + log(n - 1) = 0``: the finite-d
crossover ``d (1 - sqrt(1 - 2 log(n - 1) / d)) / ((1 - rho) log n)`` (:func:`finite_d_crossover`),
which tends to the equiangular one as d / log^2 n grows.
"""

from __future__ import annotations

import math

import numpy as np

STARTS = ("near_equiangular", "iid")


def critical_gamma(rho):
    """gamma_c(rho) = 1 / (1 - rho)."""
    rho = np.asarray(rho, dtype=np.float64)
    return 1.0 / (1.0 - rho)


def self_weight(gamma, n, rho):
    """The one-layer weight of an equiangular token on itself, 1 / (1 + (n - 1) n^{-gamma(1 - rho)})."""
    gamma, n, rho = (np.asarray(v, dtype=np.float64) for v in (gamma, n, rho))
    return 1.0 / (1.0 + (n - 1.0) * np.exp(-gamma * (1.0 - rho) * np.log(n)))


def half_weight_gamma(n, rho):
    """Where the self weight is exactly 1/2: log(n - 1) / ((1 - rho) log n)."""
    n = np.asarray(n, dtype=np.float64)
    return np.log(n - 1.0) / ((1.0 - np.asarray(rho)) * np.log(n))


def finite_d_crossover(n, rho, d):
    """The self weight's 1/2 crossing for starts with inner products rho + (1 - rho) zeta,
    Var zeta = 1/d (module doc); NaN where 2 log(n - 1) > d (no annealed crossing)."""
    n = np.asarray(n, dtype=np.float64)
    root = 1.0 - 2.0 * np.log(n - 1.0) / d
    v = np.where(root >= 0, d * (1.0 - np.sqrt(np.abs(root))), np.nan)
    return v / ((1.0 - np.asarray(rho)) * np.log(n))


def _check(n: float, rho: float, horizon: float) -> None:
    if not n >= 2:
        raise ValueError(f"need n >= 2 tokens, got {n}")
    if not -1.0 / (n - 1.0) <= rho < 1.0:
        raise ValueError(f"rho must lie in [-1/(n-1), 1), got {rho}")
    if not horizon > 0:
        raise ValueError(f"the horizon must be > 0, got {horizon}")


def rho_path(gamma: float, n: float, rho: float, times, rtol: float = 1e-11) -> np.ndarray:
    """rho(t) of the equiangular flow at beta = gamma log n, from rho at times[0] (the scalar ODE
    in its overflow-free form; scipy's DOP853, atol 1e-15)."""
    from scipy.integrate import solve_ivp

    times = np.asarray(times, dtype=np.float64)
    _check(n, rho, times[-1] - times[0])
    beta = gamma * math.log(n)

    def rate(t, r):
        r = min(r[0], 1.0)
        return [2.0 * (1.0 - r) * (1.0 + (n - 1.0) * r) / (math.exp(beta * (1.0 - r)) + n - 1.0)]

    sol = solve_ivp(rate, (times[0], times[-1]), [rho], t_eval=times, rtol=rtol, atol=1e-15, method="DOP853")
    if not sol.success:
        raise RuntimeError(f"the equiangular ODE solve failed: {sol.message}")
    return sol.y[0]


def displacement(gamma: float, n: float, rho: float, horizon: float) -> float:
    """|x_i(T) - x_i(0)| of an equiangular token over the horizon T (module doc)."""
    rho_t = rho_path(gamma, n, rho, [0.0, horizon])[-1]
    a0, a1 = math.sqrt(1.0 - rho), math.sqrt(max(1.0 - rho_t, 0.0))
    b0 = math.sqrt((1.0 + (n - 1.0) * rho) / n)
    b1 = math.sqrt((1.0 + (n - 1.0) * rho_t) / n)
    return math.sqrt((a1 - a0) ** 2 * (n - 1.0) / n + (b1 - b0) ** 2)


def displacement_ratio(gamma: float, n: float, rho: float, horizon: float) -> float:
    """The displacement over the horizon divided by its gamma = 0 value."""
    return displacement(gamma, n, rho, horizon) / displacement(0.0, n, rho, horizon)


def crossover(n: float, rho: float, horizon: float, xtol: float = 1e-10) -> float:
    """gamma_1/2(n): where the equiangular displacement is half its gamma = 0 value (Brent's
    root on [0, 4 gamma_c + 4], where the ratio falls from 1 to far below 1/2)."""
    from scipy.optimize import brentq

    _check(n, rho, horizon)
    zero = displacement(0.0, n, rho, horizon)
    return brentq(
        lambda g: displacement(g, n, rho, horizon) / zero - 0.5, 0.0, 4.0 * float(critical_gamma(rho)) + 4.0, xtol=xtol
    )


def rho_zero_crossover(n, horizon: float):
    """gamma_1/2(n) for rho = 0 to first order in 1/n (module doc): 1 - log(s/(1 - s)) / log n,
    s = log((e^T + 1) / 2) / T."""
    s = math.log((math.exp(horizon) + 1.0) / 2.0) / horizon
    return 1.0 - math.log(s / (1.0 - s)) / np.log(np.asarray(n, dtype=float))


def grid_crossover(gammas, ratios) -> float:
    """gamma where the measured ratios (against increasing gammas) first fall below 1/2, by
    linear interpolation between the two grid points around it; NaN if they never do."""
    gammas, ratios = np.asarray(gammas, dtype=float), np.asarray(ratios, dtype=float)
    below = np.flatnonzero(ratios < 0.5)
    if below.size == 0 or below[0] == 0 or not np.isfinite(ratios[: below[0] + 1]).all():
        return math.nan
    k = below[0]
    g0, g1, r0, r1 = gammas[k - 1], gammas[k], ratios[k - 1], ratios[k]
    return float(g0 + (g1 - g0) * (r0 - 0.5) / (r0 - r1))


def extrapolate(ns, crossings, rho: float) -> tuple[float, float]:
    """(g_inf, C) of the least-squares fit of the derived finite-n law (module doc)

        gamma_1/2(n) = g_inf (1 + [rho > 0] log(log n) / log n) + C / log n,

    linear in (g_inf, C): g_inf is the n -> infinity extrapolation. For rho = 0 the log log
    term is absent (the collapse does not feed itself: rho' ~ 2 / (n^kappa + n) while rho ~ 1/n)
    and the law is the plain fit against 1/log n."""
    logs = np.log(np.asarray(ns, dtype=float))
    feeds = 1.0 if rho > 0 else 0.0
    design = np.stack([1.0 + feeds * np.log(logs) / logs, 1.0 / logs], axis=1)
    (g_inf, c), *_ = np.linalg.lstsq(design, np.asarray(crossings, dtype=float), rcond=None)
    return float(g_inf), float(c)


def near_equiangular_start(rng: np.random.Generator, E: int, n: int, d: int, rho: float) -> np.ndarray:
    """(E, n, d): sqrt(rho) e + sqrt(1 - rho) g_i, g_i uniform on the unit sphere of e^perp,
    under a uniformly random rotation per run (module doc)."""
    if not 0.0 <= rho < 1.0 or d < 2:
        raise ValueError(f"need 0 <= rho < 1 and d >= 2, got rho = {rho}, d = {d}")
    g = rng.standard_normal((E, n, d - 1))
    g /= np.linalg.norm(g, axis=-1, keepdims=True)
    x = np.concatenate([np.full((E, n, 1), math.sqrt(rho)), math.sqrt(1.0 - rho) * g], axis=-1)
    return _rotated(rng, x)


def iid_start(rng: np.random.Generator, E: int, n: int, d: int, rho: float) -> np.ndarray:
    """(E, n, d): the directions of sqrt(rho / (1 - rho)) e + xi_i, xi_i ~ N(0, I_d / d) i.i.d.,
    under a uniformly random rotation per run (module doc)."""
    if not 0.0 <= rho < 1.0 or d < 2:
        raise ValueError(f"need 0 <= rho < 1 and d >= 2, got rho = {rho}, d = {d}")
    x = rng.standard_normal((E, n, d)) / math.sqrt(d)
    x[..., 0] += math.sqrt(rho / (1.0 - rho))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    return _rotated(rng, x)


def _rotated(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    d = x.shape[-1]
    out = np.empty_like(x)
    for e in range(x.shape[0]):
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        out[e] = x[e] @ (q * np.sign(np.diag(r))).T
    return np.ascontiguousarray(out / np.linalg.norm(out, axis=-1, keepdims=True))


def token_displacement(states: np.ndarray) -> np.ndarray:
    """Mean over tokens of |x_i(T) - x_i(0)| for states (E, times, n, d): shape (E,)."""
    return np.linalg.norm(states[:, -1] - states[:, 0], axis=-1).mean(axis=-1)
