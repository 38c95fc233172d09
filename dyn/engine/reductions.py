"""How the per-run values of an output become file variables: one small class per
``Output.reduce`` (the time average, which needs the runs themselves, is
:mod:`dyn.engine.averaging`).

Sums run on run after run (``acc <- ((acc + v_0) + v_1) + ...``, a cumulative sum along the run
axis) whatever the chunk shapes, then are divided once: where the chunks are cut never changes a
bit. Each reduction knows its companions in the file (a mean's standard error, a proportion's
count and Wilson bounds).
"""
from __future__ import annotations

from typing import ClassVar, final

import numpy as np

from ..core.contract import Output
from ..core.stats import wilson


def _running_sum(acc, v) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    start = np.zeros(v.shape[1:]) if acc is None else acc
    return np.cumsum(np.concatenate([start[None], v]), axis=0)[-1]


class Reduction:
    """Accumulates one output's per-run values (leading axis: runs) chunk by chunk."""

    kinds: ClassVar[tuple[str, ...]]

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
        return [out, Output(f"{out.name}_se", f"standard error over runs of {out.name}",
                            out.units, out.dims, "point")]

    def add(self, v):
        v = np.asarray(v, dtype=np.float64)
        if self.shift is None:
            self.shift = v[0].copy()
        u = v - self.shift
        self.total = _running_sum(self.total, v)
        self.shifted = _running_sum(self.shifted, u)
        self.squares = _running_sum(self.squares, u * u)

    def finish(self):
        mean = self.total / self.runs
        with np.errstate(over="ignore", invalid="ignore"):  # diverged runs: NaN, recorded
            centre = self.shifted / self.runs
            spread = np.maximum(self.squares / self.runs - centre * centre, 0.0)
        se = (np.sqrt(spread * self.runs / (self.runs - 1) / self.runs) if self.runs > 1
              else np.full_like(mean, np.nan))
        return {self.out.name: mean, f"{self.out.name}_se": se}


@final
class Rms(Reduction):
    """sqrt of the mean of the squared per-run values."""

    kinds = ("rms",)

    def add(self, v):
        v = np.asarray(v)
        self.total = _running_sum(self.total, v * v)

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
        return [out,
                Output(f"n_{rest}", count, "1", out.dims, "point"),
                Output(f"{out.name}_lo", f"95% Wilson lower bound of {out.name}", "1", out.dims,
                       "point"),
                Output(f"{out.name}_hi", f"95% Wilson upper bound of {out.name}", "1", out.dims,
                       "point")]

    def add(self, v):
        self.total = _running_sum(self.total, np.asarray(v))

    def finish(self):
        lo, hi = wilson(self.total, self.runs)
        name = self.out.name
        return {name: self.total / self.runs, f"n_{name[2:]}": self.total, f"{name}_lo": lo,
                f"{name}_hi": hi}


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


BY_KIND = {kind: cls for cls in (Mean, Rms, Max, Proportion, PerRun) for kind in cls.kinds}


def companions(out: Output) -> list[Output]:
    """The file variables of one declared output (itself alone for "point" and the rest)."""
    cls = BY_KIND.get(out.reduce)
    return cls.companions(out) if cls else [out]


class Reductions:
    """The reductions of several outputs over the runs of one point."""

    def __init__(self, outputs: list[Output], runs: int):
        self.parts = [BY_KIND[out.reduce](out, runs) for out in outputs]

    def add(self, values: dict[str, np.ndarray]) -> None:
        for part in self.parts:
            part.add(values[part.out.name])

    def finish(self) -> dict[str, np.ndarray]:
        values = {}
        for part in self.parts:
            values.update(part.finish())
        return values
