r"""Gaussian-closed attention: a Gaussian law of tokens in R^d stays Gaussian, and its mean and
covariance solve a closed ODE (Castin, Ablin, Carrillo & Peyre, "A unified perspective on the
dynamics of deep Transformers", arXiv 2501.18322; the authors' code, 2025-transformers-PDEs,
integrates the covariance ODEs). Only the abstract and the public code could be read here, not
the paper's body: the derivation below is ours, checked against the code's right-hand sides
(with A = beta I its softmax and Sinkhorn covariance fields are those below without the -x
term) and by the tests (quadrature, Monte Carlo, the particles themselves).

The particles. Tokens x_1 .. x_n in R^d, written with the public API as
``dyn.particles(phi, geometry="euclidean")`` with phi(s) = e^{beta s}, s = <x_i, x_j>:

    dx_i/dt = sum_j A_ij (x_j - x_i),      A = N(e^{beta <x_i, x_j>}),

with N "SA" (softmax: rows sum to 1) or "sinkhorn" (doubly stochastic). This is the attention
flow with Q = K = sqrt(beta) I (A = K^T Q = beta I), values V = I and the -x_i that the R^d
builder subtracts (rows of A sum to 1: sum_j A_ij x_j - x_i).

The mean field. As n -> oo the empirical law tends to mu_t solving d/dt mu + div(mu v[mu]) = 0
with v[mu](x) = E_{y ~ pi(.|x)}[y] - x, pi(.|x) the row of the attention kernel. For mu = N(m, S):

- softmax: pi(dy|x) is mu tilted by e^{beta <x, y>}; the tilt of N(m, S) by e^{<a, y>} is
  N(m + S a, S) (complete the square), so E[y|x] = m + beta S x and

      v(x) = m + (beta S - I) x,                     affine;

- Sinkhorn: pi(dx, dy) = e^{beta <x, y> + f(x) + f(y)} mu(dx) mu(dy) with both marginals mu
  (the entropic optimal transport of mu to itself for the cost -<x, y> at temperature 1/beta;
  f = g by symmetry). f is quadratic (the Gaussian ansatz solves the Schroedinger system), so
  pi is Gaussian with covariance [[S, C], [C, S]], and the off-diagonal block of its precision
  is the coefficient -beta I of the cross term. Block inversion with C commuting with S (the
  ansatz, verified) gives S^{-1} C (S - C S^{-1} C)^{-1} = beta I, i.e. beta C^2 + C = beta S^2:

      C = (sqrt(I + 4 beta^2 S^2) - I) / (2 beta),   E[y|x] = m + C S^{-1} (x - m),
      v(x) = (C S^{-1} - I)(x - m),                  affine

  (the entropic Gaussian-to-Gaussian plan of Janati et al. / Mallasto et al. with equal
  covariances and epsilon = 1/beta).

An affine velocity v(x) = M x + b pushes a Gaussian to a Gaussian (x(t) is an affine image of
x(0)), with dm/dt = M m + b, dS/dt = M S + S M^T. Hence the moment ODEs:

    softmax:   dm/dt = beta S m,    dS/dt = 2 beta S^2 - 2 S,
    Sinkhorn:  dm/dt = 0,           dS/dt = 2 C(S) - 2 S = (sqrt(I + 4 beta^2 S^2) - I)/beta - 2 S.

Both keep S's eigenvectors; per eigenvalue lambda, softmax has the closed form
lambda(t) = 1 / (beta + (1/lambda0 - beta) e^{2t}) (collapse for lambda0 < 1/beta, blow-up in
finite time above) and the mean's component along that eigenvector grows by
e^t sqrt(lambda(t)/lambda0); Sinkhorn's lambda always decreases (sqrt(1 + 4 b^2 l^2) < 1 + 2 b l),
like -1/beta for large lambda and like -2 lambda for small. :func:`moments` integrates the
matrix ODEs (scipy solve_ivp, rtol 1e-11); a test checks it against the softmax closed form.

The start: mu0 = mean0 (1, .., 1)/sqrt(d), S0 = diag(var0 aniso^{-k/(d-1)}), k = 0 .. d-1.
The outputs, per run, from the empirical mean and covariance (1/(n-1): unbiased at t = 0) of
the tokens at each save time, reduced over runs with their Monte Carlo standard errors:
`mean_along` (<m, u>, u = mu0/|mu0|), `cov_top` (S_11), `cov_bottom` (S_dd), `cov_trace`
(tr S / d), beside the moment ODE as references; `mean_error` = |m - m(t)| and `cov_error` =
|S - S(t)|_F, which shrink like n^{-1/2} (the fluctuations of the empirical law; the finite-n
bias is O(1/n)) down to the step error of the particles' integrator, `step_floor`: the moment
ODE integrated by RK4 at the scenario's step against solve_ivp.

Finite n. The particles include each token's weight on itself, e^{beta |x_i|^2} against a
typical e^{beta <x_i, x_j>}: a share of about e^{beta tr S}/n of the attention stays home, which
slows softmax's flow by that fraction (a bias O(e^{beta tr S}/n), beside the O(n^{-1/2})
fluctuation). With tr S0 = 2.2 (d = 8, aniso = 4) it was 5 standard errors of 20 runs at
n = 64 ... 256; the scenario takes aniso = 16 (tr S0 = 1.5 at d = 8) and n >= 128, where it is
below one. It is still there: at d = 2, n = 512 and 1024, with 200 runs in each of four seeds,
softmax's S_11 at t = 1 sits above the ODE by about 1.3 standard errors of those 200 runs
(about 2/n), 0.4 of the scenario's 20 runs.

About the public API (what it could not say): one `dyn.particles` class has one normalization,
so the two kinds are two built classes and :class:`GaussianAttention` is a small `dyn.System`
that hands each point to one of them by the parameter `kind`; the builder's initial law
(standard normal) and its cluster outputs (which build n x n distance matrices at every save)
are replaced by subclassing, and its cluster parameters (delta, until_decided, decide_cap) are
not used. A general Q, K, V (A not a multiple of I) is not a function of <x_i, x_j>: it would
need a `dyn.Model` with its own pair loop.
"""
from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

import dyn

KINDS = ("softmax", "sinkhorn")
MOMENTS = ("mean_along", "cov_top", "cov_bottom", "cov_trace")


def exp_score(s, beta):
    """phi(s) = e^{beta s}: the attention kernel of s = <x_i, x_j>."""
    return np.exp(beta * s)


LAW = {"beta": dyn.Field("float", 1.0, "inverse temperature beta (A = beta I)", gt=0.0, hi=10.0),
       "mean0": dyn.Field("float", 1.0, "|mu0|: the start's mean is mean0 (1,..,1)/sqrt(d)",
                          lo=-10.0, hi=10.0),
       "var0": dyn.Field("float", 0.5, "largest eigenvalue of the start's covariance Sigma0",
                         gt=0.0, hi=10.0),
       "aniso": dyn.Field("float", 4.0, "ratio of Sigma0's largest to smallest eigenvalue",
                          lo=1.0, hi=1e3)}

Softmax = dyn.particles(exp_score, name="gaussian_softmax", geometry="euclidean",
                        normalization="SA", params=LAW,
                        description="softmax attention in R^d from a Gaussian start")
Sinkhorn = dyn.particles(exp_score, name="gaussian_sinkhorn", geometry="euclidean",
                         normalization="sinkhorn", params=LAW,
                         description="Sinkhorn attention in R^d from a Gaussian start")


# --- the theory --------------------------------------------------------------------------------
def start(d: int, mean0: float, var0: float, aniso: float):
    """(mu0, Sigma0) of the start (module doc)."""
    mu = np.full(d, mean0 / np.sqrt(d))
    k = np.arange(d) / max(d - 1, 1)
    return mu, np.diag(var0 * aniso ** -k)


def cross_covariance(beta: float, cov) -> np.ndarray:
    """C(S) = (sqrt(I + 4 beta^2 S^2) - I) / (2 beta), the cross-covariance of the entropic
    plan of N(m, S) to itself (written 2 beta l^2 / (1 + sqrt(1 + 4 beta^2 l^2)) per eigenvalue:
    no cancellation for small l)."""
    lam, vec = np.linalg.eigh((cov + cov.T) / 2)
    c = 2 * beta * lam ** 2 / (1 + np.sqrt(1 + 4 * beta ** 2 * lam ** 2))
    return (vec * c) @ vec.T


def velocity(kind: str, beta: float, mean, cov, x) -> np.ndarray:
    """The mean-field velocity v[N(mean, cov)](x) at points x (..., d) (module doc)."""
    x = np.asarray(x, dtype=float)
    if kind == "softmax":
        return mean + x @ (beta * cov).T - x
    c = cross_covariance(beta, cov)
    gain = np.linalg.solve(cov, c).T  # C S^{-1} (both symmetric and commuting)
    return (x - mean) @ (gain - np.eye(len(mean))).T


def moment_field(kind: str, beta: float, mean, cov):
    """(dm/dt, dS/dt) of the moment ODE (module doc)."""
    if kind == "softmax":
        return beta * cov @ mean, 2 * beta * cov @ cov - 2 * cov
    if kind == "sinkhorn":
        return np.zeros_like(mean), 2 * cross_covariance(beta, cov) - 2 * cov
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def _flat_field(kind, beta, d):
    def rhs(t, y):
        dm, ds = moment_field(kind, beta, y[:d], y[d:].reshape(d, d))
        return np.concatenate([dm, ((ds + ds.T) / 2).ravel()])

    return rhs


def moments(kind: str, beta: float, mean0, cov0, times, rtol: float = 1e-11):
    """The moment ODE solved at `times` (from t = 0): means (T, d), covariances (T, d, d)."""
    d = len(mean0)
    y0 = np.concatenate([np.asarray(mean0, float), np.asarray(cov0, float).ravel()])
    times = np.asarray(times, dtype=float)
    sol = solve_ivp(_flat_field(kind, beta, d), (0.0, float(times[-1])), y0, method="DOP853",
                    t_eval=times, rtol=rtol, atol=rtol * 1e-2)
    if not sol.success:
        raise RuntimeError(f"moment ODE: {sol.message}")
    y = sol.y.T
    return y[:, :d], y[:, d:].reshape(-1, d, d)


def moments_rk4(kind: str, beta: float, mean0, cov0, times, dt: float):
    """The moment ODE by classical RK4 with step dt (the particles' method): its distance to
    :func:`moments` is the step error of the scheme at that step."""
    d = len(mean0)
    rhs = _flat_field(kind, beta, d)
    y = np.concatenate([np.asarray(mean0, float), np.asarray(cov0, float).ravel()])
    out, t = [y.copy()], 0.0
    for target in np.asarray(times, dtype=float)[1:]:
        steps = max(int(round((target - t) / dt)), 1)
        h = (target - t) / steps
        for _ in range(steps):
            k1 = rhs(t, y)
            k2 = rhs(t + h / 2, y + h / 2 * k1)
            k3 = rhs(t + h / 2, y + h / 2 * k2)
            k4 = rhs(t + h, y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            t += h
        out.append(y.copy())
    y = np.array(out)
    return y[:, :d], y[:, d:].reshape(-1, d, d)


def softmax_closed(beta: float, mean0, variances0, times):
    """Softmax's closed form for a diagonal Sigma0 = diag(variances0): (means, variances)."""
    lam0 = np.asarray(variances0, dtype=float)
    t = np.asarray(times, dtype=float)[:, None]
    lam = 1.0 / (beta + (1.0 / lam0 - beta) * np.exp(2 * t))
    return np.asarray(mean0) * np.exp(t) * np.sqrt(lam / lam0), lam


def summaries(mean, cov, direction) -> dict:
    """The scalar moments the outputs carry, from means (..., d) and covariances (..., d, d)."""
    d = mean.shape[-1]
    return {"mean_along": mean @ direction, "cov_top": cov[..., 0, 0],
            "cov_bottom": cov[..., d - 1, d - 1],
            "cov_trace": np.trace(cov, axis1=-2, axis2=-1) / d}


def n_slope(ns, errors, ses=None):
    """Least-squares slope of log(error) against log(n), and its 95% interval (t quantile of the
    residual scatter; with standard errors `ses`, weighted by their relative size)."""
    from scipy import stats

    x, y = np.log(np.asarray(ns, float)), np.log(np.asarray(errors, float))
    w = np.ones_like(x) if ses is None else (np.asarray(errors) / np.asarray(ses)) ** 2
    xm, ym = np.average(x, weights=w), np.average(y, weights=w)
    sxx = np.sum(w * (x - xm) ** 2)
    slope = np.sum(w * (x - xm) * (y - ym)) / sxx
    resid = y - ym - slope * (x - xm)
    dof = max(len(x) - 2, 1)
    se = np.sqrt(np.sum(w * resid ** 2) / dof / sxx)
    half = stats.t.ppf(0.975, dof) * se
    return float(slope), (float(slope - half), float(slope + half))


# --- the particles -----------------------------------------------------------------------------
class GaussianTokens:
    """What the Gaussian scenario changes in a built particles class: the start N(mu0, Sigma0),
    the moment outputs (no cluster statistics), no run-until-decided."""

    def initial_state(self, spec, runs: int) -> np.ndarray:
        mu, cov = start(spec["d"], spec["mean0"], spec["var0"], spec["aniso"])
        z = spec.rng.standard_normal((runs, spec["n"], spec["d"]))
        return mu + z * np.sqrt(np.diag(cov))

    def validate(self, spec) -> None:
        dyn.Model.validate(self, spec)

    def simulate(self, spec, runs: range):
        return dyn.Model.simulate(self, spec, runs)

    def run_bytes(self, spec) -> int:
        n, d = spec["n"], spec["d"]
        return 8 * (n * n + 3 * len(spec.times) * n * d)

    def trajectory_dims(self, setup):
        return None

    def observe(self, spec, states) -> dyn.Chunk:
        x = np.asarray(states)  # (runs, T, n, d)
        n = x.shape[2]
        mean = x.mean(axis=2)
        centred = x - mean[:, :, None, :]
        cov = np.einsum("rtia,rtib->rtab", centred, centred) / max(n - 1, 1)
        mu0, cov0 = start(spec["d"], spec["mean0"], spec["var0"], spec["aniso"])
        m, s = moments(spec["kind"], spec["beta"], mu0, cov0, spec.times)
        values = summaries(mean, cov, _direction(mu0))
        values["mean_error"] = np.linalg.norm(mean - m, axis=-1)
        values["cov_error"] = np.linalg.norm(cov - s, axis=(-2, -1))
        return dyn.Chunk(values)


class SoftmaxTokens(GaussianTokens, Softmax):
    """Softmax attention tokens from a Gaussian start."""


class SinkhornTokens(GaussianTokens, Sinkhorn):
    """Sinkhorn attention tokens from a Gaussian start."""


TOKENS = {"softmax": SoftmaxTokens, "sinkhorn": SinkhornTokens}


def _direction(mu0):
    norm = np.linalg.norm(mu0)
    return mu0 / norm if norm > 0 else np.eye(len(mu0))[0]


_LABELS = {"mean_along": "<m, u>, u = mu0/|mu0|: the empirical mean along the start's",
           "cov_top": "Sigma_11: the empirical variance along the start's widest axis",
           "cov_bottom": "Sigma_dd: the empirical variance along the start's narrowest axis",
           "cov_trace": "tr Sigma / d: the empirical covariance's mean eigenvalue"}


class GaussianAttention(dyn.System):
    """Softmax or Sinkhorn attention in R^d from N(mu0, Sigma0), against the moment ODE."""

    name = "gaussian_attention"
    description = ("attention in R^d from a Gaussian start: empirical mean and covariance "
                   "against the closed moment ODE (softmax, Sinkhorn)")
    default_plot = "cov_trace"
    params = {"kind": dyn.Field("str", "softmax", "attention normalization: softmax (rows sum "
                                "to 1) or sinkhorn (doubly stochastic)", choices=KINDS),
              **LAW,
              "n": dyn.Field("int", 256, "number of tokens", lo=2, hi=4096),
              "d": dyn.Field("int", 2, "dimension of the space", lo=1, hi=32),
              "sinkhorn_iterations": Sinkhorn.params["sinkhorn_iterations"]}
    equation = "ode"
    integrator = Softmax.integrator

    @staticmethod
    def tokens(spec):
        """The particles system of the point's kind."""
        return TOKENS[spec["kind"]]()

    def validate(self, spec) -> None:
        self.tokens(spec).validate(spec)

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        return self.tokens(spec).simulate(spec, runs)

    def run_bytes(self, spec) -> int:
        return self.tokens(spec).run_bytes(spec)

    def outputs(self, setup) -> list:
        outs = [dyn.Output(k, f"{v} (mean over runs)", "1", ("time",), "mean_se")
                for k, v in _LABELS.items()]
        outs += [dyn.Output("mean_error", "|m - m(t)|: empirical mean against the moment ODE "
                            "(mean over runs)", "1", ("time",), "mean_se"),
                 dyn.Output("cov_error", "|S - S(t)|_F: empirical covariance against the "
                            "moment ODE (mean over runs)", "1", ("time",), "mean_se",
                            draw=dyn.Draw(slopes=(-0.5,))),
                 dyn.Output("step_floor", "|S_rk4(T) - S(T)|_F: the moment ODE by RK4 at the "
                            "scenario's step against solve_ivp (the step error)", "1", (),
                            "point")]
        return outs

    def point_values(self, spec) -> dict:
        mu0, cov0 = start(spec["d"], spec["mean0"], spec["var0"], spec["aniso"])
        _, s = moments(spec["kind"], spec["beta"], mu0, cov0, spec.times)
        _, r = moments_rk4(spec["kind"], spec["beta"], mu0, cov0, spec.times, spec.dt)
        return {"step_floor": float(np.linalg.norm(r[-1] - s[-1]))}

    def references(self, setup) -> list:
        keys = ("kind", "beta", "mean0", "var0", "aniso", "d")
        dims = tuple(a for a in setup.axes if a in keys)
        times = setup.times
        shape = tuple(len(setup.axes[a]) for a in dims)
        values = {k: np.full(shape + (len(times),), np.nan) for k in MOMENTS}
        for index in np.ndindex(*shape):
            p = {k: setup.params.get(k) for k in keys}
            p.update({a: setup.axes[a][i] for a, i in zip(dims, index)})
            mu0, cov0 = start(int(p["d"]), float(p["mean0"]), float(p["var0"]),
                              float(p["aniso"]))
            m, s = moments(p["kind"], float(p["beta"]), mu0, cov0, times)
            for k, v in summaries(m, s, _direction(mu0)).items():
                values[k][index] = v
        return [dyn.Reference(f"{k}_ode", f"{_LABELS[k]}: the moment ODE", values[k],
                              dims + ("time",),
                              draw=dyn.Draw(over=(k,), color="black", label="moment ODE"))
                for k in MOMENTS]
