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
With beta swept, the file also holds the reference `beta_zero`: the betas where the closed form
crosses zero, lambda_k(beta) = 0, per mode (dimension `crossing`, NaN-padded), which `dyn plot`
draws as ticks on (beta, mode) heat maps, with a "+" on cells whose rate is positive.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import REFERENCE, Chunk, Coord, Draw, Output, Reference, System, over_axes, theory_grid
from ..noisy.params import FIELDS as NOISY_FIELDS
from . import register

noisy = lazy("dyn.noisy")

MODES = 6
# a mode's moment may move by at most e^{+-WINDOW_LOG} over its window (see _check_windows): from
# epsilon >= 1e-12 the PDE's moment stays above 1e-273, inside float64
WINDOW_LOG = 600.0
# heat-map cells of a growing mode get a "+"; the sign is the point: a diverging map about 0
POSITIVE = Draw(mark_above=0.0, signed=True)
RATES = ("growth_rate", "growth_rate_particles", "growth_rate_theory")


@register
class MeanFieldModes(System):
    name = "mean_field_modes"
    description = "growth rates of modes k = 1..6 around the uniform law: PDE, particles, closed form"
    default_plot = "growth_rate"
    equation = "sde"
    integrator = frozenset({"backend", "method", "dt", "horizon"})
    params = {
        "beta": NOISY_FIELDS["beta"],
        "sigma": replace(NOISY_FIELDS["sigma"], default=0.5),
        "normalization": replace(NOISY_FIELDS["normalization"], default="SA"),
        "n": replace(NOISY_FIELDS["n"], default=1000, lo=2, doc="tokens per particle run"),
        "amplitude": Field("float", 0.1, "moment of the perturbed law the particles start from", lo=1e-6, hi=0.45),
        "epsilon": Field("float", 1e-6, "moment of the PDE's perturbed start", lo=1e-12, hi=0.1),
        "grid": Field("int", 256, "PDE grid points (even)", lo=8, hi=1 << 20),
        "pde_dt": Field("float", 1e-3, "largest PDE step", lo=1e-9),
        "tol": Field("float", 1e-12, "kernel tail tolerance (PDE grid, particle drift)", lo=1e-15, hi=1e-2),
    }

    def validate(self, spec) -> None:
        if spec["grid"] % 2:
            raise ScenarioError("params.grid", f"must be even, got {spec['grid']}")
        try:
            _solver(spec)
        except ValueError as exc:
            raise ScenarioError("params.grid", str(exc)) from None
        _check_windows(spec)

    def outputs(self, setup) -> list[Output]:
        return [
            Output(
                "growth_rate",
                "growth rate of mode k, mean-field PDE",
                "1/time",
                ("mode",),
                reduce="point",
                draw=POSITIVE,
            ),
            Output(
                "growth_rate_particles",
                "growth rate of mode k, particles (mean over runs)",
                "1/time",
                ("mode",),
                reduce="mean_se",
                draw=POSITIVE,
            ),
            Output(
                "growth_rate_theory",
                "growth rate of mode k, closed form",
                "1/time",
                ("mode",),
                reduce="point",
                role=REFERENCE,
                draw=POSITIVE,
            ),
            Output("growth_rate_error", "max over k of |PDE - closed form|", "1/time", reduce="point"),
        ]

    def coords(self, setup) -> dict[str, Coord]:
        return {"mode": Coord(np.arange(1, MODES + 1), "Fourier mode k")}

    def point_values(self, spec) -> dict:
        theory = noisy.growth_rates(spec["beta"], spec["sigma"], 2, spec["normalization"], np.arange(1, MODES + 1))
        pde = noisy.pde_growth_rates(_solver(spec), spec.horizon, MODES, spec["pde_dt"], spec["epsilon"])
        return {"growth_rate": pde, "growth_rate_theory": theory, "growth_rate_error": np.max(np.abs(pde - theory))}

    def run_bytes(self, spec) -> int:
        return 8 * 4 * spec["n"] * 2

    def simulate(self, spec, runs: range) -> Chunk:
        rates, finite = noisy.particle_growth_rates(
            spec.solver.get(),
            spec.rng,
            len(runs),
            spec["n"],
            spec["beta"],
            spec["sigma"],
            spec["normalization"],
            spec.horizon,
            MODES,
            spec["amplitude"],
            spec["tol"],
        )
        return Chunk({"growth_rate_particles": rates}, finite=finite)

    def references(self, setup) -> list[Reference]:
        """beta_zero: the roots in beta of the closed form lambda_k(beta) (module doc) over the
        plotted beta range, per mode, for each swept sigma and normalization: sign changes on
        a fine grid, refined by Brent's method to 1e-12."""
        if "beta" not in setup.axes:
            return []
        from scipy.optimize import brentq

        beta = theory_grid(setup.axes["beta"], 400)
        modes = np.arange(1, MODES + 1)
        dims, cases = over_axes(setup, "sigma", "normalization")
        roots = {}

        def rate(b, k, sigma, normalization):
            return float(noisy.growth_rates(b, sigma, 2, normalization, [k])[0])

        for index, v in cases:
            rates = np.array([noisy.growth_rates(b, v["sigma"], 2, v["normalization"], modes) for b in beta])
            for k in modes:
                sign = np.sign(rates[:, k - 1])
                roots[index, k] = [
                    brentq(rate, beta[i], beta[i + 1], args=(k, v["sigma"], v["normalization"]), xtol=1e-12)
                    for i in np.flatnonzero(sign[1:] * sign[:-1] < 0)
                ]
        width = max(1, max(len(r) for r in roots.values()))
        values = np.full(tuple(len(setup.axes[a]) for a in dims) + (MODES, width), np.nan)
        for (index, k), found in roots.items():
            values[index + (k - 1, slice(0, len(found)))] = found
        coords = {"crossing": Coord(np.arange(width), "zero crossing of lambda_k along beta")}
        return [
            Reference(
                "beta_zero",
                "beta where the closed-form rate of mode k crosses zero",
                values,
                (*dims, "mode", "crossing"),
                coords,
                draw=Draw(over=RATES, along="beta", linestyle="-", label=r"closed form: $\lambda_k = 0$"),
            )
        ]


def _check_windows(spec) -> None:
    """Mode k is measured over [0, T/k] (T the horizon): by the closed form its moment moves by
    e^{lambda_k T / k}, which past e^{+-WINDOW_LOG} leaves float64 (the PDE's from epsilon) and
    is noise for the particles; refused, naming sigma when the noise's decay -k^2 sigma^2 / 2
    dominates, else beta (USA's growth e^|beta| / beta)."""
    k = np.arange(1, MODES + 1)
    rates = noisy.growth_rates(spec["beta"], spec["sigma"], 2, spec["normalization"], k)
    with np.errstate(over="ignore", invalid="ignore"):
        moved = rates * spec.horizon / k
    bad = np.flatnonzero(~(np.abs(moved) <= WINDOW_LOG))
    if bad.size:
        i = int(bad[0])
        key = "sigma" if moved[i] < 0 else "beta"
        raise ScenarioError(
            f"params.{key}",
            f"mode {k[i]} moves by e^{moved[i]:.3g} over its "
            f"window [0, T/{k[i]}] (lambda_{k[i]} = {rates[i]:.3g}, closed form; "
            f"T = {spec.horizon:g}): past e^+-{WINDOW_LOG:g} its moment leaves "
            f"float64; lower {key} or integrator.horizon",
        )


def _solver(spec):
    return noisy.CircleMeanField(spec["beta"], spec["sigma"], spec["normalization"], spec["grid"], spec["tol"])
