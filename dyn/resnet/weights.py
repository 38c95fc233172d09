r"""Residual functions and weights of a ResNet across depth.

Residual family (one input per row of ``x``, shape ``(B, d)``)::

    f(x; W, V) = sigma(x W^T) V^T,      W in R^{M x d},  V in R^{d x M}

with ``sigma`` one of ``ACTIVATIONS`` (tanh and GELU are smooth, ReLU is not odd in the weights).

Weights as functions of depth ``s in [0, 1]`` (a few cosine modes, hence smooth)::

    W(s) = sum_{k<K} A^W_k cos(pi k s),     V(s) = sum_{k<K} A^V_k cos(pi k s)

with ``A^W_k ~ N(0, 1/d) / (1+k)``, ``A^V_k ~ N(0, 1/M) / (1+k)`` times ``scale``, so that
``f = O(scale)`` per coordinate for ``x ~ N(0, I_d)``. A network of depth ``N`` samples
``theta_n = theta(n/N)``, ``n = 0..N`` (Heun also reads ``theta_{n+1}``). Rough weights add a
layer-to-layer fluctuation of size ``roughness`` that does not shrink with ``N``: i.i.d.
Gaussian, or an alternating sign ``(-1)^n Delta`` with one fixed ``Delta``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

ACTIVATIONS = {"tanh": 0, "relu": 1, "gelu": 2}
ROUGH_LAWS = ("iid", "alternating")


class WeightFunction(NamedTuple):
    """Cosine coefficients of ``theta(s) = (W(s), V(s))``: AW (K, M, d), AV (K, d, M)."""

    AW: np.ndarray
    AV: np.ndarray


def activation_numpy(name: str):
    """sigma as a numpy ufunc-like function."""
    if name == "tanh":
        return np.tanh
    if name == "relu":
        return lambda z: np.maximum(z, 0.0)
    if name == "gelu":
        from scipy.special import erf

        return lambda z: 0.5 * z * (1.0 + erf(z / np.sqrt(2.0)))
    raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")


def smooth_weights(rng: np.random.Generator, d: int, width: int, modes: int = 4, scale: float = 1.0) -> WeightFunction:
    """Random smooth weight function (module doc): ``modes`` cosine modes with 1/(1+k) decay."""
    decay = scale / (1.0 + np.arange(modes))
    AW = rng.standard_normal((modes, width, d)) * decay[:, None, None] / np.sqrt(d)
    AV = rng.standard_normal((modes, d, width)) * decay[:, None, None] / np.sqrt(width)
    return WeightFunction(AW, AV)


def evaluate(wf: WeightFunction, s) -> tuple[np.ndarray, np.ndarray]:
    """``(W(s), V(s))`` for depths ``s`` of shape (S,): arrays (S, M, d) and (S, d, M)."""
    s = np.atleast_1d(np.asarray(s, dtype=np.float64))
    basis = np.cos(np.pi * np.arange(wf.AW.shape[0])[None, :] * s[:, None])  # (S, K)
    return np.einsum("sk,kmd->smd", basis, wf.AW), np.einsum("sk,kdm->sdm", basis, wf.AV)


def layer_weights(
    wf: WeightFunction, depth: int, roughness: float = 0.0, law: str = "iid", rng: np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Per-layer weights ``theta_n = theta(n/N) + xi_n``, n = 0..N: W (N+1, M, d), V (N+1, d, M).

    ``xi_n = 0`` (smooth), i.i.d. ``roughness * N(0, 1/d | 1/M)`` (``law="iid"``) or
    ``(-1)^n roughness * Delta`` (``law="alternating"``, one Gaussian ``Delta``).
    """
    if law not in ROUGH_LAWS:
        raise ValueError(f"law must be one of {ROUGH_LAWS}, got {law!r}")
    W, V = evaluate(wf, np.arange(depth + 1) / depth)
    if roughness == 0.0:
        return W, V
    if rng is None:
        raise ValueError("rough weights need an rng")
    _, M, d = W.shape
    shape = (depth + 1,) if law == "iid" else (1,)
    xi_W = rng.standard_normal(shape + (M, d)) / np.sqrt(d)
    xi_V = rng.standard_normal(shape + (d, M)) / np.sqrt(M)
    if law == "alternating":
        sign = (-1.0) ** np.arange(depth + 1)
        xi_W, xi_V = sign[:, None, None] * xi_W, sign[:, None, None] * xi_V
    return W + roughness * xi_W, V + roughness * xi_V
