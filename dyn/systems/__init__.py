"""Registry of systems: name -> System class. Scenario files name a system by its key here, by
the name an installed package gives it (entry-point group ``dyn.systems``), or by import path,
``module:Class`` (:mod:`dyn.user.locate`)."""

from __future__ import annotations

import importlib
import pkgutil

from ..core.system import System

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
        importlib.import_module(f"{__name__}.{module.name}")


def _load_own_module(name: str) -> None:
    """Import the module of this package named like the system, which registers it (each file
    is one system of its own name): a run imports its system's module, not all twenty (a tenth
    of a second of a short ``dyn run``). Any other name loads them all (:func:`_load_builtins`)."""
    if name in _REGISTRY:
        return
    if name in {module.name for module in pkgutil.iter_modules(__path__)}:
        importlib.import_module(f"{__name__}.{name}")


def names() -> list[str]:
    """The package's systems and the installed packages' (entry points), by name."""
    from ..user import locate

    _load_builtins()
    return sorted(set(_REGISTRY) | set(locate.entry_points()))


def is_own(name: str) -> bool:
    """Whether `name` is one of the package's own registered systems (which an installed package's entry
    point of the same name never replaces)."""
    _load_builtins()
    return name in _REGISTRY


def known(name: str) -> bool:
    """Whether `name` is a registered or installed system; the others' modules are imported
    only when it is not one of the package's own (:func:`_load_own_module`)."""
    _load_own_module(name)
    return name in _REGISTRY or name in names()


def shipped(name) -> System | None:
    """A fresh instance of the package's own registered system `name`, or None: never an
    installed package's entry point nor an import path, so that what a file names imports no
    code from outside the package (with :func:`dyn.presentation.facts.model_system`, the
    readers' only way to a system)."""
    if not isinstance(name, str) or not name.isidentifier():
        return None
    _load_own_module(name)
    if name not in _REGISTRY:
        _load_builtins()
    cls = _REGISTRY.get(name)
    return cls() if cls is not None else None


def get(name: str, near=None, file: str = "") -> System:
    """A fresh instance of the system `name`: a registered name, an installed package's entry
    point, or an import path ``module:Class`` (found next to the folder `near`, from the
    recorded `file`, or on sys.path). KeyError for an unknown plain name."""
    from ..user import locate

    if locate.is_import_path(name):
        return locate.load(name, near, file)()
    _load_own_module(name)
    if name not in _REGISTRY:
        _load_builtins()
    if name in _REGISTRY:
        return _REGISTRY[name]()
    if name in locate.entry_points():
        return locate.load_entry_point(name)()
    raise KeyError(name)
