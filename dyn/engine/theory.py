"""What a resume checks of the numbers a sweep file holds besides its points: the references
(theory curves: boundaries, closed forms) and the coordinates that are not sweep axes (theory
grids, save times). They are written once when the file is made and are never computed again
by the points, so a damaged one would stay for good; a resume checks them against what the
scenario makes and writes the right values back in place (data bytes only, as a point's write).

A reference written with a checksum (``dyn_checksum``, :func:`dyn.engine.model_facts.values_checksum`)
whose values no longer match it is computed again; when the values computed again do not match
the checksum either (the checksum itself is damaged, or the theory is no longer the one that
made the file), the resume is refused in one line. A reference of a file written without one is
compared with the values computed again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import h5py
import numpy as np

from .ensemble import coords as system_coords, references
from .model_facts import CHECKSUM_ATTR, values_checksum

if TYPE_CHECKING:
    from .scenario import Scenario


def expected_coords(scenario: Scenario) -> dict[str, np.ndarray]:
    """The values of every coordinate of the file that is not a sweep axis, as made."""
    system, setup = scenario.system, scenario.setup
    found = {dim: np.asarray(c.values) for dim, c in system_coords(system, setup).items()}
    for ref in references(system, setup):
        for dim, coord in ref.coords.items():
            found.setdefault(dim, np.asarray(coord.values))
    return {dim: v for dim, v in found.items() if dim not in scenario.axes}


def grids(dims, coords: dict[str, np.ndarray], axes) -> list[np.ndarray]:
    """The coordinates a reference over `dims` lies on, other than the sweep `axes`, in order."""
    return [coords[d] for d in dims if d not in axes and d in coords]


def repairs(f: h5py.File, scenario: Scenario) -> tuple[dict[str, np.ndarray], str]:
    """(name -> values to write back in place, problem): what of the open file's references and
    non-sweep coordinates differs from what the scenario makes, and the words of a damage that
    cannot be repaired ("" if none)."""
    fixes: dict[str, np.ndarray] = {}
    coords = expected_coords(scenario)
    for dim, values in coords.items():
        stored = f.get(dim)
        if not isinstance(stored, h5py.Dataset) or stored.shape != values.shape:
            return {}, f"coordinate {dim} is missing or has another shape"
        if values.dtype.kind not in "biuf" or stored.dtype.kind not in "biuf":
            continue  # text coordinates: the layout check reads them
        now = np.asarray(stored[()])
        want = values.astype(stored.dtype)
        if not np.array_equal(now, want, equal_nan=now.dtype.kind == "f"):
            fixes[dim] = want
    for ref in references(scenario.system, scenario.setup):
        stored = f.get(ref.name)
        fresh = np.asarray(ref.values, dtype=np.float64)
        if not isinstance(stored, h5py.Dataset) or stored.shape != fresh.shape:
            return {}, f"reference {ref.name} is missing or has another shape"
        on = grids(ref.dims, coords, scenario.axes)
        now = np.asarray(stored[()], dtype=np.float64)
        recorded = stored.attrs.get(CHECKSUM_ATTR)
        if recorded is None:  # a file made without reference checksums
            if not np.array_equal(now, fresh, equal_nan=True):
                fixes[ref.name] = fresh
            continue
        try:
            recorded = int(np.asarray(recorded).reshape(()))
        except (TypeError, ValueError):
            return {}, f"the checksum of reference {ref.name} is damaged"
        if recorded == values_checksum(now, *on):
            continue
        if recorded != values_checksum(fresh, *on):
            return {}, (f"reference {ref.name} does not match its checksum, and computing it again gives other numbers")
        fixes[ref.name] = fresh
    return fixes, ""


def write_back(path, fixes: dict[str, np.ndarray]) -> None:
    """Write each of `fixes` over its variable's values in place (a contiguous dataset: data
    bytes only, no HDF5 metadata changes), flushed."""
    with h5py.File(path, "r+", locking=False) as f:
        for name, values in fixes.items():
            f[name][...] = values
        f.flush()
