"""What every ``solve`` returns, on every backend: the states, a status per run and statistics
per run (as diffrax's ``Solution`` carries ``ys``, ``result`` and ``stats``).

    sol = integrators.get("numba", "dopri5").solve(problem, x0, ts).states
    sol.states          # (E, T, *state); a run's states after it stopped are NaN
    sol.status          # (E,) int8: OK, MAX_STEPS or NONFINITE (STATUS_NAMES spells them)
    sol.stats["steps"]  # (E,) accepted steps; sol.stats["rejections"]: rejected ones
    sol.last_state      # (E, *state): where each run stopped (numba's adaptive pairs), or None
    sol.observations    # (E, T, columns) with an observer (integrators.core.observer), else None;
                        # the states are then None

A batch of points (the jax backend, ``Problem.stack``) puts the point axis first everywhere:
states (P, R, T, *state), status and statistics (P, R).

Status of a run: ``MAX_STEPS`` where an adaptive method ran out of ``max_steps`` before the last
save time (its states from there on are NaN; numba's adaptive pairs keep its last state); else
``NONFINITE`` where any of its states is NaN or inf (it blew up, or its step fell below the
method's floor); else ``OK``. A statistic a backend did not count would be NaN; every backend
counts steps and rejections today.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

OK, MAX_STEPS, NONFINITE = 0, 1, 2
STATUS_NAMES = {OK: "ok", MAX_STEPS: "max_steps", NONFINITE: "non-finite"}
STATE_AXES = 3  # (T, n, d) after the run axes


@dataclass(frozen=True, eq=False)
class Solution:
    """A solve's states, status per run and statistics per run (see the module doc)."""

    states: np.ndarray | None
    status: np.ndarray
    stats: Mapping[str, np.ndarray] = field(default_factory=dict)
    last_state: np.ndarray | None = None
    observations: np.ndarray | None = None

    @classmethod
    def of(cls, states, steps=None, rejections=None, max_steps=None, last_state=None, **more) -> Solution:
        """The solution of `states` (runs..., T, n, d): statuses read from the states, and
        MAX_STEPS where `max_steps` (a bool per run) is set; `steps`, `rejections` per run
        (scalars are broadcast; None: not counted, NaN)."""
        states = np.asarray(states)
        runs = states.shape[:-STATE_AXES]
        finite = np.isfinite(states.reshape(runs + (-1,))).all(axis=-1)
        status = np.where(finite, OK, NONFINITE).astype(np.int8)
        if max_steps is not None:
            status[np.asarray(max_steps, dtype=bool)] = MAX_STEPS
        stats = {
            name: _per_run(value, runs) for name, value in dict(steps=steps, rejections=rejections, **more).items()
        }
        return cls(states, status, stats, last_state)

    def count(self, status: int) -> int:
        """How many runs ended with `status`."""
        return int(np.count_nonzero(self.status == status))

    @property
    def ok(self) -> np.ndarray:
        """Per run: reached the last save time with finite states."""
        return self.status == OK


def _per_run(value, runs: tuple) -> np.ndarray:
    if value is None:
        return np.full(runs, np.nan)
    value = np.asarray(value)
    return np.broadcast_to(value, runs).copy() if value.shape != runs else value
