r"""Deep ResNets with width-M random-feature blocks and their mean ODE (Chizat, "The hidden width
of deep ResNets", arXiv 2509.10167).

Model, for inputs ``x_0`` in R^d (one per row) and layers ``l = 0..L-1``, ``s_l = l/L``::

    x_{l+1} = x_l + alpha/(L M) sum_{m<M} V_{l,m} sigma(<W_{l,m}, x_l>)

with the M units of layer l drawn i.i.d. from a law mu_{s_l} that depends smoothly on depth:
``W ~ N(0, I_d)`` and ``V = B(s) W + tau xi``, ``xi ~ N(0, I_d)`` independent, where
``B(s) = sum_{k<K} B_k cos(pi k s)`` (``B_k ~ N(0, 1/d) / (1 + k)``, one fixed draw per network).
The residual scale is the paper's alpha/(L M): each layer adds alpha/L times the empirical mean
of its M units.

**The mean ODE.** The block's expectation over mu_s is, by Stein's lemma
(``E[W h(W)] = E[grad h(W)]`` for ``W ~ N(0, I)``, here ``h(W) = sigma(<W, x>)``)::

    F(x, s) = E[V sigma(<W, x>)] = B(s) E[W sigma(<W, x>)] = B(s) x g(|x|),
    g(r) = E[sigma'(r z)],  z ~ N(0, 1),

in closed form for the two activations: ``sigma(u) = erf(u / sqrt 2)`` (tanh-like, smooth) has
``sigma'(u) = sqrt(2/pi) e^{-u^2/2}``, so ``g(r) = sqrt(2/pi) / sqrt(1 + r^2)``; ReLU has
``g = 1/2`` (a linear mean ODE). The mean ODE is ``dx/ds = alpha F(x, s)``, s in [0, 1].

**Why O(1/L + alpha/sqrt(L M)).** Write the layer as ``x_{l+1} = x_l + (alpha/L)(F(x_l, s_l) +
e_l)`` with ``e_l`` the empirical mean of M i.i.d. centred vectors: ``E e_l = 0`` and
``E|e_l|^2 = v(x_l, s_l)/M`` given the past. Without ``e_l`` this is explicit Euler on the mean
ODE: global error O(1/L). The ``e_l`` are martingale increments; carried to s = 1 by the ODE's
(bounded) linearization they add ``sum_l (alpha/L) J_l e_l``, of variance ``alpha^2/L^2 * L *
O(1/M) = O(alpha^2 / (L M))``; the cross terms (e_l fed back through the nonlinearity) are of
higher order. So ``E|x_L - x(1)|^2 ~ c_1^2 / L^2 + c_2^2 alpha^2 / (L M)``: slope -1 in L where
M >> L, and slope -1/2 in L M where L M << L^2, i.e. M << L. At the next order the variance
sum is itself a Riemann (Euler) sum, short of its integral by a relative c/L (c > 0 on average
over networks here), which at small M outweighs the bias and lifts the slope in L above -1/2
(:mod:`resnet_width`: ``E^2 = a/L^2 + b/(L M) (1 - c/L)``). :func:`fluctuation_covariance`
is that variance at finite L, from one unit's covariance ``Cov[V sigma(<W, x>)] = B [q u u^T +
p (I - u u^T)] B^T + tau^2 p I - F F^T`` with ``x = r u``, ``p = E sigma(r z)^2`` and ``q = E
z^2 sigma(r z)^2`` (:func:`second_moments`). The paper proves the bound along training; here it is the forward
pass at initialization, the first step of its argument. The paper's body was read only through
its abstract here; the law mu_s and the closed form above are this module's own choice, made so
that the limit is exact.
"""

from __future__ import annotations

import math

import numpy as np

ACTIVATIONS = ("erf", "relu")
FORMS = ("ode", "mean", "network")


def sigma(u, activation: str):
    """The unit's activation."""
    if activation == "erf":
        from scipy.special import erf

        return erf(u / math.sqrt(2.0))
    if activation == "relu":
        return np.maximum(u, 0.0)
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def gain(r, activation: str):
    """g(r) = E sigma'(r z), z ~ N(0, 1) (module doc), for radii r >= 0."""
    r = np.asarray(r, dtype=np.float64)
    if activation == "erf":
        return math.sqrt(2.0 / math.pi) / np.sqrt(1.0 + r * r)
    if activation == "relu":
        return np.full(r.shape, 0.5)
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def draw_coupling(rng: np.random.Generator, d: int, modes: int) -> np.ndarray:
    """Cosine coefficients B_k (K, d, d) of the coupling B(s): N(0, 1/d) / (1 + k)."""
    if d < 1 or modes < 1:
        raise ValueError(f"need d >= 1 and modes >= 1, got d = {d}, modes = {modes}")
    decay = 1.0 / (1.0 + np.arange(modes))
    return rng.standard_normal((modes, d, d)) * decay[:, None, None] / math.sqrt(d)


def coupling(coeffs: np.ndarray, s: float) -> np.ndarray:
    """B(s) = sum_k B_k cos(pi k s), shape (d, d)."""
    return np.tensordot(np.cos(math.pi * np.arange(coeffs.shape[0]) * s), coeffs, axes=1)


def mean_field(x, coeffs: np.ndarray, s: float, activation: str) -> np.ndarray:
    """F(x, s) = B(s) x g(|x|) for inputs x (B, d): the block's mean over mu_s (module doc)."""
    x = np.asarray(x, dtype=np.float64)
    return (x @ coupling(coeffs, s).T) * gain(np.linalg.norm(x, axis=-1), activation)[..., None]


def draw_units(
    rng: np.random.Generator, coeffs: np.ndarray, s: float, width: int, noise: float
) -> tuple[np.ndarray, np.ndarray]:
    """The M units of a layer at depth s, i.i.d. from mu_s: W (M, d) ~ N(0, I), V = W B(s)^T +
    noise * xi (M, d)."""
    d = coeffs.shape[-1]
    W = rng.standard_normal((width, d))
    V = W @ coupling(coeffs, s).T
    if noise:
        V += noise * rng.standard_normal((width, d))
    return W, V


def block(x, W, V, activation: str) -> np.ndarray:
    """The empirical mean (1/M) sum_m V_m sigma(<W_m, x>) for inputs x (B, d)."""
    return sigma(np.asarray(x) @ W.T, activation) @ V / W.shape[0]


def forward_states(
    x0,
    coeffs: np.ndarray,
    depth: int,
    width: int,
    alpha: float,
    activation: str,
    noise: float,
    rng: np.random.Generator,
    save_every: int | None = None,
) -> np.ndarray:
    """x_0, x_k, x_2k, ..., x_L of the network (module doc; k = save_every, dividing L): shape
    (L/k + 1, B, d). Layer l draws its units from `rng`, layer after layer, at s = l/L."""
    x = np.array(x0, dtype=np.float64)
    every = depth if save_every is None else int(save_every)
    if depth < 1 or width < 1 or every < 1 or depth % every:
        raise ValueError(f"need depth, width >= 1 and save_every dividing depth; got {depth}, {width}, {save_every}")
    h, states = alpha / depth, [x.copy()]
    for layer in range(depth):
        W, V = draw_units(rng, coeffs, layer / depth, width, noise)
        x += h * block(x, W, V, activation)
        if (layer + 1) % every == 0:
            states.append(x.copy())
    return np.stack(states)


def mean_states(
    x0, coeffs: np.ndarray, depth: int, alpha: float, activation: str, save_every: int | None = None
) -> np.ndarray:
    """x_0, x_k, ..., x_L of the infinitely wide network (M = infinity: Euler layers of the mean
    field, x + (alpha/L) F; k = save_every, dividing L): shape (L/k + 1, B, d)."""
    x = np.array(x0, dtype=np.float64)
    every = depth if save_every is None else int(save_every)
    if depth < 1 or every < 1 or depth % every:
        raise ValueError(f"need depth >= 1 and save_every dividing depth; got {depth}, {save_every}")
    states = [x.copy()]
    for layer in range(depth):
        x += (alpha / depth) * mean_field(x, coeffs, layer / depth, activation)
        if (layer + 1) % every == 0:
            states.append(x.copy())
    return np.stack(states)


def mean_network(x0, coeffs: np.ndarray, depth: int, alpha: float, activation: str) -> np.ndarray:
    """x_L of the infinitely wide network: Euler layers of the mean field, x + (alpha/L) F."""
    return mean_states(x0, coeffs, depth, alpha, activation)[-1]


def second_moments(r, activation: str) -> tuple[np.ndarray, np.ndarray]:
    """(p, q) = (E sigma(r z)^2, E z^2 sigma(r z)^2), z ~ N(0, 1), for radii r >= 0 (module doc).
    erf: p = (2/pi) arcsin(r^2/(1 + r^2)) (the arcsine kernel), q = p + (4/pi) r^2 / ((1 + r^2)
    sqrt(1 + 2 r^2)) (Stein twice); ReLU: p = r^2/2, q = 3 r^2/2."""
    r = np.asarray(r, dtype=np.float64)
    if activation == "erf":
        p = (2.0 / math.pi) * np.arcsin(r * r / (1.0 + r * r))
        return p, p + (4.0 / math.pi) * r * r / ((1.0 + r * r) * np.sqrt(1.0 + 2.0 * r * r))
    if activation == "relu":
        return 0.5 * r * r, 1.5 * r * r
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def unit_covariance(x, coeffs: np.ndarray, s: float, activation: str, noise: float = 0.0) -> np.ndarray:
    """Cov of one unit V sigma(<W, x>) under mu_s, for inputs x (B, d): shape (B, d, d). With
    x = r u: B(s) [q u u^T + p (I - u u^T)] B(s)^T + noise^2 p I - F F^T (module doc)."""
    x = np.asarray(x, dtype=np.float64)
    r = np.linalg.norm(x, axis=-1)
    p, q = second_moments(r, activation)
    u = x / np.where(r > 0, r, 1.0)[..., None]
    uu = u[..., :, None] * u[..., None, :]
    eye = np.eye(x.shape[-1])
    K = q[..., None, None] * uu + p[..., None, None] * (eye - uu)
    B = coupling(coeffs, s)
    F = mean_field(x, coeffs, s, activation)
    return B @ K @ B.T + noise * noise * p[..., None, None] * eye - F[..., :, None] * F[..., None, :]


def mean_jacobian(x, coeffs: np.ndarray, s: float, activation: str) -> np.ndarray:
    """dF/dx = B(s) (g(r) I + g'(r)/r x x^T) for inputs x (B, d): shape (B, d, d); erf:
    g'(r)/r = -sqrt(2/pi) (1 + r^2)^{-3/2}, ReLU: 0."""
    x = np.asarray(x, dtype=np.float64)
    r = np.linalg.norm(x, axis=-1)
    if activation == "erf":
        bend = -math.sqrt(2.0 / math.pi) * (1.0 + r * r) ** -1.5
    elif activation == "relu":
        bend = np.zeros_like(r)
    else:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    inner = (
        gain(r, activation)[..., None, None] * np.eye(x.shape[-1])
        + bend[..., None, None] * x[..., :, None] * x[..., None, :]
    )
    return coupling(coeffs, s) @ inner


def fluctuation_covariance(
    x0, coeffs: np.ndarray, depth: int, width: int, alpha: float, activation: str, noise: float = 0.0
) -> np.ndarray:
    """Cov of x_L - xbar_L (the network against the infinitely wide one, the same L) to leading
    order in 1/M, per input: shape (B, d, d). The linearized recursion (module doc)
    Sigma_{l+1} = P_l Sigma_l P_l^T + h^2 C_l / M, P_l = I + h dF/dx, h = alpha/L, along the
    mean network's layers xbar_l; exact for the linearized network at every L (its 1/L
    correction included)."""
    if depth < 1 or width < 1:
        raise ValueError(f"need depth, width >= 1; got {depth}, {width}")
    x = np.array(x0, dtype=np.float64)
    h, eye = alpha / depth, np.eye(x.shape[-1])
    cov = np.zeros((*x.shape, x.shape[-1]))
    for layer in range(depth):
        s = layer / depth
        P = eye + h * mean_jacobian(x, coeffs, s, activation)
        cov = P @ cov @ np.swapaxes(P, -1, -2) + (h * h / width) * unit_covariance(x, coeffs, s, activation, noise)
        x += h * mean_field(x, coeffs, s, activation)
    return cov


def mean_ode(x0, coeffs: np.ndarray, alpha: float, activation: str, times, rtol: float = 1e-12) -> np.ndarray:
    """x(s) of dx/ds = alpha F(x, s) at `times` (from times[0]), shape (len(times), B, d): an
    8th-order adaptive solve (scipy's DOP853, atol 1e-14)."""
    from scipy.integrate import solve_ivp

    x0 = np.asarray(x0, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)

    def rate(s, y):
        return alpha * mean_field(y.reshape(x0.shape), coeffs, s, activation).ravel()

    sol = solve_ivp(rate, (times[0], times[-1]), x0.ravel(), t_eval=times, rtol=rtol, atol=1e-14, method="DOP853")
    if not sol.success:
        raise RuntimeError(f"the mean ODE solve failed: {sol.message}")
    return sol.y.T.reshape((len(times), *x0.shape))
