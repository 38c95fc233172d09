r"""The attention SVMs of :mod:`dyn.frontier.attention_svm`, solved by scipy, not by the flow.

Data: n inputs, each T tokens x_it in R^d (X_i, T x d), a query z_i in R^d, a label
Y_i in {-1, +1}; a head v in R^d. A selection alpha picks one token alpha_i per input. The
constraint matrices of the selection are

    A_it = (x_{i alpha_i} - x_it) z_i^T    (d x d),   t != alpha_i,

so that <A_it, W> = (x_{i alpha_i} - x_it)^T W z_i is the gap of softmax scores that
W opens between the selected token and token t.

- Frobenius SVM (a quadratic program):  W_F = argmin ||W||_F^2 / 2  s.t. <A_it, W> >= 1.
  Solved by SLSQP on the vector of W, with the exact gradients of objective and constraints;
  the result is checked by its KKT conditions in :func:`frobenius_svm` (multipliers by NNLS
  on the active constraints: W = sum lambda_it A_it, lambda >= 0).
- Nuclear-norm SVM (a convex program): W_* = argmin ||W||_* s.t. <A_it, W> >= 1. Written
  with ||W||_* = min_{K Q^T = W} (||K||_F^2 + ||Q||_F^2) / 2 (K, Q in R^{d x d}) and solved
  by SLSQP from the balanced factors of W_F (a feasible start) and from random starts; the
  best is certified by weak duality: for any lambda >= 0
  and any feasible W, sum lambda <= <G(lambda), W> <= ||G(lambda)||_op ||W||_*, with
  G(lambda) = sum lambda_it A_it, so sum lambda / ||G(lambda)||_op is a lower bound on the
  optimum. The multipliers come from the KKT system of the convex problem at the candidate
  (G(lambda) = U V^T + (a part on the complement of W's singular spaces)), solved by NNLS;
  :func:`nuclear_svm` returns the relative gap between the upper and the lower bound.

Every solver here is independent of the gradient flow: they read only the data.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize, nnls


def constraints(tokens: np.ndarray, queries: np.ndarray, selected: np.ndarray) -> np.ndarray:
    """The constraint matrices A_it (m, d, d) of the selection, t != selected_i, in order."""
    rows = []
    for x, z, a in zip(tokens, queries, selected, strict=True):
        for t in range(x.shape[0]):
            if t != a:
                rows.append(np.outer(x[a] - x[t], z))
    return np.array(rows)


def frobenius_svm(a: np.ndarray, tol: float = 1e-10) -> tuple[np.ndarray, float]:
    """(W_F, kkt): the Frobenius SVM of the constraint matrices `a` (m, d, d), and the largest
    KKT residual (primal infeasibility, |W - sum lambda A| with lambda >= 0 from NNLS on the
    active constraints). W_F is None when SLSQP finds no feasible point (the SVM is empty)."""
    m, d, _ = a.shape
    flat = a.reshape(m, d * d)
    start, *_ = np.linalg.lstsq(flat, np.ones(m), rcond=None)
    res = minimize(
        lambda w: 0.5 * w @ w,
        start,
        jac=lambda w: w,
        method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda w: flat @ w - 1.0, "jac": lambda w: flat}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    w = res.x
    if (flat @ w - 1.0).min() < -1e-6:
        return None, np.inf
    active = np.flatnonzero(flat @ w - 1.0 < 1e-6)
    lam, _ = nnls(flat[active].T, w)
    kkt = max(np.linalg.norm(flat[active].T @ lam - w) / np.linalg.norm(w), max(0.0, -(flat @ w - 1.0).min()))
    return w.reshape(d, d), float(kkt)


def nuclear_svm(a: np.ndarray, starts: int = 6, seed: int = 0) -> tuple[np.ndarray, float]:
    """(W_*, gap): the nuclear-norm SVM of the constraint matrices `a` (m, d, d) by SLSQP on the
    factors (module doc), best of the Frobenius start and `starts` random ones, and its
    certified relative duality gap
    (upper - lower) / upper. W_* is None when no start reaches a feasible point."""
    m, d, _ = a.shape
    rng = np.random.default_rng(seed)

    def split(k):
        return k[: d * d].reshape(d, d), k[d * d :].reshape(d, d)

    def gaps(k):
        kk, qq = split(k)
        return np.einsum("mij,ij->m", a, kk @ qq.T) - 1.0

    def gaps_jac(k):
        kk, qq = split(k)
        return np.concatenate(
            [np.einsum("mij,jr->mir", a, qq).reshape(m, -1), np.einsum("mij,ir->mjr", a, kk).reshape(m, -1)], axis=1
        )

    guesses = [rng.standard_normal(2 * d * d) for _ in range(starts)]
    wf, _ = frobenius_svm(a)
    if wf is not None:  # a feasible start: the balanced factors of the Frobenius SVM
        u, sv, vt = np.linalg.svd(wf)
        guesses.insert(0, np.concatenate([(u * np.sqrt(sv)).ravel(), (vt.T * np.sqrt(sv)).ravel()]))
    best, best_value = None, np.inf
    for guess in guesses:
        res = minimize(
            lambda k: 0.5 * k @ k,
            guess,
            jac=lambda k: k,
            method="SLSQP",
            constraints=[{"type": "ineq", "fun": gaps, "jac": gaps_jac}],
            options={"ftol": 1e-15, "maxiter": 3000},
        )
        if gaps(res.x).min() > -1e-7 and 0.5 * res.x @ res.x < best_value:
            best, best_value = res.x, 0.5 * res.x @ res.x
    if best is None:
        return None, np.inf
    kk, qq = split(best)
    w = kk @ qq.T
    return w, _nuclear_gap(a, w)


def _nuclear_gap(a: np.ndarray, w: np.ndarray) -> float:
    """Relative gap between ||w||_* and the weak-duality bound of multipliers fitted to the
    KKT conditions at w: U^T G V = I, U^T G V_perp = 0, U_perp^T G V = 0 (lambda >= 0 on the
    active constraints)."""
    lam, g, s = _certificate(a, w)
    lower = lam.sum() / np.linalg.norm(g, 2)
    upper = s.sum()
    return float((upper - lower) / upper)


def _certificate(a: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lambda, G, singular values of w): the multipliers of the active constraints fitted by
    NNLS to the KKT conditions of the nuclear-norm SVM at w (:func:`_nuclear_gap`) and
    G = sum lambda A."""
    d = a.shape[1]
    u, s, vt = np.linalg.svd(w)
    r = svm_rank(s)
    active = np.flatnonzero(np.einsum("mij,ij->m", a, w) - 1.0 < 1e-6)
    rotated = np.einsum("ir,mij,js->mrs", u, a[active], vt.T)  # U^T A V, full bases
    target = np.zeros((d, d))
    target[:r, :r] = np.eye(r)
    mask = np.zeros((d, d), bool)
    mask[:r, :] = True
    mask[:, :r] = True
    lam, _ = nnls(rotated[:, mask].T, target[mask])
    return lam, np.einsum("m,mij->ij", lam, a[active]), s


def svm_rank(singular_values: np.ndarray) -> int:
    """The rank of an SVM solution from its singular values (descending): those above 1e-6 of
    the largest."""
    return int((singular_values > 1e-6 * singular_values[0]).sum())


def spurious_exponent(a: np.ndarray, w: np.ndarray) -> float:
    r"""1 - sigma_{r+1}(G) for the nuclear-norm SVM w of rank r < d and its dual certificate G
    (:func:`_certificate`): the exponent of the law sigma_{r+1}(W) / sigma_1(W) ~ (log t)^-(1 -
    sigma_{r+1}(G)) of the balanced (K, Q) flow (:mod:`dyn.frontier.attention_svm`). NaN when
    r = d (no singular direction is left over)."""
    _, g, s = _certificate(a, w)
    r = svm_rank(s)
    if r >= len(s):
        return float("nan")
    return float(1.0 - np.linalg.svd(g, compute_uv=False)[r])


def nuclear_excess(a: np.ndarray, w: np.ndarray, optimum: float) -> float:
    """||w||_* / min_j <A_j, w> / optimum - 1: how far the direction of w is from the optimum
    ||W_*||_* of the nuclear-norm SVM, rescaled to the margin (a feasible point, so >= 0 up to
    the solver's gap); NaN when w does not separate (min_j <A_j, w> <= 0)."""
    margin = np.einsum("mij,ij->m", a, w).min()
    if not margin > 0:
        return float("nan")
    return float(np.linalg.svd(w, compute_uv=False).sum() / margin / optimum - 1.0)


def max_margin_classifier(points: np.ndarray, labels: np.ndarray) -> np.ndarray | None:
    """The hard-margin linear SVM through the origin: argmin |v|^2 / 2 s.t. y_i <v, x_i> >= 1
    (None when the points are not separable)."""
    m, d = points.shape
    signed = labels[:, None] * points
    start, *_ = np.linalg.lstsq(signed, np.ones(m), rcond=None)
    res = minimize(
        lambda v: 0.5 * v @ v,
        start,
        jac=lambda v: v,
        method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda v: signed @ v - 1.0, "jac": lambda v: signed}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    if (signed @ res.x - 1.0).min() < -1e-6:
        return None
    return res.x


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    """<a, b> / (|a| |b|) of two arrays (the cosine of their angle, Frobenius)."""
    a, b = np.ravel(a), np.ravel(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
