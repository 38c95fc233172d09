"""The rules a user's model meets first, said where they bite: a plain Python helper called by
a numba drift is named in one line with the fix, and `dyn list module:Class` finds the module
in the current folder, as the guide says."""

from __future__ import annotations

import textwrap

from dyn.presentation.cli import main

MODEL = textwrap.dedent("""
    import numpy as np
    import dyn


    def scale(x, beta):  # a plain Python function: numba cannot call it from the drift
        return beta * x


    class Plain(dyn.Model):
        name = "plainhelp"
        description = "decay through a plain helper"
        default_plot = "norm"
        params = {"beta": dyn.Field("float", 1.0, "rate", lo=0.0)}

        def drift(t, x, beta):
            return -scale(x, beta)

        def initial_state(self, spec, runs):
            return spec.rng.standard_normal((runs, 4, 2))

        def outputs(self, setup):
            return [dyn.Output("norm", "norm of x")]

        def observe(self, spec, states):
            return dyn.Chunk({"norm": np.linalg.norm(states, axis=(-1, -2))})
    """)
SCENARIO = textwrap.dedent("""
    [scenario]
    name = "plainhelp"
    system = "plainhelp_model:Plain"
    [integrator]
    horizon = 1.0
    dt = 0.1
    method = "rk4"
    [ensemble]
    runs = 2
    """)


def test_a_plain_python_helper_of_a_numba_drift_is_named_with_the_fix(tmp_path, capsys, monkeypatch):
    (tmp_path / "plainhelp_model.py").write_text(MODEL)
    (tmp_path / "s.toml").write_text(SCENARIO)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "s.toml", "--out", str(tmp_path / "o.h5"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "scale is a plain Python function" in err[0], err
    assert "@numba.njit" in err[0] and not (tmp_path / "o.h5").exists()


def test_dyn_list_finds_a_module_in_the_current_folder(tmp_path, capsys, monkeypatch):
    (tmp_path / "plainhelp_model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    assert main(["list", "plainhelp_model:Plain"]) == 0
    out = capsys.readouterr().out
    assert "decay through a plain helper" in out and "beta" in out
