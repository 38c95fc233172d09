r"""System `ornstein_uhlenbeck`: the linear SDE whose stationary law, and whose Euler-Maruyama
bias, are known exactly: the calibration case of time averages and of the step check.

    dX = -theta X dt + sigma dB,   X in R^d,   X(0) = x0 (every coordinate)

Stationary law N(0, sigma^2 / (2 theta) I); relaxation time 1/theta of the mean, 1/(2 theta) of
the second moment. Euler-Maruyama with step h, X' = (1 - theta h) X + sigma sqrt(h) Z, is again
a linear recursion whose stationary variance solves v = (1 - theta h)^2 v + sigma^2 h:

    v_h = sigma^2 / (theta (2 - theta h)) = (sigma^2 / (2 theta)) (1 + theta h / 2 + O(h^2)),

a weak error of first order with the known constant (`x2_euler` against `x2_exact`).

Output `x2`: the time average of |X|^2 / d once stationary (a "time_average" output, so the
engine chooses the window, extends the runs and writes the error budget); `x2_exact` and
`x2_euler` are the two laws above. `step_rate` is theta / 2 (the relative bias is theta h / 2), so
`dt = "auto"` gives dt = 2 step_tol / theta.
"""

from __future__ import annotations

import numpy as np

import integrators
from integrators.numba.abi import DIFFUSION_SIG, DRIFT_SIG, NJIT
from integrators.numba.jit import njit

from ..core.layout import Layout
from ..core.schema import Field
from ..core.system import AVERAGING_KEYS, Chunk, Output, System, state_dims
from . import register

LAYOUT = Layout("ornstein_uhlenbeck", scalars=("theta", "sigma"))
THETA, SIGMA = LAYOUT.index("theta"), LAYOUT.index("sigma")


@njit(DRIFT_SIG, **NJIT)
def ou_drift(t, x, p, out, work):
    """out <- -theta x."""
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[i, k] = -p[THETA] * x[i, k]


@njit(DIFFUSION_SIG, **NJIT)
def ou_diffusion(t, x, p, dw, out, work):
    """out <- sigma dw."""
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[i, k] = p[SIGMA] * dw[i, k]


def ou_drift_jax(t, x, p):
    return -p[THETA] * x


def ou_diffusion_jax(t, x, p, dw):
    return p[SIGMA] * dw


def ou_problem(theta: float, sigma: float, d: int) -> integrators.Problem:
    """The OU process in R^d as an integrators problem (state of one member: (1, d))."""
    return integrators.Problem(
        ou_drift,
        ou_drift_jax,
        LAYOUT.pack(theta=theta, sigma=sigma),
        integrators.EUCLIDEAN,
        ou_diffusion,
        ou_diffusion_jax,
        (1, d),
    )


@register
class OrnsteinUhlenbeck(System):
    name = "ornstein_uhlenbeck"
    description = "linear SDE with exact stationary and Euler-Maruyama laws: calibration case"
    default_plot = "x2"
    equation = "sde"
    integrator = frozenset({"backend", "method", "dt", "horizon"}) | AVERAGING_KEYS
    step_check = True
    # theta in [1e-6, 1e6], sigma and |x0| <= 1e6: the stationary E|X|^2/d = sigma^2 / (2 theta)
    # <= 5e17, x^2 from x0 and the squares of both in standard errors stay finite, and so do the
    # rate theta / 2 and the step dt = "auto" takes from it
    params = {
        "theta": Field("float", 1.0, "mean-reversion rate theta", lo=1e-6, hi=1e6),
        "sigma": Field("float", 1.0, "noise sigma", gt=0.0, hi=1e6),
        "d": Field("int", 1, "dimension", lo=1, hi=10_000),
        "x0": Field("float", 0.0, "initial value of every coordinate", lo=-1e6, hi=1e6),
    }

    def outputs(self, setup) -> list[Output]:
        return [
            Output("x2", "time average of |X|^2 / d once stationary (mean over runs)", "1", reduce="time_average"),
            Output("x2_exact", "stationary E|X|^2/d = sigma^2 / (2 theta)", "1", reduce="point"),
            Output(
                "x2_euler",
                "Euler-Maruyama's stationary E|X|^2/d at the point's step, sigma^2 / (theta (2 - theta h))",
                "1",
                reduce="point",
            ),
        ]

    def trajectory_dims(self, setup) -> dict[str, int]:
        return {"token": 1, **state_dims(setup, coordinate="d")}

    def point_values(self, spec) -> dict:
        theta, sigma = spec["theta"], spec["sigma"]
        h = float(integrators.core.base.step_grid(np.asarray(spec.times), spec.dt)[1][0])
        return {"x2_exact": sigma**2 / (2 * theta), "x2_euler": sigma**2 / (theta * (2 - theta * h))}

    def step_rate(self, spec) -> float:
        return 0.5 * float(spec["theta"])  # relative bias theta h / 2

    def _solve(self, spec, x0, times):
        problem = ou_problem(spec["theta"], spec["sigma"], spec["d"])
        return spec.solver.get().solve(problem, x0, times, rng=spec.rng).states

    def simulate(self, spec, runs: range) -> Chunk:
        x0 = np.full((len(runs), 1, spec["d"]), float(spec["x0"]))
        states = self._solve(spec, x0, spec.times)
        return Chunk(
            {"x2": (states**2).mean(axis=(2, 3))},
            states=states if spec.setup.trajectories else None,
            finite=np.isfinite(states).all(axis=(1, 2, 3)),
            carry=states[:, -1],
        )

    def extend(self, spec, carry, times) -> Chunk:
        states = self._solve(spec, carry, times)
        return Chunk(
            {"x2": (states[:, 1:] ** 2).mean(axis=(2, 3))},
            finite=np.isfinite(states).all(axis=(1, 2, 3)),
            carry=states[:, -1],
        )
