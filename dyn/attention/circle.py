r"""Self-attention on the circle in angle form, for any real beta (repulsive attention: beta < 0).

**Angle form** (physics.md §1.1 with d = 2, Q = K = V = I). A token is x_i = (cos theta_i,
sin theta_i), so <x_i, x_j> = cos(theta_i - theta_j); its velocity is tangent, x_i' = theta_i' e_i
with e_i = (-sin theta_i, cos theta_i), and <e_i, x_j> = sin(theta_j - theta_i). Hence

    theta_i' = <e_i, sum_j A_ij x_j> = sum_j A_ij sin(theta_j - theta_i),
    A_ij = exp(beta cos(theta_i - theta_j)) / Z_i,
    Z_i = G_i = sum_k e^{beta cos(theta_i - theta_k)} (SA)   or   Z_i = n (USA).

With f(u) = e^{beta cos u} sin u and F_i = sum_j f(theta_j - theta_i): theta_i' = F_i / G_i (SA) or
F_i / n (USA). Nothing here needs beta >= 0: beta < 0 makes a token weigh the tokens far from
it most (its own weight e^beta is the smallest), i.e. repulsive attention.

**Energy and normalization.** E(theta) = (1/(2 beta)) sum_{i,j} e^{beta cos(theta_i - theta_j)}
(beta != 0) has dE/dtheta_i = F_i. USA is gradient ascent of E; SA is gradient ascent of the same
E in the metric diag(G_i(theta)) (theta_i' = F_i / G_i), so dE/dt = sum_i F_i^2 / G_i >= 0 too.
Both have the same equilibria (F = 0), and at an equilibrium the Jacobian is diag(1/G) H (SA) or
H / n (USA) with H = Hess E symmetric,

    H_ij = f'(theta_j - theta_i) (i != j),  H_ii = -sum_{j != i} f'(theta_j - theta_i),
    f'(u) = e^{beta cos u} (cos u - beta sin^2 u),

so by Sylvester's law of inertia an equilibrium has the same stability type under SA and USA
(H 1 = 0: the rotation; :func:`linear_rates` gives the rates of diag(1/G)^{1/2} H diag(1/G)^{1/2}).
Synchronization results for one normalization carry over to the other.

**Synchronized state** (all theta_i equal): H = e^beta (1 1^T - n I), rates -1 (SA): stable for
every beta. Tokens inside an open arc shorter than pi synchronize whatever beta: the two end
tokens of the arc see every other token on one side, sin(theta_j - theta_i) of one sign, and
the weights are positive, so they move inwards; the arc shrinks to a point. An arc below pi is
therefore a proven decision (the system's `sync_arc`).

**Splay states** theta_k = theta_0 + 2 pi k / n are equilibria for every beta (A_ij is even in
theta_j - theta_i, the sine odd). H is circulant; its rates are proportional to

    lambda_k = sum_{m=1}^{n-1} f'(2 pi m / n) (cos(2 pi k m / n) - 1),   k = 1 .. n-1.

For n = 3, f'(2 pi / 3) = e^{-beta/2} (-1/2 - 3 beta/4) and lambda_1 = lambda_2 =
3 e^{-beta/2} (1/2 + 3 beta/4): the equilateral triangle is stable iff **beta < -2/3**, and so
are three equal clusters of k tokens each (n = 3k; their intra-cluster rates are negative
there, below). This is the bound -2/3 of the paper (a stable non-synchronized equilibrium has a
basin of positive measure, so global synchronization fails). For large n the SA rates
lambda_k / G tend to k^2 I_k(beta) / (beta I_0(beta)), the growth rate of mode k of the uniform law
(§1.3 with sigma = 0, SA): mode 1 grows for every beta (I_1(beta)/beta > 0), so splay states of
many tokens are saddles.

**Cluster states.** K clusters of m_a tokens at angles phi_a are an equilibrium iff
sum_b m_b f(phi_b - phi_a) = 0 for every a. With Lambda_a = sum_b m_b f'(phi_b - phi_a) (b = a
included, f'(0) = e^beta), H has the intra-cluster rates -Lambda_a (multiplicity m_a - 1) and on
the cluster motions the symmetric K x K matrix M^{1/2} F' M^{1/2} - diag(Lambda), F'_ab =
f'(phi_b - phi_a), M = diag(m) (:func:`cluster_top_rate`). For three equal clusters the
intra-cluster rate is -m (e^beta - e^{-beta/2} (1 + 3 beta/2)) < 0 for every beta <= -2/3. When
3 does not divide n the sizes differ by one and the equilateral balance is broken: the branch of
3-cluster equilibria with sizes as equal as possible, continued from beta = -3 (where it is
stable), loses stability or ends at beta_3(n) < -2/3 (:func:`three_cluster_onset`): -1.2223
(n = 8), -0.9076 (n = 32), -0.7802 (n = 128), -2/3 for every multiple of 3. Other families
(e.g. five equal clusters, stable only below beta = -2.11) are not tracked.

**What could not be read here.** Polyanskiy, Rigollet, Yao (arXiv 2507.22857) was read as its
abstract and third-party summaries only (search tool): synchronization for beta >= -0.16 (a
criterion on the L1 norm of the third derivative of the interaction function, through the
energy landscape), and no global synchronization for beta < -2/3 "for certain n". Neither the
paper's exact model (its normalization and time scale: the summaries mention "normalized
dynamics" as an extension) nor its construction behind -2/3 were read; -0.16 is taken as stated,
and -2/3 is reconstructed above (it matches the n = 3 triangle exactly; by the inertia argument
it holds for SA and USA alike). The window -2/3 <= beta < -0.16 is open.

**Fourier form** (O(nK) instead of O(n^2)). Jacobi-Anger, e^{beta cos u} = sum_k I_k(beta) e^{iku};
since f = -(1/beta) d/du e^{beta cos u} and I_{k-1} - I_{k+1} = (2k / beta) I_k,

    f(u) = sum_{k>=1} b_k sin(k u),   b_k = I_{k-1}(beta) - I_{k+1}(beta)   (b_1 = 1 at beta = 0).

With the moments C_k = sum_j e^{i k theta_j}:

    G_i = I_0 n + 2 sum_{k=1}^K I_k Re(e^{-ik theta_i} C_k),
    F_i = sum_{k=1}^K b_k Im(e^{-ik theta_i} C_k)

up to the terms k > K. Coefficients are kept
scaled by e^{-|beta|} (:func:`dyn.numerics.bessel.circle_coefficients`). With T_K = the tail bound
sum_{|k|>K} |I_k| e^{-|beta|} of :mod:`dyn.numerics.bessel`, the dropped terms change F_i and
G_i by at most n T_{K-1} (scaled), and G_i >= n e^{-2|beta|} (scaled), so the drift moves by at
most 2 e^{2|beta|} T_{K-1} (SA, |theta'| <= 1; less for USA): K is the least order keeping that
below `tol` (:func:`fourier_order_for`).

The vector (:data:`LAYOUT`): beta, usa, then the block `coef` = (a_0..a_K, b_1..b_K) scaled by
e^{-|beta|}, empty for the direct O(n^2) sum. The state of one member is (n, 1): the angles.
"""

from __future__ import annotations

import math

import numpy as np

import integrators
from integrators.core.geometry import EUCLIDEAN
from integrators.numba.abi import DRIFT_SIG, FASTMATH, NJIT
from integrators.numba.jit import njit

from ..core.dynamics import Dynamics, register
from ..core.layout import Layout, block
from ..numerics.bessel import circle_coefficients, fourier_order

LAYOUT = Layout("attention_circle", scalars=("beta", "usa"), blocks={"coef": ("C",)})
BETA, USA = LAYOUT.index("beta"), LAYOUT.index("usa")
COEF_AT = LAYOUT.block_at("coef")
NORMALIZATIONS = ("SA", "USA")
KERNELS = ("direct", "fourier")
BETA_SYNC = -0.16  # synchronization proved for beta >= this (arXiv 2507.22857, abstract)
BETA_NO_SYNC = -2.0 / 3.0  # global synchronization fails below (n = 3: the triangle is stable)
ONSET_FROM, ONSET_STEP, ONSET_TOL = -3.0, 0.05, 1e-9  # the 3-cluster continuation
NEWTON_STEPS, NEWTON_TOL = 40, 1e-13  # its equilibria: Newton on the two free cluster angles
UNDECIDED, SYNCHRONIZED, EQUILIBRIUM = 0, 1, 2  # the codes of :func:`classify`
RATE_FLOOR = 1e-8  # a linear rate above -RATE_FLOOR is not counted as stable (rounding)


def fourier_order_for(beta: float, tol: float) -> int:
    """Least K >= 1 with 2 e^{2|beta|} T_{K-1} <= tol (module doc): the truncated drift is
    within `tol` of the exact one (SA; USA closer)."""
    return fourier_order(beta, tol * math.exp(-2.0 * abs(beta)) / 2.0) + 1


def pack_circle(beta: float, normalization: str = "SA", kernel: str = "direct", tol: float = 1e-12) -> np.ndarray:
    """The vector of :data:`LAYOUT`: direct O(n^2) sum, or the Fourier series within `tol`."""
    beta = float(beta)
    if not math.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    key = str(normalization).upper()
    if key not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    coef = np.zeros(0)
    if kernel == "fourier":
        K = fourier_order_for(beta, tol)
        scaled = circle_coefficients(beta, K + 1)  # I_k(beta) e^{-|beta|}, k = 0..K+1
        b = scaled[:K] - scaled[2 : K + 2]  # b_k = I_{k-1} - I_{k+1}, k = 1..K
        coef = np.concatenate([scaled[: K + 1], b])
    return LAYOUT.pack(beta=beta, usa=key == "USA", coef=coef)


def work_size(n: int, d: int, p=None) -> int:
    """Scratch floats of the drift: 3n (direct), or 6n + 2(K + 1) (Fourier)."""
    if p is None or len(p) == LAYOUT.header:
        return 3 * n
    K = (len(p) - LAYOUT.header - 1) // 2
    return 6 * n + 2 * (K + 1)


@njit(DRIFT_SIG, **NJIT, fastmath=FASTMATH)
def circle_drift(t, x, p, out, work):
    """out[i, 0] <- theta_i' = sum_j A_ij sin(theta_j - theta_i) for the angles x[:, 0]."""
    n = x.shape[0]
    beta = p[BETA]
    usa = p[USA] != 0.0
    shift = abs(beta)  # every weight e^{beta cos u - |beta|} lies in [e^{-2|beta|}, 1]
    coef = block(p, COEF_AT)
    g = work[2 * n : 3 * n]
    if coef.shape[0] == 0:
        c = work[:n]
        s = work[n : 2 * n]
        own = math.exp(beta - shift)
        for i in range(n):
            c[i] = math.cos(x[i, 0])
            s[i] = math.sin(x[i, 0])
            out[i, 0] = 0.0
            g[i] = own
        for i in range(n):  # each pair once: the weight is symmetric, the sine antisymmetric
            ci, si = c[i], s[i]
            fi, gi = 0.0, 0.0
            for j in range(i + 1, n):
                su = s[j] * ci - c[j] * si
                w = math.exp(beta * (c[j] * ci + s[j] * si) - shift)
                fi += w * su
                gi += w
                out[j, 0] -= w * su
                g[j] += w
            out[i, 0] += fi
            g[i] += gi
    else:
        K = (coef.shape[0] - 1) // 2
        z = work[: 2 * n].view(np.complex128)
        pw = work[3 * n : 5 * n].view(np.complex128)
        f = work[5 * n : 6 * n]
        C = work[6 * n : 6 * n + 2 * (K + 1)].view(np.complex128)
        for j in range(n):
            z[j] = complex(math.cos(x[j, 0]), math.sin(x[j, 0]))
            pw[j] = 1.0
        for k in range(K + 1):  # C_k = sum_j e^{i k theta_j}
            acc = 0.0 + 0.0j
            for j in range(n):
                acc += pw[j]
                pw[j] *= z[j]
            C[k] = acc
        a0n = coef[0] * n
        for i in range(n):
            zc = z[i].conjugate()
            q = 1.0 + 0.0j
            gi, fi = 0.0, 0.0
            for k in range(1, K + 1):
                q *= zc
                m = q * C[k]
                gi += coef[k] * m.real
                fi += coef[K + k] * m.imag
            g[i] = a0n + 2.0 * gi
            f[i] = fi
        for i in range(n):
            out[i, 0] = f[i]
    if usa:
        scale = math.exp(shift) / n
        for i in range(n):
            out[i, 0] *= scale
    else:
        for i in range(n):
            out[i, 0] /= g[i]


def circle_drift_jax(t, x, p):
    """JAX twin of :func:`circle_drift` (one member (n, 1); the kernel from the length of p)."""
    import jax.numpy as jnp

    v = LAYOUT.unpack(p)
    beta, coef = v["beta"], v["coef"]
    theta = x[:, 0]
    n = theta.shape[0]
    shift = jnp.abs(beta)
    if coef.shape[0] == 0:
        u = theta[None, :] - theta[:, None]  # u_ij = theta_j - theta_i
        w = jnp.exp(beta * jnp.cos(u) - shift)
        f, g = jnp.sum(w * jnp.sin(u), axis=1), jnp.sum(w, axis=1)
    else:
        K = (coef.shape[0] - 1) // 2
        k = jnp.arange(K + 1)
        powers = jnp.exp(1j * theta[:, None] * k)  # e^{i k theta_j}
        m = jnp.conj(powers) * powers.sum(axis=0)  # e^{-ik theta_i} C_k
        g = coef[0] * n + 2.0 * jnp.real(m[:, 1:]) @ coef[1 : K + 1]
        f = jnp.imag(m[:, 1:]) @ coef[K + 1 :]
    drift = jnp.where(v["usa"] != 0.0, f * jnp.exp(shift) / n, f / g)
    return drift[:, None]


def _example(rng):
    """Random angles and a vector (beta of either sign, either normalization and kernel)."""
    n = int(rng.choice([3, 11]))
    x = rng.uniform(-np.pi, 3 * np.pi, (n, 1))
    beta = float(rng.choice([-1.5, -0.4, 0.0, 2.0]))
    return x, pack_circle(beta, str(rng.choice(NORMALIZATIONS)), str(rng.choice(KERNELS)))


CIRCLE = register(
    Dynamics("attention_circle", LAYOUT, circle_drift, circle_drift_jax, EUCLIDEAN, example=_example, work=work_size)
)


def circle_problem(p) -> integrators.Problem:
    """The angle-form flow as an :class:`integrators.Problem` (states (E, n, 1))."""
    return CIRCLE.problem(p)


# ---------------------------------------------------------------------------------------------
# numpy-facing: drift, geometry of a configuration, linear stability, theory


def _angles(theta) -> np.ndarray:
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim < 1 or theta.shape[-1] < 1:
        raise ValueError(f"theta must have shape (..., n) with n >= 1, got {theta.shape}")
    return theta


def velocities(theta, p) -> np.ndarray:
    """theta' for angles of shape (..., n) with the vector p of :func:`pack_circle`."""
    theta = _angles(theta)
    x = np.ascontiguousarray(theta.reshape(-1, theta.shape[-1], 1))
    out = np.empty_like(x)
    work = np.empty(work_size(x.shape[1], 1, p))
    p = np.ascontiguousarray(p, dtype=np.float64)
    for e in range(x.shape[0]):
        circle_drift(0.0, x[e], p, out[e], work)
    return out.reshape(theta.shape)


def velocity(theta, beta: float, normalization: str = "SA", kernel: str = "direct") -> np.ndarray:
    """theta_i' = sum_j A_ij sin(theta_j - theta_i) for angles of shape (..., n)."""
    return velocities(theta, pack_circle(beta, normalization, kernel))


def tokens(theta) -> np.ndarray:
    """The unit tokens (cos theta, sin theta), shape (..., n, 2)."""
    theta = _angles(theta)
    return np.stack([np.cos(theta), np.sin(theta)], axis=-1)


def circular_gaps(theta) -> np.ndarray:
    """The n gaps between neighbouring tokens around the circle (sorted order), (..., n)."""
    a = np.sort(np.mod(_angles(theta), 2 * np.pi), axis=-1)
    return np.diff(a, axis=-1, append=a[..., :1] + 2 * np.pi)


def arc(theta) -> np.ndarray:
    """Length of the shortest arc holding every token: 2 pi minus the largest gap."""
    return 2 * np.pi - circular_gaps(theta).max(axis=-1)


def cluster_count(theta, gap: float) -> np.ndarray:
    """Groups of tokens separated by gaps wider than `gap` (1 when all lie within one arc)."""
    return np.maximum((circular_gaps(theta) > gap).sum(axis=-1), 1)


def _fprime(u, beta):
    return np.exp(beta * np.cos(u)) * (np.cos(u) - beta * np.sin(u) ** 2)


def hessian(theta, beta: float) -> np.ndarray:
    """H = Hess E at angles theta (n,): H_ij = f'(theta_j - theta_i), rows summing to 0."""
    theta = _angles(theta)
    H = _fprime(theta[None, :] - theta[:, None], beta)
    np.fill_diagonal(H, 0.0)
    H[np.diag_indices_from(H)] = -H.sum(axis=1)
    return H


def linear_rates(theta, beta: float, normalization: str = "SA") -> np.ndarray:
    """The n - 1 rates (ascending) of the linearized flow at angles theta (n,) off the rotation:
    eigenvalues of diag(1/G)^{1/2} H diag(1/G)^{1/2} (SA) or H / n (USA), whose rotation mode
    diag(G)^{1/2} 1 is dropped. At an equilibrium these are the Jacobian's eigenvalues."""
    theta = _angles(theta)
    n = theta.shape[-1]
    H = hessian(theta, beta)
    if str(normalization).upper() == "USA":
        scale = np.full(n, 1.0 / n)
    else:
        scale = 1.0 / np.exp(beta * np.cos(theta[None, :] - theta[:, None])).sum(axis=1)
    root = np.sqrt(scale)
    S = root[:, None] * H * root[None, :]
    u = 1.0 / root
    u /= np.linalg.norm(u)
    shift = 1.0 + 2.0 * np.abs(S).sum(axis=1).max()  # below every other eigenvalue (Gershgorin)
    rates = np.linalg.eigvalsh(S - shift * np.outer(u, u))
    return rates[1:]


def splay(n: int, theta0: float = 0.0) -> np.ndarray:
    """n equally spaced angles: an equilibrium for every beta."""
    return theta0 + 2 * np.pi * np.arange(n) / n


def splay_rates(n: int, beta: float) -> np.ndarray:
    """lambda_k, k = 1..n-1, of the splay state (module doc; proportional to its rates)."""
    u = 2 * np.pi * np.arange(1, n) / n
    k = np.arange(1, n)[:, None]
    return (_fprime(u, beta)[None, :] * (np.cos(k * u[None, :]) - 1.0)).sum(axis=1)


def cluster_forces(phi, sizes, beta: float) -> np.ndarray:
    """sum_b m_b f(phi_b - phi_a) for clusters of `sizes` at angles phi (zero: equilibrium)."""
    phi, m = np.asarray(phi, dtype=float), np.asarray(sizes, dtype=float)
    u = phi[None, :] - phi[:, None]
    return (m[None, :] * np.exp(beta * np.cos(u)) * np.sin(u)).sum(axis=1)


def cluster_top_rate(phi, sizes, beta: float) -> float:
    """Largest eigenvalue of H off the rotation for tokens in clusters of `sizes` at phi (module
    doc): negative iff the cluster state is a linearly stable equilibrium (when it is one)."""
    phi, m = np.asarray(phi, dtype=float), np.asarray(sizes, dtype=float)
    Fp = _fprime(phi[None, :] - phi[:, None], beta)  # F'_ab = f'(phi_b - phi_a)
    lam = Fp @ m
    root = np.sqrt(m)
    S = root[:, None] * Fp * root[None, :] - np.diag(lam)
    u = root / np.linalg.norm(root)
    shift = 1.0 + 2.0 * np.abs(S).sum(axis=1).max()
    top = np.linalg.eigvalsh(S - shift * np.outer(u, u))[-1]
    inner = -lam[m >= 2]
    return float(max(top, inner.max(initial=-np.inf)))


def three_sizes(n: int) -> np.ndarray:
    """Three cluster sizes as equal as possible, summing to n."""
    k, r = divmod(int(n), 3)
    return np.array([k + (i < r) for i in range(3)])


def _three_cluster_state(sizes, beta: float, guess):
    """(angles of clusters 2, 3 from cluster 1, stable) of the 3-cluster equilibrium that Newton's
    method reaches from `guess` (within 0.3 of it, clusters apart), or (guess, False)."""
    m = np.asarray(sizes, dtype=float) / np.sum(sizes)
    x = np.array(guess, dtype=float)
    for _ in range(NEWTON_STEPS):
        phi = np.concatenate([[0.0], x])
        F = cluster_forces(phi, m, beta)[1:]
        if np.abs(F).max() < NEWTON_TOL:
            break
        J = _fprime(phi[None, :] - phi[:, None], beta) * m[None, :]  # dF_a / dphi_c, c != a
        J[np.diag_indices_from(J)] = 0.0
        J[np.diag_indices_from(J)] = -J.sum(axis=1)
        try:
            x = x - np.linalg.solve(J[1:, 1:], F)
        except np.linalg.LinAlgError:
            return guess, False
        if not np.all(np.isfinite(x)):
            return guess, False
    phi = np.concatenate([[0.0], x])
    found = (
        np.abs(cluster_forces(phi, m, beta)).max() < NEWTON_TOL
        and np.abs(x - guess).max() < 0.3
        and circular_gaps(phi).min() > 0.05
    )
    if not found:
        return guess, False
    return x, cluster_top_rate(phi, sizes, beta) < 0


def three_cluster_onset(n: int) -> float:
    """beta_3(n): the largest beta at which the 3-cluster equilibrium with sizes as equal as
    possible (:func:`three_sizes`), continued from beta = -3, is still stable (found to 1e-9
    by bisection: it loses stability or ends there). -2/3 when 3 divides n; NaN for n < 3 or
    when it is not stable at beta = -3."""
    if n < 3:
        return math.nan
    sizes = three_sizes(n)
    x, stable = _three_cluster_state(sizes, ONSET_FROM, np.array([2 * np.pi / 3, 4 * np.pi / 3]))
    if not stable:
        return math.nan
    lo, hi = ONSET_FROM, None
    while lo + ONSET_STEP < 0.0:
        nxt, stable = _three_cluster_state(sizes, lo + ONSET_STEP, x)
        if not stable:
            hi = lo + ONSET_STEP
            break
        x, lo = nxt, lo + ONSET_STEP
    if hi is None:
        return 0.0
    while hi - lo > ONSET_TOL:
        mid = 0.5 * (lo + hi)
        nxt, stable = _three_cluster_state(sizes, mid, x)
        if stable:
            x, lo = nxt, mid
        else:
            hi = mid
    return lo


def classify(theta, p, beta: float, normalization: str, sync_arc: float, drift_tol: float) -> np.ndarray:
    """A code per configuration theta (runs, n): SYNCHRONIZED when every token lies in an arc
    shorter than `sync_arc`; else EQUILIBRIUM when max_i |theta_i'| < `drift_tol` (drift of the
    vector p) and every linear rate off the rotation is below -RATE_FLOOR (a stable
    equilibrium, not a saddle); else UNDECIDED."""
    theta = np.atleast_2d(_angles(theta))
    codes = np.full(theta.shape[0], UNDECIDED, dtype=np.int64)
    synced = arc(theta) < sync_arc
    codes[synced] = SYNCHRONIZED
    rest = np.flatnonzero(~synced)
    if rest.size:
        still = np.abs(velocities(theta[rest], p)).max(axis=-1) < drift_tol
        for r in rest[still]:
            if linear_rates(theta[r], beta, normalization)[-1] < -RATE_FLOOR:
                codes[r] = EQUILIBRIUM
    return codes
