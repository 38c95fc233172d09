r"""Explicit Runge-Kutta methods as Butcher tables.

One step of size h from (t, x) with s stages:

    Y_i = x + h \sum_{j<i} a_{ij} k_j,     k_i = f(t + c_i h, Y_i),
    x'  = x + h \sum_i b_i k_i.

Consistency: c_i = \sum_j a_{ij}. Order conditions up to 4 (trees of order <= 4):
    b.1 = 1;  b.c = 1/2;  b.c^2 = 1/3, b.A c = 1/6;
    b.c^3 = 1/4, b.(c * A c) = 1/8, b.A c^2 = 1/12, b.A A c = 1/24.

A table checks itself when it is built (as diffrax's does): a wrong entry fails at import, not
in a convergence test. Checked: A strictly lower triangular, row sums equal the nodes, and every
order condition up to the declared order (the first one, b.1 = 1, for any table).
"""

from dataclasses import dataclass

import numpy as np

TOLERANCE = 1e-14  # the tables hold rationals; their float rounding is far below this


def order_conditions(A, b, c) -> list[tuple[int, str, float, float]]:
    """(order, condition, value, target) for every rooted tree of order <= 4."""
    Ac = A @ c
    return [
        (1, "b.1", b.sum(), 1.0),
        (2, "b.c", b @ c, 1 / 2),
        (3, "b.c^2", b @ c**2, 1 / 3),
        (3, "b.Ac", b @ Ac, 1 / 6),
        (4, "b.c^3", b @ c**3, 1 / 4),
        (4, "b.(c*Ac)", b @ (c * Ac), 1 / 8),
        (4, "b.Ac^2", b @ (A @ c**2), 1 / 12),
        (4, "b.AAc", b @ (A @ Ac), 1 / 24),
    ]


@dataclass(frozen=True, eq=False)
class ButcherTableau:
    """An explicit RK table: A (s, s) strictly lower triangular, b (s,), c (s,), its order."""

    name: str
    A: np.ndarray
    b: np.ndarray
    c: np.ndarray
    order: int

    def __post_init__(self):
        for key in ("A", "b", "c"):
            arr = np.ascontiguousarray(getattr(self, key), dtype=np.float64)
            arr.setflags(write=False)
            object.__setattr__(self, key, arr)
        s = self.b.shape[0]
        if self.A.shape != (s, s) or self.c.shape != (s,):
            raise ValueError(f"tableau {self.name!r}: A must be ({s}, {s}) and c ({s},)")
        if np.any(np.triu(self.A) != 0.0):
            raise ValueError(f"tableau {self.name!r}: A must be strictly lower triangular")
        rows = self.A.sum(axis=1)
        if np.max(np.abs(rows - self.c)) > TOLERANCE:
            raise ValueError(
                f"tableau {self.name!r}: row sums of A {rows.tolist()} must equal the nodes c {self.c.tolist()}"
            )
        if not 1 <= self.order <= 4:
            raise ValueError(f"tableau {self.name!r}: order {self.order} is not checkable (1..4)")
        for order, name, value, target in order_conditions(self.A, self.b, self.c):
            if order <= self.order and abs(value - target) > TOLERANCE:
                raise ValueError(
                    f"tableau {self.name!r}: order condition {name} = {value!r}, "
                    f"expected {target!r} for order {self.order}"
                )

    @property
    def stages(self) -> int:
        return self.b.shape[0]


EULER = ButcherTableau("euler", A=[[0.0]], b=[1.0], c=[0.0], order=1)

# Explicit trapezoid rule (Heun's second-order method).
HEUN = ButcherTableau("heun", A=[[0.0, 0.0], [1.0, 0.0]], b=[0.5, 0.5], c=[0.0, 1.0], order=2)

# The classic fourth-order method of Kutta (1901).
RK4 = ButcherTableau(
    "rk4",
    A=[
        [0.0, 0.0, 0.0, 0.0],
        [0.5, 0.0, 0.0, 0.0],
        [0.0, 0.5, 0.0, 0.0],
        [0.0, 0.0, 1.0, 0.0],
    ],
    b=[1 / 6, 1 / 3, 1 / 3, 1 / 6],
    c=[0.0, 0.5, 0.5, 1.0],
    order=4,
)

TABLEAUS = {t.name: t for t in (EULER, HEUN, RK4)}

__all__ = ["ButcherTableau", "EULER", "HEUN", "RK4", "TABLEAUS"]
