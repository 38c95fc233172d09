r"""The causal ALiBi particle system on the circle ("lost in the middle"), and its linear theory.

**The particle system** (Duerinckx, Geshkovski, Rossi, arXiv 2605.09213; definitions read in
their public code, github.com/borjanG/2026-lost-in-the-middle, `build_causal_weights` and
`force` of `generate_alibi_particle_circle_dynamics.py`). Tokens j = 0 .. n-1 at angles
theta_j; token j attends only to the tokens before it (k < j: a strictly causal mask, no
self-attention), with weights from the ALiBi bias alone, normalized over k < j:

    theta_j' = sum_{k<j} w_jk W(theta_j - theta_k),   w_jk = e^{-(lambda/n)(j - k)} / Z_j,
    Z_j = sum_{k<j} e^{-(lambda/n)(j - k)},            W(u) = -beta sin(u) e^{beta cos u}.

So theta_0' = 0 (token 0 never moves), and token 1 sees token 0 alone (w_10 = 1):
u = theta_1 - theta_0 solves u' = W(u). W = d/du e^{beta cos u} is -beta times the SA force of
§1.1 in angle form (dyn.attention.circle: sin(theta_k - theta_j) e^{beta cos}), but the
normalization is the positional one only: the factor e^{beta cos} is not divided by its
softmax sum (a USA-like model with ALiBi weights; time runs beta times faster than §1.1's at
beta -> 0). Here this is `mask = "strict_causal"`, `bias_slope` = lambda and `bias_scale =
"1/n"` (the rate lambda/n per position; `"1"`: lambda per position, as attention_sphere's
`bias_slope`). `mask = "causal"` lets token j weigh itself too (k <= j: weight 1 in Z_j, no
force), a variant not in the paper.

**Kinetic limit and its linearization** (reconstructed here from the formulas in the docstring
of their `generate_u_shape_numerology_data.py`; the paper's own text could not be read here).
With s = j/n in [0, 1], the weights tend to the kernel k(s, s') = lambda e^{lambda s'} /
(e^{lambda s} - 1) on s' < s. Around the uniform law each Fourier mode m of the density at
position s, r_m(t, s), obeys the Volterra equation d_t r_m(s) = a_m int_0^s k(s, s') r_m(s') ds'
with growth rate a_m = m^2 I_m(beta) (W's Fourier coefficient is i m I_m(beta); same rates as
§1.3 at sigma = 0 without the 1/I_0 of SA). The iterated kernels are k^(p)(s, s') =
k(s, s') L^{p-1} / (p-1)!, L = log((e^{lambda s} - 1)/(e^{lambda s'} - 1)), so the response of
the last token (s = 1) to a perturbation at s, less the identity, is

    g_a(t, 1; s) = [lambda e^{lambda s} / (e^lambda - 1)] psi_{a t}(Y_lambda(s)),
    Y_lambda(s) = log((e^lambda - 1)/(e^{lambda s} - 1)),
    psi_c(y) = sum_{p>=0} c^{p+1} y^p / (p! (p+1)!) = sqrt(c/y) I_1(2 sqrt(c y)),

their formula. Their "soft accuracy" profile is S_t(s) = sum_{m=1}^{m_max} omega_m g_{a_m}(t, 1; s)
with omega_m = exp(-pi^2 m^2 / (2 M^2)) (the Fourier weights of a wrapped Gaussian of width
pi/M; M = 8, m_max = 20, lambda = 1 in their script): large at s -> 0 (psi grows without bound
as Y -> infinity: primacy) and, early on, rising again at s = 1 (recency): a U shape. Its slope
at s = 1 is proportional to sum_m omega_m (a_m t - a_m^2 t^2 / (2 (1 - e^{-lambda}))), which
changes sign at

    t_crit(beta) = 2 (1 - e^{-lambda}) sum_m omega_m a_m / sum_m omega_m a_m^2

(their `t_crit`): for t < t_crit the profile has its U shape with a recency arm, after it the
right end decreases too and only primacy is left. (Read from their code: the formulas above and
the parameters lambda = 1, M = 8, m_max = 20; betas 0.1 .. 4.8. Not read: how the paper ties
S_t to a measured accuracy of the particle system; the particle observables of
:mod:`dyn.systems.causal_circle` are this module's own.)

The vector (:data:`LAYOUT`): beta, rate (the bias per position: lambda/n or lambda, resolved at
packing), self (1: the "causal" mask). The state of one member is (n, 1): the angles.
"""

from __future__ import annotations

import math

import numpy as np

import integrators
from integrators.core.geometry import EUCLIDEAN
from integrators.numba.abi import DRIFT_SIG, FASTMATH, NJIT
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register, tangent_drift_jax
from ..core.layout import Layout

LAYOUT = Layout("causal_circle", scalars=("beta", "rate", "own"))
BETA, RATE, OWN = LAYOUT.index("beta"), LAYOUT.index("rate"), LAYOUT.index("own")
MASKS = ("strict_causal", "causal")
BIAS_SCALES = ("1/n", "1")
SOFT_M, MODES = 8.0, 20  # their script's M and Fourier truncation m_max


def bias_rate(bias_slope: float, bias_scale: str, n: int) -> float:
    """The bias per position of distance: lambda / n (`"1/n"`) or lambda (`"1"`)."""
    if bias_scale not in BIAS_SCALES:
        raise ValueError(f"bias_scale must be one of {BIAS_SCALES}, got {bias_scale!r}")
    return float(bias_slope) / n if bias_scale == "1/n" else float(bias_slope)


def continuum_slope(bias_slope: float, bias_scale: str, n: int) -> float:
    """lambda of the kinetic limit (the kernel e^{-lambda (s - s')} in s = j/n)."""
    return bias_rate(bias_slope, bias_scale, n) * n


def pack_causal(
    beta: float, bias_slope: float, n: int, bias_scale: str = "1/n", mask: str = "strict_causal"
) -> np.ndarray:
    """The vector of :data:`LAYOUT` for n tokens."""
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {mask!r}")
    beta = float(beta)
    if not math.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    return LAYOUT.pack(beta=beta, rate=bias_rate(bias_slope, bias_scale, n), own=mask == "causal")


def work_size(n: int, d: int, p=None) -> int:
    """Scratch floats of the drift: cos and sin of every angle."""
    return 2 * n


@njit(DRIFT_SIG, **NJIT, fastmath=FASTMATH)
def causal_drift(t, x, p, out, work):
    """out[j, 0] <- theta_j' = sum_{k<j} w_jk W(theta_j - theta_k) (module doc)."""
    n = x.shape[0]
    beta = p[BETA]
    r = math.exp(-p[RATE])  # weight ratio per position of distance
    own = 1.0 if p[OWN] != 0.0 else 0.0
    c = work[:n]
    s = work[n : 2 * n]
    for i in range(n):
        c[i] = math.cos(x[i, 0])
        s[i] = math.sin(x[i, 0])
    for j in range(n):
        acc = 0.0
        z = own
        w = 1.0
        for k in range(j - 1, -1, -1):
            w *= r  # e^{-rate (j - k)}
            cu = c[j] * c[k] + s[j] * s[k]  # cos(theta_j - theta_k)
            su = s[j] * c[k] - c[j] * s[k]  # sin(theta_j - theta_k)
            acc += w * su * math.exp(beta * cu)
            z += w
        out[j, 0] = -beta * acc / z if z > 0.0 else 0.0


def causal_drift_jax(t, x, p):
    """JAX twin of :func:`causal_drift` (one member (n, 1))."""
    import jax.numpy as jnp

    v = LAYOUT.unpack(p)
    theta = x[:, 0]
    n = theta.shape[0]
    gap = jnp.arange(n)[:, None] - jnp.arange(n)[None, :]  # j - k
    before = gap > 0
    w = jnp.where(before, jnp.exp(-v["rate"] * jnp.where(before, gap, 0)), 0.0)
    z = w.sum(axis=1) + jnp.where(v["own"] != 0.0, 1.0, 0.0)
    u = theta[:, None] - theta[None, :]  # u_jk = theta_j - theta_k
    force = -v["beta"] * jnp.sin(u) * jnp.exp(v["beta"] * jnp.cos(u))
    acc = (w * force).sum(axis=1)
    return jnp.where(z > 0.0, acc / jnp.where(z > 0.0, z, 1.0), 0.0)[:, None]


def _example(rng):
    """Random angles and a vector (beta of either sign, either mask and bias scale)."""
    n = int(rng.choice([2, 5, 13]))
    x = rng.uniform(-np.pi, 3 * np.pi, (n, 1))
    beta = float(rng.choice([-1.0, 0.0, 1.0, 3.0]))
    return x, pack_causal(
        beta, float(rng.choice([0.0, 1.0, 4.0])), n, str(rng.choice(BIAS_SCALES)), str(rng.choice(MASKS))
    )


CAUSAL = register(
    Dynamics("causal_circle", LAYOUT, causal_drift, causal_drift_jax, EUCLIDEAN, example=_example, work=work_size)
)


def causal_problem(p) -> integrators.Problem:
    """The flow as an :class:`integrators.Problem` (states (E, n, 1))."""
    return CAUSAL.problem(p)


# ---------------------------------------------------------------------------------------------
# the flow with its tangent: theta and J = d theta(t) / d theta(0), integrated together


def tangent_work_size(n: int, d: int, p=None) -> int:
    """Scratch of the tangent drift: cos and sin of every angle, one row of couplings."""
    return 3 * n


@njit(DRIFT_SIG, **NJIT, fastmath=FASTMATH)
def causal_tangent_drift(t, y, p, out, work):
    r"""The flow and its tangent for a state y (n, 1 + n): y[:, 0] the angles, y[:, 1:] the
    Jacobian J_jc = d theta_j(t) / d theta_c(0) (start: the identity). With a_jk =
    w_jk W'(theta_j - theta_k) / Z_j, W'(u) = beta e^{beta cos u} (beta sin^2 u - cos u):

        theta_j' = sum_{k<j} w_jk W(u_jk) / Z_j,    J_jc' = sum_{k<j} a_jk (J_jc - J_kc).

    DF is lower triangular, and so is J: entries c > j stay 0 and are not computed."""
    n = y.shape[0]
    beta = p[BETA]
    r = math.exp(-p[RATE])
    own = 1.0 if p[OWN] != 0.0 else 0.0
    c = work[:n]
    s = work[n : 2 * n]
    a = work[2 * n : 3 * n]
    for i in range(n):
        c[i] = math.cos(y[i, 0])
        s[i] = math.sin(y[i, 0])
    for j in range(n):
        acc = 0.0
        z = own
        w = 1.0
        for k in range(j - 1, -1, -1):
            w *= r
            cu = c[j] * c[k] + s[j] * s[k]
            su = s[j] * c[k] - c[j] * s[k]
            e = math.exp(beta * cu)
            acc += w * su * e
            a[k] = w * beta * e * (beta * su * su - cu)
            z += w
        inv = 1.0 / z if z > 0.0 else 0.0
        out[j, 0] = -beta * acc * inv
        diagonal = 0.0
        for k in range(j):
            diagonal += a[k]
        # sum_k a_jk (J_jc - J_kc), row by row (contiguous, vectorised): J_kc = 0 for c > k
        for col in range(j + 1):
            out[j, 1 + col] = diagonal * y[j, 1 + col]
        for col in range(j + 1, n):
            out[j, 1 + col] = 0.0
        row = out[j, 1:]
        for k in range(j):
            ak = a[k]
            below = y[k, 1:]
            for col in range(k + 1):
                row[col] -= ak * below[col]
        for col in range(j + 1):
            out[j, 1 + col] *= inv


def causal_tangent_drift_jax(t, y, p):
    """JAX twin of :func:`causal_tangent_drift`: the tangent by `jax.jvp` of the flow's twin."""
    return tangent_drift_jax(causal_drift_jax, 1)(t, y, p)


def _tangent_example(rng):
    """Angles and a lower-triangular tangent (what J is along the flow: token j depends on the
    tokens k <= j alone)."""
    x, p = _example(rng)
    n = x.shape[0]
    return np.concatenate([x, np.tril(rng.standard_normal((n, n)))], axis=1), p


CAUSAL_TANGENT = register(
    Dynamics(
        "causal_circle_tangent",
        LAYOUT,
        causal_tangent_drift,
        causal_tangent_drift_jax,
        EUCLIDEAN,
        example=_tangent_example,
        work=tangent_work_size,
    )
)


def flow_with_tangent(theta0, times, p, solver) -> tuple[np.ndarray, np.ndarray]:
    """Angles (E, T, n) and the Jacobians J (E, T, n, n), J[e, t, j, c] = d theta_j(t) /
    d theta_c(0), of the flow from theta0 (E, n) at the save times, by `solver` (a fixed-step
    integrator: both solved on one step grid)."""
    theta0 = np.asarray(theta0, dtype=np.float64)
    E, n = theta0.shape
    y0 = np.concatenate([theta0[..., None], np.broadcast_to(np.eye(n), (E, n, n))], axis=2)
    states = solver.solve(CAUSAL_TANGENT.problem(p), y0, times).states
    return states[..., 0], states[..., 1:]


def velocities(theta, p) -> np.ndarray:
    """theta' for angles of shape (..., n) with the vector p of :func:`pack_causal`."""
    theta = np.asarray(theta, dtype=np.float64)
    x = np.ascontiguousarray(theta.reshape(-1, theta.shape[-1], 1))
    out = np.empty_like(x)
    work = np.empty(work_size(x.shape[1], 1))
    p = np.ascontiguousarray(p, dtype=np.float64)
    for e in range(x.shape[0]):
        causal_drift(0.0, x[e], p, out[e], work)
    return out.reshape(theta.shape)


# ---------------------------------------------------------------------------------------------
# the linear kinetic theory (module doc)


def growth_rates(beta: float, modes: int = MODES) -> np.ndarray:
    """a_m = m^2 I_m(beta), m = 1 .. modes (+-inf past |beta| ~ 713, where they exceed
    float64; :func:`t_crit`, a ratio of them, uses the scaled ive there)."""
    from scipy.special import iv

    m = np.arange(1, modes + 1)
    return m**2 * iv(m, beta)


def soft_weights(M: float = SOFT_M, modes: int = MODES) -> np.ndarray:
    """omega_m = exp(-pi^2 m^2 / (2 M^2)), m = 1 .. modes."""
    m = np.arange(1, modes + 1)
    return np.exp(-0.5 * (np.pi * m / M) ** 2)


def t_crit(beta: float, lam: float, M: float = SOFT_M, modes: int = MODES) -> float:
    """Time at which the right-end slope of the profile S_t changes sign (module doc); NaN when
    it does not (no positive root)."""
    a, w = growth_rates(beta, modes), soft_weights(M, modes)
    with np.errstate(over="ignore", invalid="ignore"):
        squares = w @ a**2
        value = 2.0 * (-math.expm1(-lam)) * (w @ a) / squares
    if not math.isfinite(squares):  # a_m^2 overflows past |beta| ~ 358: a_m = e^{|beta|} m^2 ive
        from scipy.special import ive

        m = np.arange(1, modes + 1)
        scaled = m**2 * ive(m, beta)
        ratio = 2.0 * (-math.expm1(-lam)) * (w @ scaled) / (w @ scaled**2)
        if not (math.isfinite(ratio) and ratio > 0):
            return math.nan
        return ratio * math.exp(-abs(float(beta)))  # 0.0 past |beta| ~ 745: below float64
    return value if math.isfinite(value) and value > 0 else math.nan


def t_crit_cos(beta: float, lam: float) -> float:
    """The cosine kernel's own threshold t_crit,1 = 2 (1 - e^{-lambda}) / a_1 (the one-mode
    case of :func:`t_crit`: omega = 1 at m = 1 alone)."""
    a1 = float(growth_rates(beta, 1)[0])
    value = 2.0 * (-math.expm1(-lam)) / a1 if a1 > 0 else math.nan
    return value if math.isfinite(value) and value > 0 else math.nan


def weight_matrix(n: int, rate: float, own: bool = False) -> np.ndarray:
    """W_jk = w_jk, the normalized causal weights of the flow (row j: e^{-rate (j - k)} over
    k < j, and weight 1 on itself with `own`); row 0 of the strict mask is 0."""
    gap = np.arange(n)[:, None] - np.arange(n)[None, :]
    w = np.where(gap > 0, np.exp(-rate * np.maximum(gap, 0)), 0.0)
    z = w.sum(axis=1) + (1.0 if own else 0.0)
    return w / np.where(z > 0, z, 1.0)[:, None]


def linear_response(
    beta: float, n: int, rate: float, times, weights=None, own: bool = False, modes: int = MODES
) -> np.ndarray:
    r"""The finite-n linear theory of the last token's response: n sum_m omega_m
    [exp(a_m t W)]_{n-1, j} for every save time and token j (times, n): the kinetic equation's
    discrete form, d_t r_m = a_m W r_m, before its continuum limit. `weights` (modes,): omega_m
    (default :func:`soft_weights`); one weight [1.0]: the cosine kernel, mode 1 alone. W is
    strictly lower triangular (nilpotent), so exp(a t W) is its finite power series; computed by
    scipy's expm."""
    from scipy.linalg import expm

    W = weight_matrix(n, rate, own)
    omega = soft_weights(SOFT_M, modes) if weights is None else np.asarray(weights, dtype=float)
    a = growth_rates(beta, len(omega))
    out = np.zeros((len(times), n))
    for i, t in enumerate(times):
        for m in range(len(omega)):
            out[i] += omega[m] * expm(a[m] * float(t) * W)[n - 1]
    return n * out


def psi(c, y):
    """psi_c(y) = sqrt(c/y) I_1(2 sqrt(c y)) (c >= 0, y > 0), the series of the module doc."""
    from scipy.special import iv

    c, y = np.asarray(c, dtype=float), np.asarray(y, dtype=float)
    z = 2.0 * np.sqrt(c * y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(z > 0, np.sqrt(c / y) * iv(1, z), c)


def y_lambda(s, lam: float):
    """Y_lambda(s) = log((e^lambda - 1)/(e^{lambda s} - 1)) (log(1/s) at lambda = 0)."""
    s = np.asarray(s, dtype=float)
    if lam == 0.0:
        return -np.log(s)
    return np.log(np.expm1(lam) / np.expm1(lam * s))


def cos_profile(s, beta: float, t: float, lam: float) -> np.ndarray:
    """g_{a_1}(t, 1; s), the continuum response of the cosine kernel (mode 1, weight 1)."""
    return soft_profile(s, beta, t, lam, M=math.inf, modes=1)


def soft_profile(s, beta: float, t: float, lam: float, M: float = SOFT_M, modes: int = MODES) -> np.ndarray:
    """S_t(s) = sum_m omega_m g_{a_m}(t, 1; s) for s in (0, 1] (beta >= 0: psi's closed form
    needs a_m t >= 0)."""
    s = np.asarray(s, dtype=float)
    coeff = np.exp(lam * s) * (lam / np.expm1(lam) if lam != 0.0 else 1.0)
    y = y_lambda(s, lam)[..., None]
    terms = soft_weights(M, modes) * psi(growth_rates(beta, modes) * t, y)
    return coeff * terms.sum(axis=-1)
