"""The parameters of noisy attention, declared once: the scenario fields and the flat vectors the
numba and JAX coefficients read.

Two vectors (:class:`dyn.core.layout.Layout`), one per drift:

- :data:`LAYOUT` (direct O(n^2) drift, any d, Q, K, V): the scalars sigma, n, d, then the whole
  attention vector of :mod:`dyn.attention.params` as the block ``attention``, which the attention
  kernels read unchanged (``block(p, LAYOUT.block_at("attention"))``: its offsets are relative to
  its own start);
- :data:`FOURIER_LAYOUT` (the O(nK) drift on the circle, Q = K = V = I): sigma, n, d (= 2), usa,
  then the block ``coef`` of the K + 1 Fourier coefficients c_k of the kernel (module
  :mod:`.fourier`): c_k = I_k(beta) for USA, I_k(beta) e^{-|beta|} for SA (a common factor
  cancels in the softmax).

n and d are in both vectors because the Brownian control of one member has shape (n, d).
:data:`FIELDS` are those of attention (:data:`dyn.attention.params.FIELDS`; more tokens allowed,
USA by default) and sigma.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..attention.params import FIELDS as ATTENTION_FIELDS, pack_params
from ..core.layout import Layout
from ..core.schema import Field
from ..numerics.bessel import circle_coefficients, fourier_order

DIRECT_MAX_N = 10_000  # the direct drift keeps an n x n matrix per member (0.8 GB at 10^4)
DEFAULT_TOL = 1e-12

# |beta| admitted. The mean-field references (dyn.noisy.branches: zonal laws on 512 Gauss nodes)
# resolve the kernel up to |beta| ~ 200 only (past it they raise), and their cost grows with beta
# (6-13 s at 100, over a minute at 200); the energy's standard error (~e^{2|beta|}) overflows
# float64 past 354, USA's drift scale e^|beta| past 709. (USA's stiffness e^|beta| makes the step
# checks refuse USA points well below 100 already.)
BETA_MAX = 100.0
# sigma admitted: the noise's rate (d+2) sigma^2/2 <= 5.1e14 stays finite, and so does the step
# dt = "auto" takes from it (the step checks refuse a dt that would take over 10^9 steps first)
SIGMA_MAX = 1e6

FIELDS = {
    **ATTENTION_FIELDS,
    "n": replace(
        ATTENTION_FIELDS["n"],
        default=64,
        hi=1_000_000,
        doc="number of tokens n (the direct O(n^2) drift allows n <= 10^4)",
    ),
    # BETA_MAX also keeps e^|beta| of the step rate (math.exp raises past 709.8) and SA's Fourier
    # tolerance e^{-2|beta|} (0 past 372) in range
    "beta": replace(ATTENTION_FIELDS["beta"], lo=-BETA_MAX, hi=BETA_MAX),
    "normalization": replace(ATTENTION_FIELDS["normalization"], default="USA"),
    # without the drift each token is a Brownian motion on the sphere, generator (sigma^2/2) Lap
    "sigma": Field("float", 1.0, "noise sigma per token", lo=0.0, hi=SIGMA_MAX),
}

LAYOUT = Layout("noisy_attention", scalars=("sigma", "n", "d"), blocks={"attention": ("P",)})
FOURIER_LAYOUT = Layout("noisy_fourier", scalars=("sigma", "n", "d", "usa"), blocks={"coef": ("K1",)})


def _sigma(sigma) -> float:
    try:
        sigma = float(sigma)
    except (TypeError, ValueError):
        raise ValueError(f"sigma must be a real number, got {sigma!r}") from None
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma}")
    return sigma


def _count(name: str, n, lo: int = 1) -> int:
    if isinstance(n, bool) or int(n) != n or int(n) < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {n!r}")
    return int(n)


def pack(beta: float, d: int, sigma: float, n: int, normalization: str = "USA", Q=None, K=None, V=None) -> np.ndarray:
    """The vector of the direct drift (any d, Q, K, V; defaults the identity)."""
    attention = pack_params(beta, d, normalization, Q, K, V)
    return LAYOUT.pack(sigma=_sigma(sigma), n=_count("n", n), d=int(d), attention=attention)


def attention_part(p) -> np.ndarray:
    """The attention vector inside a :data:`LAYOUT` vector."""
    return LAYOUT.unpack(np.asarray(p, dtype=np.float64))["attention"]


def fourier_tolerance(beta: float, n: int, normalization: str, tol: float) -> float:
    """Bound on the scaled kernel tail (:func:`dyn.numerics.bessel.tail_bound`) that keeps the
    O(nK) drift within ``tol`` of the exact one: tol for USA (error <= tol e^{|beta|}, the scale of
    the drift); for SA (|m_i| <= 1, error <= 2T/(N_i - T) for a tail T and normalizer
    N_i = (1/n) sum_j e^{beta cos(theta_i - theta_j)} >= max(e^{-|beta|}, e^{beta}/n)),
    tol * N_min e^{-|beta|} / (2 + tol)."""
    tol = float(tol)
    if not (math.isfinite(tol) and 0 < tol < 1):
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    if str(normalization).upper() == "USA":
        return tol
    beta = float(beta)
    low = math.exp(-2.0 * abs(beta))
    if beta > 0:
        low = max(low, 1.0 / _count("n", n))
    return tol * low / (2.0 + tol)


def pack_fourier(beta: float, sigma: float, n: int, normalization: str = "USA", tol: float = DEFAULT_TOL) -> np.ndarray:
    """The vector of the O(nK) circle drift (Q = K = V = I, d = 2), K from beta and ``tol``."""
    key = str(normalization).upper()
    if key not in ("SA", "USA"):
        raise ValueError(f"normalization must be SA or USA, got {normalization!r}")
    n = _count("n", n)
    K = fourier_order(beta, fourier_tolerance(beta, n, key, tol))
    coef = circle_coefficients(beta, K)
    if key == "USA":
        coef = coef * math.exp(abs(float(beta)))
    return FOURIER_LAYOUT.pack(sigma=_sigma(sigma), n=n, d=2, usa=key == "USA", coef=coef)


def fourier_order_of(p) -> int:
    """K of a :data:`FOURIER_LAYOUT` vector (K + 1 coefficients)."""
    return FOURIER_LAYOUT.infer(np.asarray(p).shape[0])["K1"] - 1


def pack_values(values, drift: str) -> np.ndarray:
    """The vector of a sweep point's values for ``drift`` = "direct" or "fourier"."""
    if drift == "fourier":
        return pack_fourier(
            values["beta"], values["sigma"], values["n"], values["normalization"], values.get("tol", DEFAULT_TOL)
        )
    return pack(
        values["beta"],
        values["d"],
        values["sigma"],
        values["n"],
        values["normalization"],
        values.get("Q"),
        values.get("K"),
        values.get("V"),
    )
