r"""Stationary laws of the mean-field equation on the circle (Q = K = V = I), traced as a branch
of the order parameter against the noise (physics.md §1.3; the linear theory is in :mod:`.theory`).

A stationary law has zero flux, rho v[rho] = (sigma^2/2) rho', so with v = (1/beta)(log-)gradient
(:mod:`.theory`):

    USA: rho ∝ exp(kappa N[rho]),      SA: rho ∝ N[rho]^kappa,      kappa = 2/(beta sigma^2),

N[rho](theta) = int e^{beta cos(theta - phi)} rho(phi) d phi. For a law even about its cluster
at theta = 0, with r_k = int cos(k theta) rho and the scaled kernel g_k = I_k(beta) e^{-|beta|},

    N e^{-|beta|} = g_0 + 2 sum_{k=1}^{K} g_k r_k cos(k theta),

so the law is a function of (r_1..r_K, kappa) and stationarity is the fixed point
r_k = int cos(k theta) rho_{r,kappa}(theta) d theta, k = 1..K (K from the kernel's tail, 1e-14).

**Branch.** The clustered branch leaves the uniform law at sigma_c. It is traced by natural
continuation in its order parameter s = r_1 (the unknowns r_2..r_K and kappa; Newton with the
exact Jacobian d<cos k theta>/dy = Cov(cos k theta, d log rho/dy), trapezoid quadrature on a
fine grid, spectrally accurate). Along it, sigma(s) = sqrt(2/(beta kappa)) (USA: kappa carries
e^{|beta|}). Stability (exchange of stability at folds, for this gradient flow): a point is
stable iff sigma decreases along the branch (d sigma/ds < 0); a supercritical branch is stable
from the start, a subcritical one (USA: I_2/I_1 > 1/2, beta > 2.45) is unstable up to its fold,
sigma_* = max_s sigma(s) > sigma_c, and stable beyond. Between sigma_c and sigma_* both the
uniform law and the clustered one are stable: the hysteresis window.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .kernel import circle_coefficients, fourier_order
from .theory import _normalization

QUADRATURE = 2048
KERNEL_TOL = 1e-14
NEWTON_TOL = 1e-12
NEWTON_ITERATIONS = 40


@dataclass(frozen=True)
class Branch:
    """A branch of stationary laws: order parameter r, noise sigma, stability (arrays)."""

    r: np.ndarray
    sigma: np.ndarray
    stable: np.ndarray


class _SelfConsistency:
    def __init__(self, beta: float, normalization: str):
        self.beta = float(beta)
        if not self.beta > 0:
            raise ValueError(f"the clustered branch is traced for beta > 0, got {beta!r}")
        self.usa = _normalization(normalization) == "USA"
        self.K = max(fourier_order(self.beta, KERNEL_TOL), 2)
        self.g = circle_coefficients(self.beta, self.K)
        theta = 2 * math.pi * np.arange(QUADRATURE) / QUADRATURE
        self.cos = np.cos(np.outer(np.arange(1, self.K + 1), theta))  # (K, Q)

    def law(self, r, kappa):
        """(rho on the grid (probability weights), d log rho / d(r_1..r_K, kappa) before centring)."""
        Nt = self.g[0] + 2.0 * (self.g[1:] * r) @ self.cos
        if not self.usa and Nt.min() <= 0:  # moments no law has: N must stay positive
            return None, None
        if self.usa:
            E = kappa * Nt
            dE = np.vstack([2.0 * kappa * self.g[1:, None] * self.cos, Nt[None]])
        else:
            E = kappa * np.log(Nt)
            dE = np.vstack([2.0 * kappa * self.g[1:, None] * self.cos / Nt, np.log(Nt)[None]])
        w = np.exp(E - E.max())
        return w / w.sum(), dE

    def residual(self, r, kappa):
        rho, dE = self.law(r, kappa)
        if rho is None:
            return None, None
        moments = self.cos @ rho
        centred = dE - (dE @ rho)[:, None]
        jac = (self.cos * rho) @ centred.T  # d <cos k theta> / d y = Cov(cos k, dE/dy)
        return moments, jac

    def sigma(self, kappa):
        scale = math.exp(self.beta) if self.usa else 1.0  # USA: kappa multiplies N e^{-beta}
        return math.sqrt(2.0 * scale / (self.beta * kappa)) if kappa > 0 else math.inf

    def critical_kappa(self):
        return 1.0 / self.g[1] if self.usa else self.g[0] / self.g[1]

    def solve(self, s, r, kappa):
        """Newton on (r_2..r_K, kappa) with r_1 = s; returns (r, kappa) or None."""
        r = r.copy()
        r[0] = s
        for _ in range(NEWTON_ITERATIONS):
            moments, jac = self.residual(r, kappa)
            if moments is None:
                return None
            F = r - moments
            J = -jac  # d(r - m)/dy
            J[np.arange(self.K), np.arange(self.K)] += 1.0  # dr_k/dr_k
            J = J[:, 1:]  # unknowns r_2..r_K, kappa (r_1 = s fixed)
            try:
                step = np.linalg.solve(J, -F)
            except np.linalg.LinAlgError:
                return None
            r[1:] += step[:-1]
            kappa += step[-1]
            if not (np.all(np.isfinite(r)) and math.isfinite(kappa)) or kappa <= 0:
                return None
            if np.abs(step).max() < NEWTON_TOL * max(1.0, abs(kappa)):
                return r, kappa
        return None


def circle_branch(beta: float, normalization: str = "USA", r_max: float = 0.97,
                  steps: int = 60) -> Branch:
    """The clustered branch from the uniform law (r -> 0, sigma -> sigma_c) to r = r_max, on
    ``steps`` equally spaced values of r; it stops early where Newton fails (for SA near r = 1
    its iterates can leave the moments where N > 0)."""
    if not 0 < r_max < 1:
        raise ValueError(f"r_max must be in (0, 1), got {r_max!r}")
    if isinstance(steps, bool) or int(steps) != steps or steps < 3:
        raise ValueError(f"steps must be an integer >= 3, got {steps!r}")
    sc = _SelfConsistency(beta, normalization)
    s_values = np.linspace(r_max / steps, r_max, steps)
    r = np.zeros(sc.K)
    kappa = sc.critical_kappa()
    rs, sigmas = [], []
    previous = None
    for s in s_values:
        guess_r, guess_k = r, kappa
        if previous is not None:  # secant predictor
            guess_r = 2 * r - previous[0]
            guess_k = 2 * kappa - previous[1]
        found = sc.solve(s, guess_r, guess_k) or sc.solve(s, r, kappa)
        if found is None:
            break
        previous = (r, kappa)
        r, kappa = found
        rs.append(s)
        sigmas.append(sc.sigma(kappa))
    rs, sigmas = np.array(rs), np.array(sigmas)
    slope = np.gradient(sigmas, rs) if len(rs) > 1 else np.full(len(rs), -1.0)
    return Branch(rs, sigmas, slope < 0)


def fold(betas, normalization: str = "USA", steps: int = 40) -> np.ndarray:
    """sigma_* (the largest noise with a clustered stationary law) for each beta: the maximum of
    sigma along the branch when it is subcritical, else NaN (continuous transition)."""
    out = []
    for beta in np.atleast_1d(np.asarray(betas, dtype=float)):
        branch = circle_branch(beta, normalization, steps=steps)
        if len(branch.r) < 3 or branch.sigma[1] <= branch.sigma[0]:
            out.append(np.nan)
            continue
        i = int(np.argmax(branch.sigma))
        if 0 < i < len(branch.r) - 1:  # parabola through the three points around the maximum
            y0, y1, y2 = branch.sigma[i - 1:i + 2]
            denom = y0 - 2 * y1 + y2
            out.append(y1 - (y2 - y0) ** 2 / (8 * denom) if denom < 0 else y1)
        else:
            out.append(branch.sigma[i])
    return np.array(out)
