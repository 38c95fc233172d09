r"""Measured growth rates of the Fourier modes k = 1..K around the uniform law on the circle: from
the mean-field PDE and from the particles (physics.md §1.3), to set against
:func:`dyn.noisy.theory.growth_rates`.

Mode k is measured over the window [0, tau_k], tau_k = tau / k (the rates grow like k^2 and the
noise of an empirical moment like k sqrt(tau_k / n): a compromise that keeps |lambda_k| tau_k
moderate and the particle estimates of high modes usable), from a law perturbed in mode k only:

- **PDE**: rho_0 = (1 + 2 eps cos k theta)/(2 pi) with eps small (1e-6): the rate is
  log(|m_k(tau_k)| / |m_k(0)|) / tau_k, exact to O(eps^2) (the quadratic terms feed the modes 0 and
  2k only) plus the ETDRK4 error, whose step is at most 0.05 / (the transport gain). If by the
  end of the window any mode that is not a multiple of k (seeded by rounding and unstable)
  exceeds 1e-3 of mode k, the window was too long for a linear measurement: NaN.
- **particles**: n tokens of the law (1 + 2a cos k theta)/(2 pi) (stratified,
  :func:`dyn.noisy.init.perturbed_circle`), the SDE with the O(nK) drift; the rate of a run is
  log( Re(S_k(tau_k) conj S_k(0)) / |S_k(0)|^2 ) / tau_k with S_k the empirical moment. Its
  errors: O(a^2) nonlinearity, O(1/n) finite size, the Euler-Maruyama O(dt), and the noise of
  S_k (relative O(k sigma sqrt(tau_k / n) / a)), which the mean over runs averages out but for
  the bias of a log of a noisy ratio, -Var/(2 tau_k) = O(1/(n a^2)). A run whose ratio is not
  positive (noise larger than the signal) gives NaN.
"""

from __future__ import annotations

import math

import numpy as np

from . import fourier, init, pde
from .observables import circle_moments
from .params import pack_fourier

STEP_GAIN = 0.05  # ETDRK4 step <= STEP_GAIN / gain: (gain h)^4 ~ 6e-6 relative per unit rate
LINEAR_SHARE = 1e-3  # other modes above this share of mode k: not a linear measurement


def windows(tau: float, K: int) -> np.ndarray:
    """tau_k = tau / k, k = 1..K."""
    tau = float(tau)
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be a positive number, got {tau!r}")
    return tau / np.arange(1, K + 1)


def pde_growth_rates(
    solver: pde.CircleMeanField, tau: float, K: int = 6, dt: float = 1e-3, epsilon: float = 1e-6
) -> np.ndarray:
    """lambda_k, k = 1..K, measured on ``solver`` (module doc)."""
    if not (0 < epsilon < 0.5):
        raise ValueError(f"epsilon must be in (0, 1/2), got {epsilon!r}")
    tk = windows(tau, K)
    h = min(float(dt), STEP_GAIN / max(solver.gain(), 1e-300))
    rho0 = np.stack([pde.perturbed_density(solver.M, k, epsilon) for k in range(1, K + 1)])
    times = np.concatenate([[0.0], np.sort(tk)])
    with np.errstate(all="ignore"):
        rho = solver.solve(rho0, times, h)
        m = solver.moments(rho, min(solver.M // 2, 4 * K))
    rates = np.empty(K)
    for k in range(1, K + 1):
        at = 1 + int(np.searchsorted(times[1:], tk[k - 1]))
        start, end = m[0, k - 1], m[at, k - 1]
        with np.errstate(all="ignore"):
            rates[k - 1] = np.log(abs(end[k - 1]) / abs(start[k - 1])) / tk[k - 1]
        others = np.delete(np.abs(end), np.arange(k - 1, end.shape[0], k))
        if not np.all(np.isfinite(end)) or (others.size and others.max() > LINEAR_SHARE * abs(end[k - 1])):
            rates[k - 1] = np.nan
    return rates


def particle_growth_rates(
    integrator,
    rng: np.random.Generator,
    runs: int,
    n: int,
    beta: float,
    sigma: float,
    normalization: str,
    tau: float,
    K: int = 6,
    amplitude: float = 0.1,
    tol: float = 1e-12,
):
    """(rates (runs, K), finite (runs,)): per-run rates of modes 1..K from the particles
    (module doc), with the SDE solved by ``integrator`` (an Euler-Maruyama integrator)."""
    problem = fourier.fourier_problem(pack_fourier(beta, sigma, n, normalization, tol))
    rates = np.empty((runs, K))
    finite = np.ones(runs, dtype=bool)
    for k, tk in enumerate(windows(tau, K), start=1):
        x0 = init.perturbed_circle(rng, runs, n, k, amplitude)
        states = integrator.solve(problem, x0, np.array([0.0, tk]), rng=rng).states
        finite &= np.isfinite(states).all(axis=(1, 2, 3))
        S = circle_moments(states, k)[..., k - 1]  # (runs, 2)
        ratio = (S[:, 1] * np.conj(S[:, 0])).real / np.abs(S[:, 0]) ** 2
        with np.errstate(invalid="ignore", divide="ignore"):
            rates[:, k - 1] = np.log(ratio) / tk
    return rates, finite
