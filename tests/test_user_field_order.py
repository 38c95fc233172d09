"""The generated drifts of dyn.particles and dyn.attention_particles give the numbers of the plain
row-by-row formula bit for bit (every sum over j adds j = 0 .. n-1 in order, whatever the loop
order of the compiled code; attention's softmax, which runs the engine's field, to 1e-13), and
dyn.particles evaluates a phi of the scores alone once per
unordered pair (w_ij = w_ji: s_ij = s_ji exactly), a phi of the positions once per pair."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import dyn
from dyn.user import attention_jit, normalize


def _tallied(s, tally, beta):
    tally[0] += 1.0  # the vector parameter is a view of the packed values: a call counter
    return np.exp(beta * s)


def _tallied_positions(s, i, j, tally, beta):
    tally[0] += 1.0
    return np.exp(beta * s) * (1.0 + 0.125 * (i - j))


PARAMS = {"tally": dyn.Field("vector", [0.0], "calls of phi"), "beta": dyn.Field("float", 1.0, "beta")}
Tallied = dyn.particles(_tallied, name="Tallied", params=PARAMS)
TalliedPositions = dyn.particles(
    _tallied_positions, name="TalliedPositions", params=PARAMS, geometry="euclidean", normalization="USA"
)


def _drift(cls, x, p):
    out = np.empty_like(x)
    work = np.full(cls.work_size(*x.shape, p), np.nan)  # the drift reads no float it did not write
    cls.numba_function("drift")(0.0, x, p, out, work)
    return out


def _particles_reference(phi, positions, x, beta, normalization, euclidean):
    """out_i = (sum_j w_ij r_ij) / z_i, each sum from 0.0 in the order j = 0 .. n-1 (Python
    floats: the same roundings, no fused operations), w_ij = phi(s_ij, ...) by the compiled phi
    (libm's exp: numpy's own differs in the last bit)."""
    phi = numba.njit(cache=True)(phi)
    tally = np.zeros(1)
    n, d = x.shape
    out = np.empty_like(x)
    for i in range(n):
        w = []
        for j in range(n):
            s = 0.0
            for k in range(d):
                s += float(x[i, k]) * float(x[j, k])
            w.append(phi(s, i, j, tally, beta) if positions else phi(s, tally, beta))
        z = 1.0
        if normalization == "SA":
            z = 0.0
            for j in range(n):
                z += w[j]
        elif normalization == "USA":
            z = float(n)
        for k in range(d):
            acc = 0.0
            for j in range(n):
                acc += w[j] * (float(x[j, k]) - float(x[i, k]) if euclidean else float(x[j, k]))
            out[i, k] = acc / z
    return out


def test_particles_drift_is_the_row_by_row_formula_bit_for_bit():
    rng = np.random.default_rng(5)
    for cls, positions, normalization, euclidean in [
        (Tallied, False, "SA", False),
        (TalliedPositions, True, "USA", True),
    ]:
        for n, d in [(1, 3), (9, 3), (37, 2)]:  # 37: past one tile of pairs
            x = rng.standard_normal((n, d))
            if not euclidean:
                x /= np.linalg.norm(x, axis=1, keepdims=True)
            got = _drift(cls, x, cls.pack({"tally": [0.0], "beta": 1.7}))
            want = _particles_reference(cls.interaction, positions, x, 1.7, normalization, euclidean)
            assert np.array_equal(got.view(np.int64), want.view(np.int64)), (cls.__name__, n)


def test_a_phi_of_the_scores_runs_once_per_unordered_pair():
    rng = np.random.default_rng(6)
    for n in (1, 5, 40):
        x = rng.standard_normal((n, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        for cls, calls in ((Tallied, n * (n + 1) // 2), (TalliedPositions, n * n)):
            p = cls.pack({"tally": [0.0], "beta": 1.0})
            at = int(p[0])  # the vector's offset (its length first)
            _drift(cls, x, p)
            assert p[at + 1] == calls, (cls.__name__, n)


Sparse = dyn.attention_particles(name="SparseR", normalization="sparsemax", geometry="euclidean")
Soft = dyn.attention_particles(name="SoftR")  # the engine's field, with M_h = Q_h^T K_h


def _linear(a, x):
    """The rows a x_i, each entry summed in order."""
    n, d = x.shape
    rows = [[0.0] * d for _ in range(n)]
    for i in range(n):
        for m in range(d):
            acc = 0.0
            for c in range(d):
                acc += float(a[m, c]) * float(x[i, c])
            rows[i][m] = acc
    return rows


def _attention_reference(x, beta, q, k, v, row, euclidean):
    """(1/H) sum_h sum_j A^h_ij V_h x_j (or V_h (x_j - x_i)) in Python floats, each sum in
    order; A^h_i. = row(s^h_i.) by the compiled normalization."""
    n, d = x.shape
    heads = q.shape[0]
    out = np.zeros_like(x)
    for h in range(heads):
        qx, kx, vx = (_linear(a[h], x) for a in (q, k, v))
        for i in range(n):
            s = np.empty(n)
            for j in range(n):
                acc = 0.0
                for m in range(d):
                    acc += qx[i][m] * kx[j][m]
                s[j] = beta * acc
            w = np.empty(n)
            row(s, w, 0.0)
            total = 0.0
            sums = [0.0] * d
            for j in range(n):
                total += float(w[j])
                for m in range(d):
                    sums[m] += float(w[j]) * vx[j][m]
            for m in range(d):
                value = sums[m] - total * vx[i][m] if euclidean else sums[m]
                out[i, m] += value / heads
    return out


@pytest.mark.slow  # two drifts to compile: a few seconds of CPU on a cold cache
def test_attention_drift_is_the_row_by_row_formula_bit_for_bit():
    rng = np.random.default_rng(7)
    for cls, row, euclidean in ((Sparse, normalize.sparsemax, True), (Soft, normalize.softmax, False)):
        for n, d, heads in [(3, 2, 1), (19, 3, 2)]:  # 19: two blocks of rows
            x = rng.standard_normal((n, d))
            q, k, v = rng.standard_normal((3, heads, d, d))
            p = attention_jit.pack(2.5, 0.0, 0, q, k, v)
            out = np.empty_like(x)
            work = np.full(cls.work_size(n, d, p), np.nan)
            cls.numba_function("drift")(0.0, x, p, out, work)
            want = _attention_reference(x, 2.5, q, k, v, row, euclidean)
            if cls is Soft:  # the engine's own order of sums and its exp
                np.testing.assert_allclose(out, want, rtol=0, atol=1e-13 * np.abs(want).max())
            else:
                assert np.array_equal(out.view(np.int64), want.view(np.int64)), (cls.__name__, n)


def test_row_max_is_exact_and_softmax_keeps_its_bits_with_it():
    """normalize.row_max is the maximum of the entries that are not NaN, and the softmax's
    bits are those of e^{s_j - m} / z with the engine's row maximum (zeros of either sign,
    ties and wide scales included)."""
    from dyn.numerics import vexp

    rng = np.random.default_rng(8)
    for trial in range(300):
        n = int(rng.integers(1, 80))
        s = rng.standard_normal(n) * (1e-3, 1.0, 40.0)[trial % 3]
        if trial % 4 == 0:
            s[rng.integers(0, n, n // 2 + 1)] = 0.0
            s[rng.integers(0, n, n // 3 + 1)] = -0.0
        if trial % 5 == 0:
            s = np.round(s)
        assert normalize.row_max(s) == s.max()
        w = np.empty(n)
        normalize.softmax(s, w, 0.0)
        e = s.copy()
        vexp.exp_inplace(e, vexp.row_max(e))
        want = e / vexp.row_sum(e)
        assert np.array_equal(w.view(np.int64), want.view(np.int64))
    s = np.array([1.0, np.nan, 3.0, -2.0])
    assert normalize.row_max(s) == 3.0


def _michelot(s):
    """Sparsemax by Michelot's passes in Python floats, each support's sum in index order."""
    n = len(s)
    total = 0.0
    for v in s:
        total += v
    tau, count = (total - 1.0) / n, n
    for _ in range(n + 1):
        total, inside = 0.0, 0
        for v in s:
            if v > tau:
                total += v
                inside += 1
        tau = (total - 1.0) / inside
        if inside == count:
            break
        count = inside
    return np.array([max(v - tau, 0.0) for v in s])


def test_sparsemax_is_michelots_passes_bit_for_bit():
    rng = np.random.default_rng(9)
    for trial in range(200):
        n = int(rng.integers(1, 60))
        s = rng.standard_normal(n) * (0.05, 1.0, 30.0)[trial % 3]
        if trial % 4 == 0:
            s = np.round(s * 4) / 4  # ties
        w = np.empty(n)
        normalize.sparsemax(s, w, 0.0)
        want = _michelot([float(v) for v in s])
        assert np.array_equal(w.view(np.int64), want.view(np.int64)), trial
