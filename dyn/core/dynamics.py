"""A model's vector field as one record: the numba drift, its JAX twin, the geometry, the layout
of the parameter vector they share (and, for an SDE, the diffusion pair and its noise shape).

    FLOW = Dynamics("attention_flow", LAYOUT, attention_drift, attention_drift_jax, SPHERE,
                    example=_example)
    states = integrators.get("numba", "rk4", dt=0.01).solve(FLOW.problem(p), x0, ts).states

Records register themselves (:func:`register`); :func:`registered` imports every module of the
model packages (every subpackage of `dyn` but the systems), as the system registry imports its
package, and returns them all: for the test that checks, for each, that the numba drift and the
JAX twin agree at random states and parameters (``example``). A new model's module is found
without being listed anywhere.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import integrators
from integrators.core.geometry import Geometry

from .layout import Layout

NOT_MODELS = ("core", "engine", "presentation", "numerics", "systems", "user")  # layers: no model
_REGISTRY: dict[str, Dynamics] = {}


@dataclass(frozen=True, eq=False)
class Dynamics:
    """dx = P_x f(t, x; p) dt (+ P_x g(t, x; p)[dW]) on `geometry`, p laid out by `layout`.

    - ``drift`` / ``diffusion``: numba functions of the integrators' ABI
      (``integrators.numba.abi.DRIFT_SIG`` / ``DIFFUSION_SIG``);
    - ``drift_jax`` / ``diffusion_jax``: their JAX twins on one member; when the twin needs static
      sizes that only the vector knows (e.g. the ResNet's width), ``jax_static(p)`` returns them
      and ``drift_jax(*jax_static(p))`` builds the twin;
    - ``noise``: ``p -> (q1, q2)``, the shape of one Brownian increment (SDEs only);
    - ``work``: ``(n, d, p) -> int``, the scratch floats the numba functions need per member;
    - ``example``: ``rng -> (x, p)``, a random state of one member and parameter vector;
    - ``drift_for``: ``p -> drift``, the numba drift of a problem with vector p where the vector
      picks among equivalent ones (the same numbers; e.g. the attention field's regime where p
      fixes it, :func:`dyn.attention.schemes.fixed_regime`); ``drift`` when None.
    """

    name: str
    layout: Layout
    drift: Callable
    drift_jax: Callable
    geometry: Geometry
    example: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]
    diffusion: Callable | None = None
    diffusion_jax: Callable | None = None
    noise: Callable[[np.ndarray], tuple[int, int]] | None = None
    work: Callable[[int, int, np.ndarray], int] | int = 0
    jax_static: Callable[[np.ndarray], tuple] | None = None
    drift_for: Callable[[np.ndarray], Callable] | None = None

    def jax_drift(self, p) -> Callable:
        """The JAX twin for the vector `p` (specialised to its static sizes if needed)."""
        return self.drift_jax(*self.jax_static(p)) if self.jax_static else self.drift_jax

    def problem(self, p) -> integrators.Problem:
        """The :class:`integrators.Problem` of this model with parameters `p` (ValueError when
        its offsets do not fit the layout: :meth:`dyn.core.layout.Layout.check`)."""
        p = self.layout.check(p)
        noise = (
            {}
            if self.diffusion is None
            else dict(diffusion=self.diffusion, diffusion_jax=self.diffusion_jax, noise_shape=self.noise(p))
        )
        drift = self.drift if self.drift_for is None else self.drift_for(p)
        return integrators.Problem(drift, self.jax_drift(p), p, self.geometry, work=self.work, **noise)


def tangent_drift_jax(drift_jax: Callable, d: int) -> Callable:
    """The tangent of any JAX twin: for f(t, x, p) on states x (n, d), the drift of
    y = (x, V_1 .. V_K) stacked as (n, d (1 + K)), i.e. (f(x), Df(x) V_1, ..., Df(x) V_K), each
    tangent pushed by `jax.jvp`. Solved from V = (e_c) it gives the sensitivities
    d x(t) / d x_c(0) of chosen initial coordinates c along each run; a model's numba tangent
    (a hand-written Jacobian product, e.g. dyn.attention.causal_circle.causal_tangent_drift)
    is its twin's counterpart, checked against this one by the drift-pair test."""
    import jax
    import jax.numpy as jnp

    def drift(t, y, p):
        n = y.shape[0]
        x = y[:, :d]
        tangents = y[:, d:].reshape(n, -1, d).transpose(1, 0, 2)  # (K, n, d)

        def push(v):
            return jax.jvp(lambda z: drift_jax(t, z, p), (x,), (v,))[1]

        moved = jax.vmap(push)(tangents).transpose(1, 0, 2).reshape(n, -1)
        return jnp.concatenate([drift_jax(t, x, p), moved], axis=1)

    return drift


def register(record: Dynamics) -> Dynamics:
    if record.name in _REGISTRY and _REGISTRY[record.name] is not record:
        raise ValueError(f"two dynamics named {record.name!r}")
    _REGISTRY[record.name] = record
    return record


def registered() -> dict[str, Dynamics]:
    """Every record of every model module, by name: the packages beside dyn/core are found in
    its folder and imported by name (a plugin lookup: core imports no package above it)."""
    folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # dyn/
    for package in pkgutil.iter_modules([folder]):
        if not package.ispkg or package.name in NOT_MODELS:
            continue
        found = importlib.import_module(f"dyn.{package.name}")
        for module in pkgutil.iter_modules(found.__path__):
            importlib.import_module(f"dyn.{package.name}.{module.name}")
    return dict(_REGISTRY)
