"""Runs benchmark scripts with `--smoke`, one after the other in this one process (numpy, JAX
and dyn are imported once; numba's cache is shared), each as `python SCRIPT --smoke` would run it
(`runpy`, as __main__, its output captured). Prints one JSON line per script: its name, whether
it ended well (exit status 0), its seconds, and the tail of its output.

    python tests/_benchmark_smoke.py benchmarks/attention_rhs.py benchmarks/sinkformer.py ...
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
import time
import traceback
from pathlib import Path

TAIL = 2000  # characters of a script's output kept


def smoke(script: Path) -> dict:
    out = io.StringIO()
    argv, path = sys.argv, list(sys.path)
    sys.argv = [str(script), "--smoke"]
    sys.path.insert(0, str(script.parent))
    start = time.perf_counter()
    status = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the report says what, the test fails
        out.write(traceback.format_exc())
        status = 1
    finally:
        sys.argv, sys.path[:] = argv, path
    text = out.getvalue()
    return {
        "script": script.name,
        "status": status,
        "seconds": time.perf_counter() - start,
        "lines": len(text.splitlines()),
        "tail": text[-TAIL:],
    }


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(json.dumps(smoke(Path(name).resolve())), flush=True)
