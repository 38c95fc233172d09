r"""Reverse diffusion of Gaussian data: the reverse SDE against the probability-flow ODE, each
with the exact score plus a controlled linear error. The question is that of "Noise in the
reverse process improves the approximation capabilities of diffusion models" (arXiv 2312.07851;
its abstract could be read here, not its body): does noise in the reverse process make it more
forgiving of an imperfect score? That paper answers through a control-theoretic approximation
argument for neural SDEs; here the question is asked where everything is exact: Gaussian data,
a linear score error, and the terminal laws in closed form.

The forward process. The Ornstein-Uhlenbeck process dX = -X dt + sqrt(2) dW from X_0 ~ N(m, S)
has the marginals

    X_t ~ N(m_t, S_t),   m_t = e^{-t} m,   S_t = e^{-2t} S + (1 - e^{-2t}) I,

and the score grad log p_t(x) = -S_t^{-1} (x - m_t), linear. Every S_t is a function of S (the
same eigenvectors R, eigenvalues v_k(t) = e^{-2t} s_k + 1 - e^{-2t}), so S_t^{-1} = R diag(1/v) R^T.

The reverse processes. In reverse time s = T - t, with the score estimate hat s(x, t) and a
noise level nu >= 0 (the parameter ``noise``),

    dY = [Y + (1 + nu) hat s(Y, T - s)] ds + sqrt(2 nu) dB,

is, with the exact score, a process whose marginal at s is p_{T - s} for every nu (the
Fokker-Planck equations agree: the extra nu hat s drift and the extra nu Laplacian cancel on p):
nu = 1 is the reverse SDE (drift -f + g^2 grad log p), nu = 0 the probability-flow ODE
(-f + g^2/2 grad log p).

The score error, of size eps (the parameter ``eps``) and kind ``error``:

    hat s(x, t) = -S_t^{-1} (x - m_t) + eps (P (x - m_t) + q),
    error 0 (scale): P = -I, q = 0   (an over-confident precision);
    error 1 (skew):  P = J, q = 0    (J_{k,k+1} = 1 = -J_{k+1,k}: a rotation field);
    error 2 (shift): P = 0, q = (1, ..., 1)/sqrt(d)  (a constant bias).

So hat s(x, t) = M(t) x + c(t) with M = -S_t^{-1} + eps P, c = S_t^{-1} m_t - eps P m_t + eps q.

The terminal laws. The drift is affine, so Y stays Gaussian N(mu, C) from a Gaussian start, with
A = I + (1 + nu) M and b = (1 + nu) c:

    mu' = A mu + b,   C' = A C + C A^T + 2 nu I       (a Lyapunov equation along reverse time).

The model's state is (mu; C) of the process at the point's ``noise``, then (mu; C) of the
probability-flow ODE with the same score, a 2(d + 1) x d array (each point compares the two), and
the engine integrates this ODE in the time tau = s / T over [0, 1] (the field times T; so T is a
parameter a sweep may vary). With the
exact score (eps = 0) from the exact start Y_0 ~ p_T, its solution is the forward marginal read
backwards, (mu, C)(s) = (m_{T-s}, S_{T-s}), in closed form (the outputs ``mean_error`` and
``cov_error``; every S_t commutes with every A, so this holds for every nu). With eps > 0 the
reference is the same Lyapunov ODE solved by scipy (DOP853, rtol 1e-12) from code of its own
(:func:`lyapunov`; the output ``lyapunov_error``), and for the probability-flow ODE with the scale
error it is in closed form too: each eigen-direction of S has
C_k' = 2 (1 - 1/v_k(T - s) - eps) C_k, and with int dt / (1 + a e^{-2t}) = log(e^{2t} + a) / 2,

    C_k(s) = C_k(0) (e^{2(T - s)} + s_k - 1) / (e^{2T} + s_k - 1) e^{2 (1 - eps) s}    (nu = 0)

(:func:`pf_scale_variances`; the tests check the Lyapunov solution against it).

The start: ``start = "exact"``, N(m_T, S_T) (the score error alone); ``"stationary"``, N(0, I)
(the sampler's start in practice: the start's error e^{-T} adds to the score's).

The samples. :class:`ReverseSamples` runs the same reverse processes on samples (each run n of
them, (n, d), drawn from the start law), stepped by the engine's Euler-Maruyama in tau (nu = 0:
Euler). The chain is affine in the state with additive noise, so its law is exactly Gaussian,
with the discrete Lyapunov recursion of :func:`euler_law` (F_k = I + h T A(tau_k),
mu_{k+1} = F_k mu_k + h T b_k, C_{k+1} = F_k C_k F_k^T + 2 nu T h I), which tends to the
continuous moments at first order in the step. Its outputs are the sample moments against that
law (Monte Carlo: the samples of a run are i.i.d. from it) and, for nu = 0, against the chain's
affine map x -> Phi x + phi applied to the start's sample moments (to rounding: the engine
pushes every sample by the same map). The whitened error of the sample mean,
z = sqrt(n) L^{-1} (mean - mu) with C = L L^T, is N(0, I_d) at every time, so |z|^2 / d
(``mean_z2``) is chi^2_d / d, 1 in expectation; for nu = 0 it is constant in time (the map
carries mean - mu and C alike).

What is compared: the terminal law N(mu(T), C(T)) against the data N(m, S), by the Wasserstein
distance W2^2 = |mu - m|^2 + tr(C + S - 2 (S^{1/2} C S^{1/2})^{1/2}) and KL(N(mu, C) || N(m, S)),
and at every reverse time against p_{T - s} (outputs ``w2``, ``kl``; ``w2_ode``, ``kl_ode``
for the ODE; ``w2_log_ratio`` and ``kl_log_ratio``, log10 of the terminal ratio, negative where
the noisy process ends nearer the data). Which of nu = 1 and nu = 0
ends nearer the data depends on the error: for a shift the ODE carries the bias along
(mu' = (I - S_t^{-1}) mu + ..., neutral where S_t = I), the SDE contracts it (I - 2 S_t^{-1});
for the scale error with S = I the ODE's variance is e^{-2 eps T}, the SDE's tends to
1/(1 + 2 eps). On isotropic data (S = I) from the exact start the shift's terminal mean errors
are eps T (ODE) and 2 eps (1 - e^{-T}) (SDE): the SDE ends nearer exactly when T > T* = 1.594,
the root of T = 2 (1 - e^{-T}) (tests/test_reverse_diffusion.py). The noise doubles the score
error in the drift and pays off only once the reverse process has had the time to contract it.

What the shipped sweep finds (d = 3, S with eigenvalues 1 ... 1/4, |m| = 1; T = 0.1 ... 5,
eps = 0.001 ... 1, three errors, two starts): from the exact start the SDE's terminal W2 is above
the ODE's in 42 of 84 cells (every T <= 0.2, by up to 1.86x; T <= 1 for the shift) and below at
every T >= 2 (down to 0.17x); from N(0, I), whose error e^{-T} the SDE contracts and the ODE
carries, it is below in 101 of 105 cells, above where the ODE's shift happens to cancel its start
error (T = 0.5 and 1 at eps = 1, T = 2 at eps = 0.1, T = 5 at eps = 0.001). KL orders the two
the same way at all but one cell. So noise helps for long forward horizons or an inexact start,
not in general.
"""

from __future__ import annotations

import numba
import numpy as np

import dyn

ERRORS = ("scale", "skew", "shift")
PARAMS = {
    "d": dyn.Field("int", 3, "dimension of the data", lo=1, hi=8),
    "T": dyn.Field("float", 3.0, "forward horizon T (the engine's time is s / T, over [0, 1])", gt=0.0, hi=20.0),
    "var": dyn.Field("float", 1.0, "largest eigenvalue of the data covariance S", gt=0.0, hi=100.0),
    "kappa": dyn.Field("float", 4.0, "condition number of S", lo=1.0, hi=1e4),
    "angle": dyn.Field("float", 0.5, "Givens angle of S's eigenbasis", lo=-np.pi, hi=np.pi),
    "mean": dyn.Field("float", 1.0, "|m|: the data mean is mean (1, ..., 1)/sqrt(d)", lo=-100.0, hi=100.0),
    "noise": dyn.Field("float", 1.0, "nu: 1 the reverse SDE, 0 the probability-flow ODE", lo=0.0, hi=4.0),
    "eps": dyn.Field("float", 0.0, "size of the score error", lo=0.0, hi=10.0),
    "error": dyn.Field(
        "int", 0, "kind of the score error: 0 scale (P = -I), 1 skew (P = J), 2 shift (q = 1/sqrt(d))", lo=0, hi=2
    ),
    "start": dyn.Field("str", "exact", "exact: N(m_T, S_T); stationary: N(0, I)", choices=("exact", "stationary")),
}


# --- the law (numba: the drift calls these) --------------------------------------------------
@numba.njit(cache=True)
def basis(d, angle):
    """R: the product of the Givens rotations of `angle` in the planes (k, k+1)."""
    r = np.eye(d)
    c, s = np.cos(angle), np.sin(angle)
    for i in range(d - 1):
        for row in range(d):
            a, b = r[row, i], r[row, i + 1]
            r[row, i], r[row, i + 1] = c * a + s * b, -s * a + c * b
    return r


@numba.njit(cache=True)
def spectrum(d, var, kappa):
    out = np.empty(d)
    for k in range(d):
        out[k] = var * kappa ** (-k / max(d - 1, 1))
    return out


@numba.njit(cache=True)
def affine_score(t, d, var, kappa, angle, mean, eps, error):
    """(M, c): hat s(x, t) = M x + c (module doc)."""
    r = basis(d, angle)
    decay = np.exp(-2.0 * t)
    inv = 1.0 / (decay * spectrum(d, var, kappa) + 1.0 - decay)
    prec = (r * inv) @ np.ascontiguousarray(r.T)
    m_t = np.full(d, np.exp(-t) * mean / np.sqrt(d))
    p = np.zeros((d, d))
    q = np.zeros(d)
    if error == 0:
        p -= np.eye(d)
    elif error == 1:
        for k in range(d - 1):
            p[k, k + 1], p[k + 1, k] = 1.0, -1.0
    else:
        q[:] = 1.0 / np.sqrt(d)
    big = -prec + eps * p
    return big, prec @ m_t - eps * (p @ m_t) + eps * q


@numba.njit(cache=True)
def moment_field(s, x, d, T, var, kappa, angle, mean, noise, eps, error):
    """(mu'; C') at reverse time s in [0, T], x = (mu; C) (d + 1, d) (module doc)."""
    big, c = affine_score(T - s, d, var, kappa, angle, mean, eps, error)
    a = np.eye(d) + (1.0 + noise) * big
    out = np.empty_like(x)
    out[0] = a @ x[0] + (1.0 + noise) * c
    cov = np.ascontiguousarray(x[1:])
    out[1:] = a @ cov + cov @ np.ascontiguousarray(a.T) + 2.0 * noise * np.eye(d)
    return out


# --- closed forms and references (numpy) ----------------------------------------------------
def data_law(d, var, kappa, angle, mean):
    """(m, S) of the data."""
    r = basis(d, angle)
    return np.full(d, mean / np.sqrt(d)), (r * spectrum(d, var, kappa)) @ r.T


def marginal(t, d, var, kappa, angle, mean):
    """(m_t, S_t): the forward marginal at time t."""
    m, cov = data_law(d, var, kappa, angle, mean)
    decay = np.exp(-2.0 * t)
    return np.exp(-t) * m, decay * cov + (1.0 - decay) * np.eye(d)


def start_moments(start, d, T, var, kappa, angle, mean):
    if start == "exact":
        return marginal(T, d, var, kappa, angle, mean)
    return np.zeros(d), np.eye(d)


def lyapunov(times, start, d, T, var, kappa, angle, mean, noise, eps, error):
    """(mu, C) at the reverse times: the moment ODE by scipy's DOP853 (rtol 1e-12), its right
    side written again here in numpy (no shared code with the drift but :func:`affine_score`'s
    law, which the closed-form tests check)."""
    from scipy.integrate import solve_ivp

    mu0, c0 = start_moments(start, d, T, var, kappa, angle, mean)
    m, cov = data_law(d, var, kappa, angle, mean)
    prec_of = _precision(d, var, kappa, angle)
    p, q = _error(d, error)

    def rhs(s, y):
        t = T - s
        prec, m_t = prec_of(t), np.exp(-t) * m
        a = np.eye(d) + (1.0 + noise) * (-prec + eps * p)
        b = (1.0 + noise) * (prec @ m_t - eps * p @ m_t + eps * q)
        c = y[d:].reshape(d, d)
        return np.concatenate([a @ y[:d] + b, (a @ c + c @ a.T + 2 * noise * np.eye(d)).ravel()])

    y0 = np.concatenate([mu0, c0.ravel()])
    sol = solve_ivp(rhs, (0.0, float(times[-1])), y0, method="DOP853", rtol=1e-12, atol=1e-14, t_eval=times)
    return sol.y[:d].T, sol.y[d:].T.reshape(len(times), d, d)


def _precision(d, var, kappa, angle):
    r = basis(d, angle)
    values = spectrum(d, var, kappa)

    def prec(t):
        decay = np.exp(-2.0 * t)
        return (r / (decay * values + 1.0 - decay)) @ r.T

    return prec


def _error(d, error):
    p, q = np.zeros((d, d)), np.zeros(d)
    if error == 0:
        p = -np.eye(d)
    elif error == 1:
        p[np.arange(d - 1), np.arange(1, d)] = 1.0
        p[np.arange(1, d), np.arange(d - 1)] = -1.0
    else:
        q[:] = 1.0 / np.sqrt(d)
    return p, q


def pf_scale_variances(s, c0, values, T, eps):
    """The probability-flow ODE's variances with the scale error, per eigen-direction of S
    (eigenvalues `values`, start variances `c0` in that basis): the module doc's closed form."""
    s = np.asarray(s, dtype=float)[..., None]
    growth = (np.exp(2 * (T - s)) + values - 1.0) / (np.exp(2 * T) + values - 1.0)
    return c0 * growth * np.exp(2 * (1.0 - eps) * s)


def w2(mu1, c1, mu2, c2) -> float:
    """Wasserstein-2 distance between N(mu1, c1) and N(mu2, c2)."""
    from scipy.linalg import sqrtm

    root = np.real(sqrtm(c2))
    cross = np.real(sqrtm(root @ c1 @ root))
    sq = np.sum((mu1 - mu2) ** 2) + np.trace(c1 + c2 - 2.0 * cross)
    return float(np.sqrt(max(sq, 0.0)))


def kl(mu1, c1, mu2, c2) -> float:
    """KL(N(mu1, c1) || N(mu2, c2))."""
    d = len(mu1)
    inv = np.linalg.inv(c2)
    diff = mu2 - mu1
    _, logdet2 = np.linalg.slogdet(c2)
    _, logdet1 = np.linalg.slogdet(c1)
    return float(0.5 * (np.trace(inv @ c1) + diff @ inv @ diff - d + logdet2 - logdet1))


# --- the models -------------------------------------------------------------------------------
def check(spec) -> None:
    """What the bounds of the fields cannot say: the engine's time is tau in [0, 1], and the skew
    error needs two dimensions."""
    if spec.horizon != 1.0:
        raise dyn.ScenarioError(
            "integrator.horizon",
            f"must be 1: the engine's time is the reverse time over T, s / T in [0, 1]; got {spec.horizon:g}",
        )
    if spec["error"] == 1 and spec["d"] == 1 and spec["eps"] > 0:
        raise dyn.ScenarioError("params.error", "the skew error needs d >= 2 (in d = 1 it is zero)")


class ReverseDiffusion(dyn.Model):
    """The moments (mu; C) of the reverse process (module doc): a (d + 1) x d state."""

    name = "reverse_diffusion"
    description = (
        "reverse SDE vs probability-flow ODE of Gaussian data with a linear score "
        "error: the Lyapunov equation of the moments"
    )
    default_plot = "w2_log_ratio"
    params = PARAMS

    def drift(t, x, d, T, var, kappa, angle, mean, noise, eps, error):  # t: tau = s / T
        rows = x.shape[0] // 2  # (mu; C) of the process at `noise`, then of the ODE
        out = np.empty_like(x)
        out[:rows] = T * moment_field(
            T * t, np.ascontiguousarray(x[:rows]), int(d), T, var, kappa, angle, mean, noise, eps, int(error)
        )
        out[rows:] = T * moment_field(
            T * t, np.ascontiguousarray(x[rows:]), int(d), T, var, kappa, angle, mean, 0.0, eps, int(error)
        )
        return out

    def validate(self, spec) -> None:
        check(spec)
        super().validate(spec)

    @staticmethod
    def law(spec):
        return {k: spec[k] for k in ("d", "var", "kappa", "angle", "mean")}

    def initial_state(self, spec, runs):
        mu0, c0 = start_moments(
            spec["start"], spec["d"], spec["T"], spec["var"], spec["kappa"], spec["angle"], spec["mean"]
        )
        return np.repeat(np.vstack([mu0, c0, mu0, c0])[None], runs, axis=0)

    def outputs(self, setup):
        ratio = (
            "log10 of the terminal {0} of noise = nu over the probability-flow ODE's "
            "(< 0: the noisy process ends nearer the data)"
        )
        return [
            dyn.Output(
                "w2_log_ratio",
                ratio.format("W2"),
                reduce="mean",
                draw=dyn.Draw(signed=True),
                nan_means="both terminal laws are the data's (exact score and start)",
            ),
            dyn.Output(
                "kl_log_ratio",
                ratio.format("KL"),
                reduce="mean",
                draw=dyn.Draw(signed=True),
                nan_means="both terminal laws are the data's (exact score and start)",
            ),
            dyn.Output("w2_ode", "W2 of the probability-flow ODE's law to p_{T-s}", dims=("time",)),
            dyn.Output("kl_ode", "KL of the probability-flow ODE's law to p_{T-s}", dims=("time",)),
            dyn.Output("w2", "W2(N(mu, C), p_{T-s}): Wasserstein distance to the target marginal", dims=("time",)),
            dyn.Output("kl", "KL(N(mu, C) || p_{T-s})", dims=("time",)),
            dyn.Output("mean_error", "|mu(s) - m_{T-s}|: against the exact-score closed form", dims=("time",)),
            dyn.Output("cov_error", "||C(s) - S_{T-s}||_F: against the exact-score closed form", dims=("time",)),
            dyn.Output("lyapunov_error", "max |(mu, C) - scipy's Lyapunov solution|", dims=("time",), reduce="max"),
        ]

    def observe(self, spec, states):
        states = np.asarray(states)
        times = spec.times
        values = {
            k: np.empty(states.shape[:2])
            for k in ("w2", "kl", "mean_error", "cov_error", "lyapunov_error", "w2_ode", "kl_ode")
        }
        rows = spec["d"] + 1
        args = (
            spec["d"],
            spec["T"],
            spec["var"],
            spec["kappa"],
            spec["angle"],
            spec["mean"],
            spec["noise"],
            spec["eps"],
            spec["error"],
        )
        mu_ref, c_ref = lyapunov(spec["T"] * times, spec["start"], *args)
        for j, tau in enumerate(times):
            m_t, s_t = marginal(spec["T"] * (1.0 - tau), **self.law(spec))
            for r in range(states.shape[0]):
                mu, cov = states[r, j, 0], states[r, j, 1:rows]
                values["w2"][r, j] = w2(mu, cov, m_t, s_t)
                values["kl"][r, j] = kl(mu, cov, m_t, s_t)
                ode_mu, ode_cov = states[r, j, rows], states[r, j, rows + 1 :]
                values["w2_ode"][r, j] = w2(ode_mu, ode_cov, m_t, s_t)
                values["kl_ode"][r, j] = kl(ode_mu, ode_cov, m_t, s_t)
                values["mean_error"][r, j] = np.linalg.norm(mu - m_t)
                values["cov_error"][r, j] = np.linalg.norm(cov - s_t)
                values["lyapunov_error"][r, j] = max(np.abs(mu - mu_ref[j]).max(), np.abs(cov - c_ref[j]).max())
        with np.errstate(divide="ignore", invalid="ignore"):
            for k, floor in (("w2", 1e-6), ("kl", 1e-12)):  # W2's floor: sqrt of rounding
                ratio = np.log10(values[k][:, -1] / values[f"{k}_ode"][:, -1])
                ratio[np.maximum(values[k][:, -1], values[f"{k}_ode"][:, -1]) <= floor] = np.nan
                values[f"{k}_log_ratio"] = ratio
        return dyn.Chunk(values, finite=np.isfinite(states).all(axis=(1, 2, 3)))


# --- the samples --------------------------------------------------------------------------------
@numba.njit(cache=True)
def sample_field(s, x, d, T, var, kappa, angle, mean, noise, eps, error):
    """Y + (1 + nu) hat s(Y, T - s) for each row of x (n, d): the reverse drift of the samples."""
    big, c = affine_score(T - s, d, var, kappa, angle, mean, eps, error)
    return x + (1.0 + noise) * (x @ np.ascontiguousarray(big.T) + c)


def euler_law(times, dt, start, d, T, var, kappa, angle, mean, noise, eps, error):
    """The exact law of the Euler-Maruyama chain the engine runs (in tau = s / T, the engine's
    step grid on `times`): Gaussian, with mu_{k+1} = F_k mu_k + h T b_k and
    C_{k+1} = F_k C_k F_k^T + 2 nu T h I, F_k = I + h T A(tau_k) (the drift read at the step's
    start). Returns (mu, C, Phi, phi) at the save times, x -> Phi x + phi the noise-free chain's
    affine map from tau = 0."""
    from integrators.core.base import step_times

    bounds = step_times(np.asarray(times, dtype=float), dt)
    mu, cov = start_moments(start, d, T, var, kappa, angle, mean)
    phi_mat, phi = np.eye(d), np.zeros(d)
    out = [(mu, cov, phi_mat, phi)]
    save = 1
    for k in range(len(bounds) - 1):
        tau, h = bounds[k], bounds[k + 1] - bounds[k]
        big, c = affine_score(T * (1.0 - tau), d, var, kappa, angle, mean, eps, error)
        f = np.eye(d) + h * T * (np.eye(d) + (1.0 + noise) * big)
        b = h * T * (1.0 + noise) * c
        mu, cov = f @ mu + b, f @ cov @ f.T + 2.0 * noise * T * h * np.eye(d)
        phi_mat, phi = f @ phi_mat, f @ phi + b
        if save < len(times) and bounds[k + 1] == times[save]:
            out.append((mu, cov, phi_mat, phi))
            save += 1
    return tuple(np.array(v) for v in zip(*out, strict=True))


class ReverseSamples(dyn.Model):
    """The reverse processes run on samples (module doc): each run holds n samples (n, d),
    started from the start law, stepped by Euler-Maruyama (nu = 0: Euler) in tau = s / T."""

    name = "reverse_diffusion_samples"
    description = (
        "samples of the reverse SDE / probability-flow ODE of Gaussian data with a "
        "linear score error, against the exact law of the Euler-Maruyama chain"
    )
    default_plot = "mean_z2"
    params = {**PARAMS, "n": dyn.Field("int", 2000, "samples per run", lo=2, hi=10**6)}

    def drift(t, x, d, T, var, kappa, angle, mean, noise, eps, error):  # t: tau = s / T
        return T * sample_field(T * t, x, int(d), T, var, kappa, angle, mean, noise, eps, int(error))

    def diffusion(t, x, dw, T, noise):
        return np.sqrt(2.0 * noise * T) * dw

    def validate(self, spec) -> None:
        check(spec)
        super().validate(spec)

    def initial_state(self, spec, runs):
        mu0, c0 = start_moments(
            spec["start"], spec["d"], spec["T"], spec["var"], spec["kappa"], spec["angle"], spec["mean"]
        )
        z = spec.rng.standard_normal((runs, spec["n"], spec["d"]))
        return mu0 + z @ np.linalg.cholesky(c0).T

    def outputs(self, setup):
        return [
            dyn.Output(
                "w2", "W2(N(sample mean, sample cov), p_{T-s}) (mean over runs)", dims=("time",), reduce="mean_se"
            ),
            dyn.Output(
                "mean_error",
                "|sample mean - the Euler-Maruyama chain's mean| (mean over runs; Monte Carlo: about sqrt(tr C / n))",
                dims=("time",),
                reduce="mean_se",
            ),
            dyn.Output(
                "cov_error", "||sample cov - the chain's cov||_F (mean over runs)", dims=("time",), reduce="mean_se"
            ),
            dyn.Output(
                "mean_z2",
                "n (mean - mu)^T C^{-1} (mean - mu) / d against the chain's law "
                "(mu, C): 1 in expectation (chi^2_d / d)",
                dims=("time",),
                reduce="mean_se",
            ),
            dyn.Output(
                "map_error",
                "noise = 0: max |sample moments - the chain's affine map of "
                "the start's sample moments| (largest over runs)",
                dims=("time",),
                reduce="max",
                nan_means="noise > 0: the chain is not a fixed map",
            ),
        ]

    def observe(self, spec, states):
        states = np.asarray(states)
        runs, times = states.shape[:2]
        args = (
            spec["d"],
            spec["T"],
            spec["var"],
            spec["kappa"],
            spec["angle"],
            spec["mean"],
            spec["noise"],
            spec["eps"],
            spec["error"],
        )
        mu, cov, phi_mat, phi = euler_law(spec.times, spec.dt, spec["start"], *args)
        values = {k: np.full((runs, times), np.nan) for k in ("w2", "mean_error", "cov_error", "mean_z2", "map_error")}
        roots = [np.linalg.cholesky(np.atleast_2d(c)) for c in cov]
        for r in range(runs):
            mean0, cov0 = states[r, 0].mean(axis=0), np.cov(states[r, 0].T, ddof=1)
            for j, tau in enumerate(spec.times):
                x = states[r, j]
                m_hat, c_hat = x.mean(axis=0), np.atleast_2d(np.cov(x.T, ddof=1))
                m_t, s_t = marginal(spec["T"] * (1.0 - tau), **ReverseDiffusion.law(spec))
                values["w2"][r, j] = w2(m_hat, c_hat, m_t, s_t)
                values["mean_error"][r, j] = np.linalg.norm(m_hat - mu[j])
                values["cov_error"][r, j] = np.linalg.norm(c_hat - cov[j])
                z = np.linalg.solve(roots[j], m_hat - mu[j]) * np.sqrt(x.shape[0])
                values["mean_z2"][r, j] = z @ z / x.shape[1]
                if spec["noise"] == 0.0:
                    pushed_m = phi_mat[j] @ mean0 + phi[j]
                    pushed_c = phi_mat[j] @ np.atleast_2d(cov0) @ phi_mat[j].T
                    values["map_error"][r, j] = max(np.abs(m_hat - pushed_m).max(), np.abs(c_hat - pushed_c).max())
        return dyn.Chunk(values, finite=np.isfinite(states).all(axis=(1, 2, 3)))
