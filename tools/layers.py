"""The structure drawing of the repository: the floors of `dyn/` and `integrators/`, the imports
between them, every import circle and every import that runs up a floor.

    python -m tools.layers                 # the drawing; exit status 1 on a circle or an upward import
    python -m tools.layers --modules       # and every import between units, module by module
    python -m tools.layers --dot FILE.dot  # also the unit graph as Graphviz text (`dot -Tsvg`)

The graph is read from the source (`ast`): no module is imported, so the check costs a parse of
each file. Every import statement counts, wherever it stands (module level, inside a function,
under `if TYPE_CHECKING`): an import deferred into a function still makes its module depend on
the one it names. `dyn/__init__.py` loads its public names on first use from tables
(:data:`FACADES`): `import dyn` then `dyn.run` is read as an import of dyn.engine.runner, the
module that name loads. What a module looks up by a name computed at run time (`importlib`'s
`import_module`: the registry's systems, the model packages found by folder) is not a static
import and draws no arrow; `--modules` lists where such lookups stand.

A *unit* is a package of the floors below (`dyn.core`, `dyn.attention`, ...; `integrators` is
one unit, its own subpackages drawn inside it); a *floor* is a set of units, and an import may
go to the same floor or down, never up. Units on one floor may import each other, but no import
circle may pass through them: a circle is a strongly connected set of modules (Tarjan), reported
with one closed path through it; a circle of units (a -> b in one module, b -> a in another) is
reported too. A module of `dyn/` or `integrators/` that no floor names is an error, so a new
package must be placed before it is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("integrators", "dyn")

# floor -> its units, bottom first (a unit is a package; its modules are the unit and below it).
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("integrators", ("integrators",)),
    ("core", ("dyn.core",)),
    ("numerics", ("dyn.numerics",)),
    ("models", ("dyn.attention", "dyn.noisy", "dyn.tokens_sde", "dyn.sinkformer", "dyn.resnet", "dyn.momentum")),
    ("systems", ("dyn.systems", "dyn.user")),
    ("engine", ("dyn.engine",)),
    ("presentation", ("dyn.presentation",)),
    ("package root", ("dyn",)),
    ("frontier", ("dyn.frontier",)),
)
# a package whose __init__ names its attributes in tables and imports them on first use
# (`dyn.run` -> dyn.engine.runner): `import dyn; dyn.NAME` depends on the module NAME loads
FACADES = {"dyn": ("_LAZY", "_MODULES", "SUBPACKAGES")}
WHAT = {
    "integrators": "stepping a state: numba, jax and diffrax backends, the numba ABI and njit",
    "core": "the contract every layer imports: System, RunSpec, Output, schema, sweep, errors",
    "numerics": "kernels the models share: attention field, vectorised exp, mean field",
    "models": "the mathematics of each model, callable on arrays",
    "systems": "what a sweep runs: the registry's systems, and dyn.user, the API users write theirs on",
    "engine": "running sweeps: scenario, executors, workers' lifetime, ensemble, store",
    "presentation": "the command line, plots, summaries, comparisons",
    "package root": "dyn/__init__.py (the public names, loaded on first use), dyn/__main__.py",
    "frontier": "models of papers written on the public API (`import dyn`), as a user writes one",
}


@dataclass(frozen=True)
class Edge:
    """`source` imports `target` (both module names) at `line` of the source's file."""

    source: str
    target: str
    line: int
    deferred: bool  # inside a function body


@dataclass
class Graph:
    root: Path
    modules: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)
    lookups: dict[str, list[int]] = field(default_factory=dict)  # module -> lines of import_module


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name `from ... import` reads from (its relative dots resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def facade_names(modules: dict[str, Path], facades=FACADES) -> dict[str, dict[str, str]]:
    """facade package -> {attribute: the module it loads}, read from the tables its __init__
    assigns (a dict of relative module names, or a tuple of subpackage names)."""
    found: dict[str, dict[str, str]] = {}
    for package, tables in facades.items():
        names: dict[str, str] = {}
        tree = ast.parse(modules[package].read_text())
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            if not isinstance(target, ast.Name) or target.id not in tables or node.value is None:
                continue
            value = ast.literal_eval(node.value)
            pairs = value.items() if isinstance(value, dict) else ((v, "." + v) for v in value)
            for name, relative in pairs:
                names[name] = package + relative if relative.startswith(".") else relative
        found[package] = names
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str:
    """The innermost module of the tree that holds `name` ("" when none does)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _targets(
    node: ast.stmt,
    module: str,
    is_package: bool,
    modules: dict[str, Path],
    facades: dict[str, dict[str, str]],
    attributes: dict[str, set[str]],
) -> list[str]:
    """The modules of the tree that one import statement names (the innermost one that exists:
    `from a.b import c` names a.b.c where c is a module, a.b where it is an attribute). A
    facade's attributes name the modules its tables load: `from dyn import run` and
    `import dyn` followed by `dyn.run` name dyn.engine.runner; `attributes` holds, per local
    name, the attributes the module reads of it."""
    names = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            local = alias.asname or alias.name
            if alias.name in facades and attributes.get(local):
                names += [facades[alias.name].get(a, alias.name) for a in sorted(attributes[local])]
            else:
                names.append(alias.name)
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(node, module, is_package)
        for alias in node.names:
            if f"{base}.{alias.name}" in modules:
                names.append(f"{base}.{alias.name}")
            elif base in facades:
                names.append(facades[base].get(alias.name, base))
            else:
                names.append(base)
    found = []
    for name in names:
        name = _resolve(name, modules)
        if name and name not in found:
            found.append(name)
    return found


def _is_lookup(node: ast.AST) -> bool:
    """Whether `node` calls ``import_module`` (``importlib.import_module(name)``): a module
    looked up by a name computed at run time, which the graph cannot follow."""
    if not isinstance(node, ast.Call):
        return False
    called = node.func
    return (isinstance(called, ast.Name) and called.id == "import_module") or (
        isinstance(called, ast.Attribute) and called.attr == "import_module"
    )


def _attributes(tree: ast.AST) -> dict[str, set[str]]:
    """local name -> the attributes read of it (`dyn.run` -> {"dyn": {"run"}})."""
    found: dict[str, set[str]] = defaultdict(set)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found[node.value.id].add(node.attr)
    return found


def _imports(tree: ast.AST) -> Iterable[tuple[ast.stmt, bool]]:
    """Every import statement of a module, and whether it stands inside a function."""

    def walk(node: ast.AST, deferred: bool):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, deferred
            inner = deferred or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from walk(child, inner)

    yield from walk(tree, False)


def read_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES, facades=FACADES) -> Graph:
    modules = find_modules(root, packages)
    tables = facade_names(modules, {p: t for p, t in facades.items() if p in modules})
    graph = Graph(root, modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        attributes = _attributes(tree)
        lines = [node.lineno for node in ast.walk(tree) if _is_lookup(node)]
        if lines:
            graph.lookups[name] = lines
        for node, deferred in _imports(tree):
            for target in _targets(node, name, is_package, modules, tables, attributes):
                if target != name:
                    graph.edges.append(Edge(name, target, node.lineno, deferred))
        for target in sorted(set(tables.get(name, {}).values())):  # what a facade loads by name
            target = _resolve(target, modules)
            if target and target != name:
                graph.edges.append(Edge(name, target, 0, True))
    return graph


def unit_of(module: str, floors=FLOORS, package: bool = False) -> str | None:
    """The longest unit of `floors` that holds `module` (dyn.core.spec -> dyn.core). A unit
    with other units inside it (`dyn`) holds only its own files: a subpackage (`package`: the
    module is a package's __init__) or module below it that no unit names stands on no floor."""
    units = [u for _, us in floors for u in us]
    best = None
    for unit in units:
        if not (module == unit or module.startswith(unit + ".")) or (best and len(unit) < len(best)):
            continue
        inner = module != unit and any(u.startswith(unit + ".") for u in units)
        if inner and (package or module.count(".") > unit.count(".") + 1):
            continue
        best = unit
    return best


def floor_of(unit: str, floors=FLOORS) -> int:
    return next(i for i, (_, units) in enumerate(floors) if unit in units)


def strongly_connected(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node (or a node importing
    itself), each sorted; iterative, so deep graphs do not reach Python's recursion limit."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = _pop_component(stack, on_stack, node)
                if len(component) > 1 or node in edges.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def _pop_component(stack: list[str], on_stack: set[str], root: str) -> list[str]:
    """Tarjan's step at a root: the nodes of the stack down to `root`, taken off it."""
    component = stack[stack.index(root) :]
    del stack[len(stack) - len(component) :]
    on_stack.difference_update(component)
    return component


def closed_path(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One circle through a strongly connected set: a shortest way from its first node back to
    itself (breadth first, inside the set)."""
    members = set(component)
    start = component[0]
    previous = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges.get(node, ())):
                if child == start:
                    path = [node]
                    while previous[path[-1]] is not None:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child in members and child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start]


@dataclass
class Report:
    graph: Graph
    unplaced: list[str]
    upward: list[Edge]
    module_circles: list[list[str]]
    unit_circles: list[list[str]]
    unit_edges: dict[tuple[str, str], list[Edge]]
    units: dict[str, str | None]  # module -> its unit

    @property
    def faults(self) -> int:
        return len(self.unplaced) + len(self.upward) + len(self.module_circles) + len(self.unit_circles)


def check(graph: Graph, floors=FLOORS) -> Report:
    unit = {m: unit_of(m, floors, path.name == "__init__.py") for m, path in graph.modules.items()}
    unplaced = sorted(m for m, u in unit.items() if u is None)
    module_edges: dict[str, set[str]] = defaultdict(set)
    unit_edges: dict[tuple[str, str], list[Edge]] = defaultdict(list)
    upward = []
    for edge in graph.edges:
        module_edges[edge.source].add(edge.target)
        source, target = unit[edge.source], unit[edge.target]
        if source is None or target is None or source == target:
            continue
        unit_edges[(source, target)].append(edge)
        if floor_of(target, floors) > floor_of(source, floors):
            upward.append(edge)
    units = {u for _, us in floors for u in us}
    unit_graph: dict[str, set[str]] = defaultdict(set)
    for source, target in unit_edges:
        unit_graph[source].add(target)
    return Report(
        graph,
        unplaced,
        upward,
        strongly_connected(graph.modules, module_edges),
        strongly_connected(units, unit_graph),
        dict(unit_edges),
        unit,
    )


def _short(unit: str) -> str:
    return unit.removeprefix("dyn.") if unit != "dyn" else "dyn"


def _floors_text(report: Report, floors) -> list[str]:
    """The floors top down, each unit with its module count and the units it imports."""
    counts: dict[str, int] = defaultdict(int)
    for unit in report.units.values():
        if unit is not None:
            counts[unit] += 1
    imports: dict[str, set[str]] = defaultdict(set)
    for source, target in report.unit_edges:
        imports[source].add(target)
    lines = ["floors of dyn/ and integrators/, top down; an import may go across a floor or down", ""]
    for number in reversed(range(len(floors))):
        name, units = floors[number]
        lines.append(f"{number}  {name}: {WHAT.get(name, '')}")
        for unit in units:
            below = sorted(imports[unit], key=lambda u: (-floor_of(u, floors), u))
            names = ", ".join(_short(u) for u in below) or "-"
            lines.append(f"     {_short(unit):<13} {counts[unit]:>3} modules  -> {names}")
        if number:
            lines.append("   |")
    return [*lines, ""]


def _imports_text(report: Report) -> list[str]:
    """Every import between units, module by module, and where modules are looked up by name."""
    lines = ["imports between units (module:line -> module; * inside a function):"]
    for (source, target), edges in sorted(report.unit_edges.items()):
        lines.append(f"  {_short(source)} -> {_short(target)}")
        for edge in sorted(edges, key=lambda e: (e.source, e.line)):
            mark = "*" if edge.deferred else " "
            lines.append(f"    {edge.source}:{edge.line}{mark} -> {edge.target}")
    lines += ["", "modules looked up by name at run time (import_module; no arrow drawn):"]
    for module, at in sorted(report.graph.lookups.items()):
        lines.append(f"  {module}: line {', '.join(map(str, sorted(at)))}")
    return [*lines, ""]


def _faults_text(report: Report) -> list[str]:
    """The counts, then each circle (one closed path), upward import and unplaced module."""
    module_graph: dict[str, set[str]] = defaultdict(set)
    for edge in report.graph.edges:
        module_graph[edge.source].add(edge.target)
    lines = [
        f"{len(report.graph.modules)} modules, {len(report.graph.edges)} imports; "
        f"{len(report.module_circles)} module circles, {len(report.unit_circles)} unit "
        f"circles, {len(report.upward)} upward imports, {len(report.unplaced)} modules on "
        "no floor"
    ]
    for component in report.module_circles:
        lines.append("  circle: " + " -> ".join(closed_path(component, module_graph)))
    for component in report.unit_circles:
        lines.append("  unit circle: " + ", ".join(_short(u) for u in component))
    for edge in report.upward:
        mark = " (inside a function)" if edge.deferred else ""
        where = report.graph.modules[edge.source].relative_to(report.graph.root)
        lines.append(f"  upward: {edge.source} -> {edge.target} ({where}:{edge.line}){mark}")
    for module in report.unplaced:
        lines.append(f"  on no floor: {module}")
    return lines


def drawing(report: Report, floors=FLOORS, modules: bool = False) -> str:
    """The structure drawing: the floors, with `modules` every import between units, then the
    faults."""
    lines = _floors_text(report, floors) + (_imports_text(report) if modules else [])
    return "\n".join(lines + _faults_text(report))


def dot(report: Report, floors=FLOORS) -> str:
    """The unit graph as Graphviz text, one rank per floor (top floor first)."""
    lines = ["digraph layers {", "  rankdir=TB; node [shape=box, fontname=Helvetica];"]
    for number in reversed(range(len(floors))):
        name, units = floors[number]
        members = " ".join(f'"{_short(u)}";' for u in units)
        lines.append(f'  subgraph "cluster_{number}" {{ label="{number} {name}"; rank=same; {members} }}')
    upward = {(report.units[e.source], report.units[e.target]) for e in report.upward}
    for (source, target), edges in sorted(report.unit_edges.items()):
        style = ", color=red, penwidth=2" if (source, target) in upward else ""
        lines.append(f'  "{_short(source)}" -> "{_short(target)}" [label="{len(edges)}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.layers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", action="store_true", help="list every import between units")
    parser.add_argument("--dot", metavar="FILE", help="write the unit graph as Graphviz text")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    args = parser.parse_args(argv)
    report = check(read_graph(args.root))
    print(drawing(report, modules=args.modules))
    if args.dot:
        Path(args.dot).write_text(dot(report))
    return 1 if report.faults else 0


if __name__ == "__main__":
    sys.exit(main())
