"""Registry of systems: name -> System class. Scenario files name a system by its key here."""
from __future__ import annotations

import importlib
import pkgutil

from .base import System

_REGISTRY: dict[str, type[System]] = {}
_LOADED = False


def register(cls: type[System]) -> type[System]:
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    """Import every module of this package once; each registers its systems.

    Done on first use, not at import, so `import dyn` stays light; a new system is a new file.
    """
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")


def names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get(name: str) -> System:
    _load_builtins()
    return _REGISTRY[name]()
