"""The numba ABI shared by every numba integrator and every system that feeds one.

A right-hand side is a first-class numba function of fixed type

    drift(t, x, p, out) -> None,   out <- f(t, x; p),   x, out in R^{n x d}, p in R^m

and a geometry is a pair ``project(x, v)`` (v <- P_x v, in place) and ``retract(x)``
(x <- R(x), in place). Kernels take these as ``numba.types.FunctionType`` arguments and are
compiled eagerly with explicit signatures: that is what lets ``cache=True`` hit in a new process
(a plain dispatcher argument makes numba recompile the kernel in every process, ~6 s each).

Declare user functions as ``@numba.njit(DRIFT_SIG, **NJIT)``.
"""

from numba import types

# Argument types of one ensemble member.
STATE = types.float64[:, ::1]  # (n, d), C-contiguous
PARAMS = types.float64[::1]  # flat parameter vector

DRIFT_SIG = types.void(types.float64, STATE, PARAMS, STATE)
PROJECT_SIG = types.void(STATE, STATE)
RETRACT_SIG = types.void(STATE)

# SDE diffusion applied to one Brownian increment dw (shape of the control, e.g. (d, d)):
# out <- g(t, x; p)[dw]. Added for the SDE integrators (integrators.sde_numba).
NOISE = types.float64[:, ::1]
DIFFUSION_SIG = types.void(types.float64, STATE, PARAMS, NOISE, STATE)

DRIFT_FN = types.FunctionType(DRIFT_SIG)
DIFFUSION_FN = types.FunctionType(DIFFUSION_SIG)
PROJECT_FN = types.FunctionType(PROJECT_SIG)
RETRACT_FN = types.FunctionType(RETRACT_SIG)

# The one place numba flags live. error_model="numpy": 1/0 gives inf/nan instead of raising,
# so a diverging member yields non-finite states that the caller records.
NJIT = dict(cache=True, nogil=True, error_model="numpy")
NJIT_PARALLEL = dict(NJIT, parallel=True)

__all__ = [
    "STATE",
    "PARAMS",
    "DRIFT_SIG",
    "PROJECT_SIG",
    "RETRACT_SIG",
    "DRIFT_FN",
    "NOISE",
    "DIFFUSION_SIG",
    "DIFFUSION_FN",
    "PROJECT_FN",
    "RETRACT_FN",
    "NJIT",
    "NJIT_PARALLEL",
]
