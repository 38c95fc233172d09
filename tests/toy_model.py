r"""The Ornstein-Uhlenbeck process on R^d written through the public API (docs/your_own_system.md),

    dX = -theta X dt + sigma dB,   X(0) = x0 (every coordinate),

with its exact law E|X(t)|^2 / d = x0^2 e^{-2 theta t} + sigma^2 (1 - e^{-2 theta t}) / (2 theta).
Not imported by the package: tests/test_toy_model.py names it by import path, as a user would.
"""

import numpy as np

import dyn


def exact_x2(theta, sigma, x0, t):
    decay = np.exp(-2.0 * theta * np.asarray(t))
    return x0**2 * decay + sigma**2 * (1.0 - decay) / (2.0 * theta)


class ToyOU(dyn.Model):
    name, description, default_plot = "toy_ou", "Ornstein-Uhlenbeck process on R^d", "x2"
    params = {
        "theta": dyn.Field("float", 1.0, "mean-reversion rate theta", gt=0.0),
        "sigma": dyn.Field("float", 1.0, "noise sigma", gt=0.0),
        "d": dyn.Field("int", 2, "dimension", lo=1, hi=64),
        "x0": dyn.Field("float", 1.0, "initial value of every coordinate"),
    }

    def drift(t, x, theta):  # numba: the numba backend
        return -theta * x

    def diffusion(t, x, dw, sigma):
        return sigma * dw

    drift_jax, diffusion_jax = drift, diffusion  # JAX (diffrax, jax backends): the same arithmetic

    def outputs(self, setup):
        return [
            dyn.Output("x2", "E|X(t)|^2 / d", dims=("time",)),
            dyn.Output("x2_exact", "exact E|X(t)|^2 / d", dims=("time",), reduce="point"),
        ]

    def point_values(self, spec):
        return {"x2_exact": exact_x2(spec["theta"], spec["sigma"], spec["x0"], spec.times)}

    def initial_state(self, spec, runs):
        return np.full((runs, 1, spec["d"]), float(spec["x0"]))

    def observe(self, spec, states):
        states = np.asarray(states)
        return dyn.Chunk({"x2": (states**2).mean(axis=(2, 3))}, finite=np.isfinite(states).all(axis=(1, 2, 3)))
