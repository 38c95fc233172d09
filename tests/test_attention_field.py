"""The masked, biased, multi-head attention field (dyn.numerics.attention_field) against a slow
numpy oracle, in both numba regimes, and its exact properties."""

import numpy as np
import pytest

from dyn.numerics import _field_gemm, _field_small, _field_symmetric, attention_field as af, mean_field as mf

KERNELS = {
    "columns": _field_small.columns,
    "symmetric": _field_symmetric.symmetric,
    "gemm": _field_gemm.gemm,
    "field": af.field,
}


def oracle(x, beta, usa, causal, slope, M, V):
    """m_i = (1/H) sum_h sum_{j in N(i)} A^h_ij V_h x_j, one entry at a time."""
    n, d = x.shape
    out = np.zeros_like(x)
    for h in range(len(M)):
        for i in range(n):
            js = np.arange(i + 1) if causal else np.arange(n)
            s = np.array([beta * x[i] @ M[h] @ x[j] - slope * abs(i - j) for j in js])
            a = np.exp(s) / n if usa else np.exp(s - s.max()) / np.exp(s - s.max()).sum()
            out[i] += sum(a[k] * (V[h] @ x[j]) for k, j in enumerate(js)) / len(M)
    return out


def tokens(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def run(kernel, x, beta, usa, causal, slope, M, V, identity=False):
    n, d = x.shape
    H = len(M)
    size = max(_field_small.work_size(n, d), _field_gemm.work_size(n, d, H))
    work = np.full(size + 16, np.nan)
    out = np.empty_like(x)
    KERNELS[kernel](
        x,
        beta,
        usa,
        causal,
        slope,
        H,
        np.ascontiguousarray(M).ravel(),
        identity,
        np.ascontiguousarray(V).ravel(),
        identity,
        out,
        work,
    )
    return out


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("n,d,H", [(5, 2, 1), (32, 2, 1), (13, 3, 2), (37, 2, 3), (70, 4, 1)])
def test_matches_oracle(kernel, n, d, H):
    rng = np.random.default_rng(n * d * H)
    x = tokens(rng, n, d)
    for usa in (False, True):
        for causal in (False, True) if kernel != "symmetric" else (False,):
            for slope in (0.0, 0.4):
                for identity in (False, True):
                    M, V = (np.eye(d) + (0 if identity else 0.4) * rng.standard_normal((H, d, d)) for _ in range(2))
                    if kernel == "symmetric" or not causal:  # symmetric M_h: that path's input
                        M = M if identity else 0.5 * (M + np.swapaxes(M, 1, 2))
                    want = oracle(x, 1.7, usa, causal, slope, M, V)
                    got = run(kernel, x, 1.7, usa, causal, slope, M, V, identity)
                    np.testing.assert_allclose(
                        got,
                        want,
                        rtol=0,
                        atol=1e-13 * np.abs(want).max(),
                        err_msg=f"usa={usa} causal={causal} slope={slope} identity={identity}",
                    )


@pytest.mark.parametrize("kernel", ["columns", "symmetric", "gemm"])
def test_large_beta_falls_back_to_row_max(kernel):
    # 2 |beta| |M| R^2 > EXP_MAX_ARG: the diagonal shift could overflow, the row maximum cannot
    rng = np.random.default_rng(3)
    x = tokens(rng, 20, 3)
    M = V = np.eye(3)[None]
    for beta in (400.0, -400.0):
        for causal in (False, True) if kernel != "symmetric" else (False,):
            want = oracle(x, beta, False, causal, 0.0, M, V)
            got = run(kernel, x, beta, False, causal, 0.0, M, V, True)
            assert np.isfinite(got).all()
            np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("n,d", [(32, 2), (12, 5), (130, 4)])
def test_the_shared_mean_field_is_the_one_head_field(n, d):
    """dyn.numerics.mean_field (the flow, the token SDE, the random-init network and the noisy
    direct drift) is this field with no mask, no bias and one head: the oracle's numbers, and
    the field's own bits. With the identity flags the matrix arguments are never read: the
    callers pass the tokens there."""
    rng = np.random.default_rng(n + d)
    x = tokens(rng, n, d)
    M, V = (np.eye(d) + 0.3 * rng.standard_normal((d, d)) for _ in range(2))
    for usa in (False, True):
        for ident in (False, True):
            m, v = (x, x) if ident else (M, V)
            got = np.empty_like(x)
            mf.mean_field(x, 2.3, usa, m, ident, v, ident, got, np.empty(mf.work_size(n, d)))
            want = oracle(x, 2.3, usa, False, 0.0, [np.eye(d) if ident else M], [np.eye(d) if ident else V])
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())
            field = run(
                "field",
                x,
                2.3,
                usa,
                False,
                0.0,
                (np.eye(d) if ident else M)[None],
                (np.eye(d) if ident else V)[None],
                ident,
            )
            np.testing.assert_array_equal(got, field)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_identical_heads_are_one_head(kernel):
    rng = np.random.default_rng(5)
    causal = kernel != "symmetric"
    for n, d in ((24, 3), (90, 3)):
        x = tokens(rng, n, d)
        M, V = (np.eye(d) + 0.5 * rng.standard_normal((1, d, d)) for _ in range(2))
        M = M if causal else M + M.transpose(0, 2, 1)
        one = run(kernel, x, 1.3, False, causal, 0.2, M, V)
        four = run(kernel, x, 1.3, False, causal, 0.2, np.repeat(M, 4, 0), np.repeat(V, 4, 0))
        np.testing.assert_allclose(four, one, rtol=0, atol=1e-15 * np.abs(one).max() * 4)


@pytest.mark.parametrize("kernel", ["columns", "gemm", "field"])
def test_causal_first_token_sees_exactly_itself(kernel):
    rng = np.random.default_rng(6)
    for n in (9, 40, 150):
        x = tokens(rng, n, 3)
        eye = np.eye(3)[None]
        out = run(kernel, x, 3.0, False, True, 0.7, eye, eye, True)
        np.testing.assert_array_equal(out[0], x[0])  # A_11 = exp(0) / exp(0) = 1, exactly


@pytest.mark.parametrize("kernel", ["columns", "gemm", "field"])
def test_causal_rows_ignore_later_tokens(kernel):
    rng = np.random.default_rng(7)
    n, d, m = 40, 2, 11
    x = tokens(rng, n, d)
    M, V = (np.eye(d) + 0.3 * rng.standard_normal((2, d, d)) for _ in range(2))
    full = run(kernel, x, 2.0, False, True, 0.1, M, V)
    head = run(kernel, x[:m].copy(), 2.0, False, True, 0.1, M, V)
    np.testing.assert_allclose(full[:m], head, rtol=0, atol=1e-14)


def test_work_is_what_work_size_says():
    rng = np.random.default_rng(8)
    for n, d, H in ((32, 2, 1), (16, 3, 3), (100, 8, 2)):
        x = tokens(rng, n, d)
        M = np.eye(d)[None].repeat(H, 0) + 0.1
        size = af.work_size(n, d, H)
        work = np.full(size + 64, 7.25)
        out = np.empty_like(x)
        af.field(x, 1.0, False, True, 0.3, H, M.ravel(), False, M.ravel(), False, out, work)
        assert (work[size:] == 7.25).all()  # nothing written past work_size
        np.testing.assert_allclose(out, oracle(x, 1.0, False, True, 0.3, M, M), atol=1e-13)


def test_jax_twin():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(9)
    for n, d, H in ((11, 3, 2), (150, 4, 1)):
        x = tokens(rng, n, d)
        M, V = (np.eye(d) + 0.3 * rng.standard_normal((H, d, d)) for _ in range(2))
        for usa in (0.0, 1.0):
            for causal in (0.0, 1.0):
                want = oracle(x, 1.1, usa, causal, 0.25, M, V)
                got = np.asarray(jax.jit(af.field_jax)(x, 1.1, usa, causal, 0.25, M, V))
                np.testing.assert_allclose(got, want, atol=1e-12)


# ------------------------------------------------------------------ regimes and their crossover


def numpy_field(x, beta, usa, causal, slope, M, V):
    """The field by whole-array numpy (the oracle's formula, fast enough for n in the hundreds)."""
    n = x.shape[0]
    idx = np.arange(n)
    bias = -slope * np.abs(idx[:, None] - idx[None, :])
    allowed = idx[None, :] <= idx[:, None] if causal else np.ones((n, n), bool)
    out = np.zeros_like(x)
    for Mh, Vh in zip(M, V, strict=True):
        s = np.where(allowed, beta * x @ Mh @ x.T + bias, -np.inf)
        if usa:
            a = np.exp(s) / n
        else:
            a = np.exp(s - s.max(axis=1, keepdims=True))
            a /= a.sum(axis=1, keepdims=True)
        out += a @ (x @ Vh.T) / len(M)
    return out


def crossover_sizes():
    """(n, d) on both sides of every finite crossover of the table, and a d = 2 size past the
    symmetric path's one-block triangle (n(n+1)/2 > BLOCK_ENTRIES: the blocked code)."""
    sizes = {(520, 2), (300, 3)}
    for d, firsts in af.CROSSOVER.items():
        for first in firsts:
            if first != af.NEVER and d <= 16:
                sizes |= {(first - 1, d), (first, d)}
    return sorted(sizes)


@pytest.mark.parametrize("n,d", crossover_sizes())
def test_every_regime_matches_numpy_on_both_sides_of_the_crossover(n, d):
    """Each regime, and the field (whichever it picks), against numpy at the sizes where the
    pick changes: symmetric M (every path applies) with a bias, then a causal mask (not the
    symmetric path)."""
    rng = np.random.default_rng(n + 100 * d)
    x = tokens(rng, n, d)
    A = rng.standard_normal((d, d))
    M = (np.eye(d) + 0.2 * (A + A.T))[None]
    V = (np.eye(d) + 0.3 * rng.standard_normal((d, d)))[None]
    for causal in (False, True):
        want = numpy_field(x, 1.3, False, causal, 0.05, M, V)
        for kernel in ("columns", "gemm", "field") + (() if causal else ("symmetric",)):
            got = run(kernel, x, 1.3, False, causal, 0.05, M, V)
            np.testing.assert_allclose(
                got, want, rtol=0, atol=1e-13 * np.abs(want).max(), err_msg=f"{kernel} causal={causal}"
            )


@pytest.mark.parametrize("d", sorted(af.CROSSOVER))
def test_the_field_takes_the_regime_of_the_table(d):
    """Below its crossover n a path stays in the small regime, from it on the field runs GEMM;
    the field's numbers are the chosen kernel's bit for bit, in exactly work_size floats."""
    rng = np.random.default_rng(d)
    for path, column, causal in ((af.SYMMETRIC, 0, False), (af.COLUMNS, 1, True)):
        first = af.CROSSOVER[d][column]
        assert af.regime(first - 1, d, 1, causal, True) == path
        assert af.regime(min(first, 1 << 20), d, 1, causal, True) == (af.GEMM if first != af.NEVER else path)
        for n in (first - 1, first) if first <= 64 else (17,):
            which = af.regime(n, d, 1, causal, True)
            name = {af.GEMM: "gemm", af.SYMMETRIC: "symmetric", af.COLUMNS: "columns"}[which]
            x = tokens(rng, n, d)
            eye = np.eye(d).ravel()
            size = af.work_size(n, d, 1)
            work = np.full(size, np.nan)
            out = np.empty_like(x)
            af.field(x, 2.0, False, causal, 0.0, 1, eye, True, eye, True, out, work)
            alone = run(name, x, 2.0, False, causal, 0.0, np.eye(d)[None], np.eye(d)[None], True)
            assert np.array_equal(out, alone), f"n={n}: the field is not {name}"


def test_symmetric_blocks_cover_the_triangle_in_whole_groups():
    from dyn.numerics._field_symmetric import BLOCK_ENTRIES, _block_end

    for n in (5, 32, 127, 128, 300, 2048, 5000):
        j0, ends = 0, []
        while j0 < n:
            j1 = _block_end(j0, n, BLOCK_ENTRIES)
            entries = sum(j + 1 for j in range(j0, j1))
            assert j1 > j0 and (j1 % 4 == 0 or j1 == n)
            assert entries <= max(BLOCK_ENTRIES, sum(j + 1 for j in range(j0, min(j0 + 4, n))))
            ends.append(j1)
            j0 = j1
        assert ends[-1] == n and (len(ends) == 1) == (n * (n + 1) // 2 <= BLOCK_ENTRIES)


@pytest.mark.parametrize("n", [4, 8, 12, 32, 64, 128])
def test_vectorized_circle_scores_are_the_general_ones(n):
    """d = 2: the vectorized score pass of the symmetric path gives the general score pass's
    triangle bit for bit (equality, not a tolerance, is its docstring's claim: the main
    ensembles keep their numbers)."""
    rng = np.random.default_rng(n)
    d, nd = 2, 2 * n
    w = 5 * nd + 2 * n
    entries = n * (n + 1) // 2
    for beta in (1.0, -2.5, 9.0):
        x = rng.standard_normal((n, d))
        x *= rng.uniform(0.5, 1.5, (n, 1)) / np.linalg.norm(x, axis=1, keepdims=True)
        work = np.zeros(_field_small.work_size(n, d))
        c = abs(beta) * _field_small._transpose(x, work, 0, w - n)
        assert _field_symmetric._upper_scores(work, w, 0, 0, beta, n, d, 0.0, c, 0, n) == entries
        general = work[w : w + entries].copy()
        work[w : w + entries] = np.nan
        assert _field_symmetric._upper_scores2(work, w, 0, 0, n, beta, c, 0, n) == entries
        assert np.array_equal(work[w : w + entries].view(np.int64), general.view(np.int64))
        # c bounds every score: s - c in [-2c, 0] up to the rounding at the largest norm
        assert np.all((general >= -2 * c * (1 + 1e-14)) & (general <= 1e-14 * c))


def test_vectorized_exp_is_its_scalar_form():
    """exp_inplace in 512-bit vectors (where the CPU has them) gives, element by element, the
    bits of its scalar remainder loop (length-1 calls), and exp to 1 ulp or so."""
    from dyn.numerics.vexp import exp_inplace

    rng = np.random.default_rng(3)
    y = np.concatenate([-rng.uniform(0, 5, 997), -rng.uniform(0, 700, 997), [0.0, -708.4]])
    vector = y.copy()
    exp_inplace(vector, 0.0)
    scalar = y.copy()
    for i in range(y.size):
        exp_inplace(scalar[i : i + 1], 0.0)
    assert np.array_equal(vector.view(np.int64), scalar.view(np.int64))
    inside = y >= -708.0  # below EXP_MIN the argument is clamped (documented)
    assert np.allclose(vector[inside], np.exp(y[inside]), rtol=4e-16, atol=0)


def test_circle_transpose_and_normalization_are_the_general_ones():
    """d = 2: the specialised column copy (with max |x_i|^2, which sets the shift c) and the
    one-head normalization give the general helpers' bits (equality: the main ensembles keep
    their numbers)."""
    from dyn.numerics._field_symmetric import _normalize2, _transpose2

    rng = np.random.default_rng(11)
    for n in (3, 16, 32, 33):
        x = rng.standard_normal((n, 2)) * rng.uniform(0.2, 3.0, (n, 1))
        general, special = np.zeros(4 * n), np.zeros(4 * n)
        r2 = _field_small._transpose(x, general, 0, 2 * n)
        assert _transpose2(x, special, 0) == r2  # bit for bit
        assert r2 == pytest.approx(np.max(np.sum(x * x, axis=1)), rel=1e-15)  # (fma vs numpy)
        assert np.array_equal(special[: 2 * n], general[: 2 * n])
        sums = rng.uniform(0.5, 3.0, 3 * n)
        for usa, weight in ((False, 0.0), (True, 0.37)):
            work = np.concatenate([sums, np.zeros(2 * n)])
            expected = np.empty((n, 2))
            for i in range(n):
                work[i] = weight if usa else 1.0 / work[i]
            _field_small._combine(work, 0, 3 * n, expected, n, 2, 0, 1)
            out = np.empty((n, 2))
            work = np.concatenate([sums, np.zeros(2 * n)])
            _normalize2(work, 0, out, weight, usa)
            assert np.array_equal(out, expected)


@pytest.mark.parametrize("n", [4, 8, 12, 16, 32, 64])
def test_circle_sums_are_the_general_ones(n):
    """d = 2: the symmetric path's sums with the small triangles in registers give the general
    sums, over x itself and over other values (V x). While every row is below 12 both sum in
    row order: bit for bit. From 12 rows on the general loop is in LLVM's vectorized order,
    whose width is the CPU's: bit for bit where it takes four rows a step (the
    explicit order written in _upper_accumulate2), else the same sums to rounding (n eps of the
    largest sum; one missing or doubled term would be a thousand times more)."""
    from dyn.numerics.vexp import exp_inplace

    rng = np.random.default_rng(100 + n)
    d, nd = 2, 2 * n
    w = 5 * nd + 2 * n
    sums = 4 * nd
    for trial in range(4):
        x = rng.standard_normal((n, d))
        x *= rng.uniform(0.3, 1.5, (n, 1)) / np.linalg.norm(x, axis=1, keepdims=True)
        beta = rng.uniform(-4.0, 9.0)
        work = np.zeros(_field_small.work_size(n, d))
        c = abs(beta) * _field_small._transpose(x, work, 0, w - n)
        entries = _field_symmetric._upper_scores(work, w, 0, 0, beta, n, d, 0.0, c, 0, n)
        exp_inplace(work[w : w + entries], 0.0)
        values = 0 if trial % 2 else 2 * nd
        work[2 * nd : 3 * nd] = rng.standard_normal(nd)
        _field_symmetric._upper_accumulate(work, w, values, sums, n, d)
        general = work[sums : sums + 3 * n].copy()
        work[sums : sums + 3 * n] = np.nan
        _field_symmetric._upper_accumulate2(work, w, values, sums, n)
        got = work[sums : sums + 3 * n]
        if n <= 12:
            assert np.array_equal(got.view(np.int64), general.view(np.int64))
        else:
            np.testing.assert_allclose(got, general, rtol=0, atol=n * np.spacing(np.abs(general).max()))
        # the row sums Z_i = sum_j e_ij against numpy (weights e_ij = exp(s_ij - c))
        e = np.exp(beta * x @ x.T - c)
        assert np.allclose(general[:n], e.sum(axis=1), rtol=1e-13)


def test_circle_blocks_are_the_general_blocks():
    """d = 2 beyond one block (n = 520: the triangle in column blocks): the vectorized scores
    and the block sums give the general blocked passes' bits."""
    from dyn.numerics._field_symmetric import BLOCK_ENTRIES, CIRCLE_BLOCK, _block_end
    from dyn.numerics.vexp import exp_inplace

    rng = np.random.default_rng(520)
    n, d = 520, 2
    nd = n * d
    w, sums = 5 * nd + 2 * n, 4 * nd
    x = rng.standard_normal((n, d))
    x *= rng.uniform(0.5, 1.5, (n, 1)) / np.linalg.norm(x, axis=1, keepdims=True)
    work = np.zeros(_field_small.work_size(n, d))
    c = 3.0 * _field_small._transpose(x, work, 0, w - n)
    work[2 * nd : 3 * nd] = rng.standard_normal(nd)
    special = work.copy()
    j0, blocks = 0, 0
    while j0 < n:  # the general blocks, each in the circle's smaller blocks (the same sums)
        j1 = _block_end(j0, n, BLOCK_ENTRIES)
        entries = _field_symmetric._upper_scores(work, w, 0, 0, 3.0, n, d, 0.0, c, j0, j1)
        scores = special.copy()
        assert _field_symmetric._upper_scores2(scores, w, 0, 0, n, 3.0, c, j0, j1) == entries
        exp_inplace(work[w : w + entries], 0.0)
        exp_inplace(scores[w : w + entries], 0.0)
        assert np.array_equal(scores[w : w + entries], work[w : w + entries])
        _field_symmetric._upper_accumulate_block(work, w, 2 * nd, sums, n, d, j0, j1)
        k0 = j0
        while k0 < j1:
            k1 = min(_block_end(k0, n, CIRCLE_BLOCK), j1)
            count = _field_symmetric._upper_scores2(special, w, 0, 0, n, 3.0, c, k0, k1)
            exp_inplace(special[w : w + count], 0.0)
            _field_symmetric._upper_accumulate2_block(special, w, 2 * nd, sums, n, k0, k1)
            k0, blocks = k1, blocks + 1
        j0 = j1
    assert blocks > 2
    assert np.array_equal(special[sums : sums + 3 * n].view(np.int64), work[sums : sums + 3 * n].view(np.int64))


def test_the_python_regime_is_the_kernels_and_a_fixed_regime_holds_for_every_n():
    """af.regime_of (Python: it sizes the scratch without loading a kernel) picks as
    af.regime does; af.fixed_regime names a regime exactly where the table's GEMM crossover
    of that small path is NEVER (every n takes it), and None where some n takes GEMM."""
    ns = (1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 1024, 4096)
    for d in (1, 2, 3, 4, 5, 6, 8, 12, 16, 17, 40, 64, 100, 256, 300):
        for causal in (False, True):
            for symmetric_m in (False, True):
                picks = {af.regime_of(n, d, 1, causal, symmetric_m) for n in ns}
                assert all(
                    af.regime_of(n, d, 2, causal, symmetric_m) == af.regime(n, d, 2, causal, symmetric_m) for n in ns
                )
                fixed = af.fixed_regime(d, causal, symmetric_m)
                path = af.SYMMETRIC if symmetric_m and not causal else af.COLUMNS
                if fixed is None:
                    assert af.GEMM in picks, (d, causal, symmetric_m)
                else:
                    assert picks == {fixed} == {path}, (d, causal, symmetric_m)
    # the table's NEVER entries are the fixed regimes: d = 2 both paths, d = 3 the symmetric one
    assert af.fixed_regime(2, True, False) == af.COLUMNS
    assert af.fixed_regime(2, False, True) == af.SYMMETRIC
    assert af.fixed_regime(3, False, True) == af.SYMMETRIC
    assert af.fixed_regime(3, True, False) is None and af.fixed_regime(4, False, True) is None


def test_symmetric_matrices_read_the_blocks_as_the_kernel_does():
    from dyn.numerics._field_symmetric import symmetric_blocks

    rng = np.random.default_rng(5)
    d, H = 3, 2
    A = rng.standard_normal((H, d, d))
    cases = {"asymmetric": A, "symmetric": A + A.transpose(0, 2, 1)}
    one = cases["symmetric"].copy()
    one[1, 0, 2] = np.nextafter(one[1, 0, 2], np.inf)  # one head off by an ulp: not symmetric
    cases["one head off"] = one
    nan_diagonal = cases["symmetric"].copy()
    nan_diagonal[0, 1, 1] = np.nan  # the diagonal is not compared
    cases["NaN on the diagonal"] = nan_diagonal
    nan_off = cases["symmetric"].copy()
    nan_off[0, 0, 1] = nan_off[0, 1, 0] = np.nan  # NaN equals nothing
    cases["NaN off the diagonal"] = nan_off
    for name, M in cases.items():
        flat = np.ascontiguousarray(M.ravel())
        for m_id in (False, True):
            assert af.symmetric_matrices(H, d, flat, m_id) == symmetric_blocks(H, d, flat, m_id), name
    assert not af.symmetric_matrices(H, d, A.ravel(), False)
    assert af.symmetric_matrices(H, d, cases["symmetric"].ravel(), False)
