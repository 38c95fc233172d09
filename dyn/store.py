"""The one HDF5 file of a sweep: layout, creation, per-point writes, resume.

Layout (netCDF-4 compatible, so `xarray.open_dataset(path, engine="h5netcdf")` reads it):
  dimensions   one per sweep axis (coordinate = its values), then the system's own (e.g. time)
  variables    each output, dims (*sweep axes, *own dims), float64, NaN until its point is done
  status       int8 per point: 0 pending, 1 ok, 2 diverged, 3 failed (CF flag_values/meanings)
  message      per point: why it diverged or failed (empty otherwise)
  trajectory   optional, virtual: states streamed to NAME.h5.d/ (see dyn/trajectories.py)
  attributes   scenario (resolved TOML), scenario_hash, versions, git_commit, command, created

Why the file survives a kill at any moment: every dataset is contiguous and fully written (NaN)
when the file is made, and the file is made under a temporary name and renamed into place. A
point's write then only overwrites raw data bytes in place (no HDF5 metadata changes), and its
status byte is written last, after the values are flushed. A kill mid-write leaves that point
pending; resuming recomputes it.
"""
from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import h5netcdf
import h5py
import numpy as np

from . import provenance, sweep, trajectories
from .ensemble import coords as system_coords
from .ensemble import file_outputs
from .errors import OutputError
from .systems.base import FAILED, PENDING, ROLE_ATTR, STATUS_NAMES, PointResult

if TYPE_CHECKING:
    from .scenario import Scenario

STATUS = "status"
MESSAGE = "message"
MESSAGE_BYTES = 256  # fixed width: a point's message is written in place, like its values
FILL_BYTES = 64 * 2**20  # slab size when the empty layout is written


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


class WriterLock:
    """An exclusive advisory lock beside the output file: at most one writer per file.

    flock is released by the kernel when the holder dies, so a killed run never leaves it stuck.
    """

    def __init__(self, path: Path):
        self.path = lock_path(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise OutputError("--out", f"another dyn run (pid {holder}) is writing "
                              f"{self.path.name[:-5]}; wait for it or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def create(path: Path, scenario: "Scenario", command: str) -> None:
    """Write the whole empty layout under a temporary name, then rename it into place."""
    system, setup = scenario.system, scenario.setup
    tmp = partial_path(path)
    tmp.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    coords = system_coords(system, setup)
    axes = list(scenario.axes)
    with h5netcdf.File(tmp, "w") as f:
        for axis, values in scenario.axes.items():
            f.dimensions[axis] = len(values)
            _coordinate(f, axis, np.asarray(values), {"long_name": _axis_long_name(system, axis)})
        for dim, coord in coords.items():
            f.dimensions[dim] = len(coord.values)
            attrs = {"long_name": coord.long_name, **({"units": coord.units} if coord.units else {}),
                     **coord.attrs}
            _coordinate(f, dim, np.asarray(coord.values), attrs)
        shape = sweep.shape(scenario.axes)
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
    os.replace(tmp, path)


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


def read_status(path: Path, scenario: "Scenario") -> np.ndarray:
    """Flat status array of an existing file, after checking it holds this scenario."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            stored = f.attrs.get("scenario_hash")
            stored = stored.decode() if isinstance(stored, bytes) else stored
            if stored != scenario.hash:
                raise OutputError("--out", f"{path} holds a different scenario (hash "
                                  f"{str(stored)[:12]}..., this one {scenario.hash[:12]}...); "
                                  "choose another --out or delete the file")
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


def pending(statuses: np.ndarray) -> np.ndarray:
    """Point indices still to compute: never run, or failed (a failure may be transient)."""
    return np.flatnonzero((statuses == PENDING) | (statuses == FAILED))
