"""System `noisy_attention`: the attention flow on S^{d-1} plus an independent Brownian motion per
token (physics.md §1.3), and the phase transition of its uniform law.

    dX_i = P_{X_i}( sum_j A_ij V X_j ) dt + sigma P_{X_i} o dB_i     (SA/USA, beta, Q, K, V)

Solved by Euler-Maruyama with projection and retraction on either backend (Ito form, weak order 1;
see :mod:`dyn.noisy.sde`). The drift (`params.drift`):
- "direct": the O(n^2) attention drift, any d, Q, K, V (n <= 10^4);
- "fourier": the O(nK) series on the circle (d = 2, Q = K = V = I), within `tol` of the direct one
  (relative to e^|beta| for USA), K chosen from beta and tol (:mod:`dyn.noisy.fourier`);
- "auto" (default): "fourier" where it applies, else "direct".

Each run starts from `init` ("uniform": i.i.d. uniform; "cluster": all tokens at e_1). The noise
is `sigma`, or, when `sigma_over_sigma_c` is given, that many times the critical noise
sigma_c(beta, d) of the point (Q = K = V = I; written as `sigma_used`): one sweep axis then crosses
sigma_c, and the bistable window [sigma_c, sigma_fold], at every (beta, d) of the sweep. A scenario
gives one of the two: with `sigma_over_sigma_c`, a swept sigma or a sigma other than its default
is refused, as are Q, K, V other than the identity. Outputs at
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

References in the file (Q = K = V = I; `dyn plot` draws them over r_stationary; the mean field of
:mod:`dyn.noisy.branches`, any d). With `sigma`:
- `sigma_critical`, the noise sigma_c(beta, d) below which the uniform law is linearly unstable
  (derivation in :mod:`dyn.noisy.theory`), over a fine grid of beta (`beta_theory`) when beta is
  swept, per swept d and normalization;
- with USA, `sigma_fold`, the mean-field fold below which a clustered law exists too, where beta
  reaches beta_*(d) (over `beta_fold`, from beta_*(d) rounded up to 0.01 on: FOLD_FROM = 2.45 on
  the circle);
- at a fixed beta > 0, the stable and unstable mean-field branches r(sigma) with the uniform law
  r = 0 (`r_branch_stable`, `r_branch_unstable` over the points `sigma_branch`; on the circle the
  60 points of `circle_branch`, else those of `branch` with its fold), one block of points per
  swept d and normalization.
With `sigma_over_sigma_c`: `sigma_critical` and `sigma_fold` (NaN: no fold) at each swept (beta,
d, normalization), `beta_star` (USA: the Bessel root, drawn along beta); against a swept
`sigma_over_sigma_c` the lines at 1 (`sigma_over_sigma_c_critical`) and at the fold
(`sigma_over_sigma_c_fold`) and the branches in units of sigma_c (over
`sigma_over_sigma_c_branch`, per (beta, d, normalization)); at a fixed `sigma_over_sigma_c`,
`r_mean_field`, the r of the stable clustered law there (:func:`dyn.noisy.branches.clustered_r`;
at 1 the jump of r at sigma_c: 0 for beta <= beta_*, positive above), over a grid of beta
(`beta_mean_field`) when beta is swept.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.contract import AXIS_ATTR, bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import (
    AVERAGING_KEYS,
    Chunk,
    Coord,
    Draw,
    Output,
    Reference,
    System,
    over_axes,
    state_dims,
    theory_coord,
)
from ..noisy.params import DEFAULT_TOL, DIRECT_MAX_N, FIELDS, SIGMA_MAX
from . import register

noisy = lazy("dyn.noisy")

MODES = 6  # r_k for k = 1..MODES on the circle
FOLD_FROM, FOLD_POINTS = 2.45, 24  # USA circle: subcritical above beta_* = 2.44692
RATIO = "sigma_over_sigma_c"  # the noise in units of sigma_c(beta, d) (instead of sigma)
# the mean-field r at a fixed sigma/sigma_c: extra betas above beta_*, in units of the swept range
STAR_OFFSETS = (0.0, 0.002, 0.01, 0.02, 0.04)
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
        "init": Field(
            "str", "uniform", "initial law: i.i.d. uniform, or every token at one point", choices=("uniform", "cluster")
        ),
        "delta": Field("float", 0.01, "clustering threshold delta: <x_i,x_j> > 1 - delta", lo=0.0, hi=2.0),
        "drift": Field(
            "str",
            "auto",
            "direct O(n^2) drift, the O(nK) Fourier series on the circle "
            "(d = 2, Q = K = V = I), or auto (fourier where it applies)",
            choices=DRIFTS,
        ),
        "tol": Field(
            "float",
            DEFAULT_TOL,
            "accuracy of the Fourier drift against the direct one (relative to e^|beta| for USA)",
            lo=1e-15,
            hi=1e-2,
        ),
        # the noise in units of the critical noise (the doc is the sweep axis's label)
        # bounded like sigma (sigma_c <= 1.5e20 at |beta| <= 100: sigma^2 stays finite)
        RATIO: Field("float", None, "noise in units of sigma_c(beta, d): sigma / sigma_c", lo=0.0, hi=SIGMA_MAX),
    }

    def validate(self, spec) -> None:
        d = spec["d"]
        for key in ("Q", "K", "V"):
            if spec.get(key) is not None and len(spec[key]) != d:
                raise ScenarioError(
                    f"params.{key}", f"must be {d} x {d} (d = {d}), got {len(spec[key])} x {len(spec[key])}"
                )
        drift = drift_of(spec.values)
        if drift == "fourier":
            if d != 2:
                raise ScenarioError(
                    "params.drift", f'the Fourier drift lives on the circle (d = 2), got d = {d}; use drift = "direct"'
                )
            bad = [k for k in ("Q", "K", "V") if not _identity(spec.get(k), 2)]
            if bad:
                raise ScenarioError(
                    "params.drift",
                    "the Fourier drift needs Q = K = V = I, but "
                    f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not the "
                    'identity; use drift = "direct" (or "auto")',
                )
        elif spec["n"] > DIRECT_MAX_N:
            raise ScenarioError(
                "params.n",
                f"the direct drift keeps an n x n matrix per run: "
                f"n <= {DIRECT_MAX_N}, got {spec['n']}; on the circle with "
                'Q = K = V = I use drift = "fourier"',
            )
        if spec.get(RATIO) is not None:
            _check_ratio(spec)
        if self.run_bytes(spec) > MAX_RUN_BYTES:
            raise ScenarioError(
                "output.saves",
                f"one run would keep {self.run_bytes(spec) / 2**30:.1f}"
                " GiB of states ((saves + 1) x n x d doubles); lower output.saves or n",
            )

    def outputs(self, setup) -> list[Output]:
        outs = [Output("r", "order parameter r = |mean_i x_i| (mean over runs)", "1", ("time",))]
        if _circle(setup):
            outs.append(Output("r_modes", "r_k = |mean_i exp(i k theta_i)| (mean over runs)", "1", ("time", "mode")))
        if _ratio_mode(setup):
            outs.append(
                Output("sigma_used", f"noise sigma of the point ({RATIO} x sigma_c(beta, d))", "1", (), "point")
            )
        return outs + [
            Output(
                "n_clusters",
                "number of clusters (single linkage at <x_i,x_j> > 1 - delta; mean over runs)",
                "1",
                ("time",),
            ),
            Output(
                "energy",
                "interaction energy sum_ij exp(beta <x_i,x_j>) / (2 beta n^2) (mean over runs)",
                "1",
                ("time",),
            ),
            Output("r_stationary", "time average of r once stationary (mean over runs)", "1", reduce="time_average"),
        ]

    def coords(self, setup) -> dict[str, Coord]:
        if not _circle(setup):
            return {}
        return {"mode": Coord(np.arange(1, MODES + 1), "Fourier mode k")}

    def trajectory_dims(self, setup) -> dict[str, int]:
        return state_dims(setup, token="n", coordinate="d")

    def run_bytes(self, spec) -> int:
        return bytes_of(len(spec.times), spec["n"], spec["d"])

    def point_values(self, spec) -> dict:
        return {"sigma_used": noise_of(spec.values)} if _ratio_mode(spec.setup) else {}

    def simulate(self, spec, runs: range) -> Chunk:
        x0 = self.initial_state(spec, len(runs))
        states = spec.solver.get().solve(self.problem(spec), x0, spec.times, rng=spec.rng).states
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
        if spec.solver.backend == "jax":  # one point, one key per stretch
            block = int(round(times[0] / (times[1] - times[0])))
            states = (
                spec.solver.get(dt=spec.dt)
                .solve(self.problem(spec), carry, times, rng=spec.jax_key(EXTEND_KEY, block))
                .states
            )
        else:
            states = spec.solver.get().solve(self.problem(spec), carry, times, rng=spec.rng).states
        return Chunk(
            {"r_stationary": noisy.order_parameter(states[:, 1:])},
            finite=np.isfinite(states).all(axis=(1, 2, 3)),
            carry=states[:, -1],
        )

    def step_rate(self, spec) -> float:
        """max((d+2) sigma^2/2, (d-1) sigma_c^2/2, step_tol x stiffness): see the module doc."""
        d, beta, sigma = spec["d"], float(spec["beta"]), noise_of(spec.values)
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
        """sigma_c(beta), the fold, beta_* and the mean-field branches (module doc)."""
        matrices = [setup.params.get(k) for k in ("Q", "K", "V")]
        if any(k in setup.axes for k in ("Q", "K", "V")) or not all(
            a is None or _identity(a, len(a)) for a in matrices
        ):
            return []
        if _ratio_mode(setup):
            return _ratio_references(setup)
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
        found = [
            Reference(
                "sigma_critical",
                "sigma_c(beta): the uniform law is linearly unstable below",
                sc,
                (*dims, *grid),
                coords,
                draw=Draw(over=over, along="sigma", label=r"$\sigma_c(\beta)$: uniform law unstable below"),
            )
        ]
        top = float(np.max(setup.values_of("beta")))
        usa = [(i, v) for i, v in cases if v["normalization"] == "USA" and top > _fold_from(int(v["d"]))]
        if usa:  # a branch continuation per beta: the swept range only
            coords, grid = {}, ()
            if "beta" in setup.axes:
                start = min(_fold_from(int(v["d"])) for _, v in usa)
                values = np.linspace(start, top, FOLD_POINTS)
                coords = {"beta_fold": Coord(values, "beta (grid of the fold)", attrs={AXIS_ATTR: "beta"})}
                grid = ("beta_fold",)
            at = coords["beta_fold"].values if coords else beta
            fold = np.full(shape + at.shape, np.nan)
            for index, v in usa:
                fold[index] = noisy.fold(at, "USA", d=int(v["d"])).reshape(at.shape)
            where = "circle, USA" if all(v["d"] == 2 for _, v in cases) else "USA"
            found.append(
                Reference(
                    "sigma_fold",
                    f"mean-field fold: largest sigma with a clustered stationary law ({where})",
                    fold,
                    (*dims, *grid),
                    coords,
                    draw=Draw(
                        over=over,
                        along="sigma",
                        color="orange",
                        linestyle=":",
                        label="mean-field fold: clustered law exists below",
                    ),
                )
            )
        if "beta" not in setup.axes and float(beta) > 0:
            found += _branches(setup, "sigma", *over_axes(setup, "beta", "d", "normalization"))
        return found


def _fold_from(d: int) -> float:
    """The first beta of the fold's grid: beta_*(d) rounded up to 0.01 (2.45 on the circle)."""
    return FOLD_FROM if d == 2 else math.ceil(100.0 * noisy.bessel_beta_star(d)) / 100.0


def _branch_points(beta: float, d: int, normalization: str, branch_of=None):
    """(sigma, r, stable) along the clustered branch: on the circle the 60 points of
    `circle_branch`, else `branch` (from r = 0 at sigma_c, through the fold; from
    `branch_of(beta, d, normalization)` when given, a cache)."""
    if d == 2:
        b = noisy.circle_branch(beta, normalization)
        return b.sigma, b.r, b.stable
    b = (branch_of or noisy.branch)(beta, d, normalization)
    return b.sigma.values, b.r.values, b.stable.values.astype(bool)


def _branches(setup, axis: str, dims, cases, branch_of=None) -> list[Reference]:
    """The mean-field stationary laws against the noise (`axis`: "sigma", or RATIO for
    sigma/sigma_c), per case of (beta, d, normalization): the clustered branch (within 10% of the
    swept range) and the uniform law r = 0 (stable above sigma_c), as two curves, stable and
    unstable, over the points `sigma_branch` (or `sigma_over_sigma_c_branch`): one block of
    points per case, NaN between pieces and outside the case's block."""
    swept = np.asarray(setup.axes[axis], dtype=float) if axis in setup.axes else None
    blocks = []
    for index, v in cases:
        beta, d, normalization = float(v["beta"]), int(v["d"]), v["normalization"]
        if not beta > 0:
            continue
        sigma, r, stable = _branch_points(beta, d, normalization, branch_of)
        sc = float(noisy.sigma_critical(beta, d, normalization))
        unit = sc if axis == RATIO else 1.0
        x, c = sigma / unit, sc / unit
        s = x if swept is None else swept
        lo, hi = min(float(s.min()), c), max(float(s.max()), c)
        inside = (x >= 0.9 * s.min()) & (x <= 1.1 * s.max())
        blocks.append(
            (
                index,
                np.concatenate([x, [lo, c, hi]]),
                np.concatenate([np.where(inside & stable, r, np.nan), [np.nan, 0, 0]]),
                np.concatenate([np.where(inside & ~stable, r, np.nan), [0, 0, np.nan]]),
            )
        )
    if not blocks:
        return []
    shape = tuple(len(setup.axes[a]) for a in dims)
    x = np.concatenate([b[1] for b in blocks])
    curves = {kind: np.full(shape + x.shape, np.nan) for kind in ("stable", "unstable")}
    at = 0
    for index, points, stable, unstable in blocks:
        part = (*index, slice(at, at + points.size))
        curves["stable"][part], curves["unstable"][part] = stable, unstable
        at += points.size
    name = "sigma_branch" if axis == "sigma" else f"{RATIO}_branch"
    what = "sigma" if axis == "sigma" else "sigma / sigma_c"
    coords = {name: Coord(x, f"{what} along the mean-field branches", attrs={AXIS_ATTR: axis})}
    where = "circle" if all(int(v["d"]) == 2 for _, v in cases) else "zonal laws on S^{d-1}"
    return [
        Reference(
            f"r_branch_{kind}",
            f"r of the {kind} mean-field stationary laws ({where})",
            curves[kind],
            (*dims, name),
            coords,
            draw=Draw(over=("r_stationary",), linestyle=style, color="black", label=f"mean field: {kind}"),
        )
        for kind, style in (("stable", "-"), ("unstable", ":"))
    ]


def _ratio_references(setup) -> list[Reference]:
    """The references when the noise is given in units of sigma_c (module doc): sigma_c and the
    fold at each swept (beta, d, normalization), beta_*(d); against a swept sigma/sigma_c the
    lines at 1 and at the fold and the branches in those units; at a fixed sigma/sigma_c the
    mean-field r of the stable clustered law there (over the swept betas and just above
    beta_*(d) when beta is swept). One branch continuation per (beta, d, normalization)."""
    traced = {}

    def branch_of(beta, d, normalization):
        key = (float(beta), int(d), str(normalization))
        if key not in traced:
            traced[key] = noisy.branch(*key)
        return traced[key]

    over = ("r_stationary", "r_stationary_se")
    dims, cases = over_axes(setup, "beta", "d", "normalization")
    shape = tuple(len(setup.axes[a]) for a in dims)
    sc, fold = np.empty(shape), np.full(shape, np.nan)
    for index, v in cases:
        beta, d = float(v["beta"]), int(v["d"])
        sc[index] = noisy.sigma_critical(beta, d, v["normalization"])
        if v["normalization"] == "USA" and beta > noisy.bessel_beta_star(d):  # else no fold
            fold[index] = branch_of(beta, d, "USA").attrs["sigma_fold"]
    found = [
        Reference("sigma_critical", "sigma_c(beta, d): the uniform law is linearly unstable below", sc, dims),
        Reference(
            "sigma_fold",
            "mean-field fold: largest sigma with a clustered stationary law (USA; NaN: none, continuous transition)",
            fold,
            dims,
        ),
    ]
    star_dims, star_cases = over_axes(setup, "d", "normalization")
    star = np.full(tuple(len(setup.axes[a]) for a in star_dims), np.nan)
    for index, v in star_cases:
        if v["normalization"] == "USA":
            star[index] = noisy.bessel_beta_star(int(v["d"]))
    found.append(
        Reference(
            "beta_star",
            "beta_*(d): the transition at sigma_c is continuous "
            "below, discontinuous above (USA; I_{d/2+1}/I_{d/2}(beta) = 1/d)",
            star,
            star_dims,
            draw=Draw(over=over, along="beta", color="0.4", linestyle="-.", label=r"$\beta_*(d)$: discontinuous above"),
        )
    )
    if RATIO in setup.axes:
        found += [
            Reference(
                f"{RATIO}_critical",
                "sigma_c in units of sigma_c: the uniform law is linearly unstable below 1",
                np.asarray(1.0),
                draw=Draw(over=over, along=RATIO, label=r"$\sigma_c$: uniform unstable below"),
            ),
            Reference(
                f"{RATIO}_fold",
                "mean-field fold in units of sigma_c: a clustered law exists below",
                fold / sc,
                dims,
                draw=Draw(over=over, along=RATIO, color="orange", linestyle=":", label="mean-field fold"),
            ),
        ]
        found += _branches(setup, RATIO, dims, cases, branch_of)
    else:
        found += _mean_field_r(setup, float(setup.params[RATIO]), branch_of)
    return found


def _mean_field_r(setup, ratio: float, branch_of) -> list[Reference]:
    """r of the stable clustered mean-field law at sigma = ratio x sigma_c(beta, d)
    (:func:`dyn.noisy.branches.clustered_r`), 0 where none is (only the uniform law): at ratio 1
    the jump of r at sigma_c, 0 for beta <= beta_*(d). Over a grid of beta when beta is swept
    (`beta_mean_field`: the swept values, beta_*(d) and points just above it, where the jump
    rises like a square root), else at the fixed beta. Where ratio >= 1 and the transition is
    continuous (SA, or USA at beta <= beta_*) the branch lies below sigma_c: 0 without tracing
    it."""
    dims, cases = over_axes(setup, "d", "normalization")
    coords, grid = {}, ()
    if "beta" in setup.axes:
        swept = np.asarray(setup.axes["beta"], dtype=float)
        lo, hi = float(swept.min()), float(swept.max())
        values = [swept]
        for _, v in cases:
            star = noisy.bessel_beta_star(int(v["d"])) if v["normalization"] == "USA" else math.inf
            if lo <= star <= hi:
                values.append(star + (hi - lo) * np.array(STAR_OFFSETS))
        at = np.unique(np.concatenate(values))
        at = at[(at > 0) & (at <= hi)]
        coords = {"beta_mean_field": Coord(at, "beta (grid of the mean-field r)", attrs={AXIS_ATTR: "beta"})}
        grid = ("beta_mean_field",)
    else:
        at = np.asarray([float(setup.params["beta"])])
    r = np.zeros(tuple(len(setup.axes[a]) for a in dims) + at.shape)
    for index, v in cases:
        d, normalization = int(v["d"]), v["normalization"]
        star = noisy.bessel_beta_star(d) if normalization == "USA" else math.inf
        for k, beta in enumerate(at):
            if not beta > 0:
                r[(*index, k)] = np.nan
            elif ratio < 1 or beta > star:
                r[(*index, k)] = noisy.clustered_r(beta, d, normalization, ratio, branch_of(beta, d, normalization))
    if not grid:
        r = r[..., 0]
    at_c = r"at $\sigma_c$ (the jump)" if ratio == 1 else rf"at $\sigma$ = {ratio:g} $\sigma_c$"
    return [
        Reference(
            "r_mean_field",
            "r of the stable clustered mean-field law at sigma = "
            f"{ratio:g} sigma_c (at 1: the jump of r at sigma_c); 0: only the uniform "
            "law",
            r,
            (*dims, *grid),
            coords,
            draw=Draw(
                over=("r_stationary",), color="black", linestyle="-", label=f"mean field: stable clustered law {at_c}"
            ),
        )
    ]


def clustered_r(beta: float, d: int, normalization: str, ratio: float, branch=None) -> float:
    """r of the stable clustered mean-field law at sigma = ratio x sigma_c(beta, d): the
    mathematics is :func:`dyn.noisy.branches.clustered_r`; the name stays here for its callers
    (loaded on first use, like the rest of this file's mathematics)."""
    return noisy.clustered_r(beta, d, normalization, ratio, branch)


def _circle(setup) -> bool:
    """r_modes is written when every point lies on the circle (d fixed to 2)."""
    return "d" not in setup.swept and setup.params.get("d") == 2


def noise_of(values) -> float:
    """The noise sigma of a point: `sigma`, or `sigma_over_sigma_c` x sigma_c(beta, d) when that
    is given (Q = K = V = I)."""
    ratio = values.get(RATIO)
    if ratio is None:
        return float(values["sigma"])
    sc = noisy.sigma_critical(float(values["beta"]), int(values["d"]), values["normalization"])
    return float(ratio) * float(sc)


def _ratio_mode(setup) -> bool:
    """The noise is given in units of sigma_c (swept or fixed `sigma_over_sigma_c`)."""
    return RATIO in setup.axes or setup.params.get(RATIO) is not None


def _check_ratio(spec) -> None:
    """`sigma_over_sigma_c` replaces sigma (not swept, not set off its default) and needs
    Q = K = V = I and a positive, finite sigma_c at the point."""
    setup = spec.setup
    where = f"{'sweep' if RATIO in setup.axes else 'params'}.{RATIO}"
    if "sigma" in setup.axes or setup.params.get("sigma") != FIELDS["sigma"].default:
        raise ScenarioError(where, "gives the noise in units of sigma_c: leave sigma out (it is derived per point)")
    bad = [k for k in ("Q", "K", "V") if not _identity(spec.get(k), spec["d"])]
    if bad:
        verb = "is" if len(bad) == 1 else "are"
        raise ScenarioError(
            where,
            "sigma_c(beta, d) is known for Q = K = V = I, but "
            f"{', '.join(bad)} {verb} not the identity; give sigma instead",
        )
    sc = float(noisy.sigma_critical(float(spec["beta"]), spec["d"], spec["normalization"]))
    if not (math.isfinite(sc) and sc > 0):
        raise ScenarioError(
            where,
            f"sigma_c(beta = {spec['beta']:g}, d = {spec['d']}) = {sc:g}: "
            "no critical noise to scale by; give sigma instead",
        )


def _problem(spec):
    drift = drift_of(spec.values)
    p = noisy.pack_values({**spec.values, "sigma": noise_of(spec.values)}, drift)
    return noisy.fourier_problem(p) if drift == "fourier" else noisy.noisy_problem(p)


def _observed(spec, states) -> Chunk:
    """Per-run observables of states (runs, times, n, d) at the save times."""
    finite = np.isfinite(states).all(axis=(1, 2, 3))
    r = noisy.order_parameter(states)
    if spec["d"] == 2:
        count = noisy.circle_clusters(states, spec["delta"])
    else:
        count = noisy.clusters(states, spec["delta"])
    values = {
        "r": r,
        "n_clusters": count,
        "energy": noisy.interaction_energy(states, spec["beta"]),
        "r_stationary": r,
    }  # the series; the engine averages it in time
    if _circle(spec.setup):
        values["r_modes"] = noisy.circle_modes(states, MODES)
    return Chunk(values, states=states, finite=finite, carry=states[:, -1])
