"""Systems `sinkformer` and `sinkhorn_attention` (physics.md §2, arXiv 2110.11773).

`sinkformer`: particles x_i in R^d, dx_i/dt = sum_j K_ij W_V x_j with K softmax or Sinkhorn.
  setting = "heat":      K from the Gaussian kernel exp(-|x_i - x_j|^2 / (2 tau)), values
                         -(2 alpha / tau) (x_j - x_i); the variance should follow s0^2 + 2 alpha t
                         under Sinkhorn (heat equation) and grow about twice as fast under softmax.
  setting = "attention": scores x_i^T W x_j, values W_V x_j (W_V defaults to W); with W symmetric
                         the Sinkhorn flow is the Wasserstein gradient flow of the energy.
  Starts are N(0, s0^2 I); outputs are ensemble means of the variance and of the self-transport
  energy F = 1/2 OT_1(mu, mu) at the save times. `form = "network"`: the discrete Sinkformer of
  `depth` residual layers over [0, T] instead of the ODE.
`sinkhorn_attention`: distance from doubly stochastic of the attention matrix after k = 1..N
  alternating normalizations, for Gaussian starts, with bandwidth tau (scores -|x_i-x_j|^2/(2 tau)
  or x_i^T x_j / tau).
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

NORMALIZATIONS = ("sinkhorn", "softmax")


@register
class Sinkformer(System):
    name = "sinkformer"
    description = "Sinkformer / softmax particle flows: heat-diffusion limit and energy descent"
    default_plot = "variance"
    equation = "ode"
    params = {
        "n": Field("int", 200, "number of particles n", lo=2, hi=20_000),
        "d": Field("int", 1, "space dimension d", lo=1, hi=1_000),
        "normalization": Field("str", "sinkhorn", "attention normalization", choices=NORMALIZATIONS),
        "setting": Field("str", "heat", "heat (Gaussian kernel, values on x_j - x_i) or attention "
                         "(scores x^T W y, values W_V x_j)", choices=("heat", "attention")),
        "alpha": Field("float", 0.5, "diffusion coefficient alpha (heat setting)"),
        "tau": Field("float", 0.05, "kernel bandwidth tau (heat setting)", lo=1e-12),
        "s0": Field("float", 1.0, "standard deviation of the Gaussian start", lo=0.0),
        "iterations": Field("int", 1000, "Sinkhorn normalizations (the cap when tol > 0)",
                            lo=1, hi=10**7),
        "tol": Field("float", 1e-9, "Sinkhorn marginal tolerance (0: exactly `iterations`)",
                     lo=0.0, hi=1.0),
        "W": Field("matrix", None, "score matrix W = W_Q^T W_K (attention setting; default I)",
                   sweepable=False),
        "WV": Field("matrix", None, "value matrix W_V (attention setting; default W)",
                    sweepable=False),
        "form": Field("str", "flow", "continuous flow or discrete network", choices=("flow", "network")),
        "depth": Field("int", 100, "layers of the network over [0, T]", lo=1, hi=10**8),
    }

    def validate(self, point: dict, scenario: "Scenario") -> None:
        for name in ("W", "WV"):
            if name in point and len(point[name]) != point["d"]:
                raise ScenarioError(f"params.{name}", f"must be {point['d']} x {point['d']} "
                                    f"(d = {point['d']}), got {len(point[name])} x {len(point[name])}")
        if point["form"] == "network" and point["depth"] % scenario.output["saves"]:
            raise ScenarioError("params.depth", f"depth {point['depth']} must be a multiple of "
                                f"output.saves = {scenario.output['saves']}")

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {"time": Coord(_save_times(scenario), "time t", "1")}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("variance", "per-coordinate variance of the particles (mean over runs)", "1",
                   ("time",)),
            Output("energy", "self-transport energy F = OT_1(mu, mu) / 2 (mean over runs)", "1",
                   ("time",)),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        from .. import sinkformer as sf

        runs, n, d = scenario.ensemble["runs"], point["n"], point["d"]
        ts = _save_times(scenario)
        p = _pack(point)
        x0 = point["s0"] * rng.standard_normal((runs, n, d))
        with np.errstate(over="ignore", invalid="ignore"):
            states = _solve(point, scenario, p, x0, ts)
            finite = np.isfinite(states).all(axis=(1, 2, 3))
            var = sf.variance(states)
            energy = np.full(var.shape, np.nan)
            for e in np.flatnonzero(finite):
                energy[e] = sf.self_transport_energy(states[e], p)
        values = {"variance": var.mean(axis=0), "energy": energy.mean(axis=0)}
        bad = int((~finite).sum())
        if bad:
            return PointResult(values, DIVERGED, f"{bad} of {runs} runs overflowed")
        return PointResult(values, OK)

    def decorate(self, ax, ds, var: str) -> None:
        """Heat line s0^2 + 2 alpha t on the variance of the heat setting."""
        import tomllib

        params = tomllib.loads(ds.attrs["scenario"])["params"]
        if var != "variance" or params.get("setting") != "heat" or "time" not in ds.coords:
            return
        t = ds["time"].values
        ax.plot(t, params["s0"] ** 2 + 2 * params["alpha"] * t, "k--", lw=1.2,
                label="heat: s0^2 + 2 alpha t")
        ax.legend(fontsize=8)


@register
class SinkhornAttention(System):
    name = "sinkhorn_attention"
    description = "distance from doubly stochastic after k Sinkhorn normalizations"
    default_plot = "log10_marginal_error"
    params = {
        "n": Field("int", 200, "number of tokens n", lo=2, hi=20_000),
        "d": Field("int", 2, "token dimension d", lo=1, hi=1_000),
        "tau": Field("float", 0.1, "bandwidth tau", lo=1e-12),
        "s0": Field("float", 1.0, "standard deviation of the Gaussian tokens", lo=0.0),
        "scores": Field("str", "sqdist", "sqdist: -|x_i - x_j|^2/(2 tau); dot: x_i^T x_j / tau",
                        choices=("sqdist", "dot")),
        "iterations": Field("int", 100, "largest number of normalizations N", lo=1, hi=100_000,
                            sweepable=False),
    }

    def coords(self, scenario: "Scenario") -> dict[str, Coord]:
        return {"iteration": Coord(_iterations(scenario), "Sinkhorn iterations k", "1")}

    def outputs(self, scenario: "Scenario") -> list[Output]:
        return [
            Output("marginal_error", "max |row or column sum - 1| of K^k (mean over runs)", "1",
                   ("iteration",)),
            Output("log10_marginal_error", "log10 max |row or column sum - 1| of K^k "
                   "(mean over runs)", "1", ("iteration",)),
        ]

    def run_point(self, point: dict, scenario: "Scenario", rng: np.random.Generator) -> PointResult:
        from .. import sinkformer as sf

        runs, n, d, N = scenario.ensemble["runs"], point["n"], point["d"], point["iterations"]
        if point["scores"] == "sqdist":
            p = sf.pack_params(d, scores="sqdist", tau=point["tau"])
        else:
            p = sf.pack_params(d, scores="dot", W=np.eye(d) / point["tau"])
        errors = np.empty((runs, N))
        for e in range(runs):
            S = sf.score_matrix(point["s0"] * rng.standard_normal((n, d)), p)
            errors[e] = sf.sinkhorn(S, N + 1)[4][:N]  # pass k + 1 measures K^k
        # the exact side is at rounding level; floor the log at 1e-17 for the picture
        values = {"marginal_error": errors.mean(axis=0),
                  "log10_marginal_error": np.log10(np.maximum(errors, 1e-17)).mean(axis=0)}
        if not np.isfinite(errors).all():
            return PointResult(values, DIVERGED, "non-finite marginals")
        return PointResult(values, OK)


def _pack(point: dict) -> np.ndarray:
    from .. import sinkformer as sf

    common = dict(normalization=point["normalization"], iterations=point["iterations"],
                  tol=point["tol"])
    if point["setting"] == "heat":
        return sf.heat_params(point["d"], point["alpha"], point["tau"], **common)
    W = point.get("W")
    return sf.pack_params(point["d"], W=W, WV=point.get("WV", W), **common)


def _save_times(scenario: "Scenario") -> np.ndarray:
    return np.linspace(0.0, scenario.integrator["horizon"], scenario.output["saves"] + 1)


def _iterations(scenario: "Scenario") -> np.ndarray:
    return np.arange(1, scenario.params["iterations"] + 1)


def _solve(point: dict, scenario: "Scenario", p: np.ndarray, x0: np.ndarray, ts: np.ndarray):
    from .. import sinkformer as sf

    if point["form"] == "network":
        every = point["depth"] // (len(ts) - 1)
        return sf.sinkformer_layers(x0, point["depth"], ts[-1], p, save_every=every)
    import integrators

    from ..scenario import solver_options

    cfg = scenario.integrator
    integ = integrators.get(cfg["backend"], cfg["method"], **solver_options(cfg))
    problem = integrators.Problem(sf.sinkformer_drift, sf.sinkformer_drift_jax, p,
                                  integrators.EUCLIDEAN)
    return integ.solve(problem, x0, ts)
