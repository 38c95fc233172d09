"""Disk space for HDF5 writers: reserve it before writing, give back the unused tail after.

HDF5 does not survive a write that fails (a full disk): closing, or merely collecting, the file
afterwards segfaults the process. So each writer holds the disk its file can need before HDF5
writes a byte (`reserve`, whose failure is a clean OSError(ENOSPC) raised in Python), and cuts
the file back to its real end once closed (`trim`).
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

SIGNATURE = b"\x89HDF\r\n\x1a\n"


def free_bytes(folder: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding `folder`."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def reserve(path: Path, nbytes: int) -> None:
    """Hold `nbytes` of disk for the file at `path` (from offset 0), or raise OSError(ENOSPC)
    before anything is written: HDF5 writes afterwards land in blocks already allocated."""
    if nbytes > free_bytes(path.parent):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, int(nbytes))
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # no fallocate: nothing held
            raise
    finally:
        os.close(fd)


def trim(path: Path) -> None:
    """Cut a closed HDF5 file back to the end-of-file address its superblock records (the
    reservation beyond it is unused). Unknown superblock versions are left as they are."""
    with open(path, "r+b") as f:
        head = f.read(64)
        if len(head) < 56 or head[:8] != SIGNATURE:
            return
        # the end-of-file address follows fixed fields whose layout depends on the version
        version = head[8]
        at = {0: 40, 1: 44, 2: 28, 3: 28}.get(version)
        offset_size = head[13] if version < 2 else head[9]
        if at is None or offset_size != 8:
            return
        (end,) = struct.unpack_from("<Q", head, at)
        if 0 < end < os.fstat(f.fileno()).st_size:
            f.truncate(end)


def file_kind(mode: int) -> str:
    """What a file of this st_mode is, in words, for refusing what is not a regular file."""
    import stat

    return (
        "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a directory"
        if stat.S_ISDIR(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a plain file"
    )


def no_space(path: Path, what: str) -> OSError:
    """The OSError a writer raises when its reservation does not fit."""
    return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (reserving {what})")
