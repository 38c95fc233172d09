r"""The attention kernel e^{beta <x, y>} in Fourier (circle) and Funk-Hecke (sphere) form, and
rigorous bounds on the tails of its expansion.

**Circle** (x = e^{i theta}, <x, y> = cos(theta - phi)). Jacobi-Anger:

    e^{beta cos u} = sum_{k in Z} I_k(beta) e^{i k u},      I_{-k} = I_k,

with I_k the modified Bessel functions (any real beta; I_k(-b) = (-1)^k I_k(b)). The coefficients
are returned scaled, ``I_k(beta) e^{-|beta|}`` (:func:`circle_coefficients`), which is what the
kernels store: e^{|beta|} is the kernel's maximum, so the scaled series is O(1) for any beta.

**Tail bound.** From the power series I_k(x) = sum_m (x/2)^{2m+k} / (m! (m+k)!), each term of
I_{k+1} is the matching term of I_k times (x/2)/(m+k+1) <= x/(2(k+1)); hence, for x = |beta|,

    I_{k+1}(x) <= x/(2(k+1)) I_k(x),   so for K + 1 > x/2, q = x/(2(K+1)) < 1:
    sum_{k > K} |I_k(beta)| <= I_K(x) q / (1 - q).

:func:`tail_bound` is twice that (both signs of k), scaled by e^{-|beta|}: it bounds
sup_u |e^{beta cos u} - sum_{|k| <= K} I_k e^{iku}| / e^{|beta|}. :func:`fourier_order` is the
smallest K whose bound is below a tolerance.

**Sphere S^{d-1}** (sigma the uniform probability measure, Y_l a spherical harmonic of degree l).
Funk-Hecke:  int e^{beta <x,y>} Y_l(y) sigma(dy) = a_l(beta) Y_l(x), with nu = d/2 - 1 and

    a_l(beta) = Gamma(d/2) (2/beta)^nu I_{l+nu}(beta) = a_0(beta) prod_{j<l} R_{nu+j}(beta),
    a_0(beta) = 0F1(; d/2; beta^2/4) = E_sigma e^{beta <x,y>},   R_mu = I_{mu+1} / I_mu.

(d = 2: a_l = I_l.) The ratios come from the continued fraction R_mu = beta / (2(mu+1) + beta
R_{mu+1}), run backwards from a high order (:func:`bessel_ratios`), in the form
S_mu = R_mu / beta = 1 / (2(mu+1) + beta^2 S_{mu+1}), finite at beta = 0 (S_mu(0) = 1/(2(mu+1))):
so a_l / beta (the USA growth rates, :mod:`.mode_rates`) needs no division by beta.

**Large |beta|.** a_0(beta) grows like e^{|beta|} and overflows float64 near |beta| = 714 (d = 2),
where scipy's hyp0f1 also returns 0 and reports a ZeroDivisionError of its asymptotic branch.
Up to SCALED_FROM = 700 a_0 is hyp0f1, as always (the same bits); past it,
a_0 e^{-|beta|} = Gamma(d/2) (2/|beta|)^nu ive(nu, |beta|) (:func:`mean_kernel_scaled`, in logs),
and a_0 is that times e^{|beta|}: +inf once the true value exceeds float64 (USA's rates really
are that large), never NaN (0 only where ive itself underflows, nu^2 / (2|beta|) past ~745:
d in the thousands). The ratios R_mu, and so the SA gains a_l / (beta a_0)
(:func:`normalized_gains`), need no a_0 at all and stay finite for every beta.

**Where it is used.** Both :mod:`dyn.noisy` (its Fourier drift, mean field and sigma_c) and
:mod:`dyn.attention` (the circle's Fourier drift, the most unstable mode) need these numbers, so
they live here, below both, and the arrow between the two packages runs one way only (noisy ->
attention). :mod:`dyn.noisy.kernel` re-exports the public names.
"""

from __future__ import annotations

import math

import numpy as np

# Extra orders the backward continued fraction starts above the highest ratio it returns: its
# error shrinks by a factor R_mu^2 <= (|beta| / (2(mu+1)))^2 per order, so 40 + 2|beta| orders
# take a start error of O(1) below 1e-17 (checked against scipy in the tests).
CF_MARGIN = 40
# |beta| up to which a_0 is scipy's hyp0f1 (unchanged bits); past it, from the scaled ive
# (module doc)
SCALED_FROM = 700.0


def _beta(beta) -> float:
    try:
        beta = float(beta)
    except (TypeError, ValueError):
        raise ValueError(f"beta must be a real number, got {beta!r}") from None
    if not math.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    return beta


def _order(name: str, k) -> int:
    if isinstance(k, bool) or int(k) != k or int(k) < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {k!r}")
    return int(k)


def circle_coefficients(beta: float, K: int) -> np.ndarray:
    """Scaled Fourier coefficients I_k(beta) e^{-|beta|}, k = 0..K (length K + 1)."""
    from scipy.special import ive

    beta, K = _beta(beta), _order("K", K)
    return ive(np.arange(K + 1), beta)


def tail_bound(beta: float, K: int) -> float:
    """Bound on sum_{|k| > K} |I_k(beta)| e^{-|beta|} (module doc); inf when K + 1 <= |beta|/2,
    where the bound does not apply."""
    from scipy.special import ive

    x, K = abs(_beta(beta)), _order("K", K)
    q = x / (2.0 * (K + 1))
    if q >= 1.0:
        return math.inf
    return 2.0 * float(ive(K, x)) * q / (1.0 - q)


def fourier_order(beta: float, tol: float) -> int:
    """Smallest K with tail_bound(beta, K) <= tol: the circle series truncated at |k| <= K is
    within tol * e^{|beta|} of e^{beta cos u} everywhere."""
    tol = float(tol)
    if not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number, got {tol!r}")
    K = int(abs(_beta(beta)) / 2)
    while tail_bound(beta, K) > tol:
        K += 1
    return K


def bessel_ratios(nu: float, beta: float, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(R, S): R[j] = I_{nu+j+1}(beta) / I_{nu+j}(beta) and S[j] = R[j] / beta (finite at
    beta = 0), j = 0..count-1, for nu >= 0, by the backward continued fraction (module doc)."""
    beta = _beta(beta)
    nu = float(nu)
    if not (math.isfinite(nu) and nu >= 0):
        raise ValueError(f"nu must be >= 0, got {nu!r}")
    count = _order("count", count)
    top = count + CF_MARGIN + int(2 * abs(beta))
    S = np.empty(count)
    s = 1.0 / (2.0 * (nu + top + 1))  # leading order of S at the start; the error dies going down
    b2 = beta * beta
    for j in range(top - 1, -1, -1):
        s = 1.0 / (2.0 * (nu + j + 1) + b2 * s)
        if j < count:
            S[j] = s
    return beta * S, S


def mean_kernel(beta: float, d: int) -> float:
    """a_0(beta) = E_sigma e^{beta <x, y>} = 0F1(; d/2; beta^2/4) on S^{d-1} (I_0(beta) for d = 2);
    +inf where it exceeds float64 (|beta| past ~714; module doc)."""
    from scipy.special import hyp0f1

    beta = _beta(beta)
    d = _dimension(d)
    if abs(beta) <= SCALED_FROM:
        return float(hyp0f1(d / 2.0, beta * beta / 4.0))
    scaled = mean_kernel_scaled(beta, d)
    with np.errstate(over="ignore"):
        return float(np.exp(abs(beta)) * scaled) if scaled > 0 else 0.0


def mean_kernel_scaled(beta: float, d: int) -> float:
    """a_0(beta) e^{-|beta|}, finite for every beta: hyp0f1 up to SCALED_FROM, then
    Gamma(d/2) (2/|beta|)^nu ive(nu, |beta|) with nu = d/2 - 1, summed in logs (Gamma(d/2)
    alone overflows for d > 342)."""
    from scipy.special import hyp0f1, ive

    beta = _beta(beta)
    d = _dimension(d)
    x = abs(beta)
    if x <= SCALED_FROM:
        return float(hyp0f1(d / 2.0, beta * beta / 4.0)) * math.exp(-x)
    nu = d / 2.0 - 1.0
    scaled = float(ive(nu, x))
    if scaled <= 0.0:  # underflow (nu^2 / (2x) past ~745): a_0 e^{-|beta|} is below 1e-308
        return 0.0
    return math.exp(math.lgamma(d / 2.0) + nu * math.log(2.0 / x) + math.log(scaled))


def _degrees(degrees, lowest: int) -> np.ndarray:
    """`degrees` as a 1-d int64 array, or ValueError unless integers >= `lowest`."""
    degrees = np.asarray(degrees)
    if degrees.ndim != 1 or not np.all(degrees == np.round(degrees)) or np.any(degrees < lowest):
        raise ValueError(f"degrees must be a 1-d array of integers >= {lowest}, got {degrees!r}")
    return degrees.astype(np.int64)


def normalized_gains(beta: float, d: int, degrees) -> np.ndarray:
    """a_l(beta) / (beta a_0(beta)) for degrees l >= 1 (the SA gains of :mod:`.mode_rates`):
    S_nu prod_{1 <= j < l} R_{nu+j} from the continued fraction, no a_0 involved, so finite for
    every beta (1/d for l = 1 at beta = 0)."""
    beta = _beta(beta)
    d = _dimension(d)
    degrees = _degrees(degrees, 1)
    R, S = bessel_ratios(d / 2.0 - 1.0, beta, int(degrees.max(initial=1)))
    over = np.concatenate([[1.0], np.cumprod(np.concatenate([[1.0], R[1:]]))])  # prod_{1<=j<l}
    return S[0] * over[degrees]


def funk_hecke(beta: float, d: int, degrees) -> tuple[np.ndarray, np.ndarray]:
    """(a_l(beta), a_l(beta) / beta) for the degrees l (integers >= 0) on S^{d-1} (module doc);
    a_l / beta is the limit at beta = 0 (1/d for l = 1, 0 for l >= 2, undefined (inf) for l = 0)."""
    beta = _beta(beta)
    d = _dimension(d)
    degrees = _degrees(degrees, 0)
    top = int(degrees.max(initial=0))
    R, S = bessel_ratios(d / 2.0 - 1.0, beta, max(top, 1))
    a0 = mean_kernel(beta, d)
    prod = np.concatenate([[1.0], np.cumprod(R)])  # prod_{j<l} R_{nu+j}
    over = np.concatenate([[1.0], np.cumprod(np.concatenate([[1.0], R[1:]]))])  # prod_{1<=j<l}
    a = a0 * prod[degrees]
    with np.errstate(divide="ignore"):
        a_over_beta = np.where(degrees == 0, a0 / beta if beta else np.inf, a0 * S[0] * over[np.maximum(degrees, 1)])
    return a, a_over_beta


def _dimension(d) -> int:
    if isinstance(d, bool) or int(d) != d or int(d) < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    return int(d)
