"""griffe extension for the API reference: dyn's docstrings are plain text with the mathematics
laid out by hand (indented equations, `x_i`, `N[rho](x)`, `k*`), not Markdown, so each is shown
as written, in a preformatted block, instead of being read as Markdown (which would take
`N[rho](x)` for a link and `*` for emphasis)."""

from __future__ import annotations

import griffe


class PlainDocstrings(griffe.Extension):
    def on_instance(self, *, obj, **kwargs) -> None:
        docstring = obj.docstring
        if docstring is None or not docstring.value.strip():
            return
        lines = docstring.value.splitlines()
        docstring.value = "\n".join("    " + line if line.strip() else "" for line in lines)
