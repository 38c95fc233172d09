"""The ``njit`` every kernel of the project uses: numba's, except that declared signatures are
compiled when the kernel is first needed, not when its module is imported. numba's public API
only: ``numba.njit``, ``numba.extending.typeof_impl`` and the dispatcher's documented
``recompile`` and ``stats``.

``njit(SIG, **NJIT)`` gives what an eager ``numba.njit(SIG, cache=True)`` gives: the kernel is
compiled for exactly ``SIG`` (arguments are converted to it, and no other specialization is ever
compiled), which is what lets ``cache=True`` hit in a new process and first-class function
arguments match. What changes is when: the decorator returns a :class:`Kernel`, which makes that
eager dispatcher (compiling, or loading from numba's cache) at its first need:

- the first call from Python (:meth:`Kernel.__call__`);
- the first time a compiled caller is typed against it: numba asks for the type of every global
  a kernel names, and the type registered here for a :class:`Kernel` (``typeof_impl``) is that of
  its dispatcher, made then;
- :func:`ensure` / :func:`compile_ahead`, which the integrators call with their stepping kernel
  and the first-class functions they pass it.

numba unboxes a first-class function passed from Python only from its own dispatchers: a
:class:`Kernel` passes the kernels among its arguments as theirs (:func:`compiled`), and a
script that passes one to its own ``numba.njit`` function passes ``jit.compiled(kernel)``.

A process then compiles only the kernels it runs: importing every model module compiles nothing,
although a sweep needs a handful of them.

**Same code, cold or warm.** numba links a callee's code into each caller, but while a process
holds the callee's own compiled copy, the caller's calls that were not inlined bind to that copy
when the caller is loaded. On a cold cache the callees are always compiled (and so loaded) first;
a process that loads the caller from the cache held none of them, ran the caller's re-optimized
copies, and got other roundings (1 ulp in the attention field, 1e-15 after 50 steps). So a
kernel's declared callees (:func:`callees`, read from its source) are made before it, cold or
warm, and the same seed gives the same numbers whether or not numba's cache was warm.

**A cached kernel never outlives an edit of its callees.** numba keys a cached kernel on its own
file and bytecode only; a caller links its callees' code, so a caller loaded from the cache after
a callee in another file changed would run the callee's old code. Here each kernel's
:func:`callee_digest` (a hash of the code of every kernel it reaches through calls) is written
beside numba's cache (:func:`digest_path`) when the kernel is made; a kernel loaded from the cache
(``stats.cache_hits``) whose recorded digest differs is compiled again with numba's documented
``recompile``, which also replaces its cache entry.

``njit(**options)`` without a signature is numba's lazy ``njit`` unchanged. Every kernel made
with signatures is listed by :func:`declared_kernels` (what :mod:`dyn.engine.warmup` compiles
ahead of a test session or a sweep).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import threading
import types
import warnings

import numba
from numba.extending import typeof_impl


class Kernel:
    """A kernel declared with signatures: numba's eager dispatcher for them, made at first need
    (:meth:`compiled`). Calls from Python, attribute reads (``signatures``, ``overloads``,
    ``stats``, ``inspect_llvm``...) and numba's typing all go to that dispatcher."""

    def __init__(self, function, signatures, options):
        functools.update_wrapper(self, function)
        self.py_func = function
        self.dyn_signatures = tuple(signatures)
        self.dyn_options = dict(options)
        self.dyn_dispatcher = None

    def compiled(self):
        """numba's dispatcher of this kernel, made (compiled or loaded) now if not yet: its
        declared callees first (see the module doc, "Same code, cold or warm")."""
        found = self.dyn_dispatcher
        if found is None:
            busy = _making()
            if id(self) in busy:  # kernels whose sources name each other
                raise RecursionError(f"{qualified(self)} is needed while it is being compiled")
            busy.add(id(self))
            try:
                for callee in callees(self):
                    callee.compiled()
                found = numba.njit(list(self.dyn_signatures), **self.dyn_options)(self.py_func)
                if self.dyn_options.get("cache"):
                    _fresh(self, found)
                if self.dyn_dispatcher is None:  # another thread may have made it first
                    self.dyn_dispatcher = found
                found = self.dyn_dispatcher
            finally:
                busy.discard(id(self))
        return found

    def __call__(self, *args):
        """The kernel called from Python; kernels among the arguments (first-class functions)
        are passed as their dispatchers, which numba unboxes (it unboxes no other object)."""
        dispatcher = self.dyn_dispatcher
        if dispatcher is None:
            dispatcher = self.compiled()
        if Kernel in map(type, args):
            args = tuple(a.compiled() if type(a) is Kernel else a for a in args)
        return dispatcher(*args)

    @property
    def signatures(self) -> list:
        """The compiled signatures: none while the kernel waits for its first need."""
        return [] if self.dyn_dispatcher is None else self.dyn_dispatcher.signatures

    def __getattr__(self, name):
        # Only numba's public dispatcher attributes are forwarded. A probe for any private name
        # (pytest looks for ``_fixture_function_marker`` on every module global, inspect and
        # pickle for dunders) must not compile the kernel to answer "no such attribute".
        if name.startswith("_") or name.startswith("dyn_"):
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __reduce__(self):
        """By name, as a module-level function pickles; a kernel made inside a function (no
        name to find it by) as numba pickles its dispatcher."""
        if "<locals>" in self.py_func.__qualname__:
            return self.compiled().__reduce__()
        return _by_name, (self.py_func.__module__, self.py_func.__qualname__)

    def __repr__(self):
        state = "waiting" if self.dyn_dispatcher is None else "compiled"
        return f"<Kernel {qualified(self)} ({state})>"


@typeof_impl.register(Kernel)
def _typeof_kernel(value, context):
    """numba's type of a kernel named by a caller or passed to one: its dispatcher's."""
    return typeof_impl(value.compiled(), context)


def _by_name(module: str, qualname: str):
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


_THREAD = threading.local()


def _making() -> set:
    """The kernels this thread is making now (a guard against sources that name each other)."""
    busy = getattr(_THREAD, "busy", None)
    if busy is None:
        busy = _THREAD.busy = set()
    return busy


def declared(kernel) -> bool:
    """Whether `kernel` was made by :func:`njit` with signatures."""
    return isinstance(kernel, Kernel)


def pending(kernel) -> bool:
    """Whether a declared kernel still waits for its first need (nothing compiled or loaded)."""
    return declared(kernel) and kernel.dyn_dispatcher is None


def ensure(kernel) -> None:
    """Compile (or load from numba's cache) a declared kernel's signatures now, its declared
    callees first; nothing for any other kernel or one already ensured."""
    if declared(kernel):
        kernel.compiled()


def compiled(kernel):
    """numba's dispatcher of a declared kernel (made now if not yet); any other callable as it is."""
    return kernel.compiled() if declared(kernel) else kernel


def compile_ahead(*kernels) -> list:
    """:func:`compiled` of each of `kernels`: an integrator calls it with its stepping kernel and
    the first-class functions it passes (its drift, the geometry's projection and retraction),
    and passes what it returns (numba unboxes its own dispatchers as first-class functions)."""
    return [compiled(kernel) for kernel in kernels]


def callees(kernel) -> list:
    """The declared kernels that `kernel`'s source names: directly (``f(...)``), through a module
    (``af.field(...)``) or through a closure cell; a static reading of its globals, in name
    order. Lazy kernels (no signature) are not listed: numba compiles them per call site."""
    func = kernel.py_func
    names = sorted(set(func.__code__.co_names))
    seen = [func.__globals__.get(name) for name in names]
    seen += [cell.cell_contents for cell in func.__closure__ or () if _filled(cell)]
    found = {}
    for value in seen:
        if isinstance(value, types.ModuleType):
            with warnings.catch_warnings():  # numpy's deprecated aliases warn when read
                warnings.simplefilter("ignore", DeprecationWarning)
                candidates = [getattr(value, name, None) for name in names]
        else:
            candidates = [value]
        for c in candidates:
            if declared(c) and c is not kernel:
                found[id(c)] = c
    return list(found.values())


def qualified(kernel) -> str:
    """The dotted name of a kernel's Python function."""
    return f"{kernel.py_func.__module__}.{kernel.py_func.__qualname__}"


def callee_digest(kernel) -> str:
    """A hash of the code of every declared kernel `kernel` reaches through calls. numba keys
    a cached kernel on its own code only, so a cached caller would otherwise outlive an edit of
    a callee in another file: it runs its stale linked copy of the callee (the same seed, other
    numbers)."""
    found = getattr(kernel, "dyn_callee_digest", None)
    if found is None:
        seen, todo = {}, list(callees(kernel))
        while todo:
            callee = todo.pop()
            name = qualified(callee)
            if name not in seen:
                seen[name] = _source(callee.py_func)
                todo.extend(callees(callee))
        text = repr(sorted(seen.items()))
        found = kernel.dyn_callee_digest = hashlib.sha256(text.encode()).hexdigest()
    return found


def digest_path(kernel) -> str:
    """Where the callee digest a kernel's cache entry was made with is recorded: beside numba's
    cache (``NUMBA_CACHE_DIR`` if set, else ``__pycache__`` beside the source), one small file
    per kernel."""
    base = numba.config.CACHE_DIR or os.path.join(
        os.path.dirname(os.path.abspath(inspect.getfile(kernel.py_func))), "__pycache__"
    )
    return os.path.join(base, "dyn-callees", f"{qualified(kernel)}.txt")


def _fresh(kernel, dispatcher) -> None:
    """Compile `dispatcher` again (numba's ``recompile``, which replaces its cache entry) where it
    was loaded from numba's cache with callees other than today's; record today's digest."""
    if not kernel.dyn_signatures or not callees(kernel):
        return  # a leaf: numba's own key (its file and bytecode) is the whole story
    digest = callee_digest(kernel)
    path = digest_path(kernel)
    try:
        with open(path) as f:
            recorded = f.read().strip()
    except OSError:
        recorded = None
    if recorded == digest:
        return
    if sum(dispatcher.stats.cache_hits.values()):
        dispatcher.recompile()
    try:  # a read-only tree keeps numba's own key only
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.{threading.get_ident()}"
        with open(temporary, "w") as f:
            f.write(digest)
        os.replace(temporary, path)
    except OSError:
        pass


_SOURCES: dict = {}  # code object -> its fingerprint: a kernel's callees are read once per process


def _source(function) -> str:
    """What a function computes, for :func:`callee_digest`: its bytecode, the names it reads
    and its constants (those of nested functions too), read off its code object (no file read,
    nothing tokenized: a process loading every kernel from the cache reads each once)."""
    code = function.__code__
    found = _SOURCES.get(code)
    if found is None:
        found = _SOURCES[code] = _fingerprint(code)
    return found


def _fingerprint(code) -> str:
    parts = [code.co_code.hex(), repr(code.co_names)]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            parts.append(_fingerprint(const))
        elif isinstance(const, frozenset):  # its repr's order varies with the hash seed
            parts.append(repr(sorted(map(repr, const))))
        else:
            parts.append(repr(const))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a closure variable not yet assigned
        return False
    return True


_DECLARED: list = []  # every kernel made with signatures, in creation order


def declared_kernels() -> list:
    """The kernels made by :func:`njit` with signatures so far (those of imported modules)."""
    return list(_DECLARED)


def njit(*signatures, **options):
    """``numba.njit`` with the signatures (if any) compiled on first need; use as a decorator:
    ``@njit(SIG, **NJIT)`` or ``@njit(**NJIT)`` (see the module doc)."""
    if len(signatures) == 1 and inspect.isfunction(signatures[0]) and not options:
        return numba.njit(signatures[0])  # bare @njit

    def wrap(function):
        if not signatures:
            return numba.njit(**options)(function)
        kernel = Kernel(function, signatures, options)
        _DECLARED.append(kernel)
        return kernel

    return wrap
