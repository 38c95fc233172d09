r"""Array parameters of a :class:`dyn.Model`: a field of kind "vector", "matrix" or "matrices"
reaches the user's drift as an array under its name.

The packed vector p holds one slot per parameter, in the order of ``Model.parameters()``: a
number's value, or, for an array, the offset in p where the array begins. There p holds its
shape (one number per axis) and then its entries in row-major order:

    p = [theta, o_Q, sigma, ... | Q's rows, Q's columns, Q_00, Q_01, ... ]
               o_Q ------------^

so one compiled drift reads arrays of any size (the numba readers :func:`vector_at`,
:func:`matrix_at`, :func:`stack_at` return views of p, not copies), and a point with another d
needs no other compile. The JAX form reads them with the offsets and shapes of the point's
layout (static for JAX's tracing).

An array is given in the scenario literally or by a law (:mod:`dyn.core.laws`); a law's size
defaults to the point's parameter d. A law drawn per run makes each run its own problem:
:func:`solve_per_run` solves the runs one by one, each with its own draw.
"""

from __future__ import annotations

import numba
import numpy as np

from ..core import laws
from ..core.errors import ScenarioError

KINDS = {"vector": 1, "matrix": 2, "matrices": 3}  # kind -> the array's number of axes
READERS = {1: "vector_at", 2: "matrix_at", 3: "stack_at"}
OPTIONS = dict(nogil=True, error_model="numpy", cache=True)


@numba.njit(**OPTIONS)
def vector_at(p, slot):
    o = int(p[slot])
    return p[o + 1 : o + 1 + int(p[o])]


@numba.njit(**OPTIONS)
def matrix_at(p, slot):
    o = int(p[slot])
    r, c = int(p[o]), int(p[o + 1])
    return p[o + 2 : o + 2 + r * c].reshape((r, c))


@numba.njit(**OPTIONS)
def stack_at(p, slot):
    o = int(p[slot])
    h, r, c = int(p[o]), int(p[o + 1]), int(p[o + 2])
    return p[o + 3 : o + 3 + h * r * c].reshape((h, r, c))


def is_array(field) -> bool:
    return field is not None and field.kind in KINDS


def expression(field, slot: int) -> str:
    """What the generated adapter passes for the parameter at `slot`."""
    if is_array(field):
        return f"{READERS[KINDS[field.kind]]}(p, {slot})"
    return f"p[{slot}]"


def value(name: str, field, raw, spec, run: int = 0) -> np.ndarray:
    """The array of parameter `name` at the point `spec` (its run `run` for draws per run):
    the literal, or the law's draw; its number of axes checked (one line)."""
    if laws.is_law(raw):
        size = raw.get("size", spec.get("d"))
        if size is None:
            raise ScenarioError(f"params.{name}", "a law needs its size (no parameter d)")
        return laws.draw(name, raw, field.kind, int(size), spec.setup.seed, spec.stream, run)
    a = np.asarray(raw, dtype=np.float64)
    if field.kind == "matrices" and a.ndim == 2:
        a = a[None]
    if a.ndim != KINDS[field.kind]:
        raise ScenarioError(
            f"params.{name}", f"expected a {field.kind} ({KINDS[field.kind]} axes), got an array of shape {a.shape}"
        )
    return a


def per_run(params: dict, values) -> bool:
    """Whether some array of the point is drawn per run."""
    return any(laws.is_law(values.get(k)) and values[k]["draw"] == "run" for k, f in params.items() if is_array(f))


def pack(names, params: dict, values, spec=None, run: int = 0):
    """(p, layout): the packed vector of the point's values (module doc) and its layout, a
    tuple of (slot, offset, shape) per array (for the JAX form)."""
    head, tail, layout = [], [], []
    start = len(names)
    for slot, name in enumerate(names):
        field = params.get(name)
        if not is_array(field):
            head.append(float(values[name]))
            continue
        raw = values[name]
        a = value(name, field, raw, spec, run) if spec is not None else np.asarray(raw, dtype=np.float64)
        if field.kind == "matrices" and a.ndim == 2:
            a = a[None]
        offset = start + sum(len(t) for t in tail)
        head.append(float(offset))
        tail.append(np.concatenate([np.asarray(a.shape, dtype=np.float64), a.ravel()]))
        layout.append((slot, offset + a.ndim, a.shape))
    return np.concatenate([np.asarray(head, dtype=np.float64), *tail]), tuple(layout)


def jax_readers(names, layout):
    """For the JAX form: one function of p per parameter (a number's slot, or an array's
    entries at the static offset and shape of `layout`)."""
    at = {slot: (offset, shape) for slot, offset, shape in layout}

    def reader(slot):
        if slot in at:
            offset, shape = at[slot]
            size = int(np.prod(shape))
            return lambda p: p[offset : offset + size].reshape(shape)
        return lambda p: p[slot]

    return tuple(reader(slot) for slot in range(len(names)))


def solve_per_run(model, spec, runs: range):
    """The runs of `spec` solved one by one, each with the arrays its own draw gives; (states,
    status) as one solve of the runs would give them."""
    x0 = np.ascontiguousarray(model.initial_state(spec, len(runs)), dtype=np.float64)
    noise = {"rng": spec.rng} if model.equation == "sde" else {}
    integ = spec.solver.get()
    states, status = [], []
    for r, x in zip(runs, x0, strict=True):
        solution = integ.solve(model.problem(spec, x.shape, run=r), x[None], spec.times, **noise)
        states.append(solution.states)
        status.append(solution.status)
    return np.concatenate(states), np.concatenate(status)
