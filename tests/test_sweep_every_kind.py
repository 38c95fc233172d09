"""Every field kind of every shipped system sweeps: for each system with a shipped scenario, and
each kind among its sweepable fields (bool, int, float, a string of choices), one field of that
kind is swept over two values in a tiny run of its scenario (two runs, its other axes fixed at
their first values). The file is written (no .partial left), `dyn.open` reads the axis back as
its kind with the two values, and `dyn show` reads the file.

The field of a kind is the first one (in the system's order) whose two values the scenario
accepts: a value refused by the scenario's checks (a choice that needs another setting) is a
refusal in one line, tested elsewhere, not a sweep of that kind.
"""

import tomllib
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn import systems
from dyn.core.contract import FAILED
from dyn.core.errors import ScenarioError
from dyn.core.schema import REQUIRED
from dyn.presentation.cli import main

ROOT = Path(__file__).resolve().parents[1]
# per scenario, what makes its run tiny beyond two runs (a shorter horizon, fewer saves)
TINY = {
    "attention_svm": ["integrator.horizon=20.0"],
    "critical_scaling": ["params.kappa_points=5"],
    "icl_autoregressive": ["integrator.horizon=10.0"],
    "lost_in_the_middle": ["integrator.horizon=1.0"],
    "positional_attention": ["integrator.horizon=3.0"],
}


def _scenarios() -> dict[str, Path]:
    """Each system with a shipped scenario -> its first scenario file."""
    found = {}
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        name = tomllib.loads(path.read_text())["scenario"]["system"]
        found.setdefault(name, path)
    return found


SCENARIOS = _scenarios()


def _toml(x) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    return f'"{x}"' if isinstance(x, str) else repr(x)


def _candidates(field, value) -> list[list]:
    """Pairs of values of `field` to sweep, starting from the scenario's `value`."""
    if field.kind == "bool":
        return [[False, True]]
    if field.choices:
        return [[value, other] for other in field.choices if other != value]
    if field.kind == "int":
        up = value + 1 if field.hi is None or value + 1 <= field.hi else value - 1
        return [[value, up], [value, 2 * value]]
    if field.kind == "float":
        other = value * 1.25 if value else 0.5
        if field.hi is not None and other > field.hi:
            other = value * 0.8 if value else -0.5
        return [[value, other]]
    return []


def _fixed(doc: dict) -> list[str]:
    """--set / --unset arguments: two runs (one for a deterministic system), no states, every
    axis fixed at its first value."""
    runs = min(2, doc.get("ensemble", {}).get("runs", 2))
    args = ["--set", f"ensemble.runs={runs}", "--set", "output.trajectories=false"]
    for key, axis in doc.get("sweep", {}).items():
        first = axis[0] if isinstance(axis, list) else axis["start"]
        args += ["--unset", f"sweep.{key}", "--set", f"params.{key}={_toml(first)}"]
    if "common" in doc.get("ensemble", {}):
        args += ["--unset", "ensemble.common"]
    return args


def _value(doc: dict, key: str, field):
    axis = doc.get("sweep", {}).get(key)
    if axis is not None:
        return axis[0] if isinstance(axis, list) else axis["start"]
    return doc.get("params", {}).get(key, field.default)


def kind_sweeps(name: str, path: Path) -> dict[str, tuple[str, list, list[str]]]:
    """kind -> (field, two values, the arguments of the run) for each kind of the system's
    sweepable fields, the first field of the kind the scenario accepts."""
    doc = tomllib.loads(path.read_text())
    base = _fixed(doc) + [x for s in TINY.get(path.stem, []) for x in ("--set", s)]
    found = {}
    for key, field in systems.get(name).params.items():
        kind = "choice" if field.choices else field.kind
        if not field.sweepable or kind in found or kind not in ("bool", "int", "float", "choice"):
            continue
        value = _value(doc, key, field)
        if value is REQUIRED or value is None:
            continue
        for pair in _candidates(field, value):
            args = base + ["--set", f"sweep.{key}=[{','.join(_toml(v) for v in pair)}]"]
            sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
            unsets = [args[i + 1] for i, a in enumerate(args) if a == "--unset"]
            try:
                dyn.load(path, sets, unsets)
            except ScenarioError:
                continue
            found[kind] = (key, pair, args)
            break
    return found


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SCENARIOS), ids=lambda n: n.rpartition(":")[2])
def test_every_field_kind_of_the_system_sweeps(name, tmp_path, capsys):
    path = SCENARIOS[name]
    sweeps = kind_sweeps(name, path)
    assert {"int", "float"} & set(sweeps), f"{name}: no numeric field swept"
    for kind, (key, pair, args) in sweeps.items():
        out = tmp_path / f"{key}.h5"
        # exit 3: a point diverged (a physical outcome of the second value, e.g. a ReLU network
        # at the scenario's learning rate); the file must still be whole, with no failed point
        assert main(["run", str(path), *args, "--out", str(out), "--no-progress"]) in (0, 3), (
            kind,
            key,
            capsys.readouterr().err,
        )
        assert out.exists() and not Path(f"{out}.partial").exists()
        with dyn.open(out) as ds:
            assert not (ds["status"].values == FAILED).any(), (kind, key, ds["message"].values)
            axis = ds[key].values
            assert axis.tolist() == pair, (kind, key)
            expected = {"bool": np.bool_, "int": np.integer, "float": np.floating}.get(kind)
            if expected is not None:
                assert np.issubdtype(axis.dtype, expected), (kind, key, axis.dtype)
            assert ds["status"].size == 2
        assert main(["show", str(out)]) == 0
        assert ", ".join(str(v) for v in pair) in capsys.readouterr().out or kind == "float"
