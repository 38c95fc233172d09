"""The parameters of the Sinkformer flows, declared once: the scenario fields and the flat vector
that the numba drift and its JAX twin read.

Scores: ``dot``: s_ij = x_i^T W x_j (W = W_Q^T W_K); ``sqdist``: s_ij = -|x_i - x_j|^2 / (2 tau).
Values: ``v_i = sum_j K_ij W_V x_j``, or with ``relative`` ``v_i = sum_j K_ij W_V (x_j - x_i)``.
K is softmax (one normalization) or Sinkhorn (``iterations`` alternating normalizations, or to a
marginal tolerance ``tol > 0`` with ``iterations`` as the cap).

The vector (:data:`LAYOUT`): iterations (>= 1; 1 is softmax); tol (0: exactly ``iterations``
normalizations); scores (0 dot, 1 sqdist); tau; relative (1 if values act on x_j - x_i); d;
symmetric (1 if the score matrix is symmetric: sqdist, or W symmetric); then the blocks W
(identity for sqdist) and W_V (d x d each, row-major).

The heat-diffusion setting (physics.md §2) is ``sqdist`` scores with ``relative`` values and
``W_V = -(2 alpha / tau) I``: ``v_i = -(2 alpha / tau) (sum_j K_ij x_j - x_i)`` (rows of K sum to 1).
"""

from __future__ import annotations

import math

import numpy as np

from ..core.layout import Layout
from ..core.schema import Field

SCORES = {"dot": 0.0, "sqdist": 1.0}
NORMALIZATIONS = ("sinkhorn", "softmax")
# Bounds of the systems' parameters (dyn/systems/sinkformer.py, sinkhorn_attention.py). The
# kernels shift every exp of the scores (finite at any finite score); what must stay finite are
# the scores and values themselves and the outputs' squares: with coordinates within 5 s0 <= 5e3,
# entries of W within 1e3 and d <= 1000 (|x|^2 <= 2.5e10, |W| <= 1e6), the scores x^T W y
# <= 2.5e16, |x - y|^2 / (2 tau) <= 5e22 for tau >= 1e-12, the variance s0^2 <= 1e6 and its
# standard error's squares s0^4 <= 1e12.
S0_MAX = 1e3
MATRIX_MAX = 1e3  # entries of W and W_V
# heat setting: W_V = -(2 alpha / tau) I, at most 2e15 for tau >= 1e-12
ALPHA_MAX = 1e3

FIELDS = {
    "n": Field("int", 200, "number of particles n", lo=2, hi=20_000),
    "d": Field("int", 1, "space dimension d", lo=1, hi=1_000),
    "normalization": Field("str", "sinkhorn", "attention normalization", choices=NORMALIZATIONS),
    "iterations": Field("int", 1000, "Sinkhorn normalizations (the cap when tol > 0)", lo=1, hi=10**7),
    "tol": Field("float", 1e-9, "Sinkhorn marginal tolerance (0: exactly `iterations`)", lo=0.0, hi=1.0),
}

LAYOUT = Layout(
    "sinkformer",
    scalars=("iterations", "tol", "scores", "tau", "relative", "d", "symmetric"),
    blocks={"W": ("d", "d"), "WV": ("d", "d")},
)


def param_size(d: int) -> int:
    return LAYOUT.size({"d": d})


def _matrix(name, a, d):
    if a is None:
        return np.eye(d)
    a = np.asarray(a, dtype=np.float64)
    if a.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite entries")
    return a


def pack_params(
    d: int,
    normalization: str = "sinkhorn",
    iterations: int = 1,
    tol: float = 0.0,
    scores: str = "dot",
    tau: float = 1.0,
    W=None,
    WV=None,
    relative: bool = False,
) -> np.ndarray:
    """Pack a Sinkformer flow into ``p`` (layout in the module doc).

    ``normalization="softmax"`` forces one iteration and no tolerance. W and W_V default to the
    identity. Raises ValueError on a bad value.
    """
    if isinstance(d, bool) or int(d) != d or int(d) < 1:
        raise ValueError(f"d must be an integer >= 1, got {d!r}")
    d = int(d)
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    if scores not in SCORES:
        raise ValueError(f"scores must be one of {sorted(SCORES)}, got {scores!r}")
    if isinstance(iterations, bool) or int(iterations) != iterations or int(iterations) < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    tol, tau = float(tol), float(tau)
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tol must be finite and >= 0, got {tol}")
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"tau must be finite and > 0, got {tau}")
    if normalization == "softmax":
        iterations, tol = 1, 0.0
    w = np.eye(d) if scores == "sqdist" else _matrix("W", W, d)
    return LAYOUT.pack(
        iterations=int(iterations),
        tol=tol,
        scores=SCORES[scores],
        tau=tau,
        relative=bool(relative),
        d=d,
        symmetric=np.array_equal(w, w.T),
        W=w,
        WV=_matrix("WV", WV, d),
    )


def heat_params(
    d: int, alpha: float, tau: float, normalization: str = "sinkhorn", iterations: int = 1000, tol: float = 1e-9
) -> np.ndarray:
    """The heat-diffusion setting: Gaussian kernel of bandwidth tau, W_V = -(2 alpha/tau) I on x_j - x_i."""
    alpha = float(alpha)
    if not math.isfinite(alpha):
        raise ValueError(f"alpha must be finite, got {alpha}")
    return pack_params(
        d, normalization, iterations, tol, "sqdist", tau, WV=-(2.0 * alpha / float(tau)) * np.eye(int(d)), relative=True
    )


def unpack_params(p) -> dict:
    """Inverse of :func:`pack_params` (for inspection)."""
    p = np.asarray(p, dtype=np.float64)
    d = int(p[LAYOUT.index("d")])
    if p.shape != (param_size(d),):
        raise ValueError(f"p has length {p.size}, expected {param_size(d)} for d = {d}")
    v = LAYOUT.unpack(p, {"d": d})
    return {
        "iterations": int(v["iterations"]),
        "tol": float(v["tol"]),
        "scores": "sqdist" if v["scores"] != 0.0 else "dot",
        "tau": float(v["tau"]),
        "relative": bool(v["relative"]),
        "d": d,
        "symmetric": bool(v["symmetric"]),
        "W": v["W"].copy(),
        "WV": v["WV"].copy(),
    }
