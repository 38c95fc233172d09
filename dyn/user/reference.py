r"""Per-run references of a :class:`dyn.Model`: ``reference(x0, <params>, t)``.

A model whose flow has a closed form from each run's own start (x' = -A x: x(t) = e^{-A t} x0;
a moment ODE E(0) e^{-tau X X^T}) declares it as

    reference(x0, <params>, t) -> the state the run should be at, at time t

(numpy; x0 one run's start (n, d), the arguments between x0 and t parameter names of
``params``). ``dyn compare --reference exact`` (:mod:`dyn.presentation.exact`) then measures
the distance of each run's saved states to the reference from its own start.
"""

from __future__ import annotations

import inspect

import numpy as np

from ..core.errors import ScenarioError


def function(system):
    """The model's ``reference`` (a plain function), or None."""
    fn = inspect.getattr_static(type(system), "reference", None)
    if isinstance(fn, staticmethod):
        fn = fn.__func__
    return fn if callable(fn) else None


def names(system) -> tuple[str, ...]:
    """The parameter names ``reference`` reads between x0 and t, each declared in params."""
    fn = function(system)
    args = list(inspect.signature(fn).parameters)
    if len(args) < 2 or args[0] != "x0" or args[-1] != "t":
        raise ScenarioError(
            "--reference", f"{type(system).__name__}.reference must take (x0, <parameters>, t), got ({', '.join(args)})"
        )
    for key in args[1:-1]:
        if key not in system.params:
            raise ScenarioError(
                "--reference", f"{type(system).__name__}.reference takes {key!r}, which is not a parameter of params"
            )
    return tuple(args[1:-1])


def states(system, spec, x0: np.ndarray, times) -> np.ndarray:
    """(runs, times, *state): the reference of each run from its start x0 (runs, *state)."""
    fn = function(system)
    values = [spec[k] for k in names(system)]
    x0 = np.asarray(x0, dtype=np.float64)
    out = np.empty((x0.shape[0], len(times)) + x0.shape[1:])
    for r in range(x0.shape[0]):
        for j, t in enumerate(times):
            out[r, j] = fn(x0[r], *values, float(t))
    return out
