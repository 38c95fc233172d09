r"""Two Ornstein-Uhlenbeck models written through the public API (docs/your_own_system.md), with
a time average of |X|^2 / d, whose stationary value sigma^2 / (2 theta) is known:

- ``RatedOU`` declares its step rate theta / 2 (Euler-Maruyama's relative bias theta h / 2):
  dt = "auto", check_step and the [integrator] keys of time averages are then open to it;
- ``PlainOU`` declares none: those stay refused, and its time average still runs.
Not imported by the package: tests/test_model_budget.py names them by import path.
"""

import numpy as np

import dyn


class PlainOU(dyn.Model):
    name, description, default_plot = "plain_ou", "OU process, time-averaged", "x2"
    params = {
        "theta": dyn.Field("float", 1.0, "mean-reversion rate theta", gt=0.0, hi=1e3),
        "sigma": dyn.Field("float", 1.0, "noise sigma", gt=0.0, hi=1e3),
        "d": dyn.Field("int", 2, "dimension", lo=1, hi=64),
    }

    def drift(t, x, theta):
        return -theta * x

    def diffusion(t, x, dw, sigma):
        return sigma * dw

    def outputs(self, setup):
        return [
            dyn.Output("x2", "time average of |X|^2 / d", reduce="time_average"),
            dyn.Output("x2_exact", "sigma^2 / (2 theta)", reduce="point"),
        ]

    def point_values(self, spec):
        return {"x2_exact": spec["sigma"] ** 2 / (2.0 * spec["theta"])}

    def initial_state(self, spec, runs):
        return spec.rng.standard_normal((runs, 1, spec["d"])) * spec["sigma"]

    def observe(self, spec, states):
        return dyn.Chunk({"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))})


class RatedOU(PlainOU):
    name = "rated_ou"

    def step_rate(self, spec):
        return 0.5 * spec["theta"]
