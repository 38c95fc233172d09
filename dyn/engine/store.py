"""The one HDF5 file of a sweep: layout, creation, per-point writes, resume.

Layout (netCDF-4 compatible, so `xarray.open_dataset(path, engine="h5netcdf")` reads it):
  dimensions   one per sweep axis (coordinate = its values), then the system's own (e.g. time)
  variables    each output, dims (*sweep axes, *own dims), float64, NaN until its point is done
  status       int8 per point: 0 pending, 1 ok, 2 diverged, 3 failed (CF flag_values/meanings)
  message      per point: why it diverged or failed (empty otherwise)
  references   the system's theory (System.references: boundaries, closed forms), written once
               here, role "reference", with their own coordinates (e.g. a fine grid beta_theory)
  trajectory   optional, virtual: states streamed to NAME.h5.d/ (see dyn/engine/trajectories.py)
  attributes   scenario (resolved TOML), scenario_hash, versions, git_commit, command, created

Why the file survives a kill at any moment: every dataset is contiguous and fully written (NaN)
when the file is made, and the file is made under a temporary name and renamed into place. A
point's write then only overwrites raw data bytes in place (no HDF5 metadata changes), and its
status byte is written last, after the values are flushed. A kill mid-write leaves that point
pending; resuming recomputes it.

Why a full disk cannot crash a run: HDF5 does not survive a failed write (closing or even
collecting such a file segfaults), so no HDF5 write is ever allowed to meet a full disk. Before a
file is made, its size is estimated and that much disk is reserved (`reserve`: posix_fallocate,
which fails cleanly with ENOSPC in Python); HDF5 then writes into blocks already held, and the
unused tail is cut off after the file is closed (`trim`, to the end-of-file address the
superblock records). The sweep file's size is checked before it is made: past MAX_FILE_BYTES a
run is refused unless forced, and past the free space it is refused outright.

One writer per file, whatever the name it is reached by: the lock file sits beside the real path
(symlinks resolved), and the existing output file itself carries an open-file-description lock
(Linux F_OFD_SETLK, keyed by its device and inode), so a hard link or a bind mount to a file being
written is refused too.
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import h5netcdf
import h5py
import numpy as np

from ..core import sweep
from ..core.contract import DIVERGED, FAILED, PENDING, REFERENCE, ROLE_ATTR, STATUS_NAMES, PointResult
from ..core.errors import OutputError, ScenarioError
from . import provenance, trajectories
from .disk import free_bytes, reserve, trim
from .ensemble import coords as system_coords
from .ensemble import error_budget, file_outputs, references

if TYPE_CHECKING:
    from .scenario import Scenario

STATUS = "status"
MESSAGE = "message"
MESSAGE_BYTES = 256  # fixed width: a point's message is written in place, like its values
FILL_BYTES = 64 * 2**20  # slab size when the empty layout is written
MAX_FILE_BYTES = 2**30  # a sweep file estimated past this is refused unless forced (--force)
SLACK_BYTES = 2**20  # metadata allowance of a reservation (object headers, B-trees, attributes)
VDS_BYTES_PER_POINT = 160  # a virtual-dataset mapping; the estimate stayed above 400..10^4-point files


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


class WriterLock:
    """An exclusive advisory lock: at most one writer per file, whatever name reaches it.

    Two locks, both released by the kernel when the holder dies (a killed run never leaves a file
    stuck): flock on NAME.h5.lock beside the real path (symlinks resolved), and, once the output
    exists, an OFD lock on the output itself (same device and inode: hard links, bind mounts).
    The lock file is removed on release, while still held, so a refused or finished run leaves
    nothing behind; an acquirer that opened a removed lock file notices and tries again.
    """

    def __init__(self, path: Path):
        self.target = Path(os.path.realpath(path))
        self.path = lock_path(self.target)
        self._fd: int | None = None
        self._held: int | None = None  # fd of the output file carrying the inode lock

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise OutputError("--out", f"another dyn run (pid {holder}) is writing "
                                  f"{self.target.name}; wait for it or choose another --out") from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # its holder removed it on release: lock the file now at that name
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        try:
            self.hold()
        except BaseException:
            self.release()
            raise

    def hold(self) -> None:
        """Lock the output file itself by (device, inode), when it exists; call again once it is
        made. Refused when another run holds it through another name."""
        if self._held is not None or not hasattr(fcntl, "F_OFD_SETLK"):
            return
        try:
            fd = os.open(self.target, os.O_RDWR)
        except OSError:  # absent, a folder, or not ours to write: later checks say what is wrong
            return
        # struct flock: l_type, l_whence, l_start, l_len (0: to the end), l_pid (0 for OFD locks)
        request = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        try:
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, request)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise OutputError("--out", f"another dyn run is writing {self.target.name} "
                                  "through another name (a hard link or a bind mount); wait "
                                  "for it or choose another --out") from None
            return  # a file system without OFD locks: the lock file alone guards it
        self._held = fd

    def unhold(self) -> None:
        """Let go of the output file's inode (before it is replaced by a new file)."""
        if self._held is not None:
            os.close(self._held)
            self._held = None

    def release(self) -> None:
        self.unhold()
        if self._fd is not None:
            try:
                if os.path.samestat(os.fstat(self._fd), os.stat(self.path)):
                    os.unlink(self.path)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def estimated_bytes(scenario: "Scenario") -> int:
    """An upper bound of the sweep file's size: its contiguous datasets, the virtual mapping of
    saved states, the attributes, and SLACK_BYTES of metadata."""
    system, setup = scenario.system, scenario.setup
    coords = system_coords(system, setup)
    points = scenario.count
    total = points * (1 + MESSAGE_BYTES) + SLACK_BYTES + 4 * len(scenario.text)
    for out in file_outputs(system, setup):
        total += points * 8 * int(np.prod([len(coords[d].values) for d in out.dims], dtype=np.int64))
    for values in [*scenario.axes.values(), *(c.values for c in coords.values())]:
        total += 64 * len(values) + 4096
    for ref in references(system, setup):
        total += 8 * np.size(ref.values) + 4096
        total += sum(64 * len(c.values) + 4096 for c in ref.coords.values())
    if setup.trajectories:
        total += points * VDS_BYTES_PER_POINT
    return int(total)


def check_size(path: Path, scenario: "Scenario", force: bool = False) -> int:
    """Refuse a sweep file past MAX_FILE_BYTES (unless `force`) or past the free space; returns
    the estimate, reserved when the file is made."""
    need = estimated_bytes(scenario)
    if need > MAX_FILE_BYTES and not force:
        raise ScenarioError("sweep", f"the output file would take about {size_text(need)} "
                            f"({scenario.count} points), past the limit of {size_text(MAX_FILE_BYTES)}; "
                            "shrink the sweep or add --force")
    folder = Path(os.path.abspath(path)).parent
    while not folder.exists() and folder != folder.parent:  # made later: its nearest ancestor
        folder = folder.parent
    free = free_bytes(folder)
    if need > free:
        raise ScenarioError("--out", f"the output file would take about {size_text(need)}, but "
                            f"only {size_text(free)} is free beside {path}")
    return need


def size_text(nbytes: int) -> str:
    """A byte count for people: 1.7 MB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def check_sweep_file(path: str | Path) -> None:
    """Refuse, in one line, a file that `dyn run` did not write (before show, plot or compare
    reach for its scenario attribute or status variable)."""
    path = Path(path)
    if not path.exists():
        raise ScenarioError("", f"no such file: {path}")
    import tomllib

    try:
        with h5py.File(path, "r", locking=False) as f:
            made_by_dyn = "scenario" in f.attrs and "scenario_hash" in f.attrs and STATUS in f
            text = f.attrs.get("scenario") if made_by_dyn else ""
    except OSError as exc:
        raise ScenarioError("", f"{path} is not a readable HDF5 file: {exc}") from None
    if made_by_dyn:
        try:
            text = text.decode() if isinstance(text, bytes) else str(text)
            made_by_dyn = isinstance(tomllib.loads(text).get("scenario"), dict)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
            made_by_dyn = False
    if not made_by_dyn:
        raise ScenarioError("", f"{path} is not a dyn sweep file (it lacks the scenario "
                            "attributes or the status variable that `dyn run` writes)")


def create(path: Path, scenario: "Scenario", command: str, reserve_bytes: int | None = None) -> None:
    """Write the whole empty layout under a temporary name, then rename it into place.
    `reserve_bytes` (default: the estimate) of disk are held first, so HDF5 never meets a full
    disk mid-write (see the module doc)."""
    system, setup = scenario.system, scenario.setup
    tmp = partial_path(path)
    tmp.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    coords = system_coords(system, setup)
    axes = list(scenario.axes)
    need = estimated_bytes(scenario) if reserve_bytes is None else reserve_bytes
    if need > free_bytes(path.parent):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    with h5netcdf.File(tmp, "w") as f:
        reserve(tmp, need)
        for axis, values in scenario.axes.items():
            f.dimensions[axis] = len(values)
            _coordinate(f, axis, np.asarray(values), {"long_name": _axis_long_name(system, axis)})
        for dim, coord in coords.items():
            f.dimensions[dim] = len(coord.values)
            attrs = {"long_name": coord.long_name, **({"units": coord.units} if coord.units else {}),
                     **coord.attrs}
            _coordinate(f, dim, np.asarray(coord.values), attrs)
        shape = sweep.shape(scenario.axes)
        budget = error_budget(system, setup)
        for out in file_outputs(system, setup):
            dims = tuple(axes) + out.dims
            full = shape + tuple(len(coords[d].values) for d in out.dims)
            var = f.create_variable(out.name, dims, dtype="f8", fillvalue=np.nan)
            _fill(var, full, np.nan)  # allocate now: later writes touch data only
            var.attrs["long_name"] = out.long_name
            if out.units:
                var.attrs["units"] = out.units
            if out.role:
                var.attrs[ROLE_ATTR] = out.role
            if out.draw is not None:
                var.attrs.update(out.draw.attrs())
            var.attrs.update(budget.get(out.name, {}))
        _write_references(f, references(system, setup))
        status = f.create_variable(STATUS, tuple(axes), dtype="i1")
        _fill(status, shape, 0)
        status.attrs.update({
            "long_name": "per-point completion status",
            "flag_values": np.arange(len(STATUS_NAMES), dtype="i1"),
            "flag_meanings": " ".join(STATUS_NAMES),
        })
        message = f.create_variable(MESSAGE, tuple(axes), dtype=f"S{MESSAGE_BYTES}")
        _fill(message, shape, b"")
        message.attrs.update({"long_name": "why a point diverged or failed", "_Encoding": "utf-8"})
        f.attrs.update(provenance.attributes(scenario, command))
        spec = trajectories.spec(system, setup, coords)
        if spec is not None:
            if spec.dims[0] not in f.dimensions:  # `run` may exist already, for per-run outputs
                f.dimensions[spec.dims[0]] = spec.runs
            f.dimensions["trajectory_time"] = len(spec.times)
            _coordinate(f, "trajectory_time", spec.times, {"long_name": "time of the saved states"})
            for dim, size in spec.state.items():
                f.dimensions[dim] = size
    if spec is not None:
        with h5py.File(tmp, "r+") as f:
            trajectories.declare(f, path, spec, shape, axes)
    trim(tmp)
    os.replace(tmp, path)


def _write_references(f: h5netcdf.File, refs) -> None:
    """Each reference with the coordinates it brings (once, when several share one)."""
    for ref in refs:
        for dim, coord in ref.coords.items():
            if dim not in f.dimensions:
                f.dimensions[dim] = len(coord.values)
                attrs = {"long_name": coord.long_name,
                         **({"units": coord.units} if coord.units else {}), **coord.attrs}
                _coordinate(f, dim, np.asarray(coord.values), attrs)
        var = f.create_variable(ref.name, tuple(ref.dims), dtype="f8",
                                data=np.asarray(ref.values, dtype=np.float64))
        var.attrs.update({"long_name": ref.long_name, **({"units": ref.units} if ref.units else {}),
                          ROLE_ATTR: REFERENCE, **ref.draw.attrs()})


def _fill(var, shape: tuple[int, ...], value) -> None:
    """Write `value` everywhere, a slab of the first axis at a time (bounded memory)."""
    if not shape:
        var[...] = np.full((), value, dtype=var.dtype)
        return
    row_bytes = int(np.prod(shape[1:], dtype=np.int64)) * var.dtype.itemsize
    step = max(1, FILL_BYTES // max(row_bytes, 1))
    for start in range(0, shape[0], step):
        stop = min(start + step, shape[0])
        var[start:stop] = np.full((stop - start, *shape[1:]), value, dtype=var.dtype)


def _coordinate(f: h5netcdf.File, name: str, values: np.ndarray, attrs: dict) -> None:
    if values.dtype.kind in "UO":
        var = f.create_variable(name, (name,), dtype=h5py.string_dtype(), data=values.astype(object))
    else:
        var = f.create_variable(name, (name,), data=values)
    var.attrs.update(attrs)


def _axis_long_name(system, axis: str) -> str:
    spec = system.params.get(axis)
    return (spec.doc if spec is not None and spec.doc else axis)


def other_scenario(path: Path, scenario: "Scenario") -> dict | None:
    """When `path` is a readable sweep file of another scenario: its name, hash and command (what
    `--overwrite` replaces); else None (this scenario's file, or not a sweep file at all, which
    --overwrite never deletes)."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            attrs = {k: f.attrs.get(k) for k in ("scenario_hash", "scenario", "command")}
    except OSError:
        return None
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    if not isinstance(attrs["scenario_hash"], str) or attrs["scenario_hash"] == scenario.hash:
        return None
    try:
        name = tomllib.loads(attrs["scenario"])["scenario"]["name"]
    except (tomllib.TOMLDecodeError, TypeError, KeyError):
        name = "?"
    return {"name": name, "hash": attrs["scenario_hash"], "command": attrs["command"] or "?"}


def read_status(path: Path, scenario: "Scenario") -> np.ndarray:
    """Flat status array of an existing file, after checking it holds this scenario."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            stored = f.attrs.get("scenario_hash")
            stored = stored.decode() if isinstance(stored, bytes) else stored
            if stored != scenario.hash:
                raise OutputError("--out", f"{path} holds a different scenario (hash "
                                  f"{str(stored)[:12]}..., this one {scenario.hash[:12]}...); "
                                  "choose another --out, delete the file, or add --overwrite")
            return np.asarray(f[STATUS][...]).reshape(-1)
    except OSError as exc:
        raise OutputError("--out", f"cannot open existing output {path}: {exc}; "
                          "delete it or choose another --out") from None


@dataclass
class Writer:
    """The single writer of one sweep file: one call to `write` per finished point."""

    path: Path
    scenario: "Scenario"

    def __post_init__(self):
        self._file = h5py.File(self.path, "r+", locking=False)
        self._names = [o.name for o in file_outputs(self.scenario.system, self.scenario.setup)]

    def write(self, index: int, result: PointResult) -> None:
        where = sweep.grid_index(self.scenario.axes, index)
        if result.status != FAILED:
            for name in self._names:
                self._file[name][where] = result.values[name]
        self._file[MESSAGE][where] = _clip(result.message)
        self._file.flush()  # values reach the disk before the status that vouches for them
        self._file[STATUS][where] = result.status
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _clip(message: str) -> bytes:
    data = message.encode("utf-8")[:MESSAGE_BYTES]
    return data.decode("utf-8", errors="ignore").encode("utf-8")  # never cut a character in half


def bad_points(path: Path) -> int:
    """Points of a sweep file that diverged or failed (`dyn run` then exits with status 3)."""
    with h5py.File(path, "r", locking=False) as f:
        codes = np.asarray(f[STATUS][...]).reshape(-1)
    return int(np.sum((codes == DIVERGED) | (codes == FAILED)))


def pending(statuses: np.ndarray) -> np.ndarray:
    """Point indices still to compute: never run, or failed (a failure may be transient)."""
    return np.flatnonzero((statuses == PENDING) | (statuses == FAILED))
