r"""Callers call a kernel's own compiled code instead of linking a copy of it into themselves.

**Why.** numba compiles a call between two jitted functions by linking the callee's whole LLVM
module into the caller's, then running the full optimizer again over the caller and everything
it linked (``CPUCodeLibrary.finalize`` in numba/core/codegen.py). This project's large kernels
call each other in chains: the attention field (three regimes and their helpers) under ten
drifts, under the normalization schemes. Each level re-optimized the whole tree beneath it, so
about half of the CPU time of compiling every kernel went to optimizing code that was already
compiled (`benchmarks/first_run.py` measures the compile).

**What changes.** A kernel made by :func:`integrators.jit.njit` with signatures is *called*: its
callers keep a declaration of it, not its body, and the call binds when the caller is loaded to
the kernel's own code, which :mod:`integrators.jit` always loads first. The declaration carries
the attributes the kernel's own compile derived (no capture, read-only arguments, ...), which is
what linking had told the caller's optimizer. Small helpers that LLVM inlines keep numba's
linking (``njit(SIG, link=True)``): inlining is theirs to keep.

**Same numbers.** Since :mod:`integrators.jit` loads callees first, a call LLVM did not inline
already bound to the callee's own copy, cold cache or warm; the linked copy was dead code. So
the numbers are unchanged, bit for bit (the fingerprints of every shipped scenario are equal
before and after), and compiling every kernel takes about half the time.

**A caller older than its callee.** numba's cache keys a kernel on its own file only, and a
compiled kernel's name carries a per-process count and a hash-seeded tag. When a callee's file
changes (a ``git pull``), the callee compiles again under a new name while a caller in an
unchanged file still loads from the cache, naming the old one; that load is then a cache
miss (:class:`StaleCaller` inside), and numba compiles the caller again and overwrites its entry.
(Linked, the caller would have run its stale copy of the callee.) A caller that is not one of
ours (a plain ``numba.njit`` with a signature and ``cache=True``, in a script) may be loaded
before the kernels it calls: the callees it names are loaded first by their qualified names.

**Where it applies.** Only the numba versions it was checked against (:data:`CHECKED`); other
versions link as numba does, with the same numbers and the slower compile. Setting
``DYN_LINK_KERNELS=1`` turns it off too.
"""
from __future__ import annotations

import os
import re

import llvmlite.binding as ll
import numba
from numba.core import caching, codegen

CHECKED = ("0.68.",)  # numba versions whose codegen this was checked against

_DEFINE = re.compile(r"^define (?:linkonce_odr |weak_odr )?(.*?@([\w.$]+)\(.*) \{$", re.M)
_DECLARE = re.compile(r"^declare .*?@([\w.$]+)\(.*$", re.M)
_ATTRIBUTES = re.compile(r"^attributes (#\d+) = \{ (.*) \}$", re.M)
_GROUP = re.compile(r" (#\d+)$")

_STOCK: dict = {}


class StaleCaller(RuntimeError):
    """A kernel loaded from numba's cache names a callee that is not loaded under that name."""


def active() -> bool:
    """Whether callers call, rather than link, the kernels marked as called (see module doc)."""
    return bool(_STOCK)


def mark_called(library) -> None:
    """Mark a kernel's compiled library: callers declare it instead of linking it."""
    library._dyn_called = True


def _declarations(library) -> dict[str, str]:
    """Each function the library defines, as a ``declare`` line with its definition's
    attributes spelled out (an attribute group of the callee's module means nothing in the
    caller's)."""
    found = getattr(library, "_dyn_declarations", None)
    if found is None:
        text = str(library._get_module_for_linking())
        groups = dict(_ATTRIBUTES.findall(text))
        found = {}
        for match in _DEFINE.finditer(text):
            head = _GROUP.sub(lambda g: " " + groups.get(g.group(1), g.group(1)), match.group(1))
            found[match.group(2)] = "declare " + head
        library._dyn_declarations = found
    return found


def _finalize(self):
    """numba's finalize, with the marked libraries declared instead of linked."""
    called = [lib for lib in self._linking_libraries if getattr(lib, "_dyn_called", False)]
    if called:
        self._linking_libraries = [lib for lib in self._linking_libraries
                                   if not getattr(lib, "_dyn_called", False)]
        self._dyn_callees = called  # alive as long as the caller, as linked libraries are
        heads = {}
        for lib in called:
            self._reload_init.update(lib._reload_init)  # as numba's linking does
            heads.update(_declarations(lib))
        text = str(self._final_module)
        declared = _DECLARE.sub(lambda m: heads.get(m.group(1), m.group(0)), text)
        if declared != text:
            module = ll.parse_assembly(declared)
            module.name = self._final_module.name
            self._final_module = module
    return _STOCK["finalize"](self)


# Set by integrators.jit: loads the kernel of a qualified name ("dyn.numerics.vexp.row_max"), if
# it is one made with signatures.
load_by_name = None


def qualified_name(symbol: str) -> str:
    """The dotted Python name a numba symbol mangles: ``_ZN3dyn8numerics4vexp7row_maxB..``
    gives ``dyn.numerics.vexp.row_max`` (length-prefixed parts up to the first tag)."""
    parts, at = [], 3
    while at < len(symbol) and symbol[at].isdigit():
        digits = re.match(r"\d+", symbol[at:]).group()
        at += len(digits)
        parts.append(symbol[at:at + int(digits)])
        at += int(digits)
    return ".".join(parts)


def _missing(module, engine) -> list[str]:
    return [f.name for f in module.functions if f.is_declaration and f.name.startswith("_ZN")
            and not engine.is_symbol_defined(f.name)]


def _finalize_final_module(self):
    """numba's step, after checking that every kernel the library declares is loaded: MCJIT
    would otherwise abort the whole process ("LLVM ERROR: Symbol not found"). Kernels not
    loaded yet are loaded by name first (a caller that is not ours may come before them)."""
    module = self._shared_module if self._shared_module is not None else self._final_module
    engine = self._codegen._engine
    missing = _missing(module, engine)
    if missing and load_by_name is not None:
        for name in sorted({qualified_name(symbol) for symbol in missing}):
            load_by_name(name)
        missing = _missing(module, engine)
    if missing:
        raise StaleCaller(f"{self.name} calls kernels that are not loaded under these names: "
                          f"{missing} (compiled again since this caller was cached)")
    return _STOCK["finalize_final_module"](self)


def _load_overload(self, sig, target_context):
    """numba's cache load, where a stale caller (:class:`StaleCaller`) is a miss: numba then
    compiles it again and overwrites its entry."""
    try:
        return _STOCK["load_overload"](self, sig, target_context)
    except StaleCaller:
        return None


def install() -> None:
    """Apply the patch once, where the numba version is one of :data:`CHECKED` and
    ``DYN_LINK_KERNELS`` is not set."""
    if _STOCK or os.environ.get("DYN_LINK_KERNELS") or \
            not numba.__version__.startswith(CHECKED):
        return
    library = codegen.CPUCodeLibrary
    _STOCK["finalize"] = library.finalize
    _STOCK["finalize_final_module"] = library._finalize_final_module
    _STOCK["load_overload"] = caching.Cache._load_overload
    library.finalize = _finalize
    library._finalize_final_module = _finalize_final_module
    caching.Cache._load_overload = _load_overload
