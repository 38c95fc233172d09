"""One checksum over the descriptive attributes of a sweep file: what a resume vouches for.

The points' values carry CRC-32s of their own (``checksum``) and the theory curves theirs
(:mod:`dyn.engine.model_facts`); the attributes that say what the numbers are (a variable's
``long_name``, ``units``, its role, the error budget, the flags of ``status``, the records for
readers at the root) are written once, when the file is made, and a resume writes none of them.
So one CRC-32 over all of them, taken when the file is made, tells a resume whether any was
changed or damaged since: it then refuses the file in one line (``--overwrite`` makes it
afresh), rather than keep a damaged label over good numbers.

Covered: every attribute of every dataset, and of the root, by name, in sorted order, each
value as its dtype and bytes. Left out: the HDF5 dimension-scale bookkeeping (object references
whose bytes are file addresses: ``DIMENSION_LIST``, ``REFERENCE_LIST``, ``CLASS``, ``NAME``),
netCDF's ``_Netcdf4*`` and ``_NCProperties`` (which name the writing library), the root
records of the run that a resume does not vouch for (``command``, ``created``), and the
checksum itself.
"""

from __future__ import annotations

import zlib

import h5py
import numpy as np

ATTR = "attributes_crc32"
SCALES = frozenset({"DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME"})
RECORDS = frozenset({"command", "created", ATTR})


def _covered(key: str) -> bool:
    return key not in SCALES and not key.startswith(("_Netcdf4", "_NCProperties", "_nc3"))


def _fold(crc: int, where: str, attrs, skip: frozenset) -> int:
    for key in sorted(k for k in attrs.keys() if _covered(k) and k not in skip):
        value = np.asarray(attrs[key])
        if value.dtype.kind == "O":  # variable-length strings: their text
            body = "\x1f".join(str(v) for v in value.reshape(-1)).encode("utf-8", "replace")
        else:
            body = value.tobytes()
        crc = zlib.crc32(f"{where}\x1e{key}\x1e{value.dtype.str}{value.shape}\x1e".encode(), crc)
        crc = zlib.crc32(body, crc)
    return crc


def checksum(f: h5py.File) -> int:
    """CRC-32 of the covered attributes of the open file `f` (module doc)."""
    crc = _fold(0, "/", f.attrs, RECORDS)
    names: list[str] = []
    f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    for name in sorted(names):
        crc = _fold(crc, name, f[name].attrs, frozenset())
    return crc


def stamp(f: h5py.File) -> None:
    """Record the checksum of the file `f`, opened for writing, as it is now."""
    f.attrs[ATTR] = np.int64(checksum(f))


def problem(f: h5py.File) -> str:
    """Why the attributes of `f` are not those it was made with ("" when they are, or when the
    file records no checksum)."""
    if ATTR not in f.attrs:
        return ""
    stored = np.asarray(f.attrs[ATTR])
    if stored.dtype.kind not in "iu" or stored.size != 1:
        return "its attribute checksum is not a number"
    if int(stored.reshape(-1)[0]) != checksum(f):
        return "an attribute was changed or damaged since the file was made (attribute checksum)"
    return ""
