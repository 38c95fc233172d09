"""Read an HDF5 file's structure in a child process first, under a time limit.

On some damage (zeroed or swapped blocks of its metadata: a global heap, a B-tree, an object
header's continuation) the HDF5 library loops for ever in whatever reads the file, holding the
interpreter: no signal or thread of that process can stop it. So before a reader or a resume
reads a file, a child reads everything of it that the HDF5 library walks by its metadata: every
link, object header and attribute, the dimension scales that attributes refer to, and the data
held in HDF5's own structures (variable-length text and references in global heaps, chunked
datasets through their B-trees); of a contiguous dataset, whose data is plain bytes, the first
and last element. A child that does not finish within READ_SECONDS is killed and the file is
refused in one line, as is a child that crashes; an error the child meets is left to the
reader, which says it in one line.

The children are forked by a small server process started afresh (``python -I``, h5py
imported, no threads: BLAS pools held to one thread), once per process: forking the caller
itself could copy a lock held by one of its threads (JAX, dask, numba start them), and starting
a fresh interpreter per read would cost a fifth of a second each time.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path

READ_SECONDS = 5.0  # reading a sweep file's structure takes far less, or HDF5 is looping
REPLY_MARGIN = 10.0  # the server answers within READ_SECONDS plus this (its own start), or is stopped

SERVER = r"""
import json, os, signal, sys, time
sys.path[:0] = json.loads(sys.argv[1])
import h5py
import numpy as np

SMALL = 2**20  # contiguous datasets below this many bytes are read whole


def refs(f, value):
    for item in np.asarray(value, dtype=object).reshape(-1):
        if isinstance(item, h5py.Reference) and item:
            f[item].name
        elif isinstance(item, np.ndarray):
            refs(f, item)


def walk(f, group, seen):
    for key in list(group.attrs.keys()):
        try:
            value = group.attrs[key]
            if key in ("DIMENSION_LIST", "REFERENCE_LIST") or getattr(value, "dtype", None) == object:
                refs(f, value)
        except Exception:
            pass
    if not isinstance(group, h5py.Group):
        return
    for name in list(group):
        try:
            obj = group[name]
            if obj.id in seen:
                continue
            seen.add(obj.id)
            if isinstance(obj, h5py.Dataset):
                obj.shape, obj.dtype
                walk(f, obj, seen)
                if obj.is_virtual or not obj.shape:
                    obj.is_virtual or obj[()]
                elif (obj.chunks is not None or obj.dtype.kind == "O"
                      or h5py.check_dtype(vlen=obj.dtype) is not None
                      or obj.id.get_storage_size() < SMALL):
                    obj[...]
                elif obj.size:
                    obj[(0,) * obj.ndim]
                    obj[tuple(n - 1 for n in obj.shape)]
            else:
                walk(f, obj, seen)
        except Exception:
            pass


def probe(path):
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        with h5py.File(path, "r", locking=False) as f:
            walk(f, f, set())
        code = 0
    finally:
        os._exit(code)


out = os.fdopen(os.dup(1), "w")
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
for line in sys.stdin:
    path, seconds = json.loads(line)
    child = os.fork()
    if child == 0:
        probe(path)
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            status = None
            break
        time.sleep(0.002)
    if status is None:
        answer = "timeout"
    elif os.WIFSIGNALED(status):
        answer = signal.Signals(os.WTERMSIG(status)).name
    else:
        answer = "ok" if os.WEXITSTATUS(status) == 0 else "error"
    out.write(json.dumps(answer) + "\n")
    out.flush()
"""

_LOCK = threading.Lock()
_SERVER: list = []  # the running server, if any


def _server() -> subprocess.Popen:
    if _SERVER and _SERVER[0].poll() is None:
        return _SERVER[0]
    import h5py
    import numpy

    # where h5py and numpy come from, first on the child's path (-I ignores PYTHONPATH and the
    # working directory: nothing of the caller's folders is imported there)
    roots = list(dict.fromkeys(str(Path(m.__file__).resolve().parents[1]) for m in (h5py, numpy)))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    process = subprocess.Popen(
        [sys.executable, "-I", "-c", SERVER, json.dumps(roots)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    _SERVER[:] = [process]
    return process


def _stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait()
    _SERVER.clear()


def structure_problem(path: str | Path, seconds: float | None = None) -> str:
    """What stops the HDF5 library reading the structure of the file at `path` (module doc):
    "" when a child read it within `seconds` (default READ_SECONDS) or met an error it leaves
    to the caller; else the words of a loop or a crash. The caller has checked that `path` is a
    regular file (HDF5 would wait on a FIFO)."""
    seconds = READ_SECONDS if seconds is None else seconds
    path = str(Path(path).resolve())
    with _LOCK:
        process = _server()
        try:
            process.stdin.write(json.dumps([path, seconds]) + "\n")
            process.stdin.flush()
            ready, _, _ = select.select([process.stdout], [], [], seconds + REPLY_MARGIN)
            line = process.stdout.readline() if ready else ""
        except (OSError, ValueError):
            line = ""
        if not line:  # the server died or stalled: it is started again next time
            _stop(process)
            return "its structure could not be read in a child process (stopped)"
    answer = json.loads(line)
    if answer == "timeout":
        return (
            f"the HDF5 library did not finish reading its structure in {seconds:g} s (stopped): its metadata is damaged"
        )
    if answer not in ("ok", "error"):
        return f"the HDF5 library crashed ({answer}) reading its structure"
    return ""
