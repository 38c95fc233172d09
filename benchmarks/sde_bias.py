r"""The stationary step bias of the SDE schemes against dt: Euler-Maruyama (weak order 1) and
stochastic Heun (weak order 2 for additive noise), on two models:

- ``noisy_phase``: the shipped scenario's system (noisy USA attention on the circle, tokens on
  S^1 in the plane) at one point of its sweep, the order parameter r = |mean_i x_i|;
- ``kuramoto``: the user model of examples/your_own_dynamics/noisy_kuramoto.py (angles in R,
  additive noise), the order parameter r = |mean_i e^{i theta_i}|.

For each step h = ref 2^j the runs are solved from one start (each run's state after a burn-in at
the reference step) on one Brownian path per run: the integrators' option ``refine`` draws the
increment of a step h as the sum of h / ref increments of the reference step, so every step
size sees the same path. The time average A_h of r over the window then differs from the
reference's A_ref by the bias c h^p + o(h^p) and a small noise (the paths stay close): the bias
is the mean over runs of A_h - A_ref, its standard error their spread / sqrt(runs). The slope of
log |bias| against log h, with its 95% interval, is fitted by dyn compare's own fit
(:func:`dyn.presentation.comparison.fit_rate`). The reference is stochastic Heun
(REFERENCE) at the step min(dts) / RATIO: its own bias is RATIO^-2 = 1/16 of Heun's at the
smallest step (a bias c h^2 - c ref^2 bends the fitted slope of Heun by under 0.05) and a far
smaller share of Euler-Maruyama's.

The points: noisy_phase at beta = 1, sigma = 0.4 (sigma_c = 1.06: one tight cluster, r = 0.98,
n = 16); the Kuramoto model at K = 2, sigma = 0.7 (K_c = sigma^2 = 0.49, r = 0.94). There the
runs stay in one cluster, so coupled paths stay within O(h) of each other and the noise of the
bias falls with h. Nearer the transition tokens cross the unstable side of the circle in one
path and not in the other: the coupled differences then keep a noise of their own (about 5e-4
at 32 runs over 1000 time units, K = 2, sigma = 1.2) that hides a weak-order-2 bias.

Scatter over seeds (64 runs, window 400; seeds 11, 1, 2, 3): stochastic Heun's slope 1.86, 1.98,
1.95, 1.97 on noisy_phase and 1.97, 2.04, 2.01, 2.03 on Kuramoto; Euler-Maruyama's 1.15 (its
largest step, 0.4, is not yet asymptotic) and 1.08 on every seed.

    python benchmarks/sde_bias.py            # the table, both models, both methods
    python benchmarks/sde_bias.py --smoke    # 4 runs over a short window: that it runs
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

import integrators

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("euler_maruyama", "stochastic_heun")
RATIO = 4  # the reference step is RATIO times below the smallest step measured
REFERENCE = "stochastic_heun"  # the reference's method


@dataclass(frozen=True)
class Case:
    """One model at one point: its problem, a start sampler and its observable."""

    name: str
    problem: object
    x0: np.ndarray  # (runs, n, d) starts (before the burn-in)
    observable: object  # states (runs, T, n, d) -> (runs, T)
    dts: tuple[float, ...]
    burn: float  # burn-in at the reference step, before the coupled runs
    window: float  # length of the time average
    save: float  # spacing of the averaged samples (a multiple of the largest step)


def noisy_phase_case(runs: int = 64, n: int = 16, beta: float = 1.0, sigma: float = 0.4, window: float = 400.0) -> Case:
    """The noisy_phase system (noisy_attention, USA on the circle) at (beta, sigma)."""
    import dyn
    from dyn.noisy.observables import order_parameter

    scenario = dyn.load(
        "noisy_phase",
        [
            f"sweep.beta=[{beta}]",
            f"sweep.sigma=[{sigma}]",
            f"params.n={n}",
            f"ensemble.runs={runs}",
            "integrator.dt=0.01",
        ],
    )
    system, spec = scenario.system, scenario.spec(0)
    x0 = system.initial_state(spec, runs)
    return Case(
        "noisy_phase",
        system.problem(spec),
        np.ascontiguousarray(x0),
        order_parameter,
        (0.4, 0.2, 0.1, 0.05),
        burn=20.0,
        window=window,
        save=0.4,
    )


def kuramoto_case(runs: int = 64, n: int = 16, K: float = 2.0, sigma: float = 0.7, window: float = 400.0) -> Case:
    """The user's noisy Kuramoto model (examples/your_own_dynamics) at (K, sigma)."""
    import dyn

    folder = ROOT / "examples" / "your_own_dynamics"
    scenario = dyn.load(
        folder / "kuramoto.toml",
        [
            f"sweep.K=[{K}]",
            f"params.sigma={sigma}",
            f"params.n={n}",
            f"ensemble.runs={runs}",
            "integrator.check_step=false",
        ],
    )
    model, spec = scenario.system, scenario.spec(0)
    x0 = model.initial_state(spec, runs)

    def r(states):
        return np.abs(np.exp(1j * states[..., 0]).mean(axis=-1))

    return Case(
        "kuramoto",
        model.problem(spec, x0.shape[1:]),
        np.ascontiguousarray(x0),
        r,
        (0.2, 0.1, 0.05, 0.025),
        burn=20.0,
        window=window,
        save=0.2,
    )


def biases(case: Case, seed: int = 0) -> dict[str, xr.Dataset]:
    """Per method, bias(dt) = mean over runs of A_dt - A_ref, with its standard error (module
    doc); the reference A_ref: stochastic Heun at the step min(dts) / RATIO."""
    ref = min(case.dts) / RATIO
    rng = np.random.default_rng(seed)
    warm = (
        integrators.get("numba", REFERENCE, dt=ref)
        .solve(case.problem, case.x0, np.array([0.0, case.burn]), rng=rng)
        .states[:, -1]
    )
    ts = np.arange(0.0, case.window + case.save / 2, case.save)
    state = rng.bit_generator.state  # each step size: the same path from here on

    def average(method: str, dt: float) -> np.ndarray:
        rng.bit_generator.state = state
        refine = int(round(dt / ref))
        solved = (
            integrators.get("numba", method, dt=dt, refine=refine)
            .solve(case.problem, np.ascontiguousarray(warm), ts, rng=rng)
            .states
        )
        return case.observable(solved)[:, 1:].mean(axis=1)

    base = average(REFERENCE, ref)
    found = {}
    for method in METHODS:
        diffs = np.array([average(method, dt) - base for dt in case.dts])  # (dts, runs)
        runs = diffs.shape[1]
        found[method] = xr.Dataset(
            {
                "bias": ("dt", diffs.mean(axis=1)),
                "bias_se": ("dt", diffs.std(axis=1, ddof=1) / math.sqrt(runs)),
                "reference": ((), float(base.mean())),
            },
            coords={"dt": np.array(case.dts)},
        )
    return found


def slope(table: xr.Dataset):
    """The fitted log-log slope of |bias| against dt (dyn compare's fit, 95% interval)."""
    from dyn.presentation.comparison import fit_rate

    return fit_rate(np.abs(table["bias"]), "dt")


def main() -> None:
    import argparse

    from _timing import add_smoke

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_smoke(parser)
    args = parser.parse_args()
    size = {"runs": 4, "window": 8.0} if args.smoke else {}
    for make in (noisy_phase_case, kuramoto_case):
        case = make(**size)
        for method, table in biases(case).items():
            rate = slope(table)
            print(
                f"{case.name}  {method}  (reference r = {float(table['reference']):.5f} at "
                f"dt = {min(case.dts) / RATIO:g})"
            )
            for dt, b, se in zip(table["dt"].values, table["bias"].values, table["bias_se"].values, strict=True):
                print(f"    dt = {dt:<8g} bias = {b:+.3e} +- {se:.1e}")
            print(f"    slope {rate}")


if __name__ == "__main__":
    main()
