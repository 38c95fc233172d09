r"""Sinkhorn attention in the log domain (numba), from a score matrix S in R^{n x n}.

    K^0 = exp(S),   K^k_ij = exp(S_ij + f_i + g_j),
    odd k:  f_i <- -log sum_j exp(S_ij + g_j)      (rows of K^k sum to 1)
    even k: g_j <- -log sum_i exp(S_ij + f_i)      (columns of K^k sum to 1)

One iteration is one normalization, so K^1 = softmax(S) row by row; K^inf is the doubly
stochastic matrix ``n pi`` where pi is the entropic optimal plan with cost -S, regularization 1
and uniform marginals 1/n.

The potentials f, g are the state; exponentials are only ever taken of ``S_ij + g_j - shift_i``
with ``shift_i`` bounding the row, so small bandwidths (scores of size 1/tau) never overflow.
After iteration 1 the bound is free: once one side is normalized every entry of the current plan
is <= 1, so the previous potential of the other side is a valid shift (no max pass); the pass
also yields that side's current marginal, i.e. the distance from doubly stochastic, at no cost.
A row whose shifted sum underflows (far from convergence, tiny tau) is redone with its exact max.
Column passes read the transpose ``ST`` (the same array when S is symmetric).
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

from integrators.numba.abi import F1, F2, FASTMATH, NJIT
from integrators.numba.arrays import copy1
from integrators.numba.jit import njit

from ..numerics.vexp import exp_inplace, row_max, row_sum

# A shifted row sum below this (or not finite) is recomputed with the row's exact maximum:
# far above the smallest normal double, so the redone row keeps full relative precision.
TINY = 1e-200

STORE_NONE, STORE_NORMALIZED, STORE_CURRENT = 0, 1, 2


_PASS_SIG = types.float64(F2, F1, F1, F1, types.boolean, types.int64, F2, F1)


@njit(_PASS_SIG, **NJIT, fastmath=FASTMATH)
def _normalize(S, other, pot, new, first, store, P, w):
    """One normalization of the rows of exp(S_ij + pot_i + other_j): new_i = -log sum_j exp(S_ij + other_j).

    Returns max_i |r_i - 1|, r_i the row sums before the pass (meaningless when ``first``).
    ``store``: STORE_NORMALIZED writes the normalized rows into P, STORE_CURRENT the rows as they
    were before the pass (the current plan), STORE_NONE nothing.
    """
    n, m = S.shape
    err = 0.0
    for i in range(n):
        row = S[i]
        buf = P[i] if store != STORE_NONE else w
        for j in range(m):
            buf[j] = row[j] + other[j]
        shift = row_max(buf) if first else -pot[i]
        exp_inplace(buf, shift)
        z = row_sum(buf)
        if not (TINY <= z <= 1e300):  # underflow, or a NaN: redo with the exact maximum
            for j in range(m):
                buf[j] = row[j] + other[j]
            shift = row_max(buf)
            exp_inplace(buf, shift)
            z = row_sum(buf)
        back = math.exp(shift + pot[i])  # row sum before the pass = z * back
        e = abs(z * back - 1.0)
        if not (e <= err):  # keeps a NaN
            err = e
        if store == STORE_NORMALIZED:
            inv = 1.0 / z
            for j in range(m):
                buf[j] *= inv
        elif store == STORE_CURRENT:
            for j in range(m):
                buf[j] *= back
        new[i] = -(shift + math.log(z))
    return err


_SINKHORN_SIG = types.UniTuple(types.int64, 2)(F2, F2, types.int64, types.float64, F1, F1, F2, F1)


@njit(_SINKHORN_SIG, **NJIT)
def sinkhorn_kernel(S, ST, iterations, tol, f, g, P, errors):
    """Up to ``iterations`` normalizations of exp(S); returns (k, transposed).

    k: the iterations in the result K^k; f, g: its potentials; P: K^k, or (K^k)^T if
    ``transposed``. ``tol > 0``: stop at the first K^k (k >= 1) whose row and column sums are all
    within tol of 1 (k = iterations if none is). ``errors[k-1]`` = max |marginal - 1| of K^k for
    every k measured (the last one only in tolerance mode; unmeasured entries are NaN).
    """
    n = S.shape[0]
    w = np.empty(n)
    new = np.empty(n)
    f[:] = 0.0
    g[:] = 0.0
    errors[:] = np.nan
    stop_on_tol = tol > 0.0
    for k in range(1, iterations + 1 + (1 if stop_on_tol else 0)):
        # pass k builds K^k, and measures K^{k-1} on the side it normalizes
        if k == iterations:
            store = STORE_NORMALIZED
        elif stop_on_tol and 2 <= k < iterations:
            store = STORE_CURRENT
        else:
            store = STORE_NONE
        rows = k % 2 == 1
        if rows:
            err = _normalize(S, g, f, new, k == 1, store, P, w)
        else:
            err = _normalize(ST, f, g, new, False, store, P, w)
        if 2 <= k <= errors.shape[0] + 1:
            errors[k - 2] = err
        if k >= 2 and stop_on_tol and err <= tol:
            if k > iterations:  # the measuring pass: P still holds K^iterations
                return iterations, 1 if iterations % 2 == 0 else 0
            return k - 1, 0 if rows else 1  # P holds K^{k-1} as this pass's rows; potentials unchanged
        if k <= iterations:
            if rows:
                copy1(f, new)
            else:
                copy1(g, new)
    return iterations, 1 if iterations % 2 == 0 else 0


_SYMMETRIC_SIG = types.int64(F2, types.int64, types.float64, F1, F2, F1)


@njit(_SYMMETRIC_SIG, **NJIT, fastmath=FASTMATH)
def symmetric_kernel(S, passes, tol, f, P, errors):
    """K^inf for a symmetric S by the averaged fixed point f <- (f - log sum_j exp(S_ij + f_j)) / 2.

    Its fixed point makes K_ij = exp(S_ij + f_i + f_j) symmetric with unit row sums, i.e. the same
    doubly stochastic K^inf as alternating Sinkhorn, but in tens of passes where alternating
    normalizations of a small-bandwidth kernel need thousands (the slow mode of the Markov kernel).
    Stops at the first K whose row (= column) sums are within ``tol`` of 1, or after ``passes``
    updates of f (then K is the plan of the last f, as the JAX twin returns); returns the passes
    made; P <- K, f <- its potential. ``errors[k]``: max |row sum - 1| of the plan after k passes.
    """
    n = S.shape[0]
    new = np.empty(n)
    f[:] = 0.0
    errors[:] = np.nan
    for k in range(passes + 1):
        err = 0.0
        for i in range(n):
            row = S[i]
            buf = P[i]
            for j in range(n):
                buf[j] = row[j] + f[j]
            shift = row_max(buf)  # no free bound here: rows of the current plan are not normalized
            exp_inplace(buf, shift)
            z = row_sum(buf)
            back = math.exp(shift + f[i])
            e = abs(z * back - 1.0)
            if not (e <= err):
                err = e
            for j in range(n):
                buf[j] *= back
            new[i] = 0.5 * (f[i] - (shift + math.log(z)))
        if k < errors.shape[0]:
            errors[k] = err
        if err <= tol or k == passes:
            return k
        copy1(f, new)
    return passes


# ---------------------------------------------------------------------------------------------
# numpy-facing entry points


def sinkhorn(S, iterations: int = 1, tol: float = 0.0):
    """Sinkhorn attention from scores ``S`` (n, n): ``(K, f, g, k, errors)``.

    K = K^k with K_ij = exp(S_ij + f_i + g_j) after k alternating normalizations (rows first):
    k = ``iterations``, or the first k whose row and column sums are within ``tol`` of 1 when
    ``tol > 0`` (``iterations`` is then the cap). ``iterations = 1`` is softmax.
    ``errors[k-1]``: max |marginal - 1| of K^k for the k measured (NaN otherwise).
    With ``tol > 0`` and a symmetric S the result is reached by the symmetric fixed point
    (:func:`symmetric_kernel`): then k counts its passes, g = f, and errors are per pass.
    """
    S = np.ascontiguousarray(S, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1] or S.shape[0] < 1:
        raise ValueError(f"S must be a square (n, n) score matrix, got shape {S.shape}")
    iterations, tol = _check_iterations(iterations, tol)
    n = S.shape[0]
    f, g, P = np.empty(n), np.empty(n), np.empty((n, n))
    errors = np.empty(iterations)
    symmetric = np.array_equal(S, S.T)
    if symmetric and tol > 0.0:
        k = symmetric_kernel(S, iterations, tol, f, P, errors)
        return P, f, f.copy(), int(k), errors
    ST = S if symmetric else np.ascontiguousarray(S.T)
    k, transposed = sinkhorn_kernel(S, ST, iterations, tol, f, g, P, errors)
    K = np.ascontiguousarray(P.T) if transposed else P
    return K, f, g, int(k), errors


def softmax(S) -> np.ndarray:
    """Row softmax of ``S``: Sinkhorn with one iteration."""
    return sinkhorn(S, 1)[0]


def marginal_error(K) -> float:
    """Distance from doubly stochastic: max over rows and columns of |sum - 1|."""
    K = np.asarray(K, dtype=np.float64)
    return float(max(np.abs(K.sum(axis=1) - 1).max(), np.abs(K.sum(axis=0) - 1).max()))


def _check_iterations(iterations, tol):
    if isinstance(iterations, bool) or int(iterations) != iterations or int(iterations) < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    tol = float(tol)
    if not (math.isfinite(tol) and tol >= 0.0):
        raise ValueError(f"tol must be finite and >= 0, got {tol!r}")
    return int(iterations), tol
