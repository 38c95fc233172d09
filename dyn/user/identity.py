"""What a user's numba function compiles from, as one hash: the key of its cached adapters.

numba links a callee's code into its caller and keys a cached caller on the caller's own file
and bytecode only, so an adapter cached once would keep running the user's old code after an
edit of the user's function, or of a helper it calls, or of a constant it reads. The digest
here covers everything numba compiles into it, read from the function objects themselves:

- of every Python function reached (the user's, and recursively each function or numba
  dispatcher it names: a global, an attribute of a module it reads, a closure cell, a default):
  its qualified name, its code (bytecode, constants and names, nested code included) and the
  sha256 of its source file's bytes;
- the values of the plain globals and cells it reads (numbers, strings, tuples, arrays: numba
  freezes them into the compiled code as constants);
- for a library numba compiles from its own overloads (numpy, numba, scipy, llvmlite, math),
  the library's name and version only.

Anything else (a function without a source file, as one typed at a prompt or made by exec; an
object whose value has no stable text) makes the function not keyable: :func:`digest` returns
None and the caller compiles it afresh in each process, as numba does for any uncached function.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import types

import numpy as np

# packages whose functions numba compiles from its own implementations, not their source
LIBRARIES = frozenset({"numpy", "numba", "llvmlite", "scipy", "math", "cmath", "builtins"})
PLAIN = (bool, int, float, complex, str, bytes, type(None))


class NotKeyable(Exception):
    """Something reached from the user's function has no stable identity."""


def digest(fn) -> str | None:
    """sha256 (hex) of everything `fn` (a Python function or a numba dispatcher) compiles from
    (module doc); None when something it reaches cannot be keyed."""
    walk = _Walk()
    try:
        walk.value(fn)
    except NotKeyable:
        return None
    return hashlib.sha256("\n".join(walk.parts).encode()).hexdigest()


def file_digest(path: str) -> str:
    """sha256 (hex) of a file's bytes."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class _Walk:
    """One traversal: the parts of the digest, in the order met, each object visited once."""

    def __init__(self):
        self.parts: list[str] = []
        self.seen: set[int] = set()
        self.files: dict[str, str] = {}

    def value(self, v) -> None:
        if isinstance(v, PLAIN):
            self.parts.append(repr(v))
        elif isinstance(v, (tuple, list)):
            self.parts.append(f"{type(v).__name__}[{len(v)}]")
            for item in v:
                self.value(item)
        elif isinstance(v, (set, frozenset)):  # in an order that is the same in every process
            self.parts.append(f"{type(v).__name__} {_stable(v)}")
        elif isinstance(v, np.ndarray):
            self.parts.append(
                f"array {v.dtype.str} {v.shape} {hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}"
            )
        elif isinstance(v, np.generic):
            self.parts.append(f"{type(v).__name__} {v!r}")
        elif id(v) in self.seen:
            return
        elif hasattr(v, "py_func") and inspect.isfunction(v.py_func):  # a numba dispatcher
            self.seen.add(id(v))
            options = getattr(v, "targetoptions", {})
            self.parts.append(f"dispatcher {sorted((k, repr(o)) for k, o in options.items())}")
            self.function(v.py_func)
        elif inspect.isfunction(v):
            self.seen.add(id(v))
            self.function(v)
        elif isinstance(v, types.ModuleType):
            self.parts.append(f"module {self.library(v.__name__) or v.__name__}")
        elif isinstance(v, (type, types.BuiltinFunctionType, np.ufunc)):
            self.named(v)
        else:  # another object: its text, when that names no address (a dict of numbers)
            text = repr(v)
            if " at 0x" in text:
                raise NotKeyable(f"{type(v).__name__} {text:.60}")
            self.parts.append(f"{type(v).__module__}.{type(v).__qualname__} {text}")

    def library(self, module: str) -> str | None:
        """`name version` of the library `module` belongs to, when it is one of LIBRARIES."""
        top = module.split(".")[0]
        if top not in LIBRARIES:
            return None
        return f"{top} {getattr(sys.modules.get(top), '__version__', '')}"

    def named(self, v) -> None:
        """A class, builtin or ufunc: its qualified name, and its module's file where that is
        not a library's (a user's class: an edit of its file changes the key)."""
        module = getattr(v, "__module__", None) or ""
        name = f"{module}.{getattr(v, '__qualname__', getattr(v, '__name__', repr(v)))}"
        self.parts.append(f"named {name}")
        if module and self.library(module) is None:
            file = getattr(sys.modules.get(module), "__file__", None)
            if file:
                self.parts.append(self.file(file))

    def file(self, path: str) -> str:
        found = self.files.get(path)
        if found is None:
            # the bytes, not the path: a copy of a model elsewhere compiles to the same code
            found = self.files[path] = f"file {file_digest(path)}"
        return found

    def function(self, f) -> None:
        module = f.__module__ or ""
        library = self.library(module)
        if library is not None:
            self.parts.append(f"function {module}.{f.__qualname__} ({library})")
            return
        path = f.__code__.co_filename
        if not os.path.isfile(path):  # typed at a prompt, made by exec: no file to key an edit on
            raise NotKeyable(f"{f.__qualname__} has no source file ({path})")
        self.parts.append(f"function {module}.{f.__qualname__}")
        self.parts.append(self.file(path))
        names = self.code(f.__code__)
        for default in (f.__defaults__ or ()) + tuple((f.__kwdefaults__ or {}).values()):
            self.value(default)
        for cell in f.__closure__ or ():
            try:
                self.value(cell.cell_contents)
            except ValueError:  # a cell not yet filled
                self.parts.append("empty cell")
        space = f.__globals__
        for name in names:
            if name in space:
                v = space[name]
                self.parts.append(f"global {name}")
                if isinstance(v, types.ModuleType):
                    self.module(v, names)
                else:
                    self.value(v)

    def module(self, module, names: list[str]) -> None:
        """A module the function reads: what it may read of it (the attributes named in its
        code), unless a library's."""
        self.value(module)
        if self.library(module.__name__) is not None:
            return
        for name in names:
            if hasattr(module, name) and not isinstance(getattr(module, name), types.ModuleType):
                self.parts.append(f"attribute {module.__name__}.{name}")
                self.value(getattr(module, name))

    def code(self, code) -> list[str]:
        """Record a code object (nested ones too); the names it reads, in order."""
        names = list(code.co_names)
        self.parts.append(f"code {code.co_code.hex()} {code.co_names} {code.co_freevars}")
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                names += self.code(const)
            else:
                self.parts.append(f"const {_stable(const)}")
        return list(dict.fromkeys(names))


def _stable(v) -> str:
    """repr of a constant, sets in sorted order (a set of strings iterates in an order that
    changes from process to process)."""
    if isinstance(v, (set, frozenset)):
        return f"{type(v).__name__}({sorted(_stable(item) for item in v)})"
    if isinstance(v, tuple):
        return f"({', '.join(_stable(item) for item in v)},)"
    return repr(v)
