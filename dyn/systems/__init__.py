"""Registry of systems: name -> System class. Scenario files name a system by its key here."""
from __future__ import annotations

from .base import System

_REGISTRY: dict[str, type[System]] = {}


def register(cls: type[System]) -> type[System]:
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    # Imported here, not at module top, so `import dyn` stays light.
    from . import attention_sphere  # noqa: F401


def names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get(name: str) -> System:
    _load_builtins()
    return _REGISTRY[name]()
