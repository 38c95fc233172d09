"""Which hook of a user's system a process is running: what a run that user code ended names.

User code can end a run two ways no ``except Exception`` sees: ``sys.exit`` (a SystemExit, a
BaseException) and ``os._exit`` (the process ends at once, with no exception and no exit
handler). Either, from a model's module at import or from its ``drift``, ``observe`` or
``simulate``, would otherwise end ``dyn run`` with the user's exit status (0 claims success) or
leave a pool with a dead worker and no word of why.

:func:`running` marks the hook entered (``my_model.drift``); :func:`current` says which one
runs in this process, so a SystemExit caught there is named (:class:`UserExit`). In a pool
worker the mark is also written to a small file of its own, ``DIR/PID``, in the folder the
driver names in the environment variable ``DYN_WORKER_STAGES``: when a worker vanishes, the
driver reads (:func:`read`) which hook it was running. A worker that a script without the
``__main__`` guard stops writes ``GUARD`` there, so only that case is blamed on the guard.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from .errors import UserExit

ENV = "DYN_WORKER_STAGES"  # the folder of a pool's stage files, set by the driver
GUARD = "<no __main__ guard>"  # the mark of a worker stopped by an unguarded script
OWN = ("dyn", "integrators")  # the engine's packages: never a user's hook
_current: list[str] = []  # the hooks entered in this process, innermost last


def current() -> str:
    """The innermost hook running in this process ("" when none)."""
    return _current[-1] if _current else ""


@contextmanager
def running(hook: str):
    """Mark `hook` (``module.name``) as running in this process for the block; a SystemExit
    raised in it becomes the :class:`UserExit` that names it. The package's own systems are
    not user code: their hooks are not marked (a worker that dies in one was killed)."""
    if hook.split(".")[0].split(" ")[0] in OWN:
        yield
        return
    _current.append(hook)
    _write(hook)
    try:
        yield
    except SystemExit as exc:
        raise exited(exc.code, hook) from None
    finally:
        _current.pop()
        _write(current())


def mark(text: str) -> None:
    """Write `text` as this process's stage (a pool worker only)."""
    _write(text)


def _write(text: str) -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    try:
        Path(folder, str(os.getpid())).write_text(text)
    except OSError:  # the folder is gone (the driver ended): nothing to tell
        pass


def read(folder: str | Path) -> list[str]:
    """The stages the workers of `folder` left, without the empty ones (idle workers)."""
    found = []
    for file in sorted(Path(folder).iterdir()) if Path(folder).is_dir() else ():
        try:
            text = file.read_text().strip()
        except OSError:
            continue
        if text:
            found.append(text)
    return found


def exited(code, hook: str) -> UserExit:
    """The one line of a SystemExit raised while `hook` ran (the module's name begins it)."""
    shown = "" if code is None else repr(code)
    return UserExit(
        "scenario.system",
        f"{hook or 'the system'} called sys.exit({shown}): the run "
        "stops (finished points are kept: run the same command again to resume)",
    )
