r"""Learning to optimize: the Momentum ResNet with f = -grad F on a quadratic F.

    F(x) = 1/2 (x - x*)^T A (x - x*),     A symmetric, eigenvalues in [1/kappa, 1]

The layer  v <- gamma v - eta grad F(x),  x <- x + v  is heavy-ball gradient descent (a Momentum
ResNet with (1 - gamma) f = -eta grad F). Its Jacobian in (x, v) has determinant gamma^d: for
gamma < 1 phase-space volume contracts and, for 0 < eta < 2 (1 + gamma) / L, the iterates converge
to x* at a geometric rate. At gamma = 1 the same update is the leapfrog/RevNet map
v <- v - eta grad F(x), x <- x + v (symplectic Euler of x'' = -grad F): volume preserving, so it
cannot contract onto a point; for eta < 4 / L it oscillates forever around x* at constant amplitude
in every eigendirection.
"""

from __future__ import annotations

import numpy as np


def random_quadratic(rng: np.random.Generator, d: int, kappa: float) -> tuple[np.ndarray, np.ndarray]:
    """(A, x*): A = Q diag(lambda) Q^T with lambda log-spaced in [1/kappa, 1], Q Haar, x* ~ N(0, I)."""
    q, r = np.linalg.qr(rng.standard_normal((d, d)))
    q = q * np.sign(np.diag(r))
    lam = np.geomspace(1.0 / kappa, 1.0, d)
    return (q * lam) @ q.T, rng.standard_normal(d)


def heavy_ball_layer(x, v, A, xstar, gamma: float, eta: float):
    """One layer  v <- gamma v - eta A (x - x*),  x <- x + v  on rows of x, v (..., d)."""
    v = gamma * v - eta * (x - xstar) @ A.T
    return x + v, v


def heavy_ball(x0, A, xstar, gamma: float, eta: float, iterations: int) -> np.ndarray:
    """|x_k - x*| for k = 0..iterations, from x0 (E, d) with v_0 = 0: shape (E, iterations + 1)."""
    x = np.array(x0, dtype=np.float64)
    v = np.zeros_like(x)
    out = np.empty((x.shape[0], int(iterations) + 1))
    out[:, 0] = np.linalg.norm(x - xstar, axis=-1)
    for k in range(1, int(iterations) + 1):
        x, v = heavy_ball_layer(x, v, A, xstar, gamma, eta)
        out[:, k] = np.linalg.norm(x - xstar, axis=-1)
    return out


def layer_matrix(A, gamma: float, eta: float) -> np.ndarray:
    """The layer as a linear map of (x - x*, v) in R^{2d}: [[I - eta A, gamma I], [-eta A, gamma I]]."""
    d = A.shape[0]
    return np.block([[np.eye(d) - eta * A, gamma * np.eye(d)], [-eta * A, gamma * np.eye(d)]])


def contraction_rate(A, gamma: float, eta: float) -> float:
    """Spectral radius of :func:`layer_matrix`: the asymptotic rate of convergence (< 1) or 1 for
    the volume-preserving gamma = 1 map."""
    return float(np.max(np.abs(np.linalg.eigvals(layer_matrix(A, gamma, eta)))))
