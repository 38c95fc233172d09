"""Checks and bounds the Momentum ResNet sweeps share (systems momentum_limit, momentum_linear,
momentum_optimize)."""

from __future__ import annotations

import math

from ..core.errors import ScenarioError

# eps (the mass): gamma = 1 - h/eps must stay distinguishable from 1 in float64 for steps
# h >= 1e-9 (h/eps >= 1e-15), and eps^2 w^2 of the first zero a*(eps) finite (it raised
# OverflowError past eps ~ 1e154)
EPS_MAX = 1e6
# the size of the random tanh field g: the states move by at most scale x T, far inside float64
SCALE_MAX = 1e3
# a of g(x) = a x: e^{a T} (and psi_eps(a) ~ e^{r_1 T}, r_1 <= a) must stay below float64's
# 1.8e308, so a T <= GROWTH_LOG (checked against the horizon); |a| <= A_MIN, past which the
# oscillation sqrt(|a| / eps) outruns the steps the ODE solvers and the network take
GROWTH_LOG = 700.0
A_MIN = 1e4
# eta of the heavy ball: the iteration converges iff eta lambda_max < 2 (1 + gamma); a diverging
# one grows like r^k and is refused once r^iterations passes e^HEAVY_BALL_LOG (its distances'
# squares, in the standard error, stay finite)
ETA_MAX = 1e6
HEAVY_BALL_LOG = 300.0


def check_second_order_gamma(spec) -> None:
    """gamma = 1 - h/eps with h = T/depth must be positive (else the network is not invertible)."""
    h = spec.horizon / spec["depth"]
    if h >= spec["eps"]:
        raise ScenarioError(
            "params.depth",
            f"gamma = 1 - h/eps must be > 0: depth {spec['depth']} with eps = {spec['eps']} gives h = {h:.3g} >= eps",
        )


def check_linear_growth(spec) -> None:
    """a T <= GROWTH_LOG: e^{a T} and psi_eps(a; T) stay finite."""
    a, T = spec["a"], spec.horizon
    if a * T > GROWTH_LOG:
        raise ScenarioError(
            "params.a",
            f"a T = {a:g} x {T:g} = {a * T:.4g} > {GROWTH_LOG:g}: "
            "e^{a T} (and psi_eps(a; T)) exceed float64 (1.8e308); lower a or "
            "integrator.horizon",
        )


def heavy_ball_rate(kappa: float, gamma: float, eta: float) -> float:
    """The largest spectral radius of the heavy-ball layer over eigenvalues lambda in
    [1/kappa, 1]: the roots of z^2 - (1 + gamma - eta lambda) z + gamma = 0 have modulus
    sqrt(gamma) when complex, else (|b| + sqrt(b^2 - 4 gamma)) / 2 with b = 1 + gamma - eta
    lambda, largest where |b| is, at an end of the interval (b is linear in lambda)."""
    rate = math.sqrt(gamma)
    for lam in (1.0 / kappa, 1.0):
        b = 1.0 + gamma - eta * lam
        disc = b * b - 4.0 * gamma
        if disc >= 0:
            rate = max(rate, (abs(b) + math.sqrt(disc)) / 2.0)
    return rate


def check_heavy_ball_growth(spec) -> None:
    """Refuse a heavy ball that diverges past float64 within its iterations (see HEAVY_BALL_LOG)."""
    rate = heavy_ball_rate(spec["kappa"], spec["gamma"], spec["eta"])
    if rate > 1.0 and spec["iterations"] * math.log(rate) > HEAVY_BALL_LOG:
        limit = 2.0 * (1.0 + spec["gamma"])
        raise ScenarioError(
            "params.eta",
            f"the heavy ball diverges at eta = {spec['eta']:g}, "
            f"gamma = {spec['gamma']:g} (it converges iff eta lambda_max < "
            f"2 (1 + gamma) = {limit:g}, lambda_max = 1): |x_k - x*| grows like "
            f"{rate:.4g}^k, past e^{HEAVY_BALL_LOG:g} within the "
            f"{spec['iterations']} iterations; lower eta or the iterations",
        )
