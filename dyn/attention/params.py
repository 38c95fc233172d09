"""The parameters of attention on the sphere, declared once: the scenario fields (types, defaults,
bounds, docs) and the flat vector the numba and JAX right-hand sides read, derived from them.

Scores are ``s_ij = beta <Q x_i, K x_j> = beta x_i^T M x_j`` with ``M = Q^T K``; values ``V``.
The vector (:data:`LAYOUT`): beta; usa (1 for USA, Z_i = n; 0 for SA, the softmax); d; flags
m_identity and v_identity (numba skips the products); then the blocks M and V (d x d each,
row-major; kernels find them through :meth:`dyn.core.layout.Layout.block_at`). Its length is
``header + 2 d^2`` whatever the flags, so a sweep over beta or over the matrices keeps one shape
and JAX compiles once. The JAX twin ignores the flags.

:data:`FIELDS` are the scenario fields of attention; the architecture (:mod:`.architecture`),
noisy attention and the mean-field modes derive theirs from them.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.layout import Layout
from ..core.schema import Field

NORMALIZATIONS = ("SA", "USA")

# |beta| admitted by the scenario field. SA's kernels are finite at any beta (every exp is shifted
# by a bound of its scores, dyn.numerics); what overflows float64 (1.8e308) is e^{|beta|}: USA's
# weights e^{beta <x_i, x_j>} past |beta| ~ 709 (their runs diverge and are recorded so) and the
# energy sum_ij e^{beta <x_i,x_j>} / (2 beta n^2) ~ e^{|beta|} / (2 |beta|) past ~716, its
# standard error (squares, e^{2|beta|}) past ~354 (ENERGY_BETA_MAX). The limit is not tighter
# because beta = 1000 with USA is how the engine's tests make a point diverge
# (tests/test_engine.py, test_reliability_input.py, test_reliability_readers.py).
BETA_MAX = 1000.0
# the largest |beta| at which the energy and its standard error are finite for any n and up to
# 10^8 runs: E <= e^{|beta|} / (2 |beta|) = 1.4e149 at 350, squared 2e298, times 10^8 runs 2e306
ENERGY_BETA_MAX = 350.0
# entries of Q, K, V: M = Q^T K (entries <= d 10^6 ~ 1e9, |M| <= 1e12), the scores
# beta <Q x_i, K x_j> (<= 1e15) and the values |V x| (<= 1e6) stay far inside float64
MATRIX_MAX = 1e3

FIELDS = {
    # n <= 10^4 keeps the n x n attention matrix of one run under 1 GiB
    "n": Field("int", 32, "number of tokens n", lo=1, hi=10_000),
    "d": Field("int", 2, "token dimension d", lo=2, hi=1024),
    # any sign: every kernel shifts the scores by a bound in |beta| (dyn.numerics: the row
    # maximum, the diagonal score or c >= |s_ij|), and the drift pair tests draw beta in (-3, 6);
    # beta < 0 weighs the farthest tokens most (dyn.attention.circle, scenarios/repulsive_sync.toml)
    # (a field's doc is the long name of its sweep axis: the reasons for the bounds live here)
    "beta": Field("float", 1.0, "inverse temperature beta (any sign)", lo=-BETA_MAX, hi=BETA_MAX),
    "normalization": Field("str", "SA", "attention normalization", choices=NORMALIZATIONS),
    "Q": Field("matrix", None, "query matrix (default identity)", sweepable=False, lo=-MATRIX_MAX, hi=MATRIX_MAX),
    "K": Field("matrix", None, "key matrix (default identity)", sweepable=False, lo=-MATRIX_MAX, hi=MATRIX_MAX),
    "V": Field("matrix", None, "value matrix (default identity)", sweepable=False, lo=-MATRIX_MAX, hi=MATRIX_MAX),
}

LAYOUT = Layout(
    "attention", scalars=("beta", "usa", "d", "m_identity", "v_identity"), blocks={"M": ("d", "d"), "V": ("d", "d")}
)


def param_size(d: int) -> int:
    """Length of ``p`` for token dimension ``d``: ``header + 2 d^2``."""
    return LAYOUT.size({"d": d})


def _matrix(name: str, a, d: int) -> np.ndarray:
    if a is None:
        return np.eye(d)
    try:
        a = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric (d, d) matrix: {exc}") from None
    if a.shape != (d, d):
        raise ValueError(f"{name} must have shape ({d}, {d}), got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} has non-finite entries")
    return a


def real(name: str, value, lo: float | None = None) -> float:
    """`value` as a finite float (>= lo when given); ValueError otherwise."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not math.isfinite(value) or (lo is not None and value < lo):
        raise ValueError(f"{name} must be finite" + (f" and >= {lo}" if lo is not None else "") + f", got {value}")
    return value


def check_common(beta, d, normalization) -> tuple[float, int, str]:
    """(beta, d, "SA" | "USA") checked: a finite beta, an integer d >= 2, a known
    normalization; ValueError otherwise."""
    beta = real("beta", beta)
    if isinstance(d, bool) or int(d) != d or int(d) < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    key = str(normalization).upper()
    if key not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    return beta, int(d), key


def pack_params(beta: float, d: int, normalization: str = "SA", Q=None, K=None, V=None) -> np.ndarray:
    """The flat vector ``p`` of (beta, normalization, Q, K, V); Q, K, V default to the identity
    and only M = Q^T K is stored. Raises ValueError on a non-finite beta, d < 2, an unknown
    normalization, a wrong matrix shape or non-finite entries."""
    beta, d, key = check_common(beta, d, normalization)
    m = _matrix("Q", Q, d).T @ _matrix("K", K, d)
    v = _matrix("V", V, d)
    eye = np.eye(d)
    return LAYOUT.pack(
        beta=beta, usa=key == "USA", d=d, m_identity=np.array_equal(m, eye), v_identity=np.array_equal(v, eye), M=m, V=v
    )


def pack(values) -> np.ndarray:
    """The vector of a sweep point's values (the keys of :data:`FIELDS`)."""
    return pack_params(
        values["beta"], values["d"], values["normalization"], values.get("Q"), values.get("K"), values.get("V")
    )


def unpack_params(p) -> dict:
    """Inverse of :func:`pack_params` (for inspection): beta, normalization, d, M, V, flags."""
    p = np.asarray(p, dtype=np.float64)
    d = int(p[LAYOUT.index("d")])
    if p.shape != (param_size(d),):
        raise ValueError(f"p has length {p.size}, expected {param_size(d)} for d = {d}")
    v = LAYOUT.unpack(p, {"d": d})
    return {
        "beta": float(v["beta"]),
        "normalization": "USA" if v["usa"] else "SA",
        "d": d,
        "M": v["M"].copy(),
        "V": v["V"].copy(),
        "M_identity": bool(v["m_identity"]),
        "V_identity": bool(v["v_identity"]),
    }
