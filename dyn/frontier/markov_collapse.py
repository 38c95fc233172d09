r"""Markov collapse: one self-attention layer with one-hot tokens samples its next token from a
context-conditioned Markov chain (CCMC), and run on its own output it collapses onto a few
tokens (Ildiz, Huang, Li, Rawat & Oymak, "From Self-Attention to Markov Models: Unveiling the
Dynamics of Generative Transformers", arXiv 2402.13512). Only the abstract could be read here
(the CCMC and the winner-takes-all phenomenon); the formula below, the urn process and its
limit are our derivation.

The layer. Tokens are one-hot over a vocabulary of K: a context x_1 .. x_T (x_i in [K]) is the
T x K matrix X with rows e_{x_i}; the query is the last token q = x_T. One self-attention layer
with key-query matrix W (K x K) and the identity embedding as values outputs

    f(X) = X^T softmax(X W e_q),

a probability vector on [K] (rows of X are one-hot, the softmax weights sum to 1), from which
the next token is sampled.

The CCMC. The logit of position i is e_{x_i}^T W e_q = W[x_i, q]: it depends on the token at i
only. Grouping positions by token, with m_k(X) the number of times k occurs in X,

    f(X)_k = sum_{i: x_i = k} e^{W[k, q]} / sum_i e^{W[x_i, q]}
           = m_k P[q, k] / sum_j m_j P[q, j],        P[q, k] = e^{W[k, q]} / sum_j e^{W[j, q]}:

the base Markov chain P (row q the softmax of column q of W) reweighted by the context's counts
m(X) and renormalized: a Markov chain conditioned on the context. Tokens absent from the context
have probability 0 whatever P says (:func:`attention_next` is the layer, :func:`ccmc` the
formula; a test matches them to 1e-12).

Generation on the model's own output. From a prompt with counts m(0) (n0 = sum m(0) tokens) and
last token q0, each step samples y ~ ccmc(m, q), appends it: m_y += 1, q = y. This is an urn
(the sampled token is reinforced) modulated by the last token. The support never grows: only
prompt tokens are ever sampled.

The urn's limit (stochastic approximation). Write s = m/n for the shares, n the context length.
One step moves s by (e_y - s)/(n + 1), and given (s, q) the next token has law Q_s(q, .),

    Q_s(q, y) = s_y P[q, y] / sum_j s_j P[q, j].

The shares move on the time scale tau = log n while q mixes on the scale of one step, so the
increments average over the stationary law pi(s) of the chain Q_s (on the support of s), and
the shares follow the mean ODE (Robbins-Monro / Benaim's ODE method for a Markov-modulated
scheme)

    ds/dtau = pi(s) - s,        tau = log(n / n0),  s(0) = m(0)/n0,

whose attractors are where the urn's shares can converge. Its equilibria include every vertex
e_k of the simplex (at s = e_k only k is sampled). Near e_k, with s_j small for j != k, the chain
leaves k to j with probability s_j P[k, j]/P[k, k] and comes back at once (s_k is nearly 1), so
pi_j = s_j P[k, j]/P[k, k] + O(s^2) and

    ds_j/dtau = s_j (P[k, j]/P[k, k] - 1):

the vertex k is stable iff P[k, k] > P[k, j] for every other token j of the prompt (in the
layer: W[k, k] > W[j, k], token k attends most to itself when it is the query). Then s_j decays
like n^{alpha_j - 1}, alpha_j = P[k, j]/P[k, k] < 1: a loser's count grows like n^{alpha_j}, so
it keeps being sampled, at the vanishing rate alpha_j n^{alpha_j - 1}. Where no vertex is stable
(every token prefers another), the attractor lies on a face: several winners share the context.

Two cases are exact statements. With key-only logits, W[k, q] = w_k (kind "fitness"), P[q, k] =
p_k for every q: the urn draws k with probability m_k p_k / sum_j m_j p_j, a Polya urn with
fitness, whose fittest prompt token wins almost surely (the others' counts grow like
n^{p_j/p_max}); the ODE is the replicator equation ds_k/dtau = s_k (p_k / (s . p) - 1), whose
every interior start goes to the same vertex: the distribution of winners is a point mass. (At
beta = 0, P uniform, the urn is Polya's: pi(s) = s, the ODE stands still, the shares tend to a
random Dirichlet(m(0)) limit and nothing collapses.) With several stable vertices (kind
"diagonal", W = beta I + G) the urn's winner is random: early
fluctuations (of size n0^{-1/2}) pick the basin, and the ODE from s(0) names one basin. As the
prompt grows (prompt_copies c: the prompt 0, 1, .., K-1 repeated c times, s(0) uniform, n0 = c K)
the fluctuations shrink and the winners concentrate on the ODE's vertex: `p_ode_winner` -> 1 with
c. Kind "random" (W = beta G) may have no stable vertex.

What is measured, at generated counts t (the engine's save times, rounded to integers; log
spacing): `top_share` (the largest share of the context), `ode_winner_share` (the share of the
token the ODE ends at), `n_sampled` (distinct tokens among the last `window` generated tokens;
at t = 0 the prompt's support: every prompt token can be sampled), and at the horizon
`p_ode_winner` (the most frequent token is the ODE's), `p_stable_winner` (it is a stable vertex)
and `wins` (the distribution of winners over the tokens). References: the ODE's top share and
its winner's share at tau = log((n0 + t)/n0), the ODE's winner and the stable vertices over the
tokens, and `n_sampled_ode` = sum_k 1 - (1 - pi_k(s(tau)))^window, the distinct tokens of `window`
independent draws from the stationary law (chain correlations left out; t >= window only).

Measured (the shipped sweep: K = 8, beta = 2, 400 runs per point, 2e5 generated tokens, the
prompt 1, 8, 64 times). Fitness W (one stable vertex, alpha_max = 0.70): the ODE's token wins
98.5%, 100%, 100% of runs (at one prompt copy 1.5% of runs still have the runner-up ahead: its
share falls only like n^{-0.3}); the mean winner's share is within 1.8 standard errors of the
ODE at every save at 64 copies (6.7 at one copy: the O(1/n0) bias of the ODE method with
n0 = 8). Random W (vertex 5 stable, but the ODE from the uniform prompt goes to a face of four
tokens 3, 4, 6, 7 with shares 0.31, 0.54, 0.12, 0.04): `n_sampled` at the horizon is 4.07 ..
4.49 against the ODE's 4.02 .. 4.45, the face's top token wins 74%, 97%, 100% of runs, within
3.7 standard errors of the ODE's share at 64 copies (`p_stable_winner` is 8%, 0%, 0% there:
the winners are a face, not a vertex). Diagonal W (stable vertices 0, 3, 4, 5, 6;
the ODE from the uniform prompt ends at 0): every run ends at a stable vertex, but the winner is
random: the ODE's token wins 17%, 33%, 54% of runs at 1, 8, 64 copies (the uniform prompt lies
near the basins' common boundary, and the fluctuations, ~ n0^{-1/2}, pick the basin), while the
ODE run from each run's own shares after 1000 generated tokens names its winner in 100%, 98%,
90% of runs (at 64 copies 1000 tokens are 2 prompts' worth: the basin is not yet chosen).
`top_share` (each run's own winner, whichever vertex) is 0.999, 0.994, 0.967 at the horizon
against the ODE's 0.9995, 0.996, 0.972: every basin collapses at about the same pace.

The API. Generation is a jump process: the state (counts, last token) changes by a categorical
draw at each step. :class:`dyn.Model` integrates a drift and a Gaussian diffusion on R^{n x d};
it has no categorical noise and no discrete state, so the generation is a :class:`dyn.System`
whose ``simulate`` runs the urn (numba). The mean ODE is solved by scipy as a reference.
"""

from __future__ import annotations

import numba
import numpy as np

import dyn

KINDS = ("fitness", "diagonal", "random")
W_KEY = 0x56C  # spawn-key salt of the common key-query matrix (any constant)
ODE_END = 200.0  # tau at which the ODE's limit is read (e^{-(1 - alpha) tau} is then negligible)


# --- the layer and its CCMC ------------------------------------------------------------------
def transition(w) -> np.ndarray:
    """The base chain P: P[q, k] = e^{W[k, q]} / sum_j e^{W[j, q]} (row q: softmax of column q
    of W)."""
    z = np.asarray(w, dtype=float).T
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def attention_next(tokens, w) -> np.ndarray:
    """The layer's next-token law f(X) = X^T softmax(X W e_q): X the one-hot rows of `tokens`,
    q the last token (module doc)."""
    tokens = np.asarray(tokens, dtype=int)
    k = np.asarray(w).shape[0]
    x = np.eye(k)[tokens]  # (T, K)
    logits = x @ np.asarray(w, dtype=float) @ x[-1]
    a = np.exp(logits - logits.max())
    return x.T @ (a / a.sum())


def ccmc(counts, q: int, p) -> np.ndarray:
    """The context-conditioned Markov chain's law m_k P[q, k] / sum_j m_j P[q, j]."""
    weights = np.asarray(counts, dtype=float) * np.asarray(p)[q]
    return weights / weights.sum()


def key_query(kind: str, beta: float, k: int, rng) -> np.ndarray:
    """W of a kind: fitness W[k, q] = beta g_k (key-only logits), diagonal beta I + G, random
    beta G (g, G standard normal, drawn from `rng`)."""
    g = rng.standard_normal((k, k))
    if kind == "fitness":
        return beta * np.repeat(g[:, :1], k, axis=1)
    if kind == "diagonal":
        return beta * np.eye(k) + g
    return beta * g


def prompt_counts(k: int, copies: int) -> tuple[np.ndarray, int]:
    """(counts, last token) of the prompt 0, 1, .., K-1 repeated `copies` times."""
    return np.full(k, copies, dtype=np.int64), k - 1


# --- the urn's mean ODE ----------------------------------------------------------------------
def stationary(s, p) -> np.ndarray:
    """pi(s): the stationary law of Q_s(q, y) = s_y P[q, y] / sum_j s_j P[q, j] on the support
    of s (zero off it)."""
    s = np.asarray(s, dtype=float)
    on = s > 0
    q = p[np.ix_(on, on)] * s[on][None, :]
    q /= q.sum(axis=1, keepdims=True)
    m = on.sum()
    a = q.T - np.eye(m)
    a[-1] = 1.0
    b = np.zeros(m)
    b[-1] = 1.0
    out = np.zeros_like(s)
    out[on] = np.linalg.solve(a, b)
    return out


def urn_ode(p, s0, taus) -> np.ndarray:
    """The shares s(tau) of ds/dtau = pi(s) - s from s0 at `taus` (scipy, rtol 1e-10)."""
    from scipy.integrate import solve_ivp

    taus = np.asarray(taus, dtype=float)
    sol = solve_ivp(
        lambda t, s: stationary(np.maximum(s, 0.0), p) - s,
        (0.0, taus.max()),
        np.asarray(s0, dtype=float),
        t_eval=taus,
        method="LSODA",
        rtol=1e-10,
        atol=1e-14,
    )
    return sol.y.T


def stable_vertices(p, support) -> np.ndarray:
    """Booleans over tokens: vertex k is linearly stable, P[k, k] > P[k, j] for every other j of
    the support (module doc)."""
    p = np.asarray(p)
    support = np.asarray(support, dtype=bool)
    out = np.zeros(len(p), dtype=bool)
    for k in np.flatnonzero(support):
        others = support.copy()
        others[k] = False
        out[k] = bool(np.all(p[k, k] > p[k, others]))
    return out


def stationary_batch(s, p) -> np.ndarray:
    """pi(s) for a batch of shares s (R, K), every share positive."""
    q = p[None, :, :] * s[:, None, :]
    q /= q.sum(axis=2, keepdims=True)
    a = np.swapaxes(q, 1, 2) - np.eye(p.shape[0])[None]
    a[:, -1, :] = 1.0
    b = np.zeros(s.shape)
    b[:, -1] = 1.0
    return np.linalg.solve(a, b[:, :, None])[:, :, 0]


def urn_ode_batch(p, s0, tau: float, step: float = 0.05) -> np.ndarray:
    """The shares at `tau` of the mean ODE from each row of s0 (R, K), by RK4 at `step` in tau
    (vectorized over rows: the predictions from the runs' own shares)."""
    s = np.asarray(s0, dtype=float).copy()
    steps = int(np.ceil(tau / step))
    h = tau / steps

    def field(x):
        return stationary_batch(np.maximum(x, 1e-300), p) - x

    for _ in range(steps):
        k1 = field(s)
        k2 = field(s + h / 2 * k1)
        k3 = field(s + h / 2 * k2)
        k4 = field(s + h * k3)
        s = s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return s


def ode_winner(p, s0) -> int:
    """The token whose share the ODE from s0 ends largest at tau = ODE_END."""
    return int(np.argmax(urn_ode(p, s0, [0.0, ODE_END])[-1]))


# --- generation (numba) ----------------------------------------------------------------------
@numba.njit(cache=True)
def _generate(p, counts0, q0, saves, window, uniforms, winner, mark):
    """One run of the urn: (top share, winner's share, distinct tokens in the last `window`
    generated) at the generated counts `saves` (ascending, from 0), the counts after `mark`
    generated tokens and the final counts."""
    k = p.shape[0]
    m = counts0.copy()
    n0 = counts0.sum()
    q = q0
    nsave = saves.shape[0]
    top = np.empty(nsave)
    mine = np.empty(nsave)
    distinct = np.empty(nsave)
    ring = np.zeros(window, np.int64)
    inside = np.zeros(k, np.int64)
    seen = 0
    support = 0
    for j in range(k):
        if m[j] > 0:
            support += 1
    at = 0
    steps = saves[nsave - 1]
    marked = counts0.copy()
    for n in range(steps + 1):
        if n == mark:
            marked[:] = m
        while at < nsave and saves[at] == n:
            best = 0
            for j in range(k):
                if m[j] > best:
                    best = m[j]
            top[at] = best / (n0 + n)
            mine[at] = m[winner] / (n0 + n)
            distinct[at] = support if n == 0 else seen
            at += 1
        if n == steps:
            break
        total = 0.0
        last = 0
        for j in range(k):
            wj = m[j] * p[q, j]
            total += wj
            if wj > 0.0:
                last = j
        u = uniforms[n] * total
        acc = 0.0
        y = last
        for j in range(k):
            acc += m[j] * p[q, j]
            if u < acc:
                y = j
                break
        m[y] += 1
        q = y
        slot = n % window
        if n >= window:
            old = ring[slot]
            inside[old] -= 1
            if inside[old] == 0:
                seen -= 1
        ring[slot] = y
        if inside[y] == 0:
            seen += 1
        inside[y] += 1
    return top, mine, distinct, marked, m


# --- the system ------------------------------------------------------------------------------
def _token_count(setup) -> int:
    sizes = set(setup.values_of("K"))
    if len(sizes) != 1:
        raise dyn.ScenarioError(
            "params.K", "the winners' distribution is over the tokens: K must be one value in the sweep"
        )
    return int(sizes.pop())


def _saves(times) -> np.ndarray:
    """The save times as numbers of generated tokens (rounded; two saves may round alike)."""
    return np.rint(np.asarray(times, dtype=float)).astype(np.int64)


class MarkovCollapse(dyn.System):
    """Generation of a one-hot self-attention layer on its own output (a CCMC urn) against the
    urn's mean ODE (module doc)."""

    name = "markov_collapse"
    description = (
        "one-hot self-attention generating on its own output: the CCMC urn's "
        "collapse against its mean ODE ds/dtau = pi(s) - s"
    )
    default_plot = "top_share"
    integrator = frozenset({"horizon"})
    params = {
        "K": dyn.Field("int", 8, "vocabulary size (one-hot tokens)", lo=2, hi=64),
        "kind": dyn.Field(
            "str",
            "diagonal",
            "key-query matrix W: fitness (W[k, q] = beta g_k, "
            "key-only), diagonal (beta I + G), random (beta G); g, G standard "
            "normal, common to every point",
            choices=KINDS,
        ),
        "beta": dyn.Field("float", 2.0, "scale of W (module doc)", lo=0.0, hi=50.0),
        "prompt_copies": dyn.Field("int", 1, "the prompt is 0, 1, .., K-1 repeated this many times", lo=1, hi=10**5),
        "window": dyn.Field(
            "int", 100, "n_sampled counts distinct tokens among the last `window` generated", lo=1, hi=10**6
        ),
        "predict_at": dyn.Field(
            "int",
            1000,
            "p_ode_predicts runs the ODE from each run's own "
            "shares after this many generated tokens (the horizon if "
            "later)",
            lo=0,
            hi=10**8,
        ),
    }
    PREDICT_TAU, PREDICT_STEP = 20.0, 0.1  # the prediction's ODE: RK4 to tau = 20 at step 0.1

    def validate(self, spec) -> None:
        horizon = spec.horizon
        if horizon != round(horizon) or horizon < 1 or horizon > 10**8:
            raise dyn.ScenarioError(
                "integrator.horizon",
                f"the horizon is the number of generated tokens: a whole number in [1, 1e8], got {horizon}",
            )
        _token_count(spec.setup)

    def coords(self, setup) -> dict:
        k = _token_count(setup)
        return {"token": dyn.Coord(np.arange(k), "token (its index in the vocabulary)")}

    def outputs(self, setup) -> list:
        return [
            dyn.Output("top_share", "largest token share of the context (mean over runs)", "1", ("time",), "mean_se"),
            dyn.Output(
                "ode_winner_share",
                "share of the ODE's winner in the context (mean over runs)",
                "1",
                ("time",),
                "mean_se",
            ),
            dyn.Output(
                "n_sampled",
                "distinct tokens among the last `window` generated (t = 0: the prompt's tokens; mean over runs)",
                "1",
                ("time",),
                "mean_se",
            ),
            dyn.Output(
                "p_ode_winner", "the most frequent token at the horizon is the ODE's winner", "1", (), "proportion"
            ),
            dyn.Output(
                "p_stable_winner",
                "the most frequent token at the horizon is a stable vertex of the ODE",
                "1",
                (),
                "proportion",
            ),
            dyn.Output(
                "p_ode_predicts",
                "the urn ODE from the run's own shares at t = "
                "predict_at ends at the run's most frequent token at the horizon",
                "1",
                (),
                "proportion",
            ),
            dyn.Output(
                "wins", "share of runs whose most frequent token at the horizon is this one", "1", ("token",), "mean"
            ),
        ]

    def run_bytes(self, spec) -> int:
        return 8 * (int(spec.horizon) + spec["window"] + 4 * len(spec.times))

    def law(self, spec) -> dict:
        """W, P, the prompt, the ODE's winner and the stable vertices of this point, computed
        once per sweep (common W: it depends on K, kind, beta only)."""
        k, kind, beta, copies = spec["K"], spec["kind"], spec["beta"], spec["prompt_copies"]

        def compute():
            w = key_query(kind, beta, k, spec.setup.common_rng(W_KEY, k))
            p = transition(w)
            counts, q0 = prompt_counts(k, copies)
            s0 = counts / counts.sum()
            return dict(
                w=w, p=p, counts=counts, q0=q0, s0=s0, winner=ode_winner(p, s0), stable=stable_vertices(p, counts > 0)
            )

        return spec.setup.shared(("markov_law", k, kind, beta, copies), compute)

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        law = self.law(spec)
        saves = _saves(spec.times)
        steps = int(saves[-1])
        k = spec["K"]
        out = {name: [] for name in ("top_share", "ode_winner_share", "n_sampled")}
        final, marked = [], []
        for _ in runs:
            uniforms = spec.rng.random(steps)
            top, mine, distinct, at_mark, m = _generate(
                law["p"],
                law["counts"],
                law["q0"],
                saves,
                spec["window"],
                uniforms,
                law["winner"],
                min(spec["predict_at"], steps),
            )
            out["top_share"].append(top)
            out["ode_winner_share"].append(mine)
            out["n_sampled"].append(distinct)
            final.append(int(np.argmax(m)))
            marked.append(at_mark / at_mark.sum())
        final = np.array(final)
        predicted = urn_ode_batch(law["p"], np.array(marked), self.PREDICT_TAU, self.PREDICT_STEP).argmax(axis=1)
        values = {key: np.array(v) for key, v in out.items()}
        values["p_ode_winner"] = final == law["winner"]
        values["p_stable_winner"] = law["stable"][final]
        values["p_ode_predicts"] = predicted == final
        values["wins"] = np.eye(k)[final]
        return dyn.Chunk(values)

    def references(self, setup) -> list:
        keys = ("kind", "beta", "prompt_copies", "window")
        dims = tuple(a for a in setup.axes if a in keys)
        shape = tuple(len(setup.axes[a]) for a in dims)
        k = _token_count(setup)
        times = _saves(setup.times)
        top = np.full(shape + (len(times),), np.nan)
        mine, sampled = top.copy(), top.copy()
        winner = np.zeros(shape + (k,))
        stable = np.zeros(shape + (k,))
        for index in np.ndindex(*shape):
            p = {key: setup.params.get(key) for key in keys}
            p.update({a: setup.axes[a][i] for a, i in zip(dims, index, strict=True)})
            w = key_query(p["kind"], float(p["beta"]), k, setup.common_rng(W_KEY, k))
            base = transition(w)
            counts, _ = prompt_counts(k, int(p["prompt_copies"]))
            n0 = counts.sum()
            s0 = counts / n0
            shares = urn_ode(base, s0, np.log((n0 + times) / n0))
            won = ode_winner(base, s0)
            top[index] = shares.max(axis=1)
            mine[index] = shares[:, won]
            pis = np.array([stationary(s, base) for s in shares])
            window = int(p["window"])
            sampled[index] = np.where(times >= window, (1.0 - (1.0 - pis) ** window).sum(axis=1), np.nan)
            winner[index][won] = 1.0
            stable[index] = stable_vertices(base, counts > 0)
        return [
            dyn.Reference(
                "top_share_ode",
                "largest share of the urn's mean ODE at tau = log((n0 + t)/n0)",
                top,
                dims + ("time",),
                draw=dyn.Draw(over=("top_share",), color="black", label="urn ODE"),
            ),
            dyn.Reference(
                "ode_winner_share_ode",
                "share of the ODE's winner along the ODE",
                mine,
                dims + ("time",),
                draw=dyn.Draw(over=("ode_winner_share",), color="black", label="urn ODE"),
            ),
            dyn.Reference(
                "n_sampled_ode",
                "distinct tokens in `window` independent draws from the ODE's stationary law pi(s(tau)) (t >= window)",
                sampled,
                dims + ("time",),
                draw=dyn.Draw(over=("n_sampled",), color="black", label="urn ODE"),
            ),
            dyn.Reference(
                "winner_ode", "1 at the token the urn ODE from the prompt ends at", winner, dims + ("token",)
            ),
            dyn.Reference(
                "stable_vertex",
                "1 at the tokens whose vertex is a stable equilibrium of the urn ODE (P[k, k] > P[k, j])",
                stable,
                dims + ("token",),
            ),
        ]
