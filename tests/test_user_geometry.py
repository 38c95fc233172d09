"""A manifold of the user's own, dyn.Geometry(project, retract): the torus (S^1)^k and the
product of spheres S^2 x S^2 of examples/geometries/manifolds.py run through the engine and
keep their invariant (every block of every token a unit vector) at every saved state; a
geometry whose retraction leaves its manifold, a start off the manifold and a projection that
is not one are refused in one line with exit 2."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.presentation.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "geometries" / "manifolds.py"
SCENARIO = """
[scenario]
name = "manifold"
system = "manifolds:{model}"
[params]
n = 5
k = {k}
[ensemble]
runs = 3
seed = 6
[integrator]
backend = "numba"
method = "rk4"
dt = 0.01
horizon = 2.0
[output]
saves = 4
trajectories = true
"""
BAD = """
import numpy as np
import dyn
from manifolds import TorusConsensus, _project_blocks, _retract_blocks, torus_project, torus_retract


def halfway(x):  # half way to the torus: fixes the torus, but its image is not fixed by it
    return 0.5 * (x + _retract_blocks(x, 2))


def sideways(x, v):  # not a projection: P P v != P v
    return 2.0 * _project_blocks(x, v, 2)


class Halfway(TorusConsensus):
    geometry = dyn.Geometry(torus_project, halfway, name="halfway torus")


class Sideways(TorusConsensus):
    geometry = dyn.Geometry(sideways, torus_retract, name="sideways torus")


class OffTorus(TorusConsensus):
    def initial_state(self, spec, runs):
        return 2.0 * super().initial_state(spec, runs)
"""


@pytest.fixture
def folder(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "manifolds.py")
    (tmp_path / "bad_manifolds.py").write_text(BAD)
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in ("manifolds", "bad_manifolds"):
        sys.modules.pop(name, None)


@pytest.mark.slow  # two geometries' adapters compiled (seconds)
@pytest.mark.parametrize("model, k, block", [("TorusConsensus", 3, 2), ("SpheresConsensus", 2, 3)])
def test_a_user_manifold_keeps_its_invariant(folder, model, k, block):
    import manifolds

    path = folder / f"{model}.toml"
    path.write_text(SCENARIO.format(model=model, k=k))
    out = dyn.run(path, folder / f"{model}.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        states = ds["trajectory"].values  # (run, time, token, coordinate)
        spread = ds["spread"].values
        assert (ds["status"].values == 1).all()
    assert states.shape == (3, 5, 5, block * k)
    assert np.abs(manifolds.block_norms(states, block) - 1.0).max() <= 1e-13
    assert spread[-1] < spread[0]  # the consensus field draws the tokens together
    moved = np.abs(states[:, -1] - states[:, 0]).max()
    assert moved > 0.1  # the flow moved them: the invariant is not that of a still state


@pytest.mark.parametrize(
    "model, fragment",
    [
        ("Halfway", "its retraction leaves the manifold"),
        ("Sideways", "project is not a projection"),
        ("OffTorus", "the start is not on"),
    ],
)
def test_a_geometry_that_leaves_its_manifold_is_refused_in_one_line(folder, capsys, model, fragment):
    path = folder / f"{model}.toml"
    path.write_text(SCENARIO.format(model=model, k=2).replace("manifolds:", "bad_manifolds:"))
    out = folder / "never.h5"
    assert main(["run", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dyn: ") and "Traceback" not in err
    assert fragment in err, err
    assert not out.exists()
