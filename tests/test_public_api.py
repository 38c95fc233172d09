"""The engine reaches numba and llvmlite through their documented API only, so that a new numba
release is a one-line change of the upper bound in pyproject.toml. Every module under dyn/ and
integrators/ is read (its syntax tree and its text) for:

- a private numba or llvmlite name: a dotted name starting at ``numba`` or ``llvmlite`` (or a
  name bound to one of their modules by an import) with a part that starts with an underscore
  (dunders such as ``__version__`` are public), imported or read;
- ``numba.core.*`` outside :data:`DOCUMENTED_CORE` (each with the reason it is allowed);
- ``__class__ =`` (an object's class swapped at run time);
- ``set.add(`` (a set subclass's own ``add``, and its checks, skipped on a foreign object).

The checker is also run on snippets that break each rule, so that a checker which finds
nothing cannot pass.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = ("numba", "llvmlite")
# numba.core modules numba documents as public, with what the engine uses them for
DOCUMENTED_CORE = {
    "numba.core.event": "numba's event API (documented in numba's reference, 'Event API'): the "
    "compile events behind dyn run's compile notice and dyn estimate's count "
    "(integrators/numba/events.py)",
    "numba.core.errors": "the home of numba's exception classes, which numba's user manual "
    "names there (the troubleshooting guide's TypingError, the deprecation "
    "notices' warning filters): a user's model that does not compile is "
    "told from a cache failure (dyn/user/cache.py)",
}
SWAPPED_CLASS = re.compile(r"\.__class__\s*=(?!=)")
BYPASSED_ADD = re.compile(r"\bset\.add\(")


def _private(dotted: str) -> bool:
    return any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__")) for part in dotted.split(".")
    )


def _dotted(node) -> str | None:
    """``a.b.c`` of an attribute chain on a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _core_allowed(dotted: str) -> bool:
    return not dotted.startswith("numba.core") or any(
        dotted == allowed or dotted.startswith(allowed + ".") for allowed in DOCUMENTED_CORE
    )


def violations(text: str, where: str = "<text>") -> list[str]:
    """Each use in `text` (a module's source) that breaks a rule of the module doc."""
    found = []
    tree = ast.parse(text)
    bound = {}  # local name -> the numba/llvmlite dotted name it stands for

    def check(dotted: str, line: int) -> None:
        if _private(dotted):
            found.append(f"{where}:{line}: private name {dotted}")
        elif not _core_allowed(dotted):
            found.append(f"{where}:{line}: {dotted} is not among the documented numba.core modules")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    check(alias.name, node.lineno)
                    bound[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] in LIBRARIES
        ):
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                check(dotted, node.lineno)
                bound[alias.asname or alias.name] = dotted
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):  # a.b.c, and a.b inside it: the same verdicts
            dotted = _dotted(node)
            if dotted is not None:
                root, _, rest = dotted.partition(".")
                if root in bound:
                    check(f"{bound[root]}.{rest}", node.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "delattr")
            and len(node.args) >= 2
        ):
            target, name = _dotted(node.args[0]), node.args[1]
            if (
                target is not None
                and target.split(".")[0] in bound
                and isinstance(name, ast.Constant)
                and isinstance(name.value, str)
            ):
                root, _, rest = target.partition(".")
                check(".".join(filter(None, [bound[root], rest, name.value])), node.lineno)
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if SWAPPED_CLASS.search(code):
            found.append(f"{where}:{number}: a class swapped at run time: {line.strip()}")
        if BYPASSED_ADD.search(code):
            found.append(f"{where}:{number}: set.add called on another object: {line.strip()}")
    return found


def _sources() -> list[Path]:
    return sorted(p for folder in ("dyn", "integrators") for p in (ROOT / folder).rglob("*.py"))


def test_the_engine_names_no_private_numba_or_llvmlite_attribute():
    sources = _sources()
    assert len(sources) > 100  # the tree was found
    found = [v for path in sources for v in violations(path.read_text(), str(path.relative_to(ROOT)))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "snippet",
    [
        "import numba\nnumba.core.registry.CPUDispatcher._compile_for_args = None",
        "from numba.core.registry import CPUDispatcher",
        "from numba import _helperlib",
        "import llvmlite.binding as ll\nhooks = ll.ffi.lib._lock",
        "from llvmlite import binding\nx = binding.ffi._lib",
        "import numba\ngetattr(numba.core.caching.Cache, '_index_key')",
        "from numba.core import caching\nx = caching.Cache",
        "kernel.__class__ = Other",
        "set.add(attributes, 'x')",
    ],
)
def test_the_checker_finds_each_kind_of_use(snippet):
    assert violations(snippet)


@pytest.mark.parametrize(
    "snippet",
    [
        "import numba\nv = numba.__version__",
        "from numba.core import event\nevent.install_recorder('numba:compile')",
        "from numba.extending import intrinsic, typeof_impl",
        "import numba\nnumba.njit(cache=True)",
        "x = self._private_of_our_own\ncls.__class__ == Other",
    ],
)
def test_the_checker_passes_public_uses(snippet):
    assert violations(snippet) == []


def test_every_allowed_core_module_has_a_reason():
    assert all(name.startswith("numba.core.") and len(reason) > 20 for name, reason in DOCUMENTED_CORE.items())
