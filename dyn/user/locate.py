"""Where a system comes from: the package's registry, an installed package's entry point (group
``dyn.systems``), or an import path ``"module:Class"`` that a scenario names.

A module named by a scenario is looked for next to the scenario file first, then on sys.path. Its
provenance (module, file, sha256 of the file's bytes) goes into the resolved scenario, so a resume
against an edited module is refused like any other changed scenario. A pool worker finds the
module again from the recorded file (the folder that holds it goes on its sys.path), or, where
that file is not on its machine, on its own sys.path (a Dask worker the module was uploaded to).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

from ..core.errors import ScenarioError

GROUP = "dyn.systems"  # the entry-point group of installed packages' systems
KEY = "scenario.system"


def is_import_path(name: str) -> bool:
    """Whether a scenario's system is named by import path, ``module:Class``."""
    return ":" in name


def entry_points() -> dict:
    """The installed systems: entry-point name -> EntryPoint of group ``dyn.systems``."""
    from importlib.metadata import entry_points as found

    return {ep.name: ep for ep in found(group=GROUP)}


def _root_of(module: str, file: Path) -> Path:
    """The folder to put on sys.path for `module` to import from `file` (``a.b`` in
    ``root/a/b.py`` or ``root/a/b/__init__.py``)."""
    depth = module.count(".") + (1 if file.name == "__init__.py" else 0)
    root = file.parent
    for _ in range(depth):
        root = root.parent
    return root


def _on_path(folder: Path) -> None:
    """`folder` first on sys.path (moved there if it was further down)."""
    text = str(folder)
    if text in sys.path:
        sys.path.remove(text)
    sys.path.insert(0, text)


def _forget_other(module: str, folder: Path) -> None:
    """Drop `module` (and its submodules) from sys.modules when the copy imported is not the
    one in `folder`: two scenarios in two folders, each beside its own my_sync.py, run in one
    process each get their own."""
    head = module.split(".")[0]
    loaded = sys.modules.get(head)
    if loaded is None:
        return
    file = getattr(loaded, "__file__", None)
    if file is None or _root_of(head, Path(file)).resolve() != folder:
        for name in [m for m in sys.modules if m == head or m.startswith(head + ".")]:
            del sys.modules[name]
        importlib.invalidate_caches()


def _library(name: str, beside: Path) -> str:
    """What the top-level module `name` is when it is not a user's: "a standard-library
    module", "the installed module FILE" (imported already, or found on sys.path outside the
    folder `beside`, in the interpreter's folders), or "" for a user's module."""
    import importlib.machinery
    import sysconfig

    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        return "a standard-library module"
    loaded = sys.modules.get(name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        if not file:
            return "an imported module without a file"
    else:  # not imported yet: where the name would come from without the scenario's folder
        others = [p for p in sys.path if p and Path(p).resolve() != beside]
        spec = importlib.machinery.PathFinder.find_spec(name, others)
        file = getattr(spec, "origin", None)
        if not file or not Path(file).is_file():
            return ""
    path = Path(file).resolve()
    for key in ("purelib", "platlib", "stdlib", "platstdlib"):
        folder = sysconfig.get_paths().get(key)
        if folder and path.is_relative_to(Path(folder).resolve()):
            return f"the installed module {path}"
    if name in ("dyn", "integrators"):
        return f"the engine's own package {path.parent}"
    return ""


def _refuse_shadowing(module: str, folder: Path) -> None:
    """Refuse a module beside the scenario named like a library (``json.py``, ``numpy/``):
    importing it under that name would replace the real module for the whole process."""
    head = module.split(".")[0]
    loaded = getattr(sys.modules.get(head), "__file__", None)
    if loaded and _root_of(head, Path(loaded)).resolve() == folder:
        return  # the very module imported already (the engine's own, run from its checkout)
    what = _library(head, folder)
    if what:
        raise ScenarioError(
            KEY,
            f"the module {head!r} beside the scenario ({folder}) has the "
            f"name of {what}: rename it (it would replace that module here)",
        )


def _next_to(module: str, folder: Path) -> bool:
    head = folder / module.split(".")[0]
    return head.with_suffix(".py").is_file() or (head / "__init__.py").is_file()


def import_module(module: str, near: str | Path | None = None, file: str = ""):
    """Import `module`: from the folder `near` (the scenario's) when it holds it, else from the
    root of the recorded `file`, else from sys.path. One-line ScenarioError when it fails,
    carrying the module's own exception text."""
    if near is not None and _next_to(module, Path(near)):
        folder = Path(near).resolve()
        _refuse_shadowing(module, folder)
        _forget_other(module, folder)
        _on_path(folder)
    elif file and Path(file).is_file():
        _on_path(_root_of(module, Path(file)))
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name) and module.split(".")[0] == exc.name.split(".")[0]:
            where = f"next to the scenario ({near}) nor " if near is not None else ""
            raise ScenarioError(
                KEY,
                f"no module {module!r} {where}on sys.path{' (this worker cannot import it)' if near is None else ''}",
            ) from None
        raise ScenarioError(KEY, f"importing {module} failed: ModuleNotFoundError: {exc}") from None
    except Exception as exc:  # the user's module raised while importing: its text, one line
        raise ScenarioError(KEY, f"importing {module} failed: {type(exc).__name__}: {exc}") from None
    except SystemExit as exc:  # never the user's exit status: exit 0 would claim success
        raise ScenarioError(KEY, f"importing {module} failed: it called sys.exit({_code(exc)}) at import") from None


def _code(exc: SystemExit) -> str:
    return "" if exc.code is None else repr(exc.code)


def load(name: str, near: str | Path | None = None, file: str = ""):
    """The System class named `name` (``module:Class``, ``module:Outer.Inner``)."""

    module, _, attr = name.partition(":")
    if not module or not attr:
        raise ScenarioError(KEY, f"{name!r}: an import path is module:Class, e.g. my_sync:Sync")
    found = import_module(module, near, file)
    cls = found
    for part in attr.split("."):
        if not hasattr(cls, part):
            raise ScenarioError(KEY, f"module {module} ({getattr(found, '__file__', '?')}) has no {attr!r}")
        cls = getattr(cls, part)
    return checked(cls, name)


def checked(cls, name: str):
    """`cls` when it is a concrete System subclass; else a one-line ScenarioError."""
    from ..core.system import System

    if not (inspect.isclass(cls) and issubclass(cls, System)):
        raise ScenarioError(KEY, f"{name} is {type(cls).__name__} {cls!r:.60}, not a subclass of dyn.System")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise ScenarioError(KEY, f"{name} does not define {missing} (required of a dyn.System)")
    for attr in ("name", "description", "params", "default_plot"):
        if not hasattr(cls, attr):
            raise ScenarioError(KEY, f"{name} has no class attribute {attr!r} (required of a dyn.System)")
    return cls


def load_entry_point(name: str):
    """The System class an installed package registers under `name`."""
    ep = entry_points()[name]
    try:
        cls = ep.load()
    except Exception as exc:
        raise ScenarioError(KEY, f"loading system {name} ({ep.value}) failed: {type(exc).__name__}: {exc}") from None
    except SystemExit as exc:
        raise ScenarioError(
            KEY, f"loading system {name} ({ep.value}) failed: it called sys.exit({_code(exc)}) at import"
        ) from None
    return checked(cls, f"{name} ({ep.value})")


def provenance(cls) -> dict:
    """Where a system class outside the package came from: its module and file, the sha256 of
    every file of code it runs from its folder (``system_files``: the module, the modules it
    imports from the same folder or package, its generated kernels; :mod:`dyn.user.reach`) and
    one sha256 of them all (``system_sha256``); empty for the package's own systems (their
    code is the version's)."""
    from . import reach

    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if module is None or module.__name__.split(".")[0] == "dyn" or not file:
        return {}
    files = reach.listing(cls)
    return {
        "system_module": cls.__module__,
        "system_file": str(Path(file).resolve()),
        "system_sha256": reach.combined(files),
        "system_files": files,
    }
