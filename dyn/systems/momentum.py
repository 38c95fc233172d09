"""Systems of Momentum ResNets (physics.md §4): depth limit, linear representability, optimization.

- ``momentum_limit``: the network  v <- gamma v + (1-gamma) h g(x, t_n),  x <- x + v  of `depth`
  layers on [0, T] against the second-order ODE  eps x'' + x' = g  (gamma = 1 - h/eps) and the
  first-order ODE  x' = g, in float or exact fixed-point arithmetic, with the inversion error.
- ``momentum_linear``: psi_eps(a), the value at t = T of  eps x'' + x' = a x,  x(0) = 1, x'(0) = 0,
  simulated by the integrators, in closed form, by the network, beside the first-order e^{a T}.
- ``momentum_optimize``: heavy ball  v <- gamma v - eta grad F(x),  x <- x + v  on a quadratic;
  gamma < 1 contracts phase space and converges, gamma = 1 (RevNet/leapfrog) preserves volume.

Problem instances (the field g, the inputs, the quadratic) are drawn from
``default_rng(ensemble.seed)``, the same for every point of a sweep (common random numbers), so
that points differ only by their swept parameters: a convergence curve over depth is one network.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ScenarioError
from ..schema import Field
from . import register
from .base import DIVERGED, OK, Coord, Output, PointResult, System

if TYPE_CHECKING:
    from ..scenario import Scenario


def _instance_rng(scenario: "Scenario") -> np.random.Generator:
    return np.random.default_rng(scenario.ensemble["seed"])


def _ode_options(scenario: "Scenario") -> tuple[str, str, dict]:
    from ..scenario import solver_options

    cfg = scenario.integrator
    return cfg["backend"], cfg["method"], solver_options(cfg)


def _check_second_order_gamma(point: dict, scenario: "Scenario") -> None:
    """gamma = 1 - h/eps with h = T/depth must be positive (else the network is not invertible)."""
    h = scenario.integrator["horizon"] / point["depth"]
    if h >= point["eps"]:
        raise ScenarioError("params.depth", f"gamma = 1 - h/eps must be > 0: depth "
                            f"{point['depth']} with eps = {point['eps']} gives h = {h:.3g} >= eps")


@register
class MomentumLimit(System):
    name = "momentum_limit"
    description = "Momentum ResNet of depth N vs eps x'' + x' = g and x' = g; float or exact inversion"
    default_plot = "log10_error"
    equation = "ode"
    params = {
        "d": Field("int", 2, "state dimension d", lo=1, hi=1000),
        "depth": Field("int", 256, "layers N on [0, T] (h = T/N)", lo=1, hi=10**7),
        "eps": Field("float", 0.5, "mass eps of eps x'' + x' = g", lo=1e-12),
        "gamma": Field("float", None, "fixed gamma (default: 1 - h/eps, the second-order scaling)",
                       lo=0.0, hi=1.0),
        "scale": Field("float", 2.0, "size of the random tanh field g", lo=0.0),
        "arithmetic": Field("str", "float", "network arithmetic", choices=("float", "exact")),
    }

    def validate(self, point: dict, scenario: "Scenario") -> None:
        if point.get("gamma") is None:
            _check_second_order_gamma(point, scenario)
        elif point["gamma"] == 0.0:
            raise ScenarioError("params.gamma", "gamma = 0 is not invertible")

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("error", "max |x_N - x(T)|, network vs second-order ODE (over runs)", "1"),
            Output("log10_error", "log10 of error (slope -log10(2) per doubling of depth at rate 1/N)", "1"),
            Output("error_first_order", "max |x_N - x(T)|, network vs first-order ODE x' = g", "1"),
            Output("inversion_error", "max |input - inverse(output)| over x_0 and v_0 (0: bit for bit)", "1"),
            Output("gamma", "gamma used by the network", "1"),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        from .. import momentum

        T = scenario.integrator["horizon"]
        inst = _instance_rng(scenario)
        p = momentum.random_tanh_field(inst, point["d"], eps=point["eps"], scale=point["scale"])
        x0 = inst.standard_normal((scenario.ensemble["runs"], point["d"]))
        u0 = np.zeros_like(x0)
        backend, method, opts = _ode_options(scenario)
        ref2 = momentum.solve_second_order(p, x0, u0, [0.0, T], backend, method, **opts)[:, -1, 0]
        ref1 = momentum.solve_first_order(p, x0, [0.0, T], backend, method, **opts)[:, -1]
        gamma = point.get("gamma")
        gamma = momentum.gamma_for(point["eps"], T, point["depth"]) if gamma is None else gamma
        if point["arithmetic"] == "exact":
            gamma = momentum.quantized_gamma(gamma)
        x, _, inv = momentum.network_states(p, x0, u0, T, point["depth"], gamma=gamma,
                                            arithmetic=point["arithmetic"])
        err = np.max(np.abs(x - ref2))
        values = {"error": err, "log10_error": np.log10(err), "error_first_order": np.max(np.abs(x - ref1)),
                  "inversion_error": inv, "gamma": gamma}
        if not all(np.isfinite(v) for v in values.values()):
            return PointResult(values, DIVERGED, "a state or the float inverse overflowed")
        return PointResult(values, OK)


@register
class MomentumLinear(System):
    name = "momentum_linear"
    description = "psi_eps(a): value at t = T of eps x'' + x' = a x, x(0)=1, x'(0)=0, vs e^{aT}"
    default_plot = "sign"
    equation = "ode"
    params = {
        "a": Field("float", -5.0, "eigenvalue a of the linear field g(x) = a x"),
        "eps": Field("float", 0.5, "mass eps", lo=1e-12),
        "depth": Field("int", 1024, "layers of the Momentum ResNet (gamma = 1 - h/eps)", lo=1, hi=10**7),
    }

    def validate(self, point: dict, scenario: "Scenario") -> None:
        _check_second_order_gamma(point, scenario)

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("psi_simulated", "psi_eps(a) = x(T), second-order ODE by the integrator", "1"),
            Output("psi_closed", "psi_eps(a) = x(T) in closed form (roots of eps r^2 + r - a)", "1"),
            Output("psi_network", "x_N of the Momentum ResNet (gamma = 1 - h/eps, f = h a x)", "1"),
            Output("exp_a", "e^{a T}, the first-order ODE x' = a x", "1"),
            Output("closed_error", "|psi_simulated - psi_closed|", "1"),
            Output("sign", "sign of psi_eps(a) in closed form (-1: a negative eigenvalue reached)", "1"),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        from .. import momentum

        T = scenario.integrator["horizon"]
        backend, method, opts = _ode_options(scenario)
        a, eps = point["a"], point["eps"]
        sim = momentum.psi_simulated([a], eps, T, backend, method, **opts)[0]
        closed = float(momentum.psi(a, eps, T))
        values = {"psi_simulated": sim, "psi_closed": closed,
                  "psi_network": momentum.psi_network([a], eps, point["depth"], T)[0],
                  "exp_a": np.exp(a * T), "closed_error": abs(sim - closed), "sign": np.sign(closed)}
        if not np.isfinite(sim):
            return PointResult(values, DIVERGED, "the simulated solution overflowed")
        return PointResult(values, OK)

    def decorate(self, ax, ds, var: str) -> None:
        """The discriminant threshold a = -1/(4 eps) (dashed) and the first zero a*(eps) of
        psi at t = T (dotted), on an (a, eps) heat map or on curves against a."""
        from .. import momentum

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


@register
class MomentumOptimize(System):
    name = "momentum_optimize"
    description = "heavy ball (gamma < 1) vs volume-preserving RevNet (gamma = 1) on a quadratic"
    default_plot = "log10_distance"
    params = {
        "d": Field("int", 10, "dimension d", lo=1, hi=10_000),
        "kappa": Field("float", 100.0, "condition number of A (eigenvalues in [1/kappa, 1])", lo=1.0),
        "eta": Field("float", 1.0, "step eta: v <- gamma v - eta grad F(x)", lo=0.0),
        "gamma": Field("float", 0.9, "momentum gamma (1: RevNet/leapfrog)", lo=0.0, hi=1.0),
        "iterations": Field("int", 300, "layers (iterations)", lo=1, hi=10**6, sweepable=False),
    }

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        n = scenario.params["iterations"]
        return {"iteration": Coord(np.arange(n + 1, dtype=np.float64), "iteration k", "1")}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("distance", "|x_k - x*| (mean over runs)", "1", ("iteration",)),
            Output("log10_distance", "log10 |x_k - x*| (mean over runs)", "1", ("iteration",)),
            Output("final_distance", "|x_K - x*| / |x_0 - x*| at the last iteration (max over runs)", "1"),
            Output("rate", "spectral radius of the layer map (asymptotic contraction per layer)", "1"),
            Output("volume_factor", "phase-space volume factor per layer, gamma^d", "1"),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        from .. import momentum

        inst = _instance_rng(scenario)
        A, xstar = momentum.random_quadratic(inst, point["d"], point["kappa"])
        x0 = xstar + inst.standard_normal((scenario.ensemble["runs"], point["d"]))
        with np.errstate(over="ignore", invalid="ignore"):
            dist = momentum.heavy_ball(x0, A, xstar, point["gamma"], point["eta"], point["iterations"])
            values = {"distance": dist.mean(axis=0), "log10_distance": np.log10(dist).mean(axis=0),
                      "final_distance": np.max(dist[:, -1] / dist[:, 0]),
                      "rate": momentum.contraction_rate(A, point["gamma"], point["eta"]),
                      "volume_factor": point["gamma"] ** point["d"]}
        if not np.all(np.isfinite(dist)):
            return PointResult(values, DIVERGED, "the iterates blew up (eta too large)")
        return PointResult(values, OK)


def _horizon(ds) -> float:
    import tomllib

    return tomllib.loads(ds.attrs["scenario"])["integrator"]["horizon"]
