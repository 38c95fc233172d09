"""System `attention_sphere`: self-attention particle flows on S^{d-1} and the architectures
around them (physics.md §1.1, §1.4).

    dx_i/dt = P_{x_i}( u_i ),   u_i = (1/H) sum_h sum_{j in N(i)} A^h_ij V_h x_j (+ gamma W2 tanh(W1 x_i)),
    A^h_ij = exp(beta <Q_h x_i, K_h x_j> - lambda |i - j|) / Z^h_i,   SA or USA

with `mask` (N(i): every token, or j <= i), `bias_slope` (lambda), `heads` (H; `head_noise`
perturbs the given Q, K, V per head), `feedforward` (gamma) and `normalization_layer`, where
the normalization sits (post: the flow above; pre, peri: an unnormalized residual stream whose
tokens are its directions; ngpt: steps towards the normalized output; see
:mod:`dyn.attention.schemes`). The defaults are the flow of §1.1.

`form = "flow"` solves the depth limit with the scenario's integrator (adaptive `dopri5` on the
numba backend suits long horizons, with `[output] spacing = "log"`); `form = "network"` runs
`depth` layers of step h = T/depth. Each run starts from its own random tokens (`init`: uniform,
hemisphere, or equiangular with inner products `rho0`, compared with the scalar ODE of §1.4).
Outputs are ensemble statistics at the save times; `events = true` adds per-run tables: the
merge events (time, the two cluster sizes; n - 1 rows, NaN-padded), the cluster count and the
energy at every save, and the first plateau of each run's count on a log time axis (its count,
start and end: the first merge after it; :mod:`dyn.attention.plateaus`), reduced to the mean
first-plateau count, its start and the fraction of runs that merged after it by the horizon
(`plateau_factor`: how long a plateau holds, default a factor 3 in time); on the circle also
the basins (maxima of sum_j e^{beta cos(phi - theta_j)}) at the end of the linear phase and when
the clusters have formed, per run and as means. With events on the circle (d = 2, uniform
start, the plain flow) the file also holds the reference k*(beta), the most unstable Fourier
mode of the uniform law (argmax_k k^2 I_k(beta), :mod:`dyn.noisy.theory` at sigma = 0), its
continuous form k_c = sqrt(2 beta - 1/3), the scale sqrt(beta log beta), and the linear theory's
expected number of basins at finite n (Rice), drawn over the mean first-plateau count.

What `dyn plot` adds is declared: fractions share the colour range [0, 1]; `rho_theory` is drawn
over `rho`, the per-run `run_clusters` and `run_energy` (first runs, as steps) over
`n_clusters` and `energy`, and the reference `radius_bound` = 1 + t (the residual stream's
radius bound of pre-LN and peri-LN, for SA with V = I: |u| <= 1) over `radius`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..attention.architecture import FIELDS
from ..core.contract import bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import (
    INTEGRATOR_KEYS,
    REFERENCE,
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
from . import register

attention = lazy("dyn.attention")
architecture = lazy("dyn.attention.architecture")
equiangular = lazy("dyn.attention.equiangular")
events = lazy("dyn.attention.events")
plateaus = lazy("dyn.attention.plateaus")
schemes = lazy("dyn.attention.schemes")
observing = lazy("dyn.attention.observer")
numerics = lazy("dyn.numerics.attention_field")

MAX_RUN_BYTES = 2**30  # the states one run keeps ((saves + 1) x n x d doubles) and its scratch
STREAM_SCHEMES = ("pre", "peri")  # the residual stream is not normalized: a radius output
MERGE = "merge"
NO_MERGE = "no more merges (rows after a run's last merge)"
ENERGY_UNDEFINED = "beta = 0, where the energy's 1 / (2 beta n^2) is undefined"
FRACTION = Draw(clim=(0.0, 1.0))  # fractions share one colour range, so panels compare


@register
class AttentionSphere(System):
    name = "attention_sphere"
    description = (
        "self-attention particle flow on the sphere (SA/USA; masks, biases, heads, "
        "normalization schemes), or its network"
    )
    default_plot = "pair_fraction"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    jax_methods = frozenset({"euler", "heun", "rk4"})
    params = {
        **FIELDS,
        "init": Field("str", "uniform", "initial law", choices=("uniform", "hemisphere", "equiangular")),
        "rho0": Field("float", 0.0, "inner product of the equiangular start", lo=-1.0, hi=1.0),
        "form": Field("str", "flow", "continuous flow or discrete network", choices=("flow", "network")),
        "depth": Field("int", 100, "layers of the network over [0, T]", lo=1, hi=10**8),
        "delta": Field("float", 1e-3, "clustering threshold delta: <x_i,x_j> > 1 - delta", lo=0.0, hi=2.0),
        "early": Field(
            "int",
            1,
            "tokens counted as early in held_by_early (clusters holding one of the first `early` tokens)",
            lo=1,
            hi=10_000,
        ),
        "events": Field(
            "bool",
            False,
            "also keep per-run tables: merge events, cluster count and energy at every save",
            sweepable=False,
        ),
        # default None: absent, it stays out of the resolved scenario (and its hash), and the
        # first plateau holds over dyn.attention.plateaus.PLATEAU_RATIO = 3
        "plateau_factor": Field(
            "float",
            None,
            "with events: a first plateau holds its count over at least this factor in time (default 3)",
            gt=1.0,
            hi=1e6,
        ),
    }

    def validate(self, spec) -> None:
        d, n, saves = spec["d"], spec["n"], spec.setup.saves
        for name in ("Q", "K", "V"):
            if spec.get(name) is None:
                continue
            shape = np.shape(spec[name])
            if shape[-2:] != (d, d):
                raise ScenarioError(
                    f"params.{name}",
                    f"must be {d} x {d} (d = {d}) or one such matrix per head, got {' x '.join(map(str, shape))}",
                )
            if len(shape) == 3 and shape[0] != spec["heads"]:
                raise ScenarioError(
                    f"params.{name}", f"holds {shape[0]} matrices, one per head, but params.heads = {spec['heads']}"
                )
        if self.run_bytes(spec) > MAX_RUN_BYTES:
            raise ScenarioError(
                "output.saves",
                f"one run would keep {self.run_bytes(spec) / 2**30:.1f}"
                " GiB of states and scratch ((saves + 1) x n x d doubles and "
                "heads x n^2 weights); lower output.saves, n, d or heads",
            )
        if spec["form"] == "network":
            if spec.setup.spacing != "linear":
                raise ScenarioError(
                    "output.spacing",
                    'the network saves after whole layers: use spacing = "linear" with form = "network"',
                )
            if spec["depth"] % saves:
                raise ScenarioError(
                    "params.depth",
                    f"depth {spec['depth']} must be a multiple of "
                    f"output.saves = {saves} (the network saves after whole layers)",
                )
        if spec["init"] == "equiangular":
            problem = equiangular.check(n, d, spec["rho0"])
            if problem:
                raise ScenarioError("params.rho0" if n >= 2 and d >= n else "params.d", problem)
        if spec["early"] > n:
            raise ScenarioError("params.early", f"must be <= n = {n}, got {spec['early']}")
        if spec["events"] and "n" in spec.setup.axes:
            raise ScenarioError(
                "params.events",
                "the per-run merge table has n - 1 rows: keep params.n fixed (not swept) with events = true",
            )
        if spec.get("plateau_factor") is not None and not spec["events"]:
            raise ScenarioError(
                "params.plateau_factor",
                "is read only with events = true (the first plateau of the per-run cluster counts)",
            )

    def outputs(self, setup) -> list[Output]:
        outs = [
            Output(
                "pair_fraction",
                "fraction of token pairs with <x_i,x_j> > 1 - delta (mean over runs)",
                "1",
                ("time",),
                draw=FRACTION,
            ),
            Output(
                "p_one_cluster",
                "fraction of runs whose tokens form one cluster",
                "1",
                ("time",),
                "proportion",
                draw=FRACTION,
            ),
            Output("n_clusters", "number of clusters (mean over runs)", "1", ("time",)),
            Output("min_inner", "minimum pairwise inner product (mean over runs)", "1", ("time",)),
            Output(
                "energy",
                "USA energy E = sum_ij exp(beta <x_i,x_j>) / (2 beta n^2) (mean over runs)",
                "1",
                ("time",),
                nan_means=ENERGY_UNDEFINED,
            ),
            Output(
                "time_to_one_cluster",
                "time to one cluster, censored at T (T if never; mean "
                "over runs, biased low by the censoring: see time_to_one_cluster_censored and "
                "time_to_one_cluster_median)",
                "1",
                reduce="time_to_event",
            ),
            Output(
                "held_by_first",
                "fraction of tokens in the cluster of token 1 (mean over runs)",
                "1",
                ("time",),
                draw=FRACTION,
            ),
            Output(
                "held_by_early",
                "fraction of tokens in clusters holding one of the first `early` tokens (mean over runs)",
                "1",
                ("time",),
                draw=FRACTION,
            ),
            Output("first_alignment", "mean of <x_i(t), x_1(0)> over tokens and runs", "1", ("time",), draw=FRACTION),
        ]
        if any(s in STREAM_SCHEMES for s in setup.values_of("normalization_layer")):
            outs.append(
                Output(
                    "radius",
                    "mean token radius |z_i| of the residual stream (1 when normalized; mean over runs)",
                    "1",
                    ("time",),
                )
            )
        if "equiangular" in setup.values_of("init"):
            outs += [
                Output("rho", "mean pairwise inner product (mean over runs)", "1", ("time",)),
                Output(
                    "rho_theory",
                    "equiangular scalar ODE of physics.md §1.4 (NaN where it does not apply)",
                    "1",
                    ("time",),
                    "point",
                    REFERENCE,
                    draw=Draw(over=("rho",), color="black", label="scalar ODE (§1.4)"),
                ),
                Output("rho_error", "largest |<x_i,x_j> - rho_theory| over pairs, times and runs", "1", (), "max"),
            ]
        if setup.params.get("events", False):
            outs += [
                Output(
                    "merge_time",
                    "save time at which a merge is first seen (NaN: no more merges)",
                    "1",
                    (MERGE,),
                    "per_run",
                    nan_means=NO_MERGE,
                ),
                Output(
                    "merge_size_a", "size of the first merging cluster", "1", (MERGE,), "per_run", nan_means=NO_MERGE
                ),
                Output(
                    "merge_size_b", "size of the second merging cluster", "1", (MERGE,), "per_run", nan_means=NO_MERGE
                ),
                Output(
                    "run_clusters",
                    "number of clusters of each run",
                    "1",
                    ("time",),
                    "per_run",
                    draw=Draw(over=("n_clusters",), linestyle="-", label="single runs"),
                ),
                Output(
                    "run_energy",
                    "USA energy of each run",
                    "1",
                    ("time",),
                    "per_run",
                    draw=Draw(over=("energy",), linestyle="-", label="single runs"),
                    nan_means=ENERGY_UNDEFINED,
                ),
                *_plateau_outputs(),
            ]
        return outs

    def references(self, setup) -> list[Reference]:
        """radius_bound = 1 + t when the file has a radius: the residual stream moves by |u| <= 1
        per unit time (SA with V = I) from unit tokens; with events, the most unstable mode
        k*(beta) and the scale sqrt(beta log beta) over the first-plateau count."""
        found = []
        if any(s in STREAM_SCHEMES for s in setup.values_of("normalization_layer")):
            draw = Draw(over=("radius",), color="black", linestyle=":", label=r"bound $1 + t$ (SA, $V = I$)")
            found.append(
                Reference(
                    "radius_bound",
                    "radius bound 1 + t of the residual stream (SA, V = I)",
                    1.0 + setup.times,
                    ("time",),
                    draw=draw,
                )
            )
        if setup.params.get("events", False):
            found += _plateau_references(setup)
        return found

    def coords(self, setup) -> dict[str, Coord]:
        if not setup.params.get("events", False):
            return {}
        n = int(setup.params["n"])
        return {MERGE: Coord(np.arange(max(n - 1, 0)), "merge event of a run (in time order)")}

    def point_values(self, spec) -> dict:
        if "equiangular" not in spec.setup.values_of("init"):
            return {}
        return {"rho_theory": _rho_theory(spec)}

    def trajectory_dims(self, setup) -> dict[str, int]:
        return state_dims(setup, token="n", coordinate="d")

    def run_bytes(self, spec) -> int:
        work = numerics.work_size(spec["n"], spec["d"], spec["heads"])
        return bytes_of(len(spec.times), spec["n"], spec["d"]) + bytes_of(work)

    def simulate(self, spec, runs: range) -> Chunk:
        problem = self.problem(spec)
        x0 = self.initial_state(spec, len(runs))
        if _fusable(spec):
            return _observed_in_loop(spec, problem, x0)
        status = None
        if spec["form"] == "network":
            every = spec["depth"] // spec.setup.saves
            states = attention.network_layers(problem, x0, spec["depth"], spec.horizon, save_every=every)
        else:
            solution = spec.solver.get().solve(problem, x0, spec.times)
            states, status = solution.states, solution.status
        chunk = self.observe(spec, states)
        chunk.status = status  # the runs cut short by max_steps are named in the message
        return chunk

    def problem(self, spec):
        """The scheme's flow, or its network (Euler layers of step T / depth on the layer
        geometry), with the point's architecture vector: mask, bias, heads' matrices and the
        feed-forward term are traced values, so points differing only in them share a program."""
        p = architecture.pack_values(spec.values, spec.setup.common_rng)
        scheme = schemes.scheme(spec["normalization_layer"])
        return (scheme.network if spec["form"] == "network" else scheme.flow).problem(p)

    def initial_state(self, spec, runs: int) -> np.ndarray:
        return _initial(spec, runs)

    def observe(self, spec, states) -> Chunk:
        return _observed(spec, states)

    def batch_key(self, spec) -> tuple:
        # what shapes the JAX program: the scheme's drift, the state and parameter shapes
        return (
            spec["form"],
            spec["normalization_layer"],
            spec["n"],
            spec["d"],
            spec["heads"],
            spec["depth"],
            spec.runs,
        )

    def solves(self, spec):
        """The `jax` backend: the numba path's starts (from the point's stream) advanced by
        the configured RK table (flow), or by Euler with h = T / depth (network)."""
        solve = super().solves(spec)
        if spec["form"] == "network":
            return replace(solve, method="euler", dt=spec.horizon / spec["depth"])
        return solve


def _scalar_ode_applies(spec) -> bool:
    """The equiangular ODE holds for post-LN, Q = K = V = I, no mask, no bias, no
    feed-forward, identical identity heads."""
    plain = all(spec.get(k) is None or np.array_equal(spec[k], np.eye(spec["d"])) for k in "QKV")
    return (
        plain
        and spec["normalization_layer"] == "post"
        and spec["mask"] == "none"
        and spec["bias_slope"] == 0
        and spec["feedforward"] == 0
        and spec["head_noise"] == 0
    )


def _initial(spec, runs: int) -> np.ndarray:
    if spec["init"] == "equiangular":
        return attention.equiangular_start(spec.rng, runs, spec["n"], spec["d"], spec["rho0"])
    init = attention.hemisphere if spec["init"] == "hemisphere" else attention.uniform_sphere
    return init(spec.rng, runs, spec["n"], spec["d"])


# the outputs read off the cluster labels (the union-find of the pair pass)
LABELLED = ("p_one_cluster", "n_clusters", "time_to_one_cluster", "held_by_first", "held_by_early")
FIXED_STEP = ("euler", "heun", "rk4")  # the numba methods that observe inside their step loop


def _needs(spec) -> tuple[bool, bool, bool]:
    """(energy, labels, any pair statistic): what the kept outputs need of the pair pass."""
    keeps = spec.setup.keeps  # what [output] observables leaves out is not computed
    energy = keeps("energy") or (spec["events"] and keeps("run_energy"))
    labelled = spec["events"] or any(map(keeps, LABELLED))
    pairs = energy or labelled or keeps("pair_fraction") or keeps("min_inner")
    return energy, labelled, pairs


def _fusable(spec) -> bool:
    """Whether every kept output can be observed inside the solver's step loop, so that no
    state is stored: tokens that are the state (post-LN, nGPT), a numba fixed-step solve (the
    network's Euler layers, or the flow's configured fixed-step method), and no output that
    needs the states themselves (trajectories, equiangular rho, events and basins)."""
    if spec.setup.trajectories or spec["events"] or spec["normalization_layer"] in STREAM_SCHEMES:
        return False
    if "equiangular" in spec.setup.values_of("init"):
        return False
    if spec["form"] == "network":
        return True
    return spec.solver.backend == "numba" and spec.solver.method in FIXED_STEP


def _observed_in_loop(spec, problem, x0) -> Chunk:
    """The per-run observables of :func:`_observed`, taken inside the solver's step loop
    (:mod:`dyn.attention.observer`) instead of from stored states: pair fraction, min inner
    product and the labels' counts (so the labelled outputs) bit for bit, the energy from the
    field's normalizers (to rounding), the first alignment from the token sums (to rounding)."""
    energy, labelled, _ = _needs(spec)
    beta = spec["beta"] if energy else 0.0
    p = problem.p
    plain = p[schemes.M_ID] != 0.0 and p[schemes.SLOPE] == 0.0 and p[schemes.CAUSAL] == 0.0
    aligned = spec.setup.keeps("first_alignment")
    n = spec["n"]
    # no events here: the labels' counts are all the labelled outputs read
    observer = observing.pair_observer(
        n,
        spec["d"],
        spec["delta"],
        beta,
        labelled,
        from_field=plain,
        token_sum=aligned,
        min_inner=spec.setup.keeps("min_inner"),
        early=spec["early"],
    )
    if spec["form"] == "network":
        every = spec["depth"] // spec.setup.saves
        solution = attention.network_solution(
            problem, x0, spec["depth"], spec.horizon, save_every=every, observer=observer
        )
        status = None
    else:
        solution = spec.solver.get().solve(problem, x0, spec.times, observer=observer)
        status = solution.status
    stats, counts, sums = observing.split_rows(solution.observations, n, beta, labelled, counts=True)
    alignment = None
    if aligned:  # mean_i <x_i(t), x_1(0)> = <sum_i x_i(t), x_1(0)> / n
        alignment = np.einsum("etd,ed->et", sums, x0[:, 0]) / n
    chunk = _values(spec, len(x0), stats, None, alignment, None, counts=counts)
    chunk.finite = solution.ok
    chunk.status = status
    return chunk


def _observed(spec, states) -> Chunk:
    """Per-run observables of states (runs, times, n, d) at the save times."""
    x = schemes.stream_tokens(spec["normalization_layer"], states)
    energy, labelled, pairs = _needs(spec)
    stats = labels = alignment = None
    if pairs:
        stats, labels = attention.pairs_and_clusters(x, spec["delta"], spec["beta"] if energy else 0.0, labelled)
    if spec.setup.keeps("first_alignment"):
        alignment = np.einsum("etid,ed->et", x, x[:, 0, 0]) / spec["n"]
    return _values(spec, len(states), stats, labels, alignment, states, x)


def _values(spec, runs, stats, labels, alignment, states, x=None, counts=None) -> Chunk:
    """The chunk of the pair statistics and labels (None where not needed; or, observed in the
    loop, the labels' counts (runs, times, 3) of :data:`dyn.attention.observer.COUNTS`), the
    first alignment and, where `states` are given, what needs them (radius, equiangular rho,
    events)."""
    values = {}
    if stats is not None:
        values.update(pair_fraction=stats[..., 0], min_inner=stats[..., 1], energy=stats[..., 2])
    if labels is not None:
        clusters = attention.count_clusters(labels)
        values.update(_clustered(spec, clusters, events.held_by(labels, 1), events.held_by(labels, spec["early"])))
    elif counts is not None:
        # held_by's mean of booleans is their sum in float64 (exact: at most n ones) divided
        # once by n, so count / n is it bit for bit
        clusters = np.ascontiguousarray(counts[..., 0])
        values.update(_clustered(spec, clusters, counts[..., 1] / spec["n"], counts[..., 2] / spec["n"]))
    if alignment is not None:
        values["first_alignment"] = alignment
    if any(s in STREAM_SCHEMES for s in spec.setup.values_of("normalization_layer")):
        if states is None:  # observed in the loop: a scheme on the sphere (radius 1)
            values["radius"] = np.ones((runs, len(spec.times)))
        else:
            values["radius"] = schemes.stream_radius(spec["normalization_layer"], states)
    if states is None:
        return Chunk(values)
    if "equiangular" in spec.setup.values_of("init"):
        values["rho"] = equiangular.mean_inner(x)
        theory = _rho_theory(spec)
        gram = np.einsum("etid,etjd->etij", x, x)
        off = gram[..., ~np.eye(spec["n"], dtype=bool)]
        values["rho_error"] = np.abs(off - theory[None, :, None]).max(axis=(1, 2))
    if spec["events"]:
        times, size_a, size_b = _merges(labels, spec.times)
        values.update(
            merge_time=times,
            merge_size_a=size_a,
            merge_size_b=size_b,
            run_clusters=clusters.astype(np.float64),
            run_energy=stats[..., 2],
        )
        factor = spec.get("plateau_factor")
        count, start, end = plateaus.first_plateau(
            clusters, spec.times, plateaus.PLATEAU_RATIO if factor is None else factor
        )
        values.update(
            first_plateau_clusters=count,
            first_plateau_time=start,
            p_first_plateau=np.isfinite(count),
            p_merged_after_plateau=np.isfinite(end),
            run_plateau_clusters=count,
            run_plateau_time=start,
            run_plateau_end=end,
        )
        values.update(_formation(spec, x, labels))
    return Chunk(values, states=states)


def _clustered(spec, clusters, held_first, held_early) -> dict:
    """The labelled outputs from the cluster counts (runs, times) int64 and the held
    fractions."""
    one = clusters == 1
    # the first save with one cluster; NaN: never by the horizon (censored there: the engine's
    # time_to_event reduction writes the mean with T in its place)
    first = np.where(one.any(axis=1), spec.times[np.argmax(one, axis=1)], np.nan)
    return dict(
        p_one_cluster=one,
        n_clusters=clusters,
        time_to_one_cluster=first,
        held_by_first=held_first,
        held_by_early=held_early,
    )


def _formation(spec, x, labels) -> dict:
    """The basins at the end of the linear phase and when the clusters have formed
    (dyn.attention.plateaus), on the circle; NaN elsewhere (declared)."""
    runs = x.shape[0]
    linear = formed = when = np.full(runs, np.nan)
    beta = float(spec["beta"])
    if spec["d"] == 2 and beta > 0:
        linear, at = plateaus.linear_phase_count(x, spec.times, beta, spec["n"], spec["normalization"])
        if np.isfinite(at):
            formed, when = plateaus.formed(x, labels, spec.times, beta, spec["delta"], after=at)
    return {
        "linear_phase_clusters": linear,
        "run_linear_phase_clusters": linear,
        "formed_clusters": formed,
        "run_formed_clusters": formed,
        "run_formed_time": when,
    }


PLATEAU = "first_plateau_clusters"
SOME_WITHOUT_PLATEAU = "some run has no first plateau (see p_first_plateau)"
LINEAR, FORMED = "linear_phase_clusters", "formed_clusters"
NO_LINEAR_PHASE = (
    "off the circle (d != 2), or no linear phase to end: beta <= 0 (no mode grows) or beta > 700 (the rates overflow)"
)
NOT_FORMED = NO_LINEAR_PHASE + ", or a run's clusters not formed (tight, one per basin) by T"
PLAIN = {
    "d": 2,
    "init": "uniform",
    "normalization_layer": "post",
    "mask": "none",
    "bias_slope": 0.0,
    "feedforward": 0.0,
    "head_noise": 0.0,
}  # where k*(beta) applies


def _plateau_outputs() -> list[Output]:
    """The first plateau of each run's cluster count (dyn.attention.plateaus), with events."""
    return [
        Output(
            PLATEAU, "first-plateau cluster count (mean over runs)", "1", (), "mean_se", nan_means=SOME_WITHOUT_PLATEAU
        ),
        Output(
            "first_plateau_time",
            "time the first plateau is first seen (mean over runs)",
            "1",
            (),
            "mean_se",
            nan_means=SOME_WITHOUT_PLATEAU,
        ),
        Output("p_first_plateau", "fraction of runs whose count has a first plateau", "1", (), "proportion"),
        Output(
            "p_merged_after_plateau",
            "fraction of runs with a merge after their first plateau by the horizon",
            "1",
            (),
            "proportion",
        ),
        Output(
            "run_plateau_clusters",
            "cluster count at the first plateau of each run (NaN: none)",
            "1",
            (),
            "per_run",
            draw=Draw(over=(PLATEAU,), color="0.55", label="single runs"),
            nan_means="the run has no first plateau",
        ),
        Output(
            "run_plateau_time",
            "time each run's first plateau is first seen",
            "1",
            (),
            "per_run",
            nan_means="the run has no first plateau",
        ),
        Output(
            "run_plateau_end",
            "time of each run's first merge after its first plateau (the "
            "first save with fewer clusters; NaN: none by the horizon)",
            "1",
            (),
            "per_run",
            nan_means="no plateau, or no merge after it by the horizon",
        ),
        Output(
            LINEAR,
            "basins (local maxima of G(phi) = sum_j e^{beta cos(phi - theta_j)}) at "
            "the end of the linear phase, the save linear_phase_time (mean over runs)",
            "1",
            (),
            "mean_se",
            draw=Draw(over=(PLATEAU,), color="tab:purple", linestyle="-", label="basins, end of linear phase"),
            nan_means=NO_LINEAR_PHASE,
        ),
        Output(
            "run_linear_phase_clusters",
            "basins of each run at the end of the linear phase",
            "1",
            (),
            "per_run",
            nan_means=NO_LINEAR_PHASE,
        ),
        Output(
            FORMED,
            "clusters at the first save after the linear phase at which every cluster "
            "is tight (all its pairs within delta) and each basin holds one (mean over runs)",
            "1",
            (),
            "mean_se",
            draw=Draw(over=(PLATEAU,), color="tab:green", linestyle="-", label="basins, clusters formed"),
            nan_means=NOT_FORMED,
        ),
        Output(
            "run_formed_clusters",
            "clusters (= basins) of each run when they have formed",
            "1",
            (),
            "per_run",
            nan_means=NOT_FORMED,
        ),
        Output(
            "run_formed_time",
            "first save after the linear phase at which every cluster of the run is tight and each basin holds one",
            "1",
            (),
            "per_run",
            nan_means=NOT_FORMED,
        ),
    ]


def _plateau_references(setup) -> list[Reference]:
    """k*(beta) = argmax_k k^2 I_k(beta) (the most unstable mode of the uniform law on the
    circle at sigma = 0), its continuous form k_c and sqrt(beta log beta), on a fine beta grid
    when beta is swept, and the linear phase's references at the sweep's points; NaN where the
    circle's linear theory does not apply (d != 2, other starts or architectures)."""
    if any(k in setup.axes for k in "QKV") or any(
        setup.params.get(k) is not None and not np.array_equal(setup.params[k], np.eye(len(setup.params[k])))
        for k in "QKV"
    ):
        return []
    dims, cases = over_axes(setup, *PLAIN)
    coords, grid = {}, ()
    if "beta" in setup.axes:
        coords = {"beta_theory": theory_coord("beta", setup.axes["beta"])}
        grid = ("beta_theory",)
        beta = coords["beta_theory"].values
    else:
        beta = np.asarray(float(setup.params["beta"]))
    shape = tuple(len(setup.axes[a]) for a in dims)
    mode = np.full(shape + beta.shape, np.nan)
    k_star = plateaus.most_unstable_mode(beta)  # one curve, the same for every plain case
    for index, v in cases:
        if all(v[k] == want for k, want in PLAIN.items()):
            mode[index] = k_star
    scale = plateaus.count_scale(beta)
    continuous = np.where(np.isfinite(mode), plateaus.mode_asymptote(beta), np.nan)
    over = (PLATEAU,)
    return [
        Reference(
            "plateau_mode",
            "most unstable Fourier mode k*(beta) = argmax_k k^2 I_k(beta) "
            "of the uniform law on the circle (sigma = 0; NaN where it does not apply)",
            mode,
            (*dims, *grid),
            coords,
            draw=Draw(over=over, color="black", label=r"most unstable mode $k^*(\beta)$"),
        ),
        Reference(
            "plateau_scale",
            "sqrt(beta log beta), prefactor 1 (physics.md 1.5)",
            scale,
            grid,
            coords,
            draw=Draw(over=over, color="tab:red", linestyle=":", label=r"$\sqrt{\beta \log \beta}$"),
        ),
        Reference(
            "continuous_mode",
            "k_c = sqrt(2 beta - 1/3): the maximizer of the growth rate "
            "k^2 I_k(beta) over real k, to O(beta^{-3/2}) (NaN where k* does not apply)",
            continuous,
            (*dims, *grid),
            coords,
            draw=Draw(over=over, color="0.3", linestyle=":", label=r"$k_c(\beta)$"),
        ),
        *_linear_phase_references(setup),
    ]


def _linear_phase_references(setup) -> list[Reference]:
    """At the sweep's own points: the save at which linear_phase_clusters is counted (the last
    one at or before t_lin = log(n/16) / (2 lambda_{k*}), wherever d = 2 and beta > 0) and the
    linear theory's expected number of basins there (Rice; plain cases only)."""
    dims, cases = over_axes(setup, "beta", "normalization", *PLAIN)
    shape = tuple(len(setup.axes[a]) for a in dims)
    when, expected = np.full(shape, np.nan), np.full(shape, np.nan)
    times, n = setup.times, int(setup.params["n"])
    for index, v in cases:
        beta = float(v["beta"])
        if v["d"] != 2 or not beta > 0:
            continue
        at = plateaus.count_save(times, plateaus.linear_phase_end(beta, n, v["normalization"]))
        if at < 0:
            continue
        when[index] = times[at]
        if all(v[k] == want for k, want in PLAIN.items()):
            expected[index] = plateaus.expected_basins(beta, float(times[at]), v["normalization"])
    return [
        Reference(
            "linear_phase_time",
            "save at which linear_phase_clusters is counted: the last "
            "at or before t_lin = log(n/16) / (2 lambda_{k*}) (NaN: d != 2 or no growing "
            "mode)",
            when,
            dims,
        ),
        Reference(
            "linear_phase_expected",
            "linear theory's expected number of basins at "
            "linear_phase_time: Rice's sqrt(sum k^4 s_k / sum k^2 s_k), s_k = I_k(beta)^2 "
            "e^{2 lambda_k t} (NaN where it does not apply)",
            expected,
            dims,
            draw=Draw(
                over=(PLATEAU, LINEAR), color="tab:purple", linestyle="--", label="linear theory (Rice, finite n)"
            ),
        ),
    ]


def _rho_theory(spec) -> np.ndarray:
    """The scalar ODE's rho at the save times where it applies, else NaN."""
    theory = np.full(len(spec.times), np.nan)
    if spec["init"] == "equiangular" and _scalar_ode_applies(spec):
        theory = equiangular.equiangular_rho(
            spec.times, spec["rho0"], spec["beta"], spec["n"], spec["normalization"] == "USA"
        )
    return theory


def _merges(labels, times):
    rows = [events.merges(run, times) for run in labels]
    return tuple(np.array([r[i] for r in rows]) for i in range(3))
