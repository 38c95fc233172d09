"""What a solve records at its save times in place of the states: a row of observations.

    obs = Observer(kernel, q, columns, work)
    sol = integrators.get("numba", "euler", dt=h).solve(problem, x0, ts, observer=obs)
    sol.observations    # (E, T, columns): the kernel's row at every save time
    sol.states          # None: no saved state is stored
    sol.last_state      # (E, n, d): each run's state at ts[-1]

``kernel`` is a numba function of ``integrators.numba.abi.OBSERVE_SIG``::

    kernel(t, x, q, row, drift_work, work) -> None,    row <- the observations of x at time t

called inside the step loop, once per save time and run, while the state is in cache. The
solver calls it right after the drift was evaluated at (t, x) (the first stage of the step that
leaves x; at the last save time the drift is evaluated once more, for this), so ``drift_work``
holds what the drift left in its workspace at that very state: a kernel may read quantities
the drift computed on the way (e.g. an attention field's normalizers) instead of computing
them again. ``q`` is the observer's own flat float64 vector, ``work`` its scratch (``work``
floats, allocated once per run). A run's status is NONFINITE when a saved state was not
finite, as with stored states.

Backends that step in numba with a fixed step take an observer (numba euler, heun, rk4); the
others refuse one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class Observer:
    """A numba observation kernel, its parameter vector ``q``, the floats it writes per save
    time (``columns``) and the scratch floats it needs per run (``work``)."""

    kernel: Callable
    q: np.ndarray = field(default_factory=lambda: np.zeros(0))
    columns: int = 1
    work: int = 0

    def __post_init__(self):
        q = np.array(self.q, dtype=np.float64, order="C")
        if q.ndim != 1:
            raise ValueError(f"Observer.q must be a flat 1-D vector, got shape {q.shape}")
        object.__setattr__(self, "q", q)
        for name in ("columns", "work"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < (name == "columns"):
                raise ValueError(f"Observer.{name} must be an integer >= {int(name == 'columns')}, got {value!r}")
            object.__setattr__(self, name, int(value))
