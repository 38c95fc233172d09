"""The parameters of the random-initialization transformer and its SDE limit, declared once: the
scenario fields (types, defaults, bounds, docs) and the flat vector the kernels read.

The vector (:data:`LAYOUT`): beta on unit tokens (scores ``beta <z_i, z_j>``, already converted
from the ``sqrt_d`` convention, :func:`effective_beta`); sigma; vbar (deterministic value part
``Vbar = vbar I``; vbar = 1, sigma = 0 is SA; ignored when a matrix follows); d; the noise law
(index into NOISES: "gaussian", G_k with i.i.d. N(0, sigma^2/d) entries, or "goe",
G_k = sigma/sqrt(d) (A + A^T)/sqrt(2) with A i.i.d. N(0, 1): symmetric, off-diagonal variance
sigma^2/d, diagonal 2 sigma^2/d); then the optional block Vbar (d x d, row-major): a general
Vbar, or empty for Vbar = vbar I.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.layout import Layout
from ..core.schema import Field

SCORES = ("unit", "sqrt_d")
NOISES = ("gaussian", "goe")

# |beta|: the two-token weights 1/(1 + e^{beta (rho - 1)}) and the attention field shift their
# exps, so every beta is finite; the bound keeps beta sqrt(d) (score = "sqrt_d", d <= 4096: x 64)
# and its products with scores (|beta_eff| <= 6.4e4 x 2) far inside float64. Past ~40 the softmax
# weights are 0 or 1 to rounding already.
BETA_MAX = 1000.0
# sigma and vbar: the rates sigma^2 / d, 2 vbar of the u SDE and the decision cap
# (dyn.tokens_sde.decision_cap: sigma^2 raises OverflowError past 1.3e154) stay finite; at 10^3
# the noise's rate sigma^2 ~ 1e6 per unit time is past what any step of the forms follows
SCALE_MAX = 1e3

FIELDS = {
    "n": Field("int", 2, "number of tokens n", lo=2, hi=4096),
    "d": Field("int", 3, "token dimension d", lo=2, hi=4096),
    "beta": Field("float", 1.0, "inverse temperature beta", lo=-BETA_MAX, hi=BETA_MAX),
    "sigma": Field(
        "float",
        1.0,
        "noise scale sigma (entries of G have variance sigma^2/d; GOE: off-diagonal sigma^2/d, diagonal 2 sigma^2/d)",
        lo=0.0,
        hi=SCALE_MAX,
    ),
    "noise": Field(
        "str",
        "gaussian",
        'noise law of the value matrices G_k: "gaussian" '
        '(i.i.d. N(0, sigma^2/d) entries) or "goe" (G = sigma/sqrt(d) (A + A^T)/sqrt(2), '
        "A i.i.d. N(0, 1): symmetric)",
        choices=NOISES,
    ),
    "vbar": Field(
        "float", 0.0, "deterministic value part Vbar = vbar I (unless Vbar is given)", lo=-SCALE_MAX, hi=SCALE_MAX
    ),
    "Vbar": Field(
        "matrix",
        None,
        "general deterministic value matrix (d x d; overrides vbar; y = z + h Vbar m + sqrt(h) G m)",
        sweepable=False,
        lo=-SCALE_MAX,
        hi=SCALE_MAX,
    ),
    "score": Field(
        "str",
        "unit",
        "score convention: beta<z_i,z_j> on unit tokens, or beta/sqrt(d) <x_i,x_j> on norm-sqrt(d) tokens",
        choices=SCORES,
    ),
}

LAYOUT = Layout(
    "tokens_sde", scalars=("beta", "sigma", "vbar", "d", "noise"), blocks={"Vbar": ("d", "d")}, optional=("Vbar",)
)


def effective_beta(beta: float, d: int, score: str = "unit") -> float:
    """beta on unit tokens. ``score = "sqrt_d"``: scores (beta / sqrt d) <x_i, x_j> on tokens
    of norm sqrt(d), i.e. beta sqrt(d) <z_i, z_j> on the unit tokens z = x / sqrt(d)."""
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    return float(beta) * (math.sqrt(d) if score == "sqrt_d" else 1.0)


def pack(
    beta: float, d: int, sigma: float = 1.0, vbar: float = 0.0, score: str = "unit", noise: str = "gaussian", Vbar=None
) -> np.ndarray:
    """The flat ``p`` (layout in the module doc). ``Vbar`` (d x d), when given, overrides
    ``vbar``."""
    if isinstance(d, bool) or int(d) != d or int(d) < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    d = int(d)
    values = (float(beta), float(sigma), float(vbar))
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"beta, sigma, vbar must be finite, got {values}")
    if values[1] < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma}")
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    if Vbar is not None:
        Vbar = np.asarray(Vbar, dtype=np.float64)
        if Vbar.shape != (d, d) or not np.all(np.isfinite(Vbar)):
            raise ValueError(f"Vbar must be a finite {d} x {d} matrix, got shape {Vbar.shape}")
    return LAYOUT.pack(
        beta=effective_beta(beta, d, score), sigma=values[1], vbar=values[2], d=d, noise=NOISES.index(noise), Vbar=Vbar
    )


def pack_values(values) -> np.ndarray:
    """The vector of a sweep point's values (the keys of :data:`FIELDS`)."""
    return pack(
        values["beta"],
        values["d"],
        values["sigma"],
        values["vbar"],
        values["score"],
        noise=values["noise"],
        Vbar=values.get("Vbar"),
    )


def noise_law(p) -> str:
    """``"gaussian"`` or ``"goe"``, from a packed ``p``."""
    return NOISES[int(p[LAYOUT.index("noise")])]
