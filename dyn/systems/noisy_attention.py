"""System `noisy_attention`: the attention flow on S^{d-1} plus an independent Brownian motion per
token (physics.md §1.3), and the phase transition of its uniform law.

    dX_i = P_{X_i}( sum_j A_ij V X_j ) dt + sigma P_{X_i} o dB_i     (SA/USA, beta, Q, K, V)

Solved by Euler-Maruyama with projection and retraction on either backend (Ito form, weak order 1;
see :mod:`dyn.noisy.sde`). The drift (`params.drift`):
- "direct": the O(n^2) attention drift, any d, Q, K, V (n <= 10^4);
- "fourier": the O(nK) series on the circle (d = 2, Q = K = V = I), within `tol` of the direct one
  (relative to e^|beta| for USA), K chosen from beta and tol (:mod:`dyn.noisy.fourier`);
- "auto" (default): "fourier" where it applies, else "direct".

Each run starts from `init` ("uniform": i.i.d. uniform; "cluster": all tokens at e_1). Outputs at
the save times (means over runs): `r` = |mean_i x_i|, on the circle (d fixed to 2) `r_modes`
(r_k = |mean_i e^{ik theta_i}|, k = 1..6, dimension `mode`), `n_clusters` (single linkage at
<x_i, x_j> > 1 - delta), `energy` (the USA interaction energy sum_ij e^{beta <x_i,x_j>}/(2 beta
n^2)); and `r_stationary`, the time average of r once the runs are stationary: a
"time_average" output, so the engine (:mod:`dyn.engine.averaging`) picks the window ([integrator]
burn_in, "auto" by default), continues the runs block by block up to `horizon_cap` until the
window passes its stationarity tests, and writes the standard error from the effective sample
size (`r_stationary_se`), `burn_in_used`, `horizon_used` and `stationary`. Near sigma_c the
relaxation slows down (the first mode's rate vanishes) and in the metastable corner (large beta,
small sigma: several clusters merging) runs disagree: such points end at the cap with
stationary = 0 and are hatched. On the uniform side r_stationary is O(n^{-1/2})
(sqrt(pi/(4n)) on the circle); on the clustered side it is O(1).

Step size: `step_rate` is the largest of the noise rate (d+2) sigma^2/2 (the relative
Euler-Maruyama bias of the sphere's Brownian motion per unit dt, :mod:`dyn.noisy.sde`), the drift's
rate at the uniform law (d-1) sigma_c^2/2, and the stability bound step_tol e^|beta| (USA) or
step_tol (1 + 2|beta|) (SA) that keeps dt times the contraction rate of a tight cluster below 1;
`dt = "auto"` takes step_tol over it. The runs are solved by `spec.solver` with the point's
stream, so `check_step` can rerun them at dt/2 on one Brownian path.

References in the file (Q = K = V = I; `dyn plot` draws them over r_stationary): `sigma_critical`,
the noise sigma_c(beta) below which the uniform law is linearly unstable (derivation in
:mod:`dyn.noisy.theory`), over a fine grid of beta (`beta_theory`) when beta is swept, per swept d
and normalization; on the circle with USA, `sigma_fold`, the mean-field fold below which a
clustered law exists too (`beta_fold`, from FOLD_FROM on); on the circle at a fixed beta > 0,
the stable and unstable mean-field branches r(sigma) with the uniform law r = 0
(`r_branch_stable`, `r_branch_unstable` over the points `sigma_branch`; :mod:`dyn.noisy.branches`).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.contract import AXIS_ATTR, bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..noisy.params import DEFAULT_TOL, DIRECT_MAX_N, FIELDS
from ..core.schema import Field
from . import register
from .base import (AVERAGING_KEYS, Chunk, Coord, Draw, Output, Reference, System, over_axes,
                   state_dims, theory_coord)

noisy = lazy("dyn.noisy")

MODES = 6  # r_k for k = 1..MODES on the circle
FOLD_FROM, FOLD_POINTS = 2.45, 24  # USA circle: subcritical above beta_* = 2.44692
DRIFTS = ("auto", "direct", "fourier")
MAX_RUN_BYTES = 2**30
EXTEND_KEY = 0x45  # key salt of the jax backend's extension stretches


def _identity(a, d: int) -> bool:
    return a is None or np.array_equal(np.asarray(a, dtype=float), np.eye(d))


def drift_of(values) -> str:
    """The drift a point uses: "direct" or "fourier" (see the module doc)."""
    if values["drift"] != "auto":
        return values["drift"]
    plain = values["d"] == 2 and all(_identity(values.get(k), 2) for k in ("Q", "K", "V"))
    return "fourier" if plain else "direct"


@register
class NoisyAttention(System):
    name = "noisy_attention"
    description = "attention flow with independent noise per token: uniform vs clustered phase"
    default_plot = "r_stationary"
    equation = "sde"
    integrator = frozenset({"backend", "method", "dt", "horizon"}) | AVERAGING_KEYS
    jax_methods = frozenset({"euler_maruyama"})
    step_check = True
    params = {
        **FIELDS,
        "init": Field("str", "uniform", "initial law: i.i.d. uniform, or every token at one point",
                      choices=("uniform", "cluster")),
        "delta": Field("float", 0.01, "clustering threshold delta: <x_i,x_j> > 1 - delta",
                       lo=0.0, hi=2.0),
        "drift": Field("str", "auto", "direct O(n^2) drift, the O(nK) Fourier series on the circle "
                       "(d = 2, Q = K = V = I), or auto (fourier where it applies)", choices=DRIFTS),
        "tol": Field("float", DEFAULT_TOL, "accuracy of the Fourier drift against the direct one "
                     "(relative to e^|beta| for USA)", lo=1e-15, hi=1e-2),
    }

    def validate(self, spec) -> None:
        d = spec["d"]
        for key in ("Q", "K", "V"):
            if spec.get(key) is not None and len(spec[key]) != d:
                raise ScenarioError(f"params.{key}", f"must be {d} x {d} (d = {d}), got "
                                    f"{len(spec[key])} x {len(spec[key])}")
        drift = drift_of(spec.values)
        if drift == "fourier":
            if d != 2:
                raise ScenarioError("params.drift", f"the Fourier drift lives on the circle "
                                    f"(d = 2), got d = {d}; use drift = \"direct\"")
            bad = [k for k in ("Q", "K", "V") if not _identity(spec.get(k), 2)]
            if bad:
                raise ScenarioError("params.drift", "the Fourier drift needs Q = K = V = I, but "
                                    f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not the "
                                    "identity; use drift = \"direct\" (or \"auto\")")
        elif spec["n"] > DIRECT_MAX_N:
            raise ScenarioError("params.n", f"the direct drift keeps an n x n matrix per run: "
                                f"n <= {DIRECT_MAX_N}, got {spec['n']}; on the circle with "
                                "Q = K = V = I use drift = \"fourier\"")
        if self.run_bytes(spec) > MAX_RUN_BYTES:
            raise ScenarioError("output.saves", f"one run would keep {self.run_bytes(spec) / 2**30:.1f}"
                                " GiB of states ((saves + 1) x n x d doubles); lower output.saves or n")

    def outputs(self, setup) -> list[Output]:
        outs = [Output("r", "order parameter r = |mean_i x_i| (mean over runs)", "1", ("time",))]
        if _circle(setup):
            outs.append(Output("r_modes", "r_k = |mean_i exp(i k theta_i)| (mean over runs)", "1",
                               ("time", "mode")))
        return outs + [
            Output("n_clusters", "number of clusters (single linkage at <x_i,x_j> > 1 - delta; "
                   "mean over runs)", "1", ("time",)),
            Output("energy", "interaction energy sum_ij exp(beta <x_i,x_j>) / (2 beta n^2) "
                   "(mean over runs)", "1", ("time",)),
            Output("r_stationary", "time average of r once stationary (mean over runs)", "1",
                   reduce="time_average"),
        ]

    def coords(self, setup) -> dict[str, Coord]:
        if not _circle(setup):
            return {}
        return {"mode": Coord(np.arange(1, MODES + 1), "Fourier mode k")}

    def trajectory_dims(self, setup) -> dict[str, int]:
        return state_dims(setup, token="n", coordinate="d")

    def run_bytes(self, spec) -> int:
        return bytes_of(len(spec.times), spec["n"], spec["d"])

    def simulate(self, spec, runs: range) -> Chunk:
        x0 = self.initial_state(spec, len(runs))
        states = spec.solver.get().solve(self.problem(spec), x0, spec.times, rng=spec.rng)
        return self.observe(spec, states)

    def problem(self, spec):
        """The direct or the Fourier drift (see the module doc). On the `jax` backend a batch's
        Fourier vectors are padded with zero coefficients to its largest order K (a zero c_l
        adds nothing), so points of different beta share one program."""
        return _problem(spec)

    def initial_state(self, spec, runs: int) -> np.ndarray:
        return noisy.initial_tokens(spec["init"], spec.rng, runs, spec["n"], spec["d"])

    def observe(self, spec, states) -> Chunk:
        return _observed(spec, states)

    def extend(self, spec, carry, times) -> Chunk:
        """Continue the runs from their last tokens `carry` (runs, n, d) over `times`."""
        if spec.solver.backend == "jax":  # a batch of one point, one key per stretch
            from integrators import Problem

            block = int(round(times[0] / (times[1] - times[0])))
            states = spec.solver.get(dt=spec.dt).solve(
                Problem.stack([self.problem(spec)]), carry[None], times,
                keys=spec.jax_key(EXTEND_KEY, block)[None])[0]
        else:
            states = spec.solver.get().solve(self.problem(spec), carry, times, rng=spec.rng)
        return Chunk({"r_stationary": noisy.order_parameter(states[:, 1:])},
                     finite=np.isfinite(states).all(axis=(1, 2, 3)), carry=states[:, -1])

    def step_rate(self, spec) -> float:
        """max((d+2) sigma^2/2, (d-1) sigma_c^2/2, step_tol x stiffness): see the module doc."""
        d, beta, sigma = spec["d"], float(spec["beta"]), float(spec["sigma"])
        usa = spec["normalization"] == "USA"
        noise = 0.5 * (d + 2) * sigma**2
        drift = 0.5 * (d - 1) * float(noisy.sigma_critical(beta, d, spec["normalization"])) ** 2
        stiff = math.exp(abs(beta)) if usa else 1.0 + 2.0 * abs(beta)
        return max(noise, drift, spec.setup.step_tol * stiff)

    def batch_key(self, spec) -> tuple:  # one program, one step per batch
        return drift_of(spec.values), spec["n"], spec["d"], spec.runs, spec.dt

    def batch_bytes(self, spec) -> int:  # states at the save times, plus the drift's n x n
        n, d = spec["n"], spec["d"]
        pairwise = n * n if drift_of(spec.values) == "direct" else 0
        return 8 * spec.runs * ((len(spec.times) + 4) * n * d + 2 * pairwise)

    def references(self, setup) -> list[Reference]:
        """sigma_c(beta), the fold and the mean-field branches (module doc)."""
        matrices = [setup.params.get(k) for k in ("Q", "K", "V")]
        if any(k in setup.axes for k in ("Q", "K", "V")) or not all(
                a is None or _identity(a, len(a)) for a in matrices):
            return []
        over = ("r_stationary", "r_stationary_se")
        dims, cases = over_axes(setup, "d", "normalization")
        shape = tuple(len(setup.axes[a]) for a in dims)
        coords, grid = {}, ()
        if "beta" in setup.axes:
            coords, grid = {"beta_theory": theory_coord("beta", setup.axes["beta"])}, ("beta_theory",)
            beta = coords["beta_theory"].values
        else:
            beta = np.asarray(float(setup.params["beta"]))
        sc = np.empty(shape + beta.shape)
        for index, v in cases:
            sc[index] = noisy.sigma_critical(beta, int(v["d"]), v["normalization"])
        found = [Reference("sigma_critical", "sigma_c(beta): the uniform law is linearly unstable "
                           "below", sc, (*dims, *grid), coords,
                           draw=Draw(over=over, along="sigma",
                                     label=r"$\sigma_c(\beta)$: uniform law unstable below"))]
        circle_usa = [(i, v) for i, v in cases if v["d"] == 2 and v["normalization"] == "USA"]
        top = float(np.max(setup.values_of("beta")))
        if circle_usa and top > FOLD_FROM:  # a branch continuation per beta: the swept range only
            coords, grid = {}, ()
            if "beta" in setup.axes:
                values = np.linspace(FOLD_FROM, top, FOLD_POINTS)
                coords = {"beta_fold": Coord(values, "beta (grid of the fold)",
                                             attrs={AXIS_ATTR: "beta"})}
                grid = ("beta_fold",)
            at = coords["beta_fold"].values if coords else beta
            fold = np.full(shape + at.shape, np.nan)
            for index, v in circle_usa:
                fold[index] = noisy.fold(at, "USA").reshape(at.shape)
            found.append(Reference("sigma_fold", "mean-field fold: largest sigma with a clustered "
                                   "stationary law (circle, USA)", fold, (*dims, *grid), coords,
                                   draw=Draw(over=over, along="sigma", color="orange",
                                             linestyle=":", label="mean-field fold: clustered "
                                             "law exists below")))
        if not dims and _circle(setup) and "beta" not in setup.axes and float(beta) > 0:
            found += _branches(setup, float(beta), setup.params["normalization"])
        return found


def _branches(setup, beta: float, normalization: str) -> list[Reference]:
    """The mean-field stationary laws on the circle against sigma: the clustered branch (within
    10% of the swept sigma range) and the uniform law r = 0 (stable above sigma_c), as two
    curves, stable and unstable, over the points `sigma_branch` (NaN between pieces)."""
    branch = noisy.circle_branch(beta, normalization)
    sc = float(noisy.sigma_critical(beta, 2, normalization))
    s = np.asarray(setup.axes.get("sigma", branch.sigma), dtype=float)
    lo, hi = min(float(s.min()), sc), max(float(s.max()), sc)
    inside = (branch.sigma >= 0.9 * s.min()) & (branch.sigma <= 1.1 * s.max())
    sigma = np.concatenate([branch.sigma, [lo, sc, hi]])
    stable = np.concatenate([np.where(inside & branch.stable, branch.r, np.nan), [np.nan, 0, 0]])
    unstable = np.concatenate([np.where(inside & ~branch.stable, branch.r, np.nan), [0, 0, np.nan]])
    coords = {"sigma_branch": Coord(sigma, "sigma along the mean-field branches",
                                    attrs={AXIS_ATTR: "sigma"})}
    return [Reference(f"r_branch_{kind}", f"r of the {kind} mean-field stationary laws (circle)",
                      r, ("sigma_branch",), coords,
                      draw=Draw(over=("r_stationary",), linestyle=style, color="black",
                                label=f"mean field: {kind}"))
            for kind, r, style in (("stable", stable, "-"), ("unstable", unstable, ":"))]


def _circle(setup) -> bool:
    """r_modes is written when every point lies on the circle (d fixed to 2)."""
    return "d" not in setup.swept and setup.params.get("d") == 2


def _problem(spec):
    drift = drift_of(spec.values)
    p = noisy.pack_values(spec.values, drift)
    return noisy.fourier_problem(p) if drift == "fourier" else noisy.noisy_problem(p)


def _observed(spec, states) -> Chunk:
    """Per-run observables of states (runs, times, n, d) at the save times."""
    finite = np.isfinite(states).all(axis=(1, 2, 3))
    r = noisy.order_parameter(states)
    if spec["d"] == 2:
        count = noisy.circle_clusters(states, spec["delta"])
    else:
        count = noisy.clusters(states, spec["delta"])
    values = {"r": r, "n_clusters": count,
              "energy": noisy.interaction_energy(states, spec["beta"]),
              "r_stationary": r}  # the series; the engine averages it in time
    if _circle(spec.setup):
        values["r_modes"] = noisy.circle_modes(states, MODES)
    return Chunk(values, states=states, finite=finite, carry=states[:, -1])
