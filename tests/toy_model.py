r"""A whole new model in one module, as docs/architecture.md "Adding a model" says one is made:
the Ornstein-Uhlenbeck process on R^d,

    dX = -theta X dt + sigma dB,   X(0) = x0 (every coordinate),

with its exact law E|X(t)|^2 / d = x0^2 e^{-2 theta t} + sigma^2 (1 - e^{-2 theta t}) / (2 theta).

Not imported by the package: tests/test_toy_model.py copies this file into a folder it adds to
the system registry's search path, so that the engine meets it exactly as it meets a new file in
dyn/systems/, with no other edit anywhere.
"""
from __future__ import annotations

import numpy as np

import integrators
from integrators.jit import njit
from integrators.numba_abi import DIFFUSION_SIG, DRIFT_SIG, NJIT

from dyn.core.dynamics import Dynamics, register as register_dynamics
from dyn.core.layout import Layout
from dyn.core.schema import Field
from dyn.systems import register
from dyn.systems.base import Chunk, Output, System

LAYOUT = Layout("toy_ou", scalars=("theta", "sigma", "d"))
THETA, SIGMA, D = LAYOUT.index("theta"), LAYOUT.index("sigma"), LAYOUT.index("d")


@njit(DRIFT_SIG, **NJIT)
def toy_drift(t, x, p, out, work):
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[i, k] = -p[THETA] * x[i, k]


@njit(DIFFUSION_SIG, **NJIT)
def toy_diffusion(t, x, p, dw, out, work):
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[i, k] = p[SIGMA] * dw[i, k]


def _example(rng):
    d = int(rng.integers(1, 5))
    return rng.standard_normal((1, d)), LAYOUT.pack(theta=rng.uniform(0.1, 2), sigma=rng.uniform(0.1, 2), d=d)


TOY = register_dynamics(Dynamics(
    "toy_ou", LAYOUT, toy_drift, lambda t, x, p: -p[THETA] * x, integrators.EUCLIDEAN, _example,
    toy_diffusion, lambda t, x, p, dw: p[SIGMA] * dw, noise=lambda p: (1, int(p[D]))))


def exact_x2(theta, sigma, x0, t):
    decay = np.exp(-2.0 * theta * np.asarray(t))
    return x0**2 * decay + sigma**2 * (1.0 - decay) / (2.0 * theta)


@register
class ToyOU(System):
    name = "toy_ou"
    description = "Ornstein-Uhlenbeck process on R^d (a model added in one module)"
    default_plot = "x2"
    equation = "sde"
    integrator = frozenset({"backend", "method", "dt", "horizon"})
    jax_methods = frozenset({"euler_maruyama"})
    params = {
        "theta": Field("float", 1.0, "mean-reversion rate theta", gt=0.0),
        "sigma": Field("float", 1.0, "noise sigma", gt=0.0),
        "d": Field("int", 2, "dimension", lo=1, hi=64),
        "x0": Field("float", 1.0, "initial value of every coordinate"),
    }

    def outputs(self, setup):
        return [Output("x2", "E|X(t)|^2 / d", dims=("time",)),
                Output("x2_exact", "exact E|X(t)|^2 / d", dims=("time",), reduce="point")]

    def point_values(self, spec):
        return {"x2_exact": exact_x2(spec["theta"], spec["sigma"], spec["x0"], spec.times)}

    def problem(self, spec):
        return TOY.problem(LAYOUT.pack(theta=spec["theta"], sigma=spec["sigma"], d=spec["d"]))

    def initial_state(self, spec, runs):
        return np.full((runs, 1, spec["d"]), float(spec["x0"]))

    def observe(self, spec, states):
        states = np.asarray(states)
        return Chunk({"x2": (states**2).mean(axis=(2, 3))},
                     finite=np.isfinite(states).all(axis=(1, 2, 3)))

    def simulate(self, spec, runs):
        states = spec.solver.get().solve(self.problem(spec), self.initial_state(spec, len(runs)),
                                         spec.times, rng=spec.rng).states
        return self.observe(spec, states)

    def batch_key(self, spec):
        return spec["d"], spec.runs, spec.dt
