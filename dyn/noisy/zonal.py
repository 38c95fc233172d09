r"""Zonal mean field of noisy attention on S^{d-1} (Q = K = V = I; physics.md §1.3, §1.5): laws
that depend only on the angle theta to one axis e_1, in Gegenbauer series, for any d >= 2 (d = 2:
even laws on the circle, Chebyshev series). Time-dependent solutions (spectral Galerkin,
ETDRK4), the linearized operator and its growth rates, and the stationary laws (a
self-consistency in the first moments), which :mod:`.branches` continues in sigma.

**Zonal laws.** Write u = <x, e_1> = cos theta. Under the uniform probability measure on S^{d-1},
u has the law w_d(u) du = c_d (1 - u^2)^{(d-3)/2} du on [-1, 1], c_d = Gamma(d/2) /
(sqrt(pi) Gamma((d-1)/2)). The zonal spherical harmonics of degree l are the Gegenbauer
polynomials C_l^{(d-2)/2}(u) (d = 2: Chebyshev T_l(u) = cos(l theta)); here P_l is their multiple
with E[P_l P_k] = delta_lk under w_d (P_0 = 1, P_1 = sqrt(d) u), from the three-term recurrence
of the orthonormal polynomials of the symmetric weight w_d,

    u P_l = b_{l+1} P_{l+1} + b_l P_{l-1},   b_1^2 = 1/d,
    b_l^2 = l (l + d - 3) / ((2l + d - 2)(2l + d - 4))   (l >= 2; = 1/4 for every l >= 2 if d = 2),

and P_l' from its derivative, P_{l+1}' = (P_l + u P_l' - b_l P_{l-1}') / b_{l+1}. A zonal density
(with respect to the uniform measure) is rho = sum_l c_l P_l(u), c_l = E[rho P_l]; c_0 = 1 is the
mass and the order parameter is r = E[u rho] = E[<x, e_1>] = c_1 / sqrt(d) (on the circle r_1).

**The equation in u.** For zonal f, grad f = f'(u) (e_1 - u x), |grad u|^2 = 1 - u^2, and
div(g grad f) = (1/w_d) d/du[ w_d (1 - u^2) g f' ]; the Laplacian on zonal functions is
(1 - u^2) f'' - (d - 1) u f' with eigenfunctions P_l, eigenvalues -l(l+d-2). The mean field
(:mod:`.theory`) is v = grad Phi with Phi = N/beta (USA) or (1/beta) log N (SA), and by
Funk-Hecke (:mod:`.kernel`) N[rho] = int e^{beta <x,y>} rho(y) sigma(dy) = sum_l a_l c_l P_l(u),
a_l = Gamma(d/2) (2/beta)^{d/2-1} I_{l+d/2-1}(beta). So

    d_t rho = -(1/w_d) d_u[ w_d (1 - u^2) rho Phi'(u) ] + (sigma^2/2) Lap rho.

**Galerkin form.** Against P_l (integrating by parts; w_d (1 - u^2) vanishes at u = +-1 for every
d >= 2):

    c_l' = -(sigma^2/2) l(l+d-2) c_l + T_l(c),     T_l(c) = E[ (1 - u^2) P_l'(u) rho(u) Phi'(u) ].

T_0 = 0 since P_0' = 0: the mass is conserved exactly (to the last bit: the scheme never
changes c_0). The density is kept to degrees l <= L; T_l is evaluated by Gauss quadrature for the
weight w_d (Gauss-Jacobi with parameters ((d-3)/2, (d-3)/2); for d = 2 the Chebyshev nodes
cos((2j+1) pi/(2Q)), which is the midpoint rule in theta) on Q >= 2(L+1) nodes: for USA the
integrand (1 - u^2) P_l' rho Phi' is a polynomial of degree <= 3L, integrated exactly (the
Galerkin projection is exact, no aliasing); for SA (Phi' = N'/(beta N) is rational) it is
spectrally accurate. The nodes come from scipy; the weights are recomputed from the Christoffel
function, w_j = 1 / sum_{l < Q} P_l(u_j)^2 (accurate to rounding for every d).

**Time stepping.** ETDRK4 (Cox & Matthews 2002, as in :mod:`.pde`) on c' = D c + T(c) with
D = diag(-(sigma^2/2) l(l+d-2)): the diffusion is exact, the transport fourth order.

**Linearized operator and growth rates.** The Jacobian of the right side at c is
D + dT(c) with, writing F = (1 - u^2) and g_l = a_l/beta,

    USA:  dT_lk = E[ F P_l' ( P_k Phi' + rho g_k P_k' ) ],
    SA:   dT_lk = E[ F P_l' ( P_k Phi' + (rho/N) (g_k P_k' - a_k P_k Phi') ) ].

At the uniform law (c = e_0: rho = 1, Phi' = 0) the USA and SA forms reduce to
g_k E[F P_l' P_k'] / D_0 = g_k l(l+d-2) delta_lk / D_0 (D_0 = 1 USA, a_0 SA; E[F P_l' P_k'] =
E[grad P_l . grad P_k] = l(l+d-2) delta_lk), so the zonal rates are
lambda_l = l(l+d-2)(a_l/(beta D_0) - sigma^2/2): the closed form of :mod:`.theory`.
:func:`zonal_growth_rates` measures them either from the assembled operator ("operator": its
diagonal, checked diagonal to rounding) or from the nonlinear equation ("pde": starts
e_0 +- eps e_l and e_0 +- 2 eps e_l; the odd parts o(eps) = (c_l^+ - c_l^-)/2 = eps x + eps^3 y
+ O(eps^5) (the even orders cancel), so x = (8 o(eps) - o(2 eps))/(6 eps) = e^{lambda_l t} to
O(eps^4), over windows t = tau/(l(l+d-2)), with ETDRK4 steps h <= 0.01/max_l (|D_l| + |T_ll|):
the scheme's error grows with the whole rate, not with the transport's alone).

**Stationary laws (self-consistency).** Zero flux, rho Phi' = (sigma^2/2) rho', gives
rho ∝ exp(kappa N) (USA) or N^kappa (SA), kappa = 2/(beta sigma^2). With the moments
m_l = E[P_l rho] (l = 1..K) and p = sigma/sigma_c, q = p^{-2} = sigma_c^2/sigma^2
(sigma_c^2 = 2 a_1/beta USA, 2 a_1/(beta a_0) SA):

    USA:  rho ∝ exp E,  E = q sum_l (a_l/a_1) m_l P_l(u),
    SA:   rho ∝ exp E,  E = q (a_0/a_1) log(1 + sum_l (a_l/a_0) m_l P_l(u)),

and stationarity is the fixed point m_l = E[P_l rho_{m,p}], l = 1..K. The kernel is truncated at
the first K (>= 2) with a_K/a_1 < 1e-17 (a_l decays like (beta/2)^l/l!): the omitted terms move E
by less than q 1e-17. The Jacobian is exact, d E[P_l rho]/dy = Cov_rho(P_l, dE/dy). The linearized
fixed point around m = 0 is m_l = q (a_l/a_1) m_l: mode 1 bifurcates at q = 1, sigma = sigma_c,
as the linear theory says. :class:`SelfConsistency` solves it at a fixed r (= m_1/sqrt(d), for
the branch) or at a fixed sigma, and gives the law's moments to any degree (for the PDE).
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics.bessel import _dimension, funk_hecke
from ..numerics.mode_rates import _normalization, _sigma
from .theory import sigma_critical

STATIONARY_NODES = 512  # self-consistency quadrature (256..2048 agree to 3e-14 for r <= 0.99)
KERNEL_CUT = 1e-17  # a_K / a_1 below this ends the kernel's Funk-Hecke series
NEWTON_TOL = 1e-13
# SA: N/a_0 = 1 + sum_l (a_l/a_0) m_l P_l is summed with a rounding error ~1e-16 of the sum of
# the terms' sizes; for a tight cluster at large beta the true value far from it is below that.
# Such nodes carry the weight n^{kappa} ~ 0, so n is floored at N_ROUNDING times that size there
# (at a fixed point n >= -rounding: the moments are those of a law).
N_ROUNDING = 1e-14
NEWTON_ITERATIONS = 50
PDE_STEP_GAIN = 0.01  # pde growth rates: the step times the largest |D_l| + |T_ll| measured


def _beta(beta) -> float:
    try:
        beta = float(beta)
    except (TypeError, ValueError):
        raise ValueError(f"beta must be a real number > 0, got {beta!r}") from None
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    return beta


def _count(name: str, value, least: int) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


# ------------------------------------------------------------------------------- the basis
def zonal_polynomials(u, d: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """(P, dP): the orthonormal zonal polynomials P_l and their derivatives at the points u,
    l = 0..degree, each of shape (degree + 1, len(u)) (module doc)."""
    d = _dimension(d)
    degree = _count("degree", degree, 0)
    u = np.asarray(u, dtype=np.float64).ravel()
    b = np.empty(degree + 2)
    b[0] = 0.0
    b[1] = 1.0 / math.sqrt(d)
    for l in range(2, degree + 2):
        b[l] = math.sqrt(l * (l + d - 3) / ((2 * l + d - 2) * (2 * l + d - 4)))
    P = np.zeros((degree + 1, u.size))
    dP = np.zeros((degree + 1, u.size))
    P[0] = 1.0
    if degree >= 1:
        P[1] = u / b[1]
        dP[1] = 1.0 / b[1]
    for l in range(1, degree):
        P[l + 1] = (u * P[l] - b[l] * P[l - 1]) / b[l + 1]
        dP[l + 1] = (P[l] + u * dP[l] - b[l] * dP[l - 1]) / b[l + 1]
    return P, dP


def gauss_nodes(d: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(u, w): Gauss nodes and probability weights of the law w_d of u = <x, e_1> (module doc):
    sum_j w_j f(u_j) = E f(u) for polynomials f of degree < 2 count."""
    from scipy.special import roots_jacobi

    d = _dimension(d)
    count = _count("count", count, 2)
    if d == 2:
        u = np.cos(math.pi * (2 * np.arange(count)[::-1] + 1) / (2 * count))
        return u, np.full(count, 1.0 / count)
    u, _ = roots_jacobi(count, (d - 3) / 2, (d - 3) / 2)
    P, _ = zonal_polynomials(u, d, count - 1)
    w = 1.0 / np.einsum("lj,lj->j", P, P)  # Christoffel: the Gauss weights
    return u, w / w.sum()


def _kernel(beta: float, d: int, degree: int) -> tuple[np.ndarray, np.ndarray]:
    """(a_l, a_l / beta), l = 0..degree."""
    return funk_hecke(beta, d, np.arange(degree + 1))


# ------------------------------------------------------------------- the time-dependent law
class ZonalMeanField:
    """The zonal mean-field equation on S^{d-1} in Gegenbauer coefficients c_0..c_L (module doc).

    ``solve(c0, times, dt)`` steps coefficient arrays (..., L + 1); ``project`` / ``density``
    convert from / to functions of u; ``jacobian(c)`` is the linearized right side."""

    def __init__(
        self, beta: float, sigma: float, d: int, normalization: str = "USA", degree: int = 48, nodes: int | None = None
    ):
        self.beta = _beta(beta)
        self.sigma = _sigma(sigma)
        self.d = _dimension(d)
        self.normalization = _normalization(normalization)
        self.L = _count("degree", degree, 2)
        Q = 2 * (self.L + 1) if nodes is None else _count("nodes", nodes, 2 * (self.L + 1))
        self.u, self.w = gauss_nodes(self.d, Q)
        self.P, self.dP = zonal_polynomials(self.u, self.d, self.L)
        self.F = 1.0 - self.u**2
        self.test = (self.dP * (self.w * self.F)).T  # (Q, L+1): T_l = sum_j flux_j test_jl
        a, g = _kernel(self.beta, self.d, self.L)
        if self.normalization == "SA":  # N / a_0 and N' / (beta a_0): no overflow at large beta
            a, g = a / a[0], g / a[0]
        self.a, self.g = a, np.where(np.arange(self.L + 1) == 0, 0.0, g)
        self.lap = np.arange(self.L + 1) * (np.arange(self.L + 1) + self.d - 2.0)
        self.D = -0.5 * self.sigma**2 * self.lap

    # ---------------------------------------------------------------------------- fields
    def project(self, f) -> np.ndarray:
        """Coefficients c_l = E[f P_l] of a function of u (a callable, or values at ``self.u``),
        l = 0..L (Gauss quadrature)."""
        values = f(self.u) if callable(f) else np.asarray(f, dtype=np.float64)
        return (values * self.w) @ self.P.T

    def density(self, c, u=None) -> np.ndarray:
        """rho(u) = sum_l c_l P_l(u) at ``u`` (default: the nodes)."""
        c = np.asarray(c, dtype=np.float64)
        P = self.P if u is None else zonal_polynomials(u, self.d, self.L)[0]
        return c @ P

    def _fields(self, c):
        """(rho, Phi', N / a_0 or None) at the nodes."""
        rho = c @ self.P
        if self.normalization == "USA":
            return rho, (c * self.g) @ self.dP, None
        N = (c * self.a) @ self.P
        return rho, ((c * self.g) @ self.dP) / N, N

    def transport(self, c) -> np.ndarray:
        """T(c), the Galerkin transport term (module doc); T_0 = 0."""
        rho, dphi, _ = self._fields(np.asarray(c, dtype=np.float64))
        return (rho * dphi) @ self.test

    def rhs(self, c) -> np.ndarray:
        c = np.asarray(c, dtype=np.float64)
        return self.D * c + self.transport(c)

    def jacobian(self, c) -> np.ndarray:
        """The (L+1, L+1) Jacobian of ``rhs`` at one coefficient vector c (module doc)."""
        c = np.asarray(c, dtype=np.float64)
        rho, dphi, N = self._fields(c)
        first = (self.test * dphi[:, None]).T @ self.P.T  # E[F P_l' P_k Phi']
        if N is None:
            second = (self.test * rho[:, None]).T @ (self.dP * self.g[:, None]).T
        else:
            inner = self.dP * self.g[:, None] - self.P * self.a[:, None] * dphi
            second = (self.test * (rho / N)[:, None]).T @ inner.T
        return np.diag(self.D) + first + second

    def gain(self) -> float:
        """The largest transport rate at the uniform law, max_l l(l+d-2) g_l / D_0: it sets the
        explicit part's step (the diffusion needs none)."""
        return float(np.max(self.lap * np.abs(self.g)))

    # ------------------------------------------------------------------------ observables
    def mass(self, c) -> np.ndarray:
        return np.asarray(c)[..., 0]

    def order_parameter(self, c) -> np.ndarray:
        """r = E[<x, e_1> rho] = c_1 / sqrt(d)."""
        return np.asarray(c)[..., 1] / math.sqrt(self.d)

    # ------------------------------------------------------------------------ time stepping
    def _etd(self, h: float):
        from .pde import phi_functions

        z = h * self.D
        p1h, _, _ = phi_functions(z / 2)
        p1, p2, p3 = phi_functions(z)
        return (
            np.exp(z),
            np.exp(z / 2),
            h / 2 * p1h,
            h * (p1 - 3 * p2 + 4 * p3),
            h * 2 * (p2 - 2 * p3),
            h * (-p2 + 4 * p3),
        )

    def solve(self, c0, times, dt: float) -> np.ndarray:
        """Coefficients at ``times`` from ``c0`` (..., L + 1) given at times[0]: shape
        (len(times), ..., L + 1); ETDRK4 steps of at most ``dt`` dividing every interval."""
        c = np.array(c0, dtype=np.float64)
        if c.shape[-1] != self.L + 1 or not np.all(np.isfinite(c)):
            raise ValueError(f"c0 must be finite with last axis of length {self.L + 1}")
        times = np.array(times, dtype=np.float64)
        if times.ndim != 1 or times.size < 1 or not np.all(np.isfinite(times)) or np.any(np.diff(times) <= 0):
            raise ValueError("times must be a non-empty, finite, strictly increasing 1-d array")
        if not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive number, got {dt!r}")
        widths = np.diff(times)
        counts = np.maximum(np.ceil(widths / dt - 1e-9), 1).astype(np.int64)
        steps = widths / counts
        out = np.empty((len(times),) + c.shape)
        out[0] = c
        cache = {}
        T = self.transport
        for i, (count, h) in enumerate(zip(counts, steps, strict=True)):
            h = float(h)
            if h not in cache:
                cache[h] = self._etd(h)
            E, E2, a, f1, f2, f3 = cache[h]
            for _ in range(count):
                Nu = T(c)
                ca = E2 * c + a * Nu
                Na = T(ca)
                cb = E2 * c + a * Na
                Nb = T(cb)
                cc = E2 * ca + a * (2 * Nb - Nu)
                c = E * c + f1 * Nu + f2 * (Na + Nb) + f3 * T(cc)
            out[i + 1] = c
        return out


def zonal_growth_rates(
    beta: float,
    sigma: float,
    d: int,
    normalization: str = "USA",
    degrees=range(1, 7),
    method: str = "operator",
    degree: int | None = None,
    tau: float = 0.5,
    dt: float = 1e-3,
    epsilon: float = 1e-5,
) -> np.ndarray:
    """Growth rates of the zonal degrees around the uniform law, measured on the zonal
    discretization (module doc): ``method="operator"`` from the assembled Jacobian at c = e_0,
    ``method="pde"`` from nonlinear runs started at e_0 +- epsilon e_l and e_0 +- 2 epsilon e_l
    over tau / (l(l+d-2)) (the odd parts, extrapolated to epsilon -> 0: error O(epsilon^4)).
    Compare with :func:`dyn.noisy.theory.growth_rates`."""
    degrees = np.asarray(list(degrees), dtype=np.int64)
    if degrees.ndim != 1 or degrees.size == 0 or np.any(degrees < 1):
        raise ValueError(f"degrees must be integers >= 1, got {degrees!r}")
    top = int(degrees.max())
    L = max(2 * top + 2, 8) if degree is None else _count("degree", degree, top)
    field = ZonalMeanField(beta, sigma, d, normalization, degree=L)
    if method == "operator":
        J = field.jacobian(np.eye(L + 1)[0])
        off = J - np.diag(np.diag(J))
        if np.abs(off).max() > 1e-9 * max(1.0, np.abs(J).max()):
            raise RuntimeError("the linearized operator at the uniform law is not diagonal")
        return np.diag(J)[degrees]
    if method != "pde":
        raise ValueError(f"method must be 'operator' or 'pde', got {method!r}")
    if not (0 < epsilon < 0.1):
        raise ValueError(f"epsilon must be in (0, 0.1), got {epsilon!r}")
    windows = float(tau) / (degrees * (degrees + d - 2.0))
    times = np.concatenate([[0.0], np.unique(windows)])
    n = degrees.size
    c0 = np.zeros((4, n, L + 1))
    c0[..., 0] = 1.0
    for j, amplitude in enumerate((epsilon, -epsilon, 2 * epsilon, -2 * epsilon)):
        c0[j, np.arange(n), degrees] = amplitude
    gain = float(np.max(np.abs(field.D[degrees]) + field.lap[degrees] * np.abs(field.g[degrees])))
    h = min(float(dt), PDE_STEP_GAIN / max(gain, 1e-300))
    c = field.solve(c0, times, h)
    rates = np.empty(n)
    for i, (l, t) in enumerate(zip(degrees, windows, strict=True)):
        at = int(np.searchsorted(times, t))
        one = 0.5 * (c[at, 0, i, l] - c[at, 1, i, l])  # eps x + eps^3 y + O(eps^5)
        two = 0.5 * (c[at, 2, i, l] - c[at, 3, i, l])  # 2 eps x + 8 eps^3 y + ...
        rates[i] = math.log(abs((8 * one - two) / (6 * epsilon))) / t
    return rates


# ------------------------------------------------------------------------- stationary laws
class SelfConsistency:
    """The stationary zonal laws as a fixed point in the moments m_1..m_K and p = sigma/sigma_c
    (module doc). ``system(m, p)`` is the residual m - E[P rho] with its Jacobian in (m, p);
    ``at_r`` and ``at_sigma`` solve it by Newton."""

    def __init__(self, beta: float, d: int, normalization: str = "USA", nodes: int = STATIONARY_NODES):
        self.beta = _beta(beta)
        self.d = _dimension(d)
        self.normalization = _normalization(normalization)
        self.usa = self.normalization == "USA"
        K = 2
        while True:  # the first K >= 2 with a_K / a_1 < KERNEL_CUT
            a, _ = _kernel(self.beta, self.d, 4 * K)
            small = np.nonzero(a[2:] / a[1] < KERNEL_CUT)[0]
            if small.size:
                K = int(small[0]) + 2
                break
            K *= 4
        a, _ = _kernel(self.beta, self.d, K)
        self.K = K
        self.ratio = a[1:] / a[1]  # a_l / a_1, l = 1..K
        self.over = a[1:] / a[0]  # a_l / a_0 (SA)
        self.lead = a[0] / a[1]  # a_0 / a_1 (SA)
        self.sigma_c = float(sigma_critical(self.beta, self.d, self.normalization))
        self.u, self.w = gauss_nodes(self.d, _count("nodes", nodes, 4 * K))
        P, _ = zonal_polynomials(self.u, self.d, K)
        self.P = P[1:]  # (K, Q)

    def _exponent(self, m, p):
        """(E, dE/dm (K, Q), dE/dp (Q)) or None where SA's N is not positive."""
        q = p**-2.0
        dq = -2.0 * p**-3.0
        if self.usa:
            base = (self.ratio * m) @ self.P
            return q * base, q * self.ratio[:, None] * self.P, dq * base
        terms = (self.over * m)[:, None] * self.P
        n = 1.0 + terms.sum(axis=0)
        rounding = N_ROUNDING * (1.0 + np.abs(terms).sum(axis=0))
        if np.any(n < -rounding):  # moments of no law: N < 0
            return None
        n = np.maximum(n, rounding)  # N / a_0 below its rounding (far from a tight cluster)
        return (q * self.lead * np.log(n), (q * self.ratio)[:, None] * self.P / n, dq * self.lead * np.log(n))

    def law(self, m, p) -> np.ndarray | None:
        """Probability weights of rho_{m,p} at the nodes (rho_j w_j)."""
        found = self._exponent(np.asarray(m, dtype=np.float64), float(p))
        if found is None:
            return None
        E = found[0]
        e = self.w * np.exp(E - E.max())
        return e / e.sum()

    def system(self, m, p):
        """(F (K,), J (K, K + 1)): F = m - E[P rho_{m,p}], J its derivative in (m_1..m_K, p);
        None where the law does not exist (SA, N <= 0)."""
        m = np.asarray(m, dtype=np.float64)
        found = self._exponent(m, float(p))
        if found is None:
            return None
        E, dEm, dEp = found
        e = self.w * np.exp(E - E.max())
        pi = e / e.sum()
        M = self.P @ pi
        dE = np.vstack([dEm, dEp[None]])
        centred = dE - (dE @ pi)[:, None]
        cov = np.einsum("lj,kj->lk", self.P * pi, centred)  # (K, K+1): Cov(P_l, dE/dy)
        J = -cov
        J[np.arange(self.K), np.arange(self.K)] += 1.0
        return m - M, J

    def moments(self, m, p, degree: int) -> np.ndarray:
        """c_0..c_degree = E[P_l rho] of the law rho_{m,p} (for the zonal PDE)."""
        pi = self.law(m, p)
        P, _ = zonal_polynomials(self.u, self.d, degree)
        return P @ pi

    def sigma(self, p):
        return p * self.sigma_c

    def newton(self, m, p, fixed: str, target: float = 0.0, row=None):
        """Newton on the system with one extra condition: ``fixed = "r"`` (m_1 = target),
        ``"p"`` (p = target) or ``"arc"`` (row . (m, p) = target, row of length K + 1).
        Returns (m, p, J) or None; damped where SA's N would turn non-positive."""
        x = np.concatenate([np.asarray(m, dtype=np.float64), [float(p)]])
        if fixed == "r":
            x[0] = target
        elif fixed == "p":
            x[-1] = target
        extra = {"r": np.eye(self.K + 1)[0], "p": np.eye(self.K + 1)[-1]}.get(fixed, row)
        extra = np.asarray(extra, dtype=np.float64)
        found = self.system(x[:-1], x[-1])
        if found is None or not x[-1] > 0:
            return None
        for _ in range(NEWTON_ITERATIONS):
            F, J = found
            G = np.concatenate([F, [extra @ x - target]])
            A = np.vstack([J, extra[None]])
            try:
                step = np.linalg.solve(A, -G)
            except np.linalg.LinAlgError:
                return None
            if not np.all(np.isfinite(step)):
                return None
            scale = 1.0
            for _ in range(30):  # damping: only to stay where the law exists
                trial = x + scale * step
                found = self.system(trial[:-1], trial[-1]) if trial[-1] > 0 else None
                if found is not None:
                    break
                scale *= 0.5
            else:
                return None
            x = trial
            if np.abs(scale * step).max() <= NEWTON_TOL * max(1.0, np.abs(x).max()):
                return x[:-1], x[-1], found[1]
        return None

    def at_r(self, r: float, m, p):
        """The stationary law with order parameter r (m_1 = sqrt(d) r), from a guess (m, p)."""
        return self.newton(m, p, "r", math.sqrt(self.d) * float(r))

    def at_sigma(self, sigma: float, m, p=None):
        """The stationary law at noise sigma from a guess of its moments m."""
        target = float(sigma) / self.sigma_c
        return self.newton(m, target if p is None else p, "p", target)

    def slope(self, J) -> tuple[float, np.ndarray]:
        """dp/dm_1 along the branch at a solution with Jacobian J, and the tangent (dm, dp) per
        unit m_1 (implicit function theorem: J_{(m_2..m_K, p)} z = -J_{m_1})."""
        z = np.linalg.solve(J[:, 1:], -J[:, 0])
        return float(z[-1]), np.concatenate([[1.0], z])
