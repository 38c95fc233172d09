r"""Where a two-token run ends, and how long it takes to know (physics.md §1.2).

In u = -artanh(rho) (see :mod:`.rho`) the pair is the one-dimensional diffusion

    du = b(u) dt + a(u) dB,   b = (sigma^2/d)(s tanh u - (d-2) p) - 2 vbar b_w,   a^2 = 2 sigma^2 s / d,

with the softmax weights (a_w, b_w) of rho = -tanh u, p = 2 a_w b_w, s = 1 - p. It ends antipodal
(u -> +inf) or clustered (u -> -inf).

**Exact end-state probability.** With the scale density

    S'(u) = exp( -int_0^u 2 b / a^2 dv ),   2 b / a^2 = tanh v - (d-2) p/s - 2 vbar b_w d / (sigma^2 s),

u(t) - u(0) is a local martingale after the change of variable S, so

    P(u -> +inf | u_0) = (S(u_0) - S(-inf)) / (S(+inf) - S(-inf)),

finite at both ends exactly when both boundaries attract (far out 2b/a^2 tends to constants;
+inf attracts iff its limit g_+ > 0, i.e. cosh 2 beta > d - 2 when vbar = 0). If +inf does not
attract, P = 0; if -inf does not (vbar < 0 only), P = 1. Averaged over the uniform start,
(1 + rho_0)/2 ~ Beta((d-1)/2, (d-1)/2), this is :func:`p_antipodal_exact`. Checks: for d = 2,
S(u) = 2 arctan(e^u) = theta, so P = E theta_0 / pi = 1/2 (theta is a martingale).

**Time to decide.** Far out on each side u is a Brownian motion with drift mu and variance rate
D; reaching a level at distance M takes M/|mu| on average with standard deviation
sqrt(M D / |mu|^3) (inverse Gaussian). :func:`decision_cap` adds, over both sides, that mean plus
CAP_Z standard deviations to the absorbing level, with |mu| floored at RATE_FLOOR / 2: a boundary
whose log-gap rate |lambda| = 2|mu| is below RATE_FLOOR is critical (lambda_- -> 0 at beta_c),
and runs there may stay undecided at the cap; they are counted, never dropped.
"""

from __future__ import annotations

import math

import numpy as np

from .rho import u_thresholds, weights

RATE_FLOOR = 0.05  # log-gap rate per unit time below which a boundary counts as critical
CAP_Z = 6.0  # standard deviations of the hitting time added to its mean
GRID_HALF_WIDTH = 20.0  # |u| beyond which the weights have saturated (to ~e^-40)
GRID_POINTS = 40_001
START_NODES = 256  # Gauss-Jacobi nodes for the average over the uniform start


def _ratio(u, beta_eff, d, sigma, vbar):
    """2 b(u) / a(u)^2 of the u diffusion (sigma > 0)."""
    _, b_w, p, s = weights(-np.tanh(u), beta_eff)
    out = np.tanh(u) - (d - 2) * p / s
    if vbar:
        out = out - 2.0 * vbar * b_w * d / (sigma**2 * s)
    return out


def _log_scale_density(beta_eff, d, sigma, vbar):
    """(grid u, log S'(u) up to a constant, g_-, g_+): the limits of 2b/a^2 at -inf and +inf."""
    u = np.linspace(-GRID_HALF_WIDTH, GRID_HALF_WIDTH, GRID_POINTS)
    g = _ratio(u, beta_eff, d, sigma, vbar)
    steps = 0.5 * (g[1:] + g[:-1]) * np.diff(u)
    integral = np.concatenate([[0.0], np.cumsum(steps)])
    integral -= integral[GRID_POINTS // 2]  # int_0^u
    return u, -integral, float(g[0]), float(g[-1])


def exit_probability(u0, beta_eff, d, sigma=1.0, vbar=0.0):
    """P(u -> +inf | u(0) = u0), the chance that the pair ends antipodal (arrays broadcast)."""
    u0 = np.asarray(u0, dtype=float)
    if sigma <= 0:
        raise ValueError(f"the exit probability needs sigma > 0, got {sigma}")
    u, log_ds, g_minus, g_plus = _log_scale_density(beta_eff, d, sigma, vbar)
    if g_plus <= 0:  # +inf does not attract: every run ends clustered
        return np.zeros_like(u0)
    if g_minus >= 0:  # -inf does not attract
        return np.ones_like(u0)
    ds = np.exp(log_ds - log_ds.max())
    # S(u) - S(-inf): the tail below the grid is exponential with rate -g_-
    inner = np.concatenate([[0.0], np.cumsum(0.5 * (ds[1:] + ds[:-1]) * np.diff(u))])
    below = ds[0] / -g_minus + inner
    total = below[-1] + ds[-1] / g_plus
    return np.interp(u0, u, below / total)


def p_antipodal_exact(beta_eff, d: int, sigma: float = 1.0, vbar: float = 0.0) -> float:
    """P(a pair of i.i.d. uniform tokens ends antipodal) under the exact two-token diffusion."""
    from scipy.special import roots_jacobi

    alpha = (d - 3) / 2.0  # density of rho_0 is proportional to (1 - rho)^alpha (1 + rho)^alpha
    rho, w = roots_jacobi(START_NODES, alpha, alpha)
    h = exit_probability(-np.arctanh(rho), beta_eff, d, sigma, vbar)
    return float(np.sum(w * h) / np.sum(w))


def decision_cap(
    beta_eff, d: int, sigma: float, vbar: float, threshold: float, tol: float, rate_floor: float = RATE_FLOOR
) -> float:
    """Time by which a two-token run has been absorbed at its class with overwhelming
    probability, unless a boundary is critical (rate below ``rate_floor``); see the module doc.
    The absorbing margins are those of :func:`dyn.tokens_sde.absorbing_levels` at the floored
    rates, so the cap stays bounded as a rate tends to zero at beta_c."""
    uc, ua = u_thresholds(threshold)
    log_tol = -math.log(tol) if tol > 0 else 0.0
    k2 = sigma**2 / d
    _, b_anti, p_anti, s_anti = (float(v) for v in weights(-1.0, beta_eff))
    sides = (  # (drift far out, variance rate far out, |class threshold| in u)
        (k2 * (d - 1) / 2 + vbar, k2, -uc),
        (k2 * (s_anti - (d - 2) * p_anti) - 2 * vbar * b_anti, 2 * k2 * s_anti, ua),
    )
    cap = 0.0
    for mu, D, M in sides:
        mu = max(abs(mu), rate_floor / 2)
        M += log_tol * D / (2 * mu)  # the absorbing margin beyond the threshold
        cap += M / mu + CAP_Z * math.sqrt(M * D / mu**3)
    return cap
