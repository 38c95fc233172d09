r"""Linear growth rates of the modes of the uniform law under the (noisy) attention flow, SA and
USA, Q = K = V = I, on any sphere S^{d-1}: a spherical harmonic Y_l of degree l >= 1 around the
uniform law grows at the rate

    USA:  lambda_l = l(l+d-2) [ a_l(beta)/beta - sigma^2/2 ],
    SA:   lambda_l = l(l+d-2) [ a_l(beta)/(beta a_0(beta)) - sigma^2/2 ],

with a_l the Funk-Hecke coefficients of e^{beta <x, y>} (:mod:`.bessel`); on the circle (d = 2)
lambda_k = k^2 ( I_k(beta)/(beta D_0) - sigma^2/2 ), D_0 = 1 (USA) or I_0(beta) (SA).
Derivation, and sigma_c: :mod:`dyn.noisy.theory`.

They live here, not in :mod:`dyn.noisy`, because :mod:`dyn.attention.plateaus` needs them too
(the most unstable mode at sigma = 0): both packages read them from below, so the arrow between
the two runs one way only (noisy -> attention). :mod:`dyn.noisy.theory` re-exports them.
"""

from __future__ import annotations

import math

import numpy as np

from .bessel import SCALED_FROM, funk_hecke, mean_kernel, normalized_gains

NORMALIZATIONS = ("SA", "USA")


def _normalization(normalization: str) -> str:
    key = str(normalization).upper()
    if key not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    return key


def _sigma(sigma) -> float:
    sigma = float(sigma)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    return sigma


def drive(beta: float, d: int, normalization: str, degrees) -> np.ndarray:
    """The drift's gain per degree, g_l = a_l/beta (USA) or a_l/(beta a_0) (SA), for degrees
    l >= 1: lambda_l = l(l+d-2)(g_l - sigma^2/2). SA past |beta| = SCALED_FROM: the ratio
    itself (:func:`dyn.numerics.bessel.normalized_gains`), finite for every beta, where a_l and
    a_0 overflow together; below, a_l/beta over a_0 as always (the same bits). USA's gains
    grow like e^{|beta|}: +inf past |beta| ~ 714, where they exceed float64."""
    degrees = np.asarray(degrees)
    if degrees.ndim != 1 or np.any(degrees < 1):
        raise ValueError(f"degrees must be a 1-d array of integers >= 1, got {degrees!r}")
    sa = _normalization(normalization) == "SA"
    if sa and abs(float(beta)) > SCALED_FROM:
        return normalized_gains(beta, d, degrees)
    _, over = funk_hecke(beta, d, degrees)
    if sa:
        over = over / mean_kernel(beta, d)
    return over


def growth_rates(beta: float, sigma: float, d: int = 2, normalization: str = "USA", degrees=range(1, 7)) -> np.ndarray:
    """lambda_l, the linear growth rate of degree l (circle: mode k) around the uniform law;
    finite for every beta with SA, +inf with USA past |beta| ~ 714 (see :func:`drive`)."""
    degrees = np.asarray(list(degrees) if not isinstance(degrees, np.ndarray) else degrees)
    sigma = _sigma(sigma)
    ll = degrees * (degrees + d - 2.0)
    with np.errstate(over="ignore"):  # USA past |beta| ~ 714, or a huge sigma: +-inf, not a trap
        return ll * (drive(beta, d, normalization, degrees) - sigma * sigma / 2.0)
