"""System `momentum_linear` (physics.md §4): psi_eps(a), the value at t = T of
eps x'' + x' = a x, x(0) = 1, x'(0) = 0, simulated by the scenario's integrator, in closed form
and by the Momentum ResNet, beside the first-order e^{a T}. Deterministic: one run per point.

References in the file (along `a`, over a fine grid of eps, `eps_theory`, when eps is swept):
`a_discriminant` = -1/(4 eps), below which the roots of eps r^2 + r - a are complex, and
`a_first_zero` = a*(eps), the largest a with psi_eps(a) = 0 at t = T.
"""

from __future__ import annotations

import numpy as np

from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import INTEGRATOR_KEYS, REFERENCE, Draw, Output, Reference, System, theory_coord
from ..momentum.params import A_MIN, EPS_MAX, check_linear_growth, check_second_order_gamma
from . import register

momentum = lazy("dyn.momentum")


@register
class MomentumLinear(System):
    name = "momentum_linear"
    description = "psi_eps(a): value at t = T of eps x'' + x' = a x, x(0)=1, x'(0)=0, vs e^{aT}"
    default_plot = "sign"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = {
        # bounds: dyn.momentum.params (and a T <= GROWTH_LOG, checked by validate: e^{a T}
        # stays finite)
        "a": Field("float", -5.0, "eigenvalue a of the linear field g(x) = a x", lo=-A_MIN, hi=A_MIN),
        "eps": Field("float", 0.5, "mass eps", lo=1e-12, hi=EPS_MAX),
        "depth": Field("int", 1024, "layers of the Momentum ResNet (gamma = 1 - h/eps)", lo=1, hi=10**7),
    }

    def validate(self, spec) -> None:
        check_second_order_gamma(spec)
        check_linear_growth(spec)

    def outputs(self, setup) -> list[Output]:
        return [
            Output("psi_simulated", "psi_eps(a) = x(T), second-order ODE by the integrator", "1", reduce="point"),
            Output(
                "psi_closed",
                "psi_eps(a) = x(T) in closed form (roots of eps r^2 + r - a)",
                "1",
                reduce="point",
                role=REFERENCE,
            ),
            Output("psi_network", "x_N of the Momentum ResNet (gamma = 1 - h/eps, f = h a x)", "1", reduce="point"),
            Output("exp_a", "e^{a T}, the first-order ODE x' = a x", "1", reduce="point", role=REFERENCE),
            Output("closed_error", "|psi_simulated - psi_closed|", "1", reduce="point"),
            Output(
                "sign", "sign of psi_eps(a) in closed form (-1: a negative eigenvalue reached)", "1", reduce="point"
            ),
        ]

    def point_values(self, spec) -> dict:
        T, a, eps, solver = spec.horizon, spec["a"], spec["eps"], spec.solver
        sim = momentum.psi_simulated([a], eps, T, solver.backend, solver.method, **solver.options)[0]
        closed = float(momentum.psi(a, eps, T))
        return {
            "psi_simulated": sim,
            "psi_closed": closed,
            "psi_network": momentum.psi_network([a], eps, spec["depth"], T)[0],
            "exp_a": np.exp(a * T),
            "closed_error": abs(sim - closed),
            "sign": np.sign(closed),
        }

    def references(self, setup) -> list[Reference]:
        """-1/(4 eps) and a*(eps) at t = T, along `a` (see the module doc), over a fine grid of
        eps when it is swept, else at its value."""
        coords, dims = {}, ()
        if "eps" in setup.axes:
            coords, dims = {"eps_theory": theory_coord("eps", setup.axes["eps"])}, ("eps_theory",)
            eps = coords["eps_theory"].values
        else:
            eps = np.asarray(float(setup.params["eps"]))
        first = np.vectorize(lambda e: momentum.negativity_threshold(e, setup.horizon))(eps)
        over = tuple(o.name for o in self.outputs(setup))
        return [
            Reference(
                "a_discriminant",
                "a = -1/(4 eps): complex roots of eps r^2 + r - a below",
                momentum.discriminant_threshold(eps),
                dims,
                coords,
                draw=Draw(over=over, along="a", label="a = -1/(4 eps)"),
            ),
            Reference(
                "a_first_zero",
                "a*(eps): the largest a with psi_eps(a) = 0 at t = T",
                np.asarray(first, dtype=float),
                dims,
                coords,
                draw=Draw(over=over, along="a", linestyle=":", label="first zero of psi at T"),
            ),
        ]
