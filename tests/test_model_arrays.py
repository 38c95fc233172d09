"""Array parameters of a dyn.Model: a vector, matrix or stack of matrices reaches the drift as
an array under its name, in the numba and the JAX form alike; given literally or by a law drawn
per point, per run or once for the sweep, with a scalar factor swept; a bad array is one line,
exit 2."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import dyn
from dyn.presentation import cli

MODULE = '''
import numpy as np
import dyn


class Linear(dyn.Model):
    """x' = -theta x A^T + b, rows of x in R^d."""
    name, description, default_plot = "linear", "linear flow", "x2"
    params = {"A": dyn.Field("matrix", [[1.0, 0.0], [0.0, 2.0]], "rate matrix"),
              "b": dyn.Field("vector", [0.0, 0.0], "offset"),
              "theta": dyn.Field("float", 1.0, "factor of A"),
              "d": dyn.Field("int", 2, "dimension", lo=1, hi=8)}

    def drift(t, x, theta, A, b):
        return -theta * (x @ A.T) + b

    def outputs(self, setup):
        return [dyn.Output("x2", "mean square", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 2, spec["d"]))

    def observe(self, spec, states):
        return dyn.Chunk({"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))})
'''

SCENARIO = """[scenario]
name = "lin"
system = "arrays_model:Linear"
[params]
d = 2
{params}
[sweep]
theta = [0.5, 1.0]
[ensemble]
runs = 3
[integrator]
method = "rk4"
dt = 0.01
horizon = 0.5
[output]
saves = 2
"""


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + list(sys.path))
    (tmp_path / "arrays_model.py").write_text(MODULE)
    yield tmp_path
    sys.modules.pop("arrays_model", None)


def _run(folder, params: str) -> tuple[int, str]:
    (folder / "lin.toml").write_text(SCENARIO.format(params=params))
    err = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        code = cli.main(["run", "lin.toml", "--no-progress", "--overwrite"])
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    return code, err.getvalue()


def _exact(theta, a, b, t=0.5):
    """The closed form x(t) = e^{-theta A t} (x0 - x*) + x*, x* = A^{-1} b / theta, rows."""
    from scipy.linalg import expm

    star = np.linalg.solve(a, b) / theta
    x = expm(-theta * a * t) @ (np.ones(len(b)) - star) + star
    return (x**2).mean()


def test_literal_arrays_reach_the_drift_by_name(folder):
    code, err = _run(folder, "A = [[1.0, 0.5], [0.0, 2.0]]\nb = [0.3, -0.2]")
    assert code == 0, err
    with dyn.open(folder / "outputs" / "lin.h5") as ds:
        got = ds["x2"].values[:, -1]
    a, b = np.array([[1.0, 0.5], [0.0, 2.0]]), np.array([0.3, -0.2])
    np.testing.assert_allclose(got, [_exact(0.5, a, b), _exact(1.0, a, b)], rtol=1e-8)  # RK4 at dt = 0.01: error ~1e-9


def test_a_law_drawn_per_run_gives_each_run_its_matrix(folder):
    code, err = _run(folder, 'A = {law = "orthogonal", draw = "run"}')
    assert code == 0, err
    with dyn.open(folder / "outputs" / "lin.h5") as ds:
        spread = ds["x2"].values[:, -1]
    assert np.isfinite(spread).all()
    from dyn.core import laws

    # the runs' own draws, solved exactly, averaged: what the per-run problems give
    law = {"law": "orthogonal", "scale": 1.0, "draw": "run"}
    for k, theta in enumerate((0.5, 1.0)):
        each = [_exact(theta, laws.draw("A", law, "matrix", 2, 0, k, run=r), np.zeros(2)) for r in range(3)]
        np.testing.assert_allclose(spread[k], np.mean(each), rtol=1e-8)


@pytest.mark.parametrize(
    "params, says",
    [
        ("A = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]", "Linear.drift failed"),
        ("A = [[1.0, 0.0], [0.0]]", "params.A: must be square"),
        ('A = {law = "gaussian", draw = "always"}', "params.A: draw must be one of"),
        ('b = {law = "orthogonal"}', "params.b: a vector's law is gaussian"),
        ("b = [[1.0]]", "params.b: expected a vector"),
    ],
)
def test_bad_arrays_are_one_line_and_exit_2(folder, params, says):
    code, err = _run(folder, params)
    assert code == 2 and len(err.strip().splitlines()) == 1 and says in err, err
    assert not (folder / "outputs" / "lin.h5").exists()


def _biased(s, i, j, beta, b):
    return np.exp(beta * s + b[j])


def _biased_jax(s, i, j, beta, b):
    import jax.numpy as jnp

    return jnp.exp(beta * s + b[j])


def test_dyn_particles_reads_a_vector_parameter_by_name():
    cls = dyn.particles(
        _biased,
        interaction_jax=_biased_jax,
        name="biased",
        params={"beta": dyn.Field("float", 1.0, "beta"), "b": dyn.Field("vector", [0.0], "key bias")},
    )
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    b = rng.standard_normal(5)
    p = cls.pack({"beta": 1.5, "b": b})
    got = np.empty_like(x)
    cls.numba_function("drift")(0.0, x, p, got, np.empty(cls.work_size(5, 3, p)))
    w = np.exp(1.5 * x @ x.T + b[None, :])
    np.testing.assert_allclose(got, (w / w.sum(axis=1, keepdims=True)) @ x, rtol=1e-13)


def test_draws_per_run_refuse_the_jax_backends_in_one_line(folder):
    text = SCENARIO.format(params='A = {law = "orthogonal", draw = "run"}')
    (folder / "lin.toml").write_text(text.replace('method = "rk4"', 'backend = "diffrax"\nmethod = "rk4"'))
    err = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        code = cli.main(["run", "lin.toml", "--no-progress"])
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    text = err.getvalue()
    assert code == 2 and len(text.strip().splitlines()) == 1 and "drawn per run" in text, text
