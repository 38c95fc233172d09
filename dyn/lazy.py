"""Modules imported on first use.

System files name their mathematics at the top (``attention = lazy("dyn.attention")``) but load
it only when a point is simulated: the registry, `dyn list` and scenario validation then stay
light (loading every numba kernel of every package takes seconds).
"""
from __future__ import annotations

import importlib
from types import ModuleType


class _Lazy:
    __slots__ = ("_name",)

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)  # cached in sys.modules

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def lazy(name: str) -> ModuleType:
    """A stand-in for module `name` that imports it on the first attribute access."""
    return _Lazy(name)  # type: ignore[return-value]
