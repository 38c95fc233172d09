r"""Observables of Sinkformer states: the self-transport energy and the particle variance.

Self-transport energy (physics.md §2): with mu = (1/n) sum_i delta_{x_i}, cost c = -s (the
scores: -x^T W y, or |x - y|^2 / (2 tau)) and regularization 1,

    F(mu) = 1/2 OT_1(mu, mu),   OT_1 = min_{pi in Pi(1/n, 1/n)} <pi, c> + KL(pi | mu x mu).

With K = n pi = exp(s_ij + f_i + g_j) doubly stochastic, the dual value gives
OT_1 = <1/n, f> + <1/n, g> + log n (the log n because pi_ij = exp(s + f + g + log n) / n^2).
By the envelope theorem, at the optimal plan grad_{x_i} F = -(1/n) sum_j K_ij W x_j for symmetric W,
so along dx_i/dt = sum_j K_ij W x_j:  dF/dt = -(1/n) sum_i |dx_i/dt|^2. The envelope argument
needs the optimal plan: a truncated Sinkhorn gives another matrix, hence the converged solve here.
"""

from __future__ import annotations

import math

import numpy as np

from .flow import as_tokens, score_matrix
from .sinkhorn_numba import sinkhorn

ENERGY_TOL = 1e-12  # marginal tolerance of the solve behind F (the dual value is off by O(tol))
ENERGY_CAP = 100_000  # cap on passes (the symmetric fixed point needs tens)


def self_transport_energy(x, p, tol: float = ENERGY_TOL) -> np.ndarray:
    """F = 1/2 OT_1(mu, mu) for ``x`` (n, d) or (E, n, d), scores as packed in ``p``."""
    x = as_tokens(x)
    flat = x.reshape((-1,) + x.shape[-2:])
    out = np.empty(flat.shape[0])
    for e, xe in enumerate(flat):
        S = score_matrix(xe, p)
        _, f, g, _, _ = sinkhorn(S, ENERGY_CAP, tol)
        out[e] = 0.5 * (f.mean() + g.mean() + math.log(xe.shape[0]))
    return out.reshape(x.shape[:-2])


def variance(x) -> np.ndarray:
    """Per-coordinate empirical variance (1/n normalization), averaged over coordinates; x (..., n, d)."""
    x = np.asarray(x, dtype=np.float64)
    return x.var(axis=-2).mean(axis=-1)


def dissipation(v) -> np.ndarray:
    """(1/n) sum_i |v_i|^2 for velocities v (..., n, d): minus dF/dt along the gradient flow."""
    v = np.asarray(v, dtype=np.float64)
    return (v * v).sum(axis=(-2, -1)) / v.shape[-2]
