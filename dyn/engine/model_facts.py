"""What the readers need of a system, written into the sweep file as data when it is made.

Reading a file never imports the code that the file names (a results file is often someone
else's), so a picture takes from the file itself what it would otherwise ask the system:

- ``dyn_default_plot`` (root attribute): the variable `dyn plot` draws when neither ``--var``
  nor the scenario's ``[output] plot`` names one;
- ``dyn_param_defaults`` (root attribute, JSON object): the default of every scalar parameter,
  so that a title names the fixed parameters that differ from them.

Labels need nothing here: every variable and coordinate already carries its ``long_name`` and
``units``. A reference's numbers carry a checksum of their own (``dyn_checksum``, see
:func:`values_checksum`), as a point's do: CRC-32 of the values and of the theory grid they lie
on, which readers check and a resume recomputes.
"""

from __future__ import annotations

import json
import math
import zlib

import numpy as np

DEFAULT_PLOT_ATTR = "dyn_default_plot"
DEFAULTS_ATTR = "dyn_param_defaults"
CHECKSUM_ATTR = "dyn_checksum"


def attributes(system) -> dict[str, str]:
    """The root attributes of a sweep file made for `system` (module doc)."""
    defaults = {}
    for name, field in system.params.items():
        value = field.default
        if isinstance(value, (bool, int, str)) or (isinstance(value, float) and math.isfinite(value)):
            defaults[name] = value
    return {DEFAULT_PLOT_ATTR: str(system.default_plot), DEFAULTS_ATTR: json.dumps(defaults, sort_keys=True)}


def values_checksum(values, *grids) -> int:
    """CRC-32 of `values` as float64 in C order, then of each of `grids` (the values of the
    coordinates it lies on other than the sweep axes: a theory grid, the save times), numbers
    as float64 and text as UTF-8 separated by NUL bytes."""
    crc = zlib.crc32(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    for grid in grids:
        grid = np.asarray(grid)
        if grid.dtype.kind in "biuf":
            data = np.ascontiguousarray(grid, dtype=np.float64).tobytes()
        else:
            data = "\0".join(_text(v) for v in grid.reshape(-1).tolist()).encode("utf-8", "replace")
        crc = zlib.crc32(data, crc)
    return crc


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
