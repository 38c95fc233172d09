"""The README's code runs as written.

Every ```bash and ```python block of README.md is taken in order.
- Default tier (cheap): each block parses (`bash -n`, `compile`); every `dyn ...` command line
  parses with the CLI's own parser, and every `dyn run NAME --set ...` loads its scenario with
  those overrides (a renamed flag, a placeholder, a key that no longer validates fails here);
  every `dyn.a.b` the Python blocks use exists after a plain `import dyn`.
- Slow tier: the blocks run, in order (later ones read what earlier ones wrote), in a scratch
  folder with scenarios/ and benchmarks/ linked, under DYN_README_TINY=1: a sitecustomize there
  caps every scenario at 4 runs per point and leaves its axes alone, so that the snippets'
  `.sel(...)` find their values.

A block right after the line `<!-- readme-test: skip REASON -->` is not run (the set-up commands,
which `.ci/run` runs, a SLURM cluster, the benchmarks); it still parses in the default tier.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import dyn
from dyn.presentation.cli import _parser, _scenario_path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```(bash|python)\s*$")
SKIP = re.compile(r"^<!-- readme-test: skip (.+) -->$")
TINY_RUNS = 4


def blocks(text: str) -> list[dict]:
    """The README's bash and python blocks: language, first line number, code, skip reason."""
    found, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            skip = SKIP.match(lines[i - 1]) if i else None
            found.append(
                {
                    "lang": match[1],
                    "line": i + 1,
                    "code": "\n".join(lines[i + 1 : end]),
                    "skip": skip[1] if skip else None,
                }
            )
            i = end
        i += 1
    return found


BLOCKS = blocks((ROOT / "README.md").read_text())


def _dyn_commands(code: str) -> list[list[str]]:
    """argv of each `dyn ...` or `python -m dyn ...` command in a bash block (comments cut)."""
    commands = []
    for line in code.splitlines():
        words = shlex.split(line, comments=True)
        for start in range(len(words)):  # after `&&` or a venv path: .venv/bin/dyn
            head = words[start : start + 3]
            if head[:1] and Path(head[0]).name == "dyn":
                commands.append(words[start + 1 :])
            elif head[:3] in (["python", "-m", "dyn"], ["python3", "-m", "dyn"]):
                commands.append(words[start + 3 :])
    return [argv for argv in commands if argv and argv != ["..."]]


def test_the_readme_has_blocks_to_check():
    langs = [b["lang"] for b in BLOCKS]
    assert langs.count("bash") >= 8 and langs.count("python") >= 4, langs


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b['line']}" for b in BLOCKS])
def test_every_block_parses(block):
    if block["lang"] == "python":
        compile(block["code"], f"README.md:{block['line']}", "exec")
        return
    done = subprocess.run(["bash", "-n"], input=block["code"], text=True, capture_output=True)
    assert done.returncode == 0, done.stderr
    for argv in _dyn_commands(block["code"]):
        try:
            args = _parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"README.md:{block['line']}: `dyn {shlex.join(argv)}` does not parse")
        if args.command == "run":  # the scenario and its overrides validate
            dyn.load(_scenario_path(args.scenario), args.overrides, args.unset)


def _attribute_chains(code: str) -> set[str]:
    """Every `dyn.x.y...` attribute chain in a block."""
    chains = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Attribute):
            parts, inner = [], node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "dyn":
                chains.add(".".join(reversed(parts)))
    return chains


def test_what_the_python_blocks_call_exists_after_a_plain_import_dyn():
    chains = set().union(*(_attribute_chains(b["code"]) for b in BLOCKS if b["lang"] == "python"))
    assert {"open", "run", "noisy.sigma_critical"} <= chains  # the extraction itself works
    script = (
        "import dyn, functools\n"
        f"for chain in {sorted(chains)!r}:\n"
        "    functools.reduce(getattr, chain.split('.'), dyn)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # a fresh process: nothing imported beforehand


SITECUSTOMIZE = f"""
import copy, os
if os.environ.get("DYN_README_TINY"):
    from dyn.engine import scenario as _scenario
    _resolve = _scenario.resolve

    def _tiny(doc, source="<dict>"):
        doc = copy.deepcopy(doc)
        if isinstance(doc, dict) and isinstance(doc.get("ensemble", {{}}), dict):
            ensemble = doc.setdefault("ensemble", {{}})
            ensemble["runs"] = min(int(ensemble.get("runs", 1)), {TINY_RUNS})
        return _resolve(doc, source)

    _scenario.resolve = _tiny
"""


@pytest.mark.slow
def test_every_block_runs_as_written(tmp_path):
    for name in ("scenarios", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "outputs").mkdir()
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(
        os.environ,
        DYN_README_TINY="1",
        MPLBACKEND="Agg",
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    )
    ran = 0
    for block in BLOCKS:
        if block["skip"]:
            continue
        if block["lang"] == "python":
            cmd = [sys.executable, "-c", block["code"]]
        else:
            cmd = ["bash", "-euo", "pipefail", "-c", block["code"]]
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"README.md:{block['line']}\n{done.stderr[-3000:]}"
        ran += 1
    assert ran >= 10
