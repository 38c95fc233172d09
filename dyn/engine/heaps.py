"""Global heaps of an HDF5 file, checked before the HDF5 library reads them.

A global heap collection holds a file's variable-length data (dimension-scale references, text).
HDF5 walks a collection's objects by their sizes, and a damaged size (zeroed bytes) makes it
loop for ever in whatever reads the file: a reader, or a resume verifying the file it is asked to
extend. No signal stops it, so the collections are walked here first, in Python, as HDF5 walks
them; the engine's resume and the readers both call :func:`heap_problem`. Finding them needs
the datasets' extents, which HDF5 reads from object headers that damage can make it loop on too:
that listing runs in a child process, stopped after LIST_SECONDS.
"""
from __future__ import annotations

import json
import os
import signal
import struct
import sys
from pathlib import Path

GLOBAL_HEAP = b"GCOL\x01\x00\x00\x00"  # a global heap collection: signature, version 1
LIST_SECONDS = 30.0  # listing a sweep file's datasets takes far less, or HDF5 is looping


def heap_problem(path: str | Path, seconds: float = LIST_SECONDS) -> str:
    """What is wrong with the global heaps of the HDF5 file at `path` ("" if nothing): the
    collections holding its variable-length data (dimension-scale references, text). HDF5
    walks a collection's objects by their sizes, and a free-space object that does not run to
    the end of its collection (zeroed bytes: size 0) makes it loop for ever, in whatever reads
    the file. Collections are found by their signature in the bytes outside the datasets' raw
    data (a sweep file's datasets are contiguous), so a large file costs a read of its metadata
    only."""
    path = Path(path)
    extents = _extents_apart(path, seconds)
    if isinstance(extents, str):
        return extents
    if extents is None:  # damage of another kind: the readers say it
        return ""
    size = path.stat().st_size
    with open(path, "rb") as f:
        at = 0
        for start, length in [*extents, (size, 0)]:
            if start > at:
                f.seek(at)
                region = f.read(start - at)
                found = region.find(GLOBAL_HEAP)
                while found >= 0:
                    problem = _collection_problem(f, at + found)
                    if problem:
                        return problem
                    found = region.find(GLOBAL_HEAP, found + 1)
            at = max(at, start + length)
    return ""


def _extents(path: Path) -> list | None:
    """(offset, size) of the raw data of each contiguous dataset of the file, sorted; None where
    HDF5 fails to list them."""
    import h5py

    try:
        with h5py.File(path, "r", locking=False) as f:
            return sorted((v.id.get_offset(), v.id.get_storage_size()) for v in f.values()
                          if isinstance(v, h5py.Dataset) and not v.is_virtual
                          and v.chunks is None and v.id.get_offset() is not None)
    except Exception:  # noqa: BLE001 - any error of the HDF5 stack
        return None


def _extents_apart(path: Path, seconds: float = LIST_SECONDS) -> list | None | str:
    """:func:`_extents` in a child process: the extents, None, or the words of what went wrong
    when HDF5 loops or crashes there. The child is forked (a few milliseconds) where this
    process runs one thread of any kind, else started afresh (a fifth of a second): another
    thread (h5py's user, JAX's or numba's pools) could hold a lock at the fork, and the child
    would wait on it for ever."""
    if hasattr(os, "fork") and _single_threaded():
        code, text = _forked(path, seconds)
    else:
        import subprocess

        try:
            done = subprocess.run([sys.executable, "-m", __name__, str(path)], capture_output=True,
                                  timeout=seconds, env=dict(os.environ, PYTHONSAFEPATH="1"))
            code, text = done.returncode, done.stdout
        except subprocess.TimeoutExpired:
            code, text = None, b""
    if code is None:
        return f"the HDF5 library did not finish listing its datasets in {seconds:g} s (stopped)"
    if code < 0:
        return f"the HDF5 library crashed ({signal.Signals(-code).name}) listing its datasets"
    try:
        return json.loads(text)
    except ValueError:  # the child failed before it could answer
        return None


def _single_threaded() -> bool:
    """True where this process runs one thread, counted by the kernel (threads started by
    native libraries included, which Python's own count misses); False where it cannot tell."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _forked(path: Path, seconds: float) -> tuple[int | None, bytes]:
    """Run :func:`_extents` in a forked child; (its exit status, -signal where one ended it,
    or None where it was stopped after `seconds`; what it wrote)."""
    import select
    import time

    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(read_end)
            os.write(write_end, json.dumps(_extents(path)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
                return None, b""
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
    _, status = os.waitpid(child, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return code, b"".join(chunks)


def _collection_problem(f, start: int) -> str:
    """A global heap collection at `start`, walked as HDF5 walks it (objects of index, refcount,
    reserved, size, then the data padded to 8 bytes; index 0: the free space to the end)."""
    f.seek(start + 8)
    (size,) = struct.unpack("<Q", f.read(8))
    f.seek(start)
    data = f.read(size)
    if len(data) < size or size < 16:
        return f"the global heap at byte {start} runs past the end of the file"
    p = 16
    while p + 16 <= size:
        index, _, _, length = struct.unpack("<HHIQ", data[p:p + 16])
        need = length if index == 0 else 16 + -(-length // 8) * 8
        if (index == 0 and p + need != size) or p + need > size:
            return (f"the global heap at byte {start} is damaged (object {index} at byte "
                    f"{start + p} of size {length} does not fit)")
        p += need
    return ""


if __name__ == "__main__":  # the child of _extents_apart: the extents of one file, as JSON
    print(json.dumps(_extents(Path(sys.argv[1]))))
