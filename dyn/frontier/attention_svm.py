r"""Max-margin token selection: the gradient flow of one softmax attention layer converges in
direction to an attention SVM (Tarzanagh, Li, Thrampoulidis & Oymak, "Transformers as Support
Vector Machines", arXiv 2308.16898; Tarzanagh, Li, Zhang & Oymak, "Max-Margin Token Selection
in Attention Mechanism", arXiv 2306.13596). Only the abstracts and short excerpts of the papers
could be read here, not their bodies nor the authors' code: the model, the SVMs and the
derivations below are ours, written from the abstracts and checked by the numbers.

The model. Input i has T tokens x_it in R^d (rows of X_i), a query z_i and a label
Y_i = +-1; a head v in R^d. One attention layer reads

    f(X_i) = v^T X_i^T softmax(X_i W z_i),     L(W) = (1/n) sum_i log(1 + e^{-Y_i f(X_i)}),

trained by gradient flow in one of three forms (``form``):

- ``W``: W' = -grad_W L, the head v fixed;
- ``KQ``: W = K Q^T with K, Q in R^{d x d}, (K, Q)' = -grad_{K,Q} L;
- ``vW``: v and W jointly, (v, W)' = -grad L (v starts at the data's head).

The score of token t is gamma_it = Y_i v^T x_it; opt_i = argmax_t gamma_it is input i's
optimal token. Since f is linear in the attention weights, L > L* = (1/n) sum_i
log(1 + e^{-gamma_{i opt_i}}) and L -> L* only as the attention concentrates on the optimal
tokens, i.e. as the softmax gaps (x_{i opt_i} - x_it)^T W z_i -> +oo: ||W|| -> oo, and the
question is the direction. A selection alpha (one token alpha_i per input) defines the SVMs
(:mod:`dyn.frontier.attention_svm_math`, solved by scipy from the data alone):

    Frobenius:  W_F(alpha) = argmin ||W||_F   s.t. (x_{i alpha_i} - x_it)^T W z_i >= 1 (t != alpha_i),
    nuclear:    W_*(alpha) = argmin ||W||_*   s.t. the same constraints.

The claims checked (the papers' abstracts): W(t) / ||W(t)|| -> W_F(opt) / ||W_F(opt)|| for the
W form when the optimum is global, and to W_F(alpha) for a locally optimal selection alpha
otherwise; W = K Q^T -> W_*(opt) in direction. For (K, Q) the papers prove less than that:
arXiv 2308.16898 states it for the regularization path of (K, Q) ("with vanishing
regularization"; its gradient-descent theorems are for the W form), and the authors' public code
(umich-sota/TF-as-SVM, README) trains (K, Q) with a penalty 2.2e-16 (||K||^2 + ||Q||^2) added
because the plain gradient underflows, i.e. along a regularization path; Sheen, Chen, Wang &
Zhou (arXiv 2403.08699) prove the nuclear-norm bias of the (K, Q) gradient flow for diagonal
K, Q and, for general ones, only with their singular spaces aligned to the data at the start.
For the plain gradient flow it is measured here, and the law found is below ("The (K, Q)
flow").

What the runs show (scenarios/attention_svm.toml; the numbers are the file's): the W flow
reaches the Frobenius direction to 1 - corr ~ 1e-4 by log t ~ 250; the (K, Q) flow heads for
the nuclear-norm SVM and away from the Frobenius one, but only as a small power of log t whose
exponent is set by the data's dual certificate, from a distance set by the start: on known data
the median corr_svm is 0.983 at log t ~ 580 (39% of the 64 runs above 0.99), and the run-to-run
spread is the start's, not noise (``spurious_ratio``, ``nuclear_excess``). Locally optimal
selections are reached on both kinds of data (below), and such runs head for their own
selection's SVM.

Datasets (``data``):

- ``known``: every non-optimal token has the same score: tokens are N(0, I) projected off v
  (|v| = 1), and the optimal token (a uniform position) gets + Y_i v. Then gamma_{i opt} = 1
  and gamma_it = 0 otherwise, so Y_i f_i = p_{i opt} (the softmax weight of the optimal token)
  and L = (1/n) sum_i l(p_{i opt}) with l' < 0. The softmax gives
  d p_opt = p_opt sum_{t != opt} p_t (ds_opt - ds_t), and along W_F = W_F(opt) the score gaps
  are (x_opt - x_t)^T W_F z >= 1, so <grad_W p_opt, W_F> >= p_opt (1 - p_opt) > 0 and
  <W', W_F> = -<grad L, W_F> > 0 everywhere: the W flow has no finite stationary point and
  ||W|| -> oo. This alone does not give the global direction, and the runs show it: from
  N(0, 0.25) starts a few percent of the W runs keep one input's attention on a non-optimal
  token, whose pull on W is proportional to the vanishing
  p_opt; they are counted as local (``p_global``), not hidden. Where the selection is the
  optimal one, the direction is W_F(opt) (the papers' global-convergence setting, equal
  non-optimal scores, as we read it).
- ``generic``: tokens N(0, I), scores all different. The flow may select a locally optimal
  alpha != opt; at the horizon each run's selection is read off its attention
  (alpha_i = argmax_t of the softmax) and its W is compared with W_F(alpha) of that selection.

Time. The direction converges only as ||W|| ~ log t (below), so t ~ 1e8 and far beyond is
needed, and plain log time u = log t cannot be used throughout: a flow that lingers near a
saddle and then turns (a change of selection, common on generic data) moves O(1) in a plain
time O(1), a u-interval e^{-u} that float64 cannot resolve at u ~ 40. The flow is run at the
speed

    dt/du = m(theta, c) = 1 / (e^{-c} + kappa (|grad L(theta)| + h(theta))),    kappa = 1,
    h = mean_i sigma(-Y_i f_i) (1 - max_t p_it),

with the clock c = log t carried in the state (dc/du = m e^{-c}, c(0) = 0: t counts from 1, the
flow being autonomous). Where the flow diverges, |grad L| ~ a / t and h ~ b / t, so
m ~ t / (1 + kappa (a + b)): log time, up to a constant rate; where it turns, |grad L| = O(1)
and m ~ 1 / kappa: plain time, and |d theta / du| = m |grad L| < 1 / kappa always; h caps m
where the flow would stall at a finite point with unsaturated attention. In
``dyn.gradient_flow`` this is the gradient flow of

    G(theta, c) = sg(m) L(theta) - c sg(m e^{-c})      (sg: jax.lax.stop_gradient),

whose flow is theta' = -m grad L, c' = m e^{-c}: the curve of the plain flow, at another speed.
The engine's time axis is u; ``log_t`` is the clock. The system is ``dyn.gradient_flow``'s; its
``loss`` output is replaced by the risk L itself. The gradient at large ||W|| is computed
stably: with k = argmax_t s_t of the scores s = X W z (held fixed under differentiation, a
piecewise-constant choice that does not change f), f = v^T x_k + sum_{t != k} p_t v^T (x_t - x_k)
with p_t = e^{s_t - s_k} / sum_r e^{s_r - s_k}: the small terms p_t and their derivatives are
formed without the cancellation 1 - p_k (float64 keeps the direction to about e^{-700}).

Norm growth. Near the limit, W = R W_F / ||W_F|| + O(1): the gaps are R / ||W_F|| on the
support constraints, L - L* ~ C e^{-R / ||W_F||}, and R' = -dL/dR ~ (C / ||W_F||) e^{-R / ||W_F||}
gives R ~ ||W_F|| log t: the slope of ||W||_F against log t is ||W_F(alpha)||_F
(``growth_slope`` per run, fitted against the clock over the last quarter of u, against
``growth_theory``). For (K, Q), balanced
factors give ||W||_* = (||K||^2 + ||Q||^2)/2 =: rho, L - L* ~ C e^{-rho / N} with
N = ||W_*||_*, and rho' = 2 (rho / N) C e^{-rho / N} gives rho ~ N (log t + log log t): the
slope of ||W||_* against log t tends to N, slowly. Joint (v, W): v grows like log t itself
(v / ||v|| tends to the max-margin classifier of the selected tokens Y_i x_{i alpha_i},
``corr_v``) and saturates the loss, so W's drive decays like e^{-margin ||v||} and ||W|| grows far
slower than log t: no growth law is claimed for it (``growth_theory`` NaN).

The (K, Q) flow. With balanced factors (K^T K - Q^T Q is conserved by the flow, so the O(1)
imbalance of the start fades against ||W|| ~ log t), W = K Q^T moves as W' = G (W^T W)^{1/2} +
(W W^T)^{1/2} G with G = -grad_W L, so each singular value of W = sum_k sigma_k u_k v_k^T obeys
sigma_k' = 2 sigma_k u_k^T G v_k: multiplicatively, not additively as in the W form. With
sigma_1 ~ N log t (N = ||W_*||_*),

    d log(sigma_k / sigma_1) / d log log t -> g_k / g_1 - 1,     g_k = u_k^T G v_k.

Near W_* (rank r) the drive G is, up to a scale, the dual certificate G_* = sum lambda A of the
nuclear SVM (:func:`~dyn.frontier.attention_svm_math.spurious_exponent`): U^T G_* V = I on W_*'s
singular spaces and sigma_{r+1}(G_*) <= 1 off them. So a singular value of W beyond rank r
decays against the top one only like (log t)^-(1 - sigma_{r+1}(G_*)) (``spurious_law``, against
the per-run fit ``spurious_slope`` over the last quarter of u), and 1 - corr like twice that
power.

Measured on known data, T = 3, d = 4, n = 2 (W_* of rank 1, N = 0.50553; the shipped solver's
certified gap below 1e-14 and an independent Nelder-Mead maximization of the dual sum lambda /
||G(lambda)||_op agree to 6 digits): sigma_2(G_*) = 0.950, so the exponent is 0.0495. From the
shipped start (init_scale 0.5) the 8 runs reach log t = 581 with W of rank 2 (sigma_2 / sigma_1
= 0.13 to 0.66), the direction's nuclear norm at margin 1 above N by 1.8% to 3.0%
(``nuclear_excess``), corr_svm 0.72 to 0.99 (median 0.89), and fitted slopes -0.011 to -0.072
(g_2 / g_1 - 1 at the horizon gives each run's slope to +-0.01: the drive has not reached G_*
from that far). Against log t in [100, 581], 1 - corr fits neither a / log t nor a / (log t)^2
(rms log error 0.3 to 0.6 and 1.2 to 1.6) but a (log t)^-p, p = 0.07 to 0.5, to 1e-3 to 2e-2 (a
plateau plus a / log t fits as well; the law and the smaller starts decide for the power). From
init_scale 0.05 the same point gives sigma_2 / sigma_1 = 0.007 to 0.125, slopes -0.049 to -0.054
(the law, -0.0495) and median corr_svm 0.998; from 0.005, corr_svm > 0.9999: the misalignment at
the horizon is the start's, shed at the certificate's rate.

Across the shipped known points sigma_{r+1}(G_*) = 0.97, 0.95, 0.89 and 0.37 (rank 1, n = 2) and
0.75, 0.32, 0.37, 0.63 (ranks 2 to 3, n = 4). The whole known sweep from init_scale 0.05
(horizon 600) has median corr_svm 0.995 and 67% of runs above 0.99, every selection global, but
the two points d = 4, n = 4 (W_* of rank 2 and 3) keep medians 0.979 and 0.981: at rank r >= 2
the top-r block converges slowly too (T = 5: sigma_2 / sigma_1 = 0.68 at log t 540 against W_*'s
0.53, its log moving at -0.08 per unit of log log t). Runs can also linger near a non-global KKT
point of the factored problem min (||K||^2 + ||Q||^2) / 2 s.t. the margins (G V_r = U_r, G^T U_r
= V_r but ||G||_op > 1, a saddle of the factored problem): one such run (T = 3, d = 6, n = 2)
has g_2 / g_1 = 1.16 and sigma_2 / sigma_1 growing like (log t)^0.15 at corr_svm 0.55, leaving
it at the same slow pace.

In short: every measured rate points to W_* as the limit (no proof is known for the plain flow),
but 1 - corr < 0.01 at the horizon holds only where the start is small against the certificate's
gap 1 - sigma_{r+1}(G_*); from init_scale 0.5 it is out of reach (the median run of the point
above would need log t ~ 1e13), and float64 caps the clock (below).

Float64 limits of the clock: from log t ~ 350 on, |grad L|^2 in :func:`speed` underflows, so
m = e^c = t exactly there (plain log time; the flow itself is unchanged, only its speed), and
e^c overflows at c ~ 709: horizon 720 reaches log t = 701, horizon 800 fails every run.

Regularization path (``path_corr``, form W, data known): W_R = argmin_{||W||_F <= R} L(W) by
SLSQP, R = (0.5, 1, 2, ..., 32) times ||W_F||, started along -grad L(0) and warm started
along R; the objective is log(L - L*), in which the flat tail of L is well scaled. The claim: W_R / R -> W_F / ||W_F||
as R grows (the correlation, against R).
"""

from __future__ import annotations

import numpy as np

import dyn

from .attention_svm_math import (
    constraints,
    correlation,
    frobenius_svm,
    max_margin_classifier,
    nuclear_excess,
    nuclear_svm,
    spurious_exponent,
    svm_rank,
)

FORMS = ("W", "KQ", "vW")
DATA = ("known", "generic")
PATH_RADII = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)  # R / ||W_F||
DATA_SALT = 5601


# --- the model ------------------------------------------------------------------------------
def head_and_key_query(theta, head):
    """(v, W) of the flat parameter `theta` by its shape: (d, d) the form W (v = head),
    (2, d, d) the factors K, Q (W = K Q^T), (d + 1, d) the joint form (row 0 is v)."""
    if theta.ndim == 3:
        return head, theta[0] @ theta[1].T
    if theta.shape[0] == theta.shape[1] + 1:
        return theta[0], theta[1:]
    return head, theta


def output_of(x, z, v, w):
    """(f, 1 - max_t p_t) of one input: f = v^T X^T softmax(X W z) in the stable form of the
    module doc, and the attention left off the top token, formed without cancellation (JAX)."""
    import jax
    import jax.numpy as jnp

    s = x @ (w @ z)
    g = x @ v
    k = jax.lax.stop_gradient(jnp.argmax(s))
    e = jnp.exp(s - s[k])
    total = jnp.sum(e)
    return g[k] + jnp.sum(e * (g - g[k])) / total, (total - 1.0) / total


def risk(v, w, data):
    """The logistic risk L = mean_i log(1 + e^{-Y_i f(X_i)}) (JAX)."""
    import jax
    import jax.numpy as jnp

    f, _ = jax.vmap(output_of, (0, 0, None, None))(data["x"], data["z"], v, w)
    return jnp.mean(jax.nn.softplus(-data["y"] * f))


def speed(theta, clock, data, kappa=1.0):
    """m = dt/du = 1 / (e^{-c} + kappa (|grad L| + h)), h = mean_i sigma(-Y_i f_i) (1 - max_t p_it)
    (module doc: log time where the flow diverges, plain time where it turns or stalls)."""
    import jax
    import jax.numpy as jnp

    def loss_of(th):
        return risk(*head_and_key_query(th, data["v"]), data)

    grad = jax.grad(loss_of)(theta)
    v, w = head_and_key_query(theta, data["v"])
    f, rest = jax.vmap(output_of, (0, 0, None, None))(data["x"], data["z"], v, w)
    h = jnp.mean(jax.nn.sigmoid(-data["y"] * f) * rest)
    return 1.0 / (jnp.exp(-clock) + kappa * (jnp.sqrt(jnp.sum(grad**2)) + h))


def clocked_loss(theta, data):
    """G = sg(m) L - c sg(m e^{-c}): its gradient flow is the flow of L at speed m = dt/du, with
    the clock c = log t (module doc)."""
    import jax
    import jax.numpy as jnp

    th, c = theta["theta"], theta["clock"][0]
    m = jax.lax.stop_gradient(speed(th, c, data))
    v, w = head_and_key_query(th, data["v"])
    return m * risk(v, w, data) - c * m * jax.lax.stop_gradient(jnp.exp(-c))


def shape_of(spec):
    d = int(spec["d"])
    return {"W": (d, d), "KQ": (2, d, d), "vW": (d + 1, d)}[spec["form"]]


def dataset(n: int, tokens: int, d: int, kind: str, rng) -> dict:
    """tokens x (n, T, d), queries z (n, d), labels y (n,), head v (d,) (module doc)."""
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    y = rng.choice([-1.0, 1.0], n)
    x = rng.standard_normal((n, tokens, d))
    z = rng.standard_normal((n, d))
    if kind == "known":
        x -= (x @ v)[..., None] * v
        x[np.arange(n), rng.integers(0, tokens, n)] += y[:, None] * v
    return {"x": x, "z": z, "y": y, "v": v}


def data_of(spec, rng):
    """The point's dataset, from a stream shared by every form (common random data)."""
    key = (DATA_SALT, int(spec["n"]), int(spec["T"]), int(spec["d"]), DATA.index(spec["data"]), int(spec["replica"]))
    return dataset(int(spec["n"]), int(spec["T"]), int(spec["d"]), spec["data"], spec.setup.common_rng(*key))


def start(spec, runs):
    """init_scale x N(0, 1) entries for W (or K, Q); v at the data's head; the clock at 0."""
    shape = shape_of(spec)
    theta = float(spec["init_scale"]) * spec.rng.standard_normal((runs,) + shape)
    if spec["form"] == "vW":
        theta[:, 0] = data_of(spec, None)["v"]
    return {"theta": theta, "clock": np.zeros((runs, 1))}


PARAMS = {
    "form": dyn.Field(
        "str", "W", "trained parameters: W, the factors KQ (W = K Q^T), or vW (head and W jointly)", choices=FORMS
    ),
    "data": dyn.Field(
        "str",
        "known",
        "dataset: known (equal non-optimal scores: the global "
        "direction is known) or generic (locally optimal directions exist)",
        choices=DATA,
    ),
    "n": dyn.Field("int", 4, "inputs in the dataset", lo=1, hi=64),
    "T": dyn.Field("int", 3, "tokens per input", lo=2, hi=32),
    "d": dyn.Field("int", 4, "token dimension", lo=2, hi=16),
    "replica": dyn.Field("int", 0, "which dataset draw (its own common stream)", lo=0, hi=10**6),
    # the start's scale, bounded: scores x^T W z of a start far past this overflow the softmax's
    # gradient in float64 before the flow moves
    "init_scale": dyn.Field("float", 1.0, "scale of the standard normal start of W (or K, Q)", lo=0.0, hi=100.0),
}

_Flow = dyn.gradient_flow(
    clocked_loss,
    name="attention_svm_flow",
    weights={"theta": shape_of, "clock": (1,)},
    data=data_of,
    params=PARAMS,
    init=start,
    description="gradient flow of one softmax attention layer, in log time",
)


class AttentionSVM(_Flow):
    """The flow of the module doc, with the SVM directions and the norm laws as outputs."""

    name = "attention_svm"
    description = "gradient flow of softmax attention in log time against the Frobenius and nuclear-norm attention SVMs"
    default_plot = "misalignment_final"

    # --- the SVMs of a point's data, solved once per dataset and form ----------------------
    def svms(self, spec) -> dict:
        key = (
            "attention_svm",
            spec["data"],
            int(spec["n"]),
            int(spec["T"]),
            int(spec["d"]),
            int(spec["replica"]),
            spec.setup.seed,
        )
        return spec.setup.shared(key, lambda: self._svms(spec))

    def reached_svm(self, spec, selection) -> np.ndarray | None:
        """The form's SVM (KQ: nuclear, else Frobenius) of a selection, once per selection."""
        nuclear = spec["form"] == "KQ"
        key = (
            "attention_svm_reached",
            spec["data"],
            int(spec["n"]),
            int(spec["T"]),
            int(spec["d"]),
            int(spec["replica"]),
            spec.setup.seed,
            nuclear,
            tuple(int(a) for a in selection),
        )

        def solve():
            data = data_of(spec, None)
            a = constraints(data["x"], data["z"], selection)
            return nuclear_svm(a, starts=3)[0] if nuclear else frobenius_svm(a)[0]

        return spec.setup.shared(key, solve)

    def _svms(self, spec) -> dict:
        data = data_of(spec, None)
        scores = data["y"][:, None] * (data["x"] @ data["v"])
        opt = scores.argmax(axis=1)
        a = constraints(data["x"], data["z"], opt)
        wf, kkt = frobenius_svm(a)
        wn, gap = nuclear_svm(a, starts=3) if wf is not None else (None, np.inf)
        exponent = spurious_exponent(a, wn) if wn is not None else np.nan
        return {
            "data": data,
            "opt": opt,
            "constraints": a,
            "frobenius": wf,
            "kkt": kkt,
            "nuclear": wn,
            "gap": gap,
            "exponent": exponent,
        }

    # --- outputs --------------------------------------------------------------------------
    def outputs(self, setup):
        time = ("time",)
        outs = []
        outs += [
            dyn.Output("loss", "risk L(W): the logistic loss", dims=time, reduce="mean_se"),
            dyn.Output("log_t", "the clock: log t of the plain flow", dims=time, reduce="mean_se"),
            dyn.Output("norm_W", "||W||_F", dims=time, reduce="mean_se"),
            dyn.Output("nuclear_W", "||W||_* (nuclear norm)", dims=time, reduce="mean_se"),
            dyn.Output(
                "corr_frobenius",
                "<W, W_F(opt)> / (||W|| ||W_F||): the Frobenius SVM of the optimal tokens",
                dims=time,
                reduce="mean_se",
            ),
            dyn.Output(
                "corr_nuclear",
                "<W, W_*(opt)> / (||W|| ||W_*||): the nuclear-norm SVM of the optimal tokens",
                dims=time,
                reduce="mean_se",
            ),
            dyn.Output(
                "corr_svm",
                "correlation with the form's SVM of the optimal tokens (W, vW: Frobenius; KQ: nuclear)",
                dims=time,
                reduce="mean_se",
            ),
            dyn.Output(
                "misalignment",
                "1 - corr_svm: distance of W / ||W|| from the form's SVM direction (log scale)",
                dims=time,
                reduce="mean_se",
            ),
            dyn.Output("misalignment_final", "1 - corr_svm at the horizon (mean over runs)", reduce="mean_se"),
            dyn.Output("mass_opt", "attention on the optimal tokens (mean over inputs)", dims=time, reduce="mean_se"),
            dyn.Output(
                "corr_final",
                "per run: correlation with the form's SVM of the optimal tokens at the horizon",
                reduce="per_run",
            ),
            dyn.Output(
                "corr_reached",
                "per run: correlation with the form's SVM of the selection reached at the horizon",
                reduce="per_run",
                nan_means="the reached selection's SVM is empty",
            ),
            dyn.Output("p_global", "runs whose selection at the horizon is the optimal tokens", reduce="proportion"),
            dyn.Output(
                "mass_reached",
                "attention on the selection reached, at the horizon (smallest over inputs, mean over runs)",
                reduce="mean_se",
            ),
            dyn.Output(
                "growth_slope", "d||W|| / d log t over the last quarter of u (Frobenius; KQ: nuclear)", reduce="mean_se"
            ),
            dyn.Output(
                "growth_theory",
                "its law: ||W_F(alpha)||_F (W), ||W_*(opt)||_* (KQ)",
                reduce="point",
                nan_means="no law (vW)",
            ),
            dyn.Output(
                "corr_v",
                "per run, vW: correlation of v with the max-margin classifier of the selected tokens",
                reduce="per_run",
                nan_means="not the joint form",
            ),
            dyn.Output(
                "nuclear_excess",
                "per run, KQ: ||W||_* / min gap / ||W_*||_* - 1 at the horizon (W rescaled to the margin)",
                reduce="per_run",
                nan_means="not the KQ form, or W does not separate the optimal tokens",
            ),
            dyn.Output(
                "spurious_ratio",
                "per run, KQ: sigma_{r+1}(W) / sigma_1(W) at the horizon, r = rank W_*(opt)",
                reduce="per_run",
                nan_means="not the KQ form, or W_* has full rank",
            ),
            dyn.Output(
                "spurious_slope",
                "per run, KQ: d log(sigma_{r+1} / sigma_1) / d log log t over the last quarter of u",
                reduce="per_run",
                nan_means="not the KQ form, or W_* has full rank",
            ),
            dyn.Output(
                "spurious_law",
                "its law: sigma_{r+1}(G) - 1, G the dual certificate of W_*(opt)",
                reduce="point",
                nan_means="not the KQ form, or W_* has full rank",
            ),
            dyn.Output("svm_kkt", "KKT residual of the Frobenius SVM (SLSQP)", reduce="point"),
            dyn.Output("svm_gap", "certified relative duality gap of the nuclear-norm SVM", reduce="point"),
            dyn.Output(
                "path_corr",
                "regularization path: corr(W_R, W_F), R = radius ||W_F||",
                dims=("radius",),
                reduce="point",
                nan_means="computed for form W on known data only",
            ),
        ]
        return outs

    def coords(self, setup):
        return {"radius": dyn.Coord(np.array(PATH_RADII), "R / ||W_F||")}

    def point_values(self, spec) -> dict:
        svm = self.svms(spec)
        theory = np.nan
        if spec["form"] == "W" and svm["frobenius"] is not None:
            theory = float(np.linalg.norm(svm["frobenius"]))
        elif spec["form"] == "KQ" and svm["nuclear"] is not None:
            theory = float(np.linalg.svd(svm["nuclear"], compute_uv=False).sum())
        path = np.full(len(PATH_RADII), np.nan)
        if spec["form"] == "W" and spec["data"] == "known" and svm["frobenius"] is not None:
            path = regularization_path(svm["data"], svm["opt"], svm["frobenius"])
        law = -svm["exponent"] if spec["form"] == "KQ" else np.nan
        return {
            "growth_theory": theory,
            "spurious_law": law,
            "svm_kkt": svm["kkt"],
            "svm_gap": svm["gap"],
            "path_corr": path,
        }

    def observe(self, spec, states):
        states = np.asarray(states)
        runs, times = states.shape[:2]
        finite = np.isfinite(states).all(axis=(1, 2, 3))
        states = np.where(finite[:, None, None, None], states, 0.0)  # a failed run: marked below
        svm = self.svms(spec)
        data, opt = svm["data"], svm["opt"]
        shape = shape_of(spec)
        flat = states[:, :, 0, :-1].reshape(runs, times, *shape)
        form = spec["form"]
        v = np.broadcast_to(data["v"], (runs, times, len(data["v"])))
        if form == "KQ":
            w = flat[:, :, 0] @ np.swapaxes(flat[:, :, 1], -1, -2)
        elif form == "vW":
            v, w = flat[:, :, 0], flat[:, :, 1:]
        else:
            w = flat
        scores = np.einsum("itd,rsde,ie->rsit", data["x"], w, data["z"])
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        inputs = np.arange(len(opt))
        target = svm["nuclear"] if form == "KQ" else svm["frobenius"]
        values = {}
        values["loss"] = np.array([[_risk_np(v[r, s], w[r, s], data) for s in range(times)] for r in range(runs)])
        values["norm_W"] = np.linalg.norm(w, axis=(-2, -1))
        values["nuclear_W"] = np.linalg.svd(w, compute_uv=False).sum(axis=-1)
        values["corr_frobenius"] = _corr(w, svm["frobenius"])
        values["corr_nuclear"] = _corr(w, svm["nuclear"])
        values["corr_svm"] = _corr(w, target)
        values["misalignment"] = 1.0 - values["corr_svm"]
        values["mass_opt"] = p[:, :, inputs, opt].mean(axis=-1)
        values["corr_final"] = values["corr_svm"][:, -1]
        values["misalignment_final"] = 1.0 - values["corr_final"]
        reached = scores[:, -1].argmax(axis=-1)  # (runs, n)
        values["p_global"] = (reached == opt).all(axis=-1)
        values["mass_reached"] = p[:, -1].max(axis=-1).min(axis=-1)
        corr_reached = np.full(runs, np.nan)
        corr_v = np.full(runs, np.nan)
        for r in range(runs):
            own = self.reached_svm(spec, reached[r])
            if own is not None:
                corr_reached[r] = correlation(w[r, -1], own)
            if form == "vW":
                sel = data["x"][inputs, reached[r]]
                vm = max_margin_classifier(sel, data["y"])
                if vm is not None:
                    corr_v[r] = correlation(v[r, -1], vm)
        values["corr_reached"], values["corr_v"] = corr_reached, corr_v
        norms = values["nuclear_W"] if form == "KQ" else values["norm_W"]
        u = np.asarray(spec.times)
        late = u >= u[-1] - (u[-1] - u[0]) / 4
        clock = states[:, :, 0, -1]
        values["log_t"] = clock
        values["growth_slope"] = np.array([np.polyfit(clock[r, late], norms[r, late], 1)[0] for r in range(runs)])
        values.update(_nuclear_law(form, svm, w, clock, late))
        for value in values.values():
            if np.issubdtype(value.dtype, np.floating):
                value[~finite] = np.nan
        return dyn.Chunk(values, finite=finite)


def _nuclear_law(form, svm, w, clock, late) -> dict:
    """KQ: per run, the direction's excess nuclear norm at the horizon and the spurious singular
    value sigma_{r+1} / sigma_1 (r = rank W_*) with its slope against log log t (module doc)."""
    runs = w.shape[0]
    out = {k: np.full(runs, np.nan) for k in ("nuclear_excess", "spurious_ratio", "spurious_slope")}
    if form != "KQ" or svm["nuclear"] is None:
        return out
    a, wn = svm["constraints"], svm["nuclear"]
    sv_star = np.linalg.svd(wn, compute_uv=False)
    optimum, r = sv_star.sum(), svm_rank(sv_star)
    for k in range(runs):
        out["nuclear_excess"][k] = nuclear_excess(a, w[k, -1], optimum)
    if r < len(sv_star):
        sv = np.linalg.svd(w, compute_uv=False)  # (runs, times, d)
        with np.errstate(invalid="ignore"):  # a failed run's W is 0 (marked NaN by the caller)
            ratio = sv[..., r] / sv[..., 0]
        out["spurious_ratio"] = ratio[:, -1].copy()
        for k in range(runs):
            if (ratio[k, late] > 0).all() and (clock[k, late] > 0).all():
                out["spurious_slope"][k] = np.polyfit(np.log(clock[k, late]), np.log(ratio[k, late]), 1)[0]
    return out


def _corr(w, target):
    if target is None:
        return np.full(w.shape[:2], np.nan)
    return np.einsum("rsde,de->rs", w, target) / (np.linalg.norm(w, axis=(-2, -1)) * np.linalg.norm(target))


def _risk_np(v, w, data):
    s = np.einsum("itd,de,ie->it", data["x"], w, data["z"])
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    f = np.einsum("it,it->i", p, data["x"] @ v)
    return float(np.mean(np.logaddexp(0.0, -data["y"] * f)))


def regularization_path(data, opt, wf, radii=PATH_RADII) -> np.ndarray:
    """corr(W_R, W_F) for W_R = argmin_{||W||_F <= R} L(W), R = radii x ||W_F|| (module doc):
    SLSQP on log(L - L*), started at the first radius along -grad L(0) (not from W_F) and warm
    started from the previous radius's minimizer, scaled."""
    import jax
    import jax.numpy as jnp
    from scipy.optimize import minimize

    import integrators

    integrators.configure_jax()
    d = wf.shape[0]
    x, z, y, v = (jnp.asarray(data[k]) for k in ("x", "z", "y", "v"))
    n = len(opt)
    best = jnp.asarray(data["x"][np.arange(n), opt])  # (n, d)
    g_opt = y * (best @ v)  # the optimal scores gamma_opt

    def excess(wflat):
        w = wflat.reshape(d, d)
        s = jnp.einsum("itd,de,ie->it", x, w, z)
        s = s - s[jnp.arange(n), opt][:, None]
        e = jnp.exp(s)
        gap = y * (jnp.einsum("it,it->i", e, x @ v) / e.sum(axis=1)) - g_opt  # Y f - gamma_opt
        # l(Y f) - l(gamma_opt) = log1p(e^{-gamma_opt} expm1(-gap) / (1 + e^{-gamma_opt}))
        ratio = jnp.exp(-g_opt) / (1.0 + jnp.exp(-g_opt))
        return jnp.log(jnp.mean(jnp.log1p(ratio * jnp.expm1(-gap))))

    fun = jax.jit(jax.value_and_grad(excess))
    scale = float(np.linalg.norm(wf))
    guess = -np.asarray(jax.grad(lambda w: risk(v, w.reshape(d, d), data))(jnp.zeros(d * d)))
    out = []
    for r in radii:
        radius = r * scale
        guess = guess / np.linalg.norm(guess) * radius * 0.99  # inside the ball, on the path
        res = minimize(
            lambda w: tuple(np.asarray(a, dtype=float) for a in fun(jnp.asarray(w))),
            guess,
            jac=True,
            method="SLSQP",
            constraints=[{"type": "ineq", "fun": lambda w, R=radius: R * R - w @ w, "jac": lambda w: -2.0 * w}],
            options={"ftol": 1e-12, "maxiter": 500},
        )
        guess = res.x
        out.append(correlation(res.x, wf))
    return np.array(out)
