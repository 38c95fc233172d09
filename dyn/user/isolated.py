"""An installed package's system loaded in a process of its own: what `dyn list` shows of it.

Loading an entry point imports its package, and that code runs in the loading process: it may
raise, call ``sys.exit`` or end the process with ``os._exit``. Listing every installed system
in one process would let one such package end the listing (with its own exit status) or hide the
packages after it. :func:`description` loads one entry point in a child Python process and
reads back its description, or one line saying why it cannot be loaded; the caller's process
never imports the package.

Run as ``python -m dyn.user.isolated NAME``: the description of the entry point NAME on stdout
(exit 0), or the one-line reason on stderr (exit 2).
"""

from __future__ import annotations

import os
import subprocess
import sys

TIMEOUT = 60.0  # seconds a package may take to import before it is listed as broken


def description(name: str) -> tuple[str, str]:
    """(description, "") of the installed system `name`, or ("", why it cannot be loaded)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, name],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=dict(os.environ),
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return "", f"loading it took over {TIMEOUT:g} s"
    except OSError as exc:
        return "", f"cannot start a Python process to load it: {exc}"
    said = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip().splitlines()[0], ""
    if done.returncode == 2 and said:
        return "", said[-1]
    status = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit status {done.returncode}"
    return "", f"loading it ended the process ({status}){': ' + said[-1] if said else ''}"


def _main(name: str) -> int:
    from ..core.errors import ScenarioError, one_line
    from . import locate

    try:
        cls = locate.load_entry_point(name)
    except ScenarioError as exc:
        print(exc.problem, file=sys.stderr)
        return 2
    except BaseException as exc:  # noqa: BLE001 - whatever the package raises is the answer
        print(one_line(f"{type(exc).__name__}: {exc}"), file=sys.stderr)
        return 2
    print(one_line(str(cls.description)) or "(no description)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
