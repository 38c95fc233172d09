"""The ``njit`` every kernel of the project uses: numba's, except that declared signatures are
compiled when the kernel is first needed, not when its module is imported.

``njit(SIG, **NJIT)`` keeps what an eager numba signature gives: the kernel is compiled for
exactly ``SIG`` (arguments are converted to it, as numba converts them for an eager kernel, and
no other specialization is ever compiled), which is what lets ``cache=True`` hit in a new
process and first-class function arguments match. What changes is when: the compile (or the
cache load) happens at the first call from Python, the first time a compiled caller is typed
against it, or the first time it is passed as a first-class function. A process then compiles
only the kernels it runs: importing every model module of the project compiled 167 s of
kernels (CPU, cold cache), although a sweep needs a handful of them.

**Same code, cold or warm.** numba links a callee's code into each caller, but while a process
holds the callee's own compiled copy, the caller's calls that were not inlined bind to that copy
when the caller is loaded. On a cold cache the callees are always compiled (and so loaded) first;
a process that loads the caller from the cache held none of them, ran the caller's re-optimized
copies, and got other roundings (1 ulp in the attention field, 1e-15 after 50 steps). So a
kernel's declared callees (:func:`callees`, read from its source) are loaded before it, cold or
warm, and the same seed gives the same numbers whether or not numba's cache was warm.

**Called, not linked.** Its callers call a kernel made with signatures instead of linking a
copy of it (:mod:`integrators.called_kernels`: the same numbers, half the compile), unless it is
made with ``link=True``: small helpers that LLVM inlines into their callers.

**A cached kernel never outlives an edit of its callees.** numba keys a cached kernel on its
own file and bytecode only. A kernel made here adds to that key a hash of the source of every
kernel it reaches through calls (:func:`callee_digest`), so editing a callee in another file
compiles its callers again instead of loading them: linked, they would have run their stale
copy of it (found so: a cache written before callers called kernels gave other numbers).

``njit(**options)`` without a signature is numba's lazy ``njit`` unchanged. Every kernel made
with signatures is listed by :func:`declared_kernels` (what :mod:`dyn.engine.warmup` compiles
ahead of a test session or a sweep).
"""
from __future__ import annotations

import hashlib
import inspect
import types
import warnings

import numba
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher

from . import called_kernels, split_compile

called_kernels.install()


class DeferredDispatcher(CPUDispatcher):
    """A numba dispatcher whose declared signatures compile on first need (see the module doc).
    The three entry points numba uses to find an overload first compile the declared ones and
    then forbid any other, exactly as an eager ``numba.njit(sig)`` does at import."""

    def _ensure_declared(self):
        # the global compiler lock is re-entrant: a kernel being compiled ensures its callees
        with global_compiler_lock:
            declared = getattr(self, "_declared", ())
            if declared and not getattr(self, "_ensuring", False):
                if not _ENSURING:  # the top of a tree: maybe split it over processes
                    _split_cold([self])
                self._ensuring = True  # a guard against kernels that name each other
                _ENSURING.append(self)
                try:
                    for callee in callees(self):  # first: see "Same code, cold or warm" above
                        callee._ensure_declared()
                    for signature in declared:  # a stale cached copy is a cache miss
                        self.compile(signature)
                finally:
                    self._ensuring = False
                    _ENSURING.pop()
                self.disable_compile()
                self._declared = ()

    def _compile_for_args(self, *args, **kws):  # a call from Python with no overload yet
        self._ensure_declared()
        if not self._can_compile:  # numba calls what this returns: dispatch again, converting
            return self._dispatch_again
        return super()._compile_for_args(*args, **kws)

    def _dispatch_again(self, *args, **kws):
        return self(*args, **kws)

    def add_overload(self, cres):  # compiled or loaded from the cache alike
        if not self._link and cres.library is not None:
            called_kernels.mark_called(cres.library)
        return super().add_overload(cres)

    def get_call_template(self, args, kws):  # typing a call from compiled code
        self._ensure_declared()
        return super().get_call_template(args, kws)

    def get_compile_result(self, sig):  # passed as a first-class function
        self._ensure_declared()
        return super().get_compile_result(sig)


_ENSURING: list = []  # the kernels being ensured, outermost first (under the compiler lock)


def _pending(kernel) -> bool:
    return bool(getattr(kernel, "_declared", ()))


_SOON: list = []  # kernels a caller said it will need soon (:func:`wanted_soon`)


def wanted_soon(*kernels) -> None:
    """Say that these kernels will be called soon (a system's observation, after its solve): a
    cold compile starting before then takes them into its split
    (:mod:`integrators.split_compile`)."""
    with global_compiler_lock:
        _SOON.extend(k for k in kernels if isinstance(k, DeferredDispatcher) and _pending(k))


def compile_ahead(*kernels) -> None:
    """Load or compile these kernels now, with :func:`wanted_soon` ones; cold trees are split
    over two processes where that is quicker. (An integrator calls it with its stepping kernel
    and the first-class functions it passes: its drift, the geometry's projection and
    retraction, which numba would otherwise compile one after the other.)"""
    mine = [k for k in kernels if isinstance(k, DeferredDispatcher)]
    with global_compiler_lock:
        if not _ENSURING:
            _split_cold(mine)
        _ENSURING.append(None)  # planned above: the roots are not the tops of new trees
        try:
            for kernel in mine:
                kernel._ensure_declared()
        finally:
            _ENSURING.pop()


def _split_cold(roots) -> None:
    """Compile the cold part of the trees of `roots` and of the wanted-soon kernels on two
    processes where that is quicker (:mod:`integrators.split_compile`); the ordinary ensures
    that follow load it all."""
    _SOON[:] = [k for k in dict.fromkeys(_SOON) if _pending(k)]  # kept until a split takes them
    roots = [k for k in dict.fromkeys((*roots, *_SOON)) if _pending(k)]
    plan = split_compile.plan(roots, callees, _pending) if split_compile.enabled() else None
    if plan is None:
        return
    _SOON.clear()
    _ENSURING.append(None)  # what is ensured here is not the top of a tree
    try:
        for kernel in plan.first:
            kernel._ensure_declared()
        helper = split_compile.start_helper(plan.helper)
        try:
            for kernel in plan.alongside:
                kernel._ensure_declared()
        except BaseException:  # an interrupt or a compile error here: stop the helper at once
            split_compile.finish(helper, wait=False)
            raise
        split_compile.finish(helper)
    finally:
        _ENSURING.pop()


def callees(kernel) -> list[DeferredDispatcher]:
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
            if isinstance(c, DeferredDispatcher) and c is not kernel:
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
    found = getattr(kernel, "_callee_digest", None)
    if found is None:
        seen, todo = {}, list(callees(kernel))
        while todo:
            callee = todo.pop()
            name = qualified(callee)
            if name not in seen:
                seen[name] = f"{callee._link}:{_source(callee.py_func)}"
                todo.extend(callees(callee))
        text = repr((called_kernels.active(), sorted(seen.items())))
        found = kernel._callee_digest = hashlib.sha256(text.encode()).hexdigest()
    return found


def _source(function) -> str:
    """A function's source, or its bytecode and constants where there is no file to read."""
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        code = function.__code__
        return repr((code.co_code, code.co_consts))


def _keyed_by_callees(kernel) -> None:
    """numba's cache index key of `kernel`, plus :func:`callee_digest`."""
    cache = getattr(kernel, "_cache", None)
    stock = getattr(cache, "_index_key", None)
    if stock is None:
        return

    def index_key(sig, codegen):
        return stock(sig, codegen) + (callee_digest(kernel),)

    cache._index_key = index_key


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # a closure variable not yet assigned
        return False
    return True


_DECLARED: list[DeferredDispatcher] = []  # every kernel made with signatures, in creation order


def declared_kernels() -> list[DeferredDispatcher]:
    """The kernels made by :func:`njit` with signatures so far (those of imported modules)."""
    return list(_DECLARED)


def _load_by_name(name: str) -> None:
    """Load (or compile) the declared kernel of a dotted name, if there is one."""
    for kernel in _DECLARED:
        if qualified(kernel) == name:
            kernel._ensure_declared()


called_kernels.load_by_name = _load_by_name


def njit(*signatures, link: bool = False, **options):
    """``numba.njit`` with the signatures (if any) compiled on first need; use as a decorator:
    ``@njit(SIG, **NJIT)`` or ``@njit(**NJIT)``. With signatures, callers call the kernel's own
    code, unless `link` (see the module doc)."""
    if len(signatures) == 1 and inspect.isfunction(signatures[0]) and not options:
        return numba.njit(signatures[0])  # bare @njit

    def wrap(function):
        dispatcher = numba.njit(**options)(function)
        if signatures:
            dispatcher.__class__ = DeferredDispatcher
            dispatcher._declared = tuple(signatures)
            dispatcher._link = link
            _keyed_by_callees(dispatcher)
            _DECLARED.append(dispatcher)
        return dispatcher

    return wrap
