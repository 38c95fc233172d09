r"""Linear representability: the map reached at time t by  eps x'' + x' = a x.

Convention: x(0) = 1, x'(0) = 0 (a Momentum ResNet started at v_0 = 0). By linearity the flow of
``eps x'' + x' = A x`` started at (x_0, 0) is psi_eps(A) x_0, so psi_eps(a) on the eigenvalues a of
A is the linear map the depth limit represents. The first-order flow x' = a x reaches e^{a t} > 0.

Closed form, from the roots of  eps r^2 + r - a = 0,  r = alpha +- beta,

    alpha = -1 / (2 eps),   beta = sqrt(Delta) / (2 eps),   Delta = 1 + 4 eps a:

    psi_eps(a; t) = e^{alpha t} (cosh(beta t) - (alpha / beta) sinh(beta t))

which reads  e^{alpha t} (cos(w t) - (alpha / w) sin(w t)),  w = sqrt(-Delta)/(2 eps), for complex
roots (Delta < 0) and  e^{alpha t} (1 - alpha t)  for the double root (Delta = 0).

Sign. For real roots (a >= -1/(4 eps)) psi > 0 at every t: with r_2 <= r_1 both terms of
(r_1 e^{r_2 t} - r_2 e^{r_1 t}) / (r_1 - r_2) are positive when a > 0, |r_2| e^{r_1 t} > |r_1| e^{r_2 t}
when a < 0, and the double root gives e^{alpha t}(1 - alpha t) > 0. So negative values need complex
roots, a < -1/(4 eps). The converse fails: just below the discriminant threshold (w -> 0)
psi -> e^{alpha t}(1 - alpha t) > 0, and psi(t) first vanishes where w t = theta* in (pi/2, pi) solves
theta cos(theta) + |alpha| t sin(theta) = 0, i.e. at

    a*(eps, t) = -(1 + 4 eps^2 w*^2) / (4 eps) < -1/(4 eps),   w* = theta* / t.

Below a*, psi oscillates in sign (zeros at every further root of the same equation).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import brentq

from . import fields
from .limit import solve_second_order


def psi(a, eps, t: float = 1.0) -> np.ndarray:
    """psi_eps(a; t) = x(t) for eps x'' + x' = a x, x(0) = 1, x'(0) = 0 (broadcasts a and eps)."""
    a, eps = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(eps, dtype=np.float64))
    if np.any(eps <= 0):
        raise ValueError("eps must be > 0")
    alpha = -1.0 / (2.0 * eps)
    disc = 1.0 + 4.0 * eps * a
    out = np.empty(a.shape)
    real = disc >= 0
    # Real roots r1 = alpha + beta >= r2 = alpha - beta:
    #   C = e^{alpha t} cosh(beta t) = (e^{r1 t} + e^{r2 t}) / 2
    #   S = e^{alpha t} sinh(beta t) / beta = e^{r2 t} expm1(2 beta t) / (2 beta)   (-> t e^{alpha t})
    # (expm1 avoids the cancellation of e^{r1 t} - e^{r2 t} near the double root).
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        beta = np.sqrt(np.where(real, disc, 0.0)) / (2.0 * eps)
        r1, r2 = alpha + beta, alpha - beta
        C = 0.5 * (np.exp(r1 * t) + np.exp(r2 * t))
        S = np.where(beta * t > 1e-300, np.exp(r2 * t) * np.expm1(2 * beta * t) / (2 * beta), t * np.exp(alpha * t))
        out_real = C - alpha * S
        # Complex roots: S = e^{alpha t} sin(w t) / w = e^{alpha t} t sinc(w t / pi).
        w = np.sqrt(np.where(real, 0.0, -disc)) / (2.0 * eps)
        e = np.exp(alpha * t)
        out_complex = e * (np.cos(w * t) - alpha * t * np.sinc(w * t / np.pi))
    out[real] = out_real[real]
    out[~real] = out_complex[~real]
    return out


def discriminant_threshold(eps) -> np.ndarray:
    """a = -1/(4 eps): below it the roots of eps r^2 + r - a are complex."""
    return -1.0 / (4.0 * np.asarray(eps, dtype=np.float64))


def negativity_threshold(eps: float, t: float = 1.0) -> float:
    """a*(eps, t): the largest a with psi_eps(a; t) = 0; psi > 0 on (a*, inf) and psi < 0 just below.
    Always strictly below the discriminant threshold -1/(4 eps)."""
    k = t / (2.0 * eps)  # |alpha| t

    def h(theta):
        return theta * np.cos(theta) + k * np.sin(theta)

    theta = brentq(h, np.pi / 2, np.pi, xtol=1e-15, rtol=1e-15)
    w = theta / t
    return -(1.0 + 4.0 * eps**2 * w**2) / (4.0 * eps)


def psi_simulated(a, eps: float, t: float = 1.0, backend: str = "numba", method: str = "rk4", **options) -> np.ndarray:
    """psi_eps(a; t) by solving eps x'' + x' = a x with the integrators, one member per a (d = 1)."""
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    out = np.empty(a.shape)
    x0 = np.ones((1, 1))
    for i, ai in enumerate(a):
        p = fields.pack_field("affine", 1, eps=eps, W1=[[ai]])
        out[i] = solve_second_order(p, x0, np.zeros((1, 1)), [0.0, t], backend, method, **options)[0, -1, 0, 0]
    return out


def psi_network(a, eps: float, depth: int, t: float = 1.0) -> np.ndarray:
    """The Momentum ResNet of ``depth`` layers (gamma = 1 - h/eps, f = h a x) from x = 1, v = 0:
    the discrete counterpart of psi_eps(a; t), vectorized over a."""
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    h = t / depth
    gamma = 1.0 - h / eps
    x, v = np.ones(a.shape), np.zeros(a.shape)
    for _ in range(int(depth)):
        v = gamma * v + (1.0 - gamma) * h * a * x
        x = x + v
    return x
