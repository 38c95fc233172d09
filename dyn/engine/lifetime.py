"""Child processes that die with their parent: `dyn compile`'s pool workers
(:mod:`dyn.engine.warmup`) and the sweep's pool workers.

A child asks the kernel for SIGKILL when its parent dies (Linux prctl PR_SET_PDEATHSIG; the
kernel sends it when the parent *thread* that started the child ends, so a parent starts such
children from a thread that outlives them), then checks that its parent is still the one that
started it: a parent killed before the request leaves it re-parented, and then it stops at once.
The sweep's pool workers (:mod:`dyn.engine.executors`) call it from their initializer. This
module imports only the standard library, so a worker may import it before it sets its thread
count for numba.
"""
from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with(parent: int) -> None:
    """In a child started by process `parent`: die with it (:func:`die_with_parent`), and exit at
    once where it is gone already (this process re-parented)."""
    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)
