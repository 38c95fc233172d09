"""System `mean_field_modes`: growth rates of the Fourier modes k = 1..6 of the uniform law on the
circle under noisy attention (physics.md §1.3; Q = K = V = I), from the mean-field PDE and from
particles, against the closed form

    USA: lambda_k = k^2 ( I_k(beta)/beta - sigma^2/2 ),   SA: lambda_k = k^2 ( I_k(beta)/(beta I_0(beta)) - sigma^2/2 )

(derivation in :mod:`dyn.noisy.theory`). Mode k is measured over [0, tau/k], tau =
`integrator.horizon` (:mod:`dyn.noisy.modes`):
- `growth_rate`: the PDE (pseudo-spectral, ETDRK4; `grid` points, step `pde_dt` or less) from the
  uniform law perturbed by `epsilon` in mode k; deterministic (one value per point); NaN where
  the window lets other, unstable modes grow out of rounding (shorten the horizon);
- `growth_rate_particles` (and its standard error over runs): `n` tokens per run from the law
  perturbed by `amplitude` in mode k, the SDE with the O(nK) drift by Euler-Maruyama with the
  scenario's `dt`;
- `growth_rate_theory`: the closed form; `growth_rate_error`: max_k |growth_rate - theory|.
`dyn plot` draws growth_rate over (beta, mode) with the closed form's zero crossings (white
ticks) and a "+" where the measured rate is positive.
"""
from __future__ import annotations

import numpy as np

from ..errors import ScenarioError
from ..lazy import lazy
from ..schema import Field
from . import register
from .base import Chunk, Coord, Output, System

noisy = lazy("dyn.noisy")

MODES = 6


@register
class MeanFieldModes(System):
    name = "mean_field_modes"
    description = "growth rates of modes k = 1..6 around the uniform law: PDE, particles, closed form"
    default_plot = "growth_rate"
    equation = "sde"
    integrator = frozenset({"backend", "method", "dt", "horizon"})
    params = {
        "beta": Field("float", 1.0, "inverse temperature beta"),
        "sigma": Field("float", 0.5, "noise sigma", lo=0.0),
        "normalization": Field("str", "SA", "attention normalization", choices=("SA", "USA")),
        "n": Field("int", 1000, "tokens per particle run", lo=2, hi=1_000_000),
        "amplitude": Field("float", 0.1, "moment of the perturbed law the particles start from",
                           lo=1e-6, hi=0.45),
        "epsilon": Field("float", 1e-6, "moment of the PDE's perturbed start", lo=1e-12, hi=0.1),
        "grid": Field("int", 256, "PDE grid points (even)", lo=8, hi=1 << 20),
        "pde_dt": Field("float", 1e-3, "largest PDE step", lo=1e-9),
        "tol": Field("float", 1e-12, "kernel tail tolerance (PDE grid, particle drift)",
                     lo=1e-15, hi=1e-2),
    }

    def validate(self, spec) -> None:
        if spec["grid"] % 2:
            raise ScenarioError("params.grid", f"must be even, got {spec['grid']}")
        try:
            _solver(spec)
        except ValueError as exc:
            raise ScenarioError("params.grid", str(exc)) from None

    def outputs(self, setup) -> list[Output]:
        return [
            Output("growth_rate", "growth rate of mode k, mean-field PDE", "1/time", ("mode",),
                   reduce="point"),
            Output("growth_rate_particles", "growth rate of mode k, particles (mean over runs)",
                   "1/time", ("mode",), reduce="mean_se"),
            Output("growth_rate_theory", "growth rate of mode k, closed form", "1/time", ("mode",),
                   reduce="point"),
            Output("growth_rate_error", "max over k of |PDE - closed form|", "1/time",
                   reduce="point"),
        ]

    def coords(self, setup) -> dict[str, Coord]:
        return {"mode": Coord(np.arange(1, MODES + 1), "Fourier mode k")}

    def point_values(self, spec) -> dict:
        theory = noisy.growth_rates(spec["beta"], spec["sigma"], 2, spec["normalization"],
                                    np.arange(1, MODES + 1))
        pde = noisy.pde_growth_rates(_solver(spec), spec.horizon, MODES, spec["pde_dt"],
                                     spec["epsilon"])
        return {"growth_rate": pde, "growth_rate_theory": theory,
                "growth_rate_error": np.max(np.abs(pde - theory))}

    def run_bytes(self, spec) -> int:
        return 8 * 4 * spec["n"] * 2

    def simulate(self, spec, runs: range) -> Chunk:
        rates, finite = noisy.particle_growth_rates(
            spec.solver.get(), spec.rng, len(runs), spec["n"], spec["beta"], spec["sigma"],
            spec["normalization"], spec.horizon, MODES, spec["amplitude"], spec["tol"])
        return Chunk({"growth_rate_particles": rates}, finite=finite)

    def decorate(self, ax, ds, var: str) -> None:
        """The closed form's zero crossings lambda_k(beta) = 0 on a (beta, mode) heat map, and a
        "+" on every cell whose measured rate is positive."""
        import tomllib

        dims = ds[var].dims
        if not var.startswith("growth_rate") or {d for d in dims if ds.sizes[d] > 1} != {"beta", "mode"}:
            return
        params = tomllib.loads(ds.attrs["scenario"])["params"]
        fixed = {k: (ds[k].item() if k in ds.coords and ds[k].ndim == 0 else params.get(k, dflt))
                 for k, dflt in (("sigma", 0.5), ("normalization", "SA"))}
        beta = np.linspace(float(ds["beta"].min()), float(ds["beta"].max()), 400)
        rates = np.array([noisy.growth_rates(b, fixed["sigma"], 2, fixed["normalization"],
                                             np.arange(1, MODES + 1)) for b in beta])
        first = True
        for k in range(1, MODES + 1):
            sign = np.sign(rates[:, k - 1])
            for i in np.flatnonzero(sign[1:] != sign[:-1]):
                b0, b1 = beta[i], beta[i + 1]
                r0, r1 = rates[i, k - 1], rates[i + 1, k - 1]
                root = b0 - r0 * (b1 - b0) / (r1 - r0)
                at = (root, root), (k - 0.5, k + 0.5)
                if dims.index("beta") > dims.index("mode"):
                    at = at[::-1]
                ax.plot(*at, color="white", lw=2.2,
                        label=r"closed form: $\lambda_k = 0$" if first else None)
                first = False
        values = ds[var].transpose("beta", "mode").values
        bb, kk = np.meshgrid(ds["beta"].values, ds["mode"].values, indexing="ij")
        up = values > 0
        if up.any():
            at = (bb[up], kk[up]) if dims.index("beta") < dims.index("mode") else (kk[up], bb[up])
            ax.plot(*at, "+", color="white", ms=6, mew=1.2, label="measured rate > 0")
        if not first or up.any():
            ax.legend(loc="upper right", fontsize=7, framealpha=0.85)


def _solver(spec):
    return noisy.CircleMeanField(spec["beta"], spec["sigma"], spec["normalization"], spec["grid"],
                                 spec["tol"])
