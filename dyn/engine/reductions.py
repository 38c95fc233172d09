"""How the per-run values of an output become file variables: one small class per
``Output.reduce`` (the time average, which needs the runs themselves, is
:mod:`dyn.engine.averaging`).

Sums run on run after run (``acc <- ((acc + v_0) + v_1) + ...``, the last row of a cumulative sum
along the run axis; :mod:`dyn.engine.runsums`) whatever the chunk shapes, then are divided once:
where the chunks are cut never changes a bit. Each reduction knows its companions in the file (a
mean's standard error, a proportion's count and Wilson bounds).
"""

from __future__ import annotations

from typing import ClassVar, final

import numpy as np

from ..core.contract import Output
from ..core.stats import wilson
from .runsums import add_runs, add_shifted_runs


class Reduction:
    """Accumulates one output's per-run values (leading axis: runs) chunk by chunk."""

    kinds: ClassVar[tuple[str, ...]]
    horizon: float | None = None  # the point's horizon T (set by Reductions): censored times

    def __init__(self, out: Output, runs: int):
        self.out = out
        self.runs = runs
        self.total = None  # the running sum, for the reductions that sum

    @staticmethod
    def companions(out: Output) -> list[Output]:
        """The file variables of `out`: itself and whatever comes with it."""
        return [out]

    def add(self, v: np.ndarray) -> None:
        raise NotImplementedError

    def finish(self) -> dict[str, np.ndarray]:
        raise NotImplementedError


@final
class Mean(Reduction):
    """The mean over runs, X, and its standard error X_se (sample std / sqrt(runs); NaN for one
    run). The mean is the running sum of v over runs; the spread comes from running sums of
    u = v - v_0 and u^2, shifted by the first run's value: with E[v^2] - E[v]^2 instead, runs
    that agree to rounding (tokens all in one cluster, |v| ~ 1) gave a standard error of ~1e-8
    (the square root of the cancellation), where theirs is ~1e-16."""

    kinds = ("mean", "mean_se")

    def __init__(self, out, runs):
        super().__init__(out, runs)
        self.shift = self.shifted = self.squares = None

    @staticmethod
    def companions(out):
        return [out, Output(f"{out.name}_se", f"standard error over runs of {out.name}", out.units, out.dims, "point")]

    def add(self, v):
        v = np.asarray(v)
        if self.shift is None:
            self.shift = np.array(v[0], dtype=np.float64)
        sums = None if self.total is None else (self.total, self.shifted, self.squares)
        self.total, self.shifted, self.squares = add_shifted_runs(sums, self.shift, v)

    def finish(self):
        mean = self.total / self.runs
        with np.errstate(over="ignore", invalid="ignore"):  # diverged runs: NaN, recorded
            centre = self.shifted / self.runs
            spread = np.maximum(self.squares / self.runs - centre * centre, 0.0)
        se = np.sqrt(spread * self.runs / (self.runs - 1) / self.runs) if self.runs > 1 else np.full_like(mean, np.nan)
        return {self.out.name: mean, f"{self.out.name}_se": se}


@final
class Rms(Reduction):
    """sqrt of the mean of the squared per-run values."""

    kinds = ("rms",)

    def add(self, v):
        v = np.asarray(v)
        self.total = add_runs(self.total, v * v)

    def finish(self):
        return {self.out.name: np.sqrt(self.total / self.runs)}


@final
class Max(Reduction):
    """The largest per-run value."""

    kinds = ("max",)

    def __init__(self, out, runs):
        super().__init__(out, runs)
        self.top = None

    def add(self, v):
        part = np.asarray(v).max(axis=0)
        self.top = part if self.top is None else np.maximum(self.top, part)

    def finish(self):
        return {self.out.name: np.asarray(self.top, dtype=np.float64)}


@final
class Proportion(Reduction):
    """Per-run booleans: the fraction p_X, its count n_X and the 95% Wilson bounds."""

    kinds = ("proportion",)

    @staticmethod
    def companions(out):
        rest = out.name[2:]
        count = out.long_name.replace("fraction of runs", "number of runs", 1)
        if count == out.long_name:
            count = f"number of runs: {out.long_name}"
        return [
            out,
            Output(f"n_{rest}", count, "1", out.dims, "point"),
            Output(f"{out.name}_lo", f"95% Wilson lower bound of {out.name}", "1", out.dims, "point"),
            Output(f"{out.name}_hi", f"95% Wilson upper bound of {out.name}", "1", out.dims, "point"),
        ]

    def add(self, v):
        self.total = add_runs(self.total, v)

    def finish(self):
        lo, hi = wilson(self.total, self.runs)
        name = self.out.name
        return {name: self.total / self.runs, f"n_{name[2:]}": self.total, f"{name}_lo": lo, f"{name}_hi": hi}


@final
class PerRun(Reduction):
    """No reduction: every run's value (a leading `run` dimension in the file)."""

    kinds = ("per_run",)

    def __init__(self, out, runs):
        super().__init__(out, runs)
        self.parts = []

    def add(self, v):
        self.parts.append(np.asarray(v, dtype=np.float64))

    def finish(self):
        return {self.out.name: np.concatenate(self.parts)}


CONFIDENCE = 0.95  # of the median's interval


@final
class TimeToEvent(Reduction):
    """A first-passage time per run (NaN: not reached by the horizon T, censored there).

    X is the mean with T in place of every censored run, as the mean of such times always was
    (X_se its standard error): a censored mean, biased low by as much as the censored runs
    would have taken past T. Beside it:
    - X_censored, the share of runs censored at T;
    - X_median, the Kaplan-Meier median: with every run watched to the same T (censoring only
      there, after every observed time), the Kaplan-Meier survival S(t) = #{runs with t_i > t} / n
      for t < T, and the median is the smallest time with S(t) <= 1/2, the ceil(n/2)-th
      smallest time; NaN when that run is censored (more than half the runs never got there);
    - X_median_lower, X_median_upper: the 95% distribution-free interval (t_(j), t_(n+1-j)) of
      the order statistics, j the largest with P(B <= j - 1) <= 2.5% for B ~ Binomial(n, 1/2),
      which covers the median with probability 1 - 2 P(B <= j - 1) >= 95% whatever the law of
      the times (>= for times on the save grid, whose ties only widen it); NaN where that order
      statistic is censored (the bound lies beyond T) or where n < 6 runs cannot give 95%.
    """

    kinds = ("time_to_event",)

    def __init__(self, out, runs):
        super().__init__(out, runs)
        self.mean = Mean(out, runs)
        self.parts = []

    @staticmethod
    def companions(out):
        name, units, dims = out.name, out.units, out.dims
        median = NAN_MEDIAN  # what a NaN in the median or its bounds means

        def point(suffix, long_name, unit=units, nan_means=""):
            return Output(f"{name}{suffix}", long_name, unit, dims, "point", nan_means=nan_means)

        return [
            *Mean.companions(out),
            point("_censored", f"share of runs whose {name} is censored at the horizon T (never reached by T)", "1"),
            point("_median", f"Kaplan-Meier median of {name} (censored at T)", nan_means=median),
            point(
                "_median_lower",
                f"lower end of the 95% distribution-free interval of the median of {name}",
                nan_means=median,
            ),
            point(
                "_median_upper",
                f"upper end of the 95% distribution-free interval of the median of {name}",
                nan_means=median,
            ),
        ]

    def add(self, v):
        v = np.asarray(v, dtype=np.float64)
        if self.horizon is None:
            raise ValueError(f"output {self.out.name}: a censored time needs the horizon")
        self.parts.append(v)
        self.mean.add(np.where(np.isnan(v), self.horizon, v))

    def finish(self):
        times = np.concatenate(self.parts)
        name, n = self.out.name, self.runs
        values = self.mean.finish()
        values[f"{name}_censored"] = np.isnan(times).sum(axis=0) / n
        ordered = np.sort(times, axis=0)  # NaN (censored) last: as +inf, past every time
        values[f"{name}_median"] = ordered[(n + 1) // 2 - 1]
        j = median_rank(n, CONFIDENCE)
        nan = np.full(times.shape[1:], np.nan)
        values[f"{name}_median_lower"] = ordered[j - 1] if j else nan
        values[f"{name}_median_upper"] = ordered[n - j] if j else nan
        return values


NAN_MEDIAN = (
    "not reached by the horizon T (more than half the runs, or the bound, lie beyond "
    "it), or too few runs for a 95% interval"
)


def median_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """The largest j >= 1 with P(B <= j - 1) <= (1 - confidence) / 2 for B ~ Binomial(n, 1/2),
    so that the order statistics (t_(j), t_(n+1-j)) cover the median with probability
    1 - 2 P(B <= j - 1) >= confidence; 0 when no j does (n < 6 at 95%).

    Up to EXACT_RANKS runs in integers: P(B <= k) <= a / b (the tail's float as a ratio) is
    b sum_{i <= k} C(n, i) <= a 2^n, with no rounding and no scipy import (scipy.special's took
    0.15-0.25 s of every sweep with a time to an event); beyond, scipy.special.bdtr, bisected."""
    tail = (1.0 - confidence) / 2.0
    if n <= EXACT_RANKS:
        a, b = tail.as_integer_ratio()
        bound = a << n
        below, term, k = 0, 1, 0  # below = sum_{i < k} C(n, i), term = C(n, k)
        while k <= n and (below + term) * b <= bound:
            below += term
            term = term * (n - k) // (k + 1)
            k += 1
        return k  # the count of k with P(B <= k) <= tail: j - 1 = k - 1, the largest of them
    from scipy.special import bdtr  # bdtr(k, n, p) = P(B <= k)

    if bdtr(0, n, 0.5) > tail:
        return 0
    below, above = 0, n  # P(B <= below) <= tail < P(B <= above) = 1
    while above - below > 1:
        mid = (below + above) // 2
        below, above = (mid, above) if bdtr(mid, n, 0.5) <= tail else (below, mid)
    return below + 1  # j - 1 = below, the largest k with P(B <= k) <= tail


EXACT_RANKS = 1 << 14  # runs up to which median_rank counts in integers (exact and still quick at the top)


BY_KIND = {kind: cls for cls in (Mean, Rms, Max, Proportion, PerRun, TimeToEvent) for kind in cls.kinds}


def companions(out: Output) -> list[Output]:
    """The file variables of one declared output (itself alone for "point" and the rest)."""
    cls = BY_KIND.get(out.reduce)
    return cls.companions(out) if cls else [out]


PER_RUN_SUFFIX = "_per_run"  # [output] per_run: the runs' values of X kept as X_per_run


def kept_runs(out: Output, run_dim: str) -> Output:
    """The file variable holding every run's value of `out` (`[output] per_run`): X_per_run,
    over (run, *its dims); a censored time's NaN there means not reached by the horizon."""
    nan_means = out.nan_means or ("not reached by the horizon" if out.reduce == "time_to_event" else "")
    what = "1 if so, 0 if not" if out.reduce == "proportion" else out.long_name
    return Output(
        f"{out.name}{PER_RUN_SUFFIX}",
        f"each run's value of {out.name} ({what})",
        out.units,
        (run_dim, *out.dims),
        "point",
        nan_means=nan_means,
    )


class Reductions:
    """The reductions of several outputs over the runs of one point; `keep` names those whose
    every run's value is also kept (`[output] per_run`: X_per_run); `horizon` is the point's T
    (censored times are censored there)."""

    def __init__(self, outputs: list[Output], runs: int, keep=(), horizon: float | None = None):
        self.parts = [BY_KIND[out.reduce](out, runs) for out in outputs]
        for part in self.parts:
            part.horizon = horizon
        self.kept = {out.name: PerRun(kept_runs(out, "run"), runs) for out in outputs if out.name in keep}

    def add(self, values: dict[str, np.ndarray]) -> None:
        for part in self.parts:
            part.add(values[part.out.name])
        for name, part in self.kept.items():
            part.add(values[name])

    def finish(self) -> dict[str, np.ndarray]:
        values = {}
        for part in [*self.parts, *self.kept.values()]:
            values.update(part.finish())
        return values
