"""One source: a dyn.Model whose drift is written once in numpy arithmetic runs on the numba
backend (compiled by numba) and on the JAX backends (the engine's derived form), the two agreeing
to 1e-12 on random states with no twin written; a written twin that disagrees is refused in one
line, exit 2."""

from __future__ import annotations

import io
import sys

import numba
import numpy as np
import pytest

import dyn
from dyn.presentation import cli


@numba.njit  # a helper the drift calls: numba's, and derived for JAX from its Python function
def gate(s, b):
    return 1.0 / (1.0 + np.exp(-(s + b)))


class Gated(dyn.Model):
    """x_i' = sum_j gate(beta <x_i, W x_j>, b) (x_j - x_i) / n: written once."""

    name, description, default_plot = "gated", "gated attention in R^d", "x2"
    one_source = True
    params = {
        "beta": dyn.Field("float", 1.0, "factor"),
        "b": dyn.Field("float", 0.0, "bias"),
        "W": dyn.Field("matrix", [[1.0, 0.0], [0.0, 1.0]], "bilinear form"),
        "d": dyn.Field("int", 2, "dimension"),
    }

    def drift(t, x, beta, b, W):
        w = gate(beta * (x @ (x @ W.T).T), b)
        return (w @ x - np.sum(w, axis=1)[:, None] * x) / x.shape[0] + np.tanh(t) * x

    def outputs(self, setup):
        return [dyn.Output("x2", "mean square", dims=("time",))]

    def initial_state(self, spec, runs):
        return spec.rng.standard_normal((runs, 5, spec["d"]))

    def observe(self, spec, states):
        return dyn.Chunk({"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))})


@pytest.mark.slow  # JAX's import and a compile per shape
def test_a_one_source_models_two_backends_agree_on_random_states():
    import integrators

    integrators.configure_jax()  # float64, as the engine runs JAX
    import jax

    from dyn.user import arrays

    assert Gated.has_form("jax") and "rk4" in Gated.jax_methods
    rng = np.random.default_rng(7)
    for n, d in [(6, 3), (2, 1)]:
        _, layout = arrays.pack(Gated.parameters(), Gated.params, {"beta": 0, "b": 0, "W": np.eye(d)})
        derived = jax.jit(Gated.jax_function("drift", layout))
        for _ in range(8):
            x = rng.standard_normal((n, d)) * rng.choice([0.1, 1.0, 3.0])
            p = Gated.pack({"beta": rng.normal(), "b": rng.normal(), "W": rng.standard_normal((d, d))})
            t = float(rng.uniform(0, 2))
            want = np.empty_like(x)
            Gated.numba_function("drift")(t, x, p, want, np.empty(0))
            got = np.asarray(derived(t, x, p))
            assert np.abs(got - want).max() <= 1e-12 * max(1.0, np.abs(want).max())


def test_the_derived_form_is_the_jax_function():
    import integrators

    integrators.configure_jax()
    import jax

    from dyn.user import arrays

    p, layout = arrays.pack(Gated.parameters(), Gated.params, {"beta": 0.5, "b": 0.1, "W": [[1.0, 2.0], [0.0, 1.0]]})
    x = np.random.default_rng(8).standard_normal((4, 2))
    got = jax.jit(Gated.jax_function("drift", layout))(0.3, x, p)
    assert isinstance(got, jax.Array)
    want = np.empty_like(x)
    Gated.numba_function("drift")(0.3, x, p, want, np.empty(0))
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=1e-12)


MODULE = """
import numpy as np
import dyn


class Twin(dyn.Model):
    name, description, default_plot = "twin", "x' = -theta x", "x2"
    params = {"theta": dyn.Field("float", 1.0, "rate")}

    def drift(t, x, theta):
        return -theta * x

    def drift_jax(t, x, theta):
        return -theta * x * (1.0 + 1e-9)

    def outputs(self, setup):
        return [dyn.Output("x2", "mean square", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 2, 2))

    def observe(self, spec, states):
        return dyn.Chunk({"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))})
"""


def test_a_twin_that_disagrees_is_one_line_and_exit_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + list(sys.path))
    (tmp_path / "twin_model.py").write_text(MODULE)
    (tmp_path / "t.toml").write_text(
        '[scenario]\nname = "t"\nsystem = "twin_model:Twin"\n'
        "[integrator]\ndt = 0.1\nhorizon = 0.2\n[output]\nsaves = 2\n"
    )
    err = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        code = cli.main(["run", "t.toml", "--no-progress"])
    finally:
        sys.stdout, sys.stderr = stdout, stderr
        sys.modules.pop("twin_model", None)
    text = err.getvalue()
    assert code == 2 and len(text.strip().splitlines()) == 1, text
    assert "Twin.drift and its drift_jax differ by" in text
