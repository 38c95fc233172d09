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

``njit(**options)`` without a signature is numba's lazy ``njit`` unchanged.
"""
from __future__ import annotations

import inspect

import numba
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher


class DeferredDispatcher(CPUDispatcher):
    """A numba dispatcher whose declared signatures compile on first need (see the module doc).
    The three entry points numba uses to find an overload first compile the declared ones and
    then forbid any other, exactly as an eager ``numba.njit(sig)`` does at import."""

    def _ensure_declared(self):
        # the global compiler lock is re-entrant: a kernel being compiled ensures its callees
        with global_compiler_lock:
            declared = getattr(self, "_declared", ())
            if declared:
                for signature in declared:
                    self.compile(signature)
                self.disable_compile()
                self._declared = ()

    def _compile_for_args(self, *args, **kws):  # a call from Python with no overload yet
        self._ensure_declared()
        if not self._can_compile:  # numba calls what this returns: dispatch again, converting
            return self._dispatch_again
        return super()._compile_for_args(*args, **kws)

    def _dispatch_again(self, *args, **kws):
        return self(*args, **kws)

    def get_call_template(self, args, kws):  # typing a call from compiled code
        self._ensure_declared()
        return super().get_call_template(args, kws)

    def get_compile_result(self, sig):  # passed as a first-class function
        self._ensure_declared()
        return super().get_compile_result(sig)


def njit(*signatures, **options):
    """``numba.njit`` with the signatures (if any) compiled on first need; use as a decorator:
    ``@njit(SIG, **NJIT)`` or ``@njit(**NJIT)``."""
    if len(signatures) == 1 and inspect.isfunction(signatures[0]) and not options:
        return numba.njit(signatures[0])  # bare @njit

    def wrap(function):
        dispatcher = numba.njit(**options)(function)
        if signatures:
            dispatcher.__class__ = DeferredDispatcher
            dispatcher._declared = tuple(signatures)
        return dispatcher

    return wrap
