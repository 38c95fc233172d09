"""The one HDF5 file of a sweep: layout, creation, per-point writes, resume.

Layout (netCDF-4 compatible, so `xarray.open_dataset(path, engine="h5netcdf")` reads it):
  dimensions   one per sweep axis (coordinate = its values), then the system's own (e.g. time)
  variables    each output, dims (*sweep axes, *own dims), float64, NaN until its point is done
  status       int8 per point: 0 pending, 1 ok, 2 diverged, 3 failed (CF flag_values/meanings)
  message      per point: why it diverged or failed (empty otherwise)
  versions     per point: the versions of the numerical libraries that computed it
  checksum     per point: CRC-32 of its values, message, versions and status as written, which
               a resume checks before it keeps the point (a damaged point is computed again)
  references   the system's theory (System.references: boundaries, closed forms), written once
               here, role "reference", with their own coordinates (e.g. a fine grid beta_theory)
  trajectory   optional, virtual: states streamed to NAME.h5.d/ (see dyn/engine/trajectories.py)
  attributes   scenario (resolved TOML), scenario_hash, versions, git_commit, command, created

Why the file survives a kill at any moment: every dataset is contiguous and fully written (NaN)
when the file is made, and the file is made under a temporary name and renamed into place. A
point's write then only overwrites raw data bytes in place (no HDF5 metadata changes), and its
status byte is written last, after the values are flushed. A kill mid-write leaves that point
pending; resuming recomputes it.

What a resume keeps: a file whose layout (variables, shapes, types, sweep coordinates, the
scenario attributes and their hash) is not the one this scenario makes is refused in one line
(`--overwrite` replaces it), and of a well-formed file only the points whose checksum matches are
kept. Not-ok points hold NaN in every output: a diverged point's numbers are not answers.

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
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import h5netcdf
import h5py
import numpy as np

from ..core import sweep
from ..core.contract import (
    DIVERGED,
    FAILED,
    NAN_MEANS_ATTR,
    OK,
    PENDING,
    REFERENCE,
    ROLE_ATTR,
    STATUS_NAMES,
    PointResult,
)
from ..core.errors import MissingFile, OutputError, ScenarioError
from . import labels, model_facts, provenance, theory, trajectories
from .disk import file_kind, free_bytes, reserve, trim
from .ensemble import coords as system_coords, error_budget, file_outputs, references

if TYPE_CHECKING:
    from .scenario import Scenario

STATUS = "status"
MESSAGE = "message"
MESSAGE_BYTES = 256  # fixed width: a point's message is written in place, like its values
VERSIONS, CHECKSUM = "versions", "checksum"
BOOKKEEPING = (STATUS, MESSAGE, VERSIONS, CHECKSUM)  # per-point variables that are not outputs
# what h5py raises reading a damaged file: OSError for most, the others for damaged headers
DAMAGE = (OSError, KeyError, RuntimeError, ValueError, TypeError, IndexError)
VERSIONS_BYTES = 192  # fixed width too: "numpy 2.2.6, scipy 1.15.3, ..." takes about 90
FILL_BYTES = 64 * 2**20  # slab size when the empty layout is written
MAX_FILE_BYTES = 2**30  # a sweep file estimated past this is refused unless forced (--force)
SLACK_BYTES = 2**20  # metadata allowance of a reservation (object headers, B-trees, attributes)
VDS_BYTES_PER_POINT = 160  # a virtual-dataset mapping; the estimate stayed above 400..10^4-point files


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def partial_path(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _open_lock(path: Path) -> int:
    """The lock file, opened (made where absent). One left by a run that died, which this user
    cannot write (another's, read-only), is opened to read: flock needs no write access."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError:
        return os.open(path, os.O_RDONLY)


def _say_holder(fd: int) -> None:
    """Write this process's pid into the lock file, for a refused run to name; where that fails
    (a full disk, a file opened to read) the lock holds all the same, and a refusal says
    "pid unknown"."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError:
        pass


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
            fd = _open_lock(self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise OutputError(
                    "--out",
                    f"another dyn run (pid {holder}) is writing "
                    f"{self.target.name}; wait for it or choose another --out",
                ) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # its holder removed it on release: lock the file now at that name
        _say_holder(fd)
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
                raise OutputError(
                    "--out",
                    f"another dyn run is writing {self.target.name} "
                    "through another name (a hard link or a bind mount); wait "
                    "for it or choose another --out",
                ) from None
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


def estimated_bytes(scenario: Scenario) -> int:
    """An upper bound of the sweep file's size: its contiguous datasets, the virtual mapping of
    saved states, the attributes, and SLACK_BYTES of metadata."""
    system, setup = scenario.system, scenario.setup
    coords = system_coords(system, setup)
    points = scenario.count
    total = points * (1 + MESSAGE_BYTES + VERSIONS_BYTES + 4) + SLACK_BYTES + 4 * len(scenario.text)
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


def states_bytes(scenario: Scenario) -> int:
    """An upper bound of the saved states' folder NAME.h5.d/: each point file's reservation
    (its states uncompressed, see trajectories.reservation); 0 without saved states."""
    system, setup = scenario.system, scenario.setup
    spec = trajectories.spec(system, setup, system_coords(system, setup))
    return 0 if spec is None else scenario.count * trajectories.reservation(spec)


def output_text(scenario: Scenario) -> tuple[int, str]:
    """Bytes of the sweep file and its saved states together, and the same in words."""
    need, states = estimated_bytes(scenario), states_bytes(scenario)
    if not states:
        return need, f"about {size_text(need)}"
    return need + states, (
        f"about {size_text(need + states)} (the file {size_text(need)}, the "
        f"saved states in its folder NAME.h5.d/ at most {size_text(states)})"
    )


def check_size(path: Path, scenario: Scenario, force: bool = False) -> int:
    """Refuse a sweep whose file and saved states would take past MAX_FILE_BYTES (unless
    `force`) or past the free space; returns the file's estimate, reserved when it is made."""
    need = estimated_bytes(scenario)
    total, text = output_text(scenario)
    if total > MAX_FILE_BYTES and not force:
        raise ScenarioError(
            "sweep",
            f"the output would take {text} ({scenario.count} points), "
            f"past the limit of {size_text(MAX_FILE_BYTES)}"
            f"{exactly(total, MAX_FILE_BYTES)}; shrink the sweep "
            "(or trajectory_runs, trajectory_every) or add --force",
        )
    folder = Path(os.path.abspath(path)).parent
    while not folder.exists() and folder != folder.parent:  # made later: its nearest ancestor
        folder = folder.parent
    free = free_bytes(folder)
    if total > free:
        raise ScenarioError(
            "--out",
            f"the output would take {text}, but only {size_text(free)}{exactly(total, free)} is free beside {path}",
        )
    return need


def exactly(nbytes: int, other: int) -> str:
    """ " (N bytes against M)" where :func:`size_text` rounds the two counts to one text, so
    that a refusal never prints two equal numbers; else ""."""
    if size_text(nbytes) != size_text(other):
        return ""
    return f" ({nbytes} bytes against {other})"


def size_text(nbytes: int) -> str:
    """A byte count for people: 1.7 MB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def check_sweep_file(path: str | Path) -> None:
    """Refuse, in one line, a file that `dyn run` did not write (before show, plot or compare
    reach for its scenario attribute or status variable). A FIFO or a device is refused without
    being opened (HDF5 would wait on a FIFO for ever); any error of the HDF5 library reading the
    file (damaged metadata: checksums, headers, heaps) is one line too."""
    import stat
    import tomllib

    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise MissingFile("", f"no such file: {path}") from None
    except (OSError, ValueError) as exc:
        raise ScenarioError("", f"cannot read {path}: {exc}") from None
    if not stat.S_ISREG(mode):
        raise ScenarioError(
            "", f"{path} is not a regular file ({file_kind(mode)}): give a sweep file that `dyn run` wrote"
        )
    bounded_read(path)
    try:
        with h5py.File(path, "r", locking=False) as f:
            made_by_dyn = (
                "scenario" in f.attrs and "scenario_hash" in f.attrs and isinstance(f.get(STATUS), h5py.Dataset)
            )
            text = f.attrs.get("scenario") if made_by_dyn else ""
    except OSError as exc:
        raise ScenarioError("", f"{path} is not a readable HDF5 file: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - h5py raises KeyError, RuntimeError, ... on damage
        problem = str(exc).strip("'\"") or type(exc).__name__
        raise ScenarioError("", f"{path} is damaged: {problem}") from None
    if made_by_dyn:
        try:
            text = text.decode() if isinstance(text, bytes) else str(text)
            made_by_dyn = isinstance(tomllib.loads(text).get("scenario"), dict)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError):
            made_by_dyn = False
    if not made_by_dyn:
        raise ScenarioError(
            "",
            f"{path} is not a dyn sweep file (it lacks the scenario "
            "attributes or the status variable that `dyn run` writes)",
        )


def read_problem(path: Path) -> str:
    """What makes the HDF5 library loop or crash on the file at `path` ("" if nothing), found
    before this process reads it: its global heaps walked in Python (:mod:`.heaps`), then its
    whole structure read by a child under a time limit (:mod:`.probe`)."""
    from .heaps import heap_problem
    from .probe import READ_SECONDS, structure_problem

    return heap_problem(path, READ_SECONDS) or structure_problem(path, READ_SECONDS)


def bounded_read(path: Path) -> None:
    """Refuse, in one line, a file on which the HDF5 library would loop or crash
    (:func:`read_problem`)."""
    problem = read_problem(path)
    if problem:
        raise ScenarioError("", f"{path} is damaged: {problem}")


def create(path: Path, scenario: Scenario, command: str, reserve_bytes: int | None = None) -> None:
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
            attrs = {"long_name": coord.long_name, **({"units": coord.units} if coord.units else {}), **coord.attrs}
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
            if out.nan_means:
                var.attrs[NAN_MEANS_ATTR] = out.nan_means
            var.attrs.update(budget.get(out.name, {}))
        _write_references(f, references(system, setup), scenario.axes)
        status = f.create_variable(STATUS, tuple(axes), dtype="i1")
        _fill(status, shape, 0)
        status.attrs.update(
            {
                "long_name": "per-point completion status",
                "flag_values": np.arange(len(STATUS_NAMES), dtype="i1"),
                "flag_meanings": " ".join(STATUS_NAMES),
            }
        )
        message = f.create_variable(MESSAGE, tuple(axes), dtype=f"S{MESSAGE_BYTES}")
        _fill(message, shape, b"")
        message.attrs.update({"long_name": "why a point diverged or failed", "_Encoding": "utf-8"})
        versions = f.create_variable(VERSIONS, tuple(axes), dtype=f"S{VERSIONS_BYTES}")
        _fill(versions, shape, b"")
        versions.attrs.update(
            {"long_name": "versions of the numerical libraries that computed the point", "_Encoding": "utf-8"}
        )
        checksum = f.create_variable(CHECKSUM, tuple(axes), dtype="u4")
        _fill(checksum, shape, 0)
        checksum.attrs["long_name"] = (
            "CRC-32 of the point's values, message, versions and status as written (checked by a resume)"
        )
        f.attrs.update(provenance.attributes(scenario, command))
        f.attrs.update(model_facts.attributes(system))  # what readers need, as data
        f.attrs.update(step_attributes(scenario))
        spec = trajectories.spec(system, setup, coords)
        if spec is not None:
            if spec.dims[0] not in f.dimensions:  # `run` may exist already, for per-run outputs
                f.dimensions[spec.dims[0]] = spec.runs
            f.dimensions["trajectory_time"] = len(spec.times)
            _coordinate(f, "trajectory_time", spec.times, {"long_name": "time of the saved states"})
            for dim, size in spec.state.items():
                f.dimensions[dim] = size
    with h5py.File(tmp, "r+") as f:
        if spec is not None:
            trajectories.declare(f, path, spec, shape, axes)
        labels.stamp(f)  # the last attribute written: a resume checks all the others against it
    trim(tmp)
    os.replace(tmp, path)


def step_attributes(scenario: Scenario) -> dict[str, float]:
    """The steps a fixed-step solver takes, as root attributes: each save interval is cut into
    equal steps no longer than dt (integrators.core.base.step_grid), so where dt exceeds a save
    interval the step used is that interval. Absent for adaptive methods, dt = "auto" (the
    point's `dt_used` variable holds that) and a swept dt (the point's coordinate)."""
    import integrators
    from integrators.core.base import DEFAULT_DT, step_grid

    cfg = scenario.integrator
    if (
        "dt" not in scenario.system.integrator
        or cfg.get("dt") == "auto"
        or "dt" in scenario.setup.solver_axes  # each point's step is its coordinate
        or "backend" not in cfg
        or (cfg["backend"] != "jax" and "dt" not in integrators.options(cfg["backend"], cfg["method"]))
    ):
        return {}
    dt = cfg.get("dt") or DEFAULT_DT
    steps = step_grid(np.asarray(scenario.setup.times, dtype=np.float64), dt)[1]
    return {"dt_requested": float(dt), "dt_used_min": float(steps.min()), "dt_used_max": float(steps.max())}


def _write_references(f: h5netcdf.File, refs, axes) -> None:
    """Each reference with the coordinates it brings (once, when several share one), and the
    checksum of its values and of the coordinates it lies on other than the sweep `axes`
    (:func:`dyn.engine.model_facts.values_checksum`), as read back from the file."""
    for ref in refs:
        for dim, coord in ref.coords.items():
            if dim not in f.dimensions:
                f.dimensions[dim] = len(coord.values)
                attrs = {"long_name": coord.long_name, **({"units": coord.units} if coord.units else {}), **coord.attrs}
                _coordinate(f, dim, np.asarray(coord.values), attrs)
        var = f.create_variable(ref.name, tuple(ref.dims), dtype="f8", data=np.asarray(ref.values, dtype=np.float64))
        var.attrs.update(
            {
                "long_name": ref.long_name,
                **({"units": ref.units} if ref.units else {}),
                ROLE_ATTR: REFERENCE,
                **ref.draw.attrs(),
            }
        )
        on = [np.asarray(f.variables[d][...]) for d in ref.dims if d not in axes]
        var.attrs[model_facts.CHECKSUM_ATTR] = np.int64(model_facts.values_checksum(var[...], *on))


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


KIND_ATTR = "dyn_kind"  # a coordinate stored in another dtype than it is read: its kind


def _coordinate(f: h5netcdf.File, name: str, values: np.ndarray, attrs: dict) -> None:
    """A coordinate variable. NetCDF has no boolean type, so a bool axis is written as int8 with
    `dyn_kind = "bool"`, which `dyn.open` reads back as bool (plain readers see 0 and 1)."""
    if values.dtype.kind == "b":
        var = f.create_variable(name, (name,), data=values.astype(np.int8))
        var.attrs.update({**attrs, KIND_ATTR: "bool"})
        return
    if values.dtype.kind in "UO":
        var = f.create_variable(name, (name,), dtype=h5py.string_dtype(), data=values.astype(object))
    else:
        var = f.create_variable(name, (name,), data=values)
    var.attrs.update(attrs)


def _axis_long_name(system, axis: str) -> str:
    spec = system.params.get(axis)
    return spec.doc if spec is not None and spec.doc else axis


def other_scenario(path: Path, scenario: Scenario) -> dict | None:
    """When `path` is a readable sweep file of another scenario: its name, hash and command (what
    `--overwrite` replaces); else None (this scenario's file, or not a sweep file at all, which
    --overwrite never deletes)."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            attrs = {k: f.attrs.get(k) for k in ("scenario_hash", "scenario", "command")}
    except DAMAGE:
        return None
    attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
    if not isinstance(attrs["scenario_hash"], str) or attrs["scenario_hash"] == scenario.hash:
        return None
    try:
        name = tomllib.loads(attrs["scenario"])["scenario"]["name"]
    except (tomllib.TOMLDecodeError, TypeError, KeyError):
        name = "?"
    return {"name": name, "hash": attrs["scenario_hash"], "command": attrs["command"] or "?"}


def replaceable(path: Path, scenario: Scenario) -> str | None:
    """What `--overwrite` replaces at `path`, in words: a sweep file of another scenario, or one
    of this scenario whose layout is damaged; None for this scenario's intact file and for
    anything that is not a readable sweep file (never deleted)."""
    other = other_scenario(path, scenario)
    if other is not None:
        return f"it holds scenario {other['name']} (hash {other['hash'][:12]}..., made by `{other['command']}`)"
    try:
        with h5py.File(path, "r", locking=False) as f:
            if _text(f.attrs.get("scenario_hash")) != scenario.hash:
                return None
            problem = metadata_problem(f) or layout_problem(f, scenario)
    except DAMAGE:
        return None
    return f"it is damaged ({problem})" if problem else None


@dataclass(frozen=True)
class Verified:
    """What a resume may keep of an existing file: `statuses`, with every done point whose
    checksum did not match set back to pending (`damaged` lists them), and the library versions
    that computed the kept points (`versions`: text -> count)."""

    statuses: np.ndarray
    damaged: np.ndarray
    versions: dict[str, int]
    repaired: tuple[str, ...] = ()  # references and coordinates written back (dyn.engine.theory)


def read_verified(path: Path, scenario: Scenario) -> Verified:
    """Open an existing sweep file for a resume: refuse another scenario's file and a file whose
    layout is damaged (one line each); check every done point's checksum."""
    problem = read_problem(path)  # before HDF5 reads it here: it could loop for ever
    if problem:
        raise OutputError("--out", f"{path} is damaged ({problem}); add --overwrite to compute it again")
    try:
        with h5py.File(path, "r", locking=False) as f:
            stored = _text(f.attrs.get("scenario_hash"))
            if not isinstance(stored, str) or not isinstance(_text(f.attrs.get("scenario")), str):
                raise OutputError(
                    "--out",
                    f"{path} is not a dyn sweep file, or its scenario "
                    "attributes are damaged (it lacks a readable scenario or "
                    "scenario_hash); choose another --out, or delete the file",
                )
            if stored != scenario.hash:
                raise OutputError(
                    "--out",
                    f"{path} holds a different scenario (hash "
                    f"{str(stored)[:12]}..., this one {scenario.hash[:12]}..."
                    f"{_module_changed(f, scenario)}); "
                    "choose another --out, delete the file, or add --overwrite",
                )
            problem = metadata_problem(f) or layout_problem(f, scenario)
            if problem:
                raise OutputError(
                    "--out",
                    f"{path} is damaged or was made by another version of "
                    f"dyn ({problem}); add --overwrite to compute it again",
                )
            fixes, problem = theory.repairs(f, scenario)
            problem = problem or labels.problem(f)
            if problem:
                raise OutputError("--out", f"{path} is damaged ({problem}); add --overwrite to compute it again")
            statuses = np.asarray(f[STATUS][...]).reshape(-1).copy()
            unknown = ~np.isin(statuses, (PENDING, OK, DIVERGED, FAILED))
            kept = (statuses == OK) | (statuses == DIVERGED)  # failed points are redone anyway
            texts = np.asarray(f[VERSIONS][...]).reshape(-1)
            sums = _point_checksums(f, scenario, np.flatnonzero(kept), statuses, texts)
            stored_sums = np.asarray(f[CHECKSUM][...]).reshape(-1)
            damaged = np.flatnonzero(unknown | (kept & (sums != stored_sums)))
            statuses[damaged] = PENDING
            kept &= statuses != PENDING
            versions = dict(Counter(_text(text) for text in texts[kept]))
    except OutputError:
        raise
    except DAMAGE as exc:
        raise OutputError(
            "--out",
            f"cannot read existing output {path}: "
            f"{str(exc).strip() or type(exc).__name__}; delete it or choose "
            "another --out",
        ) from None
    if fixes:
        theory.write_back(path, fixes)
    return Verified(statuses, damaged, versions, tuple(fixes))


def _text(value) -> str | None:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def metadata_problem(f: h5py.File) -> str:
    """What fails when every object's header and attribute of an open file is read back (HDF5
    checks their checksums as it reads them); "" when nothing does. Readers read all of it, so a
    resume that wrote on top of a damaged header would leave a file they refuse."""
    where = ["/"]

    def attributes(obj) -> None:
        for key in list(obj.attrs.keys()):
            _ = obj.attrs[key]  # read for its checksum

    def visit(name, obj) -> None:
        where[0] = name
        attributes(obj)
        if isinstance(obj, h5py.Dataset):
            _ = obj.shape, obj.dtype  # read for the header's checksum

    try:
        attributes(f)
        f.visititems(visit)
    except Exception as exc:  # noqa: BLE001 - a damaged header raises OSError, KeyError, ...
        return f"{where[0]}: {str(exc).strip() or type(exc).__name__}"
    return ""


def _module_changed(f: h5py.File, scenario: Scenario) -> str:
    """ ", the system's code changed since: FILES" naming the files of a system from outside
    the package whose bytes differ from those the file's scenario records; else ""."""
    text = _text(f.attrs.get("scenario"))
    try:
        head = tomllib.loads(text).get("scenario", {}) if isinstance(text, str) else {}
    except (tomllib.TOMLDecodeError, TypeError, RecursionError):
        return ""
    if not isinstance(head, dict):
        return ""
    from ..user.reach import changed  # names the edited files of the system's code

    return changed(head, scenario.data["scenario"])


def layout_problem(f: h5py.File, scenario: Scenario) -> str:
    """What differs between an open sweep file and the layout `create` makes for this scenario
    (attributes, variables, shapes, types, sweep coordinates); "" when nothing does."""
    text = _text(f.attrs.get("scenario"))
    try:
        from .scenario import document_hash

        doc = tomllib.loads(text) if isinstance(text, str) else None
        if document_hash(doc) != scenario.hash:
            return "its scenario attribute does not match its hash"
    except (tomllib.TOMLDecodeError, TypeError, KeyError, AttributeError, ValueError):
        return "its scenario attribute is not the scenario that made it"
    system, setup = scenario.system, scenario.setup
    coords = system_coords(system, setup)
    shape = sweep.shape(scenario.axes)
    want = {STATUS: (shape, "i"), MESSAGE: (shape, "S"), VERSIONS: (shape, "S"), CHECKSUM: (shape, "u")}
    for out in file_outputs(system, setup):
        want[out.name] = (shape + tuple(len(coords[d].values) for d in out.dims), "f")
    for name, (dims, kind) in want.items():
        var = f.get(name)
        if not isinstance(var, h5py.Dataset):
            return f"no variable {name}"
        if var.shape != dims or var.dtype.kind != kind:
            return f"variable {name} has shape {var.shape} of {var.dtype}, expected {dims}"
    for axis, values in scenario.axes.items():
        var = f.get(axis)
        stored = var[()] if isinstance(var, h5py.Dataset) else None
        if stored is None or stored.shape != (len(values),) or not _same_values(stored, values):
            return f"the values of axis {axis} differ from the scenario's"
    return ""


def _same_values(stored: np.ndarray, values) -> bool:
    if stored.dtype.kind in "OS":
        return [_text(v) for v in stored.tolist()] == [str(v) for v in values]
    try:
        return bool(np.array_equal(stored, np.asarray(values, dtype=stored.dtype)))
    except (TypeError, ValueError):
        return False


def _point_checksums(
    f: h5py.File, scenario: Scenario, points: np.ndarray, statuses: np.ndarray, versions: np.ndarray
) -> np.ndarray:
    """CRC-32 of each listed point as stored (values in file order, message, versions, status),
    the sum `Writer.write` recorded; 0 for the others. One variable in memory at a time."""
    count = scenario.count
    sums = np.zeros(count, dtype=np.int64)
    names = [o.name for o in file_outputs(scenario.system, scenario.setup)]
    for name in names:
        data = np.asarray(f[name][...], dtype=np.float64).reshape(count, -1)
        for i in points:
            sums[i] = zlib.crc32(data[i].tobytes(), sums[i])
    messages = np.asarray(f[MESSAGE][...]).reshape(-1)
    for i in points:
        crc = zlib.crc32(bytes(versions[i]), zlib.crc32(bytes(messages[i]), int(sums[i])))
        sums[i] = zlib.crc32(np.int8(statuses[i]).tobytes(), crc)
    return sums


def numeric_versions() -> str:
    """The versions of the libraries a point's numbers depend on, as one line (per point)."""
    found = provenance.versions()
    return ", ".join(f"{name} {found.get(name, '?')}" for name in provenance.NUMERIC)


class PointSlab:
    """One variable's slab of a point (its values over the variable's own dims, at the point's
    sweep index), written through HDF5's own calls. The file's dataspace and the memory's are
    made once per sweep, so a write selects the point's hyperslab and copies; ``var[where] =
    value`` parses the index, makes both spaces and checks the types each time, and with the
    variable's lookup by name took ~10x as long (24 such writes per point of the main job)."""

    def __init__(self, var: h5py.Dataset, axes: int):
        self.var = var
        self.dtype = var.dtype
        self.shape = var.shape[axes:]
        self.count = (1,) * axes + self.shape
        self.offset = (0,) * len(self.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        # a scalar dataspace (no sweep axes, a scalar variable) has no hyperslab, and an empty
        # slab has nothing to write: both go through h5py's own __setitem__
        self.direct = var.ndim > 0 and self.size > 0
        if self.direct:
            self.id = var.id
            self.file_space = var.id.get_space()
            self.memory_space = h5py.h5s.create_simple((self.size,))

    def write(self, where: tuple[int, ...], value) -> None:
        """Write `value` (converted to the variable's type as h5py converts it; the slab's
        elements in C order: its shape, or a scalar slab's one element as shape (1,)) at the
        point `where`."""
        value = np.asarray(value, dtype=self.dtype)
        if value.shape != self.shape and not (value.shape == (1,) and self.shape == ()):
            raise ValueError(f"{self.var.name}: a value of shape {value.shape} for a slab of shape {self.shape}")
        if not self.direct:
            self.var[where] = value
            return
        self.file_space.select_hyperslab(where + self.offset, self.count)
        self.id.write(self.memory_space, self.file_space, np.ascontiguousarray(value).reshape(self.size))


@dataclass
class Writer:
    """The single writer of one sweep file: one call to `write` per finished point."""

    path: Path
    scenario: Scenario

    def __post_init__(self):
        self._file = h5py.File(self.path, "r+", locking=False)
        self._names = [o.name for o in file_outputs(self.scenario.system, self.scenario.setup)]
        axes = len(self.scenario.axes)
        self._slabs = {name: PointSlab(self._file[name], axes) for name in (*self._names, *BOOKKEEPING)}
        self._versions = numeric_versions().encode()[:VERSIONS_BYTES]

    def write(self, index: int, result: PointResult) -> None:
        """Values (NaN unless the point is ok or failed, whose are left as they are), message,
        versions and checksum; flushed; then the status that vouches for them, flushed."""
        where = sweep.grid_index(self.scenario.axes, index)
        crc = 0
        if result.status != FAILED:
            for name in self._names:
                slab = self._slabs[name]
                value = (
                    np.asarray(result.values[name], dtype=np.float64)
                    if result.status == OK
                    else np.full(slab.shape, np.nan)
                )
                value = np.ascontiguousarray(np.broadcast_to(value, slab.shape))
                slab.write(where, value)
                crc = zlib.crc32(value.tobytes(), crc)
        message = _clip(result.message)
        self._slabs[MESSAGE].write(where, message)
        self._slabs[VERSIONS].write(where, self._versions)
        crc = zlib.crc32(self._versions, zlib.crc32(message, crc))
        self._slabs[CHECKSUM].write(where, zlib.crc32(np.int8(result.status).tobytes(), crc))
        self._file.flush()  # values reach the disk before the status that vouches for them
        self._slabs[STATUS].write(where, result.status)
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
