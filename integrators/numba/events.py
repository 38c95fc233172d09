"""numba's compile events, through its documented event API (``numba.core.event``): they fire
when numba compiles a kernel, that is on a cache miss only (a kernel loaded from numba's cache
fires none). The engine uses them to say why the first points of a sweep are slow and to count
compiles; where a numba lacks the API nothing is told of compiles."""

from __future__ import annotations

import contextlib
import types

try:
    from numba.core import event
except ImportError:  # no event API: nothing is told of compiles
    event = None

CompileListener = event.Listener if event is not None else object


def recording_compiles():
    """A context manager recording numba's compile events: ``recorder.buffer`` holds
    (time, event) pairs, each event with ``is_start``."""
    if event is None:
        return contextlib.nullcontext(types.SimpleNamespace(buffer=[]))
    return event.install_recorder("numba:compile")


def listening_to_compiles(listener):
    """A context manager that hands numba's compile events to `listener` (a CompileListener)."""
    if event is None:
        return contextlib.nullcontext()
    return event.install_listener("numba:compile", listener)
