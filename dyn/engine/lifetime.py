"""Child processes that die with their parent: `dyn compile`'s pool workers
(:mod:`dyn.engine.warmup`) and the sweep's pool workers.

A child asks the kernel for SIGKILL when its parent dies (Linux prctl PR_SET_PDEATHSIG; the
kernel sends it when the parent *thread* that started the child ends, so a parent starts such
children from a thread that outlives them), then checks that its parent is still the one that
started it: a parent killed before the request leaves it re-parented, and then it stops at once.
The sweep's pool workers (:mod:`dyn.engine.executors`) call it from their initializer,
:func:`init_worker`, which also sets their share of the cores. This module imports only the
standard library: a spawned worker imports it to run its initializer, before numba is imported
there, so the thread count can still be set through numba's environment variable.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

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


_driver_pid: int | None = None  # set in pool workers: the process that started them


def init_worker(threads: int, driver: int | None = None) -> None:
    """A sweep's pool worker starts here: numba runs `threads` threads in it (the cores shared
    among the workers), and it dies with process `driver`.

    Before numba is imported, ``NUMBA_NUM_THREADS`` sets the count. Once numba is imported it
    has read that variable, and may have launched its threads: a changed value then makes
    numba's next compile fail ("Cannot set NUMBA_NUM_THREADS ... once the threads have been
    launched"), so the count is set by ``numba.set_num_threads`` instead (for this thread,
    the one that runs the points), and the variable is left as numba read it."""
    if "numba" in sys.modules:
        import numba

        numba.set_num_threads(max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS)))
    else:
        os.environ["NUMBA_NUM_THREADS"] = str(threads)
    global _driver_pid
    _driver_pid = driver
    if driver is not None:
        die_with(driver)  # and exits at once where the driver died before the request


def exit_if_orphaned() -> None:
    """In a pool worker whose driver is gone (re-parented): stop at once, write nothing more."""
    if _driver_pid is not None and os.getppid() != _driver_pid:
        os._exit(1)
