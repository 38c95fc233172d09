r"""Polarization of softmax outputs under gradient flow: the value-softmax model L(V sigma(a))
(Varre, Rofin & Flammarion, "Gradient Flow Polarizes Softmax Outputs towards Low-Entropy
Solutions", arXiv 2603.06248). The paper's body could not be read here: the abstract, and the
authors' public code (tml-epfl/softmax, visualizations/toy_experiments.ipynb: the logistic
loss log(1 + e^{-beta^T W sigma(a)}) with W (d x d) from 0.1 N(0, 1), a = 0 and a unit target
beta, trained by gradient descent, sigma(a) drawn against iterations on log-log axes). The law
below (limit and rate) is our derivation; the abstract states the direction only (gradient flow
drives the outputs to low entropy, for the logistic and the square loss).

The model. V (n x n), a in R^n, sigma = softmax(a), a target beta = b e_1 (the law of V(0) is
rotation invariant, so only |beta| = b matters), the margin z = beta^T V sigma(a) and the loss
l(z) = log(1 + e^{-z}) (logistic) or l(z) = -z (linear). Gradient flow, with g = -l'(z)
(1/(1 + e^z), or 1):

    dV/dt = g beta sigma^T,      da/dt = g (diag sigma - sigma sigma^T) V^T beta.

Reduction. The rows of V orthogonal to beta never move; only u = V^T beta in R^n matters, and

    du/dt = g b^2 sigma,         da_i/dt = g sigma_i (u_i - ubar),    ubar = sigma . u = z,

a closed 2n-dimensional system. In the clock tau = int g dt the loss drops out: every loss
decreasing in z traces the same path (u, a)(tau), u' = b^2 sigma, a'_i = sigma_i (u_i - ubar);
the logistic and the linear loss differ in their clocks only (linear: tau = t).

The limit. From a(0) = 0 the token i* = argmax_i u_i(0) wins: if u_1 is the largest then
a_1' - a_j' = sigma_1 (u_1 - ubar) - sigma_j (u_j - ubar) >= 0 (both terms nonnegative when
u_j < ubar; when u_j >= ubar, sigma_1 >= sigma_j and u_1 - ubar >= u_j - ubar), so sigma_1 stays
the largest share, u_1' = b^2 sigma_1 >= u_j' keeps u_1 the largest, and sigma -> e_{i*}: the
output polarizes to a vertex, entropy -> 0.

The rate. Near e_1 with eps = 1 - sigma_1 and m = n - 1 losers, u_1 ~ b^2 tau and the losers'
u_j stay bounded (u_j' = b^2 sigma_j is integrable), so u_1 - u_j ~ b^2 tau ~ z and

    d log sigma_j / dtau = a_j' - sum_k sigma_k a_k' = -z (sigma_j + eps) (1 + o(1)).

The ratios sigma_j / sigma_k obey d/dtau log(sigma_j/sigma_k) = -z (sigma_j - sigma_k): the
losers equalize, sigma_j -> eps/m (slowly: with sigma_j ~ eps/m the log-ratio r obeys
r' = -(2/(m + 1)) r / tau, r ~ tau^{-2/(m+1)}), and eps' = -z eps^2 (1 + 1/m), z' = b^2 (1 +
O(eps)):

    eps = 1 - max sigma = (2 m / (m + 1)) b^2 / z^2 (1 + o(1)),
    H(sigma) = eps (1 + log(m / eps)) (1 + o(1)).

In time: linear loss, z = b^2 t (1 + o(1)), so eps ~ 2m / ((m + 1) b^2 t^2); logistic loss,
dz/dt = b^2 g (1 + o(1)) = b^2 / (1 + e^z) gives e^z ~ b^2 t, so eps ~ 2 m b^2 / ((m + 1)
log^2(b^2 t)): polarization at the logistic loss's own pace, like 1/log^2 t, with the entropy
like 4 b^2 (m/(m + 1)) log log t / log^2 t. The outputs measure `law_ratio` =
eps z^2 (m + 1) / (2 m b^2), which tends to 1 along every run whatever the loss, and the
references `gap_law`, `entropy_law` are the rates above in t (log(b^2 t) in place of z for the
logistic loss, from b^2 t >= e).

Measured against the derivation (the shipped sweep: n = 4, 8, 16, 32 at b = 1, 8 runs per
point, t = 1e4, tsit5 at rtol 1e-9). The limit: every run ends at the vertex of its largest
u_i(0) (`winner_agrees` = 1 at every point). The rate, as law_ratio = eps z^2 (m + 1)/(2 m b^2):
linear loss (z/b = 9.9e3 .. 1e4) 0.9986 .. 1.0005 (standard errors <= 4e-4); eps against the
law in t 0.24% .. 1.3% high, the entropy 0.23% .. 1.1% high; the largest errors at n = 32, where
the losers have not equalized (their log-ratio falls like t^{-2/(m+1)}: unequal losers make
sum sigma_j^2 > eps^2/m and the ratio < 1). Logistic loss (z/b = 9.2): law_ratio 2.01 .. 2.45
and falling, eps 2.0 .. 2.5 times the law in t, the entropy (0.22 .. 0.34, from log n = 1.4 ..
3.5) 1.8 .. 2.0 times its law: the law is asymptotic in z, and z grows like log t (the reduced
ODE at n = 8, b = 1 gives 1.89 at z = 11, 1.08 at z = 80, 1.005 at z = 1000; a test bounds it by
1% at z = 4000). The same sweep over b = 0.5, 1, 2 at n = 4, 8, 16 (not shipped): linear loss
0.9988 .. 1.0011; logistic loss at z/b = 15.6, 9.2, 5.2: 1.48 .. 1.62, 2.09 .. 2.44, 3.32 .. 3.82
(the smaller z, the further from the limit). The reduced ODE solved by scipy matches the
engine's flow of V and a to 1e-7 (tests/test_softmax_polarization.py, slow tier).

Not covered: the square loss 0.5 |V sigma(a) - beta|^2, which the authors' code also runs. There
the rows of V orthogonal to beta move too (the residual has a part off beta), so the reduction
above does not hold and no law is derived here; the target is reached at a finite margin, so
polarization, if any, stops at a positive entropy.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import dyn

LOSSES = ("logistic", "linear")
SMALL_GAP = 0.25  # the references are drawn where the asymptotic eps is at most this
PARAMS = {
    "n": dyn.Field("int", 8, "softmax size n (V is n x n, a in R^n)", lo=2, hi=256),
    "b": dyn.Field("float", 1.0, "target norm |beta| (beta = b e_1)", gt=0.0, hi=100.0),
    "init_scale": dyn.Field("float", 0.1, "V(0) = init_scale N(0, 1) entries (a(0) = 0)", lo=0.0, hi=100.0),
}


def _softmax(a):
    e = jnp.exp(a - jnp.max(a))
    return e / jnp.sum(e)


def _margin(theta, b):
    return b * (theta["V"] @ _softmax(theta["a"]))[0]


def logistic(theta, data, b):
    """log(1 + e^{-z}), z = b e_1^T V softmax(a)."""
    return jnp.logaddexp(0.0, -_margin(theta, b))


def linear(theta, data, b):
    """-z: the logistic loss's path on the clock tau (module doc)."""
    return -_margin(theta, b)


def entropy(theta):
    s = _softmax(theta["a"])
    return -jnp.sum(s * jnp.log(jnp.maximum(s, 1e-300)))


def gap(theta):
    return 1.0 - jnp.max(_softmax(theta["a"]))


def margin_unit(theta):
    """z / b = (V softmax(a))_1."""
    return (theta["V"] @ _softmax(theta["a"]))[0]


def law_ratio(theta):
    """eps z^2 (m + 1) / (2 m b^2) = eps (z/b)^2 n / (2 (n - 1)): 1 in the limit."""
    n = theta["a"].shape[0]
    return gap(theta) * margin_unit(theta) ** 2 * n / (2.0 * (n - 1))


def winner_agrees(theta):
    """1 when the largest share is the token of the largest u_i = b V_{1i} (the limit's token:
    the order of u is the order of the shares along the flow, module doc), else 0."""
    return jnp.where(jnp.argmax(theta["a"]) == jnp.argmax(theta["V"][0]), 1.0, 0.0)


OBSERVABLES = {
    "entropy": entropy,
    "gap": gap,
    "margin_unit": margin_unit,
    "law_ratio": law_ratio,
    "winner_agrees": winner_agrees,
}


def start(spec, runs):
    """The authors' start: V = init_scale N(0, 1) entries, a = 0."""
    n = spec["n"]
    v = float(spec["init_scale"]) * spec.rng.standard_normal((runs, n, n))
    return {"V": v, "a": np.zeros((runs, n))}


def _build(loss, name):
    return dyn.gradient_flow(
        loss,
        name=name,
        weights={"V": lambda s: (s["n"], s["n"]), "a": lambda s: (s["n"],)},
        params=dict(PARAMS),
        observables=OBSERVABLES,
        init=start,
        description=f"value-softmax model, {name}",
    )


LogisticFlow = _build(logistic, "value_softmax_logistic")
LinearFlow = _build(linear, "value_softmax_linear")
FLOWS = {"logistic": LogisticFlow, "linear": LinearFlow}
_VALIDATED: set = set()  # parameter values whose flow passed its check in this process


# --- the reduced flow and the law (numpy) -------------------------------------------------------
def reduced_field(u, a, b, loss="logistic"):
    """(du/dt, da/dt) of the reduced flow (module doc)."""
    s = np.exp(a - a.max())
    s /= s.sum()
    z = s @ u
    g = 1.0 / (1.0 + np.exp(z)) if loss == "logistic" else 1.0
    return g * b * b * s, g * s * (u - z)


def reduced_flow(u0, a0, b, times, loss="logistic"):
    """(u, a) at `times` from (u0, a0) (scipy LSODA, rtol 1e-11)."""
    from scipy.integrate import solve_ivp

    n = len(u0)

    def field(t, y):
        du, da = reduced_field(y[:n], y[n:], b, loss)
        return np.concatenate([du, da])

    times = np.asarray(times, dtype=float)
    sol = solve_ivp(
        field, (0.0, times.max()), np.concatenate([u0, a0]), t_eval=times, method="LSODA", rtol=1e-11, atol=1e-13
    )
    return sol.y[:n].T, sol.y[n:].T


def gap_law(n, b, times, loss="logistic"):
    """eps(t) = 2 m b^2 / ((m + 1) z(t)^2), z = b^2 t (linear) or log(b^2 t) (logistic, NaN
    below b^2 t = e); NaN where it exceeds SMALL_GAP (an asymptotic law for small eps)."""
    m = n - 1
    t = np.asarray(times, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = b * b * t if loss == "linear" else np.log(b * b * t)
        eps = 2.0 * m * b * b / ((m + 1) * z**2)
    if loss == "logistic":
        eps = np.where(b * b * t >= np.e, eps, np.nan)
    return np.where((t > 0) & (eps <= SMALL_GAP), eps, np.nan)


def entropy_law(n, eps):
    """H = eps (1 + log(m / eps)) of a vertex's neighbourhood with m equal losers."""
    return eps * (1.0 + np.log((n - 1) / eps))


class SoftmaxPolarization(dyn.System):
    """Gradient flow of the value-softmax model, logistic or linear loss (module doc)."""

    name = "softmax_polarization"
    description = (
        "gradient flow of the value-softmax model V softmax(a): entropy of the "
        "softmax against the derived polarization law"
    )
    default_plot = "entropy"
    params = {
        "objective": dyn.Field(
            "str",
            "logistic",
            "loss of the margin z = beta^T V sigma(a): "
            "logistic log(1 + e^{-z}) or linear -z (the same path on the "
            "clock tau)",
            choices=LOSSES,
        ),
        **LogisticFlow.params,
    }
    equation = "ode"
    integrator = LogisticFlow.integrator

    @staticmethod
    def flow(spec):
        return FLOWS[spec["objective"]]()

    def validate(self, spec) -> None:
        """The flow's check (a JAX gradient at a start), once per process for each set of the
        values it depends on: describing or resolving the sweep again repeats none."""
        key = (spec["objective"], spec["n"], spec["b"], spec["init_scale"], spec.solver.backend)
        if key not in _VALIDATED:
            self.flow(spec).validate(spec)
            _VALIDATED.add(key)

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        return self.flow(spec).simulate(spec, runs)

    def run_bytes(self, spec) -> int:
        return self.flow(spec).run_bytes(spec)

    def trajectory_dims(self, setup):
        return None

    def outputs(self, setup) -> list:
        return LogisticFlow().outputs(setup)

    def references(self, setup) -> list:
        keys = ("objective", "n", "b")
        dims = tuple(a for a in setup.axes if a in keys)
        shape = tuple(len(setup.axes[a]) for a in dims)
        times = np.asarray(setup.times, dtype=float)
        gaps = np.full(shape + (len(times),), np.nan)
        entropies = gaps.copy()
        for index in np.ndindex(*shape):
            p = {key: setup.params.get(key) for key in keys}
            p.update({a: setup.axes[a][i] for a, i in zip(dims, index, strict=True)})
            eps = gap_law(int(p["n"]), float(p["b"]), times, p["objective"] or "logistic")
            gaps[index] = eps
            with np.errstate(divide="ignore", invalid="ignore"):
                entropies[index] = entropy_law(int(p["n"]), eps)
        return [
            dyn.Reference(
                "gap_law",
                "1 - max sigma of the derived law 2 m b^2 / ((m + 1) z^2), z = b^2 t (linear) or log(b^2 t) (logistic)",
                gaps,
                dims + ("time",),
                draw=dyn.Draw(over=("gap",), color="black", label="derived law"),
            ),
            dyn.Reference(
                "entropy_law",
                "entropy of the derived law eps (1 + log(m / eps))",
                entropies,
                dims + ("time",),
                draw=dyn.Draw(over=("entropy",), color="black", label="derived law"),
            ),
        ]
