"""What every integrator shares: input checks and the fixed-step grid.

Step grid: for save times ts_0 < ... < ts_T and largest step dt, interval k is cut into
N_k = ceil(dt_k / dt) equal steps h_k = dt_k / N_k with dt_k = ts_{k+1} - ts_k, and step j of
interval k starts at t = ts_k + j h_k. For uniform ts every N_k is equal, so h is the largest step
<= dt that divides every save interval evenly.
"""

import abc

import numpy as np

from .solution import Solution

# Relative slack when dividing an interval by dt, so that ts = linspace(0, 1, 11) with dt = 0.1
# gives one step per interval rather than two because 0.1 / 0.1 rounded to 1 + 2e-16.
STEP_SLACK = 1e-9
DEFAULT_DT = 1e-2  # the fixed-step methods' step when none is set: the one place it is written
# The most steps a fixed-step solve takes per run over its save times: at a (generous) 10^8
# steps per second that is 10 s a run; past it a dt is refused, never cast to a wrapped int64.
MAX_STEPS = 10**9


def check_state(x0) -> np.ndarray:
    """x0 as a C-contiguous float64 (E, n, d) array of finite numbers."""
    x0 = np.asarray(x0)
    if x0.ndim != 3:
        raise ValueError(f"x0 must have shape (E, n, d) (ensemble, rows, dim), got shape {x0.shape}")
    if min(x0.shape) == 0:
        raise ValueError(f"x0 must be non-empty, got shape {x0.shape}")
    if not np.issubdtype(x0.dtype, np.floating) and not np.issubdtype(x0.dtype, np.integer):
        raise ValueError(f"x0 must be real, got dtype {x0.dtype}")
    x0 = np.ascontiguousarray(x0, dtype=np.float64)
    if not np.all(np.isfinite(x0)):
        raise ValueError("x0 contains non-finite values (nan or inf)")
    return x0


def check_times(ts) -> np.ndarray:
    """ts as a 1-D float64 array (a writable copy) of finite, strictly increasing save times."""
    ts = np.array(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.shape[0] < 1:
        raise ValueError(f"ts must be a non-empty 1-D array of save times, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)):
        raise ValueError("ts contains non-finite values")
    if np.any(np.diff(ts) <= 0):
        raise ValueError("ts must be strictly increasing")
    return ts


def check_params(p) -> np.ndarray:
    p = np.ascontiguousarray(p, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"p must be a flat 1-D vector, got shape {p.shape}")
    return p


def check_positive(name: str, value) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"option {name!r} must be a positive number, got {value!r}") from None
    if not (np.isfinite(value) and value > 0):
        raise ValueError(f"option {name!r} must be a positive finite number, got {value!r}")
    return value


def check_adaptive_options(o: dict) -> None:
    """Check, in place, the options of an adaptive integrator: rtol, atol, dt0 (None or > 0),
    max_steps (a positive integer)."""
    o["rtol"] = check_positive("rtol", o["rtol"])
    o["atol"] = check_positive("atol", o["atol"])
    if o["dt0"] is not None:
        o["dt0"] = check_positive("dt0", o["dt0"])
    steps = o["max_steps"]
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"option 'max_steps' must be a positive integer, got {steps!r}")
    o["max_steps"] = int(steps)


def step_count(ts, dt: float) -> float:
    """The steps of the grid over save times `ts` with largest step `dt`, as a float (inf when
    dt is 0 or the count overflows): what MAX_STEPS is checked against."""
    widths = np.diff(np.asarray(ts, dtype=np.float64))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        steps = np.maximum(np.ceil(widths / dt * (1.0 - STEP_SLACK)), 1.0)
        total = float(np.sum(steps))
    return total if np.isfinite(total) else np.inf


def step_grid(ts: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Steps per save interval N_k (int64) and step sizes h_k (float64); see the module doc.
    Raises ValueError past MAX_STEPS steps in all."""
    total = step_count(ts, dt)
    if not total <= MAX_STEPS:
        raise ValueError(
            f"dt = {dt:g} over save times up to {ts[-1]:g} takes {total:.3g} steps, "
            f"past the limit of {MAX_STEPS:.0e} per run"
        )
    widths = np.diff(ts)
    counts = np.maximum(np.ceil(widths / dt * (1.0 - STEP_SLACK)), 1.0).astype(np.int64)
    return counts, widths / counts


def step_times(ts: np.ndarray, dt: float) -> np.ndarray:
    """Every step boundary, ts_k + j h_k, ending at ts[-1] exactly (same floats as the kernels)."""
    counts, steps = step_grid(ts, dt)
    parts = [ts[k] + np.arange(counts[k]) * steps[k] for k in range(counts.shape[0])]
    return np.concatenate(parts + [ts[-1:]])


class AbstractIntegrator(abc.ABC):
    """Steps an ensemble:  solve(problem, x0 (E, n, d), ts (T,)) -> :class:`Solution`, whose
    states are (E, T, n, d), with a status and statistics per run.

    One API for ODEs and SDEs: a method with ``stochastic = True`` solves a problem with a
    diffusion and takes its noise from ``rng`` (a numpy Generator) or explicit ``increments``
    (E, N, q1, q2) on the step grid; any other method solves an ODE and refuses both. Subclasses
    declare ``backend``, ``method``, ``OPTIONS`` (name -> default) and implement
    ``_solve(problem, x0, ts, p, noise)`` on checked arrays (``noise``: None for an ODE, else
    ``(rng, increments)`` with exactly one of them given), returning the states or a Solution.
    """

    backend: str
    method: str
    OPTIONS: dict = {}
    stochastic: bool = False

    def __init__(self, **options):
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for {self.backend}/{self.method}; allowed: {sorted(self.OPTIONS)}"
            )
        self.options = {**self.OPTIONS, **options}
        self._check_options()

    def _check_options(self):  # noqa: B027 an optional hook: by default any value of a known option passes
        pass

    observes = False  # takes an observer (integrators.core.observer)

    def solve(self, problem, x0, ts, rng=None, increments=None, observer=None) -> Solution:
        """The solution at the save times ts: states (E, len(ts), n, d), states[:, 0] = x0, a
        status and statistics per run (:mod:`integrators.core.solution`). With an `observer`
        (:class:`integrators.core.observer.Observer`) its rows (E, len(ts), columns) instead of
        the states, on the methods that take one (``observes``)."""
        if observer is not None:
            return self._observed_solve(problem, x0, ts, rng, increments, observer)
        found = self._checked_solve(problem, x0, ts, rng, increments)
        if isinstance(found, Solution):
            return found
        return Solution.of(found, steps=self._grid_steps(ts), rejections=0)

    def _observed_solve(self, problem, x0, ts, rng, increments, observer) -> Solution:
        from .observer import Observer

        if not self.observes:
            raise ValueError(f"{self.backend}/{self.method} takes no observer (the numba fixed-step methods do)")
        if not isinstance(observer, Observer):
            raise ValueError(f"observer must be an integrators.Observer, got {type(observer).__name__}")
        return self._checked_solve(problem, x0, ts, rng, increments, observer)

    def _solve_observed(self, problem, x0, ts, p, observer) -> Solution:
        """The observed solve of an ODE on checked arrays (methods with ``observes``)."""
        raise NotImplementedError

    def _grid_steps(self, ts):
        """Steps per run of a fixed-step method (None where the method adapts them)."""
        return None

    def _checked_solve(self, problem, x0, ts, rng, increments, observer=None):
        from .problem import Problem

        if not isinstance(problem, Problem):
            raise ValueError(f"problem must be an integrators.Problem, got {type(problem).__name__}")
        x0 = check_state(x0)
        ts = check_times(ts)
        p = check_params(problem.p)
        if not self.stochastic:
            if problem.stochastic:
                raise ValueError(
                    f"{self.backend}/{self.method} solves ODEs; this problem has a diffusion (use euler_maruyama)"
                )
            if rng is not None or increments is not None:
                raise ValueError("an ODE solve takes no rng or increments")
            if observer is not None:
                return self._solve_observed(problem, x0, ts, p, observer)
            return self._solve(problem, x0, ts, p, None)
        if not problem.stochastic:
            raise ValueError(f"{self.backend}/{self.method} solves SDEs; this problem has no diffusion")
        if increments is not None:
            increments = np.ascontiguousarray(increments, dtype=np.float64)
            counts, _ = step_grid(ts, self.options["dt"])
            want = (x0.shape[0], int(counts.sum())) + problem.noise_shape
            if increments.shape != want:
                raise ValueError(f"increments must have shape {want} (E, steps, q1, q2), got {increments.shape}")
        elif not isinstance(rng, np.random.Generator):
            raise ValueError("an SDE solve needs rng (a numpy Generator) or explicit increments")
        return self._solve(problem, x0, ts, p, (rng, increments))

    @abc.abstractmethod
    def _solve(self, problem, x0, ts, p, noise) -> np.ndarray: ...

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({opts})"


class FixedStep:
    """Mixin of the fixed-step methods: option ``dt``, the largest step (grid of
    :func:`step_grid`)."""

    OPTIONS = {"dt": DEFAULT_DT}

    def _check_options(self):
        self.options["dt"] = check_positive("dt", self.options["dt"])

    def _grid_steps(self, ts):
        return int(step_count(np.asarray(ts, dtype=np.float64), self.options["dt"]))
