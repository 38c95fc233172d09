"""Reading results: `dyn.open`, the text summary behind `dyn show`, the error budget behind
`dyn show --errors`, and the marks of the points whose numbers are not yet answers
(horizon-limited, non-stationary, step-limited: :mod:`dyn.engine.verdicts` finds them) or that
hold none (diverged, failed: :func:`point_marks`).

A damaged file is one line wherever it shows: `dyn.open` refuses what it cannot open, and every
variable it returns reads through a guard that turns an error of the HDF5 stack into a
ScenarioError; :func:`damage` says what of a file the HDF5 library cannot read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import xarray as xr
from xarray.backends import BackendArray

from ..core.contract import DIVERGED, OK, PENDING, REFERENCE, ROLE_ATTR, STATUS_NAMES, STEP_ERROR, TIME_AVERAGE
from ..core.errors import ScenarioError
from ..engine.verdicts import (
    HORIZON_LIMITED,
    MARKED_ROLES,
    NONSTATIONARY,
    WHY,
    undecided_variable,
    unresolved,
    with_role,
)
from .describe import setting_text

MAX_LISTED = 20  # horizon-limited points listed by `dyn show`
READ_SLAB_BYTES = 64 * 2**20  # `damage` reads a dataset this much at a time


def open(path: str | Path) -> xr.Dataset:  # noqa: A001 - mirrors xarray.open_dataset
    """Open a sweep file as an `xarray.Dataset` (sweep axes are dimensions; pending points NaN).

    Every output of a point that is not ok (pending, diverged, failed; `status` != 1) reads as
    NaN, whatever the file holds there: a diverged point's numbers are not answers (older files
    keep them). Masked are the float variables over the sweep axes, not the coordinates, the
    references (role "reference"), `status`, `message` or the saved states. Reading stays lazy
    (use it as a context manager, or close it).

    Returns the Dataset. Raises MissingFile, which is both a FileNotFoundError and a
    ScenarioError, when `path` does not exist; ScenarioError (one line) for a file that is not a
    regular file, not a sweep file or damaged (the HDF5 library fails on its metadata or data,
    now or when a variable is loaded)."""
    from ..engine.store import check_sweep_file

    path = Path(path)
    # a FIFO, a device, damage on which HDF5 loops (found in a child first), a plain HDF5 file
    check_sweep_file(path)
    try:
        # without HDF5's file lock, as every other reader and the writer of dyn open it: HDF5
        # refuses a second open in one process whose locking flag differs from the first's
        ds = xr.open_dataset(path, engine="h5netcdf", driver_kwds={"locking": False})
    except Exception as exc:  # noqa: BLE001 - h5py, h5netcdf and xarray each raise their own
        raise ScenarioError("", f"{path} is damaged: {_problem(exc)}") from None
    try:
        ds = _guarded(ds, path)
        problem = _layout_problem(ds) or _reference_problem(ds)
        if problem:
            raise ScenarioError("", f"{path} is damaged: {problem}")
        from ..engine.trajectories import follow

        return _typed_axes(follow(ds, path))  # saved states beside the file, also once renamed
    except Exception as exc:  # noqa: BLE001
        ds.close()
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError("", f"{path} is damaged: {_problem(exc)}") from None


def _typed_axes(ds: xr.Dataset) -> xr.Dataset:
    """Coordinates read back as the kind they were swept in (a bool axis is stored as int8)."""
    from ..engine.store import KIND_ATTR

    typed = {}
    for name, coord in ds.coords.items():
        if coord.attrs.get(KIND_ATTR) == "bool":
            typed[name] = (coord.dims, coord.values.astype(bool), coord.attrs)
    return ds.assign_coords(typed) if typed else ds


def _layout_problem(ds: xr.Dataset) -> str:
    """What of the file's dimensions is not the layout `dyn run` writes ("" if nothing): status
    and message over the scenario's sweep axes, every output over them first, the saved states
    over them, the run and the save times. (A damaged dimension-scale reference can name another
    dimension of the same length: HDF5 reads it fine.)"""
    axes = tuple(ds["status"].dims)
    sweep = tuple(scenario_of(ds).get("sweep", {}))
    if axes != sweep:
        return f"status is over ({', '.join(axes)}), the scenario sweeps ({', '.join(sweep)})"
    for name, var in ds.data_vars.items():
        dims = var.dims
        if len(set(dims)) != len(dims):
            return f"variable {name} has the dimension list ({', '.join(dims)})"
        if var.attrs.get(ROLE_ATTR) == REFERENCE or not set(dims) & set(axes):
            continue
        if dims[: len(axes)] != axes or (name == "message" and dims != axes):
            return f"variable {name} is over ({', '.join(dims)}), not the sweep axes first"
        if name == "trajectory" and dims[len(axes) + 1 : len(axes) + 2] != ("trajectory_time",):
            return f"the saved states are over ({', '.join(dims)}), not the runs and save times"
    return ""


def _reference_problem(ds: xr.Dataset) -> str:
    """The first reference (theory curve) whose values and grid no longer match the checksum
    the run wrote with them (:func:`dyn.engine.model_facts.values_checksum`); "" if none (or
    none carries one: files of older versions). A damaged theory curve is refused, as damaged
    metadata is: a resume writes it back."""
    from ..engine.model_facts import CHECKSUM_ATTR, values_checksum

    axes = set(ds["status"].dims)
    for name, var in ds.data_vars.items():
        if var.attrs.get(ROLE_ATTR) != REFERENCE or CHECKSUM_ATTR not in var.attrs:
            continue
        try:
            recorded = int(np.asarray(var.attrs[CHECKSUM_ATTR]).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            return f"the checksum of reference {name} is damaged"
        grids = [ds[d].values for d in var.dims if d not in axes and d in ds.coords]
        if values_checksum(var.values, *grids) != recorded:
            return f"reference {name} does not match its checksum (a resume of the scenario writes it again)"
    return ""


def _problem(exc: BaseException) -> str:
    """An exception of the HDF5 stack as words (h5py's KeyError texts come quoted)."""
    return str(exc).strip("'\"") or type(exc).__name__


def damage(path: str | Path) -> str:
    """What the HDF5 library cannot read of the file at `path` ("" when it reads it whole): the
    root's attributes, then every object's links, header, attributes and data (saved states
    through their virtual dataset too), one slab at a time. What `dyn` readers consult when
    something fails while they read or draw a file: a damaged file is then said to be so, in one
    line."""
    import stat

    import h5py

    path = Path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return "not a regular file"
        with h5py.File(path, "r", locking=False) as f:
            dict(f.attrs)
            return _unreadable(f, "/")
    except Exception as exc:  # noqa: BLE001 - whatever h5py raises is the answer
        return _problem(exc)


def _unreadable(group, where: str) -> str:
    import h5py

    for name in group:
        at = f"{where}{name}"
        try:
            obj = group[name]
            dict(obj.attrs)
            if isinstance(obj, h5py.Group):
                found = _unreadable(obj, at + "/")
                if found:
                    return found
            elif isinstance(obj, h5py.Dataset) and obj.shape:
                row = obj.dtype.itemsize * (obj.size // obj.shape[0] if obj.shape[0] else 0)
                rows = max(1, READ_SLAB_BYTES // max(1, row))
                for start in range(0, obj.shape[0], rows):
                    obj[start : start + rows]
            elif isinstance(obj, h5py.Dataset):
                obj[()]
        except Exception as exc:  # noqa: BLE001
            return f"{at}: {_problem(exc)}"
    return ""


# Per-point bookkeeping of the engine, never masked (besides status and message)
UNMASKED = ("status", "message", "trajectory", "versions", "checksum")


def not_ok(ds: xr.Dataset):
    """Boolean per point: True where the point is not ok (status != 1), as a numpy array over
    the sweep axes (status's dims)."""
    return np.asarray(ds["status"].values) != OK


def is_masked(ds: xr.Dataset, name: str) -> bool:
    """Whether `name` is an output that reads as NaN at points not ok: a float variable over the
    sweep axes, neither a reference nor the engine's bookkeeping (UNMASKED)."""
    var, axes = ds[name], ds["status"].dims
    return (
        name in ds.data_vars
        and name not in UNMASKED
        and var.dtype.kind == "f"
        and var.dims[: len(axes)] == axes
        and var.attrs.get(ROLE_ATTR) != REFERENCE
    )


def clean_text(value):
    """`value` with text no encoder takes made printable: h5py reads bytes of a damaged string
    that are not UTF-8 as lone surrogates, which neither print nor draw; each such byte becomes
    U+FFFD (a TOML text stays TOML). Lists, tuples and object arrays of text are cleaned element by element; what needs
    no cleaning is returned itself."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return value
    if isinstance(value, (list, tuple)):
        cleaned = [clean_text(v) for v in value]
        same = all(a is b for a, b in zip(cleaned, value, strict=True))
        return value if same else type(value)(cleaned)
    if isinstance(value, np.ndarray) and value.dtype.kind in "OU":
        items = value.reshape(-1).tolist()
        cleaned = [clean_text(v) for v in items]
        if all(a is b for a, b in zip(cleaned, items, strict=True)):
            return value
        return np.array(cleaned, dtype=value.dtype if value.dtype.kind == "O" else str).reshape(value.shape)
    return value


def scenario_of(ds: xr.Dataset) -> dict:
    """The scenario the sweep file holds, as a TOML document; one line if it does not parse."""
    import tomllib

    try:
        doc = tomllib.loads(str(ds.attrs["scenario"]))
    except (KeyError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise ScenarioError("", f"the scenario attribute of the file is damaged: {_problem(exc)}") from None
    if not isinstance(doc.get("scenario"), dict) or not all(isinstance(t, dict) for t in doc.values()):
        raise ScenarioError("", "the scenario attribute of the file is damaged: it lacks its tables")
    return doc


def _clean_attrs(attrs: dict) -> dict:
    cleaned = {clean_text(k): clean_text(v) for k, v in attrs.items()}
    same = all(cleaned.get(k) is v for k, v in attrs.items())
    return attrs if same else cleaned


def _guarded(ds: xr.Dataset, path: Path) -> xr.Dataset:
    """`ds` with every lazily read variable behind a :class:`_Guarded` array: reading errors
    become one ScenarioError, and outputs of not-ok points read as NaN; text (attributes, text
    coordinates and variables) made printable (:func:`clean_text`)."""
    from xarray.core import indexing

    bad = not_ok(ds)
    replaced = {}
    for name in ds.data_vars:  # the coordinates are read at open (they index the dataset)
        var = ds[name].variable
        data = var._data  # noqa: SLF001 - the backend's lazy array, rewrapped below
        if not isinstance(data, indexing.ExplicitlyIndexed):
            continue  # a dask array (dyn.engine.trajectories.follow) is not read from this file
        masked = bool(bad.any()) and is_masked(ds, name)
        guarded = _Guarded(
            data, str(path), name, bad if masked else None, _states_folder(path) if name == "trajectory" else None
        )
        lazy = indexing.MemoryCachedArray(indexing.CopyOnWriteArray(indexing.LazilyIndexedArray(guarded)))
        replaced[name] = xr.Variable(var.dims, lazy, _clean_attrs(var.attrs), var.encoding)
    out = ds.assign(replaced) if replaced else ds.copy()
    for name in out.coords:
        coord = out[name]
        values = coord.values
        cleaned, attrs = clean_text(values), _clean_attrs(coord.attrs)
        if cleaned is not values or attrs is not coord.attrs:
            out = out.assign_coords({name: (coord.dims, cleaned, attrs)})
    out.attrs = _clean_attrs(ds.attrs)
    out.set_close(ds.close)
    return out


def _states_folder(path: Path) -> Path:
    from ..engine.trajectories import sidecar_dir

    return sidecar_dir(path)


def _check_point_files(folder: Path) -> None:
    """Every file of the saved states' folder must be a regular file: HDF5 would wait for ever on
    a FIFO put there."""
    import stat

    try:
        entries = list(os.scandir(folder))
    except OSError:
        return  # no folder: the states read as NaN
    for entry in entries:
        try:
            regular = stat.S_ISREG(os.stat(entry.path).st_mode) or entry.is_dir()
        except OSError:
            continue  # a dangling link: HDF5 finds no file and reads NaN
        if not regular:
            raise ScenarioError(
                "",
                f"{entry.path} is not a regular file: the saved states of a point are HDF5 files written by `dyn run`",
            )


class _Guarded(BackendArray):
    """A variable of a sweep file, read lazily: any error of the HDF5 stack while reading it
    becomes a ScenarioError naming the file and the variable; with `mask` (boolean over the
    leading sweep axes), the values at masked points read as NaN."""

    def __init__(self, inner, path: str, name: str, mask: np.ndarray | None, folder: Path | None = None):
        self.inner, self.path, self.name, self.mask = inner, path, name, mask
        self.folder = folder  # the saved states' folder, whose files HDF5 opens to read them
        self.shape, self.dtype = tuple(inner.shape), inner.dtype

    def __getitem__(self, key):
        from xarray.core import indexing

        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._read)

    def _read(self, key: tuple):
        from xarray.core import indexing

        if self.folder is not None:
            _check_point_files(self.folder)
        try:
            data = np.asarray(self.inner[indexing.BasicIndexer(key)])
        except ScenarioError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the damaged file makes h5py raise
            raise ScenarioError(
                "", f"{self.path} is damaged: variable {self.name} cannot be read ({_problem(exc)})"
            ) from None
        if data.dtype.kind in "OU":
            data = clean_text(data)
        if self.mask is not None:
            hit = self.mask[key[: self.mask.ndim]]
            if np.any(hit):
                hit = np.reshape(hit, np.shape(hit) + (1,) * (data.ndim - np.ndim(hit)))
                data = np.where(hit, np.nan, data)
        return data


DIVERGED_POINTS, FAILED_POINTS = "diverged", "failed"  # marks of points that hold no value


def point_marks(ds: xr.Dataset, var: str) -> dict[str, xr.DataArray]:
    """Where `var` holds no value because its point is not ok (only the reasons with such points;
    none for a variable dyn.open does not mask): diverged (status 2) and failed (status 3, or a
    code no engine writes). Pending points are only blank."""
    if not is_masked(ds, var):
        return {}
    status = ds["status"].load()
    found = {DIVERGED_POINTS: status == DIVERGED, FAILED_POINTS: ~status.isin([PENDING, OK, DIVERGED])}
    return {reason: hit.rename(reason) for reason, hit in found.items() if bool(hit.any())}


def marks_for(ds: xr.Dataset, var: str) -> dict[str, xr.DataArray]:
    """The marks that apply to variable `var` (by its role), where any point is marked."""
    role = ds[var].attrs.get(ROLE_ATTR, "")
    return {reason: hit for reason, hit in unresolved(ds).items() if role in MARKED_ROLES[reason] and bool(hit.any())}


def completion(ds: xr.Dataset) -> dict[str, int]:
    """Points per status, and "unknown" for codes no engine writes (a damaged status byte)."""
    codes = ds["status"].values.reshape(-1)
    counts = {name: int(np.sum(codes == c)) for c, name in enumerate(STATUS_NAMES)}
    counts[UNKNOWN] = int(codes.size - sum(counts.values()))
    return counts


UNKNOWN = "unknown status"


def status_name(code) -> str:
    code = int(code)
    return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else f"{UNKNOWN} {code}"


def summary(path: str | Path) -> str:
    """Scenario, axes, variables and completion of a sweep file, as text."""
    with open(path) as ds:
        attrs = ds.attrs
        lines = [
            f"{path}",
            f"  scenario   {attrs.get('title', '?').removeprefix('dyn sweep: ')} (system {attrs.get('system', '?')})",
            f"  created    {attrs.get('created', '?')}  git {attrs.get('git_commit', '?')}",
            f"  command    {attrs.get('command', '?')}",
            f"  hash       {attrs.get('scenario_hash', '?')[:16]}",
        ]
        versions = json.loads(attrs.get("versions", "{}"))
        lines.append("  versions   " + ", ".join(f"{k} {v}" for k, v in versions.items() if v != "not installed"))
        lines.append("  dimensions")
        for dim, size in ds.sizes.items():
            values = ds[dim].values if dim in ds.coords else np.arange(size)
            lines.append(f"    {dim:<16} {size:>6}  {_span(values)}")
        lines.append("  variables")
        for name, var in ds.data_vars.items():
            if name == "status":
                continue
            units = f" [{var.attrs['units']}]" if var.attrs.get("units") else ""
            lines.append(f"    {name:<22} ({', '.join(var.dims)})  {var.attrs.get('long_name', '')}{units}")
        counts = completion(ds)
        total = sum(counts.values())
        done = total - counts["pending"]
        lines.append(
            f"  completion {done}/{total} points (" + ", ".join(f"{n} {k}" for k, n in counts.items() if n) + ")"
        )
        lines += _states_lines(ds, Path(path))
        for reason, hit in unresolved(ds).items():
            lines += _marked_lines(ds, reason, hit)
    return "\n".join(lines)


def _states_lines(ds: xr.Dataset, path: Path) -> list[str]:
    """Where the file declares saved states: a line when the folder that holds them
    (NAME.h5.d beside it), or the files of some ok points in it, are missing, since their
    states then read as NaN; none otherwise."""
    from ..engine.trajectories import DATASET, FOLDER_ATTR, point_file, sidecar_dir

    if DATASET not in ds:
        return []
    folder = sidecar_dir(path)
    named = folder.parent / str(ds[DATASET].attrs.get(FOLDER_ATTR, folder.name))
    if not folder.is_dir() and named.is_dir():
        folder = named
    ok = np.flatnonzero(np.asarray(ds["status"].values).reshape(-1) == OK)
    if not folder.is_dir():
        return [
            f"  states     MISSING: no folder {folder.name} beside the file: the saved states "
            f"of all {len(ok)} ok points read as NaN"
        ]
    lost = sum(not point_file(folder, int(i)).is_file() for i in ok)
    if lost:
        return [
            f"  states     MISSING for {lost} of the {len(ok)} ok points in {folder.name}: "
            "their saved states read as NaN"
        ]
    return []


def _evidence(ds: xr.Dataset, reason: str, at: dict) -> str:
    """The numbers behind a mark at one point."""

    def value(name):
        return float(ds[name].sel(at).values)

    if reason == HORIZON_LIMITED:
        name = undecided_variable(ds)
        return f"{name} = {value(name):.3f}"
    if reason == NONSTATIONARY:
        parts = [f"horizon_used = {value('horizon_used'):.4g}"]
        for name in with_role(ds, TIME_AVERAGE):
            if f"{name}_drift" in ds:
                parts.append(f"{name}_drift = {value(name + '_drift'):.2g} se")
        return ", ".join(parts)
    parts = []
    for name in with_role(ds, STEP_ERROR):
        base = name.removesuffix("_step_error")
        err, se = ds[name].sel(at), ds[base + "_se"].sel(at).values  # over dims: the worst element
        with np.errstate(divide="ignore", invalid="ignore"):
            i = np.unravel_index(np.nanargmax(np.nan_to_num(err.values / se, nan=-1.0)), se.shape)
        where = "".join(f", {d} = {_fmt(ds[d].values[k])}" for d, k in zip(err.dims, i, strict=True))
        if err.values[i] > se[i]:  # the outputs that mark the point
            parts.append(f"{name} = {err.values[i]:.3g} > {base}_se = {se[i]:.3g}{where}")
    return ", ".join(parts)


def _marked_lines(ds: xr.Dataset, reason: str, hit: xr.DataArray) -> list[str]:
    if not bool(hit.any()):
        return []
    where = np.argwhere(np.asarray(hit.values).reshape(hit.shape))
    lines = [f"  {reason} {len(where)} points ({WHY[reason]}):"]
    for index in where[:MAX_LISTED]:
        at = {dim: ds[dim].values[i] for dim, i in zip(hit.dims, index, strict=True)}
        lines.append("    " + ", ".join(f"{k} = {_fmt(v)}" for k, v in at.items()) + f"  ({_evidence(ds, reason, at)})")
    if len(where) > MAX_LISTED:
        lines.append(f"    ... and {len(where) - MAX_LISTED} more")
    return lines


def error_report(path: str | Path) -> str:
    """The error budget of a sweep file, as text (`dyn show --errors`): for every output, where
    its Monte Carlo error, step error and horizon status come from; then, point by point, each
    value with its Monte Carlo error (standard error, or the 95% Wilson interval), its step
    error where checked, and the marks of the point."""
    from ..engine.ensemble import HORIZON_ATTR, MC_ERROR, STEP_ERROR_ATTR

    with open(path) as ds:
        axes = list(ds["status"].dims)
        primaries = [n for n, v in ds.data_vars.items() if MC_ERROR in v.attrs]
        lines = [f"{path}: error budget", *settings_lines(ds), "  outputs"]
        for name in primaries:
            a = ds[name].attrs
            lines += [
                f"    {name}",
                f"      Monte Carlo  {a[MC_ERROR]}",
                f"      step         {a[STEP_ERROR_ATTR]}",
                f"      horizon      {a[HORIZON_ATTR]}",
            ]
        marks = unresolved(ds)
        lines.append("  points")
        status = ds["status"].values.reshape(ds["status"].shape)
        for index in np.ndindex(*status.shape):
            at = {dim: ds[dim].values[i] for dim, i in zip(axes, index, strict=True)}
            where = ", ".join(f"{k} = {_fmt(v)}" for k, v in at.items()) or "(the point)"
            flags = [r for r, hit in marks.items() if bool(hit.values[index])]
            state = status_name(status[index])
            lines.append(f"    {where}  [{state}{'; ' + ', '.join(flags) if flags else ''}]")
            if state != "ok":  # pending, diverged, failed: no numbers (dyn.open reads NaN)
                why = str(ds["message"].values[index]) if "message" in ds and state != "pending" else ""
                lines += [f"      why                    {why}"] if why else []
                continue
            point = ds.isel(dict(zip(axes, index, strict=True)))
            for name in primaries:
                lines.append(f"      {name:<22} {_budget_line(point, name)}")
    return "\n".join(lines)


STEP_ATTRS = ("dt_requested", "dt_used_min", "dt_used_max")  # dyn.engine.store.step_attributes


def settings_lines(ds: xr.Dataset) -> list[str]:
    """The settings the file was computed with, read from the file itself (the resolved scenario
    it stores, every default written out, and the steps the solver took), never from defaults of
    this version: the runs and seed, every [integrator] entry (check_step among them where the
    system reads it), the fixed step requested and used, and the per-point steps of dt = "auto"."""
    doc = scenario_of(ds)
    ensemble, integrator = doc.get("ensemble", {}), doc.get("integrator", {})
    lines = [
        "  settings",
        f"    ensemble     runs = {ensemble.get('runs', '?')}, seed = {ensemble.get('seed', '?')}"
        + (f", common = {ensemble['common']}" if ensemble.get("common") else ""),
    ]
    lines.append("    integrator   " + ", ".join(f"{k} = {setting_text(v)}" for k, v in integrator.items()))
    steps = {k: float(np.squeeze(ds.attrs[k])) for k in STEP_ATTRS if k in ds.attrs}
    if steps:
        lines.append("    step used    " + ", ".join(f"{k} = {v:.6g}" for k, v in steps.items()))
    if "dt_used" in ds:
        used = np.asarray(ds["dt_used"].values, dtype=float)
        if np.isfinite(used).any():
            lines.append(
                f"    step used    dt_used = {np.nanmin(used):.4g} .. {np.nanmax(used):.4g} "
                'over the points (dt = "auto")'
            )
    return lines


def _budget_line(point: xr.Dataset, name: str) -> str:
    """One output at one point: value and errors (for an output over its own dims, the range
    of its values and the largest standard error)."""
    v = point[name].values
    if v.ndim:
        se = point[f"{name}_se"].values if f"{name}_se" in point else None
        text = f"{np.nanmin(v):.4g} .. {np.nanmax(v):.4g} over {', '.join(point[name].dims)}"
        text += f", largest se {np.nanmax(se):.2g}" if se is not None and np.isfinite(se).any() else ""
        step = point[f"{name}_step_error"].values if f"{name}_step_error" in point else None
        return text + (f", largest step error {np.nanmax(step):.2g}" if step is not None else "")
    text = f"{float(v):.6g}"
    if f"{name}_se" in point:
        text += f" +- {float(point[name + '_se']):.2g} (se)"
    elif f"{name}_lo" in point:
        text += f" [{float(point[name + '_lo']):.4g}, {float(point[name + '_hi']):.4g}] (95%)"
    if f"{name}_step_error" in point:
        text += f", step error {float(point[name + '_step_error']):.2g} +- {float(point[name + '_step_error_se']):.2g}"
    if f"{name}_ess" in point:
        text += f", ess {float(point[name + '_ess']):.0f}"
    if f"{name}_median" in point and f"{name}_censored" in point:  # a censored time
        text += (
            f" (censored mean), median {_or_beyond(point[name + '_median'])} "
            f"[{_or_beyond(point[name + '_median_lower'])}, "
            f"{_or_beyond(point[name + '_median_upper'])}] (95%), censored share "
            f"{float(point[name + '_censored']):.3g}"
        )
    return text


def _or_beyond(value) -> str:
    """A censored time's statistic: NaN there means beyond the horizon (or too few runs)."""
    value = float(value)
    return f"{value:.4g}" if np.isfinite(value) else "> T"


def _span(values: np.ndarray) -> str:
    if values.size <= 6:
        return ", ".join(map(_fmt, values))
    return f"{_fmt(values[0])}, {_fmt(values[1])}, ..., {_fmt(values[-1])}"


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)
