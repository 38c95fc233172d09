r"""The token graphs, the graph SVM and the finite part of :mod:`dyn.frontier.next_token_scc`,
computed from the data alone (numpy and scipy), never from the flow.

Data. A vocabulary [K] with one-hot embeddings; sample i is a context x_i1 .. x_iT (tokens),
its last token k_i = x_iT and its label y_i, a token of the context. W is K x K and the score of
position t is W[x_it, k_i]: column k of W is all that contexts ending in k read.

Token graphs. For each last token k, G_k has an edge y_i -> j for every sample i with k_i = k
and every token j != y_i of X_i. Its strongly connected components (scipy.sparse.csgraph,
connection "strong") are the SCCs; S -> S' in the condensation means S has priority over S'.
Since y_i -> j for every j of X_i, no token of X_i lies in an SCC above that of y_i: the SCC
C_i = SCC_{k_i}(y_i) is the highest-priority SCC present in context i.

Graph SVM (:func:`graph_svm`): W_svm = argmin ||W||_F subject to, for every edge y -> j of G_k,

    (e_y - e_j)^T W e_k = 0   (y, j in one SCC),      (e_y - e_j)^T W e_k >= 1   (otherwise).

Solved by SLSQP on the entries W[j, k] of the tokens j that occur in contexts ending in k (the
others are 0 at the minimum), with exact Jacobians (the equalities replaced by an orthonormal
basis of their row space, which SLSQP needs of full rank); checked by its KKT conditions (multipliers
of the active inequalities by NNLS, of the equalities free, by least squares).

Finite part (:func:`finite_part`). S_fin is spanned by (e_a - e_b) e_k^T for a, b in one SCC of
G_k: per column, vectors supported on the nontrivial SCCs with zero sum on each. The reduced
loss keeps of each context the positions whose token lies in C_i:

    L_fin(F) = (1/n) sum_i [ log sum_{t: x_it in C_i} e^{F[x_it, k_i]} - F[y_i, k_i] - log m_i ],

m_i the number of positions holding y_i (the log-loss of the attention mass on the label, the
softmax restricted to C_i). It is convex, invariant under adding a constant on an SCC of a
column, and coercive on S_fin (a direction v in S_fin along which no term grows has
v_y >= v_j on every edge y -> j inside an SCC, hence is constant on each SCC: v = 0), so
W_fin = argmin_{S_fin} L_fin is unique; solved by scipy (trust-exact, exact Hessian), polished
by three Newton steps (least squares: the Hessian is singular along the constants) and projected
onto S_fin.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, nnls
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components


# --- the data --------------------------------------------------------------------------------
def dataset(n: int, tokens: int, vocabulary: int, queries: int, levels: int, logit_scale: float, rng) -> dict:
    """A training set drawn from designed priorities (module doc of next_token_scc):

    - for each last token k < `queries`, the K tokens are split at random into `levels` blocks of
      near-equal sizes, ``level[k, j]`` the block of token j (0: the highest priority), with k
      itself in the lowest block of its own graph;
    - sample i ends in k_i = i mod queries; its top block b_i is uniform over the levels; its
      first two tokens are uniform in block b_i (one when T = 2), the rest before k_i uniform in
      the blocks b_i and below;
    - its label is a token j of block b_i present, drawn with probability proportional to
      m_i(j) e^{theta[j, k]} (m_i(j): the positions holding j; theta = logit_scale N(0, 1)).

    Returns tokens (n, T) int, last (n,) int, label (n,) int, level (queries, K) int, theta."""
    level = np.zeros((queries, vocabulary), dtype=int)
    cuts = np.linspace(0, vocabulary, levels + 1).round().astype(int)
    for k in range(queries):
        others = rng.permutation(np.delete(np.arange(vocabulary), k))
        order = np.append(others, k)  # k last: in the lowest block
        for b in range(levels):
            level[k, order[cuts[b] : cuts[b + 1]]] = b
    theta = logit_scale * rng.standard_normal((vocabulary, vocabulary))
    last = np.arange(n) % queries
    seq = np.empty((n, tokens), dtype=int)
    label = np.empty(n, dtype=int)
    for i in range(n):
        k = last[i]
        b = rng.integers(levels)
        head = min(2, tokens - 1)
        seq[i, :head] = rng.choice(np.flatnonzero(level[k] == b), head)
        seq[i, head:-1] = rng.choice(np.flatnonzero(level[k] >= b), tokens - 1 - head)
        seq[i, -1] = k
        top = seq[i][level[k, seq[i]] == b]  # positions of block b (with repeats)
        w = np.exp(theta[top, k] - theta[top, k].max())
        label[i] = top[rng.choice(len(top), p=w / w.sum())]
    return {"tokens": seq, "last": last, "label": label, "level": level, "theta": theta}


def one_hot(data: dict, vocabulary: int) -> dict:
    """The arrays the loss reads: x (n, T, K) one-hot tokens, q (n, K) one-hot last tokens,
    m (n, T) 1 where the position holds the label."""
    tokens, last, label = data["tokens"], data["last"], data["label"]
    eye = np.eye(vocabulary)
    return {"x": eye[tokens], "q": eye[last], "m": (tokens == label[:, None]).astype(float)}


# --- graphs ----------------------------------------------------------------------------------
def token_graphs(tokens, last, label, vocabulary: int) -> dict:
    """{k: adjacency (K, K) bool} of G_k, edge y -> j, for each last token k present."""
    graphs = {}
    for i in range(len(last)):
        k, y = int(last[i]), int(label[i])
        adj = graphs.setdefault(k, np.zeros((vocabulary, vocabulary), dtype=bool))
        for j in set(int(t) for t in tokens[i]) - {y}:
            adj[y, j] = True
    return graphs


def sccs(adjacency: np.ndarray) -> np.ndarray:
    """The SCC label of each token (scipy.sparse.csgraph, strong connection)."""
    return connected_components(csr_matrix(adjacency), directed=True, connection="strong")[1]


def structure(tokens, last, label, vocabulary: int) -> dict:
    """The graphs' facts the laws need:

    - ``nodes[k]``: the tokens occurring in contexts ending in k (the entries of column k that
      the loss reads);
    - ``scc[k]``: SCC labels of G_k (K,);
    - ``top`` (n, T) bool: position t of context i holds a token of C_i, the SCC of its label;
    - ``groups``: {(k, c): sample indices with k_i = k and label in SCC c of G_k}.
    """
    tokens, last, label = (np.asarray(a, dtype=int) for a in (tokens, last, label))
    graphs = token_graphs(tokens, last, label, vocabulary)
    scc = {k: sccs(a) for k, a in graphs.items()}
    nodes = {k: np.unique(tokens[last == k]) for k in graphs}
    top = np.zeros(tokens.shape, dtype=bool)
    groups: dict = {}
    for i in range(len(last)):
        k = int(last[i])
        c = scc[k][label[i]]
        top[i] = scc[k][tokens[i]] == c
        groups.setdefault((k, int(c)), []).append(i)
    return {
        "graphs": graphs,
        "scc": scc,
        "nodes": nodes,
        "top": top,
        "groups": {g: np.array(v) for g, v in groups.items()},
    }


def designed_agree(level: np.ndarray, found: dict) -> bool:
    """The SCCs found equal the designed blocks on the tokens each graph contains."""
    for k, labels in found["scc"].items():
        nodes = found["nodes"][k]
        a, b = level[k, nodes], labels[nodes]
        if not (np.equal.outer(a, a) == np.equal.outer(b, b)).all():
            return False
    return True


# --- projections -----------------------------------------------------------------------------
def project_data(w: np.ndarray, found: dict) -> np.ndarray:
    """Pi_D: keep the entries W[j, k] with j a node of G_k (..., K, K)."""
    mask = np.zeros(w.shape[-2:], dtype=bool)
    for k, nodes in found["nodes"].items():
        mask[nodes, k] = True
    return np.where(mask, w, 0.0)


def project_fin(w: np.ndarray, found: dict) -> np.ndarray:
    """Pi_fin onto S_fin: on each nontrivial SCC of each column, the entries minus their mean."""
    out = np.zeros_like(w)
    for k, labels in found["scc"].items():
        nodes = found["nodes"][k]
        for c in np.unique(labels[nodes]):
            members = nodes[labels[nodes] == c]
            if len(members) > 1:
                block = w[..., members, k]
                out[..., members, k] = block - block.mean(axis=-1, keepdims=True)
    return out


def project_dir(w: np.ndarray, found: dict) -> np.ndarray:
    """Pi_D - Pi_fin: the part of W constant on each SCC of each column (the directional part)."""
    return project_data(w, found) - project_fin(w, found)


# --- the graph SVM ---------------------------------------------------------------------------
def svm_constraints(tokens, last, label, found: dict, vocabulary: int):
    """(A_ineq, A_eq) as rows over the K*K entries of W (row-major): one row e_y e_k^T -
    e_j e_k^T per distinct edge y -> j of G_k, inequality (>= 1) across SCCs, equality inside."""
    ineq, eq = [], []
    for k, adj in found["graphs"].items():
        labels = found["scc"][k]
        for y, j in zip(*np.nonzero(adj), strict=True):
            row = np.zeros((vocabulary, vocabulary))
            row[y, k], row[j, k] = 1.0, -1.0
            (eq if labels[y] == labels[j] else ineq).append(row.ravel())
    size = vocabulary * vocabulary
    return (np.array(ineq).reshape(-1, size), np.array(eq).reshape(-1, size))


def graph_svm(tokens, last, label, found: dict, vocabulary: int) -> tuple[np.ndarray, float]:
    """(W_svm (K, K), kkt): the graph SVM of the module doc by SLSQP, and the largest KKT
    residual (relative stationarity, primal infeasibility)."""
    a_in, a_eq = svm_constraints(tokens, last, label, found, vocabulary)
    free = project_data(np.ones((vocabulary, vocabulary)), found).ravel() > 0
    ai, ae = a_in[:, free], a_eq[:, free]
    if len(ae):  # an independent basis of the equalities' row space (SLSQP needs full rank)
        _, sv, vt = np.linalg.svd(ae, full_matrices=False)
        ae = vt[sv > 1e-10 * sv[0]]
    stacked = np.vstack([ai, ae])
    start, *_ = np.linalg.lstsq(stacked, np.concatenate([np.ones(len(ai)), np.zeros(len(ae))]), rcond=None)
    cons = []
    if len(ai):
        cons.append({"type": "ineq", "fun": lambda w: ai @ w - 1.0, "jac": lambda w: ai})
    if len(ae):
        cons.append({"type": "eq", "fun": lambda w: ae @ w, "jac": lambda w: ae})
    res = minimize(
        lambda w: 0.5 * w @ w,
        start,
        jac=lambda w: w,
        method="SLSQP",
        constraints=cons,
        options={"ftol": 1e-15, "maxiter": 3000},
    )
    v = res.x
    w = np.zeros(vocabulary * vocabulary)
    w[free] = v
    infeasible = max(
        [0.0] + ([float(-(ai @ v - 1.0).min())] if len(ai) else []) + ([float(np.abs(ae @ v).max())] if len(ae) else [])
    )
    return w.reshape(vocabulary, vocabulary), max(_kkt(v, ai, ae), infeasible)


def _kkt(v, ai, ae) -> float:
    """|v - A_in^T lam - A_eq^T mu| / |v|, lam >= 0 on the active inequalities (NNLS after the
    equalities' span is projected out)."""
    active = ai[np.abs(ai @ v - 1.0) < 1e-6] if len(ai) else ai
    if len(ae):
        q, _ = np.linalg.qr(ae.T)

        def off(x):
            return x - q @ (q.T @ x)
    else:

        def off(x):
            return x

    if len(active):
        lam, _ = nnls(off(active.T), off(v))
        rest = off(v - active.T @ lam)
    else:
        rest = off(v)
    return float(np.linalg.norm(rest) / max(np.linalg.norm(v), 1e-300))


# --- the finite part -------------------------------------------------------------------------
def reduced_loss(f: np.ndarray, tokens, last, label, top) -> float:
    """L_fin(F) of the module doc at F (K, K)."""
    scores = f[tokens, last[:, None]]
    s = np.where(top, scores, -np.inf)
    mx = s.max(axis=1)
    lse = mx + np.log(np.exp(s - mx[:, None]).sum(axis=1))
    count = (tokens == label[:, None]).sum(axis=1)
    return float(np.mean(lse - f[label, last] - np.log(count)))


def finite_part(tokens, last, label, found: dict, vocabulary: int) -> tuple[np.ndarray, float]:
    """(W_fin (K, K), gradient norm at it): argmin of L_fin over S_fin (trust-exact on the
    entries of the nontrivial SCCs with exact gradient and Hessian, then Pi_fin)."""
    tokens, last, label = (np.asarray(a, dtype=int) for a in (tokens, last, label))
    top, n, k_size = found["top"], len(last), vocabulary
    entries = np.nonzero(_fin_mask(found, k_size) > 0)
    index = -np.ones((k_size, k_size), dtype=int)
    index[entries] = np.arange(len(entries[0]))
    if len(entries[0]) == 0:
        return np.zeros((k_size, k_size)), 0.0
    pos = index[tokens, last[:, None]]  # (n, T): the variable a position reads, -1: none
    keep = top & (pos >= 0)
    lab = index[label, last]

    def parts(v):
        f = np.zeros((k_size, k_size))
        f[entries] = v
        s = np.where(top, f[tokens, last[:, None]], -np.inf)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        s /= s.sum(axis=1, keepdims=True)  # (n, T), zero off C_i
        return f, s

    def fun(v):
        f, _ = parts(v)
        return reduced_loss(f, tokens, last, label, top)

    def jac(v):
        _, s = parts(v)
        g = np.zeros(len(v))
        np.add.at(g, pos[keep], s[keep])
        has = lab >= 0
        np.add.at(g, lab[has], -1.0)
        return g / n

    def hess(v):
        _, s = parts(v)
        h = np.zeros((len(v), len(v)))
        for i in range(n):
            p = np.zeros(len(v))
            np.add.at(p, pos[i][keep[i]], s[i][keep[i]])
            h += np.diag(p) - np.outer(p, p)
        return h / n

    res = minimize(
        fun,
        np.zeros(len(entries[0])),
        jac=jac,
        hess=hess,
        method="trust-exact",
        options={"gtol": 1e-12, "maxiter": 500},
    )
    v = res.x
    for _ in range(3):  # Newton steps to rounding (the Hessian is singular along constants)
        v = v - np.linalg.lstsq(hess(v), jac(v), rcond=1e-12)[0]
    f = np.zeros((k_size, k_size))
    f[entries] = v
    return project_fin(f, found), float(np.linalg.norm(jac(v)))


def _fin_mask(found: dict, vocabulary: int) -> np.ndarray:
    """1 on the entries W[j, k] of the nontrivial SCCs of G_k, else 0."""
    mask = np.zeros((vocabulary, vocabulary))
    for k, labels in found["scc"].items():
        nodes = found["nodes"][k]
        for c in np.unique(labels[nodes]):
            members = nodes[labels[nodes] == c]
            if len(members) > 1:
                mask[members, k] = 1.0
    return mask


# --- the model, in numpy (the laws' measurements) --------------------------------------------
def attention(w: np.ndarray, tokens, last) -> np.ndarray:
    """softmax_t W[x_it, k_i] for W (..., K, K): (..., n, T)."""
    s = w[..., tokens, last[:, None]]
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    return s / s.sum(axis=-1, keepdims=True)


def loss(w: np.ndarray, tokens, last, label) -> np.ndarray:
    """L(W) = -(1/n) sum_i log (attention mass on the positions holding y_i), (...)."""
    s = w[..., tokens, last[:, None]]
    mx = s.max(axis=-1, keepdims=True)
    e = np.exp(s - mx)
    on = tokens == label[:, None]
    return np.mean(np.log(e.sum(axis=-1)) - np.log((e * on).sum(axis=-1)), axis=-1)


def token_weights(s: np.ndarray, tokens, vocabulary: int) -> np.ndarray:
    """p_i(j) = sum_{t: x_it = j} s_it: (..., n, K)."""
    eye = np.eye(vocabulary)[tokens]  # (n, T, K)
    return np.einsum("...it,itj->...ij", s, eye)


def correlation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """<a, b> / (|a| |b|) over the last two axes (0 where either is 0)."""
    num = np.einsum("...jk,jk->...", a, b)
    den = np.linalg.norm(a, axis=(-2, -1)) * np.linalg.norm(b)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
