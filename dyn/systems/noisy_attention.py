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
"time_average" output, so the engine (:mod:`dyn.averaging`) picks the window ([integrator]
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

`dyn plot` overlays, on a (beta, sigma) heat map, the noise sigma_c(beta) below which the uniform
law is linearly unstable (d and normalization of the panel; derivation in
:mod:`dyn.noisy.theory`) and, on the circle with USA, the mean-field fold below which a clustered
law exists too; on r_stationary against sigma, the line sigma = sigma_c and, on the circle, the
stable and unstable mean-field branches (:mod:`dyn.noisy.stationary`).
"""
from __future__ import annotations

import math

import numpy as np

from ..contract import bytes_of
from ..errors import ScenarioError
from ..lazy import lazy
from ..noisy.params import DEFAULT_TOL, DIRECT_MAX_N, FIELDS
from ..schema import Field
from . import register
from .base import AVERAGING_KEYS, Chunk, Coord, Output, System, state_dims

noisy = lazy("dyn.noisy")

MODES = 6  # r_k for k = 1..MODES on the circle
FOLD_FROM, FOLD_POINTS = 2.45, 24  # USA circle: the branch is subcritical above beta = 2.447
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
        x0 = noisy.initial_tokens(spec["init"], spec.rng, len(runs), spec["n"], spec["d"])
        states = spec.solver.get().solve(_problem(spec), x0, spec.times, rng=spec.rng)
        return _observed(spec, states)

    def extend(self, spec, carry, times) -> Chunk:
        """Continue the runs from their last tokens `carry` (runs, n, d) over `times`."""
        if spec.solver.backend == "jax":
            from integrators import jax_batch
            from integrators.geometry import SPHERE

            record = _record(spec)
            block = int(round(times[0] / (times[1] - times[0])))  # one key per stretch
            states = jax_batch.em_batch(record.drift_jax, record.diffusion_jax, SPHERE,
                                        (spec["n"], spec["d"]), carry[None],
                                        noisy.pack_values(spec.values, drift_of(spec.values))[None],
                                        times, spec.dt, keys=spec.jax_key(EXTEND_KEY, block)[None])[0]
        else:
            states = spec.solver.get().solve(_problem(spec), carry, times, rng=spec.rng)
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

    def simulate_batch(self, specs) -> list[Chunk]:
        """The `jax` backend: the same starts as the numba path (from each point's stream), the
        noise from each point's key, all points and runs advanced by one Euler-Maruyama program.
        Fourier vectors are padded with zero coefficients to the batch's largest order K (a zero
        c_l adds nothing), so points of different beta share one program."""
        from integrators import jax_batch
        from integrators.geometry import SPHERE

        spec = specs[0]
        record = _record(spec)
        vectors = [noisy.pack_values(s.values, drift_of(s.values)) for s in specs]
        width = max(len(v) for v in vectors)
        p = np.stack([np.pad(v, (0, width - len(v))) for v in vectors])
        x0 = np.stack([noisy.initial_tokens(s["init"], s.rng, s.runs, s["n"], s["d"]) for s in specs])
        keys = np.stack([s.jax_key() for s in specs])
        states = jax_batch.em_batch(record.drift_jax, record.diffusion_jax, SPHERE,
                                    (spec["n"], spec["d"]), x0, p, spec.times,
                                    spec.dt, keys=keys)
        return [_observed(s, states[i]) for i, s in enumerate(specs)]

    def batch_bytes(self, spec) -> int:  # states at the save times, plus the drift's n x n
        n, d = spec["n"], spec["d"]
        pairwise = n * n if drift_of(spec.values) == "direct" else 0
        return 8 * spec.runs * ((len(spec.times) + 4) * n * d + 2 * pairwise)

    def decorate(self, ax, ds, var: str) -> None:
        """sigma_c(beta) on a (beta, sigma) heat map (and, circle with USA, the fold); on curves
        against sigma, sigma = sigma_c and (circle, beta > 0) the mean-field branches."""
        import tomllib

        params = tomllib.loads(ds.attrs["scenario"])["params"]

        def fixed(key, default):
            if key in ds.coords and ds[key].ndim == 0:
                return ds[key].item()
            return params.get(key, default)

        d, normalization = int(fixed("d", 2)), str(fixed("normalization", "USA"))
        plain = all(params.get(k) is None for k in ("Q", "K", "V"))
        if not plain or var not in ("r_stationary", "r_stationary_se"):
            return
        dims = ds[var].dims
        field = [x for x in dims if ds.sizes[x] > 1]
        if set(field) == {"beta", "sigma"}:
            lo, hi = float(ds["beta"].min()), float(ds["beta"].max())
            beta = np.linspace(lo, hi, 200)
            sc = noisy.sigma_critical(beta, d, normalization)
            keep = sc <= float(ds["sigma"].max()) * 1.05
            xy = (beta, sc) if dims.index("beta") < dims.index("sigma") else (sc, beta)
            ax.plot(xy[0][keep], xy[1][keep], color="white", lw=2, ls="--",
                    label=rf"$\sigma_c(\beta)$: uniform law unstable below ({normalization}, d = {d})")
            if d == 2 and normalization == "USA" and hi > FOLD_FROM:
                bf = np.linspace(FOLD_FROM, hi, FOLD_POINTS)
                fold = noisy.fold(bf, normalization)
                xy = (bf, fold) if dims.index("beta") < dims.index("sigma") else (fold, bf)
                ok = np.isfinite(fold) & (fold <= float(ds["sigma"].max()) * 1.05)
                if ok.any():
                    ax.plot(xy[0][ok], xy[1][ok], color="orange", lw=1.6, ls=":",
                            label="mean-field fold: clustered law exists below")
            ax.legend(loc="upper left", fontsize=7, framealpha=0.85)
        elif field and field[0] == "sigma" and "beta" not in field:
            beta = float(fixed("beta", 1.0))
            sc = noisy.sigma_critical(beta, d, normalization)
            ax.axvline(sc, color="0.3", ls="--", lw=1.2,
                       label=rf"$\sigma_c$ = {sc:.3g} (uniform law unstable below)")
            if d == 2 and var == "r_stationary" and beta > 0:
                branch = noisy.circle_branch(beta, normalization)
                s_lo, s_hi = float(ds["sigma"].min()), float(ds["sigma"].max())
                inside = (branch.sigma >= s_lo * 0.9) & (branch.sigma <= s_hi * 1.1)
                for stable, style, label in ((True, "-", "mean field: stable"),
                                             (False, ":", "mean field: unstable")):
                    part = np.where(inside & (branch.stable == stable), branch.r, np.nan)
                    ax.plot(branch.sigma, part, "k" + style, lw=1.3, label=label)
                if sc < s_hi:  # the uniform law: stable above sigma_c, unstable below
                    ax.plot([max(sc, s_lo), s_hi], [0, 0], "k-", lw=1.3)
                if sc > s_lo:
                    ax.plot([s_lo, min(sc, s_hi)], [0, 0], "k:", lw=1.3)
            ax.legend(fontsize=7)


def _circle(setup) -> bool:
    """r_modes is written when every point lies on the circle (d fixed to 2)."""
    return "d" not in setup.swept and setup.params.get("d") == 2


def _record(spec):
    return noisy.FOURIER if drift_of(spec.values) == "fourier" else noisy.NOISY


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
