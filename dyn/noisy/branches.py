r"""Stationary branches of noisy attention on S^{d-1} (Q = K = V = I, SA and USA, any d >= 2):
the clustered zonal laws traced in sigma through their fold, the fold sigma_fold(beta, d), and
beta_*(d), where the bifurcation from the uniform law turns from supercritical (continuous
transition) to subcritical (discontinuous, with hysteresis) (physics.md §1.3, §1.5; Mun &
Rosenzweig, arXiv 2606.05140). The laws solve the self-consistency of :mod:`.zonal`:
m_l = E[P_l rho_{m,p}] for the moments m_l of the zonal law, p = sigma/sigma_c, and
r = E[<x, e_1>] = m_1/sqrt(d) is the order parameter (on the circle r_1, d = 2).

**Continuation.** The branch leaves the uniform law (m = 0) at p = 1. It is started at
r = R_START by Newton with m_1 fixed and followed by pseudo-arclength continuation in the
unknowns (m_1..m_K, p): predictor along the unit tangent t (the null vector of the Jacobian
[d F/dm, d F/dp], oriented with r increasing), corrector Newton on {F = 0, t . (x - x_pred) = 0},
step halved on failure and grown by 1.3 up to H_MAX on success. The arclength is measured in the
kernel-weighted moments (a_l/a_1) m_l (what the law depends on) and p. Because the corrector
constrains a combination of m and p, not p, it goes through a fold in sigma, where Newton in
sigma alone fails.

**Stability.** Along the branch (parametrized by r, which grows along it) the stationary law is
linearly stable iff sigma decreases with r (d sigma/dr < 0): exchange of stability at a simple
fold, for a branch that leaves the uniform law stably when supercritical and unstably when
subcritical. This concerns zonal perturbations; the tests check it against the eigenvalues of
the zonal mean-field operator (:meth:`dyn.noisy.zonal.ZonalMeanField.jacobian`) at branch points.

**The fold** is where d sigma/dr = 0 on the branch. The sign change of the tangent's p
component brackets it; then brentq on r -> dp/dm_1(r), computed at the natural solution at r by
the implicit function theorem (J_{(m_2..m_K, p)} z = -J_{m_1}, exact Jacobian), locates it to
rounding: sigma_fold is accurate to ~1e-14 relative (the maximum is flat in r).

**At a given noise.** :func:`clustered_r` is the r of the stable clustered law at
sigma = ratio x sigma_c (the `r_mean_field` reference of the system noisy_attention).

**Landau expansion (third order) and beta_*.** Let h = (h_l) be the coefficients of the
exponent, rho ∝ exp(sum_l h_l P_l(u)), and Z(h) = E e^{sum h_l P_l}; then m_l = d log Z / d h_l.
Keep h_1 = O(eps), h_2 = O(eps^2) (higher h_l only enter at O(eps^4)); with X = h_1 P_1 + h_2 P_2,
E[P_1^3] = 0, E[P_1^2 P_2] = c, E[P_1^4] = e_4:

    log Z = (h_1^2 + h_2^2)/2 + c h_1^2 h_2 / 2 + (e_4 - 3) h_1^4 / 24 + O(eps^5),
    m_1 = h_1 + c h_1 h_2 + (e_4 - 3) h_1^3 / 6,      m_2 = h_2 + c h_1^2 / 2.

For the uniform law of u (u^2 has mean 1/d, u^4 mean 3/(d(d+2))): P_1 = sqrt(d) u,
P_2 = (u^2 - 1/d)/sqrt(Var u^2), Var u^2 = 2(d-1)/(d^2(d+2)), so e_4 = 3d/(d+2),
(e_4 - 3)/6 = -1/(d+2) and c = d sqrt(Var u^2), c^2/2 = (d-1)/(d+2). Let q = sigma_c^2/sigma^2
and the Bessel ratios rho_1 = a_1/a_0 = I_{d/2}/I_{d/2-1}, rho_2 = a_2/a_1 = I_{d/2+1}/I_{d/2}
(beta > 0: 0 < rho_2 < rho_1 < 1).

USA: h_l = kappa a_l m_l, so h_1 = q m_1, h_2 = q rho_2 m_2. The second equation gives
h_2 = (c/2) h_1^2 rho_2/(1 - rho_2) at q = 1, and the first, divided by h_1,

    1/q - 1 = C_3 h_1^2,   C_3 = [ (d-1) rho_2/(1 - rho_2) - 1 ] / (d + 2).

SA: rho ∝ N^kappa = exp(kappa log N), N/a_0 = 1 + Y, Y = rho_1 m_1 P_1 + (a_2/a_0) m_2 P_2 + ...,
and log(1+Y) = Y - Y^2/2 + Y^3/3: with g = kappa rho_1 m_1 = q m_1 and kappa = q/rho_1, the exponent
is g P_1 + h_2 P_2 - (g/kappa) h_2' P_1 P_2 + g^3 P_1^3/(3 kappa^2) + const, where
h_2 = kappa (a_2/a_0) m_2 - c g^2/(2 kappa) (P_1^2 = 1 + c P_2) and h_2' = h_2 + c g^2/(2 kappa).
The odd cubic terms add E[P_1 delta] = -c g h_2'/kappa + e_4 g^3/(3 kappa^2) to m_1; with
m_2 = h_2 + c g^2/2 the second equation gives h_2 = (c g^2/2)(rho_2 - rho_1)/(1 - rho_2) at q = 1,
and then

    1/q - 1 = C_3 g^2,
    C_3 = (1 - rho_1)/(d + 2) [ (d-1)(rho_2 - rho_1)/(1 - rho_2) - (1 + rho_1) ]   (SA).

In both cases h_1 = g = q m_1 = sqrt(d) r to leading order and p = q^{-1/2}, so along the branch

    sigma / sigma_c = 1 + A r^2 + O(r^4),    A = d C_3 / 2,

supercritical (the branch exists below sigma_c, continuous transition) when A < 0, subcritical
(a clustered law above sigma_c: discontinuous transition, hysteresis) when A > 0.

- USA: A > 0 iff (d - 1) rho_2 > 1 - rho_2, i.e. I_{d/2+1}(beta)/I_{d/2}(beta) > 1/d. The ratio
  increases from 0 (beta = 0) to 1 (beta -> inf), so there is one root beta_*(d): continuous for
  beta <= beta_*, discontinuous above. This is the statement of Mun & Rosenzweig (2606.05140);
  on the circle I_2/I_1 = 1/2, beta_* = 2.44692 (the engine's 2.45).
- SA: rho_2 < rho_1 < 1 makes both terms of the bracket negative, so A < 0 for every beta > 0
  and d >= 2: the SA transition is always continuous (at third order; the traced branches show
  sigma decreasing along the whole branch, e.g. d = 2, 3, 8 up to beta = 20 in the tests):
  :func:`beta_star` returns inf for SA.
- beta -> 0: A -> -d/(2(d+2)) for both (d = 2: -1/4, the Kuramoto-like r = I_1(2qr)/I_0(2qr)).

:func:`landau_coefficient` gives A in closed form or measured on the branch (natural solves at
r = h, 2h, 3h, 4h, h = LANDAU_STEP, and the exact fit of p - 1 = A r^2 + B r^4 + C r^6 + D r^8:
error O(h^10) plus rounding ~1e-11); :func:`beta_star` is the root of the measured A in beta
(brentq), :func:`bessel_beta_star` the root of the Bessel-ratio rule. Near beta_* the fold is
close: with p - 1 = A r^2 + B r^4 (B < 0), r_fold^2 = -A/(2B) and
sigma_fold/sigma_c - 1 = -A^2/(4B) = O((beta - beta_*)^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..numerics.bessel import SCALED_FROM, _dimension, bessel_ratios, funk_hecke
from ..numerics.mode_rates import _normalization
from .zonal import SelfConsistency, _beta

R_START = 1e-3  # the first point of the arclength continuation
H_START, H_MAX, H_MIN = 0.01, 0.05, 1e-7  # arclength steps (kernel-weighted moments and p)
TURN = 0.9  # a step whose tangent turns more (cosine below this) is redone shorter
MAX_POINTS = 4000
LANDAU_STEP = 0.02
R_MAX = 0.97


def _checked(beta, d, normalization):
    return _beta(beta), _dimension(d), _normalization(normalization)


@dataclass(frozen=True)
class Branch:
    """A branch of stationary laws: order parameter r, noise sigma, stability (arrays)."""

    r: np.ndarray
    sigma: np.ndarray
    stable: np.ndarray


# --------------------------------------------------------------------------- the tracer
class _Tracer:
    def __init__(self, beta: float, d: int, normalization: str):
        self.sc = sc = SelfConsistency(beta, d, normalization)
        self.root_d = math.sqrt(sc.d)
        self.scale = np.concatenate([sc.ratio, [1.0]])

    def natural(self, r_values, m=None, p=1.0):
        """Newton at each r of an increasing sequence (secant predictor): a list of (m, p, J),
        None from the first failure on."""
        sc = self.sc
        start = (np.zeros(sc.K) if m is None else m, p)
        out, last = [], []  # last: (r, m, p) of the two previous solutions
        for r in r_values:
            if len(last) == 2:
                (r0, m0, p0), (r1, m1, p1) = last
                t = (r - r1) / (r1 - r0)
                guess = (m1 + t * (m1 - m0), p1 + t * (p1 - p0))
            else:
                guess = last[-1][1:] if last else start
            found = sc.at_r(r, *guess)
            if found is None and len(last) == 2:
                found = sc.at_r(r, *last[-1][1:])
            if found is None:
                return out + [None] * (len(r_values) - len(out))
            out.append(found)
            last = (last + [(r, found[0], found[1])])[-2:]
        return out

    def slope_r(self, J) -> float:
        """d(sigma/sigma_c)/dr at a solution with Jacobian J."""
        return self.sc.slope(J)[0] * self.root_d

    def landau(self) -> float:
        """A of sigma/sigma_c = 1 + A r^2 + ..., measured on the branch (module doc)."""
        r = LANDAU_STEP * np.arange(1, 5)
        found = self.natural(r)
        if any(f is None for f in found):
            raise RuntimeError("the branch near the uniform law was not found")
        p = np.array([f[1] for f in found])
        V = np.vander(r**2, 5, increasing=True)[:, 1:]
        return float(np.linalg.solve(V, p - 1.0)[0])

    def _tangent(self, J, previous):
        """The unit tangent in the weighted coordinates (x times ``scale``): the null vector of J,
        oriented along ``previous`` (a weighted unit tangent) or, without it, with r growing."""
        row = previous * self.scale if previous is not None else np.eye(self.sc.K + 1)[0]
        v = np.linalg.solve(np.vstack([J, row[None]]), np.eye(self.sc.K + 1)[-1])
        w = v * self.scale
        w /= np.linalg.norm(w)
        if previous is None:
            return w if w[0] > 0 else -w
        return w if w @ previous > 0 else -w

    def trace(self, r_max: float = R_MAX, stop_at_fold: bool = False):
        """Points (m, p, dp/dr) along the branch from r = R_START by pseudo-arclength, to
        r = r_max (or to the first fold). Returns (m (n, K), p (n,), slope (n,))."""
        sc = self.sc
        m0 = np.zeros(sc.K)
        first = sc.at_r(R_START, m0, 1.0)
        if first is None:
            raise RuntimeError("the branch could not be started near the uniform law")
        m, p, J = first
        t = self._tangent(J, None)
        ms, ps, slopes = [m], [p], [self.slope_r(J)]
        h = H_START
        while len(ps) < MAX_POINTS and h >= H_MIN:
            x = np.concatenate([m, [p]])
            pred = x + h * t / self.scale
            last = pred[0] / self.root_d > r_max
            if last:  # land on r = r_max exactly, and stop there
                found = sc.at_r(r_max, pred[:-1], pred[-1]) or sc.at_r(r_max, m, p)
            else:
                row = t * self.scale
                found = sc.newton(pred[:-1], pred[-1], "arc", float(row @ pred), row)
            if found is None:
                h *= 0.5
                continue
            t_new = self._tangent(found[2], t)
            if t_new @ t < TURN:
                h *= 0.5
                continue
            m, p, J = found
            t = t_new
            ms.append(m), ps.append(p), slopes.append(self.slope_r(J))
            h = min(1.3 * h, H_MAX)
            if last or (stop_at_fold and slopes[-2] > 0 >= slopes[-1]):
                break
        return np.array(ms), np.array(ps), np.array(slopes)

    def refine_fold(self, ms, ps, slopes, i: int):
        """The fold between points i - 1 (slope > 0) and i (slope <= 0): (r, p, m)."""
        from scipy.optimize import brentq

        sc = self.sc
        ra, rb = ms[i - 1, 0] / self.root_d, ms[i, 0] / self.root_d
        cache = {}

        def solve(r):
            t = (r - ra) / (rb - ra)
            guess_m = ms[i - 1] + t * (ms[i] - ms[i - 1])
            guess_p = ps[i - 1] + t * (ps[i] - ps[i - 1])
            found = sc.at_r(r, guess_m, guess_p)
            if found is None:
                raise RuntimeError(f"Newton failed at r = {r} near the fold")
            cache[r] = found
            return found

        if slopes[i] == 0:
            return rb, ps[i], ms[i]
        r = brentq(lambda r: self.slope_r(solve(r)[2]), ra, rb, xtol=1e-15, rtol=1e-15)
        m, p, _ = cache[r] if r in cache else solve(r)
        return r, p, m


# ------------------------------------------------------------------------------ the API
def landau_coefficient(beta: float, d: int, normalization: str = "USA", method: str = "closed") -> float:
    r"""A in sigma/sigma_c = 1 + A r^2 + O(r^4) along the clustered branch near the uniform law
    (module doc): A < 0 supercritical, A > 0 subcritical. ``method="closed"``:

        USA:  A = d/(2(d+2)) [ (d-1) rho_2/(1 - rho_2) - 1 ],
        SA:   A = d (1 - rho_1)/(2(d+2)) [ (d-1)(rho_2 - rho_1)/(1 - rho_2) - (1 + rho_1) ],

    rho_1 = I_{d/2}/I_{d/2-1}(beta), rho_2 = I_{d/2+1}/I_{d/2}(beta); ``method="branch"``:
    measured on the traced branch (fit of sigma/sigma_c at r = 0.02, 0.04, 0.06, 0.08)."""
    beta, d, normalization = _checked(beta, d, normalization)
    if method == "branch":
        return _Tracer(beta, d, normalization).landau()
    if method != "closed":
        raise ValueError(f"method must be 'closed' or 'branch', got {method!r}")
    if abs(beta) > SCALED_FROM:  # a_0, a_1, a_2 overflow together: their ratios directly
        (rho1, rho2), _ = bessel_ratios(d / 2.0 - 1.0, beta, 2)
    else:  # the same bits as always
        a, _ = funk_hecke(beta, d, [0, 1, 2])
        rho1, rho2 = a[1] / a[0], a[2] / a[1]
    if normalization == "USA":
        return d / (2.0 * (d + 2)) * ((d - 1) * rho2 / (1 - rho2) - 1.0)
    return d * (1 - rho1) / (2.0 * (d + 2)) * ((d - 1) * (rho2 - rho1) / (1 - rho2) - (1 + rho1))


def bessel_beta_star(d: int) -> float:
    """The root beta_* of I_{d/2+1}(beta) / I_{d/2}(beta) = 1/d (Mun & Rosenzweig's rule for
    USA; module doc), by brentq on the exponentially scaled Bessel functions."""
    from scipy.optimize import brentq
    from scipy.special import ive

    d = _dimension(d)
    return float(brentq(lambda b: ive(d / 2 + 1, b) / ive(d / 2, b) - 1.0 / d, 1e-6, 200.0, xtol=1e-15, rtol=1e-15))


def beta_star(d: int, normalization: str = "USA") -> float:
    r"""beta_*(d): the bifurcation of the clustered branch from the uniform law is supercritical
    (continuous transition) for beta <= beta_* and subcritical (discontinuous, hysteresis
    between sigma_c and sigma_fold) above it. Computed from the branch: the root in beta of the
    measured Landau coefficient A(beta) (sigma/sigma_c = 1 + A r^2 + ...,
    :func:`landau_coefficient`), bracketed on a doubling grid of beta and refined by brentq.

    Derivation (module doc): the third-order expansion of the self-consistency along the first
    zonal mode gives A = d C_3/2 with, for USA, C_3 = [(d-1) rho_2/(1 - rho_2) - 1]/(d+2),
    rho_2 = I_{d/2+1}(beta)/I_{d/2}(beta): A changes sign where I_{d/2+1}/I_{d/2} = 1/d
    (Mun & Rosenzweig 2606.05140; :func:`bessel_beta_star`; d = 2: 2.44692). For SA,
    C_3 = (1 - rho_1)[(d-1)(rho_2 - rho_1)/(1 - rho_2) - (1 + rho_1)]/(d+2) < 0 for every beta
    (rho_2 < rho_1 < 1): always supercritical, and beta_star returns inf."""
    from scipy.optimize import brentq

    d = _dimension(d)
    if _normalization(normalization) == "SA":
        return math.inf
    A = lambda b: _Tracer(b, d, "USA").landau()
    lo, hi = 0.25, 0.5
    a_lo, a_hi = A(lo), A(hi)
    while a_hi < 0:
        if hi > 256:
            raise RuntimeError("no sign change of the Landau coefficient up to beta = 256")
        lo, a_lo, hi = hi, a_hi, 2 * hi
        a_hi = A(hi)
    if a_lo >= 0:
        raise RuntimeError("the Landau coefficient is not negative at small beta")
    return float(brentq(A, lo, hi, xtol=1e-13, rtol=1e-15))


def _fold_of(tracer: _Tracer):
    """(r, p) at the first fold of the traced branch, or None (no fold: sigma decreases)."""
    ms, ps, slopes = tracer.trace(stop_at_fold=True)
    down = np.nonzero((slopes[:-1] > 0) & (slopes[1:] <= 0))[0]
    if down.size == 0:
        return None
    r, p, _ = tracer.refine_fold(ms, ps, slopes, int(down[0]) + 1)
    return r, p


def sigma_fold(beta: float, d: int, normalization: str = "USA") -> float:
    r"""sigma_fold(beta, d) (= sigma_*): the largest noise at which a clustered zonal stationary
    law exists, i.e. the fold of the branch, d sigma/dr = 0, when the branch leaves the uniform
    law subcritically (USA, beta > beta_*(d)); then sigma_fold > sigma_c and for
    sigma_c < sigma < sigma_fold the uniform and the clustered law are both stable (hysteresis
    window). NaN when the branch has no fold (supercritical: sigma decreases along it).

    There is no closed form: the branch is traced by pseudo-arclength continuation and the fold
    located by brentq on d sigma/dr, computed exactly by the implicit function theorem (module
    doc), to ~1e-14. Near beta_*, sigma_fold/sigma_c - 1 ~ -A^2/(4B) = O((beta - beta_*)^2),
    A the Landau coefficient (> 0 above beta_*) and B < 0 the next one; within about 1e-6 of
    beta_* (d = 2) the fold lies below the first traced point (r = R_START = 1e-3; a window
    below 1e-12 relative) and NaN is returned."""
    beta, d, normalization = _checked(beta, d, normalization)
    tracer = _Tracer(beta, d, normalization)
    found = _fold_of(tracer)
    return math.nan if found is None else float(tracer.sc.sigma(found[1]))


def branch(beta: float, d: int, normalization: str = "USA", r_max: float = R_MAX):
    r"""The clustered branch of stationary zonal laws on S^{d-1} (module doc) as an
    xarray.Dataset along dimension ``point``: ``sigma`` (the noise), ``r`` (the order parameter
    E<x, e_1>) and ``stable`` (linear stability: d sigma/dr < 0), from the bifurcation point
    (r = 0, sigma = sigma_c; flagged like its neighbours) to r = r_max, with the fold inserted
    where there is one (flagged stable, the end of the stable part); it ends earlier where
    Newton fails (SA with a very tight cluster: r = 0.969 at beta = 20, d = 16). attrs: beta, d,
    normalization, sigma_critical, sigma_fold (NaN without a fold), landau_coefficient (A),
    beta_star (the closed-form Bessel root for USA, inf for SA)."""
    import xarray as xr

    beta, d, normalization = _checked(beta, d, normalization)
    r_max = float(r_max)
    if not 0 < r_max < 1:
        raise ValueError(f"r_max must be in (0, 1), got {r_max!r}")
    tracer = _Tracer(beta, d, normalization)
    ms, ps, slopes = tracer.trace(r_max)
    r = ms[:, 0] / tracer.root_d
    sigma = tracer.sc.sigma(ps)
    stable = slopes < 0
    fold = math.nan
    down = np.nonzero((slopes[:-1] > 0) & (slopes[1:] <= 0))[0]
    if down.size:
        i = int(down[0]) + 1
        rf, pf, _ = tracer.refine_fold(ms, ps, slopes, i)
        fold = float(tracer.sc.sigma(pf))
        r, sigma, stable = (np.insert(r, i, rf), np.insert(sigma, i, fold), np.insert(stable, i, True))
    A = tracer.landau()
    r = np.concatenate([[0.0], r])
    sigma = np.concatenate([[tracer.sc.sigma_c], sigma])
    stable = np.concatenate([[bool(stable[0])], stable])
    dims = ("point",)
    return xr.Dataset(
        {
            "sigma": (dims, sigma, {"long_name": "noise sigma of the stationary law", "units": "1"}),
            "r": (dims, r, {"long_name": "order parameter r = E<x, e_1>", "units": "1"}),
            "stable": (dims, stable, {"long_name": "linearly stable (d sigma/dr < 0)", "units": "1"}),
        },
        coords={"point": (dims, np.arange(r.size), {"long_name": "point along the branch", "units": "1"})},
        attrs={
            "beta": beta,
            "d": d,
            "normalization": normalization,
            "sigma_critical": float(tracer.sc.sigma_c),
            "sigma_fold": fold,
            "landau_coefficient": A,
            "beta_star": bessel_beta_star(d) if normalization == "USA" else math.inf,
            "long_name": "clustered branch of stationary zonal mean-field laws",
        },
    )


def branch_at(beta: float, d: int, normalization: str, r) -> Branch:
    """The branch sampled at the increasing order parameters ``r`` (natural continuation in r,
    secant predictor): sigma and the stability flag (d sigma/dr < 0, exact) at each; it stops
    at the first r where Newton fails (SA near r = 1, where N > 0 confines the moments)."""
    beta, d, normalization = _checked(beta, d, normalization)
    r = np.asarray(r, dtype=float)
    if r.ndim != 1 or r.size == 0 or np.any(r <= 0) or np.any(r >= 1) or np.any(np.diff(r) <= 0):
        raise ValueError("r must be an increasing 1-d array in (0, 1)")
    tracer = _Tracer(beta, d, normalization)
    found = [f for f in tracer.natural(r) if f is not None]
    n = len(found)
    p = np.array([f[1] for f in found])
    slopes = np.array([tracer.slope_r(f[2]) for f in found])
    return Branch(r[:n], tracer.sc.sigma(p), slopes < 0)


def branch_law(beta: float, d: int, normalization: str, r: float, degree: int = 48) -> np.ndarray:
    """Gegenbauer coefficients c_0..c_degree of the branch's stationary law with order parameter
    ``r`` (natural continuation in r from the uniform law), for
    :class:`dyn.noisy.zonal.ZonalMeanField` (its stability, its relaxation)."""
    beta, d, normalization = _checked(beta, d, normalization)
    r = float(r)
    if not 0 < r < 1:
        raise ValueError(f"r must be in (0, 1), got {r!r}")
    tracer = _Tracer(beta, d, normalization)
    steps = max(2, int(math.ceil(r / 0.02)))
    found = tracer.natural(np.linspace(r / steps, r, steps))[-1]
    if found is None:
        raise RuntimeError(f"Newton failed on the way to r = {r}")
    return tracer.sc.moments(found[0], found[1], degree)


def stationary_law(beta: float, sigma: float, d: int, normalization: str = "USA", degree: int = 48) -> np.ndarray:
    """Gegenbauer coefficients c_0..c_degree (c_0 = 1) of the stable clustered zonal law at the
    noise ``sigma`` (the most clustered stable point of the branch at that sigma), for
    :class:`dyn.noisy.zonal.ZonalMeanField`. ValueError if the branch has no stable law there."""
    beta, d, normalization = _checked(beta, d, normalization)
    tracer = _Tracer(beta, d, normalization)
    ms, ps, slopes = tracer.trace(R_MAX)
    target = float(sigma) / tracer.sc.sigma_c
    hits = [
        i
        for i in range(1, len(ps))
        if (ps[i - 1] - target) * (ps[i] - target) <= 0 and slopes[i] < 0 and slopes[i - 1] < 0
    ]
    if not hits:
        raise ValueError(f"no stable clustered law at sigma = {sigma} on the branch (r <= {R_MAX})")
    i = hits[-1]
    t = (target - ps[i - 1]) / (ps[i] - ps[i - 1])
    found = tracer.sc.at_sigma(sigma, ms[i - 1] + t * (ms[i] - ms[i - 1]))
    if found is None:
        raise RuntimeError(f"Newton failed at sigma = {sigma}")
    return tracer.sc.moments(found[0], found[1], degree)


_traced = branch  # clustered_r's argument `branch` (a branch already traced) hides the function


def clustered_r(beta: float, d: int, normalization: str, ratio: float, branch=None) -> float:
    """r of the most clustered linearly stable stationary law on the clustered branch at
    sigma = ratio x sigma_c(beta, d): 0 where the branch has none there, NaN where it lies
    beyond the traced end (r > 0.97). `branch`: :func:`branch` (beta, d, normalization) if
    already at hand. The crossing is bracketed between two stable points of the branch and
    located by brentq in r, each r solved by Newton with m_1 fixed
    (:meth:`SelfConsistency.at_r`, from the law at the bracket's lower end, reached by
    natural continuation in r): well conditioned also just above beta_*, where the branch
    crosses sigma_c close to its fold and Newton at fixed sigma (`stationary_law`) is not."""
    from scipy.optimize import brentq

    b = _traced(beta, d, normalization) if branch is None else branch
    r, stable = b.r.values, b.stable.values.astype(bool)
    p = b.sigma.values / b.attrs["sigma_critical"]
    target = float(ratio)
    hits = [
        i
        for i in range(1, len(p))
        if stable[i] and stable[i - 1] and r[i] > 0 and (p[i - 1] - target) * (p[i] - target) <= 0
    ]
    if not hits:  # none, or beyond the traced end (r_max): unknown
        return math.nan if stable[-1] and p[-1] > target else 0.0
    i = hits[-1]
    lo, hi = float(r[i - 1]), float(r[i])
    if lo == 0.0:  # the first piece, from the uniform law at sigma_c
        if p[i - 1] == target:
            return 0.0
        lo = min(1e-3, hi / 2)
    sc = SelfConsistency(beta, d, normalization)
    path = [(0.0, np.zeros(sc.K), 1.0)]  # (r, m, p) of the last two laws on the way to lo
    for at in np.linspace(lo / math.ceil(lo / 0.05), lo, math.ceil(lo / 0.05)):
        (r0, m0, p0), (r1, m1, p1) = path[0], path[-1]
        t = (at - r1) / (r1 - r0) if len(path) == 2 else 0.0  # secant predictor
        found = sc.at_r(at, m1 + t * (m1 - m0), p1 + t * (p1 - p0)) or sc.at_r(at, m1, p1)
        if found is None:
            raise RuntimeError(f"Newton failed at r = {at:g} on the branch (beta = {beta:g}, d = {d})")
        path = [path[-1], (at, found[0], found[1])]
    _, m, q = path[-1]

    def excess(at):
        found = sc.at_r(at, m, q)
        if found is None:
            raise RuntimeError(f"Newton failed at r = {at:g} (beta = {beta:g}, d = {d})")
        return found[1] - target

    if excess(lo) * excess(hi) > 0:  # the bracket's ends are rounding away from the crossing
        return lo if abs(excess(lo)) <= abs(excess(hi)) else hi
    return float(brentq(excess, lo, hi, xtol=1e-14, rtol=1e-14))


# ------------------------------------------------------------- the circle (thin wrappers)
def circle_branch(beta: float, normalization: str = "USA", r_max: float = R_MAX, steps: int = 60) -> Branch:
    """The clustered branch on the circle at ``steps`` equally spaced r in (0, r_max]
    (r_max/steps, ..., r_max): :func:`branch_at` with d = 2."""
    if not 0 < r_max < 1:
        raise ValueError(f"r_max must be in (0, 1), got {r_max!r}")
    if isinstance(steps, bool) or int(steps) != steps or steps < 3:
        raise ValueError(f"steps must be an integer >= 3, got {steps!r}")
    beta = float(beta)
    if not beta > 0:
        raise ValueError(f"the clustered branch is traced for beta > 0, got {beta!r}")
    return branch_at(beta, 2, normalization, np.linspace(r_max / steps, r_max, int(steps)))


def fold(betas, normalization: str = "USA", steps: int | None = None, d: int = 2) -> np.ndarray:
    """sigma_fold for each beta (NaN where the branch has no fold): :func:`sigma_fold`.
    ``steps`` (the samples of the former circle-only code's parabola) is accepted and ignored:
    the fold is now located exactly."""
    return np.array([sigma_fold(b, d, normalization) for b in np.atleast_1d(np.asarray(betas, dtype=float))])
