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
the mean first-plateau count is 0.79 k*(beta) (weighted fit, chi^2 = 3.7 for 7 degrees of
freedom), against c sqrt(beta log beta) with c = 0.67 and chi^2 = 73: the count follows the
shape of k*, below it by a nearly constant factor, the same at n = 512 (within about two
standard errors at beta = 4, 8, 16, 24, 40), so finite n does not set it.

**The first plateau.** The cluster count C(t) of a run (connected components of <x_i, x_j> > 1 -
delta, :func:`dyn.attention.n_clusters`) at the save times t_0 < t_1 < ... (log-spaced) is a
staircase: it starts at the number of delta-chains of the uniform draw, wanders while tokens
gather (a chain can split before its cluster has formed, so C can rise), falls as the clusters
form, then holds each metastable count over a stretch of log t and falls by merges. A *stretch*
is a maximal run of saves t_a .. t_b with one count c; it *holds for* t_b / t_a. The first plateau
is the first stretch, other than the one holding the initial count, with

    t_b / t_a >= ratio (default PLATEAU_RATIO = 3: a factor 3 in time, 1.1 on a log axis), and
    C(t_j) <= c at every later save (metastable clusters only merge);

its count c, its start t_a and its end: the first save t_{b+1} at which the count is lower (the
time of the first merge after the plateau, to one save interval), NaN when it holds to the last
save. No such stretch: NaN for all three.

**The merge time scale.** Clusters at a fixed distance theta merge on times ~ e^{beta theta^2 /2}:
exp(c beta) with c = theta^2 / 2 (the metastability of §1.4, for a start of well-separated
clusters). After a uniform start the distances themselves shrink like 1/sqrt(beta) (k* ~
sqrt(2 beta) clusters), so beta theta^2 stays of order one and the first merge after the plateau
need not grow exponentially in beta at all: :func:`merge_rate` fits log t = a + c beta to the
per-beta median of the runs' merge times (censored at the horizon) with a bootstrap interval, and
the same against log beta (a power law), so that the two can be compared. Measured (n = 256, 10
runs per beta, beta = 4 .. 40, T = 1e4, 9 runs in 10 merged or more at every beta): the median
first merge falls from ~1400 (beta = 4) to ~170 (beta = 40), c = -0.055 with 95% interval
[-0.091, -0.014]; no exp(c beta) growth (the runs spread over two decades at each beta). More
clusters, at distances ~ 1/sqrt(beta), give more neighbour pairs to merge first.
"""
from __future__ import annotations

import math

import numpy as np

PLATEAU_RATIO = 3.0  # a stretch must hold its count over this factor in time to be a plateau
THEORY_MAX_BETA = 700.0  # dyn.noisy.theory's rates need I_0(beta) < 1e308 (beta < ~709)
MODE_MARGIN = 10  # modes searched beyond 3 sqrt(2 beta) (k* ~ sqrt(2 beta - 1/3))


def _betas(beta) -> np.ndarray:
    b = np.asarray(beta, dtype=np.float64)
    if not np.all(np.isfinite(b)):
        raise ValueError(f"beta must be finite, got {beta!r}")
    return b


def most_unstable_mode(beta, normalization: str = "SA"):
    """k*(beta) = argmax_{k >= 1} lambda_k, the fastest-growing Fourier mode of the uniform law
    on the circle at sigma = 0 (rates from :func:`dyn.noisy.theory.growth_rates`; module doc).
    Past THEORY_MAX_BETA (where they overflow: a_0 = I_0(beta) > 1e308), the same argmax from the
    scaled coefficients k^2 I_k(beta) e^{-beta} (:func:`dyn.noisy.kernel.circle_coefficients`;
    lambda_k is that times e^beta / (beta D_0), the same for every k). NaN for beta <= 0 (no
    clustering instability to follow). Scalar or array, as beta."""
    from ..noisy import kernel, theory

    b = _betas(beta)
    out = np.full(b.shape, np.nan)
    flat = out.reshape(-1)
    for i, x in enumerate(b.reshape(-1)):
        if x <= 0:
            continue
        top = int(3 * math.sqrt(2 * x)) + MODE_MARGIN
        k = np.arange(1, top + 1)
        if x <= THEORY_MAX_BETA:
            rates = theory.growth_rates(float(x), 0.0, 2, normalization, k)
        else:
            rates = k * k * kernel.circle_coefficients(float(x), top)[1:]
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
    for a, b in zip(starts[1:], stops[1:]):
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
        raise ValueError(f"counts must be (..., saves) with saves = len(times), got counts "
                         f"{counts.shape} and times {times.shape}")
    if np.any(np.diff(times) <= 0) or (times.size and times[0] < 0):
        raise ValueError("times must be increasing and >= 0")
    flat = counts.reshape(-1, times.shape[0])
    out = np.array([_one_plateau(row, times, ratio) for row in flat]).reshape(
        counts.shape[:-1] + (3,))
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


def merge_rate(beta, end_times, against: str = "beta", resamples: int = 2000, seed: int = 0,
               level: float = 0.95) -> dict:
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
    lo, hi = (np.quantile(rates, [tail, 1.0 - tail]) if rates else (np.nan, np.nan))
    return {"rate": rate, "lo": float(lo), "hi": float(hi), "intercept": intercept,
            "used": beta[used], "medians": medians, "residual": residual}
