"""The numba ABI shared by every numba integrator and every model that feeds one, and the one
place numba flags and type aliases live.

A right-hand side is a first-class numba function of fixed type

    drift(t, x, p, out, work) -> None,   out <- f(t, x; p),   x, out in R^{n x d}, p in R^m

with ``work`` a float64 scratch vector the kernel allocates once per ensemble member (its length
is :meth:`integrators.Problem.work_size`), so a drift called at every stage of every step never
allocates. A diffusion is ``diffusion(t, x, p, dw, out, work)``, out <- g(t, x; p)[dw]. A
geometry is a pair ``project(x, v)`` (v <- P_x v, in place) and ``retract(x)`` (x <- R(x)).
An observer (:mod:`integrators.core.observer`) is ``observe(t, x, q, row, drift_work, work)``,
row <- the observations of x, called right after the drift was evaluated at (t, x).
Kernels take these as ``numba.types.FunctionType`` arguments and declare explicit signatures:
that is what lets ``cache=True`` hit in a new process (a plain dispatcher argument makes numba
recompile the kernel in every process). Declared signatures compile on first need,
not at import (:mod:`integrators.numba.jit`).

Declare model functions as ``@njit(DRIFT_SIG, **NJIT)`` with ``from integrators.numba.jit import
njit``; a kernel passed one compiles it for DRIFT_SIG (or loads it from numba's cache) then.
"""

from numba import types

# Array type aliases (C-contiguous float64 of 1..4 dimensions, int64 vectors).
F1 = types.float64[::1]
F2 = types.float64[:, ::1]
F3 = types.float64[:, :, ::1]
F4 = types.float64[:, :, :, ::1]
I1 = types.int64[::1]

# Argument types of one ensemble member.
STATE = F2  # (n, d)
PARAMS = F1  # flat parameter vector
WORK = F1  # scratch, allocated once per member
NOISE = F2  # one Brownian increment of the control, e.g. (d, d)

DRIFT_SIG = types.void(types.float64, STATE, PARAMS, STATE, WORK)
DIFFUSION_SIG = types.void(types.float64, STATE, PARAMS, NOISE, STATE, WORK)
PROJECT_SIG = types.void(STATE, STATE)
RETRACT_SIG = types.void(STATE)
OBSERVE_SIG = types.void(types.float64, STATE, PARAMS, F1, WORK, WORK)

DRIFT_FN = types.FunctionType(DRIFT_SIG)
DIFFUSION_FN = types.FunctionType(DIFFUSION_SIG)
PROJECT_FN = types.FunctionType(PROJECT_SIG)
RETRACT_FN = types.FunctionType(RETRACT_SIG)
OBSERVE_FN = types.FunctionType(OBSERVE_SIG)

# The one place numba flags live. error_model="numpy": 1/0 gives inf/nan instead of raising,
# so a diverging member yields non-finite states that the caller records.
NJIT = dict(cache=True, nogil=True, error_model="numpy")
NJIT_PARALLEL = dict(NJIT, parallel=True)
# fastmath without nnan/ninf: reductions may be reordered and vectorized, but NaN and inf still
# propagate (a blow-up must be visible to the caller).
FASTMATH = {"reassoc", "contract", "arcp", "nsz", "afn"}  # numba takes a set (not frozenset)
# ... and without "reassoc", for code whose rounding order is part of the algorithm (the
# Cody-Waite split of the vectorised exp).
FASTMATH_ORDERED = {"contract", "nsz", "arcp"}

__all__ = [
    "F1",
    "F2",
    "F3",
    "F4",
    "I1",
    "STATE",
    "PARAMS",
    "WORK",
    "NOISE",
    "DRIFT_SIG",
    "DIFFUSION_SIG",
    "PROJECT_SIG",
    "RETRACT_SIG",
    "OBSERVE_SIG",
    "DRIFT_FN",
    "DIFFUSION_FN",
    "PROJECT_FN",
    "RETRACT_FN",
    "OBSERVE_FN",
    "NJIT",
    "NJIT_PARALLEL",
    "FASTMATH",
    "FASTMATH_ORDERED",
]
