"""System `critical_scaling`: the collapse of tokens under attention scores beta_n <x_i, x_j>,
beta_n = gamma log n, over (gamma, n) (Chen, Lin, Polyanskiy, Rigollet, arXiv 2510.05554; the
derivations are in :mod:`dyn.attention.critical`).

The gamma axis is the system's own dimension `kappa` = gamma (1 - rho) = gamma / gamma_c(rho): the
one-layer weight 1 / (1 + (n - 1) n^{-kappa}) depends on gamma and rho only through it, so the
crossovers of every rho sit near kappa = 1. At each point (n, rho):
- the equiangular reduction (the scalar ODE, any n): `ratio`, the displacement of a token over
  the horizon divided by its gamma = 0 value, on the kappa grid, and `gamma_half`, the gamma
  where it is 1/2 (Brent's root, to 1e-10);
- particles (n <= `particles_max`): the attention flow (Q = K = V = I, SA) of n tokens in R^d
  solved by the scenario's integrator from starts near equiangular and from i.i.d. starts
  (`near_ratio`, `iid_ratio` on the same grid, and their crossovers `near_gamma_half`,
  `iid_gamma_half`, interpolated between grid points; NaN above `particles_max`).

As shipped (T = 1; particles in R^64, n = 100 and 316): the reduction's gamma_1/2 goes from 0.913,
2.546, 14.02 at n = 100 to 0.973, 2.266, 11.69 at n = 10^8 for rho = 0, 0.5, 0.9, and the derived
finite-n law extrapolates it to 0.992, 1.969, 9.910 (gamma_c = 1, 2, 10); near-equiangular
particles cross within 3% of the reduction for rho = 0.5 and 0.9, and near the finite-d one-layer
crossover for rho = 0 (1.04 at d = 64); i.i.d. starts cross 3-11% later.

The file also holds the theory: `gamma_c` = 1 / (1 - rho) beside `gamma_half`, and the one-layer
law (1 - w_self) / (1 - 1/n), the short-horizon limit of the ratio, beside `ratio`.

Why this system stays in the package (issue 40 asks for the public API): the scalar ODE is
`point_values` of a `dyn.System` and ports bit for bit, but the particles solve the attention
flow at every kappa of the grid within one point, and the public API has no "this point at
another beta" (a RunSpec is frozen: the workaround is dataclasses.replace on its values), and its
attention kernel, `dyn.particles("exp")` (the post-LN scheme attention_sphere runs), is not the
kernel used here: the particles' ratios would move by up to 3.3e-16.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import INTEGRATOR_KEYS, Chunk, Coord, Draw, Output, Reference, System, bytes_of, over_axes
from . import register

attention = lazy("dyn.attention")
critical = lazy("dyn.attention.critical")

KAPPA = "kappa"
NO_PARTICLES = "n above particles_max (no particle run), or no crossing on the kappa grid"
RATIO = Draw(clim=(0.0, 1.0))
# the reduction's ratio against kappa, one curve per n (a few), one panel per rho: the crossover
# sharpening around kappa = 1 as n grows
PROFILE = Draw(clim=(0.0, 1.0), profile=(KAPPA, "n"))


def kappa_grid(params) -> np.ndarray:
    """The grid of kappa = gamma (1 - rho): kappa_points values from 0 to kappa_max."""
    return np.linspace(0.0, float(params["kappa_max"]), int(params["kappa_points"]))


@register
class CriticalScaling(System):
    name = "critical_scaling"
    description = "collapse under scores gamma log(n) <x_i,x_j> over (gamma, n): equiangular ODE and particles"
    default_plot = "ratio"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    params = {
        "n": Field("int", 1000, "number of tokens n", lo=2, hi=10**12),
        "rho": Field("float", 0.5, "pairwise inner product of the (near) equiangular start", lo=0.0, hi=0.99),
        "d": Field("int", 64, "dimension of the particles' space R^d", lo=2, hi=4096),
        "particles_max": Field("int", 316, "largest n run with particles (0: none)", lo=0, hi=20000),
        "kappa_max": Field(
            "float", 2.0, "largest kappa = gamma (1 - rho) of the grid", gt=0.0, hi=20.0, sweepable=False
        ),
        "kappa_points": Field("int", 17, "points of the kappa grid [0, kappa_max]", lo=3, hi=401, sweepable=False),
    }

    def coords(self, setup) -> dict[str, Coord]:
        return {KAPPA: Coord(kappa_grid(setup.params), "kappa = gamma (1 - rho) = gamma / gamma_c")}

    def outputs(self, setup) -> list[Output]:
        return [
            Output(
                "ratio",
                "equiangular displacement over the horizon / its gamma = 0 value",
                "1",
                (KAPPA,),
                "point",
                draw=PROFILE,
            ),
            Output("gamma_half", "gamma_1/2: equiangular displacement half its gamma = 0 value", "1", (), "point"),
            Output(
                "near_ratio",
                "particles from near-equiangular starts: displacement ratio (mean over runs)",
                "1",
                (KAPPA,),
                nan_means=NO_PARTICLES,
                draw=RATIO,
            ),
            Output(
                "iid_ratio",
                "particles from i.i.d. starts: displacement ratio (mean over runs)",
                "1",
                (KAPPA,),
                nan_means=NO_PARTICLES,
                draw=RATIO,
            ),
            Output(
                "near_gamma_half",
                "gamma_1/2 of particles from near-equiangular starts (mean over runs)",
                "1",
                (),
                nan_means=NO_PARTICLES,
            ),
            Output(
                "iid_gamma_half",
                "gamma_1/2 of particles from i.i.d. starts (mean over runs)",
                "1",
                (),
                nan_means=NO_PARTICLES,
            ),
        ]

    def references(self, setup) -> list[Reference]:
        """gamma_c(rho) = 1/(1 - rho) beside gamma_half (constant along n); the one-layer law
        (1 - w_self) / (1 - 1/n), w_self = 1 / (1 + (n - 1) n^{-kappa}), beside the ratios."""
        dims, cases = over_axes(setup, "rho", "n")
        shape = tuple(len(setup.axes[a]) for a in dims)
        gamma_c = np.empty(shape)
        kappa = kappa_grid(setup.params)
        layer = np.empty(shape + (kappa.size,))
        for index, values in cases:
            gamma_c[index] = critical.critical_gamma(values["rho"])
            n = float(values["n"])
            layer[index] = (1.0 - critical.self_weight(kappa, n, 0.0)) / (1.0 - 1.0 / n)
        return [
            Reference(
                "gamma_c",
                "critical gamma_c = 1 / (1 - rho)",
                gamma_c,
                dims,
                draw=Draw(
                    over=("gamma_half", "near_gamma_half", "iid_gamma_half"),
                    color="black",
                    label=r"$\gamma_c = 1/(1-\rho)$",
                ),
            ),
            Reference(
                "ratio_one_layer",
                "one-layer law (1 - w_self) / (1 - 1/n)",
                layer,
                (*dims, KAPPA),
                draw=Draw(over=("ratio", "near_ratio", "iid_ratio"), color="black", label="one layer: 1 - w_self"),
            ),
        ]

    def point_values(self, spec) -> dict:
        n, rho, horizon = float(spec["n"]), spec["rho"], spec.horizon
        gamma_c = float(critical.critical_gamma(rho))
        ratio = [critical.displacement_ratio(k * gamma_c, n, rho, horizon) for k in kappa_grid(spec.values)]
        return {"ratio": np.array(ratio), "gamma_half": critical.crossover(n, rho, horizon)}

    def run_bytes(self, spec) -> int:
        n = min(spec["n"], max(spec["particles_max"], 1))
        return bytes_of(4, n, spec["d"]) + bytes_of(n, n)

    def simulate(self, spec, runs: range) -> Chunk:
        kappa = kappa_grid(spec.values)
        n, d, rho = spec["n"], spec["d"], spec["rho"]
        found, finite = {}, np.ones(len(runs), dtype=bool)
        for start in critical.STARTS:
            name = "near" if start == "near_equiangular" else start
            if n > spec["particles_max"]:
                found[f"{name}_ratio"] = np.full((len(runs), kappa.size), np.nan)
                found[f"{name}_gamma_half"] = np.full(len(runs), np.nan)
                continue
            draw = critical.near_equiangular_start if name == "near" else critical.iid_start
            x0 = draw(spec.rng, len(runs), n, d, rho)
            moved = np.empty((len(runs), kappa.size))
            for k, value in enumerate(kappa):
                beta = value / (1.0 - rho) * math.log(n)
                problem = attention.flow_problem(attention.pack_params(beta, d))
                states = spec.solver.get().solve(problem, x0, np.array([0.0, spec.horizon])).states
                moved[:, k] = critical.token_displacement(states)
            finite &= np.isfinite(moved).all(axis=1)
            ratio = moved / moved[:, :1]
            found[f"{name}_ratio"] = ratio
            found[f"{name}_gamma_half"] = np.array([critical.grid_crossover(kappa, row) / (1.0 - rho) for row in ratio])
        # NaN above particles_max, or where a run never crosses 1/2 on the grid, is an answer
        # (nan_means); only non-finite displacements make a run diverge
        return Chunk(found, finite=finite)
