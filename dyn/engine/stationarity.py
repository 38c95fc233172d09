r"""Time averages of Monte Carlo runs: where the window starts, whether the runs are stationary in
it, and the standard error of the average with its effective sample size.

Input: R independent runs of a scalar series y_r(t_k) sampled every Delta in time (R x N).

**Window start (burn-in).** MSER truncation (White 1997), on the mean over runs
ybar_k = (1/R) sum_r y_r(t_k) cut into batches of MSER_BATCH samples z_j: the start j* minimises

    MSER(j) = sum_{i >= j} (z_i - zbar_{j:})^2 / (M - j)^2,      j <= M / 2,

i.e. the squared standard error of the remaining mean if its samples were independent: early
transient samples far from the final level inflate the sum more than dropping them shrinks the
count. A start at the search limit M/2 means the series has not settled.

**Effective sample size.** Within the window each run is a correlated series. With the
autocovariance C(k) pooled over runs (each run centred on its own window mean) and rho(k) =
C(k)/C(0), the integrated autocorrelation time (in samples) is

    tau = 1/2 + sum_{k=1}^{M} rho(k),   M the smallest lag with M >= SOKAL_C tau(M)

(Sokal's automatic window), so that the window mean of one run of N_w samples has variance
C(0) 2 tau / N_w: the run holds N_w / (2 tau) effective samples, R N_w / (2 tau) in all (`ess`).

**Standard error.** Runs are independent, so the variance of the average over runs is
Var(m_r) / R with m_r the run's window mean. Two estimates of Var(m_r): across runs (the sample
variance of the m_r, R - 1 degrees of freedom; it sees runs stuck in different states) and
within runs (C(0) 2 tau / N_w; it needs no second run). `se` is the larger of the two, so a
handful of runs never gives an optimistic error and a single run still has one.

**Stationarity.** The window is cut in halves with means a_r, b_r. Three checks:
- drift: D = mean_r (b_r - a_r) against its standard error (the larger of the across-run and the
  within-run estimate, the latter 8 C(0) tau / (R N_w)): |D| / se_D <= DRIFT_Z;
- mixing: the runs agree with each other as well as their own fluctuations say they should:
  the across-run over the within-run variance of m_r below the 99.9% point of
  chi^2_{R-1}/(R-1), times MIXING_SLACK for the error of tau (runs stuck in different metastable
  states fail here even when each looks flat);
- length: at least MIN_EFFECTIVE effective samples per run (a window of 2 MIN_EFFECTIVE tau),
  below which neither tau nor the halves mean anything.
A run is itself non-stationary when |b_r - a_r| exceeds DRIFT_Z times its own within-run
standard error; the share of such runs is reported (it is not the verdict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MSER_BATCH = 5  # samples per batch in MSER
SOKAL_C = 5.0  # automatic window: lag M >= SOKAL_C tau
DRIFT_Z = 3.0  # halves may differ by this many standard errors
MIXING_LEVEL = 1e-3  # false-alarm level of the mixing check
MIXING_SLACK = 1.5  # allowance for the error of the estimated tau
MIN_EFFECTIVE = 10.0  # effective samples per run
MIN_WINDOW = 8  # samples


@dataclass(frozen=True)
class WindowStats:
    """The time average of one output over one window, and how far it can be trusted."""

    start: int  # first sample of the window
    mean: float  # mean over runs of the window means
    se: float  # standard error of `mean`
    ess: float  # effective samples in all runs
    tau: float  # integrated autocorrelation time, in samples
    drift_z: float  # (second half - first half) / its standard error
    mixing: float  # across-run / within-run variance of the run means
    mixing_limit: float
    share_nonstationary: float  # runs whose own halves differ by more than DRIFT_Z
    runs: int
    finite: bool = True

    @property
    def drifting(self) -> bool:
        return not abs(self.drift_z) <= DRIFT_Z

    @property
    def unmixed(self) -> bool:
        return not self.mixing <= self.mixing_limit

    @property
    def mixing_ratio(self) -> float:
        """mixing / mixing_limit: above 1, the runs disagree (0 when no limit applies)."""
        if math.isinf(self.mixing_limit):
            return 0.0
        return self.mixing / self.mixing_limit if self.mixing_limit > 0 else math.inf

    @property
    def short(self) -> bool:
        return not self.ess / self.runs >= MIN_EFFECTIVE

    @property
    def stationary(self) -> bool:
        """Every check passed (see the module doc)."""
        return self.finite and not (self.drifting or self.unmixed or self.short)

    def reasons(self) -> list[str]:
        """Why the window is not stationary, in words."""
        out = []
        if not self.finite:
            out.append("non-finite values")
        if self.drifting:
            out.append(f"halves differ by {self.drift_z:.1f} standard errors")
        if self.unmixed:
            out.append(f"runs disagree ({self.mixing:.1f} x their own spread)")
        if self.short:
            out.append(f"only {self.ess / self.runs:.1f} effective samples per run")
        return out


def _series(y) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.ndim == 1:
        y = y[None]
    if y.ndim != 2 or y.shape[1] < 1:
        raise ValueError(f"series must have shape (runs, samples), got {y.shape}")
    return y


def mser_start(y, batch: int = MSER_BATCH) -> int:
    """The MSER truncation point (a sample index) of the mean over runs of y (runs, N)."""
    ybar = _series(y).mean(axis=0)
    m = ybar.size // batch
    if m < 4:
        return 0
    z = ybar[ybar.size - m * batch :].reshape(m, batch).mean(axis=1)  # batches end at the end
    offset = ybar.size - m * batch
    # suffix sums give every candidate's mean and spread at once
    s1 = np.cumsum(z[::-1])[::-1]
    s2 = np.cumsum((z * z)[::-1])[::-1]
    count = np.arange(m, 0, -1, dtype=np.float64)
    spread = np.maximum(s2 - s1 * s1 / count, 0.0)
    score = spread / count**2
    limit = m // 2
    j = int(np.argmin(score[: limit + 1]))
    return offset + j * batch if j else 0


def integrated_time(y) -> float:
    """Integrated autocorrelation time (in samples) of y (runs, N), autocovariance pooled over runs
    with each run centred on its own mean; Sokal's automatic window. 0.5 for white noise."""
    y = _series(y)
    n = y.shape[1]
    if n < 2:
        return 0.5
    x = y - y.mean(axis=1, keepdims=True)
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(x, size, axis=1)
    acov = np.fft.irfft(f * np.conj(f), size, axis=1)[:, :n].sum(axis=0) / (y.shape[0] * n)
    if not acov[0] > 0:
        return 0.5  # a constant series: nothing correlated
    rho = acov / acov[0]
    tau = 0.5
    for lag in range(1, n):
        tau += rho[lag]
        if lag >= SOKAL_C * tau:
            break
    return max(tau, 0.5)


def window_stats(y, start: int) -> WindowStats:
    """Mean, standard error, effective sample size and stationarity checks of runs y (R, N) over
    the window of samples start..N-1 (see the module doc)."""
    y = _series(y)
    R = y.shape[0]
    w = y[:, int(start) :]
    nw = w.shape[1]
    if nw < MIN_WINDOW or not np.isfinite(w).all():
        return WindowStats(
            int(start),
            float(np.mean(w)) if w.size else math.nan,
            math.nan,
            0.0,
            math.nan,
            math.nan,
            math.nan,
            math.nan,
            1.0,
            R,
            finite=bool(np.isfinite(w).all()),
        )
    tau = integrated_time(w)
    m = w.mean(axis=1)
    c0 = w.var(axis=1)  # each run about its own mean
    within = c0.mean() * 2.0 * tau / nw  # Var(m_r) from the runs' own fluctuations
    across = m.var(ddof=1) if R > 1 else 0.0
    se = math.sqrt(max(within, across) / R)
    half = nw // 2
    a = w[:, :half].mean(axis=1)
    b = w[:, nw - half :].mean(axis=1)
    diff = b - a
    diff_within = 2.0 * c0.mean() * 2.0 * tau / half
    diff_across = diff.var(ddof=1) if R > 1 else 0.0
    se_diff = math.sqrt(max(diff_within, diff_across) / R)
    drift_z = float(diff.mean() / se_diff) if se_diff > 0 else (0.0 if diff.mean() == 0 else math.inf)
    if R > 1 and within > 0:
        from scipy.special import chdtri  # chi2.isf's own function, without scipy.stats' import

        mixing = float(across / within)
        limit = float(chdtri(R - 1, MIXING_LEVEL) / (R - 1) * MIXING_SLACK)
    else:
        mixing, limit = (0.0, math.inf) if within > 0 or across == 0 else (math.inf, 0.0)
    own = np.sqrt(2.0 * c0 * 2.0 * tau / half)
    with np.errstate(divide="ignore", invalid="ignore"):
        bad = np.where(own > 0, np.abs(diff) > DRIFT_Z * own, diff != 0)
    return WindowStats(
        int(start),
        float(m.mean()),
        se,
        float(R * nw / (2.0 * tau)),
        float(tau),
        drift_z,
        mixing,
        limit,
        float(bad.mean()),
        R,
    )


def assess(y, start: int | None = None) -> WindowStats:
    """The statistics of runs y (R, N) over the window from sample `start` (a fixed burn-in), or
    from MSER's truncation point when `start` is None."""
    y = _series(y)
    return window_stats(y, mser_start(y) if start is None else int(start))
