"""Every file of code a user's system runs from its own folder: what its provenance hashes.

A system named by import path (``my_sync:Sync``) or an installed entry point runs the code of
its module and of every module that module reaches in the same tree: the folder of a top-level
module (``helper.py`` beside ``my_sync.py``, ``sub/helper.py`` below it), or the top package of
a module inside one (``pkg/model.py`` reaches ``pkg/helper.py``, ``pkg/sub/helper.py``). A
model of :class:`dyn.user.model.Model` runs, besides, the numba adapters :mod:`dyn.user.jit`
generates for it (the "generated kernels", cached by :mod:`dyn.user.cache`).

:func:`listing` maps each such file, by its path relative to the folder the module was
imported from (``helper.py``, ``sub/helper.py``; a generated kernel as ``<generated drift
kernel>``), to the sha256 of its bytes. :func:`combined` is the one sha256 of the whole
listing (``system_sha256`` of a file's provenance), so an edit of any byte of any of them
changes the scenario's hash, and :func:`changed` names the files whose bytes differ between
two listings (the line that refuses a resume against edited code).

The modules reached are found from the module objects themselves, not from what else the
process has imported: starting at the system's module, every value of its namespace that is a
module, or a function, class or numba dispatcher of a module, leads to that module; the walk
follows those inside the tree. The set is the same in every process that imports the module.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
import types
from pathlib import Path

from . import identity

# packages a user's tree never holds as its own code (the engine, its integrators, libraries)
FOREIGN = frozenset(
    {"dyn", "integrators", "numpy", "numba", "llvmlite", "scipy", "jax", "jaxlib", "diffrax", "h5py", "xarray"}
)
MAX_FILES = 2000  # a tree walk past this many modules stops (no user model reaches so many)


def listing(cls) -> dict[str, str]:
    """Relative file name -> sha256 of its bytes, for every file of code the system class
    `cls` runs from its tree, and its generated kernels (module doc); {} for a class without a
    module file."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if module is None or not file:
        return {}
    base, tree = _tree(module.__name__, Path(file).resolve())
    found = {_name(Path(f), base): identity.file_digest(f) for f in _reached(module, tree)}
    for name, source in kernels(cls).items():
        found[name] = hashlib.sha256(source.encode()).hexdigest()
    return dict(sorted(found.items()))


def combined(files: dict[str, str]) -> str:
    """The one sha256 (hex) of a listing: of its lines ``sha256  name``, sorted by name."""
    text = "".join(f"{sha}  {name}\n" for name, sha in sorted(files.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def changed(recorded: dict, now: dict) -> str:
    """What differs between the provenance `recorded` in a file's scenario and the scenario's
    now (each a [scenario] table): ", NAMES changed since" naming the files of the system's
    code whose bytes differ (new or gone files said so); "" when they agree or the recorded
    one holds no listing of the system's code."""
    old, new = recorded.get("system_files"), now.get("system_files")
    if not isinstance(old, dict) or not isinstance(new, dict):  # a file of before the listing
        if recorded.get("system_sha256") and recorded.get("system_sha256") != now.get("system_sha256"):
            return f": the system's module {now.get('system_file', '')} changed since"
        return ""
    words = []
    for name in sorted(set(old) | set(new)):
        if name not in old:
            words.append(f"{name} (new)")
        elif name not in new:
            words.append(f"{name} (no longer imported)")
        elif old[name] != new[name]:
            words.append(name)
    if not words:
        return ""
    return f": the system's code changed since: {', '.join(words)}"


def kernels(cls) -> dict[str, str]:
    """``<generated KIND kernel>`` -> the source :mod:`dyn.user.jit` generates for a Model's
    numba drift (and diffusion); {} for another class, or where the functions' signatures are
    refused (validation says why)."""
    from ..core.errors import ScenarioError
    from . import jit
    from .hooks import _function
    from .model import Model

    if not (
        isinstance(cls, type)
        and issubclass(cls, Model)
        and getattr(cls.numba_function, "__func__", None) is Model.numba_function.__func__
    ):
        return {}
    found = {}
    for kind in ("drift", "diffusion"):
        fn = _function(cls, kind)
        if fn is None:
            continue
        try:
            found[f"<generated {kind} kernel>"] = jit.source(kind, fn, cls._at(kind, kind))
        except ScenarioError:
            return {}
    return found


def _tree(module: str, file: Path) -> tuple[Path, Path]:
    """(base, tree): the folder `module` was imported from (on sys.path) and the folder whose
    modules are its own (its top package's, or its own folder's for a top-level module)."""
    depth = module.count(".") + (1 if file.name == "__init__.py" else 0)
    base = file.parent
    for _ in range(depth):
        base = base.parent
    tree = base / module.split(".")[0] if depth else base
    return base, tree


def _installed() -> set[Path]:
    """Folders of installed packages and the standard library: never one user's tree."""
    found = set()
    for key in ("purelib", "platlib", "stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            found.add(Path(path).resolve())
    return found


def _reached(module: types.ModuleType, tree: Path) -> list[str]:
    """The files of `module` and of the modules it reaches inside `tree` (module doc)."""
    own = str(Path(module.__file__).resolve())
    if tree in _installed():  # a lone module installed among others: its own file only
        return [own]
    files, seen, todo = [], set(), []
    for name in _packages(module.__name__):  # its packages' __init__ files, then itself
        seen.add(name)
        other = sys.modules.get(name)
        file = getattr(other, "__file__", None)
        if file and Path(file).resolve().is_relative_to(tree):
            files.append(str(Path(file).resolve()))
            todo.append(other)
    if own not in files:
        files.append(own)
        todo.append(module)
    while todo and len(seen) < MAX_FILES:
        for value in list(vars(todo.pop()).values()):
            name = _module_of(value)
            if name is None or name.split(".")[0] in FOREIGN:
                continue
            # a module inside a package runs the package's __init__ files first
            for found in _packages(name):
                if found in seen:
                    continue
                seen.add(found)
                other = sys.modules.get(found)
                file = getattr(other, "__file__", None)
                if not file or not file.endswith(".py"):
                    continue
                path = Path(file).resolve()
                if path.is_file() and path.is_relative_to(tree):
                    files.append(str(path))
                    todo.append(other)
    return list(dict.fromkeys(files))


def _packages(name: str) -> list[str]:
    """`name` and the packages above it, outermost first (``a``, ``a.b``, ``a.b.c``)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _module_of(value) -> str | None:
    """The name of the module `value` is, or is defined in (a numba dispatcher: its Python
    function's); None for plain data."""
    if isinstance(value, types.ModuleType):
        return value.__name__
    if not (isinstance(value, type) or callable(value)):
        return None
    inner = getattr(value, "py_func", value)
    name = getattr(inner, "__module__", None)
    return name if isinstance(name, str) else None


def _name(path: Path, base: Path) -> str:
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()
