r"""Metastable cluster counts from a uniform start (physics.md §1.4, §1.5): the first plateau of a
run's cluster count on a log time axis, the most unstable Fourier mode that predicts it, and the
time scale of the first merge after it.

**Sources.** Bruno, Pasqualotto & Agazzi (arXiv 2410.23228, abstract read): around the i.i.d.
uniform start the mean-field equation stays close to a meta-stable manifold whose structure
(periodicity, on the circle) is the index maximizing "a certain rescaling of Gegenbauer
polynomials". Geshkovski, Rigollet & Sun (arXiv 2412.09080): neither its abstract nor its body
could be found with the search tools here; physics.md §1.5 states its law as "the number of
clusters grows like sqrt(beta log beta) in a range of beta between powers of n". Nothing below
uses more of it than that statement; what is derived is derived here.

**The most unstable mode (circle, SA or USA, Q = K = V = I, sigma = 0).** The linearisation of
the mean field around the uniform law is :mod:`dyn.noisy.theory`: a perturbation e^{i k theta}
of the uniform density grows at the rate

    lambda_k = k^2 I_k(beta) / (beta D_0),      D_0 = 1 (USA) or I_0(beta) (SA).

A uniform start of n i.i.d. tokens puts every mode at amplitude ~ n^{-1/2} with a random phase;
each grows like e^{lambda_k t} until the largest reaches O(1), at t ~ log(n) / (2 lambda_max), and
the density then has about one peak per period of the fastest mode: the first metastable state
holds k* clusters,

    k*(beta) = argmax_{k >= 1} k^2 I_k(beta),

the same for SA and USA (D_0 does not depend on k). The neighbouring modes grow almost as fast
(lambda_{k*+-1} / lambda_{k*} = 1 - O(1/beta)) and n^{-1/2} is not small for n in the hundreds,
so the count of a run scatters around k* (and merges during formation lower it: below).

*Large beta.* Debye's uniform expansion, I_nu(x) ~ e^{eta} / (sqrt(2 pi) (nu^2 + x^2)^{1/4}) with
eta = sqrt(nu^2 + x^2) - nu asinh(nu / x), has d eta / d nu = -asinh(nu / x) exactly. The
maximizer k_c of 2 log k + log I_k(beta) over real k therefore solves

    2/k = asinh(k/beta) + k / (2 (k^2 + beta^2)).

With k ~ sqrt(beta), asinh(k/beta) = k/beta - k^3/(6 beta^3) + ...; putting k^2 = 2 beta + e,
2 = 2 + e/beta - 2/(3 beta) + 1/beta + O(beta^{-2}), so e = -1/3:

    k_c = sqrt(2 beta - 1/3) + O(beta^{-3/2}),     k* in {floor(k_c), ceil(k_c)}

(k^2 I_k is unimodal in k, so the integer maximum sits next to the continuous one). The tests
check both against the numbers: the continuous maximizer of k^2 I_k (real orders) is within
0.01 (8/beta)^{3/2} of k_c for 8 <= beta <= 700, where sqrt(2 beta) misses it by ~ 1/(6
sqrt(2 beta)), and k* is floor or ceil of k_c against the direct argmax for 0.5 <= beta <= 700.
So k* ~ sqrt(2 beta): the count is set by the kernel's width 1/sqrt(beta) in angle (k* periods
of 2 pi / k* ~ 4.4 widths).

*The sqrt(beta log beta) scale.* Any count in this flow scales like sqrt(beta) up to logarithms,
because angles enter only through beta theta^2. Two clusters at distance theta attract each other
at a speed ~ theta e^{-beta theta^2 / 2} (SA: the weight of the other cluster over the own one),
so clusters that coexist until time t are at least theta_t ~ sqrt(2 log t / beta) apart, and at
most 2 pi / theta_t = pi sqrt(2 beta / log t) of them survive to t. Where the paper's logarithm
comes from (a time or a token number of order a power of beta or of n) could not be read here; the
scenario draws c sqrt(beta log beta) with c = 1 as a scale next to k*(beta) and lets the data
decide. Measured (scenarios/metastable_counts.toml, n = 256, 8 runs per beta, beta = 4 .. 40):
c sqrt(beta log beta) fits with c = 0.67 and chi^2 = 73 for 7 degrees of freedom; the count
follows the shape of k*, but not by a constant factor (0.82, 0.86, 0.75 k* at beta = 5, 9, 16
with 256 runs each): why, below.

**Why the first plateau lies below k*: three steps** (measured: the table at the end).

*1. Basins at the end of the linear phase.* SA's velocity is v = (1/beta) d/dphi log G with
the potential G(phi) = sum_j e^{beta cos(phi - theta_j)} (:mod:`dyn.noisy.theory`: v = (1/beta)
grad log N[rho]), so each token climbs G and the metastable clusters are born as its basins, one
per local maximum. For n i.i.d. uniform tokens the density relative to d phi / (2 pi) is
rho = 1 + sum_{k >= 1} (a_k cos k phi + b_k sin k phi), a_k = (2/n) sum_j cos k theta_j,
b_k = (2/n) sum_j sin k theta_j: mean 0, variance (4/n^2) n E cos^2 = 2/n, uncorrelated across k
and between a and b (E cos k theta cos l theta = delta_kl / 2), Gaussian as n -> infinity.
In the linear phase each mode grows by e^{lambda_k t}, and since e^{beta cos x} = I_0(beta) +
2 sum_k I_k(beta) cos k x,

    G(phi, t) = n I_0(beta) + n sum_k I_k(beta) e^{lambda_k t} (a_k cos k phi + b_k sin k phi):

a stationary random field whose spectral weights are s_k = I_k(beta)^2 e^{2 lambda_k t} (times the
common 2 n), not the density's e^{2 lambda_k t}: the kernel decides which bumps are basins, and
with the density's weights sum k^4 s_k diverges (n points have no maxima to count). The fastest
mode's amplitude r = (a_{k*}^2 + b_{k*}^2)^{1/2} (E r^2 = 4/n) grows like e^{lambda_{k*} t}; at
r = 1 the density 1 + r cos(k* phi - alpha) touches zero and the linear theory is over. The count
is taken earlier, at rms amplitude A = 1/2 (LINEAR_AMPLITUDE):

    t_lin = log(n A^2 / 4) / (2 lambda_{k*}) = log(n/16) / (2 lambda_{k*})
            (:func:`linear_phase_end`; 1.90 - 2.09 at n = 256 for beta = 4 .. 40, where
             lambda_{k*} = 0.66 - 0.73 -> 2/e for SA),

because the linear theory was measured to fail before r = 1. The first definition was A = 1
(t = 2.85 - 3.13). Each run was compared with its own linear prediction (the G of its initial
tokens with mode k multiplied by e^{lambda_k t}: paired, so the noise of the start cancels; 400
runs at beta = 5, 9, 16, n = 256, saves every 0.25). The two counts are equal at t = 0. Their
difference stays within one paired standard error up to t ~ 1.4 / lambda_{k*} (-0.015 +- 0.013,
-0.018 +- 0.017, -0.018 +- 0.020 at t = 2). By A = 1 it is -0.05, -0.07, -0.12 (+- 0.02), and it
grows after that (-0.23, -0.33, -0.43 at t = 6): weak basins start being absorbed before the
rms amplitude reaches 1, in the runs whose amplitude (Rayleigh-distributed) or sum of modes is
larger. At A = 1 the count of 96 runs of the shipped seed was 3.6 standard errors below the
theory at beta = 9. The start's variance (2/n: tested) and finite n (the empirical potential
matches Rice at t = 0: tested) are not the cause.

*Rice's count.* For a stationary Gaussian field X with weights s_k on the circle, X'(phi) and
X''(phi) are independent centred normals of variances m_2 = sum k^2 s_k and m_4 = sum k^4 s_k
(Cov(X', X'') = (1/2) d/dphi Var X' = 0). The maxima are the down-crossings of 0 by X', and
Rice's formula counts them on [0, 2 pi): 2 pi p_{X'}(0) E[max(-X'', 0)] =
2 pi (2 pi m_2)^{-1/2} (m_4 / (2 pi))^{1/2},

    E #basins = sqrt(m_4 / m_2) = sqrt(sum k^4 s_k / sum k^2 s_k)      (:func:`rice_maxima`).

One mode gives exactly k; as t -> infinity the weights concentrate on k* and the count tends to
k*. At t_lin the weights have grown only by e^{2 lambda t_lin} <= n/16 = 16. The neighbouring
modes grow almost as much (lambda_5 / lambda_6 = 0.983 at beta = 16), and I_k^2 leans towards
small k. So :func:`expected_basins` at t_lin is a finite-n mixture below k_c (the real-k
maximizer of lambda_k, *Large beta* above; the file's `continuous_mode`): 2.92, 3.93, 5.26 at
beta = 5, 9, 16, n = 256, against k_c = 3.11, 4.20, 5.63 and k* = 3, 4, 6 (2.97, 4.00, 5.35 at
A = 1). The tests check the formula against Monte Carlo Gaussian fields, and at t = 0 against
the potential of 128 uniform tokens (a sum of bumps, not Gaussian). :func:`basin_count` counts
the maxima of a run's G on a grid; `linear_phase_clusters` is that count at the last save at or
before t_lin.

*2. Weak basins are absorbed while the clusters form.* A basin holding few tokens next to a
heavy one loses its maximum as mass gathers (1 token 0.6 from 30 at beta = 16 has no basin of
its own), and its tokens end in the neighbour's cluster. `formed_clusters` (:func:`formed`) is
the count at the first save after the linear phase at which
- every cluster is tight: every pair of its tokens within delta, not only a chain of such pairs
  (before that the delta-count counts pieces of chains and can rise), and
- there are as many clusters as basins: one tight cluster at each maximum of G.
The second condition is needed because tightness alone is reached too early. Sparse tokens
(n = 32: mean spacing 0.2 >> the delta distance 0.045) are all singletons, trivially tight, just
after t_lin: first-tight save t ~ 1 in scenarios/metastability.toml, against t ~ 7 with both
conditions. It also waits out two tight clusters that share one basin, an absorbed basin's
tokens about to merge into the neighbour's cluster. At n = 256 the formed count is the same to
0.03 either way (first tight save: 2.70, 3.72, 4.85 at beta = 5, 9, 16). There the delta-count
at the first tight save is still the linear-phase count (2.97, 4.04, 5.17): the absorbed basins'
clusters are tight but lie inside a neighbour's basin. Formation takes t ~ 9 - 10 (median; 90%
by t ~ 13): the tokens contract at rate ~ 1 into each maximum. At n = 256 every run's formed
count is at least its first plateau. At n = 32 it is not: there the first plateau can be a
stretch of the sparse delta-count before formation.

*3. Early merges fall inside the plateau window.* A count must hold over a factor 3 in time to be
a plateau (`plateau_factor`); clusters formed at t ~ 9 that merge before t ~ 27 never make one,
and the first plateau is the count after those merges. A factor 2 keeps more of the formed count
(but lets formation stretches through), a factor 5 or 10 loses more.

Measured (the scenario at n = 256: seed 777, 256 runs at beta = 5, 9, 16; seed 778, 64 runs at
4, 8, 24, 40; linear_phase_expected at the save used, t = 1.79 - 2.04):

    beta   linear_phase    expected   formed         first plateau   k*   k_c
     4     2.56 +- 0.07    2.61       2.39 +- 0.06   2.30 +- 0.06    3    2.77
     5     2.88 +- 0.04    2.91       2.68 +- 0.03   2.47 +- 0.03    3    3.11
     8     3.63 +- 0.07    3.70       3.39 +- 0.06   3.19 +- 0.07    4    3.96
     9     3.93 +- 0.04    3.93       3.70 +- 0.03   3.43 +- 0.03    4    4.20
    16     5.24 +- 0.05    5.25       4.82 +- 0.04   4.52 +- 0.04    6    5.63
    24     6.41 +- 0.09    6.43       5.92 +- 0.09   5.53 +- 0.09    7    6.90
    40     8.22 +- 0.13    8.31       7.53 +- 0.10   7.09 +- 0.09    9    8.93

The linear-phase count is within 1.1 standard errors of the linear theory at every beta (-0.97,
-0.04, -0.23 at beta = 5, 9, 16). On the shipped seed (96 runs, the slow test) it is 2.97, 3.78,
5.20 (+- 0.06 - 0.08) against 2.91, 3.93, 5.25: +0.9, -2.4, -0.7 standard errors. Then steps 2
and 3 take about 0.2 - 0.5 each. The first plateau is
0.79 - 0.83 k_c at every beta. But k* (floor or ceil of k_c) moves in steps, so its ratio to k*
does not hold still: 0.75 at beta = 16, where k* = 6 lies above k_c = 5.63. A longer window
lowers it further (factor 5: 2.36, 3.28, 4.28; factor 10: 2.17, 3.10, 4.14, with 1 - 12% of runs
then without a plateau by T = 1000).
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics.bessel import circle_coefficients
from ..numerics.mode_rates import growth_rates

PLATEAU_RATIO = 3.0  # a stretch must hold its count over this factor in time to be a plateau
THEORY_MAX_BETA = 700.0  # dyn.numerics.mode_rates' rates need I_0(beta) < 1e308 (beta < ~709)
MODE_MARGIN = 10  # modes searched beyond 3 sqrt(2 beta) (k* ~ sqrt(2 beta - 1/3))


def _betas(beta) -> np.ndarray:
    b = np.asarray(beta, dtype=np.float64)
    if not np.all(np.isfinite(b)):
        raise ValueError(f"beta must be finite, got {beta!r}")
    return b


def most_unstable_mode(beta, normalization: str = "SA"):
    """k*(beta) = argmax_{k >= 1} lambda_k, the fastest-growing Fourier mode of the uniform law
    on the circle at sigma = 0 (rates from :func:`dyn.numerics.mode_rates.growth_rates`; module
    doc). Past THEORY_MAX_BETA (where they overflow: a_0 = I_0(beta) > 1e308), the same argmax
    from the scaled coefficients k^2 I_k(beta) e^{-beta}
    (:func:`dyn.numerics.bessel.circle_coefficients`; lambda_k is that times e^beta / (beta D_0),
    the same for every k). NaN for beta <= 0 (no clustering instability to follow). Scalar or
    array, as beta."""
    b = _betas(beta)
    out = np.full(b.shape, np.nan)
    flat = out.reshape(-1)
    for i, x in enumerate(b.reshape(-1)):
        if x <= 0:
            continue
        top = int(3 * math.sqrt(2 * x)) + MODE_MARGIN
        k = np.arange(1, top + 1)
        if x <= THEORY_MAX_BETA:
            rates = growth_rates(float(x), 0.0, 2, normalization, k)
        else:
            rates = k * k * circle_coefficients(float(x), top)[1:]
        best = int(np.argmax(rates))
        if best == len(k) - 1:  # cannot happen for a unimodal k^2 I_k; a guard, not a branch
            raise ArithmeticError(f"the fastest mode at beta = {x} is the last one searched")
        flat[i] = k[best]
    return out if b.ndim else float(out)


def mode_asymptote(beta):
    """k_c = sqrt(2 beta - 1/3), the continuous maximizer of k^2 I_k(beta) to O(beta^{-3/2})
    (module doc); NaN for beta <= 1/6."""
    b = _betas(beta)
    square = 2.0 * b - 1.0 / 3.0
    out = np.where(square > 0, np.sqrt(np.maximum(square, 0.0)), np.nan)
    return out if b.ndim else float(out)


def count_scale(beta):
    """sqrt(beta log beta) (NaN for beta <= 1): the scale of physics.md §1.5, prefactor 1."""
    b = _betas(beta)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(b > 1, np.sqrt(b * np.log(np.where(b > 1, b, 2.0))), np.nan)
    return out if b.ndim else float(out)


def _one_plateau(counts: np.ndarray, times: np.ndarray, ratio: float) -> tuple[float, float, float]:
    s = len(counts)
    change = np.flatnonzero(counts[1:] != counts[:-1]) + 1  # first save of each new stretch
    starts = np.concatenate([[0], change])
    stops = np.concatenate([change, [s]])  # one past the last save of each stretch
    # the highest count at or after each save, to check "never exceeded afterwards"
    ahead = np.maximum.accumulate(counts[::-1])[::-1]
    for a, b in zip(starts[1:], stops[1:], strict=True):
        c = counts[a]
        if times[b - 1] < ratio * times[a]:
            continue
        if b < s and ahead[b] > c:
            continue
        end = times[b] if b < s else np.nan
        return float(c), float(times[a]), float(end)
    return np.nan, np.nan, np.nan


def first_plateau(counts, times, ratio: float = PLATEAU_RATIO):
    """The first plateau of cluster-count series (module doc): counts (..., saves) at the save
    times (saves,), increasing and >= 0 (a stretch starting at t = 0 can only be the initial one,
    which is never a plateau). Returns (count, start, end), each of shape (...): the plateau's
    count, the time it is first seen, and the first save at which the count is lower (NaN: held
    to the last save); all NaN where no stretch qualifies."""
    counts = np.asarray(counts, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    ratio = float(ratio)
    if not (math.isfinite(ratio) and ratio > 1.0):
        raise ValueError(f"ratio must be a finite number > 1, got {ratio!r}")
    if times.ndim != 1 or counts.ndim < 1 or counts.shape[-1] != times.shape[0]:
        raise ValueError(
            f"counts must be (..., saves) with saves = len(times), got counts {counts.shape} and times {times.shape}"
        )
    if np.any(np.diff(times) <= 0) or (times.size and times[0] < 0):
        raise ValueError("times must be increasing and >= 0")
    flat = counts.reshape(-1, times.shape[0])
    out = np.array([_one_plateau(row, times, ratio) for row in flat]).reshape(counts.shape[:-1] + (3,))
    return out[..., 0], out[..., 1], out[..., 2]


def _medians(end_times: np.ndarray) -> np.ndarray:
    """Median over runs (last axis) with NaN (no merge by the horizon) counted as +inf; NaN where
    half or more of the runs did not merge (the median is then not seen)."""
    censored = np.where(np.isfinite(end_times), end_times, np.inf)
    med = np.median(censored, axis=-1)
    return np.where(np.isfinite(med), med, np.nan)


def _line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def merge_rate(
    beta, end_times, against: str = "beta", resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> dict:
    """Fit log t_merge = a + c X to the per-beta medians of the runs' first merge after their
    first plateau, X = beta (exponential law, c the rate) or X = log beta (power law, c the
    exponent). end_times (len(beta), runs): NaN where a run did not merge by the horizon; betas
    where half or more did not are left out (`used`). The interval: percentiles of c over
    bootstrap resamples of the runs within each beta (seeded). Returns {rate, lo, hi, intercept,
    used, medians, residual} (residual: rms of the fit in log t)."""
    beta = _betas(beta).reshape(-1)
    ends = np.asarray(end_times, dtype=np.float64)
    if ends.ndim != 2 or ends.shape[0] != beta.size:
        raise ValueError(f"end_times must be (len(beta), runs), got {ends.shape}")
    if against not in ("beta", "log_beta"):
        raise ValueError(f"against must be 'beta' or 'log_beta', got {against!r}")
    x = beta if against == "beta" else np.log(beta)
    medians = _medians(ends)
    used = np.isfinite(medians)
    if used.sum() < 3:
        raise ValueError(f"need >= 3 values of beta where most runs merged, got {int(used.sum())}")
    rate, intercept = _line(x[used], np.log(medians[used]))
    residual = float(np.sqrt(np.mean((np.log(medians[used]) - intercept - rate * x[used]) ** 2)))
    rng = np.random.default_rng(seed)
    runs = ends.shape[1]
    rates = []
    for _ in range(int(resamples)):
        pick = rng.integers(0, runs, size=(beta.size, runs))
        again = _medians(np.take_along_axis(ends, pick, axis=1))[used]
        if np.all(np.isfinite(again)):
            rates.append(_line(x[used], np.log(again))[0])
    tail = (1.0 - float(level)) / 2.0
    lo, hi = np.quantile(rates, [tail, 1.0 - tail]) if rates else (np.nan, np.nan)
    return {
        "rate": rate,
        "lo": float(lo),
        "hi": float(hi),
        "intercept": intercept,
        "used": beta[used],
        "medians": medians,
        "residual": residual,
    }


# ---- the count at the end of the linear phase, and when the clusters have formed -------------

BASIN_GRID = 4096  # fewest points of the phi grid of basin_count (2 pi / 4096 = 0.0015 rad)
GRID_PER_WIDTH = 64  # and at least this many per kernel width 1 / sqrt(beta)
GRID_BLOCK = 256  # grid points evaluated at once
TAIL = 1e-12  # the Rice sums stop where I_k(beta) / max_k I_k(beta) is below this
LINEAR_AMPLITUDE = 0.5  # the linear phase's count: the fastest mode's rms amplitude (module doc)


def circle_rates(beta: float, modes, normalization: str = "SA") -> np.ndarray:
    """lambda_k, the growth rate of the Fourier mode k of the uniform law on the circle at
    sigma = 0 (:func:`dyn.numerics.mode_rates.growth_rates`: k^2 I_k(beta) / (beta D_0)); NaN past
    THEORY_MAX_BETA, where D_0 = I_0(beta) overflows."""
    modes = np.asarray(modes, dtype=np.int64)
    if not (math.isfinite(beta) and abs(beta) <= THEORY_MAX_BETA):
        return np.full(modes.shape, np.nan)
    return growth_rates(float(beta), 0.0, 2, normalization, modes)


def linear_phase_end(beta: float, n: int, normalization: str = "SA", amplitude: float = LINEAR_AMPLITUDE) -> float:
    """t_lin = log(n A^2 / 4) / (2 lambda_{k*}): the time at which the fastest mode's rms
    amplitude 2 n^{-1/2} e^{lambda_{k*} t} reaches A = `amplitude` (default 1/2, where the linear
    theory is measured to hold; at A = 1 the density 1 + r cos(k* phi - alpha) touches zero:
    module doc); 0 for n A^2 <= 4, NaN where k* is NaN (beta <= 0) or the rates are (beta >
    THEORY_MAX_BETA)."""
    amplitude = float(amplitude)
    if not (math.isfinite(amplitude) and amplitude > 0):
        raise ValueError(f"amplitude must be a finite number > 0, got {amplitude!r}")
    k = most_unstable_mode(float(beta), normalization)
    if not math.isfinite(k):
        return math.nan
    rate = float(circle_rates(float(beta), [int(k)], normalization)[0])
    if not (math.isfinite(rate) and rate > 0):
        return math.nan
    return max(math.log(int(n) * amplitude * amplitude / 4.0), 0.0) / (2.0 * rate)


def count_save(times, t: float) -> int:
    """Index of the last save at or before t (0 when t precedes every nonzero save); -1 for a
    NaN t (no linear phase to end)."""
    times = np.asarray(times, dtype=np.float64)
    if not math.isfinite(t):
        return -1
    return max(int(np.searchsorted(times, t, side="right")) - 1, 0)


def basin_modes(beta: float) -> np.ndarray:
    """The modes k = 1 .. K of the Rice sums: K past the last k where I_k(beta) is within TAIL
    of its largest value (I_k decreases in k for beta > 0, so the tail beyond is smaller)."""
    from scipy.special import ive

    b = abs(float(beta))
    top = int(b + 10.0 * math.sqrt(b) + 30)
    while ive(top, b) > TAIL * ive(0, b):
        top *= 2
    return np.arange(1, top + 1)


def rice_maxima(modes, weights) -> float:
    """Expected number of local maxima on the circle of the stationary Gaussian field
    sum_k sqrt(s_k) (a_k cos k phi + b_k sin k phi), a_k, b_k i.i.d. N(0, 1): by Rice's
    formula sqrt(sum k^4 s_k / sum k^2 s_k) (module doc)."""
    k = np.asarray(modes, dtype=np.float64)
    s = np.asarray(weights, dtype=np.float64)
    if k.shape != s.shape or np.any(s < 0) or not np.all(np.isfinite(s)) or not np.any(s * k):
        raise ValueError(
            "modes and weights must have one shape, with weights finite, >= 0 and not all zero on the nonzero modes"
        )
    k2 = k * k
    return float(math.sqrt(np.sum(k2 * k2 * s) / np.sum(k2 * s)))


def basin_weights(beta: float, t: float, normalization: str = "SA"):
    """(modes, s_k): the spectral weights of the potential G of the linear theory at time t,
    s_k = I_k(beta)^2 e^{2 lambda_k t} up to a factor common to every k (module doc)."""
    from scipy.special import ive

    k = basin_modes(beta)
    rates = circle_rates(float(beta), k, normalization)
    log_s = 2.0 * np.log(ive(k, abs(float(beta)))) + 2.0 * rates * float(t)
    return k, np.exp(log_s - np.max(log_s))


def expected_basins(beta: float, t: float, normalization: str = "SA") -> float:
    """The linear theory's expected number of basins (local maxima of G) at time t after a
    uniform start: Rice's count of the Gaussian field with weights I_k^2 e^{2 lambda_k t}
    (module doc). NaN for beta <= 0 or past THEORY_MAX_BETA."""
    if not (math.isfinite(beta) and 0 < beta <= THEORY_MAX_BETA and t >= 0):
        return math.nan
    return rice_maxima(*basin_weights(beta, t, normalization))


def basin_count(x, beta: float, grid: int | None = None) -> np.ndarray:
    """Number of basins of tokens on the circle, x (..., n, 2): the local maxima of
    G(phi) = sum_j e^{beta <x_j, u(phi)>}, u(phi) = (cos phi, sin phi), counted as the sign
    changes from + to - of G'(phi) = beta sum_j <x_j, u'(phi)> e^{beta <x_j, u(phi)>} around a
    grid of `grid` points (default: BASIN_GRID, or GRID_PER_WIDTH per kernel width 1/sqrt(beta)
    if finer). A maximum and a minimum closer than one grid step are missed together. Shape
    (...,); 0 where G is constant (beta = 0 with the tokens' mean at 0)."""
    x = np.asarray(x, dtype=np.float64)
    beta = float(beta)
    if x.ndim < 2 or x.shape[-1] != 2:
        raise ValueError(f"tokens must be (..., n, 2) on the circle, got {x.shape}")
    if not math.isfinite(beta):
        raise ValueError(f"beta must be finite, got {beta!r}")
    if grid is None:
        width = 2.0 * math.pi * math.sqrt(max(abs(beta), 1.0)) * GRID_PER_WIDTH
        grid = max(BASIN_GRID, 1 << int(math.ceil(math.log2(width))))
    phi = 2.0 * math.pi * np.arange(int(grid)) / int(grid)
    u = np.stack([np.cos(phi), np.sin(phi)])  # (2, grid)
    du = np.stack([-np.sin(phi), np.cos(phi)])
    flat = x.reshape(-1, *x.shape[-2:])
    out = np.empty(flat.shape[0], dtype=np.int64)
    slope = np.empty(int(grid))
    for i, tokens in enumerate(flat):
        for at in range(0, int(grid), GRID_BLOCK):  # blocks of the grid: (n, block) fits a cache
            cut = slice(at, at + GRID_BLOCK)
            weight = tokens @ u[:, cut]
            weight *= beta
            weight -= abs(beta)
            np.exp(weight, out=weight)  # e^{beta <x_j, u> - |beta|}: G' / e^{|beta|}, no overflow
            weight *= tokens @ du[:, cut]
            slope[cut] = beta * weight.sum(axis=0)
        out[i] = np.count_nonzero((slope > 0) & (np.roll(slope, -1) <= 0))
    return out.reshape(x.shape[:-2])


def linear_phase_count(x, times, beta: float, n: int, normalization: str = "SA"):
    """(basins, t): :func:`basin_count` of each run's tokens x (runs, saves, n, 2) at the last
    save t at or before :func:`linear_phase_end`; NaN counts (and t) where it is NaN."""
    at = count_save(times, linear_phase_end(beta, n, normalization))
    x = np.asarray(x)
    if at < 0:
        return np.full(x.shape[0], np.nan), math.nan
    return basin_count(x[:, at], beta).astype(np.float64), float(np.asarray(times)[at])


def formed(x, labels, times, beta: float, delta: float, after: float = 0.0, per_basin: bool = True):
    """When the clusters have formed (module doc): for each run of tokens x (runs, saves, n, 2)
    with cluster labels (runs, saves, n) (:func:`dyn.attention.cluster_labels` at this delta),
    the first save later than `after` at which every cluster is tight (every pair of its tokens
    has <x_i, x_j> > 1 - delta, not only a chain of such pairs) and, with `per_basin`, there are
    as many clusters as basins (:func:`basin_count`: one tight cluster at each maximum of G).
    Returns (basins, time) there, each (runs,), NaN where no save qualifies."""
    x = np.asarray(x, dtype=np.float64)
    labels = np.asarray(labels)
    times = np.asarray(times, dtype=np.float64)
    runs, saves = x.shape[:2]
    basins, when = np.full(runs, np.nan), np.full(runs, np.nan)
    for r in range(runs):
        for s in np.flatnonzero(times > after):
            tokens, own = x[r, s], labels[r, s]
            same = own[:, None] == own[None, :]
            if not np.all((tokens @ tokens.T)[same] > 1.0 - delta):
                continue
            found = int(basin_count(tokens, beta))
            if per_basin and found != np.unique(own).size:
                continue
            basins[r], when[r] = found, times[s]
            break
    return basins, when
