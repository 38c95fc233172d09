r"""Next-token mechanics of one self-attention layer: hard retrieval of the highest-priority
strongly connected component (SCC) of a token graph, soft composition inside it (Li, Huang,
Ildiz, Rawat & Oymak, "Mechanics of Next Token Prediction with Self-Attention", arXiv
2403.08081). The paper's body could not be read here: its abstract, and the authors' public code
(github.com/yixiao-huang/next-token-prediction: the log-loss on the attention mass of the label,
the graph edges y -> x_t per last token, the SVM constraints "equal inside an SCC, >= 1 across",
a finite part trained on the contexts reduced to the label's SCC). The laws below, their
constants and the rates are our derivation, checked by the numbers.

The model. Tokens are one-hot over [K]; context i is x_i1 .. x_iT with last token k_i = x_iT and
label y_i, a token of the context. One attention layer with key-query matrix W (K x K) and the
identity as values gives position t the score W[x_it, k_i] and predicts token j with the mass
p_i(j) = sum_{t: x_it = j} s_it, s_i = softmax_t(W[x_it, k_i]). Gradient flow on

    L(W) = -(1/n) sum_i log p_i(y_i),       W' = -grad L = (1/n) sum_i (e_{y_i} - p_i) e_{k_i}^T

(the last form: d(-log p_i(y))/dW[j, k_i] = p_i(j) - 1{j = y_i}).

Data (``dyn.frontier.next_token_scc_math.dataset``): for each of ``queries`` last tokens k the
vocabulary is split at random into ``levels`` priority blocks (k in the lowest); a context picks
its top block b uniformly, holds two tokens of b, T - 3 tokens of b and the blocks below, and k;
its label is a token of block b present, drawn with probability proportional to
m_i(j) e^{theta[j, k]} (m_i(j) the positions holding j, theta = logit_scale N(0, 1)): the model's
own composition at W = theta. The laws read only the data's graphs, not the design: G_k has an
edge y_i -> j for every sample ending in k and every other token j of its context; its SCCs
(scipy) may be finer than the designed blocks at small n (``sccs_agree``). Since y_i -> j for
every token j of X_i, no token of X_i lies in an SCC above C_i := SCC_{k_i}(y_i): C_i is the
highest-priority SCC present in context i.

The decomposition. Only the entries W[j, k] with j in a context ending in k are read (the span
D; the rest never moves). Inside D, S_fin is spanned by (e_a - e_b) e_k^T with a, b in one SCC of
G_k, and Pi_dir = Pi_D - Pi_fin keeps the part of each column constant on each SCC. Then
e_y - p_i = sum_j p_i(j) (e_y - e_j) and Pi_dir (e_y - e_j) e_k^T = 0 for j in C_i, so

    Pi_dir W' = (1/n) sum_i sum_{j in X_i, j not in C_i} p_i(j) z_ij,   z_ij = Pi_dir (e_{y_i} - e_j) e_{k_i}^T,

a weighted sum of the graph-SVM constraint vectors: W_svm = argmin ||W||_F s.t.
<(e_y - e_j) e_k^T, W> = 0 inside an SCC and >= 1 across, for every edge y -> j of G_k (solved
by SLSQP, ``next_token_scc_math.graph_svm``; W_svm is constant on SCCs, so W_svm = Pi_dir W_svm).

Laws, as t -> oo (each an output, with its error):

1. Directional part. As for the logistic loss on separable data, the exponential tails
   p_i(j) ~ e^{-<W, z_ij>} make Pi_dir W(t) = W_svm log t + rho(t), rho bounded (the support
   constraints' weights balance the KKT multipliers of W_svm: (1/n) sum_{ij on z} p_i(j) t ->
   lambda_z). Outputs: ``corr_svm`` = corr(Pi_dir W, W_svm) -> 1 (slowly: 1 - corr ~ |rho|^2 /
   (2 |W_svm|^2 log^2 t)); sharper, the increment law: the least-squares slope B of
   Pi_dir W(t) against log t over t in [t_end / 100, t_end] equals W_svm, ``slope_error`` =
   |B - W_svm| / |W_svm| -> 0 (as rho(t) settles).
2. Hard retrieval. The mass off C_i vanishes like 1/t, with a derived constant: <W_svm, Pi_dir W'>
   = (1/n) sum p_i(j) <W_svm, z_ij> and <W_svm, z> = 1 on the support constraints (> 1 off them,
   whose weights decay faster), while <W_svm, W(t)> = |W_svm|^2 log t + O(1) gives
   d/dt <W_svm, W> ~ |W_svm|^2 / t. Hence

       t mean_i (1 - sum_{t: x_it in C_i} s_it) -> |W_svm|_F^2,          ``mass_law`` -> 1,

   the non-support pairs adding a relative t^{-(g - 1)} (g > 1 their margin). ``retrieved``: the
   share of contexts whose retrieved set {j in X_i: p_i(j) >= 1e-3} is X_i with C_i's tokens only.
3. Finite part. On C_i the weights are the softmax of Pi_fin W restricted to C_i (the SCC's
   constant cancels), and Pi_fin W' = -grad L_fin(Pi_fin W) + O(1/t) (the off-SCC weights), with
   L_fin the loss of the contexts reduced to C_i (``next_token_scc_math.finite_part``): strictly
   convex on S_fin, so Pi_fin W(t) -> W_fin = argmin_{S_fin} L_fin, the error O(1/t).
   ``fin_error`` = |Pi_fin W - W_fin| / |W_fin| (absolute when W_fin = 0: no cyclic SCC).
4. Soft composition. grad L_fin = 0 on S_fin reads, for each last token k and SCC C of G_k and
   each j in C, with g = {i: k_i = k, C_i = C},

       (1/|g|) sum_{i in g} p~_i(j) = #{i in g: y_i = j} / |g|,

   p~ the in-SCC weights at W_fin: the composition matches the conditional frequencies of the
   labels in the data, on average over the contexts of g (exactly per context when they hold the
   same tokens of C). ``composition_error`` = max_{g, j} of the difference (the flow's weights);
   ``composition_fin`` the same at W_fin itself (the derivation's check, ~1e-12);
   ``in_scc_error`` = max_i max_{t: x_it in C_i} |s_it - s~_it(W_fin)|.

The flow is plain gradient flow in plain time. The finite part relaxes at O(1) rates while the
directional part needs log t to grow: in log time the finite part's modes are stiff (rate ~ t),
and the engine's solvers are explicit (diffrax Tsit5/Dopri5, no implicit method), so the
horizon is t = 1e6 (log t = 13.8; at t = 1e7 the runs reach the solver's step cap and are marked
diverged) and the laws are checked in their finite-t forms above (slope, mass constant), which
converge as powers of t rather than as 1 / log t.

Measured against the derivation (the shipped sweep: K = 8, two last tokens, T = 5, n = 120,
levels 2 and 3, logit_scale 0.5 and 1, three datasets each, 4 runs per point from 0.1 N(0, 1)
starts, Tsit5 at rtol 1e-8, t = 1e6; ranges over the 12 points, standard errors over runs below
2e-5 on slope_error):

- the references: graph-SVM KKT residual <= 6e-15, |grad L_fin| at W_fin <= 2e-16, the
  composition law at W_fin <= 3.3e-16 (``composition_fin``); the data's SCCs are the designed
  blocks at 8 of 12 points (elsewhere a block splits: the laws use the data's SCCs);
- hard retrieval: ``retrieved`` = 1 at every point (every context retrieves exactly its label's
  SCC); ``mass_law`` 0.9984 .. 1.0004 (the derived constant |W_svm|^2; 0.996 .. 1.003 at 1e5);
- soft composition: ``composition_error`` 5.6e-6 .. 2.5e-4, ``in_scc_error`` 1.3e-5 .. 2.7e-4;
- finite part: ``fin_error`` 1.7e-5 .. 5.9e-5, ten times its value at t = 1e5 (the 1/t rate);
- directional part: ``slope_error`` 0.13% .. 1.9% (median 0.3%), ``growth_ratio`` 0.976 ..
  1.004, ``corr_svm`` 0.9951 .. 0.9999 (1 - corr ~ 1 / log^2 t: the slow form of the same law).
  The two largest slope errors (1.2%, 1.9%) are at points whose SCCs are finer than the design,
  where rho(t) settles slowest.

Not covered: the factorized W = K Q^T, non-orthogonal embeddings, contexts outside the training
set (whose top SCC need not be unique), and the paper's conditions for global convergence, which
could not be read: here every run of every point reaches the predicted SCCs and W_svm.
"""

from __future__ import annotations

import numpy as np

import dyn

from . import next_token_scc_math as nm

RETRIEVED = 1e-3  # a token is retrieved when its attention mass p_i(j) is at least this
SLOPE_WINDOW = 100.0  # the increment law is fitted over t in [t_end / SLOPE_WINDOW, t_end]
DATA_SALT = 5602
FLAT = "no priority between SCCs in the data (W_svm = 0): no directional law"

PARAMS = {
    "K": dyn.Field("int", 8, "vocabulary size (one-hot tokens; W is K x K)", lo=3, hi=24),
    "queries": dyn.Field("int", 2, "distinct last tokens (one token graph each; at most K)", lo=1, hi=24),
    "T": dyn.Field("int", 5, "context length (the last token included)", lo=2, hi=16),
    "n": dyn.Field("int", 60, "training contexts", lo=2, hi=400),
    "levels": dyn.Field("int", 3, "designed priority blocks per last token (at most K)", lo=1, hi=24),
    "logit_scale": dyn.Field("float", 1.0, "scale of the label law's in-block logits theta", lo=0.0, hi=5.0),
    "replica": dyn.Field("int", 0, "which dataset draw (its own common stream)", lo=0, hi=10**6),
    # scores beyond this overflow nothing, but a start far from 0 hides the law for long
    "init_scale": dyn.Field("float", 0.1, "scale of the standard normal start of W", lo=0.0, hi=10.0),
}


def raw_data(spec) -> dict:
    """The point's training set (tokens, last, label, level, theta), from a stream shared by
    every point with the same sizes and replica (common random data)."""
    key = (
        DATA_SALT,
        int(spec["K"]),
        int(spec["queries"]),
        int(spec["T"]),
        int(spec["n"]),
        int(spec["levels"]),
        int(spec["replica"]),
    )
    return nm.dataset(
        int(spec["n"]),
        int(spec["T"]),
        int(spec["K"]),
        int(spec["queries"]),
        int(spec["levels"]),
        float(spec["logit_scale"]),
        spec.setup.common_rng(*key),
    )


def data_of(spec, rng):
    """The arrays the loss reads (one-hot tokens, last tokens, label positions)."""
    return nm.one_hot(raw_data(spec), int(spec["K"]))


def next_token_loss(theta, data):
    """L(W) = mean_i [logsumexp_t a_it - logsumexp_{t: x_it = y_i} a_it], a_it = W[x_it, k_i]
    (JAX)."""
    import jax
    import jax.numpy as jnp

    a = jnp.einsum("itj,jk,ik->it", data["x"], theta["W"], data["q"])
    return jnp.mean(jax.nn.logsumexp(a, axis=1) - jax.nn.logsumexp(a, axis=1, b=data["m"]))


_Flow = dyn.gradient_flow(
    next_token_loss,
    name="next_token_flow",
    weights={"W": lambda s: (int(s["K"]), int(s["K"]))},
    data=data_of,
    params=PARAMS,
    description="gradient flow of one attention layer on next-token prediction",
)


class NextTokenSCC(_Flow):
    """The flow of the module doc with its four laws as outputs."""

    name = "next_token_scc"
    description = (
        "next-token prediction by one attention layer: retrieval of the top SCC, "
        "soft composition, graph SVM and finite part"
    )
    default_plot = "slope_error"

    def validate(self, spec) -> None:
        for key in ("queries", "levels"):
            if int(spec[key]) > int(spec["K"]):
                raise dyn.ScenarioError(f"params.{key}", f"{key} = {spec[key]} exceeds the vocabulary K = {spec['K']}")
        super().validate(spec)

    # --- the laws' references, once per dataset --------------------------------------------
    def law(self, spec) -> dict:
        key = (
            "next_token_scc",
            int(spec["K"]),
            int(spec["queries"]),
            int(spec["T"]),
            int(spec["n"]),
            int(spec["levels"]),
            float(spec["logit_scale"]),
            int(spec["replica"]),
            spec.setup.seed,
        )
        return spec.setup.shared(key, lambda: self._law(spec))

    def _law(self, spec) -> dict:
        data = raw_data(spec)
        k_size = int(spec["K"])
        tokens, last, label = data["tokens"], data["last"], data["label"]
        found = nm.structure(tokens, last, label, k_size)
        w_svm, kkt = nm.graph_svm(tokens, last, label, found, k_size)
        w_fin, grad = nm.finite_part(tokens, last, label, found, k_size)
        s_fin = nm.attention(w_fin, tokens, last) * found["top"]
        s_fin /= s_fin.sum(axis=1, keepdims=True)  # the in-SCC weights at W_fin
        groups = list(found["groups"].values())
        onehot = np.eye(k_size)
        freq = np.array([onehot[label[g]].mean(axis=0) for g in groups])  # (groups, K)
        cyclic = sum(int((np.bincount(lab[found["nodes"][k]]) > 1).sum()) for k, lab in found["scc"].items())
        out = {
            "data": data,
            "found": found,
            "w_svm": w_svm,
            "w_fin": w_fin,
            "kkt": kkt,
            "fin_gradient": grad,
            "s_fin": s_fin,
            "groups": groups,
            "freq": freq,
            "cyclic": cyclic,
            "agree": nm.designed_agree(data["level"], found),
        }
        out["composition_fin"] = self._composition(nm.token_weights(s_fin, tokens, k_size), out)
        return out

    @staticmethod
    def _composition(p, law) -> np.ndarray:
        """max over groups g and tokens j of |mean_{i in g} p_i(j) - freq_g(j)|; p (..., n, K)."""
        errs = [
            np.abs(p[..., g, :].mean(axis=-2) - f).max(axis=-1) for g, f in zip(law["groups"], law["freq"], strict=True)
        ]
        return np.max(np.stack(errs, axis=-1), axis=-1)

    # --- outputs ---------------------------------------------------------------------------
    def outputs(self, setup):
        time = ("time",)

        def series(name, text, nan=""):
            return dyn.Output(name, text, dims=time, reduce="mean_se", nan_means=nan)

        def final(name, text, nan=""):
            return dyn.Output(name, text, reduce="mean_se", nan_means=nan)

        def point(name, text):
            return dyn.Output(name, text, reduce="point")

        return [
            series("loss", "next-token loss L(W)"),
            series("norm_W", "||Pi_D W||_F: the entries the data read"),
            series("corr_svm", "corr(Pi_dir W, W_svm): directional part against the graph SVM", FLAT),
            series("misalignment", "1 - corr_svm", FLAT),
            series(
                "fin_error",
                "|Pi_fin W - W_fin| / |W_fin|: finite part against its derived value (absolute when W_fin = 0)",
            ),
            series("mass_off", "mean over contexts of the attention mass off the top SCC C_i"),
            series("mass_law", "t mass_off / |W_svm|^2: the derived constant is 1", FLAT),
            series("retrieved", "share of contexts whose retrieved set (p >= 1e-3) is the top SCC's tokens present"),
            series("in_scc_error", "max over contexts of |s - s(W_fin)| on the top SCC"),
            series(
                "composition_error",
                "max over (last token, SCC) groups of |mean predicted in-SCC weight - label frequency|",
            ),
            final(
                "slope_error",
                "|B - W_svm| / |W_svm|, B the slope of Pi_dir W against log t over the last two decades of t",
                FLAT,
            ),
            final(
                "growth_ratio",
                "slope of |Pi_dir W| against log t (last two decades) over |W_svm|: 1 in the limit",
                FLAT,
            ),
            point("svm_norm", "|W_svm|_F of the graph SVM (scipy SLSQP)"),
            point("svm_kkt", "largest KKT residual of the graph SVM"),
            point("fin_norm", "|W_fin|_F of the finite part (scipy trust-exact)"),
            point("fin_gradient", "|grad L_fin| at the computed W_fin"),
            point("composition_fin", "the composition law at W_fin itself (derivation check)"),
            point("cyclic_sccs", "SCCs with two or more tokens, over all token graphs"),
            point("sccs_agree", "1 if the data's SCCs are the designed priority blocks"),
        ]

    def references(self, setup) -> list:
        ones = np.ones(len(setup.times))
        return [
            dyn.Reference(
                "mass_law_theory",
                "the derived constant of t mass_off / |W_svm|^2",
                ones,
                ("time",),
                draw=dyn.Draw(over=("mass_law",), color="black", label="derived: 1"),
            )
        ]

    def point_values(self, spec) -> dict:
        law = self.law(spec)
        return {
            "svm_norm": float(np.linalg.norm(law["w_svm"])),
            "svm_kkt": law["kkt"],
            "fin_norm": float(np.linalg.norm(law["w_fin"])),
            "fin_gradient": law["fin_gradient"],
            "composition_fin": float(law["composition_fin"]),
            "cyclic_sccs": float(law["cyclic"]),
            "sccs_agree": float(law["agree"]),
        }

    def observe(self, spec, states):
        states = np.asarray(states)
        runs, times = states.shape[:2]
        finite = np.isfinite(states).all(axis=(1, 2, 3))
        states = np.where(finite[:, None, None, None], states, 0.0)
        law = self.law(spec)
        k_size = int(spec["K"])
        data, found = law["data"], law["found"]
        tokens, last, label = data["tokens"], data["last"], data["label"]
        w = states[:, :, 0, :].reshape(runs, times, k_size, k_size)
        t = np.asarray(spec.times, dtype=float)
        w_svm, w_fin = law["w_svm"], law["w_fin"]
        wd = nm.project_dir(w, found)
        s = nm.attention(w, tokens, last)  # (runs, times, n, T)
        top = found["top"]
        p = nm.token_weights(s, tokens, k_size)  # (runs, times, n, K)
        values = {
            "loss": nm.loss(w, tokens, last, label),
            "norm_W": np.linalg.norm(nm.project_data(w, found), axis=(-2, -1)),
        }
        values["corr_svm"] = nm.correlation(wd, w_svm)
        values["misalignment"] = 1.0 - values["corr_svm"]
        fin_scale = np.linalg.norm(w_fin) or 1.0
        values["fin_error"] = np.linalg.norm(nm.project_fin(w, found) - w_fin, axis=(-2, -1)) / fin_scale
        off = 1.0 - (s * top).sum(axis=-1)  # (runs, times, n)
        values["mass_off"] = off.mean(axis=-1)
        svm_sq = float(np.sum(w_svm**2)) or 1.0  # W_svm = 0: these laws are NaN (below)
        values["mass_law"] = t * values["mass_off"] / svm_sq
        present = np.zeros((len(last), k_size), dtype=bool)
        in_top = np.zeros_like(present)
        for i in range(len(last)):
            present[i, tokens[i]] = True
            in_top[i, tokens[i][top[i]]] = True
        got = (p >= RETRIEVED) & present
        values["retrieved"] = (got == in_top).all(axis=-1).mean(axis=-1)
        values["in_scc_error"] = np.abs(np.where(top, s - law["s_fin"], 0.0)).max(axis=(-2, -1))
        values["composition_error"] = self._composition(p, law)
        late = t >= t[-1] / SLOPE_WINDOW
        x = np.log(t[late])
        xc = x - x.mean()
        slope = np.einsum("s,rsjk->rjk", xc, wd[:, late]) / (xc @ xc)
        values["slope_error"] = np.linalg.norm(slope - w_svm, axis=(-2, -1)) / np.sqrt(svm_sq)
        norms = np.linalg.norm(wd[:, late], axis=(-2, -1))
        values["growth_ratio"] = (norms @ xc) / (xc @ xc) / np.sqrt(svm_sq)
        if not np.any(w_svm):
            for key in ("corr_svm", "misalignment", "mass_law", "slope_error", "growth_ratio"):
                values[key] = np.full_like(values[key], np.nan)
        for value in values.values():
            value[~finite] = np.nan
        return dyn.Chunk(values, finite=finite)
