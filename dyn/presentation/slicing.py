"""`dyn plot --sel AXIS=VALUE`: one value of a dimension taken out of the whole file before a
variable is drawn (so that a variable with too many axes for one picture, or a heat map one wants
as a curve, is drawn as a slice).

A numeric dimension takes its nearest value (a value outside its range is refused), another its
exact value. Theory grids that lie along the axis (a coordinate whose `dyn_axis` names it, e.g.
`beta_theory` for `beta`) are cut at their nearest value too, so that what the system drew over
the variable (sigma_c(beta), mean-field branches) is cut with it; where the value lies off such a
grid (the fold, which exists only above some beta) what lies along it is left out. Bad choices are one line
(:class:`ScenarioError` naming `--sel`).
"""

from __future__ import annotations

import numpy as np

from ..core.contract import AXIS_ATTR
from ..core.errors import ScenarioError, short_repr
from .words import value_text

TOLERANCE = 1e-9  # relative slack of a value at the ends of a dimension


def parse(items: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """[(dim, value text)] from "AXIS=VALUE" items (an item may hold several, comma-separated)."""
    found = []
    for item in (part for text in items for part in text.split(",")):
        dim, sep, text = (s.strip() for s in item.partition("="))
        if not sep or not dim or not text:
            raise ScenarioError("--sel", f"expected AXIS=VALUE, got {short_repr(item)}")
        if dim in (d for d, _ in found):
            raise ScenarioError("--sel", f"{dim} is chosen twice")
        found.append((dim, text))
    return found


def _value(ds, dim: str, text: str):
    values = np.asarray(ds[dim].values)
    if values.dtype.kind in "fiu":
        try:
            value = float(text)
        except ValueError:
            raise ScenarioError("--sel", f"{dim}: expected a number, got {short_repr(text)}") from None
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        slack = TOLERANCE * max(high - low, abs(high), abs(low), 1.0)
        if not np.isfinite(value) or value < low - slack or value > high + slack:
            raise ScenarioError("--sel", f"{dim} = {value:g} is out of its range [{low:g}, {high:g}]")
        return values[int(np.argmin(np.abs(values.astype(float) - value)))]
    names = [str(v) for v in values]
    if text not in names:
        raise ScenarioError("--sel", f"{dim}: {short_repr(text)} is not one of its values ({', '.join(names)})")
    return values[names.index(text)]


def select(ds, items: list[str] | tuple[str, ...] = ()):
    """(the dataset cut at each chosen value, {dim: the value taken}); `ds` itself when nothing
    is chosen."""
    chosen = {}
    for dim, text in parse(items):
        if dim not in ds.dims or dim not in ds.coords:
            known = ", ".join(d for d in ds.dims if d in ds.coords and not ds[d].attrs.get(AXIS_ATTR))
            raise ScenarioError("--sel", f"unknown dimension {short_repr(dim)} (dimensions: {known})")
        value = _value(ds, dim, text)
        cut = {dim: value}
        numeric = np.asarray(ds[dim].values).dtype.kind in "fiu"
        grids = [g for g in ds.dims if g in ds.coords and ds[g].attrs.get(AXIS_ATTR) == dim]
        ds = ds.sel(cut)
        for grid in grids if numeric else ():
            along = np.asarray(ds[grid].values, dtype=float)
            step = np.max(np.diff(np.sort(along))) if along.size > 1 else 0.0
            if along.min() - step <= float(value) <= along.max() + step:
                ds = ds.sel({grid: float(value)}, method="nearest")
            else:  # theory that has no value there (a fold that exists only above some beta)
                ds = ds.drop_vars([v for v in ds.variables if grid in ds[v].dims])
        chosen[dim] = value
    return ds, chosen


def words(chosen: dict) -> str:
    """ "beta = 2, time = 0.5" for a title."""
    return ", ".join(
        f"{dim} = {value_text(value.item() if hasattr(value, 'item') else value)}" for dim, value in chosen.items()
    )
