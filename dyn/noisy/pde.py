r"""The mean-field (McKean-Vlasov) equation of noisy attention on the circle, solved
pseudo-spectrally with an exponential integrator (physics.md §1.3; Q = K = V = I).

For a density rho(theta, t) with respect to d theta (int rho = 1; uniform = 1/(2 pi)):

    d_t rho = -d_theta( rho v[rho] ) + (sigma^2/2) d_theta^2 rho,
    v[rho](theta) = (H * rho)(theta) / D(theta),    H(u) = -e^{beta cos u} sin u,
    D = 1 (USA),  D = G * rho with G(u) = e^{beta cos u} (SA),

(f * rho)(theta) = int f(theta - phi) rho(phi) d phi: the tangential attention velocity
int e^{beta cos(theta - phi)} sin(phi - theta) rho(phi) d phi, divided by the softmax normalizer
for SA. By Jacobi-Anger G_k = I_k(beta) and H_k = i k I_k(beta)/beta = i (I_{k-1} - I_{k+1})/2
(finite at beta = 0).

**Discretisation.** M equispaced points theta_j = 2 pi j / M, coefficients
c_k = (1/M) sum_j rho_j e^{-i k theta_j} (numpy's rfft / M), k = 0..M/2, so that
rho(theta) = sum_k c_k e^{i k theta} and (f * rho)_k = 2 pi f_k c_k. The velocity and the flux
rho v are formed on the grid; the flux is dealiased by the 2/3 rule and differentiated
spectrally (Nyquist mode dropped). Kernels are truncated at |k| < M/2: the grid is refused
(ValueError) unless the dropped tails of G and H, both at most 2 sum_{k >= M/2 - 1} |I_k(beta)|,
are below ``tol`` e^{|beta|} (:func:`min_grid` gives the smallest admissible M).

**Time stepping.** ETDRK4 (Cox & Matthews 2002) on c' = L c + N(c), L_k = -(sigma^2/2) k^2
diagonal: the diffusion is integrated exactly (no stiffness limit from it), the transport term
with fourth order. The phi-functions phi_j(z) = sum_m z^m/(m+j)! are summed as series for
|z| < 1 and in closed form otherwise (no cancellation). Consequences checked in the tests:

- mass: N_0 = -i 0 F_0 = 0 exactly and L_0 = 0, so c_0 (the mass / 2 pi) is kept to the last bit;
- positivity: not imposed by the scheme; a resolved solution stays positive (``min_density``);
- linear growth: a perturbation e^{ik theta} of the uniform law grows at the rate of
  :func:`dyn.noisy.theory.growth_rates` up to the ETDRK4 error (~(mu dt)^4, mu the drift gain).
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics.bessel import circle_coefficients, fourier_order, tail_bound
from ..numerics.mode_rates import _normalization, _sigma

TWO_PI = 2.0 * math.pi
SERIES_TERMS = 24  # |z| < 1: the series' remainder is below 1/24! ~ 1.6e-24 relative


def min_grid(beta: float, tol: float) -> int:
    """The smallest even M whose kernel tails (module doc) are below tol: M = 2 (K + 2)."""
    return 2 * (fourier_order(beta, tol) + 2)


def phi_functions(z) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """phi_1, phi_2, phi_3 of the real array z: phi_j(z) = sum_{m >= 0} z^m / (m + j)!."""
    z = np.asarray(z, dtype=np.float64)
    small = np.abs(z) < 1.0
    zs = np.where(small, z, 0.0)
    series = []
    for j in (1, 2, 3):
        total = np.zeros_like(z)
        for m in range(SERIES_TERMS - 1, -1, -1):  # Horner: sum z^m/(m+j)!
            total = total * zs / (m + j + 1) + 1.0
        series.append(total / math.factorial(j))
    zb = np.where(small, 1.0, z)
    e = np.expm1(zb)
    closed = (e / zb, (e - zb) / zb**2, (e - zb - zb**2 / 2) / zb**3)
    return tuple(np.where(small, s, c) for s, c in zip(series, closed, strict=True))


class CircleMeanField:
    """The mean-field equation on the circle (module doc): ``solve`` and the velocity field."""

    def __init__(self, beta: float, sigma: float, normalization: str = "USA", grid: int = 256, tol: float = 1e-12):
        self.beta = float(beta)
        self.sigma = _sigma(sigma)
        self.normalization = _normalization(normalization)
        if isinstance(grid, bool) or int(grid) != grid or grid < 8 or grid % 2:
            raise ValueError(f"grid must be an even integer >= 8, got {grid!r}")
        self.M = M = int(grid)
        tail = tail_bound(self.beta, M // 2 - 2)
        if not tail <= tol:
            raise ValueError(
                f"grid {M} too coarse for beta = {self.beta:g}: the kernel's Fourier "
                f"tail from mode {M // 2 - 1} on is {tail:.1e} > tol = {tol:g} "
                f"(relative to e^|beta|); use grid >= {min_grid(self.beta, tol)}"
            )
        self.theta = TWO_PI * np.arange(M) / M
        self.k = np.arange(M // 2 + 1)
        g = circle_coefficients(self.beta, M // 2 + 1)  # I_k e^{-|beta|}, k = 0..M/2+1
        h = np.empty(M // 2 + 1)
        h[0] = 0.0
        if abs(self.beta) > 1.0:
            h[1:] = self.k[1:] * g[1 : M // 2 + 1] / self.beta
        else:  # k I_k / beta = (I_{k-1} - I_{k+1}) / 2, no division by a small beta
            h[1:] = 0.5 * (g[: M // 2] - g[2 : M // 2 + 2])
        scale = math.exp(abs(self.beta)) if self.normalization == "USA" else 1.0
        self.G = TWO_PI * scale * g[: M // 2 + 1]
        self.H = 1j * TWO_PI * scale * h
        self.G[M // 2] = 0.0  # the Nyquist mode carries no kernel
        self.H[M // 2] = 0.0
        self.dealias = self.k <= M // 3
        self.L = -0.5 * self.sigma**2 * self.k.astype(np.float64) ** 2

    def gain(self) -> float:
        """The largest rate of the linearised transport around the uniform law,
        max_k k |(H * .)_k| / (2 pi D_0) (D_0 = 1 USA, G_0 SA): the explicit part's stiffness,
        which bounds the ETDRK4 step (the diffusion needs none)."""
        d0 = 1.0 if self.normalization == "USA" else self.G[0].real / TWO_PI
        return float(np.max(self.k * np.abs(self.H)) / (TWO_PI * d0))

    # ----------------------------------------------------------------- fields on the grid
    def coefficients(self, rho) -> np.ndarray:
        """c_k, k = 0..M/2, of densities on the grid (..., M)."""
        return np.fft.rfft(rho, axis=-1) / self.M

    def density(self, c) -> np.ndarray:
        return np.fft.irfft(c * self.M, n=self.M, axis=-1)

    def velocity(self, rho) -> np.ndarray:
        """v[rho] on the grid, for densities (..., M)."""
        return self._velocity(self.coefficients(np.asarray(rho, dtype=np.float64)))

    def _velocity(self, c):
        v = self.density(self.H * c)
        if self.normalization == "SA":
            v = v / self.density(self.G * c)
        return v

    def _transport(self, c):
        """N(c) = -(i k) (rho v)_k, dealiased."""
        flux = self.density(c) * self._velocity(c)
        f = self.coefficients(flux)
        return np.where(self.dealias, -1j * self.k * f, 0.0)

    # ----------------------------------------------------------------------- time stepping
    def _step_coefficients(self, h: float):
        z = h * self.L
        E, E2 = np.exp(z), np.exp(z / 2)
        p1h, _, _ = phi_functions(z / 2)
        p1, p2, p3 = phi_functions(z)
        return (E, E2, h / 2 * p1h, h * (p1 - 3 * p2 + 4 * p3), h * 2 * (p2 - 2 * p3), h * (-p2 + 4 * p3))

    def solve(self, rho0, times, dt: float) -> np.ndarray:
        """Densities at ``times`` (starting at times[0]) from ``rho0`` (..., M): shape
        (len(times), ..., M). Steps of at most ``dt``, dividing every save interval."""
        from integrators.core.base import check_times, step_grid

        rho0 = np.asarray(rho0, dtype=np.float64)
        if rho0.shape[-1] != self.M or not np.all(np.isfinite(rho0)):
            raise ValueError(f"rho0 must be finite with last axis of length {self.M}")
        times = check_times(times)
        if not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive number, got {dt!r}")
        counts, steps = step_grid(times, float(dt))
        out = np.empty((len(times),) + rho0.shape)
        out[0] = rho0
        c = self.coefficients(rho0)
        cached = {}
        for iv in range(len(counts)):
            h = float(steps[iv])
            if h not in cached:
                cached[h] = self._step_coefficients(h)
            E, E2, a, f1, f2, f3 = cached[h]
            for _ in range(counts[iv]):
                Nu = self._transport(c)
                ca = E2 * c + a * Nu
                Na = self._transport(ca)
                cb = E2 * c + a * Na
                Nb = self._transport(cb)
                cc = E2 * ca + a * (2 * Nb - Nu)
                Nc = self._transport(cc)
                c = E * c + f1 * Nu + f2 * (Na + Nb) + f3 * Nc
            out[iv + 1] = self.density(c)
        return out

    # ------------------------------------------------------------------------- observables
    def moments(self, rho, K: int) -> np.ndarray:
        """m_k = int e^{i k theta} rho d theta, k = 1..K, of densities (..., M): (..., K) complex."""
        return TWO_PI * np.conj(self.coefficients(rho)[..., 1 : K + 1])

    def mass(self, rho) -> np.ndarray:
        return TWO_PI * self.coefficients(rho)[..., 0].real


def perturbed_density(M: int, k: int, amplitude: float) -> np.ndarray:
    """(1 + 2 a cos(k theta)) / (2 pi) on the grid: m_k = a (a positive density for |a| < 1/2)."""
    theta = TWO_PI * np.arange(M) / M
    return (1.0 + 2.0 * amplitude * np.cos(k * theta)) / TWO_PI


def von_mises_density(M: int, kappa: float) -> np.ndarray:
    """e^{kappa cos theta} / (2 pi I_0(kappa)) on the grid (a cluster at theta = 0)."""
    from scipy.special import ive

    theta = TWO_PI * np.arange(M) / M
    return np.exp(kappa * (np.cos(theta) - 1.0)) / (TWO_PI * ive(0, kappa))
