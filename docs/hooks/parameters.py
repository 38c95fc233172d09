"""mkdocs hook: the parameter reference (reference/parameters.md), written at build time from
dyn's registry, so that it cannot drift from the code.

For each registered system: its parameters (the `Field` declarations of `System.params`: kind,
default, bounds or choices, whether it may be swept, doc), its outputs (`System.outputs(setup)`
for the system's defaults: name, long name, units, own dimensions, reduction), the `[integrator]`
keys it reads, its backends and methods, and the shipped scenarios that use it.

`markdown()` is plain Python (the tests call it without mkdocs); `on_files` adds its text to the
site as a generated page.
"""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = "reference/parameters.md"
# the [integrator] defaults a system's outputs are listed for (an SDE system takes no rk4)
SDE_DEFAULTS = {"method": "euler_maruyama", "dt": 0.01}


def _value(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def _cell(text: str) -> str:
    """Table-cell text: pipes escaped, one line."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _bounds(field) -> str:
    parts = []
    if field.choices:
        parts.append("one of " + ", ".join(f"`{c}`" for c in field.choices))
    if field.gt is not None:
        parts.append(f"> {field.gt:g}")
    if field.lo is not None:
        parts.append(f">= {field.lo:g}")
    if field.hi is not None:
        parts.append(f"<= {field.hi:g}")
    if field.auto:
        parts.append('or `"auto"`')
    return "; ".join(parts)


def _default(field) -> str:
    from dyn.core.schema import REQUIRED

    return "required" if field.default is REQUIRED else f"`{_value(field.default)}`"


def _setup(system):
    """The setup of a scenario that gives the system nothing but its name (its defaults)."""
    from dyn.engine import scenario

    doc = {"scenario": {"name": "reference", "system": system.name}}
    if system.equation == "sde":
        doc["integrator"] = {k: v for k, v in SDE_DEFAULTS.items()
                             if k == "method" or k in system.integrator}
    return scenario.resolve(doc, "parameter reference").setup


def _methods(system) -> list[tuple[str, list[str]]]:
    """(backend, methods) the system's scenarios may choose."""
    import integrators

    if "backend" not in system.integrator:
        return []
    found = []
    for backend in ("numba", "diffrax"):
        methods = integrators.available()[backend]
        if system.equation is not None:
            sde = system.equation == "sde"
            methods = [m for m in methods if (m in integrators.SDE_METHODS) == sde]
        found.append((backend, methods))
    if system.jax_methods:
        found.append(("jax", sorted(system.jax_methods)))
    return found


def shipped_scenarios() -> dict[str, list[str]]:
    """{system: [scenario names]} of the files in scenarios/."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        with path.open("rb") as f:
            table = tomllib.load(f).get("scenario", {})
        found.setdefault(table.get("system", ""), []).append(path.stem)
    return found


def system_section(name: str, scenarios: list[str]) -> str:
    from dyn import systems

    system = systems.get(name)
    lines = [f"## `{name}`", "", _cell(system.description) + ".", ""]
    if scenarios:
        lines += ["Shipped scenarios: " + ", ".join(f"`{s}`" for s in scenarios) + ".", ""]
    lines += ["**Parameters** (`[params]`, or a `[sweep]` axis where sweepable)", "",
              "| key | kind | default | admissible | sweepable | meaning |",
              "|---|---|---|---|---|---|"]
    for key, field in system.params.items():
        lines.append(f"| `{key}` | {field.kind} | {_cell(_default(field))} | {_cell(_bounds(field))} | "
                     f"{'yes' if field.sweepable else 'no'} | {_cell(field.doc)} |")
    lines += ["", "**Outputs** (at the system's defaults; some depend on the parameters)", "",
              "| name | long name | units | own dims | reduction |", "|---|---|---|---|---|"]
    for output in system.outputs(_setup(system)):
        dims = ", ".join(output.dims)
        lines.append(f"| `{output.name}` | {_cell(output.long_name)} | {_cell(output.units)} | "
                     f"{_cell(dims)} | {output.reduce} |")
    lines.append("")
    methods = _methods(system)
    if methods:
        kind = {"ode": "an ODE", "sde": "an SDE"}.get(system.equation or "", "its equations")
        lines += [f"**Solver**: {kind}; `[integrator]` keys read: "
                  + ", ".join(f"`{k}`" for k in sorted(system.integrator)) + ".", ""]
        lines += [f"- `{backend}`: " + ", ".join(f"`{m}`" for m in ms) for backend, ms in methods]
    else:
        keys = ", ".join(f"`{k}`" for k in sorted(system.integrator)) or "none"
        lines += [f"**Solver**: none to choose (the system computes its values itself); "
                  f"`[integrator]` keys read: {keys}."]
    lines.append("")
    return "\n".join(lines)


def markdown() -> str:
    """The whole page."""
    from dyn import systems

    scenarios = shipped_scenarios()
    names = systems.names()
    head = ["# Parameter reference", "",
            "Generated from dyn's registry when the site is built: every system's parameters "
            "(the schema that checks each scenario file), its outputs, and the solvers it takes. "
            "Keys are given in a scenario's `[params]` table, or swept in `[sweep]`; "
            "`--set params.KEY=VALUE` overrides them from the command line.", "",
            "Systems: " + ", ".join(f"[`{n}`](#{n})" for n in names) + ".", ""]
    return "\n".join(head + [system_section(n, scenarios.get(n, [])) for n in names])


def on_files(files, config):
    """mkdocs event: add the generated page to the site."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=markdown()))
    return files
