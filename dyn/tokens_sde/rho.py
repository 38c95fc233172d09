r"""Two tokens: the exact one-dimensional SDE of rho = <z_1, z_2> = cos(theta) (physics.md §1.2).

Derived for i.i.d. Gaussian noise (``noise = "gaussian"``) and Vbar = vbar I only: the GOE law
and a general Vbar are simulated in d dimensions (:mod:`.network`, :mod:`.sde`).

With self weight a = 1 / (1 + e^{beta (rho - 1)}), b = 1 - a, p = 2ab, s = 1 - p:

    drho = (sigma^2/d)(1 - rho^2)[(d-2) p - s rho] dt + 2 vbar b (1 - rho^2) dt
           + sigma sqrt(2s/d) (1 - rho^2) dB.

The boundaries rho = +-1 are absorbing for this equation, so we integrate it in
u = log tan(theta/2) = -artanh(rho) (rho = -tanh u; u -> -inf: cluster, u -> +inf: antipodal).
Ito's formula gives an SDE with bounded coefficients on the whole line:

    du = [ (sigma^2/d) (s tanh(u) - (d-2) p) - 2 vbar b ] dt  -  sigma sqrt(2s/d) dB,

and log|z_1 - z_2|^2 = log 4 - softplus(-2u), log|z_1 + z_2|^2 = log 4 - softplus(2u).
Far out, u is a Brownian motion with constant drift, whose slope (times 2, in log|z_1 -+ z_2|^2)
gives the Lyapunov exponents

    lambda_+ = -sigma^2 (d-1)/d,        lambda_- = (2 sigma^2/d) [ (d-1)/(1 + cosh 2 beta) - 1 ]

(vbar = 0), so antipodal pairs attract iff cosh(2 beta) > d - 2. For d = 2 the u-drift is
sigma^2 s tanh(u) / 2, i.e. theta = 2 arctan(e^u) is a martingale.

Absorption: past a classification threshold, a Brownian motion with drift mu toward the boundary
and variance rate D comes back a distance M with probability exp(-2 |mu| M / D); a run is
stopped once that is below ``tol`` (:func:`absorbing_levels`), which changes each run's class
with probability <= tol.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import FASTMATH, NJIT
from integrators.numba.arrays import copy1
from integrators.numba.jit import njit
from integrators.numba.sde_rng import STREAMS, member_streams, normal_pair
from integrators.numba.threads import over_members

from .params import LAYOUT

BETA, SIGMA, VBAR, DIM = (LAYOUT.index(k) for k in ("beta", "sigma", "vbar", "d"))

# Margins larger than this (in u) mean "never absorb" (the boundary barely attracts).
MAX_MARGIN = 1e3


def weights(rho, beta):
    """(a, b, p, s) of the two-token softmax at rho."""
    a = 1.0 / (1.0 + np.exp(beta * (np.asarray(rho, dtype=float) - 1.0)))
    b = 1.0 - a
    p = 2.0 * a * b
    return a, b, p, 1.0 - p


def rho_drift(rho, beta, d, sigma=1.0, vbar=0.0):
    """Drift of the rho SDE."""
    _, b, p, s = weights(rho, beta)
    return (1 - rho**2) * (sigma**2 / d * ((d - 2) * p - s * rho) + 2 * vbar * b)


def rho_diffusion(rho, beta, d, sigma=1.0):
    """Diffusion coefficient of the rho SDE (multiplies dB)."""
    _, _, _, s = weights(rho, beta)
    return sigma * np.sqrt(2 * s / d) * (1 - rho**2)


def lyapunov_plus(d, sigma=1.0):
    """Growth rate of log(1 - rho) (= of log|z_1 - z_2|^2) at rho = +1."""
    return -(sigma**2) * (d - 1) / d


def lyapunov_minus(beta, d, sigma=1.0):
    """Growth rate of log(1 + rho) (= of log|z_1 + z_2|^2) at rho = -1."""
    return 2 * sigma**2 / d * ((d - 1) / (1 + np.cosh(2 * np.asarray(beta, dtype=float))) - 1)


def beta_critical(d):
    """beta_c(d) = arccosh(d - 2) / 2 (0 for d <= 3): antipodal pairs attract iff beta > beta_c."""
    d = np.asarray(d, dtype=float)
    return 0.5 * np.arccosh(np.maximum(d - 2.0, 1.0))


def rho_to_u(rho):
    return -np.arctanh(np.clip(rho, -1.0, 1.0))


def log_gaps_u(u):
    """(log|z_1 - z_2|^2, log|z_1 + z_2|^2) as functions of u."""
    u = np.asarray(u, dtype=float)
    return math.log(4.0) - np.logaddexp(0.0, -2 * u), math.log(4.0) - np.logaddexp(0.0, 2 * u)


def u_thresholds(threshold):
    """(u_cluster, u_antipodal): u < u_cluster iff log|z_1 - z_2|^2 < threshold, and
    u > u_antipodal iff log|z_1 + z_2|^2 < threshold."""
    x = threshold - math.log(4.0)  # log(1/(1+e^{-2u})) = x  <=>  u = -log(e^{-x} - 1)/2
    u = -0.5 * math.log(math.expm1(-x))
    return u, -u


def absorbing_levels(beta_eff, d, sigma, vbar, threshold, tol):
    """Absorbing levels (u_lo, u_hi) beyond the classification levels (see the module doc);
    -inf / +inf where a boundary does not attract, is too weak, or tol = 0."""
    uc, ua = u_thresholds(threshold)
    if tol <= 0 or sigma == 0:
        return -np.inf, np.inf
    log_tol = -math.log(tol)
    # cluster side (u -> -inf): a = b = 1/2
    mu_c = -(sigma**2 / d) * (d - 1) / 2 - vbar
    lo = -np.inf
    if mu_c < 0:
        margin = log_tol * (sigma**2 / d) / (2 * -mu_c)
        lo = uc - margin if margin < MAX_MARGIN else -np.inf
    a, b, p, s = (float(v) for v in weights(-1.0, beta_eff))
    mu_a = (sigma**2 / d) * (s - (d - 2) * p) - 2 * vbar * b
    hi = np.inf
    if mu_a > 0:
        margin = log_tol * (2 * sigma**2 * s / d) / (2 * mu_a)
        hi = ua + margin if margin < MAX_MARGIN else np.inf
    return lo, hi


_U_SIG = types.void(
    types.float64[::1],
    types.int64,
    types.float64,
    types.float64[::1],
    STREAMS,
    types.float64,
    types.float64,
    types.int64,
    types.float64[:, ::1],
    types.int64[::1],
)


@njit(_U_SIG, **NJIT, fastmath=FASTMATH - {"reassoc"})
def _u_euler(u0, steps, h, p, streams, lo, hi, save_every, out, taken):
    """Euler-Maruyama for u, one normal per step, per-member streams; stop at lo / hi.
    ``out`` (E, S): u after steps 0, save_every, ... (a stopped run keeps its last value)."""
    beta, sigma, vbar, d = p[BETA], p[SIGMA], p[VBAR], p[DIM]
    k2 = sigma * sigma / d
    noise = sigma * math.sqrt(2.0 * h / d)
    for e in range(u0.shape[0]):
        st = streams[e].copy()
        u = u0[e]
        out[e, 0] = u
        k = 0
        spare = 0.0
        have = False
        while k < steps:
            if have:
                g = spare
                have = False
            else:
                g, spare = normal_pair(st)
                have = True
            t = math.tanh(u)
            a = 1.0 / (1.0 + math.exp(-beta * (1.0 + t)))  # rho - 1 = -(1 + tanh u)
            b = 1.0 - a
            pp = 2.0 * a * b
            ss = 1.0 - pp
            u += h * (k2 * (ss * t - (d - 2.0) * pp) - 2.0 * vbar * b) - noise * math.sqrt(ss) * g
            k += 1
            if k % save_every == 0:
                out[e, k // save_every] = u
            if u < lo or u > hi:
                break
        for j in range(k // save_every + 1, out.shape[1]):
            out[e, j] = u
        taken[e] = k
        copy1(streams[e], st)


def fixed_steps(horizon: float, dt: float) -> int:
    """Steps of the largest size <= dt that divide [0, horizon]: ceil(horizon / dt)."""
    return max(1, int(math.ceil(horizon / dt * (1 - 1e-9))))


def two_token_u(u0, horizon: float, dt: float, p, rng, lo=-np.inf, hi=np.inf):
    """Integrate the u SDE from u0 (E,) over [0, horizon] with step horizon / fixed_steps(horizon,
    dt), stopping a run at ``lo`` / ``hi``. Returns (u_final (E,), steps taken (E,) int64)."""
    path, taken = two_token_u_path(u0, horizon, dt, p, rng, lo, hi, saves=1)
    return path[:, -1], taken


def two_token_u_path(u0, horizon: float, dt: float, p, rng, lo=-np.inf, hi=np.inf, saves: int = 1):
    """:func:`two_token_u` keeping u at ``saves + 1`` equally spaced times: (u (E, saves + 1),
    steps taken) — the same random numbers. ``saves`` must divide the number of steps."""
    u0 = np.ascontiguousarray(u0, dtype=np.float64)
    steps = fixed_steps(horizon, dt)
    if steps % saves:
        raise ValueError(f"{saves} saves do not divide {steps} steps")
    out = np.empty((u0.shape[0], saves + 1))
    taken = np.empty(u0.shape[0], dtype=np.int64)
    p, streams = np.ascontiguousarray(p, dtype=np.float64), member_streams(rng, u0.shape[0])
    over_members(
        u0.shape[0],
        lambda a, b: _u_euler(
            u0[a:b], steps, horizon / steps, p, streams[a:b], float(lo), float(hi), steps // saves, out[a:b], taken[a:b]
        ),
    )
    return out, taken


def sample_rho0(rng, runs: int, d: int) -> np.ndarray:
    """rho = <z_1, z_2> of two i.i.d. uniform tokens on S^{d-1}: (1 + rho)/2 ~ Beta((d-1)/2, (d-1)/2)."""
    return 2.0 * rng.beta((d - 1) / 2.0, (d - 1) / 2.0, size=runs) - 1.0
