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


def exports(package: str, modules: dict[str, tuple[str, ...]]):
    """``(__getattr__, __dir__, __all__)`` for a package whose public names load from its
    submodules on first use (PEP 562); `modules` maps ".submodule" -> names. Importing the
    package, or a light submodule of it (its parameter declaration), then loads no kernel."""
    where = {name: module for module, names in modules.items() for name in names}
    shadowed = sorted(set(where) & {m.lstrip(".") for m in modules})
    if shadowed:  # once imported, a submodule becomes the package attribute of its name
        raise ValueError(f"{package}: exported names equal submodule names: {shadowed}")

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name], package), name)

    def __dir__():
        return sorted(where)

    return __getattr__, __dir__, sorted(where)
