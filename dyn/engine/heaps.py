"""Global heaps of an HDF5 file, checked before the HDF5 library reads them.

A global heap collection holds a file's variable-length data (dimension-scale references, text).
HDF5 walks a collection's objects by their sizes, and a damaged size (zeroed bytes) makes it
loop for ever in whatever reads the file: a reader, or a resume verifying the file it is asked to
extend. No signal stops it, so the collections are walked here first, in Python, as HDF5 walks
them; the engine's resume and the readers both call :func:`heap_problem`. Finding them needs
the datasets' extents, which HDF5 reads from object headers that damage can make it loop on too:
that listing runs in a child process, stopped after LIST_SECONDS: forked where this process
runs one thread, else a lister child kept for the process's next files (:class:`Lister`).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import struct
import sys
import threading
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
            return sorted(
                (v.id.get_offset(), v.id.get_storage_size())
                for v in f.values()
                if isinstance(v, h5py.Dataset)
                and not v.is_virtual
                and v.chunks is None
                and v.id.get_offset() is not None
            )
    except Exception:  # noqa: BLE001 - any error of the HDF5 stack
        return None


def _extents_apart(path: Path, seconds: float = LIST_SECONDS) -> list | None | str:
    """:func:`_extents` in a child process: the extents, None, or the words of what went wrong
    when HDF5 loops or crashes there. The child is forked (a few milliseconds) where this
    process runs one thread of any kind; else the request goes to this process's lister
    (:class:`Lister`), a child started afresh once and kept for the next files: another thread
    (h5py's user, JAX's or numba's pools) could hold a lock at a fork, and a forked child would
    wait on it for ever."""
    if hasattr(os, "fork") and _single_threaded():
        code, text = _forked(path, seconds)
    elif hasattr(signal, "SIGALRM"):  # POSIX: the lister's own alarm bounds it
        with _LOCK:
            code, text = Lister.mine().extents(path, seconds)
    else:
        code, text = _started(path, seconds)
    if code is None:
        return f"the HDF5 library did not finish listing its datasets in {seconds:g} s (stopped)"
    if code < 0:
        return f"the HDF5 library crashed ({signal.Signals(-code).name}) listing its datasets"
    try:
        return json.loads(text)
    except ValueError:  # the child failed before it could answer
        return None


def _started(path: Path, seconds: float) -> tuple[int | None, bytes]:
    """:func:`_extents` in a child started for this file alone (where there is no alarm to
    bound a kept lister)."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, "--once", str(path)],
            capture_output=True,
            timeout=seconds,
            env=dict(os.environ, PYTHONSAFEPATH="1"),
        )
    except subprocess.TimeoutExpired:
        return None, b""
    return done.returncode, done.stdout


class Lister:
    """A child process (``python -m dyn.engine.heaps --serve``) that lists the extents of one
    file per request: the path as a JSON line in, the extents as a JSON line out. A child that
    does not answer within the request's seconds is killed, one that crashes is reaped, and
    either is replaced at the next request. It ends when this process closes its end of the
    pipe (at exit, or by dying), and a child stuck in HDF5 with nobody left to kill it ends by
    its own alarm, set for each request."""

    _current: Lister | None = None

    def __init__(self):
        import subprocess

        self.owner = os.getpid()
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONSAFEPATH="1"),
        )

    @classmethod
    def mine(cls) -> Lister:
        """This process's lister, started where there is none, or where the one held has ended
        or belongs to the process this one was forked from."""
        held = cls._current
        if held is None or held.owner != os.getpid() or held.process.poll() is not None:
            cls._current = held = cls()
        return held

    def extents(self, path: Path, seconds: float) -> tuple[int | None, bytes]:
        """(0 and the child's JSON answer; or its exit status, -signal where one ended it, and
        no answer; or None where it was stopped after `seconds`)."""
        import select
        import time

        request = json.dumps({"path": str(path), "seconds": seconds}).encode() + b"\n"
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._ended()
        out = self.process.stdout.fileno()
        chunks, deadline = [], time.monotonic() + seconds
        while not chunks or not chunks[-1].endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                self.process.kill()
                self._ended()
                return None, b""
            chunk = os.read(out, 1 << 16)
            if not chunk:
                return self._ended()
            chunks.append(chunk)
        return 0, b"".join(chunks)

    def _ended(self) -> tuple[int, bytes]:
        """Reap the child, which no request holds any more: (its status, -signal where one
        ended it; 1 for an exit without an answer) and no answer."""
        code = self.process.wait()
        Lister._current = None
        return (code if code < 0 else 1), b""

    @classmethod
    def close(cls) -> None:
        """End this process's lister (at exit): its input closes, and it returns."""
        held = cls._current
        cls._current = None
        if held is not None and held.owner == os.getpid() and held.process.poll() is None:
            held.process.stdin.close()
            try:
                held.process.wait(timeout=5)
            except Exception:  # noqa: BLE001 - it ends by its own alarm
                held.process.kill()


_LOCK = threading.Lock()  # one request at a time on this process's lister
atexit.register(Lister.close)


def _serve() -> None:
    """The lister's loop: one request per line of standard input, until it closes. Each request
    arms an alarm two seconds past its seconds, whose default action ends this process even
    inside HDF5, should the parent be gone."""
    for line in sys.stdin.buffer:
        request = json.loads(line)
        signal.alarm(int(request["seconds"]) + 2)
        answer = json.dumps(_extents(Path(request["path"])))
        signal.alarm(0)
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


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
        index, _, _, length = struct.unpack("<HHIQ", data[p : p + 16])
        need = length if index == 0 else 16 + -(-length // 8) * 8
        if (index == 0 and p + need != size) or p + need > size:
            return (
                f"the global heap at byte {start} is damaged (object {index} at byte "
                f"{start + p} of size {length} does not fit)"
            )
        p += need
    return ""


if __name__ == "__main__":  # a Lister's child, or _started's
    if sys.argv[1:2] == ["--once"]:
        print(json.dumps(_extents(Path(sys.argv[2]))))
    else:
        _serve()
