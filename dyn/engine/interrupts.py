"""The signals a run stops on, all alike: SIGINT (Ctrl-C), SIGTERM (what batch schedulers send
at the end of a job) and SIGHUP (the terminal went away).

Each raises :class:`Interrupted` (a KeyboardInterrupt, so every cleanup path that serves Ctrl-C
serves the others: the lock is released, finished points are kept) in the main thread; the CLI
exits with 128 + the signal's number (130, 143, 129) after one line.

Python runs a signal handler between two bytecodes of whatever the main thread executes, and an
exception raised inside a weakref callback or a `__del__` is printed ("Exception ignored in ...")
and dropped: an interrupt that lands there would be swallowed, and the run would go on. So once a
signal came, a timer raises it again every RETRY_SECONDS until the exception is seen unwinding
(it is then the exception being handled, which `sys.exc_info` shows, also in `finally` blocks
and `__exit__` methods, so cleanup is never interrupted twice).

No exception is raised while llvmlite's code is on the stack (:func:`under_llvm`): LLVM calls
back into Python through ctypes while numba loads a kernel from its cache (the object cache's
buffer), and an exception raised in such a callback is dropped by ctypes with the buffer half
made, after which LLVM reads garbage and the process dies of a segmentation fault. The timer's
next tick raises the interrupt once the stack has left llvmlite.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
RETRY_SECONDS = 0.2


class Interrupted(KeyboardInterrupt):
    """A stop signal, raised in the main thread; `exit_status` is 128 + its number."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_status(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def exit_status(exc: KeyboardInterrupt) -> int:
    """130 for a plain KeyboardInterrupt, 128 + the signal for an Interrupted."""
    return exc.exit_status if isinstance(exc, Interrupted) else 128 + int(signal.SIGINT)


def under_llvm(frame) -> bool:
    """Whether a frame of llvmlite's is on the stack that ends at `frame` (the frame a signal
    handler interrupted): LLVM may be calling back into Python there, where an exception is
    dropped and leaves LLVM's state half made (see the module doc)."""
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith("llvmlite."):
            return True
        frame = frame.f_back
    return False


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise Interrupted (and again, until it is
    seen unwinding); outside it, the handlers that were there before. A no-op off the main
    thread (where Python allows no handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []

    def may_raise(frame) -> bool:
        return not isinstance(sys.exc_info()[1], KeyboardInterrupt) and not under_llvm(frame)

    def on_signal(signum, frame):
        if not came:
            came.append(signum)
            signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS, RETRY_SECONDS)
        if may_raise(frame):
            raise Interrupted(came[0])

    def on_retry(signum, frame):
        if came and may_raise(frame):
            raise Interrupted(came[0])

    before = {s: signal.signal(s, on_signal) for s in SIGNALS}
    before[signal.SIGALRM] = signal.signal(signal.SIGALRM, on_retry)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in before.items():
            signal.signal(s, handler)
