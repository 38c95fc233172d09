"""Typed fields for scenario tables: parse a raw TOML value into a checked Python value.

A `Field` knows its type, default and admissible range; `check_table` applies a dict of fields to
a TOML table and names the dotted key in every error. Kept deliberately tiny: scenario files are
small and the messages matter more than generality.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import laws
from .errors import ScenarioError, did_you_mean

REQUIRED = object()  # sentinel default: the key must be given


@dataclass(frozen=True)
class Field:
    """One scenario entry.

    kind: "int", "float", "str", "bool", "matrix" (a square list of lists of numbers),
    "matrices" (a square matrix, or a list of square matrices of one size), "vector" (a list of
    numbers) or "names" (a list of distinct strings). A matrix, matrices or vector field also
    takes a law table (``{law = "gaussian", scale = 0.5, draw = "run"}``: :mod:`dyn.core.laws`).
    lo/hi: inclusive bounds for numbers, and for every entry of a matrix (the entry is named in
    the message, ``params.V[0][1]``); gt: an exclusive lower bound (a step size or a tolerance
    must be > 0: -0.01 and 0 get the same message). choices: admissible strings. sweepable: may be a
    `[sweep]` axis. check: extra predicate returning an error text or None.
    """

    kind: str
    default: Any = REQUIRED
    doc: str = ""
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] | None = None
    sweepable: bool = True
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)
    gt: float | None = None
    auto: bool = False  # the string "auto" is admitted too (the engine chooses the value)

    def parse(self, key: str, raw: Any) -> Any:
        if self.auto and raw == "auto":
            return raw
        if self.kind in ("matrix", "matrices", "vector") and isinstance(raw, dict):
            return laws.parse(key, raw, self.kind)  # drawn per point or run (dyn.core.laws)
        value = _PARSERS[self.kind](key, raw)
        if self.kind in ("int", "float"):
            if self.gt is not None and not value > self.gt:
                raise ScenarioError(key, f"must be > {self.gt:g}, got {_short(raw)}")
            self._bounds(key, value, raw)
        elif self.kind == "vector":
            for i, entry in enumerate(value):
                self._bounds(f"{key}[{i}]", entry, entry)
        elif self.kind in ("matrix", "matrices") and (self.lo is not None or self.hi is not None):
            stack = value if isinstance(value[0][0], list) else [value]
            for h, matrix in enumerate(stack):
                at = f"{key}[{h}]" if stack is value else key
                for i, row in enumerate(matrix):
                    for j, entry in enumerate(row):
                        self._bounds(f"{at}[{i}][{j}]", entry, entry)
        if self.choices is not None and value not in self.choices:
            raise ScenarioError(key, f"must be one of {', '.join(self.choices)}; got {_short(raw)}")
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise ScenarioError(key, problem)
        return value

    def _bounds(self, key: str, value, raw) -> None:
        if self.lo is not None and value < self.lo:
            raise ScenarioError(key, f"must be >= {self.lo}, got {_short(raw)}")
        if self.hi is not None and value > self.hi:
            raise ScenarioError(key, f"must be <= {self.hi}, got {_short(raw)}")


def _int(key, raw):
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ScenarioError(key, f"expected an integer, got {_describe(raw)}")
    return raw


def _float(key, raw):
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise ScenarioError(key, f"expected a number, got {_describe(raw)}")
    value = float(raw)
    if not math.isfinite(value):
        raise ScenarioError(key, f"must be finite, got {_short(raw)}")
    return value


def _str(key, raw):
    if not isinstance(raw, str):
        raise ScenarioError(key, f"expected a string, got {_describe(raw)}")
    return raw


def _bool(key, raw):
    if not isinstance(raw, bool):
        raise ScenarioError(key, f"expected true or false, got {_describe(raw)}")
    return raw


def _matrix(key, raw):
    if not isinstance(raw, list) or not raw or not all(isinstance(r, list) for r in raw):
        raise ScenarioError(key, f"expected a matrix (list of rows), got {_describe(raw)}")
    n = len(raw)
    rows = []
    for i, row in enumerate(raw):
        if len(row) != n:
            raise ScenarioError(key, f"must be square: row {i} has {len(row)} entries, expected {n}")
        rows.append([_float(f"{key}[{i}]", v) for v in row])
    return rows


def _matrices(key, raw):
    """One square matrix, or a non-empty list of square matrices of one size (a stack)."""
    if (
        isinstance(raw, list)
        and raw
        and all(isinstance(r, list) for r in raw)
        and all(isinstance(m, list) and m and isinstance(m[0], list) for m in raw)
    ):
        stack = [_matrix(f"{key}[{h}]", m) for h, m in enumerate(raw)]
        if any(len(m) != len(stack[0]) for m in stack):
            raise ScenarioError(
                key, f"every matrix of the stack must have the same size, got {[len(m) for m in stack]}"
            )
        return stack
    return _matrix(key, raw)


def _vector(key, raw):
    if not isinstance(raw, list) or not raw or any(isinstance(v, list) for v in raw):
        raise ScenarioError(key, f"expected a vector (list of numbers), got {_describe(raw)}")
    return [_float(f"{key}[{i}]", v) for i, v in enumerate(raw)]


def _names(key, raw):
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ScenarioError(key, f"expected a list of names, got {_describe(raw)}")
    if len(set(raw)) != len(raw):
        raise ScenarioError(key, "names must be distinct")
    return list(raw)


_PARSERS = {
    "int": _int,
    "float": _float,
    "str": _str,
    "bool": _bool,
    "matrix": _matrix,
    "matrices": _matrices,
    "vector": _vector,
    "names": _names,
}


def _describe(raw: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    for typ, name in names.items():
        if type(raw) is typ:
            return f"{name} ({_short(raw)})"
    return type(raw).__name__


def _short(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def check_table(prefix: str, table: Any, fields: dict[str, Field]) -> dict[str, Any]:
    """Parse `table` against `fields`: fill defaults, reject unknown or missing keys."""
    if not isinstance(table, dict):
        raise ScenarioError(prefix, f"expected a table, got {_describe(table)}")
    for key in table:
        if key not in fields:
            known = ", ".join(sorted(fields)) or "none"
            near = did_you_mean(key, fields)
            raise ScenarioError(f"{prefix}.{key}", f"unknown key{near} (known keys: {known})")
    out = {}
    for key, spec in fields.items():
        if key in table:
            out[key] = spec.parse(f"{prefix}.{key}", table[key])
        elif spec.default is REQUIRED:
            raise ScenarioError(f"{prefix}.{key}", "missing required key")
        elif spec.default is not None:
            out[key] = spec.default
    return out
