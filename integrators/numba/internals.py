r"""numba's internals, behind one seam: the only module of the project that imports
``numba.core`` or touches a private numba name (``grep -rn "numba.core\|\._[a-z]" integrators
dyn`` finds numba's private names here only; tests/test_numba_seam.py checks it).

What it does, where it applies (:func:`optimized`: the numba versions of :data:`CHECKED`, and
``DYN_PLAIN_NUMBA`` not set):

- **Deferred compiles** (:class:`DeferredDispatcher`). A kernel made by
  :func:`integrators.jit.njit` with signatures compiles (or loads from numba's cache) at its
  first need: the first call from Python, the first time a compiled caller is typed against it,
  the first time it is passed as a first-class function. It subclasses numba's CPU dispatcher and
  hooks the three entry points numba uses to find an overload (``_compile_for_args``,
  ``get_call_template``, ``get_compile_result``).
- **Called, not linked** (:func:`install`). numba compiles a call between two jitted functions by
  linking the callee's whole LLVM module into the caller and optimizing it all again
  (``CPUCodeLibrary.finalize``): the project's kernels call each other in chains (the attention
  field's regimes under ten drifts, under the normalization schemes), and about half of
  compiling every kernel went to re-optimizing code already compiled. Here a caller keeps a
  *declaration* of a kernel made with signatures (textual LLVM IR rewritten, with the attributes
  of the callee's definition spelled out), and the call binds when the caller is loaded to the
  kernel's own code, which :mod:`integrators.jit` always loads first. Kernels made with
  ``link=True`` (small helpers LLVM inlines) are linked as numba links them. Since callees are
  loaded first, a call LLVM did not inline already bound to the callee's own copy: the numbers
  are the same bit for bit and the compile takes about half the time.
- **A cached caller never outlives an edit of its callee** (:func:`key_by_callees`). numba keys a
  cached kernel on its own file and bytecode; here the cache's index key also carries
  :func:`integrators.jit.callee_digest`. And a caller loaded from the cache whose callee was
  compiled again under a new name (numba's names carry a per-process count) would make MCJIT
  abort the process ("Symbol not found"): :func:`_finalize_final_module` raises
  :class:`StaleCaller` first, which the patched cache load treats as a miss.

- **Cache loads without numba's refresh** (:func:`_load_cached`). numba refreshes its target
  context before every cache load: the first one imports all its implementation registries
  (about 200 modules, and scipy.linalg for its BLAS check), a third of a short ``dyn run``
  whose kernels all come from the cache. Here a load initializes numba's runtime (NRT) only;
  a library whose external symbols the process does not define, or that calls numba's BLAS
  wrappers against a scipy of another integer width, gets numba's refresh first
  (:func:`_ensure_symbols`); a compile refreshes by itself. A load also runs LLVM's calls
  without numba's per-call timing events (:func:`_untimed_llvm_calls`).

- **Kernels passed from Python without numba's per-call look-ups**
  (:func:`install_argument_memo`). A block kernel called with the drift, projection, retraction
  and observer as first-class arguments spent about 0.3 ms per call (holding the GIL) in numba
  typing each of them anew and looking up each one's compiled addresses (the compiler lock,
  then LLVM's symbol table); a declared kernel keeps its type, and a kernel that can no longer
  compile remembers its two addresses per call site. The same addresses: the same code runs.

Everywhere else (another numba, or ``DYN_PLAIN_NUMBA=1``) nothing here is applied and
:mod:`integrators.jit` runs its plain path on numba's public API only: numba's own dispatchers,
linked calls, a cache directory per callee digest. The compile events (:func:`recording_compiles`,
:func:`listening_to_compiles`: numba's event API, public since 0.53) serve both paths.
"""
from __future__ import annotations

import os
import re

import contextlib
import types

import llvmlite.binding as ll
import numba

try:  # numba's internal layout, as the CHECKED versions have it
    from numba.core import caching, codegen
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import CPUDispatcher
    from numba.core.runtime import rtsys
except ImportError:  # another layout: nothing here applies, the plain path runs
    CPUDispatcher = None
try:
    from numba.core import event
except ImportError:  # no event API: nothing is told of compiles
    event = None

CHECKED = ("0.68.",)  # numba versions whose dispatcher, codegen and caching this was checked against
PLAIN_ENV = "DYN_PLAIN_NUMBA"  # "1": the plain path, whatever the version


def optimized() -> bool:
    """Whether this module's optimizations apply: a checked numba version, and the plain path
    not forced by ``DYN_PLAIN_NUMBA``."""
    return (CPUDispatcher is not None and numba.__version__.startswith(CHECKED)
            and os.environ.get(PLAIN_ENV, "") in ("", "0"))


# --- numba's compile events (public API, both paths) ---

CompileListener = event.Listener if event is not None else object


def recording_compiles():
    """A context manager recording numba's compile events (they fire on cache misses only):
    ``recorder.buffer`` holds (time, event) pairs, each event with ``is_start``."""
    if event is None:
        return contextlib.nullcontext(types.SimpleNamespace(buffer=[]))
    return event.install_recorder("numba:compile")


def listening_to_compiles(listener):
    """A context manager that hands numba's compile events to `listener` (a CompileListener)."""
    if event is None:
        return contextlib.nullcontext()
    return event.install_listener("numba:compile", listener)


# --- deferred compiles ---

if CPUDispatcher is not None:  # defined where numba's layout is the CHECKED one
    class DeferredDispatcher(CPUDispatcher):
        """A numba dispatcher whose declared signatures compile on first need (see the module doc).
        The three entry points numba uses to find an overload first compile the declared ones and
        then forbid any other, exactly as an eager ``numba.njit(sig)`` does at import."""

        def _ensure_declared(self):
            from .jit import callees  # jit imports this module at its top

            # the global compiler lock is re-entrant: a kernel being compiled ensures its callees
            with global_compiler_lock:
                if self.dyn_pending and not getattr(self, "_ensuring", False):
                    self._ensuring = True  # a guard against kernels that name each other
                    try:
                        for callee in callees(self):  # first: see integrators.jit, "cold or warm"
                            if isinstance(callee, DeferredDispatcher):
                                callee._ensure_declared()
                        for signature in self.dyn_signatures:  # a stale cached copy is a miss
                            self.compile(signature)
                    finally:
                        self._ensuring = False
                    self.disable_compile()
                    self.dyn_pending = False

        def _compile_for_args(self, *args, **kws):  # a call from Python with no overload yet
            self._ensure_declared()
            if not self._can_compile:  # numba calls what this returns: dispatch again, converting
                return self._dispatch_again
            return super()._compile_for_args(*args, **kws)

        def _dispatch_again(self, *args, **kws):
            return self(*args, **kws)

        def add_overload(self, cres):  # compiled or loaded from the cache alike
            self.__dict__.pop("dyn_addresses", None)  # see install_argument_memo
            if not self.dyn_link and cres.library is not None:
                cres.library._dyn_called = True  # callers declare it instead of linking it
            return super().add_overload(cres)

        def get_call_template(self, args, kws):  # typing a call from compiled code
            self._ensure_declared()
            return super().get_call_template(args, kws)

        def get_compile_result(self, sig):  # passed as a first-class function
            self._ensure_declared()
            return super().get_compile_result(sig)
else:
    DeferredDispatcher = None


def defer(dispatcher, digest) -> None:
    """Make a fresh ``numba.njit(**options)`` dispatcher a :class:`DeferredDispatcher` whose cache
    key carries ``digest()`` (see :func:`key_by_callees`)."""
    dispatcher.__class__ = DeferredDispatcher
    key_by_callees(dispatcher, digest)


def ensure(kernel) -> None:
    """Compile (or load) a deferred kernel's declared signatures now, callees first."""
    with global_compiler_lock:
        kernel._ensure_declared()


def key_by_callees(kernel, digest) -> None:
    """numba's cache index key of `kernel`, plus ``digest()``."""
    cache = getattr(kernel, "_cache", None)
    stock = getattr(cache, "_index_key", None)
    if stock is None:
        return

    def index_key(sig, codegen):
        return stock(sig, codegen) + (digest(),)

    cache._index_key = index_key


# --- called, not linked ---

_DEFINE = re.compile(r"^define (?:linkonce_odr |weak_odr )?(.*?@([\w.$]+)\(.*) \{$", re.M)
_DECLARE = re.compile(r"^declare .*?@([\w.$]+)\(.*$", re.M)
_ATTRIBUTES = re.compile(r"^attributes (#\d+) = \{ (.*) \}$", re.M)
_GROUP = re.compile(r" (#\d+)$")

_STOCK: dict = {}  # numba's own methods, replaced by install()


class StaleCaller(RuntimeError):
    """A kernel loaded from numba's cache names a callee that is not loaded under that name."""


def calls_kernels() -> bool:
    """Whether callers call, rather than link, the kernels made with signatures."""
    return bool(_STOCK)


def kernel_library_text(kernel) -> str:
    """The LLVM module a kernel's callers would link (its first overload), for tests."""
    return str(kernel.overloads[kernel.signatures[0]].library._get_module_for_linking())


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


def _undefined(module) -> tuple[list[str], list[str]]:
    """The functions and the globals `module` declares without defining them (one walk: each
    step of it is a call into LLVM)."""
    functions = [f.name for f in module.functions if f.is_declaration]
    variables = [v.name for v in module.global_variables if v.is_declaration]
    return functions, variables


def _missing(functions, engine) -> list[str]:
    return [name for name in functions if name.startswith("_ZN")
            and not engine.is_symbol_defined(name)]


def _finalize_final_module(self):
    """numba's step, after checking that every kernel the library declares is loaded: MCJIT
    would otherwise abort the whole process ("LLVM ERROR: Symbol not found"). Kernels not
    loaded yet are loaded by name first (a caller that is not ours, e.g. a script's eager
    ``numba.njit(sig, cache=True)``, may be loaded before them)."""
    from .jit import load_by_name

    module = self._shared_module if self._shared_module is not None else self._final_module
    engine = self._codegen._engine
    functions, variables = _undefined(module)
    missing = _missing(functions, engine)
    if missing:
        for name in sorted({qualified_name(symbol) for symbol in missing}):
            load_by_name(name)
        missing = _missing(functions, engine)
    if missing:
        raise StaleCaller(f"{self.name} calls kernels that are not loaded under these names: "
                          f"{missing} (compiled again since this caller was cached)")
    _ensure_symbols(functions + variables, engine)
    return _STOCK["finalize_final_module"](self)


# --- cache loads without numba's registry refresh ---

_UNREFRESHED: list = []  # the target contexts a cache load skipped refreshing (one, the CPU's)
_BLAS = ("numba_xx", "numba_ez_")  # numba's BLAS and LAPACK wrappers (numba._helperlib)


def _load_cached(self, sig, target_context):
    """numba's cache load, less its refresh of the target context. numba's refresh imports
    every one of its implementation registries (about 200 modules, and scipy.linalg for its
    BLAS check): a third of a short ``dyn run``. What a kernel loaded from the cache needs of
    them, it needs at finalization, where :func:`_ensure_symbols` refreshes when a symbol is
    missing; a compile refreshes by itself (numba's ``CompilerBase``)."""
    rtsys.initialize(target_context)  # NRT's symbols: the one part of the refresh every kernel needs
    if target_context not in _UNREFRESHED:
        _UNREFRESHED.append(target_context)
    with _untimed_llvm_calls(), self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


@contextlib.contextmanager
def _untimed_llvm_calls():
    """llvmlite's calls into LLVM without numba's timing events around each one. numba times
    the LLVM lock for a compile's statistics (a loaded kernel has none to fill), and a cache
    load makes thousands of calls (each walk of a library's functions, one call per step):
    the events were a tenth of its time. Callers hold numba's compiler lock."""
    hooks = getattr(getattr(ll.ffi.lib, "_lock", None), "_cblist", None)
    if not hooks:  # another llvmlite layout, or no hook: nothing to lift
        yield
        return
    saved = list(hooks)
    hooks.clear()
    try:
        yield
    finally:
        hooks[:] = saved


_RESOLVED: set = set()  # external symbols found defined: the answer does not change


def _unresolved(names, engine) -> list[str]:
    """The external symbols (not kernels, not LLVM intrinsics) among `names` that neither the
    engine nor the process defines: those numba's registries add to LLVM's symbol table when
    imported."""
    found = []
    for name in names:
        if name in _RESOLVED or name.startswith(("_ZN", "llvm.")):
            continue
        if engine.is_symbol_defined(name) or ll.address_of_symbol(name):
            _RESOLVED.add(name)
        else:
            found.append(name)
    return found


def _ensure_symbols(names, engine) -> None:
    """Refresh the target contexts a cache load skipped (:func:`_load_cached`) where a library
    declaring `names` needs what numba's refresh gives: a symbol a registry adds when imported
    (MCJIT would abort the process), or numba's BLAS check (its wrappers' integer width against
    scipy's)."""
    if not _UNREFRESHED:
        return
    blas = any(name.startswith(_BLAS) for name in names)
    if (blas and _blas_width_differs()) or _unresolved(names, engine):
        for context in _UNREFRESHED:
            context.refresh()  # numba's own: raises its error where the BLAS widths differ
        _UNREFRESHED.clear()


def _blas_width_differs() -> bool:
    """Whether the installed scipy's BLAS integer width differs from the one numba's wrappers
    were built for (numba.np.linalg reads the same two flags; importing it costs 0.1 s)."""
    from numba import _helperlib

    try:
        from scipy.__config__ import CONFIG
        scipy_ilp64 = bool(CONFIG["Build Dependencies"]["blas"]["cython blas ilp64"])
    except (ImportError, KeyError, TypeError):  # older scipy: LP64 only, as numba reads it
        scipy_ilp64 = False
    return scipy_ilp64 != bool(getattr(_helperlib, "LAPACK_BUILD_ILP64", False))


def _load_overload(self, sig, target_context):
    """numba's cache load, where a stale caller (:class:`StaleCaller`) is a miss: numba then
    compiles it again and overwrites its entry."""
    try:
        return _STOCK["load_overload"](self, sig, target_context)
    except StaleCaller:
        return None


def install() -> None:
    """Patch numba's codegen and cache load once, where :func:`optimized`."""
    if _STOCK or not optimized():
        return
    library = codegen.CPUCodeLibrary
    _STOCK["finalize"] = library.finalize
    _STOCK["finalize_final_module"] = library._finalize_final_module
    _STOCK["load_overload"] = caching.Cache._load_overload
    library.finalize = _finalize
    library._finalize_final_module = _finalize_final_module
    caching.Cache._load_overload = _load_overload
    caching.Cache.load_overload = _load_cached


# --- kernels passed from Python as first-class functions ---

_ADDRESS_STOCK: dict = {}  # numba's own address look-ups, replaced by install_argument_memo()
_LOOKUPS = ("_get_wrapper_address", "_get_jit_address")  # numba.experimental.function_type's
_REMEMBERED_SITES = 64  # call sites remembered per kernel (numba memoizes their signatures)


def install_argument_memo() -> None:
    """Make a call from Python that passes compiled kernels as first-class functions (the
    ensemble's block kernels: drift, projection, retraction, observer) cost about what a call
    with arrays costs, where :func:`optimized`. numba, at every such call, types each kernel
    argument anew (``_numba_type_``: a ``types.Dispatcher`` built, its name formatted, and
    interned) and, to unbox it, looks up its compiled overload twice (``_get_wrapper_address``,
    ``_get_jit_address``: ``get_compile_result`` under the compiler lock, then LLVM's symbol
    table through llvmlite, under its lock and numba's timing events): about 0.3 ms of a block's
    call with four of them, all of it holding the GIL. Here a declared kernel keeps its type,
    and a kernel that can no longer compile remembers the two addresses per call site (numba's
    own look-up gives them the first time). The same overloads, the same addresses, the same
    code run: only the look-ups are skipped. Where numba's layout differs nothing is replaced
    and numba's own look-ups run."""
    if _ADDRESS_STOCK or not optimized():
        return
    try:
        from numba.experimental import function_type
    except ImportError:  # another layout: numba's own look-ups
        return
    if _replace_lookups(function_type):
        DeferredDispatcher._numba_type_ = property(_kept_type)


def _replace_lookups(module) -> bool:
    """Replace numba's two address look-ups in `module` by remembering ones; False, and nothing
    replaced, where `module` lacks either (another numba layout)."""
    if not all(callable(getattr(module, name, None)) for name in _LOOKUPS):
        return False
    for name in _LOOKUPS:
        _ADDRESS_STOCK[name] = getattr(module, name)
        setattr(module, name, _remembering(name, _ADDRESS_STOCK[name]))
    return True


def argument_memo_installed() -> bool:
    """Whether kernels passed from Python skip numba's per-call look-ups (see
    :func:`install_argument_memo`)."""
    return bool(_ADDRESS_STOCK)


@contextlib.contextmanager
def numbas_own_lookups():
    """numba's own per-call look-ups for a while (the comparison of tests and benchmarks)."""
    if not _ADDRESS_STOCK:
        yield
        return
    from numba.experimental import function_type

    remembering = {name: getattr(function_type, name) for name in _LOOKUPS}
    kept = DeferredDispatcher.__dict__["_numba_type_"]
    for name in _LOOKUPS:
        setattr(function_type, name, _ADDRESS_STOCK[name])
    del DeferredDispatcher._numba_type_  # numba's own property again
    try:
        yield
    finally:
        for name, lookup in remembering.items():
            setattr(function_type, name, lookup)
        DeferredDispatcher._numba_type_ = kept


def _kept_type(self):
    """numba's type of a declared kernel passed as an argument, built once (numba builds
    ``types.Dispatcher(kernel)`` at every call and interns it to an equal instance)."""
    found = self.__dict__.get("dyn_numba_type")
    if found is None:
        found = self.dyn_numba_type = super(DeferredDispatcher, self)._numba_type_
    return found


def _remembering(name, stock):
    """numba's address look-up `stock` (func, sig) -> int, remembered per kernel and per
    signature object (each compiled call site unpickles its own once) for a kernel whose
    overloads can no longer change: compiling disabled, and then a declared kernel's
    :meth:`DeferredDispatcher.add_overload` (numba's ``recompile``) forgets them, and any other
    kernel's overload is checked to be the one the address was read from."""

    def address(func, sig):
        memo = getattr(func, "__dict__", {}).get("dyn_addresses")
        if memo is not None:
            found = memo.get((name, id(sig)))
            if (found is not None and found[0] is sig  # that object, not one at its address
                    and (found[2] is None or func.overloads.get(found[3]) is found[2])):
                return found[1]
        addr = stock(func, sig)
        if isinstance(func, CPUDispatcher) and not func._can_compile:
            if memo is None:
                memo = func.dyn_addresses = {}
            if len(memo) < len(_LOOKUPS) * _REMEMBERED_SITES:
                args = tuple(sig.args)  # numba's key of the overload, for the check above
                checked = None if isinstance(func, DeferredDispatcher) else func.overloads.get(args)
                memo[(name, id(sig))] = (sig, addr, checked, args)
        return addr

    address.__name__ = name
    address.__doc__ = f"numba's {name}, remembered (integrators.numba.internals)."
    return address
