r"""Adaptive embedded Runge-Kutta pairs on an ensemble, in numba, with a projection method.

A step of size h from (t, x) on a manifold with tangent projection P and retraction R (the
scheme of :mod:`integrators.numba.fixed`)::

    Y_i = x + h sum_{j<i} a_ij k_j,    k_i = P_{Y_i} f(t + c_i h, Y_i),
    x'  = R(x + h sum_i b_i k_i),      e = h sum_i (b_i - bhat_i) k_i,

accepted when the mixed error norm  err = sqrt(mean_{components} (e / (atol + rtol max(|x|, |x'|)))^2)
is at most 1 (the error is measured before the retraction, on the projected stages). The next
step is h * clip(0.9 err^{-(1/q - 0.75 beta)} err_prev^{beta}, 0.2, 10) with q = (error order) + 1
and beta = BETA_PI (Hairer's PI control; beta = 0 is the plain controller), shrunk to land on
every save time exactly (a step clipped by a save time does not shrink the next proposal).
The first step is Hairer's starting-step estimate unless ``dt0`` is given. First-same-as-last
pairs reuse the last stage only on a flat geometry: on a curved one the retraction moves x,
and the first stage is evaluated again at the retracted point.

Pairs (tables in Butcher form, each checked when built: :class:`integrators.core.tableau.ButcherTableau`
checks row sums and the order conditions up to 4 of the solution and of the embedded weights,
and :func:`order5_conditions` the nine of order 5 for Dormand-Prince):

- ``dopri5``: Dormand & Prince (1980), order 5 with an embedded order-4 estimate, 7 stages, FSAL;
- ``bosh3``: Bogacki & Shampine (1989), order 3 with an embedded order-2 estimate, 4 stages, FSAL.

Each member adapts its own steps (the members in blocks across threads, :mod:`.threads`). A member
whose error norm is not finite keeps shrinking its step; one that reaches ``max_steps`` (accepted
plus rejected) or a step below MIN_STEP_FRACTION of its time is returned as NaN from there on (save
times it did not reach have no state), never raised. After a solve, ``integ.stats`` holds
per-member counts: accepted and rejected steps and drift evaluations, and ``stopped``: 0 reached
the last save time, 1 ran out of ``max_steps``, 2 its step fell below MIN_STEP_FRACTION (it blew
up). The solution (:class:`integrators.core.solution.Solution`) carries per member the accepted steps
(``stats["steps"]``), the rejected ones (``"rejections"``) and the drift evaluations
(``"evaluations"``); its status is MAX_STEPS for a member that ran out of ``max_steps`` (the
engine says "max_steps" rather than "non-finite" for it), and ``last_state`` holds each member's
last state reached, (E, *state), so a member cut short by max_steps keeps it.

The kernels and their step-control constants live in :mod:`._adaptive_kernels` (imported here;
they compile on the first adaptive solve, not at import)."""

from dataclasses import dataclass
from fractions import Fraction as Fr

import numpy as np

from ..core.base import AbstractIntegrator, check_adaptive_options
from ..core.solution import Solution
from ..core.tableau import TOLERANCE, ButcherTableau
from . import _adaptive_kernels as kernels
from ._adaptive_kernels import FAC_MAX, FAC_MIN, MAX_STEPS as STOPPED_MAX_STEPS, MIN_STEP_FRACTION, SAFETY  # noqa: F401 (re-exported)
from .jit import compile_ahead
from .threads import over_members

RTOL = 1e-6
ATOL = 1e-9
MAX_STEPS = 1_000_000


def order5_conditions(A, b, c) -> list[tuple[str, float, float]]:
    """(condition, value, target) for the nine rooted trees of order 5."""
    Ac = A @ c
    return [
        ("b.c^4", b @ c**4, 1 / 5),
        ("b.(c^2*Ac)", b @ (c**2 * Ac), 1 / 10),
        ("b.(c*Ac^2)", b @ (c * (A @ c**2)), 1 / 15),
        ("b.(c*AAc)", b @ (c * (A @ Ac)), 1 / 30),
        ("b.(Ac*Ac)", b @ (Ac * Ac), 1 / 20),
        ("b.Ac^3", b @ (A @ c**3), 1 / 20),
        ("b.A(c*Ac)", b @ (A @ (c * Ac)), 1 / 40),
        ("b.AAc^2", b @ (A @ (A @ c**2)), 1 / 60),
        ("b.AAAc", b @ (A @ (A @ Ac)), 1 / 120),
    ]


@dataclass(frozen=True, eq=False)
class EmbeddedPair:
    """An explicit RK pair: the solution table (its order) and the embedded weights bhat (their
    order); ``fsal``: the last stage is evaluated at the new solution."""

    name: str
    solution: ButcherTableau
    embedded: ButcherTableau
    order: int
    fsal: bool

    def __post_init__(self):
        sol, emb = self.solution, self.embedded
        if not (np.array_equal(sol.A, emb.A) and np.array_equal(sol.c, emb.c)):
            raise ValueError(f"pair {self.name!r}: the two tables must share A and c")
        if self.order == 5:
            for name, value, target in order5_conditions(sol.A, sol.b, sol.c):
                if abs(value - target) > TOLERANCE:
                    raise ValueError(f"pair {self.name!r}: order condition {name} = {value!r}, expected {target!r}")
        elif self.order != sol.order:
            raise ValueError(f"pair {self.name!r}: order {self.order} is not checkable")
        if self.fsal and not (np.array_equal(sol.A[-1], sol.b) and sol.c[-1] == 1.0):
            raise ValueError(f"pair {self.name!r}: FSAL needs the last row of A equal to b")

    @property
    def error_order(self) -> int:
        return self.embedded.order


def _table(rows):
    return np.array([[float(Fr(v)) for v in row] for row in rows])


def _pair(name, A, b, bhat, c, order, embedded_order, fsal):
    A = _table(A)
    b, bhat, c = _table([b])[0], _table([bhat])[0], _table([c])[0]
    checked = min(order, 4)
    return EmbeddedPair(
        name,
        ButcherTableau(name, A, b, c, checked),
        ButcherTableau(f"{name}_embedded", A, bhat, c, embedded_order),
        order,
        fsal,
    )


DOPRI5 = _pair(
    "dopri5",
    A=[
        [0, 0, 0, 0, 0, 0, 0],
        ["1/5", 0, 0, 0, 0, 0, 0],
        ["3/40", "9/40", 0, 0, 0, 0, 0],
        ["44/45", "-56/15", "32/9", 0, 0, 0, 0],
        ["19372/6561", "-25360/2187", "64448/6561", "-212/729", 0, 0, 0],
        ["9017/3168", "-355/33", "46732/5247", "49/176", "-5103/18656", 0, 0],
        ["35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84", 0],
    ],
    b=["35/384", 0, "500/1113", "125/192", "-2187/6784", "11/84", 0],
    bhat=["5179/57600", 0, "7571/16695", "393/640", "-92097/339200", "187/2100", "1/40"],
    c=[0, "1/5", "3/10", "4/5", "8/9", 1, 1],
    order=5,
    embedded_order=4,
    fsal=True,
)

BOSH3 = _pair(
    "bosh3",
    A=[[0, 0, 0, 0], ["1/2", 0, 0, 0], [0, "3/4", 0, 0], ["2/9", "1/3", "4/9", 0]],
    b=["2/9", "1/3", "4/9", 0],
    bhat=["7/24", "1/4", "1/3", "1/8"],
    c=[0, "1/2", "3/4", 1],
    order=3,
    embedded_order=2,
    fsal=True,
)

PAIRS = {pair.name: pair for pair in (DOPRI5, BOSH3)}
BETA_PI = {"dopri5": 0.04, "bosh3": 0.0}


class NumbaAdaptive(AbstractIntegrator):
    """Adaptive embedded RK pair (``PAIR``) on the numba backend. Options: ``rtol``, ``atol``,
    ``dt0`` (first step; None: estimated), ``max_steps`` (per member, accepted plus rejected)."""

    backend = "numba"
    PAIR: EmbeddedPair = None
    OPTIONS = {"rtol": RTOL, "atol": ATOL, "dt0": None, "max_steps": MAX_STEPS}

    def _check_options(self):
        check_adaptive_options(self.options)

    def _solve(self, problem, x0, ts, p, noise):
        if problem.drift is None:
            raise ValueError("the numba backend needs Problem.drift (a numba DRIFT_SIG function)")
        pair, geom, o = self.PAIR, problem.geometry, self.options
        sol = pair.solution
        A, b, c, p = (np.array(a) for a in (sol.A, sol.b, sol.c, p))
        db = sol.b - pair.embedded.b
        ctl = np.array(
            [
                o["rtol"],
                o["atol"],
                o["dt0"] or 0.0,
                o["max_steps"],
                pair.error_order + 1.0,
                BETA_PI[pair.name],
                float(pair.fsal and geom.flat),
            ]
        )
        E = x0.shape[0]
        out = np.empty((E, ts.shape[0]) + x0.shape[1:])
        last = np.empty(x0.shape)
        stats = np.zeros((E, 4), dtype=np.int64)
        block, drift, project, retract = compile_ahead(kernels.block, problem.drift, geom.project, geom.retract)
        args = (ts, A, b, db, c, p, drift, project, retract, problem.work_size(*x0.shape[1:]), ctl)
        over_members(E, lambda lo, hi: block(x0[lo:hi], *args, out[lo:hi], last[lo:hi], stats[lo:hi]))
        return Solution.of(
            out,
            steps=stats[:, 0],
            rejections=stats[:, 1],
            evaluations=stats[:, 2],
            max_steps=stats[:, 3] == STOPPED_MAX_STEPS,
            last_state=last,
        )


class NumbaDopri5(NumbaAdaptive):
    """Dormand-Prince 5(4)."""

    method = "dopri5"
    PAIR = DOPRI5


class NumbaBosh3(NumbaAdaptive):
    """Bogacki-Shampine 3(2)."""

    method = "bosh3"
    PAIR = BOSH3


METHODS = {cls.method: cls for cls in (NumbaDopri5, NumbaBosh3)}
