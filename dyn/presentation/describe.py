"""What a system is, from the code that declares it: `dyn list SYSTEM` (`dyn describe SYSTEM`)
and `dyn.describe(name)`.

A system's parameters are its schema (`System.params`: type, default, bounds, doc), its outputs
what `System.outputs(setup)` declares at the default parameters (some appear only at other
settings: those the shipped scenarios bring are listed apart, with the scenario), its backends
and methods what the scenario check admits (dyn.engine.scenario._check_integrator), and its
scenarios the shipped files naming it. Nothing is run and nothing is compiled.
"""

from __future__ import annotations

import textwrap
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ScenarioError, did_you_mean
from ..core.schema import REQUIRED, Field

WIDTH = 100  # the text's line width (docs are wrapped to it)


@dataclass(frozen=True)
class Parameter:
    """One entry of the system's [params] (a [sweep] axis too when `sweepable`)."""

    name: str
    kind: str  # "int", "float", "str", "bool", "matrix", "matrices", "names"
    default: object  # REQUIRED's text "required", or the value (None: unset, optional)
    bounds: str  # "> 0", ">= 2, <= 64", "one of: a, b", or ""
    doc: str
    sweepable: bool

    def __str__(self) -> str:
        default = "required" if self.default == "required" else f"default {setting_text(self.default)}"
        head = f"{self.name:<22} {self.kind:<8} {default}"
        head += f"; {self.bounds}" if self.bounds else ""
        head += "" if self.sweepable else "; cannot be swept"
        return head + (_wrapped(self.doc) if self.doc else "")


@dataclass(frozen=True)
class OutputInfo:
    """One declared output: its reduction over runs and the file variables it makes."""

    name: str
    long_name: str
    units: str
    dims: tuple[str, ...]
    reduce: str
    variables: tuple[str, ...]  # the file variables (itself and its companions)
    scenarios: tuple[str, ...] = ()  # where only shipped scenarios bring it: their names

    def __str__(self) -> str:
        units = f" [{self.units}]" if self.units else ""
        over = f" over ({', '.join(self.dims)})" if self.dims else ""
        head = f"{self.name:<22} {self.reduce}{over}{units}"
        extra = [v for v in self.variables if v != self.name]
        if extra:
            head += f"; with {', '.join(extra)}"
        if self.scenarios:
            head += f"; in {', '.join(self.scenarios)}"
        return head + _wrapped(self.long_name)


@dataclass(frozen=True)
class SystemDescription:
    """What `dyn.describe` returns; str() is the text `dyn list SYSTEM` prints."""

    name: str
    description: str
    equation: str | None  # "ode", "sde", or None (the system solves no equation by a method)
    integrator_keys: tuple[str, ...]  # the [integrator] keys it reads
    backends: dict[str, tuple[str, ...]]  # backend -> its methods for this system
    parameters: tuple[Parameter, ...]
    outputs: tuple[OutputInfo, ...]  # at the default parameters
    other_outputs: tuple[OutputInfo, ...] = ()  # only at other settings (shipped scenarios)
    scenarios: tuple[str, ...] = ()  # shipped scenarios running it
    default_plot: str = ""
    notes: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        lines = [f"{self.name}: {self.description}"]
        lines += [f"  {note}" for note in self.notes]
        equation = {"ode": "an ODE", "sde": "an SDE"}.get(self.equation or "", "no equation by a method")
        keys = ", ".join(self.integrator_keys) or "none"
        lines.append(f"  solves {equation}; reads [integrator] {keys}")
        lines.append("  backends and methods")
        lines += [f"    {b:<8} {', '.join(m)}" for b, m in self.backends.items()] or [
            "    none: it chooses its own steps"
        ]
        lines.append("  parameters ([params], or a [sweep] axis)")
        lines += [_indented(str(p)) for p in self.parameters]
        lines.append("  outputs (at the default parameters: reduction over runs; file variables)")
        lines += [_indented(str(o)) for o in self.outputs]
        if self.other_outputs:
            lines.append("  outputs at other settings (those of the shipped scenarios named)")
            lines += [_indented(str(o)) for o in self.other_outputs]
        if self.default_plot:
            lines.append(f"  default plot: {self.default_plot}")
        lines.append("  shipped scenarios: " + (", ".join(self.scenarios) or "none"))
        return "\n".join(lines)


def describe(name: str) -> SystemDescription:
    """The parameters, outputs, backends and methods and shipped scenarios of system `name`
    (or of the system a shipped scenario of that name runs; or an import path module:Class,
    found beside the shipped scenarios or on sys.path). Returns a SystemDescription, whose
    str() is the text of `dyn list NAME`. Raises ScenarioError (one line, with the nearest
    names) when `name` is neither a system nor a shipped scenario, or names a module or class
    that cannot be loaded."""
    from .. import systems

    if not isinstance(name, str):
        raise ScenarioError("", f"a system is named by a string, got {type(name).__name__}")
    shipped = shipped_scenarios()
    notes = ()
    if name not in systems.names() and name in shipped:
        notes = (f"(scenario {name} runs system {shipped[name]})",)
        name = shipped[name]
    from ..user import locate

    if name not in systems.names() and not locate.is_import_path(name):
        near = did_you_mean(name, [*systems.names(), *shipped])
        raise ScenarioError(
            "", f"unknown system {name!r}{near}; `dyn list` lists the systems and the shipped scenarios"
        )
    from ..engine.scenario import SCENARIO_DIR

    system = systems.get(name, near=Path(SCENARIO_DIR))  # an import path: beside the scenarios
    mine = tuple(sorted(s for s, sys_name in shipped.items() if sys_name == name))
    outputs, other = _outputs(system, name, mine)
    return SystemDescription(
        name=name,
        description=system.description,
        equation=system.equation,
        integrator_keys=tuple(sorted(system.integrator)),
        backends=_backends(system),
        parameters=tuple(_parameter(k, f) for k, f in system.params.items()),
        outputs=outputs,
        other_outputs=other,
        scenarios=mine,
        default_plot=getattr(system, "default_plot", ""),
        notes=notes,
    )


def listed_systems() -> list[str]:
    """What `dyn list` and the parameter reference list: the registered systems (the package's
    and installed packages'), then the import paths (module:Class) the shipped scenarios name."""
    from .. import systems
    from ..user import locate

    named = sorted({s for s in shipped_scenarios().values() if locate.is_import_path(s)})
    return systems.names() + named


def shipped_scenarios() -> dict[str, str]:
    """Shipped scenario name -> the system it runs (read from the files' [scenario] tables)."""
    from ..engine.scenario import SCENARIO_DIR

    found = {}
    for path in sorted(Path(SCENARIO_DIR).glob("*.toml")):
        try:
            head = tomllib.loads(path.read_text()).get("scenario", {})
        except (OSError, tomllib.TOMLDecodeError):
            continue
        found[path.stem] = str(head.get("system", ""))
    return found


def _parameter(name: str, f: Field) -> Parameter:
    bounds = []
    if f.gt is not None:
        bounds.append(f"> {f.gt:g}")
    if f.lo is not None:
        bounds.append(f">= {setting_text(f.lo)}")
    if f.hi is not None:
        bounds.append(f"<= {setting_text(f.hi)}")
    if f.choices:
        bounds.append("one of: " + ", ".join(f.choices))
    if f.auto:
        bounds.append('or "auto"')
    default = "required" if f.default is REQUIRED else f.default
    return Parameter(name, f.kind, default, ", ".join(bounds), f.doc, f.sweepable)


def _backends(system) -> dict[str, tuple[str, ...]]:
    """The methods each backend offers this system, as the scenario check admits them: a
    model whose field has one form (numba's `drift`, or JAX's `drift_jax` or gradient) is
    offered the backends that run that form only."""
    if "method" not in system.integrator:
        return {}
    import integrators

    has_form = getattr(system, "has_form", None)
    found = {}
    for backend, methods in integrators.available().items():
        if has_form is not None and not has_form("numba" if backend == "numba" else "jax"):
            continue
        if backend == "jax":
            methods = sorted(system.jax_methods)
        elif system.equation is not None:
            sde = system.equation == "sde"
            methods = [m for m in methods if (m in integrators.SDE_METHODS) == sde]
        if methods:
            found[backend] = tuple(methods)
    return found


def _outputs(system, name: str, scenarios: tuple[str, ...]) -> tuple[tuple[OutputInfo, ...], tuple[OutputInfo, ...]]:
    """The outputs at the default parameters, and those only the shipped scenarios bring."""
    from ..engine.scenario import SCENARIO_DIR, load

    default = _default_scenario(system, name)
    at_default = _infos(system, default.setup) if default is not None else []
    known = {o.name for o in at_default}
    brought: dict[str, tuple[OutputInfo, list[str]]] = {}
    for name in scenarios:
        try:
            # its outputs need its setup, not a check of every point of its sweep
            scenario = load(Path(SCENARIO_DIR) / f"{name}.toml", points=False)
        except ScenarioError:
            continue
        for info in _infos(system, scenario.setup):
            if info.name not in known:
                brought.setdefault(info.name, (info, []))[1].append(name)
    other = tuple(OutputInfo(**{**info.__dict__, "scenarios": tuple(where)}) for info, where in brought.values())
    return tuple(at_default), other


def _default_scenario(system, name: str):
    """The system `name` (registered, or an import path) at its default parameters (with the
    first method of its kind of equation when the default method is not one, then on each of its
    backends when the default backend is not one), or None where it has required parameters."""
    from ..engine.scenario import resolve

    doc = {"scenario": {"name": "describe", "system": name}}
    tries = [doc]
    for methods in _backends(system).values():
        tries.append({**doc, "integrator": {"method": methods[0]}})
        break
    for backend, methods in _backends(system).items():  # a system without the default backend
        tries.append({**doc, "integrator": {"backend": backend, "method": methods[0]}})
    for attempt in tries:
        try:
            return resolve(attempt)
        except ScenarioError:
            continue
    return None


def _infos(system, setup) -> list[OutputInfo]:
    from ..engine.reductions import companions

    found = []
    for out in system.outputs(setup):
        if out.reduce == "time_average":
            from ..engine.averaging import point_outputs

            variables = [o.name for o in point_outputs([out])][:5]
        else:
            variables = [o.name for o in companions(out)]
        found.append(OutputInfo(out.name, out.long_name, out.units, tuple(out.dims), out.reduce, tuple(variables)))
    return found


def setting_text(v) -> str:
    """A setting as a scenario file writes it: true/false, 4, 0.01, "rk4"; None as unset."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, str):
        return f'"{v}"'
    if v is None:
        return "none (unset)"
    return str(v)


def _wrapped(text: str) -> str:
    return "\n" + textwrap.fill(text, WIDTH - 8, initial_indent="    ", subsequent_indent="    ")


def _indented(text: str) -> str:
    return textwrap.indent(text, "    ")
