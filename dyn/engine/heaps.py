"""Global heaps of an HDF5 file, checked before the HDF5 library reads them.

A global heap collection holds a file's variable-length data (dimension-scale references, text).
HDF5 walks a collection's objects by their sizes, and a damaged size (zeroed bytes) makes it
loop for ever in whatever reads the file: a reader, or a resume verifying the file it is asked to
extend. No signal stops it, so the collections are walked here first, in Python, as HDF5 walks
them; the engine's resume and the readers both call :func:`heap_problem`.
"""
from __future__ import annotations

import struct
from pathlib import Path

GLOBAL_HEAP = b"GCOL\x01\x00\x00\x00"  # a global heap collection: signature, version 1


def heap_problem(path: str | Path) -> str:
    """What is wrong with the global heaps of the HDF5 file at `path` ("" if nothing): the
    collections holding its variable-length data (dimension-scale references, text). HDF5
    walks a collection's objects by their sizes, and a free-space object that does not run to
    the end of its collection (zeroed bytes: size 0) makes it loop for ever, in whatever reads
    the file. Collections are found by their signature in the bytes outside the datasets' raw
    data (a sweep file's datasets are contiguous), so a large file costs a read of its metadata
    only."""
    import h5py

    path = Path(path)
    try:
        with h5py.File(path, "r", locking=False) as f:
            extents = sorted((v.id.get_offset(), v.id.get_storage_size()) for v in f.values()
                             if isinstance(v, h5py.Dataset) and not v.is_virtual
                             and v.chunks is None and v.id.get_offset() is not None)
    except Exception:  # noqa: BLE001 - damage of another kind: the readers say it
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
