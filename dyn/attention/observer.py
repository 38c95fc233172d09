r"""The pair observables of :mod:`.observables`, taken inside the solver's step loop.

:func:`pair_observer` is an :class:`integrators.Observer`: at every save time of a numba
fixed-step solve it writes one row per run,

    [pair_fraction, min_inner, sum_ij e^{beta G_ij}, label_1, ..., label_n, sum_i x_i]
                                                      (labels and the token sum if asked)

(where only counts of the labels are wanted, ``early``: in place of the n labels the three
:data:`COUNTS` [clusters, tokens labelled < 1, tokens labelled < early], all that the cluster
count and the held fractions read, 3 columns instead of n) from the state while it is in
cache, with :func:`.observables.pairs_and_clusters`' own arithmetic (its pass, or on the
circle without exps :func:`close_fraction_paired` for the pair fraction alone, the count of
:func:`.observables.close_fraction` in half the loops, :func:`close_rows_joined` (or
:func:`close_rows_counted`) with the clusters from bit masks up to MASK_TOKENS tokens, and
:func:`.observables.close_rows` then :func:`.observables.join_rows` above: the same sums G_ij,
so pair fraction, min inner product and labels are bit for bit those of the states), so no
state is stored. :func:`split_rows`
turns the rows into that function's ``(stats, labels)`` (or the stats and the counts).

The exp sum is read, when it can be, from the attention field the drift has just evaluated at
the same state (the observer runs right after it): the symmetric path leaves its shift c and
sum_i Z_i, Z_i = sum_j e^{beta G_ij - c}, so sum_ij e^{beta G_ij} = e^c sum_i Z_i with no exp
of its own. That holds when the field's scores are beta G_ij of the state itself: the tokens
are the state (post-LN, nGPT), M = I, no bias, no mask (``from_field``). Elsewhere, or where the
field took another path (it then leaves NaN there: the solver starts the drift's workspace as
NaN; a sum outside (0, n^2] is not taken either), the observer exponentiates as the pair pass
does. The two sums agree to rounding: the field forms e^{beta G_ij - c} with its own shift
and summation order.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types

import integrators
from integrators.numba.abi import F1, F2, NJIT, OBSERVE_SIG
from integrators.numba.jit import njit

from .observables import N_PAIR_STATS, _delta, _least_lanes, _pair_pass, close_rows, join_rows

# pair_row's larger helpers: each compiled once, with pair_row (their only caller), into a
# library that pair_row's links, and not cached alone. numba's inline="always" is kept for the
# small ones: it copies a callee's IR into each call site and types it again there, which for
# these nested bodies cost most of pair_row's first compile.
HELPER = {k: v for k, v in NJIT.items() if k != "cache"}

THRESHOLD, BETA, JOIN, FROM_FIELD, TOKEN_SUM, LEAST, EARLY = range(7)  # the observer's vector q
# the counts a row holds in place of the labels: clusters (the tokens labelling their own
# cluster), the tokens of token 1's cluster (label < 1) and of the first `early` tokens'
# clusters (label < early; labels are the clusters' smallest tokens)
COUNTS = ("clusters", "held_by_first", "held_by_early")
N_COUNTS = len(COUNTS)
PAD = 8  # the fast passes' rows run over a multiple of this many columns (4 lanes, unrolled twice)


@njit(types.float64(F2, types.float64, F1), **NJIT)
def close_fraction_paired(x, threshold, xt):
    """The pair fraction of :func:`.observables.close_fraction` (x (n, 2); scratch xt:
    2 (n + PAD) floats, the two coordinates of the tokens one after the other, each padded),
    the same count: rows go four at a time over the columns past them (each column's
    coordinates read once for four rows, a quarter of the loops and of their set-up), each
    loop over a multiple of PAD columns (a whole number of the vector loop's turns), the
    columns past n NaN, never close; the six pairs inside each four and those of the last
    n % 4 rows one by one. G_ij is x_i1 x_j1 + x_i2 x_j2 without the pass's leading 0 + (that
    sum is the pass's except when x_i1 x_j1 is -0.0, and then it differs only in the sign of a
    zero G, which compares with the threshold alike; a NaN compares false in both). Four rows
    at a time over padded rows keeps every inner loop a whole number of vector turns."""
    n = x.shape[0]
    pairs = n * (n - 1) // 2
    width = n + PAD
    x0 = xt[:width]
    x1 = xt[width : 2 * width]
    for i in range(n):
        x0[i] = x[i, 0]
        x1[i] = x[i, 1]
    for i in range(n, width):
        x0[i] = np.nan
        x1[i] = np.nan
    close = 0
    i = 0
    while i + 4 <= n:
        a0, a1 = x0[i], x1[i]
        b0, b1 = x0[i + 1], x1[i + 1]
        e0, e1 = x0[i + 2], x1[i + 2]
        f0, f1 = x0[i + 3], x1[i + 3]
        near = (
            ((a0 * b0 + a1 * b1) > threshold)
            + ((a0 * e0 + a1 * e1) > threshold)
            + ((a0 * f0 + a1 * f1) > threshold)
            + ((b0 * e0 + b1 * e1) > threshold)
            + ((b0 * f0 + b1 * f1) > threshold)
            + ((e0 * f0 + e1 * f1) > threshold)
        )
        padded = (n - 4 - i + PAD - 1) // PAD * PAD
        c0 = x0[i + 4 : i + 4 + padded]
        c1 = x1[i + 4 : i + 4 + padded]
        for m in range(padded):
            near += (
                ((a0 * c0[m] + a1 * c1[m]) > threshold)
                + ((b0 * c0[m] + b1 * c1[m]) > threshold)
                + ((e0 * c0[m] + e1 * c1[m]) > threshold)
                + ((f0 * c0[m] + f1 * c1[m]) > threshold)
            )
        close += near
        i += 4
    for k in range(i, n):  # the last n % 4 rows, among themselves
        for j in range(k + 1, n):
            close += (x0[k] * x0[j] + x1[k] * x1[j]) > threshold
    return close / pairs if pairs else 1.0


MASK_TOKENS = 64  # the most tokens whose close pairs fit one int64 mask per token


@njit(inline="always", **NJIT)
def _popcount(mask):
    """The set bits of an int64 mask (the shifts' sign bits are masked off; the count, at most
    64, fills the top byte without reaching its sign)."""
    mask = mask - ((mask >> 1) & 0x5555555555555555)
    mask = (mask & 0x3333333333333333) + ((mask >> 2) & 0x3333333333333333)
    mask = (mask + (mask >> 4)) & 0x0F0F0F0F0F0F0F0F
    return (mask * 0x0101010101010101) >> 56


BOUNDED = 1e150  # tokens with |x_ik| <= this: no product overflows, no G_ij is NaN


@njit(**HELPER)
def _close_masks(x, threshold, xt, lows, masks):
    """(close pairs, min inner product) of x (n, 2), n <= MASK_TOKENS, and masks[i] <- the bits
    j > i with G_ij > threshold: the sums G_ij = (0 + x_i1 x_j1) + x_i2 x_j2 of
    :func:`.observables.close_rows`, several rows at a time (each column's coordinates read
    once for them all): four over padded columns where no G can be NaN
    (:func:`_bounded_masks`), else two, looking for NaN (:func:`_checked_masks`). No row of G
    is kept: lows[j] keeps the least G over column j,
    updated in the loop (a load, two selects and a store, which vectorize, where a pass over
    the n(n - 1)/2 stored sums after it cost a quarter of the whole), and the min is the least
    of the lows. The same bits as the min of the rows, signed zero included, in any order: no
    G_ij is -0.0 (the leading 0 + turns a product's -0.0 into +0.0, and a sum that cancels
    exactly is +0.0), and a NaN anywhere makes the min NaN (a blown-up state must not look
    clustered). The close pairs are the masks' bits, counted once per row. Scratch: xt
    (2 (n + PAD)), lows (n + PAD)."""
    n = x.shape[0]
    width = n + PAD
    x0 = xt[:width]
    x1 = xt[width : 2 * width]
    bounded = True
    for i in range(n):
        x0[i] = x[i, 0]
        x1[i] = x[i, 1]
        lows[i] = np.inf
        bounded &= (abs(x0[i]) <= BOUNDED) & (abs(x1[i]) <= BOUNDED)
    nan = False
    if bounded and n <= MASK_TOKENS - PAD:  # no NaN to look for (NaN fails the bound)
        close = _bounded_masks(n, threshold, x0, x1, lows, masks)
    else:
        close, nan = _checked_masks(n, threshold, x0, x1, lows, masks)
    lowest = min(1.0, _least_lanes(lows, n))
    if nan:
        lowest = np.nan
    return close, lowest


@njit(**HELPER)
def _bounded_masks(n, threshold, x0, x1, lows, masks):
    """_close_masks' pass where no G_ij can be NaN (and n <= MASK_TOKENS - PAD, so that the
    padded columns' bits exist): rows four at a time over the columns past them (each column's
    coordinates read once for four rows: a quarter of the loops, and of their set-up and
    reductions, which cost more than the pairs at n = 32), each loop over a multiple of PAD
    columns (a whole number of the vector loop's turns; the leftover columns went one at a
    time), the columns past n NaN, which is never close and never less than a low; the six
    pairs inside each four and those of the last n % 4 rows one by one."""
    for i in range(n, n + PAD):
        x0[i] = np.nan
        x1[i] = np.nan
    close = 0
    one = np.int64(1)
    i = 0
    while i + 4 <= n:
        a0, a1 = x0[i], x1[i]
        b0, b1 = x0[i + 1], x1[i + 1]
        e0, e1 = x0[i + 2], x1[i + 2]
        f0, f1 = x0[i + 3], x1[i + 3]
        mask_a = mask_b = mask_e = mask_f = np.int64(0)
        padded = (n - 4 - i + PAD - 1) // PAD * PAD
        c0 = x0[i + 4 : i + 4 + padded]
        c1 = x1[i + 4 : i + 4 + padded]
        low = lows[i + 4 : i + 4 + padded]
        for m in range(padded):
            va = (0.0 + a0 * c0[m]) + a1 * c1[m]
            vb = (0.0 + b0 * c0[m]) + b1 * c1[m]
            ve = (0.0 + e0 * c0[m]) + e1 * c1[m]
            vf = (0.0 + f0 * c0[m]) + f1 * c1[m]
            w = va if va < vb else vb
            z = ve if ve < vf else vf
            w = w if w < z else z
            low[m] = w if w < low[m] else low[m]
            bit = one << (i + 4 + m)  # j < n + PAD <= 64
            mask_a |= bit if va > threshold else 0
            mask_b |= bit if vb > threshold else 0
            mask_e |= bit if ve > threshold else 0
            mask_f |= bit if vf > threshold else 0
        mask_a |= _pair_bit(a0, a1, b0, b1, threshold, lows, i + 1)
        mask_a |= _pair_bit(a0, a1, e0, e1, threshold, lows, i + 2)
        mask_a |= _pair_bit(a0, a1, f0, f1, threshold, lows, i + 3)
        mask_b |= _pair_bit(b0, b1, e0, e1, threshold, lows, i + 2)
        mask_b |= _pair_bit(b0, b1, f0, f1, threshold, lows, i + 3)
        mask_e |= _pair_bit(e0, e1, f0, f1, threshold, lows, i + 3)
        masks[i] = mask_a
        masks[i + 1] = mask_b
        masks[i + 2] = mask_e
        masks[i + 3] = mask_f
        close += _popcount(mask_a) + _popcount(mask_b) + _popcount(mask_e) + _popcount(mask_f)
        i += 4
    for k in range(i, n):  # the last n % 4 rows, among themselves
        mask = np.int64(0)
        for j in range(k + 1, n):
            mask |= _pair_bit(x0[k], x1[k], x0[j], x1[j], threshold, lows, j)
        masks[k] = mask
        close += _popcount(mask)
    return close


@njit(inline="always", **NJIT)
def _pair_bit(a0, a1, c0, c1, threshold, lows, j):
    """Bit j if the pair (a, token j) is close, else 0; lows[j] takes its G."""
    v = (0.0 + a0 * c0) + a1 * c1
    lows[j] = v if v < lows[j] else lows[j]
    return (np.int64(1) << j) if v > threshold else np.int64(0)


@njit(types.Tuple((types.int64, types.boolean))(types.int64, types.float64, F1, F1, F1, types.int64[::1]), **NJIT)
def _checked_masks(n, threshold, x0, x1, lows, masks):
    """_close_masks' pass for any tokens: each NaN G_ij flagged, the rows' own lengths. A
    kernel of its own, not inlined: the main job's tokens take the bounded pass, and this
    one, inlined beside it into both callers, took a quarter of their compile time."""
    close = 0
    nan = False
    one = np.int64(1)
    i = 0
    while i + 2 < n:  # rows i and i + 1 together over the columns j > i + 1
        a0, a1 = x0[i], x1[i]
        b0, b1 = x0[i + 1], x1[i + 1]
        v = (0.0 + a0 * b0) + a1 * b1  # the pair (i, i + 1)
        lows[i + 1] = v if v < lows[i + 1] else lows[i + 1]
        mask_a = (one << (i + 1)) if v > threshold else np.int64(0)
        mask_b = np.int64(0)
        nan |= v != v
        c0 = x0[i + 2 : n]
        c1 = x1[i + 2 : n]
        low = lows[i + 2 : n]
        for m in range(n - 2 - i):
            v = (0.0 + a0 * c0[m]) + a1 * c1[m]
            u = (0.0 + b0 * c0[m]) + b1 * c1[m]
            w = v if v < u else u
            low[m] = w if w < low[m] else low[m]
            bit = one << (i + 2 + m)
            mask_a |= bit if v > threshold else 0
            mask_b |= bit if u > threshold else 0
            nan |= (v != v) | (u != u)
        masks[i] = mask_a
        masks[i + 1] = mask_b
        close += _popcount(mask_a) + _popcount(mask_b)
        i += 2
    if i + 1 < n:  # the last row alone: the pair (n - 2, n - 1)
        v = (0.0 + x0[i] * x0[i + 1]) + x1[i] * x1[i + 1]
        lows[i + 1] = v if v < lows[i + 1] else lows[i + 1]
        hit = v > threshold
        close += hit
        masks[i] = (one << (i + 1)) if hit else np.int64(0)
        nan |= v != v
    masks[n - 1] = 0
    return close, nan


@njit(**HELPER)
def _unjoined(masks, n):
    """(all n tokens, the isolated ones) as masks: a token with no close token above it
    (masks[i] = 0) nor below it (in no masks[j]) is a cluster of its own. Branch-free over
    the tokens: it vectorizes."""
    one = np.int64(1)
    every = (one << n) - 1 if n < 64 else -one
    below = np.int64(0)  # the tokens close to a token below them
    alone = np.int64(0)  # the tokens close to none above them
    for i in range(n):
        below |= masks[i]
        alone |= (one << i) if masks[i] == 0 else 0
    return every, alone & ~below


@njit(**HELPER)
def _component(masks, n, seed):
    """The cluster of the tokens `seed` (a mask), the connected component of {i ~ j : masks[i]
    bit j}: grown by all its neighbours at once, those above its tokens (their masks) and
    those below (the tokens whose mask meets it), two branch-free passes over the tokens that
    vectorize, until it stops growing: twice for a cluster all of whose pairs are close (the
    clusters of the dynamics), one more turn per step of a chain's path; no branch depends on
    which component a token's set meets."""
    one = np.int64(1)
    while True:
        above = np.int64(0)
        below = np.int64(0)
        for i in range(n):
            mask = masks[i]
            above |= mask if (seed >> i) & 1 else 0
            below |= (one << i) if mask & seed else 0
        grown = seed | above | below
        if grown == seed:
            return seed
        seed = grown


@njit(types.UniTuple(types.float64, 2)(F2, types.float64, F1, F1, types.int64[::1], types.int64[::1]), **NJIT)
def close_rows_joined(x, threshold, xt, lows, tags, parent):
    """(pair fraction, min inner product) of :func:`.observables.close_rows` and the labels
    of :func:`.observables.join_rows` (parent[i] <- the smallest token of i's cluster) for
    one configuration x (n, 2), n <= MASK_TOKENS, bit for bit (:func:`_close_masks`: the same
    sums G_ij, the same count and min, signed zeros included); the clusters, the connected
    components of {i ~ j : G_ij > threshold}, from bit masks instead of a union-find (the
    pass sets bit j of masks[i] for each close j > i, a select and an or, which vectorize: the
    union-find branched on every pair), each grown from its smallest token
    (:func:`_component`), which labels it, as the union-find's labels are. Scratch: xt
    (2 (n + PAD)), lows (n + PAD), tags (n int64 at least). Storing the rows of G and taking
    their min after, two rows at a time, keeps the pair loop free of branches: it vectorizes."""
    n = x.shape[0]
    pairs = n * (n - 1) // 2
    masks = tags[:n]
    close, lowest = _close_masks(x, threshold, xt, lows, masks)
    every, left = _unjoined(masks, n)
    for i in range(n):
        parent[i] = i  # the isolated tokens' labels; the others' are written below
    left = every & ~left
    while left:
        smallest = left & -left
        cluster = _component(masks, n, smallest)
        label = _popcount(smallest - 1)  # the smallest token's index
        for j in range(n):  # branch-free: vectorizes
            parent[j] = label if (cluster >> j) & 1 else parent[j]
        left &= ~cluster
    return close / pairs if pairs else 1.0, lowest


@njit(
    types.Tuple((types.float64, types.float64, types.int64, types.int64, types.int64))(
        F2, types.float64, F1, F1, types.int64[::1], types.float64
    ),
    **NJIT,
)
def close_rows_counted(x, threshold, xt, lows, tags, early):
    """(pair fraction, min inner product) of :func:`close_rows_joined` and, in place of its
    labels, their :data:`COUNTS`: the clusters, the tokens of token 1's cluster and of the
    clusters holding one of the first `early` tokens (labels < 1 and < early), read off the
    clusters' masks (no labels formed). Scratch as there."""
    return _counted(x, threshold, xt, lows, tags, early)


@njit(**HELPER)
def _counted(x, threshold, xt, lows, tags, early):
    """close_rows_counted's body, compiled into the observer (a helper its library links, which
    LLVM may inline); the labels' path, which only other callers take, calls a kernel."""
    n = x.shape[0]
    pairs = n * (n - 1) // 2
    masks = tags[:n]
    close, lowest = _close_masks(x, threshold, xt, lows, masks)
    one = np.int64(1)
    first = np.int64(min(early, n))  # the tokens 0, ..., first - 1
    early_tokens = (one << first) - 1 if first < 64 else -one
    every, alone = _unjoined(masks, n)
    clusters = _popcount(alone)
    held_first = alone & 1
    held_early = _popcount(alone & early_tokens)
    left = every & ~alone
    while left:
        cluster = _component(masks, n, left & -left)
        size = _popcount(cluster)
        clusters += 1
        held_first += size if cluster & 1 else 0
        held_early += size if cluster & early_tokens else 0
        left &= ~cluster
    return close / pairs if pairs else 1.0, lowest, clusters, held_first, held_early


@njit(OBSERVE_SIG, **NJIT)
def pair_row(t, x, q, row, drift_work, work):
    """row <- [pair fraction, min inner, sum_ij e^{beta G_ij}, labels... (or their counts),
    sum_i x_i] of x (n, d); `work`: :func:`work_size` floats. The pair fraction alone on the
    circle (the main job's equal-work run) touches nothing but its scratch, and each path
    forms only the views of `work` it needs (each slice, view and reshape costs a few ns, and
    this runs at every saved layer)."""
    n, d = x.shape
    join = q[JOIN] != 0.0
    beta = q[BETA]
    if d == 2 and beta == 0.0 and not join and q[LEAST] == 0.0:  # the pair fraction alone
        row[0] = close_fraction_paired(x, q[THRESHOLD], work)
        row[1] = np.nan  # not asked for
        row[2] = n * n
    else:
        end = drift_work.shape[0]
        total = drift_work[end - 1]
        # e^{s_ij - c} lies in (0, 1] for every pair (c >= |s_ij|): a sum outside (0, n^2] was
        # not left by the field at this state (NaN: the solver's start, or another path of it)
        field = q[FROM_FIELD] != 0.0 and beta != 0.0 and 0.0 < total <= n * n
        if d == 2 and (beta == 0.0 or field) and join and n <= MASK_TOKENS:
            _masked_stats(x, q, row, work)
        else:
            _pair_stats(x, q, row, work, join, beta, field)
        if field:
            row[2] = math.exp(drift_work[end - 2]) * total  # e^c sum_i Z_i
    if q[TOKEN_SUM] != 0.0:
        at = N_PAIR_STATS + (_clustered_columns(n, q[EARLY]) if join else 0)
        for k in range(d):
            acc = 0.0
            for i in range(n):
                acc += x[i, k]
            row[at + k] = acc


@njit(inline="always", **NJIT)
def _masked_stats(x, q, row, work):
    """pair_row's statistics and clusters from bit masks (on the circle, no exps, n <=
    MASK_TOKENS): the labels' counts off the component masks, or the labels."""
    n = x.shape[0]
    at = 2 * (n * (n + 1) // 2) + 2 * n
    tags = work[at + n : at + 4 * n].view(np.int64)
    lows = work[at + 4 * n : at + 5 * n + PAD]
    padded = work[at + 5 * n + PAD : at + 7 * n + 3 * PAD]
    if q[EARLY] != 0.0:
        (row[0], row[1], row[N_PAIR_STATS], row[N_PAIR_STATS + 1], row[N_PAIR_STATS + 2]) = _counted(
            x, q[THRESHOLD], padded, lows, tags, q[EARLY]
        )
    else:
        parent = work[at : at + n].view(np.int64)
        row[0], row[1] = close_rows_joined(x, q[THRESHOLD], padded, lows, tags, parent)
        for i in range(n):
            row[N_PAIR_STATS + i] = parent[i]
    row[2] = n * n


@njit(inline="always", **NJIT)
def _pair_stats(x, q, row, work, join, beta, field):
    """pair_row's statistics and labels (or their counts) but for the pair fraction alone on
    the circle and the bit masks' path."""
    n, d = x.shape
    size = n * (n + 1) // 2
    g = work[:size]
    xt = work[2 * size : 2 * size + d * n].reshape((d, n))
    parent = work[2 * size + d * n : 2 * size + d * n + n].view(np.int64)
    w = work[size : 2 * size]
    if d == 2 and (beta == 0.0 or field):  # no exps: the rows, then the clusters
        row[0], row[1] = close_rows(x, q[THRESHOLD], xt, g, w)
        row[2] = n * n
        if join:
            join_rows(g, n, q[THRESHOLD], row[0] == 1.0, w, parent)
    else:
        _pair_pass(x, q[THRESHOLD], 0.0 if field else beta, join, g, w, xt, parent, row)
    if join and q[EARLY] != 0.0:  # the labels' counts in place of them
        early = q[EARLY]
        clusters = first = early_held = 0
        for i in range(n):  # branch-free: vectorizes
            label = parent[i]
            clusters += label == i
            first += label < 1
            early_held += label < early
        row[N_PAIR_STATS] = clusters
        row[N_PAIR_STATS + 1] = first
        row[N_PAIR_STATS + 2] = early_held
    elif join:
        for i in range(n):
            row[N_PAIR_STATS + i] = parent[i]


@njit(inline="always", **NJIT)
def _clustered_columns(n, early):
    """The columns the clusters take in a row: the labels, or their counts."""
    return N_COUNTS if early != 0.0 else n


def work_size(n: int, d: int) -> int:
    """Scratch floats of :func:`pair_row` for n tokens of dimension d."""
    return 2 * (n * (n + 1) // 2) + d * n + 7 * n + 3 * PAD


def pair_observer(
    n: int,
    d: int,
    delta: float,
    beta: float = 0.0,
    labels: bool = True,
    from_field: bool = False,
    token_sum: bool = False,
    min_inner: bool = True,
    early: int | None = None,
) -> integrators.Observer:
    """The observer of :func:`.observables.pairs_and_clusters` (``beta = 0``: no exp sum; the
    energy is then NaN, as there); `from_field`: the drift is an attention field at the state
    itself with M = I, no bias and no mask (see the module doc); `token_sum`: also sum_i x_i
    (d floats, e.g. for the mean alignment with a fixed direction); without `min_inner`, the
    exp sum and the labels (the pair fraction alone) on the circle, no row of G is kept and
    the min is not formed (NaN in its column): :func:`close_fraction_paired`; `early` (>= 1,
    with `labels`): in place of the n labels the three :data:`COUNTS` (clusters, tokens labelled
    < 1, tokens labelled < early), all that the cluster count and the held fractions need."""
    beta = float(beta)
    if not np.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta}")
    if early is not None and (int(early) != early or early < 1):
        raise ValueError(f"early must be an integer >= 1, got {early}")
    counted = bool(labels) and early is not None
    q = np.array(
        [
            1.0 - _delta(delta),
            beta,
            float(bool(labels)),
            float(bool(from_field)),
            float(bool(token_sum)),
            float(bool(min_inner)),
            float(early) if counted else 0.0,
        ]
    )
    clustered = (N_COUNTS if counted else n) if labels else 0
    columns = N_PAIR_STATS + clustered + (d if token_sum else 0)
    return integrators.Observer(pair_row, q, columns, work_size(n, d))


def split_rows(rows, n: int, beta: float, labels: bool = True, counts: bool = False):
    """(stats (..., 3), labels (..., n) int64 or None, token sums (..., d) or an empty last
    axis) of observer rows (..., columns): the first two as
    :func:`.observables.pairs_and_clusters` returns them (the energy is the exp sum over
    2 beta n^2, NaN at beta = 0); `counts` (rows of an observer given `early`): the second is
    the :data:`COUNTS` (..., 3) int64 in place of the labels."""
    rows = np.asarray(rows)
    stats = rows[..., :N_PAIR_STATS].copy()
    stats[..., 2] = stats[..., 2] / (2.0 * beta * n * n) if beta != 0.0 else np.nan
    at = N_PAIR_STATS + ((N_COUNTS if counts else n) if labels else 0)
    found = rows[..., N_PAIR_STATS:at].astype(np.int64) if labels else None
    return stats, found, rows[..., at:]
