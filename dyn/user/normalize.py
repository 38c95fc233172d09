r"""Row normalizations of attention scores: one row s in R^n of scores to weights w >= 0 with
sum_j w_j = 1 (USA excepted), each a numba function ``name(s, w, a)`` writing w in place (a: the
normalization's own parameter, entmax's alpha or top-k's k; unused by the others).

- softmax:   w_j = e^{s_j - m} / sum_k e^{s_k - m},  m = max_k s_k (the same weights as
  e^{s_j} / sum_k e^{s_k}, without overflow; the exponentials by the engine's vectorized exp,
  :mod:`dyn.numerics.vexp`, the maximum by :func:`row_max`);
- usa:       w_j = e^{s_j} / n (unnormalized: rows do not sum to 1);
- hardmax:   the uniform weights on the maximizers, w_j = 1 / |{k: s_k = m}| where s_j = m
  exactly (ties share equally; scores equal to the maximum only up to rounding are not ties);
- sparsemax: the Euclidean projection of s on the simplex, w_j = max(s_j - tau, 0) with tau
  such that sum_j w_j = 1; found without sorting by Michelot's passes: tau = (sum_{j in S} s_j
  - 1) / |S| over the support S, starting from the scores above max - 1 (a superset of the
  support: no weight exceeds 1, so tau >= max - 1), S = {s_j > tau} again until S stays (tau
  only grows, S only shrinks: at most n passes, a few in practice, each over the last support
  alone; tied scores enter or leave the support together);
- entmax:    alpha-entmax (alpha > 1; 2 is sparsemax, 1 the softmax limit),
  w_j = max((alpha - 1) s_j - tau, 0)^{1 / (alpha - 1)}; at alpha = 1.5 exactly by sorting the
  row (:func:`entmax15`), else tau by bisection on
  [max - 1, max - n^{1 - alpha}] (max of (alpha - 1) s) to machine precision, then w divided by its
  sum;
- topk:      the softmax of the k largest scores, zero elsewhere; the k-th largest score is
  found by selection (:func:`kth_largest`, O(n) on average); scores tied with it enter in order
  of index, lowest first, until k are in.

Sparse normalizations (hardmax, sparsemax, entmax, topk) are continuous (sparsemax, entmax) or
discontinuous (hardmax, topk) in s but not smooth where a score enters or leaves the support: the
flow's vector field has a kink (or a jump) there, and a fixed-step solver's global order drops
to what the kink allows (docs/your_own_system.md measures RK4 on a sparsemax flow).
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ..numerics import vexp

OPTIONS = dict(nogil=True, error_model="numpy", cache=True)
NAMES = ("softmax", "usa", "sinkhorn", "hardmax", "sparsemax", "entmax", "topk")
ROW = ("softmax", "usa", "hardmax", "sparsemax", "entmax", "topk")  # the row-by-row ones
SPARSE = ("hardmax", "sparsemax", "entmax", "topk")


@intrinsic
def _maxnum(typingctx, a, b):
    """max(a, b), a NaN ignored (llvm.maxnum): a max-reduction loop of it vectorizes."""

    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        fn = builder.module.declare_intrinsic("llvm.maxnum", [double], ir.FunctionType(double, [double, double]))
        return builder.call(fn, args)

    return types.float64(types.float64, types.float64), codegen


@numba.njit(types.float64(types.float64[::1]), **OPTIONS)
def row_max(w):
    """max_j w[j] over the entries that are not NaN (-inf for none). Exact in any order; where
    the maximum is 0 its sign may be either, which changes no bit of e^{w_j - max}."""
    m = -np.inf
    for j in range(w.shape[0]):
        m = _maxnum(m, w[j])
    return m


@numba.njit(**OPTIONS)
def softmax(s, w, a):
    n = s.shape[0]
    for j in range(n):
        w[j] = s[j]
    m = row_max(w)
    vexp.exp_inplace(w, m)  # e^{s_j - m}, vectorized (dyn.numerics.vexp)
    z = vexp.row_sum(w)
    for j in range(n):
        w[j] /= z


@numba.njit(**OPTIONS)
def usa(s, w, a):
    n = s.shape[0]
    for j in range(n):
        w[j] = np.exp(s[j]) / n


@numba.njit(**OPTIONS)
def hardmax(s, w, a):
    n = s.shape[0]
    m = s[0]
    for j in range(1, n):
        m = max(m, s[j])
    count = 0
    for j in range(n):
        count += s[j] == m
    for j in range(n):
        w[j] = 1.0 / count if s[j] == m else 0.0


@numba.njit(**OPTIONS)
def sparsemax(s, w, a):
    n = s.shape[0]
    for j in range(n):
        w[j] = s[j]
    floor = row_max(w) - 1.0  # tau >= max - 1 (no weight exceeds 1): the rest never enters
    count = 0
    for j in range(n):  # the candidates in order at the front of w, without a branch
        v = s[j]
        w[count] = v
        count += v > floor
    tau = floor
    for _ in range(n + 1):  # the support {s_j > tau} shrinks at each pass until it stays
        total = 0.0
        for j in range(count):
            total += w[j]
        tau = (total - 1.0) / count
        inside = 0
        for j in range(count):  # tau only grows: a score out of the last support stays out
            v = w[j]
            w[inside] = v
            inside += v > tau
        if inside == count:
            break
        count = inside
    for j in range(n):
        w[j] = max(s[j] - tau, 0.0)


@numba.njit(**OPTIONS)
def entmax15(s, w):
    """1.5-entmax exactly: with z = s / 2 sorted decreasing and S its k largest, tau_k solves
    sum_{S} (z_l - tau)^2 = 1, tau_k = mean_k - sqrt((1 - k var_k) / k) (mean_k, var_k of
    the k largest); the support is the largest k with tau_k < z_k."""
    n = s.shape[0]
    z = np.sort(s)
    total = squares = 0.0
    tau = 0.0
    for k in range(1, n + 1):
        v = 0.5 * z[n - k]
        total += v
        squares += v * v
        mean = total / k
        gap = (1.0 - (squares - k * mean * mean)) / k
        candidate = mean - np.sqrt(max(gap, 0.0))
        if candidate < v or k == 1:
            tau = candidate
        else:
            break
    for j in range(n):
        v = max(0.5 * s[j] - tau, 0.0)
        w[j] = v * v


@numba.njit(**OPTIONS)
def entmax(s, w, a):
    n = s.shape[0]
    if a == 1.5:
        entmax15(s, w)
        return
    c = a - 1.0
    power = 1.0 / c
    m = c * s[0]
    for j in range(1, n):
        m = max(m, c * s[j])
    lo, hi = m - 1.0, m - n ** (-c)  # sum >= 1 at lo, <= 1 at hi
    for _ in range(200):
        tau = 0.5 * (lo + hi)
        if tau <= lo or tau >= hi:
            break
        total = 0.0
        for j in range(n):
            v = c * s[j] - tau
            if v > 0.0:
                total += v * v if power == 2.0 else v**power
        if total >= 1.0:
            lo = tau
        else:
            hi = tau
    total = 0.0
    for j in range(n):
        v = c * s[j] - lo
        w[j] = (v * v if power == 2.0 else v**power) if v > 0.0 else 0.0
        total += w[j]
    for j in range(n):
        w[j] /= total


@numba.njit(**OPTIONS)
def kth_largest(s, k):
    """The k-th largest entry of `s` (1 <= k <= n): Hoare's quickselect on a copy, the middle
    entry of the range as pivot. After a partition of [lo, hi] the entries up to j are <= the
    pivot, those from i on >= it, and those between equal it; the search goes on in the part
    that holds rank n - k (ascending). On rows without NaN it is np.partition's value (numba's
    np.partition costs seconds to compile in every process that compiles a caller); a row with
    NaN (a state already not finite, whose run is marked so) may select other entries."""
    v = s.copy()
    target = v.shape[0] - k
    lo, hi = 0, v.shape[0] - 1
    while lo < hi:
        pivot = v[(lo + hi) // 2]
        i, j = lo, hi
        while i <= j:
            while v[i] < pivot:
                i += 1
            while v[j] > pivot:
                j -= 1
            if i <= j:
                v[i], v[j] = v[j], v[i]
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:
            break
    return v[target]


@numba.njit(**OPTIONS)
def topk(s, w, a):
    n = s.shape[0]
    k = min(max(int(a), 1), n)
    kth = kth_largest(s, k)
    m = s[0]
    above = 0
    for j in range(n):
        m = max(m, s[j])
        above += s[j] > kth
    ties = k - above  # scores equal to the k-th that enter, lowest index first
    z = 0.0
    for j in range(n):
        inside = s[j] > kth
        if s[j] == kth and ties > 0:
            inside = True
            ties -= 1
        w[j] = np.exp(s[j] - m) if inside else 0.0
        z += w[j]
    for j in range(n):
        w[j] /= z


BUILTIN = {"softmax": softmax, "usa": usa, "hardmax": hardmax, "sparsemax": sparsemax, "entmax": entmax, "topk": topk}


def row_weights(name: str, scores, a: float = 0.0) -> np.ndarray:
    """The weights the built-in row normalization `name` (one of :data:`ROW`) gives `scores`,
    one row (n,) or each row of an (m, n) array, by the same numba code an attention flow with
    that normalization runs; `a` is its own parameter (entmax's alpha, top-k's k).

    Returns an array of the shape of `scores`. Raises ValueError for another name, or scores
    of another rank."""
    if name not in BUILTIN:
        raise ValueError(f"no row normalization {name!r} (built in: {', '.join(BUILTIN)})")
    s = np.ascontiguousarray(scores, dtype=np.float64)
    if s.ndim not in (1, 2):
        raise ValueError(f"scores must be one row (n,) or rows (m, n), not shape {s.shape}")
    rows = s.reshape(-1, s.shape[-1])
    w = np.empty_like(rows)
    for i in range(rows.shape[0]):
        BUILTIN[name](rows[i], w[i], float(a))
    return w.reshape(s.shape)


def row_check(normalize, scores: np.ndarray, a: float = 0.0, tol: float = 1e-10) -> str | None:
    """None when `normalize` (a function ``f(s) -> w``) maps every row of `scores` to weights
    >= 0 summing to 1 within `tol`; else the first failure, as text."""
    for i, s in enumerate(np.asarray(scores, dtype=np.float64)):
        w = np.asarray(normalize(np.ascontiguousarray(s)), dtype=np.float64)
        if w.shape != s.shape:
            return f"returned weights of shape {w.shape} for a row of {s.shape[0]} scores"
        if not np.all(np.isfinite(w)):
            return f"returned a weight that is not finite (row {i})"
        if w.min() < 0.0:
            return f"returned a negative weight {w.min():.3g} (row {i})"
        if abs(w.sum() - 1.0) > tol:
            return f"returned weights summing to {w.sum():.17g}, not 1 (row {i})"
    return None
