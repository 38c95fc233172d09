"""What every integrator shares: input checks and the fixed-step grid.

Step grid: for save times ts_0 < ... < ts_T and largest step dt, interval k is cut into
N_k = ceil(dt_k / dt) equal steps h_k = dt_k / N_k with dt_k = ts_{k+1} - ts_k, and step j of
interval k starts at t = ts_k + j h_k. For uniform ts every N_k is equal, so h is the largest step
<= dt that divides every save interval evenly.
"""

import abc

import numpy as np

# Relative slack when dividing an interval by dt, so that ts = linspace(0, 1, 11) with dt = 0.1
# gives one step per interval rather than two because 0.1 / 0.1 rounded to 1 + 2e-16.
STEP_SLACK = 1e-9


def check_state(x0) -> np.ndarray:
    """x0 as a C-contiguous float64 (E, n, d) array of finite numbers."""
    x0 = np.asarray(x0)
    if x0.ndim != 3:
        raise ValueError(
            f"x0 must have shape (E, n, d) (ensemble, rows, dim), got shape {x0.shape}"
        )
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


def step_grid(ts: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """Steps per save interval N_k (int64) and step sizes h_k (float64); see the module doc."""
    widths = np.diff(ts)
    counts = np.maximum(np.ceil(widths / dt * (1.0 - STEP_SLACK)), 1.0).astype(np.int64)
    return counts, widths / counts


def step_times(ts: np.ndarray, dt: float) -> np.ndarray:
    """Every step boundary, ts_k + j h_k, ending at ts[-1] exactly (same floats as the kernels)."""
    counts, steps = step_grid(ts, dt)
    parts = [ts[k] + np.arange(counts[k]) * steps[k] for k in range(counts.shape[0])]
    return np.concatenate(parts + [ts[-1:]])


class AbstractIntegrator(abc.ABC):
    """Steps an ensemble:  solve(problem, x0 (E, n, d), ts (T,)) -> states (E, T, n, d).

    Subclasses declare ``backend``, ``method``, ``OPTIONS`` (name -> default) and implement
    ``_solve`` on checked arrays.
    """

    backend: str
    method: str
    OPTIONS: dict = {}

    def __init__(self, **options):
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for {self.backend}/{self.method}; "
                f"allowed: {sorted(self.OPTIONS)}"
            )
        self.options = {**self.OPTIONS, **options}
        self._check_options()

    def _check_options(self):
        pass

    def solve(self, problem, x0, ts) -> np.ndarray:
        """States at the save times ts, shape (E, len(ts), n, d); states[:, 0] = x0."""
        from .problem import Problem

        if not isinstance(problem, Problem):
            raise ValueError(
                f"problem must be an integrators.Problem, got {type(problem).__name__}"
            )
        x0 = check_state(x0)
        ts = check_times(ts)
        p = check_params(problem.p)
        return self._solve(problem, x0, ts, p)

    @abc.abstractmethod
    def _solve(self, problem, x0, ts, p) -> np.ndarray: ...

    def __repr__(self):
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"{type(self).__name__}({opts})"
