"""System `random_transformer`: tokens of a deep transformer at random initialization and their
common-noise SDE limit (physics.md §1.2); end-state probabilities with Wilson intervals.

Per point, `ensemble.runs` runs from i.i.d. uniform tokens with step `integrator.dt` (for the
network: `1/dt` layers per unit time), then classified:
- `report = "pair"` (n = 2): antipodal / cluster / undecided, from log|z_1 -+ z_2|^2 < threshold;
- `report = "census"`: one cluster / two antipodal clusters / other (= undecided).

How long a run goes (`until`):
- `"decided"` (default): until it is decided, i.e. every pair of tokens has crossed an absorbing
  level of log|z_i -+ z_j|^2 beyond the threshold, past which its chance to leave its class is
  below `absorb_tol` (:func:`dyn.tokens_sde.absorbing_levels`), up to a cap: the larger of
  `integrator.horizon` and the time by which the two-token diffusion is decided whenever both
  boundary rates are at least RATE_FLOOR = 0.05 (:func:`dyn.tokens_sde.decision_cap`, from the
  Lyapunov exponents). Decided runs stop costing time. Points in the critical band (a boundary
  rate below the floor) may keep undecided runs: they are counted (`p_undecided`, `p_other`),
  and `dyn plot` / `dyn show` / `dyn run` mark points where that share exceeds 2%.
- `"horizon"`: every run stops at `integrator.horizon` (the fixed-time question).
`horizon_used` records the longest time a run of the point took, `horizon_cap` the cap.

Census end states: one cluster, and two antipodal clusters of EQUAL sizes, are exact (absorbing)
states. Two groups of unequal sizes are not: m_A != -m_B, so the common noise G moves them apart
from antipodality by a term ~ ((a_A - b_A) - (a_B - b_B)) ~ e^{-2 beta}; they hover near
antipodal (log|z_A + z_B|^2 ~ -4 beta) and merge into one cluster on a time scale that grows with
beta. They stay undecided until then (`p_other`), so the census needs a long cap at large beta.

`form`: `rho` (exact two-token SDE in u = -artanh(rho), one normal per step, runs stopped once
absorbed; numba), `network` (the discrete network; two tokens by exact 2d-normal sampling; numba)
or `sde` (the d-dimensional Ito SDE by Euler-Maruyama; numba or diffrax).

Conventions as parameters: `score` (beta on unit tokens or beta/sqrt(d) on norm-sqrt(d) tokens),
`noise` (i.i.d. Gaussian G or symmetric GOE G; GOE changes the Ito normalization drift, see
`dyn.tokens_sde.sde`), `vbar` / `Vbar` (deterministic value part vbar I or a general matrix),
`init`. The rho form (and the exact pair sampling and the absorbing levels) is derived for
Gaussian noise and Vbar = vbar I only: GOE or a general Vbar run the full d x d network or the
SDE, to the horizon.

The file holds the phase boundary of two tokens (gaussian noise, vbar = 0) as the reference
`beta_boundary`: cosh(2 beta_eff) = d - 2 solved for the swept beta (beta_eff = beta, or
beta sqrt(d) with score = "sqrt_d") over a fine grid of d (`d_theory`), NaN where it has no
solution (d < 3) or does not apply; `dyn plot` draws it on (beta, d) heat maps.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import (
    PROBABILITY,
    UNDECIDED,
    Chunk,
    Draw,
    Output,
    Reference,
    Solve,
    System,
    over_axes,
    state_dims,
    theory_coord,
)
from ..tokens_sde.params import FIELDS
from . import register

integrators = lazy("integrators")
ts = lazy("dyn.tokens_sde")
attention = lazy("dyn.attention")

PAIR_CLASSES = ("antipodal", "cluster", "undecided")  # the codes of dyn.tokens_sde.classify
CENSUS_CLASSES = ("one_cluster", "two_antipodal", "other")
UNDECIDED_CLASSES = ("undecided", "other")  # neither end state: the run was stopped undecided
# steps per run up to the cap of until = "decided" (as integrators.core.base.MAX_STEPS for a horizon)
MAX_CAP_STEPS = 10**9


@register
class RandomTransformer(System):
    name = "random_transformer"
    description = "deep transformer at random init / its common-noise SDE: end-state probabilities"
    default_plot = "p_antipodal"
    equation = "sde"
    integrator = frozenset({"backend", "method", "dt", "horizon"})
    jax_methods = frozenset({"euler_maruyama"})
    params = {
        **FIELDS,
        "init": Field("str", "uniform", "initial law (i.i.d. uniform on the sphere)", choices=("uniform",)),
        "form": Field("str", "rho", "what is simulated", choices=("rho", "network", "sde")),
        "report": Field(
            "str", "pair", "pair classes (n = 2) or the n-token census", choices=("pair", "census"), sweepable=False
        ),
        # u_thresholds inverts log(1 + e^{-2u}) through expm1(-threshold): e^{-threshold}
        # overflows past 709 (and float64 tokens reach no gap below ~e^{-74} but 0 anyway)
        "threshold": Field("float", -20.0, "class threshold on log|z_i -+ z_j|^2", lo=-700.0, hi=0.0),
        "absorb_tol": Field(
            "float",
            1e-6,
            "stop a two-token run once its chance to leave its class is below this (0: never stop early)",
            lo=0.0,
            hi=0.1,
        ),
        "until": Field(
            "str",
            "decided",
            "run each run until it is decided (up to a cap derived "
            "from the boundary rates, at least integrator.horizon), or stop every run "
            "at integrator.horizon",
            choices=("decided", "horizon"),
        ),
    }

    def validate(self, point) -> None:
        if point["form"] in ("rho", "network") and point.solver.backend == "diffrax":
            raise ScenarioError(
                "params.form", f'form {point["form"]!r} runs on the numba or jax backend; use form = "sde" with diffrax'
            )
        if point["n"] != 2 and (point["form"] == "rho" or point["report"] == "pair"):
            raise ScenarioError("params.n", 'form = "rho" and report = "pair" need n = 2')
        if point["noise"] != "gaussian" and point["form"] == "rho":
            raise ScenarioError(
                "params.noise",
                f"noise {point['noise']!r}: the two-token rho "
                "SDE is derived for i.i.d. Gaussian noise only; use form = "
                '"network" or "sde"',
            )
        V = point.get("Vbar")
        if V is not None:
            if len(V) != point["d"]:
                raise ScenarioError(
                    "params.Vbar", f"must be d x d = {point['d']} x {point['d']}, got {len(V)} x {len(V)}"
                )
            if point["form"] == "rho":
                raise ScenarioError(
                    "params.Vbar",
                    'the two-token rho SDE needs Vbar = vbar I; use form = "network" or "sde" with a general Vbar',
                )
        if point["until"] == "decided":
            if point["noise"] != "gaussian" or V is not None:
                raise ScenarioError(
                    "params.until",
                    'until = "decided" needs the absorbing '
                    "levels, derived for gaussian noise and Vbar = vbar I only; "
                    'set until = "horizon"',
                )
            if point["absorb_tol"] == 0:
                raise ScenarioError(
                    "params.absorb_tol",
                    'until = "decided" needs absorb_tol > 0 (with 0 no run is ever decided); or set until = "horizon"',
                )
            cap = _cap(point, ts.pack_values(point.values))
            if not cap / point.dt <= MAX_CAP_STEPS:
                raise ScenarioError(
                    "params.until",
                    f"undecided runs go on to the cap {cap:.3g} "
                    "(from sigma, vbar, threshold and absorb_tol): "
                    f"{cap / point.dt:.3g} steps of dt = {point.dt:g}, past "
                    f'{MAX_CAP_STEPS:.0e} per run; set until = "horizon", a '
                    "larger absorb_tol or dt",
                )
        if point.solver.backend == "jax":
            if point["form"] not in ("rho", "network") or point["n"] != 2:
                raise ScenarioError(
                    "params.form", 'backend jax runs the two-token forms: form = "rho" or "network" with n = 2'
                )
            if point["noise"] != "gaussian" or V is not None or point.setup.trajectories:
                raise ScenarioError(
                    "integrator.backend", "backend jax needs gaussian noise, Vbar = vbar I and no saved states"
                )
        if point.setup.trajectories:
            if point["until"] != "horizon":
                raise ScenarioError(
                    "output.trajectories", 'saved states need a common time axis: set params.until = "horizon"'
                )
            steps = ts.fixed_steps(point.horizon, point.dt)
            if point["form"] != "sde" and steps % point.setup.saves:
                raise ScenarioError(
                    "output.saves",
                    f"{point.setup.saves} saves must divide the {steps} steps (horizon / dt) to keep states",
                )

    def outputs(self, setup) -> list[Output]:
        classes = PAIR_CLASSES if setup.params.get("report", "pair") == "pair" else CENSUS_CLASSES
        outs = [
            Output(
                f"p_{c}",
                f"fraction of runs ending {c.replace('_', ' ')}",
                "1",
                reduce="proportion",
                role=UNDECIDED if c in UNDECIDED_CLASSES else PROBABILITY,
            )
            for c in classes
        ]
        return outs + [
            Output("mean_steps", "mean number of steps (layers) run per run", "1"),
            Output("horizon_used", "longest time a run of this point took", "1", reduce="max"),
            Output("horizon_cap", "time at which an undecided run was stopped", "1", reduce="point"),
        ]

    def point_values(self, spec) -> dict:
        return {"horizon_cap": _cap(spec, ts.pack_values(spec.values))}

    def trajectory_dims(self, setup) -> dict[str, int]:
        """The two-token angle theta = arccos rho (form rho), else the tokens."""
        forms = set(setup.values_of("form"))
        if "rho" in forms:
            if len(forms) > 1:
                raise ScenarioError(
                    "output.trajectories",
                    "the rho form keeps the angle, the others the tokens: saved states need one kind of form",
                )
            return {"angle": 1}
        return state_dims(setup, token="n", coordinate="d")

    def simulate(self, spec, runs: range) -> Chunk:
        return _chunk(spec, *_simulate(spec, len(runs)))

    def batch_key(self, spec) -> tuple:
        return spec["form"], spec["report"], spec["d"] if spec["form"] == "network" else 0, spec.runs

    def batch_bytes(self, spec) -> int:  # the runs' states, normals and outputs on the device
        return 8 * spec.runs * (8 * spec["d"] + 16)

    def solves(self, spec) -> Solve:
        """The `jax` backend (two tokens): the u SDE (form rho) or the two-token network, each
        run until absorbed at its levels or stopped at the point's cap (an absorbing solve with
        the steps of :mod:`dyn.tokens_sde.jax_batch`); starts and walk from the point's key."""
        p = ts.pack_values(spec.values)
        lo, hi = _levels(spec, p)
        q = ts.Q_LAYOUT.pack(
            beta=_beta(p),
            sigma=spec["sigma"],
            vbar=spec["vbar"],
            d=spec["d"],
            lo=lo,
            hi=hi,
            stop_minus=ts.log_gaps_u(lo)[0],
            stop_plus=ts.log_gaps_u(hi)[1],
        )
        x0, walk = ts.two_token_starts(spec["form"], spec.jax_key(), q, spec.runs)
        problem = ts.u_problem(q) if spec["form"] == "rho" else ts.pair_problem(q)
        return Solve("step_map", spec.dt, problem, x0, np.array([0.0, _cap(spec, p)]), key=walk, absorbing=True)

    def observe(self, spec, solved) -> Chunk:
        """Classes, steps and times of the runs of an absorbing solve."""
        states, taken = solved
        cap = _cap(spec, ts.pack_values(spec.values))
        step = cap / ts.fixed_steps(cap, spec.dt)
        final = states[:, -1]
        if spec["form"] == "rho":
            u = final[:, 0, 0]
            return _chunk(spec, _classes_u(spec, u), taken, taken * step, np.isfinite(u), None)
        classify = ts.classify_pair if spec["report"] == "pair" else ts.census
        return _chunk(
            spec, classify(final, spec["threshold"]), taken, taken * step, np.isfinite(final).all(axis=(1, 2)), None
        )

    def references(self, setup) -> list[Reference]:
        """beta_c(d): antipodal pairs attract iff cosh(2 beta_eff) > d - 2 (physics.md §1.2;
        two tokens, gaussian noise, Vbar = 0), so beta_c = arccosh(d - 2)/2 in unit scores,
        divided by sqrt(d) for score = "sqrt_d"; no solution for d < 3 (NaN there)."""
        if setup.params.get("Vbar") is not None:
            return []
        coords = {}
        if "d" in setup.axes:
            coords = {"d_theory": theory_coord("d", setup.axes["d"], 400)}
            d = coords["d_theory"].values
        else:
            d = np.asarray(float(setup.params["d"]))
        dims, cases = over_axes(setup, "n", "vbar", "noise", "score")
        boundary = np.full(tuple(len(setup.axes[a]) for a in dims) + d.shape, np.nan)
        for index, v in cases:
            if v["n"] == 2 and v["vbar"] == 0 and v["noise"] == "gaussian":
                scale = np.sqrt(d) if v["score"] == "sqrt_d" else 1.0
                boundary[index] = np.where(d >= 3, ts.beta_critical(d), np.nan) / scale
        if np.isnan(boundary).all():
            return []
        over = tuple(o.name for o in self.outputs(setup))
        label = r"$\cosh 2\beta\sqrt{d} = d-2$" if "sqrt_d" in setup.values_of("score") else r"$\cosh 2\beta = d-2$"
        return [
            Reference(
                "beta_boundary",
                "two-token phase boundary beta_c(d): cosh(2 beta_eff) = d - 2 (antipodal pairs attract above)",
                boundary,
                (*dims, *coords),
                coords,
                draw=Draw(over=over, along="beta", label=label),
            )
        ]


def _beta(p) -> float:
    """beta on unit tokens, from a packed vector."""
    return p[ts.LAYOUT.index("beta")]


def _levels(spec, p):
    """Absorbing levels (lo, hi) in u, from the rho SDE (gaussian noise, Vbar = vbar I only)."""
    if spec["noise"] == "gaussian" and spec.get("Vbar") is None:
        return ts.absorbing_levels(
            _beta(p), spec["d"], spec["sigma"], spec["vbar"], spec["threshold"], spec["absorb_tol"]
        )
    return -np.inf, np.inf


def _cap(spec, p) -> float:
    """Time at which a run still undecided is stopped (see the module doc)."""
    if spec["until"] == "horizon":
        return spec.horizon
    return max(
        spec.horizon,
        ts.decision_cap(_beta(p), spec["d"], spec["sigma"], spec["vbar"], spec["threshold"], spec["absorb_tol"]),
    )


def _chunk(spec, classes, steps, times, finite, states) -> Chunk:
    names = PAIR_CLASSES if spec["report"] == "pair" else CENSUS_CLASSES
    values = {f"p_{c}": classes == getattr(ts, c.upper()) for c in names}
    values.update(mean_steps=steps, horizon_used=times)
    return Chunk(values, states=states if spec.setup.trajectories else None, finite=finite)


def _classes_u(spec, u):
    uc, ua = ts.u_thresholds(spec["threshold"])
    classes = np.where(u < uc, ts.CLUSTER, np.where(u > ua, ts.ANTIPODAL, ts.UNDECIDED))
    if spec["report"] == "census":  # n = 2: one cluster = cluster, two antipodal = antipodal
        classes = np.choose(classes, [ts.OTHER, ts.ONE_CLUSTER, ts.TWO_ANTIPODAL])
    return classes


def _simulate(spec, runs: int):
    """(class, steps, time, finite) per run for `runs` runs, and their states at the save
    times when the cap is the horizon (else only the final state)."""
    dt = spec.dt
    p = ts.pack_values(spec.values)
    lo, hi = _levels(spec, p)
    cap = _cap(spec, p)
    saves = spec.setup.saves if cap == spec.horizon else 1
    if spec["form"] == "rho":
        u0 = ts.rho_to_u(ts.sample_rho0(spec.rng, runs, spec["d"]))
        if saves > 1 and ts.fixed_steps(cap, dt) % saves:
            saves = 1  # states only requested on a grid that fits (checked by validate)
        path, taken = ts.two_token_u_path(u0, cap, dt, p, spec.rng, lo, hi, saves)
        u = path[:, -1]
        classes = _classes_u(spec, u)
        theta = 2.0 * np.arctan(np.exp(path))[..., None]  # u = log tan(theta / 2)
        return (classes, taken, taken * (cap / ts.fixed_steps(cap, dt)), np.isfinite(u), theta)
    x0 = attention.uniform_sphere(spec.rng, runs, spec["n"], spec["d"])
    stop_minus, stop_plus = float(ts.log_gaps_u(lo)[0]), float(ts.log_gaps_u(hi)[1])
    if spec["form"] == "network":
        depth = ts.fixed_steps(cap, dt)
        every = depth // saves if depth % saves == 0 else depth
        states, steps = ts.network_states(
            x0, depth, cap, p, every, rng=spec.rng, stop_minus=stop_minus, stop_plus=stop_plus
        )
        times = steps * (cap / depth)
    else:
        states, steps, times = _sde_until(spec, ts.problem(p), x0, cap, dt, stop_minus, stop_plus)
    z = states[:, -1]
    classify = ts.classify_pair if spec["report"] == "pair" else ts.census
    return (classify(z, spec["threshold"]), steps, times, np.isfinite(z).all(axis=(1, 2)), states)


def _sde_until(spec, problem, x0, cap, dt, stop_minus, stop_plus):
    """Euler-Maruyama at the save times when the cap is the horizon; else in stretches of
    `integrator.horizon` up to `cap`, stopping after each stretch the runs whose every pair is
    past an absorbing level. (states (runs, S, n, d), steps per run, time per run)."""
    integ = integrators.get(spec.solver.backend, "euler_maruyama", dt=dt)
    if cap == spec.horizon:
        states = integ.solve(problem, x0, spec.times, rng=spec.rng).states
        steps = integrators.core.base.step_grid(spec.times, dt)[0].sum()
        return states, np.full(len(x0), float(steps)), np.full(len(x0), cap)
    z = x0.copy()
    times = np.zeros(len(z))
    steps = np.zeros(len(z))
    active = np.arange(len(z))
    t = 0.0
    while active.size and t < cap * (1 - 1e-12):
        stretch = min(spec.horizon, cap - t)
        grid = np.array([0.0, stretch])
        z[active] = integ.solve(problem, z[active], grid, rng=spec.rng).states[:, -1]
        t += stretch
        times[active] = t
        steps[active] += integrators.core.base.step_grid(grid, dt)[0].sum()
        minus, plus = ts.log_gaps(z[active])
        upper = np.triu(np.ones(minus.shape[-2:], dtype=bool), 1)
        decided = ((minus < stop_minus) | (plus < stop_plus) | ~upper).all(axis=(-2, -1))
        active = active[~decided]
    return z[:, None], steps, times
