r"""A linear flow with a closed form from each run's own start, for `dyn compare --reference
exact` (tests/test_exact_reference.py):

    x_i' = -(A + eps B) x_i,   reference  x_i(t) = e^{-A t} x_i(0),

so a run's distance to its reference is 0 at eps = 0 (up to the solver's error) and first
order in eps otherwise: the rate against eps is 1.
"""

import numpy as np
import scipy.linalg

import dyn

A = np.array([[1.0, 0.5], [0.5, 2.0]])
B = np.array([[0.0, 1.0], [-1.0, 0.0]])


class Linear(dyn.Model):
    name, description, default_plot = "linear", "x' = -(A + eps B) x on R^2", "x2"
    params = {
        "eps": dyn.Field("float", 0.0, "perturbation of the matrix"),
        "n": dyn.Field("int", 3, "rows", lo=1, hi=64),
    }

    def drift(t, x, eps):
        return -(x @ (A + eps * B).T)

    def reference(x0, t):
        return x0 @ scipy.linalg.expm(-A * t).T

    def outputs(self, setup):
        return [dyn.Output("x2", "E|X(t)|^2", dims=("time",))]

    def trajectory_dims(self, setup):
        return {"token": max(setup.values_of("n")), "coordinate": 2}

    def initial_state(self, spec, runs):
        return spec.rng.standard_normal((runs, spec["n"], 2))

    def observe(self, spec, states):
        s = np.asarray(states)
        return dyn.Chunk({"x2": (s**2).sum(axis=(2, 3))}, states=s)
