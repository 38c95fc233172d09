"""Saved trajectories: streamed to one small file per point, seen as one variable of the sweep file.

With `[output] trajectories = true`, each point's states (thinned to every `trajectory_every`-th
save time, first `trajectory_runs` runs) are written while the point runs, run-chunk by
run-chunk, into `NAME.h5.d/point_<index>.h5` (chunked, gzip-compressed), under a temporary name
renamed into place when the point is done. The sweep file holds a virtual dataset `trajectory`
(dims: sweep axes, run, trajectory_time, state dims) mapped onto those files, declared once
when the sweep file is made. Hence:
- memory stays bounded: no process ever holds more than one run-chunk of states;
- the sweep file's metadata never changes after creation, so a kill leaves it whole;
- a point not yet done reads as NaN (the virtual dataset's fill value);
- the folder `NAME.h5.d/` must travel with `NAME.h5` (it holds the trajectory data). HDF5 finds
  it relative to the sweep file's folder, so the pair can be moved anywhere together; renamed
  together (new.h5 + new.h5.d/), the virtual dataset still names the old folder, so `dyn.open`
  (and every `dyn` reader) maps `trajectory` onto the folder beside the file's real path itself
  (`follow`), and a resume writes there; a run reached through a symlink uses the real path;
- each point file carries fletcher32 checksums, and a resume reads every kept point file back
  whole (a damaged or truncated file is computed again);
- a full disk fails the point cleanly: the disk a point file can need is reserved before HDF5
  writes (see dyn/engine/disk.py), so the point gets status "failed" with the OS error, and no
  `.partial` file stays;
- each point file carries the scenario hash and its index (attributes TAG_ATTR, INDEX_ATTR); a
  run, before it computes, keeps only the point files of finished points that are complete and
  match (`prune`), so a file left by a killed run's straggler is never taken for a result.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import h5py
import numpy as np

from ..core.errors import ScenarioError
from .disk import free_bytes, no_space, reserve, trim

if TYPE_CHECKING:
    from ..core.spec import Setup
    from ..core.system import System

DATASET = "trajectory"
CHUNK_TARGET_BYTES = 4 * 2**20  # HDF5 chunk size aimed at: big enough to compress well
COMPRESSION = {"compression": "gzip", "compression_opts": 1, "shuffle": True, "fletcher32": True}
TAG_ATTR, INDEX_ATTR = "dyn_scenario_hash", "dyn_point"
FOLDER_ATTR = "dyn_states_folder"  # on `trajectory`: the folder name its virtual sources use
SLACK_BYTES = 2**16  # metadata allowance of a point file's reservation (measured: ~10 kB)


@dataclass(frozen=True)
class TrajectorySpec:
    """What is kept of each point: `runs` runs at save indices `::every`, states of `state` dims."""

    runs: int
    every: int
    times: np.ndarray  # the kept save times
    state: dict[str, int]  # state dims of one run at one time, e.g. {"token": n, "coordinate": d}

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.runs, len(self.times), *self.state.values())

    run_dim: str = "run"  # "trajectory_run" when per-run outputs hold `run` with every run

    @property
    def dims(self) -> tuple[str, ...]:
        return (self.run_dim, "trajectory_time", *self.state)


def spec(system: System, setup: Setup, coords: dict) -> TrajectorySpec | None:
    """The trajectory layout of a sweep, or None when it saves none; `coords` are the
    system's coordinates, whose `time` gives the save times."""
    if not setup.trajectories:
        return None
    state = system.trajectory_dims(setup)
    if state is None:
        raise ScenarioError("output.trajectories", f"system {system.name} does not save trajectories")
    runs = min(setup.trajectory_runs or setup.runs, setup.runs)
    every = setup.trajectory_every
    # the first runs only, beside per-run outputs of every run: a dimension of its own
    run_dim = "trajectory_run" if "run" in coords and runs < setup.runs else "run"
    return TrajectorySpec(runs, every, np.asarray(coords["time"].values)[::every], dict(state), run_dim)


def sidecar_dir(path: Path) -> Path:
    """The states folder of a sweep file: NAME.h5.d beside the file's real path (a symlink to a
    sweep file shares the real file's folder)."""
    real = Path(os.path.realpath(path))
    return real.with_name(real.name + ".d")


def point_file(sidecar: Path, index: int) -> Path:
    return sidecar / f"point_{index:07d}.h5"


def declare(
    f: h5py.File, path: Path, spec: TrajectorySpec, sweep_shape: tuple[int, ...], sweep_dims: list[str]
) -> None:
    """Add the virtual `trajectory` variable to the (still temporary) sweep file `f`.

    Source file names are relative, and HDF5 resolves them against the sweep file's folder,
    so the pair NAME.h5 + NAME.h5.d/ can be moved together.
    """
    layout = h5py.VirtualLayout(shape=sweep_shape + spec.shape, dtype="f8")
    folder = sidecar_dir(path).name
    for index in range(int(np.prod(sweep_shape, dtype=np.int64))):
        where = np.unravel_index(index, sweep_shape) if sweep_shape else ()
        source = h5py.VirtualSource(f"{folder}/{point_file(Path('.'), index).name}", DATASET, shape=spec.shape)
        layout[tuple(int(i) for i in where)] = source
    var = f.create_virtual_dataset(DATASET, layout, fillvalue=np.nan)
    var.attrs["long_name"] = "saved states (thinned), one file per point under " + folder
    var.attrs[FOLDER_ATTR] = folder
    for axis, dim in enumerate([*sweep_dims, *spec.dims]):
        var.dims[axis].attach_scale(f[dim])


def _chunk_runs(spec: TrajectorySpec) -> int:
    per_run = int(np.prod(spec.shape[1:], dtype=np.int64)) * 8
    return int(max(1, min(spec.runs, CHUNK_TARGET_BYTES // max(per_run, 1))))


def reservation(spec: TrajectorySpec) -> int:
    """Disk a point file can take at most: its states uncompressed (gzip never grows them by
    more than a fraction of a percent), 1/64 for chunks written twice, and the metadata (object
    headers, and a chunk index entry per chunk)."""
    raw = int(np.prod(spec.shape, dtype=np.int64)) * 8
    chunks = -(-spec.runs // _chunk_runs(spec))
    return raw + raw // 64 + SLACK_BYTES + 256 * chunks


class TrajectoryFile:
    """The sink a system writes run-chunks into; atomically published on `close`.

    The disk the file can need is reserved first: a full disk raises OSError(ENOSPC) here,
    before HDF5 writes, and leaves no file (HDF5 itself cannot recover from a failed write)."""

    def __init__(self, sidecar: Path, index: int, spec: TrajectorySpec, tag: str = ""):
        self.spec = spec
        self.final = point_file(sidecar, index)
        self.partial = self.final.with_name(self.final.name + ".partial")
        sidecar.mkdir(parents=True, exist_ok=True)
        need = reservation(spec)
        what = f"{need / 1e6:.2f} MB for the saved states of point {index} in {sidecar.name}/"
        if need > free_bytes(sidecar):  # checked before HDF5 has a file to fail on
            raise no_space(self.partial, what)
        per_run = int(np.prod(spec.shape[1:], dtype=np.int64)) * 8
        chunk_runs = _chunk_runs(spec)
        # a cache of three chunks: a chunk is written once, when complete, not once per write
        self._file = h5py.File(self.partial, "w", rdcc_nbytes=3 * chunk_runs * per_run + 2**20, rdcc_w0=1.0)
        self._file.flush()  # the superblock on disk now: closing rewrites it in place
        try:
            reserve(self.partial, need)
        except OSError:
            self.discard()
            raise no_space(self.partial, what) from None
        self._file.attrs[TAG_ATTR] = tag
        self._file.attrs[INDEX_ATTR] = index
        self._data = self._file.create_dataset(
            DATASET, shape=spec.shape, dtype="f8", chunks=(chunk_runs, *spec.shape[1:]), fillvalue=np.nan, **COMPRESSION
        )

    def write(self, first_run: int, states: np.ndarray) -> None:
        """States of runs first_run.. at ALL save times, (runs, times, *state); keeps what the
        spec asks for (every `every`-th time, runs below `spec.runs`)."""
        if first_run >= self.spec.runs:
            return
        stop = min(first_run + states.shape[0], self.spec.runs)
        self._data[first_run:stop] = states[: stop - first_run, :: self.spec.every]

    def close(self) -> None:
        self._close_hdf5()
        trim(self.partial)
        os.replace(self.partial, self.final)

    def discard(self) -> None:
        try:
            self._close_hdf5()
        finally:
            self.partial.unlink(missing_ok=True)

    def _close_hdf5(self) -> None:
        # Never twice: a second close of an HDF5 file whose close failed segfaults.
        f, self._file = self._file, None
        if f is not None:
            f.close()


def _matches(path: Path, index: int, tag: str, spec: TrajectorySpec) -> bool:
    """A finished point's file is complete and intact (it opens, its dataset has the spec's
    shape and reads back whole, every chunk's fletcher32 checksum verified) and was written for
    this scenario and this point."""
    try:
        with h5py.File(path, "r", locking=False) as f:
            stored = f.attrs.get(TAG_ATTR)
            stored = stored.decode() if isinstance(stored, bytes) else stored
            if stored != tag or int(f.attrs.get(INDEX_ATTR, -1)) != index:
                return False
            data = f.get(DATASET)
            if not isinstance(data, h5py.Dataset) or tuple(data.shape) != spec.shape:
                return False
            step = _chunk_runs(spec)
            for first in range(0, spec.runs, step):  # one HDF5 chunk of runs in memory at a time
                data[first : first + step]
            return True
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return False


def prune(sidecar: Path, statuses: np.ndarray, tag: str, spec: TrajectorySpec) -> np.ndarray:
    """Before a run computes: remove `.partial` files and the point files of points not done
    (a killed run or its straggling workers may have left them), and check those of done ones.
    Returns the done points whose file is missing or does not match: they are computed again."""
    from ..core.contract import FAILED, PENDING

    done = statuses != PENDING
    redo = np.zeros(len(statuses), dtype=bool)
    if not sidecar.is_dir():
        return np.flatnonzero(done & (statuses != FAILED))  # finished points need states
    present = set()
    for path in sidecar.iterdir():
        name = path.name
        if not name.startswith("point_"):
            continue
        if name.endswith(".h5.partial"):
            path.unlink(missing_ok=True)
            continue
        stem = name[len("point_") : -len(".h5")] if name.endswith(".h5") else ""
        if not stem.isdigit() or int(stem) >= len(statuses):
            continue
        index = int(stem)
        if not done[index] or statuses[index] == FAILED:  # recomputed anyway
            path.unlink(missing_ok=True)
        elif _matches(path, index, tag, spec):
            present.add(index)
        else:
            path.unlink(missing_ok=True)
            redo[index] = True
    finished = np.flatnonzero(done & (statuses != FAILED))
    redo[[i for i in finished if i not in present]] = True
    return np.flatnonzero(redo)


def follow(ds, path: Path):
    """`ds` (the xarray Dataset of the sweep file at `path`) with `trajectory` read from the
    states folder beside the file's real path, when the folder its virtual dataset names is not
    there (the pair was renamed together); else `ds` itself. Lazy: a point file is read when its
    part is selected (one dask chunk per point)."""
    var = ds.get(DATASET)
    if var is None:
        return ds
    folder = sidecar_dir(path)
    named = str(var.attrs.get(FOLDER_ATTR, folder.name))
    if named == folder.name or (folder.parent / named).is_dir() or not folder.is_dir():
        return ds
    import xarray as xr
    from xarray.core import indexing

    axes = len(ds["status"].dims) if "status" in ds else 0  # the sweep axes lead
    source = _states_folder_class()(folder, var.shape, axes)
    # xarray's own lazy indexing (not dask: a Dask client left registered would take the reads)
    data = indexing.LazilyIndexedArray(source)
    moved = xr.DataArray(xr.Variable(var.dims, data), coords=var.coords, attrs=dict(var.attrs))
    followed = ds.assign({DATASET: moved})
    followed.set_close(ds.close)  # closing it closes the file, as closing `ds` would
    return followed


@functools.cache
def _states_folder_class():
    """:class:`_StatesFolder` as xarray's BackendArray, made on first use: importing xarray takes
    0.3 s, which a sweep that only writes its file should not pay."""
    from xarray.backends import BackendArray

    return type("StatesFolder", (_StatesFolder, BackendArray), {})


class _StatesFolder:
    """The `trajectory` array of a sweep (sweep axes, then run, time, state) read from the point
    files of `folder` directly; a point without its file reads as NaN, as in the virtual dataset."""

    def __init__(self, folder: Path, shape: tuple[int, ...], axes: int):
        self.folder, self.shape, self.axes = folder, tuple(shape), axes
        self.dtype = np.dtype("f8")

    def __getitem__(self, key):
        from xarray.core import indexing

        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._basic)

    def _basic(self, key):
        key = key if isinstance(key, tuple) else (key,)
        ndim = len(self.shape)
        key = key + (slice(None),) * (ndim - len(key))
        if any(isinstance(k, (int, np.integer)) for k in key[: self.axes]):  # an index: a slice
            picked = tuple(
                slice(int(k), int(k) + 1) if isinstance(k, (int, np.integer)) else k for k in key[: self.axes]
            )
            block = self._basic(picked + key[self.axes :])
            return block.reshape(
                [
                    n
                    for k, n in zip(key[: self.axes], block.shape[: self.axes], strict=True)
                    if not isinstance(k, (int, np.integer))
                ]
                + list(block.shape[self.axes :])
            )
        ranges = [range(*k.indices(n)) for k, n in zip(key[: self.axes], self.shape[: self.axes], strict=True)]
        own = key[self.axes :]
        sweep_shape = self.shape[: self.axes]
        parts = []
        for where in np.ndindex(*[len(r) for r in ranges]):
            at = tuple(r[i] for r, i in zip(ranges, where, strict=True))
            index = int(np.ravel_multi_index(at, sweep_shape)) if at else 0
            parts.append(self._point(index, own))
        block = np.stack(parts) if parts else np.empty((0,) + self._own_shape(own))
        return block.reshape(tuple(len(r) for r in ranges) + block.shape[1:])

    def _own_shape(self, own) -> tuple[int, ...]:
        return np.empty(self.shape[self.axes :], dtype=bool)[own].shape

    def _point(self, index: int, own) -> np.ndarray:
        try:
            with h5py.File(point_file(self.folder, index), "r", locking=False) as f:
                return np.asarray(f[DATASET][own], dtype=np.float64)
        except (OSError, KeyError):
            return np.full(self._own_shape(own), np.nan)
