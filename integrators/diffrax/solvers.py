r"""The diffrax backend: ensemble solves of  dx/dt = P_x f(t, x; p)  on a manifold, in JAX.

- adaptive ``tsit5``, ``dopri5``: embedded RK pairs with a PID step-size controller on the
  mixed error  |err_i| <= atol + rtol |x_i|  (options ``rtol``, ``atol``, ``dt0``, ``max_steps``);
- fixed ``euler``, ``heun``, ``rk4``: option ``dt``; the step grid is the numba backend's
  (:func:`integrators.core.base.step_times`), enforced with ``diffrax.StepTo`` rather than
  ``ConstantStepSize`` so both backends step through the very same times and agree to rounding.

On a curved geometry each step is followed by the retraction, and saved states are retracted.
A failed member (max_steps reached, NaN) is returned as NaN, never raised.

JAX is imported on first use only: numba-only users and pool workers never pay for it. The
jitted solve is cached per (drift_jax, geometry, method, tolerances); x0, p and ts are traced, so
a sweep over p compiles once (per shape).
"""

import numpy as np

from ..core.base import AbstractIntegrator, FixedStep, check_adaptive_options, step_times
from ..core.solution import Solution

# Default tuning constants.
RTOL = 1e-6
ATOL = 1e-9
MAX_STEPS = 100_000


def _backend():
    from . import _programs

    return _programs


class DiffraxIntegrator(AbstractIntegrator):
    backend = "diffrax"

    def _key(self):
        return None

    def _grid(self, ts):
        return None

    def _solve(self, problem, x0, ts, p, noise):
        if problem.drift_jax is None:
            raise ValueError("the diffrax backend needs Problem.drift_jax (a JAX function)")
        if ts.shape[0] == 1:
            return x0[:, None].copy()
        states, result, accepted, rejected = self.program(problem).run(x0, p, ts, self._grid(ts))
        return Solution.of(
            np.array(states),  # writable, like the numba backend
            steps=np.array(accepted),
            rejections=np.array(rejected),
            max_steps=np.array(result) == _backend().RESULT_MAX_STEPS,
        )

    def program(self, problem):
        """The compiled ensemble program this integrator solves `problem` with (its ``traces``
        count its compiles)."""
        g = problem.geometry
        return _backend().ensemble_solver(
            problem.drift_jax, g.project_jax, g.retract_jax, g.flat, self.method, self._key()
        )


class DiffraxAdaptive(DiffraxIntegrator):
    """Adaptive embedded Runge-Kutta pair (error-controlled steps)."""

    OPTIONS = {"rtol": RTOL, "atol": ATOL, "dt0": None, "max_steps": MAX_STEPS}

    def _check_options(self):
        check_adaptive_options(self.options)

    def _key(self):
        o = self.options
        return (o["rtol"], o["atol"], o["dt0"], o["max_steps"])


class DiffraxFixed(FixedStep, DiffraxIntegrator):
    """Fixed-step explicit Runge-Kutta on the numba backend's step grid."""

    def _grid(self, ts):
        return step_times(ts, self.options["dt"])


class DiffraxTsit5(DiffraxAdaptive):
    """Tsitouras' 5(4) pair."""

    method = "tsit5"


class DiffraxDopri5(DiffraxAdaptive):
    """Dormand-Prince 5(4) pair."""

    method = "dopri5"


class DiffraxEuler(DiffraxFixed):
    """Forward Euler, order 1 (diffrax.Euler)."""

    method = "euler"


class DiffraxHeun(DiffraxFixed):
    """Heun / explicit trapezoid, order 2 (diffrax.Heun)."""

    method = "heun"


class DiffraxRK4(DiffraxFixed):
    """Classic RK4, order 4 (a diffrax AbstractERK on :data:`integrators.core.tableau.RK4`)."""

    method = "rk4"


METHODS = {cls.method: cls for cls in (DiffraxTsit5, DiffraxDopri5, DiffraxEuler, DiffraxHeun, DiffraxRK4)}
