"""Generated numba code that numba can cache: each generated module is a file in
:func:`folder`, named by the hash of all it compiles from.

A user's model reaches the integrators through generated functions (:mod:`dyn.user.jit`,
:mod:`dyn.user.particles_jit`): their source depends on the model (which parameters the user's
function reads, the normalization it is built with), so it cannot be a file of the package.
numba caches a function only when it has a source file, and keys the cache on that file and the
function's bytecode, not on what it calls. So the generated source is written once to a file
whose name carries a sha256 of

- the source itself (the generated adapter, with the model's constants spelled in it),
- :func:`dyn.user.identity.digest` of the user's function (the bytes of every file it compiles
  from, its code, the constants it reads),
- the package's generator files (dyn/user/jit.py, dyn/user/particles_jit.py,
  dyn/user/attention_jit.py) and the package's functions they call (dyn/user/normalize.py,
  dyn/user/arrays.py, dyn/numerics/vexp.py), numba's and
  Python's versions,

and the module is executed from there with ``cache=True``: a later process with the same model
finds the file and numba loads the compiled code from its cache beside it. Any edit gives
another name, so a cached adapter never runs a function other than the one it was made from.

Where no key can be made (:func:`dyn.user.identity.digest` is None) or the folder cannot be
written, the same source runs from memory, compiled in each process (``cache=False``).

The cache degrades, never blocks: a generated file whose bytes differ from the source
(truncated, not text) is written again; where numba's cache of it fails (its index or data
damaged, the disk full: ``ENOSPC``), its files are removed and the module compiled once more
with the cache; failing again it runs from memory, with one note on stderr per process.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import sys
import tempfile
import types
from pathlib import Path

import numba
from numba.core.errors import NumbaError

from . import identity

# the generated files' modification time: numba keys its cache on (mtime, size) of the source,
# so two processes writing the same file at once leave one stamp (its name fixes its bytes)
STAMP = 1_000_000_000
HERE = Path(__file__).resolve().parent
GENERATORS = ("jit.py", "particles_jit.py", "attention_jit.py", "normalize.py", "arrays.py", "../numerics/vexp.py")
_LOADED: dict = {}  # key -> module, once per process
_UNCACHED = itertools.count()  # numbers the modules run from memory (each its own name)
_NOTED: list[str] = []  # the note on a cache that failed, once per process


def folder() -> Path:
    """Where generated modules and numba's cache of them live: ``$NUMBA_CACHE_DIR/dyn-user``
    when NUMBA_CACHE_DIR is set, else ``~/.cache/dyn/numba``."""
    base = os.environ.get("NUMBA_CACHE_DIR")
    return Path(base) / "dyn-user" if base else Path.home() / ".cache" / "dyn" / "numba"


def key(source: str, user=None) -> str | None:
    """The hash that names `source`'s file given the user's function `user` (module doc);
    None when `user` cannot be keyed."""
    found = "" if user is None else identity.digest(user)
    if found is None:
        return None
    parts = [source, found, numba.__version__, sys.version]
    parts += [identity.file_digest(str(HERE / name)) for name in GENERATORS]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def load(name: str, source: str, user=None) -> types.ModuleType:
    """The module of the generated `source` (its decorators read the global ``CACHED``), with
    the global ``user`` bound to `user`: from its file in :func:`folder` (written the first
    time), cached by numba; or from memory, uncached, where that cannot be (module doc)."""
    digest = key(source, user)
    if digest is not None and digest in _LOADED:
        return _LOADED[digest]
    path = None if digest is None else _written(f"{name}_{digest}.py", source)
    if path is None:
        module = _executed(f"dyn_user_{name}_{digest or f'uncached{next(_UNCACHED)}'}", source, user, None)
    else:
        module = _cached(f"dyn_user_{name}_{digest}", source, user, path)
    if digest is not None:
        _LOADED[digest] = module
    return module


def _cached(module_name: str, source: str, user, path: Path) -> types.ModuleType:
    """The module of `source` from its file `path`, cached by numba; where numba's cache fails
    (a damaged index or data file, a full disk), its files are removed and the module compiled
    again with the cache, then, failing again, from memory (one note per process)."""
    for _ in range(2):  # under one name: numba's cache records the module's name
        try:
            return _executed(module_name, source, user, path)
        except NumbaError:  # the user's code does not compile: theirs to fix
            raise
        except Exception as exc:  # noqa: BLE001 - numba's cache: unpickling, OSError (ENOSPC)
            failure = exc
            _forget(path)
    module = _executed(f"{module_name}_uncached{next(_UNCACHED)}", source, user, None)
    if not _NOTED:
        _NOTED.append(str(failure))
        print(
            f"dyn: note: numba's cache of the user's model in {path.parent} failed "
            f"({type(failure).__name__}: {failure}); compiling in memory",
            file=sys.stderr,
            flush=True,
        )
    return module


def _executed(module_name: str, source: str, user, path: Path | None) -> types.ModuleType:
    """A module of `source` named `module_name` with the global ``user``: run from the file
    `path` with numba's cache, or from memory, uncached, where `path` is None."""
    module = types.ModuleType(module_name)
    module.__dict__.update(user=user, CACHED=path is not None)
    module.__file__ = str(path) if path else f"<dyn.user generated {module_name}>"
    # numba finds a function's module by name (inspect.getmodule), in compiling and in loading
    # its cache: the module must be importable as long as the process runs
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def _forget(path: Path) -> None:
    """Remove numba's cache files (index, data) of the generated module `path`: in
    ``__pycache__`` beside it, or under NUMBA_CACHE_DIR in the folders numba names after it."""
    places = [path.parent / "__pycache__"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        places += path.parent.parent.glob(f"{path.parent.name}_*")
    for place in places:
        for stale in place.glob(f"{path.stem}.*.nb[ic]"):
            try:
                stale.unlink()
            except OSError:
                pass


def _written(name: str, source: str) -> Path | None:
    """The file `name` of :func:`folder`, holding `source` (written when absent or different);
    None when it cannot be (no home folder, a folder not writable)."""
    try:
        path = folder() / name
        if path.is_file() and path.read_bytes() == source.encode():  # else damaged: rewritten
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                f.write(source)
            os.utime(tmp, (STAMP, STAMP))
            os.replace(tmp, path)  # whole or absent, for a process reading it at once
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path
    except (OSError, RuntimeError):  # RuntimeError: Path.home() without a home
        return None
