"""System `momentum_linear` (physics.md §4): psi_eps(a), the value at t = T of
eps x'' + x' = a x, x(0) = 1, x'(0) = 0, simulated by the scenario's integrator, in closed form
and by the Momentum ResNet, beside the first-order e^{a T}. Deterministic: one run per point.
"""
from __future__ import annotations

import numpy as np

from ..lazy import lazy
from ..momentum.params import check_second_order_gamma
from ..schema import Field
from . import register
from .base import INTEGRATOR_KEYS, Output, System

momentum = lazy("dyn.momentum")


@register
class MomentumLinear(System):
    name = "momentum_linear"
    description = "psi_eps(a): value at t = T of eps x'' + x' = a x, x(0)=1, x'(0)=0, vs e^{aT}"
    default_plot = "sign"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = {
        "a": Field("float", -5.0, "eigenvalue a of the linear field g(x) = a x"),
        "eps": Field("float", 0.5, "mass eps", lo=1e-12),
        "depth": Field("int", 1024, "layers of the Momentum ResNet (gamma = 1 - h/eps)", lo=1, hi=10**7),
    }

    def validate(self, spec) -> None:
        check_second_order_gamma(spec)

    def outputs(self, setup) -> list[Output]:
        return [
            Output("psi_simulated", "psi_eps(a) = x(T), second-order ODE by the integrator", "1", reduce="point"),
            Output("psi_closed", "psi_eps(a) = x(T) in closed form (roots of eps r^2 + r - a)", "1", reduce="point"),
            Output("psi_network", "x_N of the Momentum ResNet (gamma = 1 - h/eps, f = h a x)", "1", reduce="point"),
            Output("exp_a", "e^{a T}, the first-order ODE x' = a x", "1", reduce="point"),
            Output("closed_error", "|psi_simulated - psi_closed|", "1", reduce="point"),
            Output("sign", "sign of psi_eps(a) in closed form (-1: a negative eigenvalue reached)", "1", reduce="point"),
        ]

    def point_values(self, spec) -> dict:
        T, a, eps, solver = spec.horizon, spec["a"], spec["eps"], spec.solver
        sim = momentum.psi_simulated([a], eps, T, solver.backend, solver.method,
                                     **solver.options)[0]
        closed = float(momentum.psi(a, eps, T))
        return {"psi_simulated": sim, "psi_closed": closed,
                "psi_network": momentum.psi_network([a], eps, spec["depth"], T)[0],
                "exp_a": np.exp(a * T), "closed_error": abs(sim - closed), "sign": np.sign(closed)}

    def decorate(self, ax, ds, var: str) -> None:
        """The discriminant threshold a = -1/(4 eps) (dashed) and the first zero a*(eps) of
        psi at t = T (dotted), on an (a, eps) heat map or on curves against a."""
        T = float(_horizon(ds))
        dims = [d for d in ds[var].dims if ds[d].size > 1]
        if "a" not in dims:
            return
        eps = np.asarray(ds["eps"].values, dtype=float).ravel()
        if "eps" in dims:
            grid = np.geomspace(eps.min(), eps.max(), 200) if eps.min() > 0 else eps
            disc = momentum.discriminant_threshold(grid)
            first = np.array([momentum.negativity_threshold(e, T) for e in grid])
            swap = dims.index("a") > dims.index("eps")
            xs = (grid, grid) if swap else (disc, first)
            ys = (disc, first) if swap else (grid, grid)
            ax.plot(xs[0], ys[0], "w--", lw=1.2, label="a = -1/(4 eps)")
            ax.plot(xs[1], ys[1], "w:", lw=1.5, label="first zero of psi at T")
            lo, hi = np.min(ds["a"].values), np.max(ds["a"].values)
            (ax.set_ylim if swap else ax.set_xlim)(lo, hi)
            ax.legend(fontsize=7, loc="lower right")
        else:
            ax.axvline(float(momentum.discriminant_threshold(eps[0])), ls="--", c="k", lw=1,
                       label="a = -1/(4 eps)")
            ax.axvline(momentum.negativity_threshold(float(eps[0]), T), ls=":", c="k", lw=1,
                       label="first zero of psi at T")
            ax.axhline(0.0, c="grey", lw=0.5)
            ax.legend(fontsize=7)


def _horizon(ds) -> float:
    import tomllib

    return tomllib.loads(ds.attrs["scenario"])["integrator"]["horizon"]
