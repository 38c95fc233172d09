"""The ``njit`` every kernel of the project uses: numba's, except that declared signatures are
compiled when the kernel is first needed, not when its module is imported.

``njit(SIG, **NJIT)`` keeps what an eager ``numba.njit(SIG, cache=True)`` gives: the kernel is
compiled for exactly ``SIG`` (arguments are converted to it, as numba converts them for an eager
kernel, and no other specialization is ever compiled), which is what lets ``cache=True`` hit in a
new process and first-class function arguments match. What changes is when: the compile (or the
cache load) happens at the first call from Python, the first time a compiled caller is typed
against it, the first time it is passed as a first-class function, or at :func:`ensure`. A
process then compiles only the kernels it runs: importing every model module compiles nothing,
although a sweep needs a handful of them.

**Two paths, the same numbers.** Where :func:`integrators.numba.internals.optimized` (the numba
versions it was checked against, ``DYN_PLAIN_NUMBA`` not set), kernels are that module's
deferred dispatchers and callers *call* a kernel's own code instead of linking a copy of it (half
the compile). Everywhere else this module's **plain path** uses numba's public API only:

- a kernel is numba's own lazy dispatcher (``numba.njit(**options)``), whose class is swapped,
  until its first need, for a subclass that ensures it first in ``__call__``,
  ``get_call_template`` and ``get_compile_result`` (each forwards whatever numba passes: a numba
  that renames one only loses that deferral, the kernel then compiles lazily for the same types);
- :func:`ensure` compiles the declared signatures (``dispatcher.compile``), then forbids any
  other (``disable_compile``), as an eager kernel is;
- callers link their callees, as numba does;
- the cache (``cache=True``) lives in a directory named by :func:`callee_digest`
  (``numba.config.CACHE_DIR`` set while ``enable_caching`` makes the kernel's cache; below the
  user's ``NUMBA_CACHE_DIR`` if set, else ``__pycache__/dyn-plain/`` beside the source), so an
  edit of a callee in another file makes its callers miss and compile again.

The two paths give the same numbers (tests/test_numba_seam.py compares the main job and the
two-token phase point under ``DYN_PLAIN_NUMBA=1`` with the default path; the bound it checks is
written there).

**Same code, cold or warm.** numba links a callee's code into each caller, but while a process
holds the callee's own compiled copy, the caller's calls that were not inlined bind to that copy
when the caller is loaded. On a cold cache the callees are always compiled (and so loaded) first;
a process that loads the caller from the cache held none of them, ran the caller's re-optimized
copies, and got other roundings (1 ulp in the attention field, 1e-15 after 50 steps). So a
kernel's declared callees (:func:`callees`, read from its source) are loaded before it, cold or
warm, on both paths, and the same seed gives the same numbers whether or not numba's cache was
warm.

**A cached kernel never outlives an edit of its callees.** numba keys a cached kernel on its own
file and bytecode only. A kernel made here is keyed also by a hash of the source of every kernel
it reaches through calls (:func:`callee_digest`): in the cache's index key on the optimized path,
in the cache's directory on the plain one.

``njit(**options)`` without a signature is numba's lazy ``njit`` unchanged. Every kernel made
with signatures is listed by :func:`declared_kernels` (what :mod:`dyn.engine.warmup` compiles
ahead of a test session or a sweep).
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import types
import warnings

import numba

from . import internals

OPTIMIZED = internals.optimized()  # decided once per process
internals.install()
internals.install_argument_memo()


def optimized() -> bool:
    """Whether this process runs integrators.numba.internals' optimizations (else the plain path)."""
    return OPTIMIZED


def calls_kernels() -> bool:
    """Whether callers call the kernels made with signatures instead of linking them."""
    return internals.calls_kernels()


def declared(kernel) -> bool:
    """Whether `kernel` was made by :func:`njit` with signatures."""
    return hasattr(kernel, "dyn_signatures")


def pending(kernel) -> bool:
    """Whether a declared kernel still waits for its first need (nothing compiled or loaded)."""
    return bool(getattr(kernel, "dyn_pending", False))


def ensure(kernel) -> None:
    """Compile (or load from numba's cache) a declared kernel's signatures now, its declared
    callees first; nothing for any other kernel or one already ensured."""
    if not pending(kernel):
        return
    if OPTIMIZED:
        internals.ensure(kernel)
    else:
        _ensure_plain(kernel)


def compile_ahead(*kernels) -> None:
    """:func:`ensure` each of `kernels` (an integrator calls it with its stepping kernel and the
    first-class functions it passes: its drift, the geometry's projection and retraction)."""
    for kernel in kernels:
        ensure(kernel)


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
    """The dotted name of a kernel's Python function, as numba's mangled symbols spell it."""
    return f"{kernel.py_func.__module__}.{kernel.py_func.__qualname__}"


def callee_digest(kernel) -> str:
    """A hash of the source of every declared kernel `kernel` reaches through calls, and of how
    callers bind to them (called or linked). numba keys a cached kernel on its own code only,
    so a cached caller would otherwise outlive an edit of a callee in another file: linked, it
    runs its stale copy of the callee (the same seed, other numbers)."""
    found = getattr(kernel, "dyn_callee_digest", None)
    if found is None:
        seen, todo = {}, list(callees(kernel))
        while todo:
            callee = todo.pop()
            name = qualified(callee)
            if name not in seen:
                seen[name] = f"{callee.dyn_link}:{_source(callee.py_func)}"
                todo.extend(callees(callee))
        text = repr((calls_kernels(), sorted(seen.items())))
        found = kernel.dyn_callee_digest = hashlib.sha256(text.encode()).hexdigest()
    return found


_SOURCES: dict = {}  # code object -> its source: a kernel's callees are read once per process


def _source(function) -> str:
    """A function's source, or its bytecode and constants where there is no file to read.
    Read once per process: every kernel's digest reads its callees', and tokenizing them again
    for each caller was a tenth of a short ``dyn run``."""
    code = function.__code__
    found = _SOURCES.get(code)
    if found is None:
        try:
            found = inspect.getsource(function)
        except (OSError, TypeError):
            found = repr((code.co_code, code.co_consts))
        _SOURCES[code] = found
    return found


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a closure variable not yet assigned
        return False
    return True


_DECLARED: list = []  # every kernel made with signatures, in creation order


def declared_kernels() -> list:
    """The kernels made by :func:`njit` with signatures so far (those of imported modules)."""
    return list(_DECLARED)


def load_by_name(name: str) -> None:
    """Load (or compile) the declared kernel of a dotted name, if there is one."""
    for kernel in _DECLARED:
        if qualified(kernel) == name:
            ensure(kernel)


# --- the plain path (numba's public API only) ---

_WAITING: dict = {}  # numba's dispatcher class -> its subclass for kernels not yet needed


def _waiting_class(base):
    """A subclass of numba's dispatcher class `base` that ensures a kernel at its first need."""
    found = _WAITING.get(base)
    if found is None:
        def __call__(self, *args, **kws):  # a call from Python
            ensure(self)
            return base.__call__(self, *args, **kws)

        def get_call_template(self, *args, **kws):  # typing a call from compiled code
            ensure(self)
            return base.get_call_template(self, *args, **kws)

        def get_compile_result(self, *args, **kws):  # passed as a first-class function
            ensure(self)
            return base.get_compile_result(self, *args, **kws)

        found = _WAITING[base] = type(f"Waiting{base.__name__}", (base,), dict(
            __call__=__call__, get_call_template=get_call_template,
            get_compile_result=get_compile_result, __module__=__name__))
    return found


def _ensure_plain(kernel) -> None:
    if getattr(kernel, "dyn_ensuring", False):  # kernels that name each other
        return
    kernel.dyn_ensuring = True
    try:
        for callee in callees(kernel):  # first: see "Same code, cold or warm"
            ensure(callee)
        if kernel.dyn_cache:
            with _cache_dir(plain_cache_dir(kernel)):
                kernel.enable_caching()
        for signature in kernel.dyn_signatures:
            try:
                kernel.compile(signature)
            except RuntimeError:  # "compilation disabled": another thread finished it first
                if pending(kernel):
                    raise
        kernel.dyn_pending = False
        kernel.disable_compile()
        kernel.__class__ = kernel.dyn_base  # numba's own class again: no hook left on its calls
    finally:
        kernel.dyn_ensuring = False


def plain_cache_dir(kernel) -> str:
    """Where the plain path caches `kernel`: a directory named by its :func:`callee_digest`."""
    base = numba.config.CACHE_DIR or os.path.join(
        os.path.dirname(os.path.abspath(inspect.getfile(kernel.py_func))), "__pycache__")
    return os.path.join(base, "dyn-plain", callee_digest(kernel)[:20])


@contextlib.contextmanager
def _cache_dir(path: str):
    """numba's user cache directory (``NUMBA_CACHE_DIR``) set to `path` for a moment."""
    stock = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = path
    try:
        yield
    finally:
        numba.config.CACHE_DIR = stock


def njit(*signatures, link: bool = False, **options):
    """``numba.njit`` with the signatures (if any) compiled on first need; use as a decorator:
    ``@njit(SIG, **NJIT)`` or ``@njit(**NJIT)``. With signatures, callers call the kernel's own
    code where :func:`optimized`, unless `link` (see the module doc)."""
    if len(signatures) == 1 and inspect.isfunction(signatures[0]) and not options:
        return numba.njit(signatures[0])  # bare @njit

    def wrap(function):
        if not signatures:
            return numba.njit(**options)(function)
        if OPTIMIZED:
            dispatcher = numba.njit(**options)(function)
            internals.defer(dispatcher, lambda: callee_digest(dispatcher))
        else:
            # numba makes (and checks) its cache here as always; ensure makes it again, keyed
            dispatcher = numba.njit(**options)(function)
            dispatcher.dyn_cache = bool(options.get("cache", False))
            dispatcher.dyn_base = type(dispatcher)
            dispatcher.__class__ = _waiting_class(type(dispatcher))
        dispatcher.dyn_signatures = tuple(signatures)
        dispatcher.dyn_link = link
        dispatcher.dyn_pending = True
        _DECLARED.append(dispatcher)
        return dispatcher

    return wrap
