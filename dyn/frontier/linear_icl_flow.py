r"""Linear in-context learning by gradient flow: a linear self-attention layer trained on
prompts of linear regression (Zhang, Frei & Bartlett, "Trained Transformers Learn Linear Models
In-Context", arXiv 2306.09927, JMLR 25 (2024)). The abstract and the paper's section titles could
be read here (a search excerpt), not its body: the initialization and the reduction below are our
reading of the paper's setting, and the limit, the loss and the closed-form flow are derived
here, from the population loss.

The model. A prompt of N labelled examples (x_i, y_i = <w, x_i>) and a query x_q, with
x_i, x_q ~ N(0, Lambda) in R^d and the task w ~ N(0, I_d), is embedded as the (d+1) x (N+1)
matrix E = [[x_1 .. x_N, x_q], [y_1 .. y_N, 0]]. The layer is
f(E) = E + W^PV E (E^T W^KQ E) / N and its prediction the entry (d+1, N+1) of f(E). From the
paper's start, W^PV(0) = sigma [[0, 0], [0, 1]] and W^KQ(0) = sigma [[Theta Theta^T, 0], [0, 0]]
with ||Theta Theta^T||_F = 1, the flow keeps every block zero but the last entry u of W^PV and
the top-left block U of W^KQ (the paper's proof steps "u12 and u21 vanish", "dynamics of U11",
"dynamics of u_-1"). On that set the prediction is

    y_hat = u (1/N) sum_i y_i x_i^T U x_q = x_q^T Gamma h,   Gamma = u U^T,   h = (1/N) sum_i y_i x_i

(the last row (0, u) of W^PV picks the labels; the query column of E has label 0).

The population loss. h = S w with S = (1/N) sum_i x_i x_i^T, y_q = x_q^T w, so
y_hat - y_q = x_q^T (Gamma S - I) w, and averaging over x_q then w,

    L(Gamma) = 1/2 E tr((Gamma S - I)^T Lambda (Gamma S - I))
             = 1/2 [tr(Gamma^T Lambda Gamma B) - 2 tr(Lambda Gamma Lambda) + tr Lambda],

with B = E[S M S] / M-linear read off for M = Gamma^T Lambda Gamma: for Gaussian x,
E[x x^T M x x^T] = 2 Lambda M Lambda + tr(M Lambda) Lambda (Isserlis), so
E[S M S] = (1 + 1/N) Lambda M Lambda + tr(M Lambda) Lambda / N and, under the trace,
B = (1 + 1/N) Lambda^2 + tr(Lambda) Lambda / N. L is a convex quadratic of Gamma with gradient
G = Lambda Gamma B - Lambda^2, which vanishes where Gamma B = Lambda, i.e.

    Gamma* = ((1 + 1/N) Lambda + tr(Lambda)/N I)^{-1},   L* = 1/2 [tr Lambda - tr(Lambda Gamma* Lambda)]

(Lambda and B commute). This is the limit the issue states: our derivation agrees with it.

The flow. With Gamma = u U^T, dL = <G, U^T> du + u <G^T, dU>, so

    u' = -<G, U^T>,   U' = -u G^T,

and (u^2 - ||U||_F^2)' = -2u <G, U^T> + 2u <G^T, U> = 0: the imbalance is conserved. The paper's
start has u(0)^2 = sigma^2 = ||U(0)||_F^2, so u^2 = ||U||_F^2 for all t and, at the limit,
u^4 = ||Gamma*||_F^2: u -> ||Gamma*||_F^{1/2}, U -> Gamma*^T / u. Critical points other than
Gamma* have u = 0 and tr(Lambda^2 U) = 0 (a saddle set the paper's start avoids:
tr(Lambda^2 Theta Theta^T) > 0).

A closed form. For Lambda = lam I (``kappa = 1``) and Theta Theta^T = I / sqrt(d) (``start =
"paper"``), U = s I stays a multiple of I, Gamma = p I with p = u s, G = lam^2 (lam c p - 1) I,
c = 1 + (d + 1)/N, and balance gives u^2 = d s^2 = sqrt(d) p. Then
p' = -(u^2 + d s^2) lam^2 (lam c p - 1), a logistic equation:

    p' = r p (1 - p / K),   r = 2 sqrt(d) lam^2,   K = 1 / (lam c),
    p(t) = K / (1 + (K / p0 - 1) e^{-r t}),   p0 = sigma^2 / sqrt(d),
    L(t) = d/2 (lam^3 c p^2 - 2 lam^2 p + lam)

(the output ``loss_closed_error``, NaN where no closed form applies).

Gradient descent. Euler's method on this flow with step eta is gradient descent with learning
rate eta, theta_{k+1} = theta_k - eta grad L(theta_k). The parameter ``steps`` (> 0) sets
eta = 1 / steps for the point (over the ``[integrator] dt``; method euler), and the model's
``reference`` is the flow itself from each run's start (scipy's DOP853 at rtol 1e-12), so
``dyn compare FILE --reference exact --against steps`` measures gradient descent against the
flow: the distance is O(eta) (a global error of a first-order method on [0, T]), with an
O(eta^2) correction. That correction is why a log-log fit over a wide range of steps has a 95%
interval that misses the slope: for e(eta) = C eta (1 + a eta) on a geometric grid of steps the
fitted slope is off by a multiple of a eta_max, and the least-squares interval, built from the
residuals of that same curvature, scales alike but is narrower from four points on (the ratio
hardly depends on a; scenarios/linear_icl_gd.toml: -1.009
[-1.015, -1.003] over all six steps); ``dyn compare`` also fits the asymptotic range, the three
largest step counts, where the interval holds -1 (-1.002 [-1.008, -0.997]).

The state. The engine's state holds u and U in R^{D x D} with D = 8 (the largest d): x lives in
the first d coordinates (Lambda zero-padded), so the loss above is exactly the d-dimensional one,
the padded entries of U have zero gradient and stay 0, and every d shares one compiled program
and saves states of one shape (what ``dyn compare`` needs).

Lambda. Eigenvalues lam kappa^{-k/(d-1)}, k = 0 .. d-1 (condition number kappa), in a basis
turned by Givens rotations of ``angle`` in the planes (k, k+1): not diagonal for angle != 0.

About the public API: ``dyn.gradient_flow``'s observables see theta only, not the point's data
nor its parameters, so Gamma - Gamma* and the closed form are computed by a subclass's
``observe``; a learning rate is not a solver option a sweep can name, so ``steps`` sets the point's
step through ``spec.variant(dt=...)``.
"""

from __future__ import annotations

import numpy as np

import dyn

D = 8  # the size of U in the state; d <= D
START = ("paper", "paper_random", "gaussian")
PARAMS = {
    "d": dyn.Field("int", 4, "dimension d of the inputs x (at most 8)", lo=1, hi=D),
    "N": dyn.Field("int", 10, "prompt length N (labelled examples per prompt)", lo=1, hi=10**6),
    "lam": dyn.Field("float", 1.0, "largest eigenvalue of the input covariance Lambda", gt=0.0, hi=10.0),
    "kappa": dyn.Field("float", 1.0, "condition number of Lambda (1: isotropic)", lo=1.0, hi=1e3),
    "angle": dyn.Field("float", 0.0, "Givens angle of Lambda's eigenbasis", lo=-np.pi, hi=np.pi),
    "start": dyn.Field(
        "str",
        "paper",
        "paper: Theta Theta^T = I/sqrt(d); paper_random: Theta "
        "standard normal per run; gaussian: u, U with N(0, 1) entries",
        choices=START,
    ),
    "init_scale": dyn.Field("float", 0.1, "sigma: the scale of the start", gt=0.0, hi=10.0),
    "steps": dyn.Field(
        "int", 0, "gradient-descent steps per unit time, eta = 1/steps (0: the integrator's own step)", lo=0, hi=1 << 16
    ),
}


# --- Lambda and the law ----------------------------------------------------------------------
def covariance(d: int, lam: float, kappa: float, angle: float) -> np.ndarray:
    """Lambda (d, d): eigenvalues lam kappa^{-k/(d-1)}, basis turned by Givens rotations."""
    k = np.arange(d)
    values = lam * kappa ** (-k / max(d - 1, 1))
    basis = np.eye(d)
    for i in range(d - 1):
        turn = np.eye(d)
        c, s = np.cos(angle), np.sin(angle)
        turn[i, i], turn[i, i + 1], turn[i + 1, i], turn[i + 1, i + 1] = c, -s, s, c
        basis = basis @ turn
    return (basis * values) @ basis.T


def padded(matrix: np.ndarray) -> np.ndarray:
    out = np.zeros((D, D))
    out[: matrix.shape[0], : matrix.shape[1]] = matrix
    return out


def gamma_star(lam_cov: np.ndarray, n: int) -> np.ndarray:
    """((1 + 1/N) Lambda + tr(Lambda)/N I)^{-1}: the minimizer of the population loss."""
    d = lam_cov.shape[0]
    return np.linalg.inv((1.0 + 1.0 / n) * lam_cov + np.trace(lam_cov) / n * np.eye(d))


def loss_of_gamma(gamma, lam_cov, n, xp=np):
    """The population loss 1/2 [tr(G^T L G B) - 2 tr(L G L) + tr L] (module doc)."""
    b = (1.0 + 1.0 / n) * lam_cov @ lam_cov + xp.trace(lam_cov) / n * lam_cov
    return 0.5 * (
        xp.trace(gamma.T @ lam_cov @ gamma @ b) - 2.0 * xp.trace(lam_cov @ gamma @ lam_cov) + xp.trace(lam_cov)
    )


def loss_star(lam_cov: np.ndarray, n: int) -> float:
    return float(0.5 * (np.trace(lam_cov) - np.trace(lam_cov @ gamma_star(lam_cov, n) @ lam_cov)))


def closed_form(d: int, n: int, lam: float, sigma: float, t) -> tuple[np.ndarray, np.ndarray]:
    """(p(t), L(t)) of the isotropic flow from the paper's start (module doc): Gamma = p I."""
    t = np.asarray(t, dtype=float)
    c = 1.0 + (d + 1.0) / n
    r, cap, p0 = 2.0 * np.sqrt(d) * lam**2, 1.0 / (lam * c), sigma**2 / np.sqrt(d)
    p = cap / (1.0 + (cap / p0 - 1.0) * np.exp(-r * t))
    return p, d / 2.0 * (lam**3 * c * p**2 - 2.0 * lam**2 * p + lam)


def field(theta: np.ndarray, lam_cov: np.ndarray, n: int) -> np.ndarray:
    """-grad L at the flat state theta = (u, U (D, D) row-major) (numpy; the module doc's
    u' = -<G, U^T>, U' = -u G^T)."""
    u, big = theta[0], theta[1:].reshape(D, D)
    b = (1.0 + 1.0 / n) * lam_cov @ lam_cov + np.trace(lam_cov) / n * lam_cov
    g = lam_cov @ (u * big.T) @ b - lam_cov @ lam_cov
    return np.concatenate([[-np.sum(g * big.T)], (-u * g.T).ravel()])


# --- what dyn.gradient_flow reads ------------------------------------------------------------
def data(spec, rng) -> dict:
    """Lambda, zero-padded to (D, D) (deterministic: rng unused)."""
    return {"Lam": padded(covariance(spec["d"], spec["lam"], spec["kappa"], spec["angle"]))}


def population_loss(theta, data, N):
    """L(u U^T) in JAX (module doc)."""
    import jax.numpy as jnp

    gamma = theta["u"][0] * theta["U"].T
    return loss_of_gamma(gamma, data["Lam"], N, xp=jnp)


def start(spec, runs: int) -> dict:
    """The starts (module doc): u = sigma, U = sigma Theta Theta^T / ||Theta Theta^T||_F."""
    d, sigma, kind = spec["d"], float(spec["init_scale"]), spec["start"]
    u = np.full((runs, 1), sigma)
    big = np.zeros((runs, D, D))
    for r in range(runs):
        if kind == "paper":
            block = np.eye(d) / np.sqrt(d)
        elif kind == "paper_random":
            theta = spec.rng.standard_normal((d, d))
            block = theta @ theta.T
            block /= np.linalg.norm(block)
        else:
            u[r, 0] = sigma * spec.rng.standard_normal()
            block = spec.rng.standard_normal((d, d)) / np.sqrt(d)
        big[r, :d, :d] = sigma * block
    return {"u": u, "U": big}


_Flow = dyn.gradient_flow(
    population_loss,
    name="linear_icl_flow",
    weights={"u": (1,), "U": (D, D)},
    data=data,
    params=PARAMS,
    init=start,
    observables={"u": lambda theta: theta["u"][0]},
    description="linear self-attention trained on in-context linear regression: gradient flow "
    "(or descent) of the population loss",
)

_REFERENCE_CACHE: dict = {}  # (start, parameters) -> (t, state): the flow continued in time


def reference(x0, d, N, lam, kappa, angle, t):
    """The gradient flow from the run's start x0 (1, 1 + D^2) at time t: scipy's DOP853 at rtol
    1e-12, continued from the last time asked for the same start (times come in order)."""
    from scipy.integrate import solve_ivp

    lam_cov = padded(covariance(int(d), lam, kappa, angle))
    x0 = np.asarray(x0, dtype=float)
    key = (x0.tobytes(), int(d), int(N), float(lam), float(kappa), float(angle))
    t0, state = _REFERENCE_CACHE.get(key, (0.0, x0[0]))
    if t < t0:
        t0, state = 0.0, x0[0]
    if t > t0:
        sol = solve_ivp(lambda _, y: field(y, lam_cov, int(N)), (t0, t), state, method="DOP853", rtol=1e-12, atol=1e-14)
        state = sol.y[:, -1]
    if len(_REFERENCE_CACHE) > 4096:
        _REFERENCE_CACHE.clear()
    _REFERENCE_CACHE[key] = (t, state)
    return state[None, :].copy()


class LinearICLFlow(_Flow):
    """The flow of the module doc, with Gamma's error against Gamma*, the loss's against its
    closed form and the conserved imbalance u^2 - ||U||_F^2 at every save time."""

    reference = staticmethod(reference)
    default_plot = "gamma_error_final"

    @staticmethod
    def stepped(spec):
        """The point with the step eta = 1/steps when ``steps`` > 0 (gradient descent)."""
        steps = int(spec["steps"])
        return spec.variant(dt=1.0 / steps) if steps > 0 else spec

    def validate(self, spec) -> None:
        if int(spec["steps"]) > 0 and spec.solver.method != "euler":
            raise dyn.ScenarioError(
                "params.steps",
                "steps > 0 is gradient descent: Euler's "
                f"method, not {spec.solver.method} (set [integrator] "
                'method = "euler", or steps = 0)',
            )
        super().validate(self.stepped(spec))

    def simulate(self, spec, runs):
        return super().simulate(self.stepped(spec), runs)

    def solves(self, spec):
        return super().solves(self.stepped(spec))

    def batch_key(self, spec):
        return super().batch_key(self.stepped(spec))

    def outputs(self, setup):
        return super().outputs(setup) + [
            dyn.Output(
                "gamma_error",
                "max_ij |Gamma - Gamma*|, Gamma = u U^T (largest over runs)",
                dims=("time",),
                reduce="max",
            ),
            dyn.Output("gamma_error_final", "max_ij |Gamma - Gamma*| at the horizon (largest over runs)", reduce="max"),
            dyn.Output("loss_gap", "L - L*: the loss above its minimum (mean over runs)", dims=("time",)),
            dyn.Output(
                "loss_closed_error",
                "|L - L(t)|: the loss against the closed-form flow (largest over runs; NaN without one)",
                dims=("time",),
                reduce="max",
                nan_means="no closed form: kappa > 1 or another start",
            ),
            dyn.Output(
                "imbalance",
                "u^2 - ||U||_F^2, conserved by the flow (largest |.| over runs)",
                dims=("time",),
                reduce="max",
            ),
        ]

    def observe(self, spec, states):
        chunk = super().observe(spec, states)
        x = np.asarray(states)[:, :, 0, :]
        u, big = x[..., 0], x[..., 1:].reshape(x.shape[:2] + (D, D))
        gamma = u[..., None, None] * np.swapaxes(big, -1, -2)
        d, n = spec["d"], spec["N"]
        lam_cov = covariance(d, spec["lam"], spec["kappa"], spec["angle"])
        star = padded(gamma_star(lam_cov, n))
        values = chunk.values
        values["gamma_error"] = np.abs(gamma - star).max(axis=(-1, -2))
        values["gamma_error_final"] = values["gamma_error"][:, -1]
        values["loss_gap"] = values["loss"] - loss_star(lam_cov, n)
        closed = np.full(u.shape, np.nan)
        if spec["kappa"] == 1.0 and spec["start"] == "paper":
            _, law = closed_form(d, n, spec["lam"], float(spec["init_scale"]), spec.times)
            closed = np.abs(values["loss"] - law[None, :])
        values["loss_closed_error"] = closed
        values["imbalance"] = np.abs(u**2 - (big**2).sum(axis=(-1, -2)))
        return chunk
