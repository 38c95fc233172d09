"""mkdocs hook: the parameter reference (reference/parameters.md), written at build time from
dyn's registry through `dyn.describe` (what `dyn list SYSTEM` prints), so that the site and the
command line say the same and neither can drift from the code.

For each registered system, and each system a shipped scenario names by import path
(module:Class): its parameters (the schema: kind, default, bounds or choices,
whether it may be swept, doc), its outputs (at the system's defaults, and those only some shipped
scenarios bring: name, long name, units, own dimensions, reduction, the file variables it makes),
the `[integrator]` keys it reads, its backends and methods, and the shipped scenarios that run it.

`markdown()` is plain Python (the tests call it without mkdocs); `on_files` adds its text to the
site as a generated page.
"""

from __future__ import annotations

PAGE = "reference/parameters.md"


def _cell(text) -> str:
    """Table-cell text: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# what Markdown or the site would read as markup in the registry's plain text: a tag (`<x_i, x_j>`
# would vanish in the browser), an entity, emphasis (`k*`, `W_*`), a link (`[0, T](x)`), code, math
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "$": "&#36;"}
_BACKSLASHED = "\\`*_[]"


def _text(text) -> str:
    """Plain text (a doc string, a long name, bounds) as a table cell that shows exactly it."""
    out = "".join(_ENTITIES.get(c, "\\" + c if c in _BACKSLASHED else c) for c in str(text))
    return _cell(out)


def _default(value) -> str:
    if isinstance(value, str) and value == "required":
        return "required"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value!r}`"


def _outputs_table(outputs) -> list[str]:
    lines = ["| name | long name | units | own dims | reduction | file variables |", "|---|---|---|---|---|---|"]
    for o in outputs:
        where = f" (in {_text(', '.join(o.scenarios))})" if o.scenarios else ""
        lines.append(
            f"| `{o.name}`{where} | {_text(o.long_name)} | {_text(o.units)} | "
            f"{_text(', '.join(o.dims))} | {_text(o.reduce)} | "
            f"{_cell(', '.join(f'`{v}`' for v in o.variables))} |"
        )
    return lines


def system_section(name: str) -> str:
    from dyn.presentation.describe import describe

    d = describe(name)
    lines = [f"## `{d.name}`", "", _text(d.description) + ".", ""]
    if d.scenarios:
        lines += ["Shipped scenarios: " + ", ".join(f"`{s}`" for s in d.scenarios) + ".", ""]
    lines += [
        "**Parameters** (`[params]`, or a `[sweep]` axis where sweepable)",
        "",
        "| key | kind | default | admissible | sweepable | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for p in d.parameters:
        lines.append(
            f"| `{p.name}` | {p.kind} | {_cell(_default(p.default))} | {_text(p.bounds)} | "
            f"{'yes' if p.sweepable else 'no'} | {_text(p.doc)} |"
        )
    lines += ["", "**Outputs** at the system's defaults", ""] + _outputs_table(d.outputs)
    if d.other_outputs:
        lines += ["", "**Outputs at other settings** (those of the shipped scenarios named)", ""]
        lines += _outputs_table(d.other_outputs)
    lines.append("")
    kind = {"ode": "an ODE", "sde": "an SDE"}.get(d.equation or "", "no equation by a method")
    keys = ", ".join(f"`{k}`" for k in d.integrator_keys) or "none"
    lines += [f"**Solver**: {kind}; `[integrator]` keys read: {keys}.", ""]
    if d.backends:
        lines += [f"- `{b}`: " + ", ".join(f"`{m}`" for m in ms) for b, ms in d.backends.items()]
    else:
        lines.append("No backend or method to choose: the system computes its values itself.")
    if d.default_plot:
        lines += ["", f"`dyn plot` draws `{d.default_plot}` by default."]
    lines.append("")
    return "\n".join(lines)


def markdown() -> str:
    """The whole page."""
    from markdown.extensions.toc import slugify

    from dyn.presentation.describe import listed_systems

    names = listed_systems()
    head = [
        "# Parameter reference",
        "",
        "Generated from dyn's registry when the site is built, by `dyn.describe`: the same as "
        "`dyn list SYSTEM` prints. For every system, the parameters (the schema that checks "
        "each scenario file), the outputs, and the solvers it takes. Keys are given in a "
        "scenario's `[params]` table, or swept in `[sweep]`; `--set params.KEY=VALUE` "
        "overrides them from the command line.",
        "",
        "Systems: " + ", ".join(f"[`{n}`](#{slugify(n, '-')})" for n in names) + ".",
        "",
    ]
    return "\n".join(head + [system_section(n) for n in names])


def on_files(files, config):
    """mkdocs event: add the generated page to the site."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, PAGE, content=markdown()))
    return files
