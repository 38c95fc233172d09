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
energy at every save.
"""
from __future__ import annotations

import numpy as np

from ..attention.architecture import FIELDS as ARCHITECTURE_FIELDS
from ..attention.params import FIELDS
from ..contract import bytes_of
from ..errors import ScenarioError
from ..lazy import lazy
from ..schema import Field
from . import register
from .base import INTEGRATOR_KEYS, Chunk, Coord, Output, System, state_dims

attention = lazy("dyn.attention")
architecture = lazy("dyn.attention.architecture")
equiangular = lazy("dyn.attention.equiangular")
events = lazy("dyn.attention.events")
schemes = lazy("dyn.attention.schemes")
numerics = lazy("dyn.numerics.attention_field")

MAX_RUN_BYTES = 2**30  # the states one run keeps ((saves + 1) x n x d doubles) and its scratch
STREAM_SCHEMES = ("pre", "peri")  # the residual stream is not normalized: a radius output
MERGE = "merge"


@register
class AttentionSphere(System):
    name = "attention_sphere"
    description = ("self-attention particle flow on the sphere (SA/USA; masks, biases, heads, "
                   "normalization schemes), or its network")
    default_plot = "pair_fraction"
    equation = "ode"
    integrator = INTEGRATOR_KEYS
    jax_methods = frozenset({"euler", "heun", "rk4"})
    params = {
        **FIELDS,
        **ARCHITECTURE_FIELDS,
        "init": Field("str", "uniform", "initial law",
                      choices=("uniform", "hemisphere", "equiangular")),
        "rho0": Field("float", 0.0, "inner product of the equiangular start", lo=-1.0, hi=1.0),
        "form": Field("str", "flow", "continuous flow or discrete network", choices=("flow", "network")),
        "depth": Field("int", 100, "layers of the network over [0, T]", lo=1, hi=10**8),
        "delta": Field("float", 1e-3, "clustering threshold delta: <x_i,x_j> > 1 - delta",
                       lo=0.0, hi=2.0),
        "early": Field("int", 1, "tokens counted as early in held_by_early (clusters holding one "
                       "of the first `early` tokens)", lo=1, hi=10_000),
        "events": Field("bool", False, "also keep per-run tables: merge events, cluster count "
                        "and energy at every save", sweepable=False),
    }

    def validate(self, spec) -> None:
        d, n, saves = spec["d"], spec["n"], spec.setup.saves
        for name in ("Q", "K", "V"):
            if spec.get(name) is None:
                continue
            shape = np.shape(spec[name])
            if shape[-2:] != (d, d):
                raise ScenarioError(f"params.{name}", f"must be {d} x {d} (d = {d}) or one such "
                                    f"matrix per head, got {' x '.join(map(str, shape))}")
            if len(shape) == 3 and shape[0] != spec["heads"]:
                raise ScenarioError(f"params.{name}", f"holds {shape[0]} matrices, one per head, "
                                    f"but params.heads = {spec['heads']}")
        if self.run_bytes(spec) > MAX_RUN_BYTES:
            raise ScenarioError("output.saves", f"one run would keep {self.run_bytes(spec) / 2**30:.1f}"
                                " GiB of states and scratch ((saves + 1) x n x d doubles and "
                                "heads x n^2 weights); lower output.saves, n, d or heads")
        if spec["form"] == "network":
            if spec.setup.spacing != "linear":
                raise ScenarioError("output.spacing", "the network saves after whole layers: "
                                    "use spacing = \"linear\" with form = \"network\"")
            if spec["depth"] % saves:
                raise ScenarioError("params.depth", f"depth {spec['depth']} must be a multiple of "
                                    f"output.saves = {saves} (the network saves after whole layers)")
        if spec["init"] == "equiangular":
            problem = equiangular.check(n, d, spec["rho0"])
            if problem:
                raise ScenarioError("params.rho0" if n >= 2 and d >= n else "params.d", problem)
        if spec["early"] > n:
            raise ScenarioError("params.early", f"must be <= n = {n}, got {spec['early']}")
        if spec["events"] and "n" in spec.setup.axes:
            raise ScenarioError("params.events", "the per-run merge table has n - 1 rows: keep "
                                "params.n fixed (not swept) with events = true")

    def outputs(self, setup) -> list[Output]:
        outs = [
            Output("pair_fraction", "fraction of token pairs with <x_i,x_j> > 1 - delta (mean over runs)",
                   "1", ("time",)),
            Output("p_one_cluster", "fraction of runs whose tokens form one cluster", "1", ("time",),
                   "proportion"),
            Output("n_clusters", "number of clusters (mean over runs)", "1", ("time",)),
            Output("min_inner", "minimum pairwise inner product (mean over runs)", "1", ("time",)),
            Output("energy", "USA energy E = sum_ij exp(beta <x_i,x_j>) / (2 beta n^2) (mean over runs)",
                   "1", ("time",)),
            Output("time_to_one_cluster", "time to one cluster (T if never; mean over runs)", "1"),
            Output("held_by_first", "fraction of tokens in the cluster of token 1 (mean over runs)",
                   "1", ("time",)),
            Output("held_by_early", "fraction of tokens in clusters holding one of the first "
                   "`early` tokens (mean over runs)", "1", ("time",)),
            Output("first_alignment", "mean of <x_i(t), x_1(0)> over tokens and runs", "1", ("time",)),
        ]
        if any(s in STREAM_SCHEMES for s in setup.values_of("normalization_layer")):
            outs.append(Output("radius", "mean token radius |z_i| of the residual stream (1 when "
                               "normalized; mean over runs)", "1", ("time",)))
        if "equiangular" in setup.values_of("init"):
            outs += [
                Output("rho", "mean pairwise inner product (mean over runs)", "1", ("time",)),
                Output("rho_theory", "equiangular scalar ODE of physics.md §1.4 (NaN where it "
                       "does not apply)", "1", ("time",), "point"),
                Output("rho_error", "largest |<x_i,x_j> - rho_theory| over pairs, times and runs",
                       "1", (), "max"),
            ]
        if setup.params.get("events", False):
            outs += [
                Output("merge_time", "save time at which a merge is first seen (NaN: no more "
                       "merges)", "1", (MERGE,), "per_run"),
                Output("merge_size_a", "size of the first merging cluster", "1", (MERGE,), "per_run"),
                Output("merge_size_b", "size of the second merging cluster", "1", (MERGE,), "per_run"),
                Output("run_clusters", "number of clusters of each run", "1", ("time",), "per_run"),
                Output("run_energy", "USA energy of each run", "1", ("time",), "per_run"),
            ]
        return outs

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
        p = architecture.pack_values(spec.values, spec.setup.common_rng)
        scheme = schemes.scheme(spec["normalization_layer"])
        x0 = _initial(spec, len(runs))
        if spec["form"] == "network":
            every = spec["depth"] // spec.setup.saves
            states = attention.network_layers(scheme.network.problem(p), x0, spec["depth"],
                                              spec.horizon, save_every=every)
        else:
            states = spec.solver.get().solve(scheme.flow.problem(p), x0, spec.times)
        return _observed(spec, states)

    def batch_key(self, spec) -> tuple:
        # what shapes the JAX program: the scheme's drift, the state and parameter shapes
        return (spec["form"], spec["normalization_layer"], spec["n"], spec["d"], spec["heads"],
                spec["depth"], spec.runs)

    def simulate_batch(self, specs) -> list[Chunk]:
        """The `jax` backend: the same starts as the numba path (drawn from each point's
        stream), all points and runs advanced by one JAX program (flow: the configured RK table
        on the scheme's geometry; network: Euler on the scheme's layer geometry, h = T / depth).
        Mask, bias, heads' matrices and the feed-forward term are traced values of the
        architecture vector, so points that differ only in them share the program."""
        from integrators import jax_batch, tableau

        spec = specs[0]
        scheme = schemes.scheme(spec["normalization_layer"])
        x0 = np.stack([_initial(s, s.runs) for s in specs])
        p = np.stack([architecture.pack_values(s.values, s.setup.common_rng) for s in specs])
        if spec["form"] == "network":
            record, table, dt = scheme.network, tableau.EULER, spec.horizon / spec["depth"]
        else:
            record, table = scheme.flow, tableau.TABLEAUS[spec.solver.method]
            dt = spec.dt
        states = jax_batch.rk_batch(record.drift_jax, record.geometry, table, x0, p, spec.times, dt)
        return [_observed(s, states[i]) for i, s in enumerate(specs)]

    def decorate(self, ax, ds, var: str) -> None:
        """Theory and per-run detail on curves against time: the scalar ODE of equiangular
        starts (rho), the radius bound r <= 1 + t of pre-LN and peri-LN (|u| <= 1 for SA with
        V = I), the per-run staircases and merge times (n_clusters, energy with events). Heat
        maps of fractions (and of first_alignment) share the colour scale [0, 1], so panels
        compare."""
        if var in FRACTIONS:
            for mesh in ax.collections:
                mesh.set_clim(0.0, 1.0)
        if not _curves_against_time(ds, var):
            return
        t = ds["time"].values
        if var == "rho" and "rho_theory" in ds:
            _theory_curves(ax, ds["rho_theory"], "scalar ODE (§1.4)")
        elif var == "radius":
            ax.plot(t, 1.0 + t, "k:", lw=1, label=r"bound $1 + t$ (SA, $V = I$)")
            ax.legend(fontsize=8)
        elif var in ("n_clusters", "energy") and "run_clusters" in ds and ds["run_clusters"].ndim == 2:
            per_run = ds["run_clusters" if var == "n_clusters" else "run_energy"].values
            for row in per_run[:STAIRCASES]:
                ax.step(t, row, where="post", color="0.6", lw=0.6, alpha=0.6)
            ax.plot([], [], color="0.6", lw=0.6, label=f"single runs (first {STAIRCASES})")
            merges = ds["merge_time"].values.ravel()
            merges = merges[np.isfinite(merges) & (merges > 0)]
            if merges.size and ax.get_xscale() == "log":
                twin = ax.twinx()
                bins = np.geomspace(t[t > 0].min(), t.max(), 30)
                twin.hist(merges, bins=bins, color="tab:red", alpha=0.25, label="merge times")
                twin.set_yscale("log")
                twin.set_ylabel("merges (all runs, per bin)")
                twin.legend(loc="lower left", fontsize=8)
            ax.legend(loc="upper right", fontsize=8)


STAIRCASES = 12  # single-run staircases drawn under the mean
FRACTIONS = ("pair_fraction", "p_one_cluster", "held_by_first", "held_by_early", "first_alignment")


def _curves_against_time(ds, var: str) -> bool:
    """`dyn plot` drew `var` as curves against time: time is its only numeric axis."""
    da = ds[var]
    return "time" in da.dims and all(
        d == "time" or da.sizes[d] == 1 or da[d].dtype.kind not in "fiu" for d in da.dims)


def _theory_curves(ax, theory, label: str) -> None:
    """Dashed theory curves against time, one per combination of the other dims."""
    t = theory["time"].values
    others = [d for d in theory.dims if d != "time"]
    stacked = theory.transpose(*others, "time").values.reshape(-1, len(t))
    for k, row in enumerate(stacked):
        if np.isfinite(row).any():
            ax.plot(t, row, "k--", lw=1.2, label=label if k == 0 else None)
    ax.legend(fontsize=8)


def _scalar_ode_applies(spec) -> bool:
    """The equiangular ODE holds for post-LN, Q = K = V = I, no mask, no bias, no
    feed-forward, identical identity heads."""
    plain = all(spec.get(k) is None or np.array_equal(spec[k], np.eye(spec["d"])) for k in "QKV")
    return (plain and spec["normalization_layer"] == "post" and spec["mask"] == "none"
            and spec["bias_slope"] == 0 and spec["feedforward"] == 0 and spec["head_noise"] == 0)


def _initial(spec, runs: int) -> np.ndarray:
    if spec["init"] == "equiangular":
        return attention.equiangular_start(spec.rng, runs, spec["n"], spec["d"], spec["rho0"])
    init = attention.hemisphere if spec["init"] == "hemisphere" else attention.uniform_sphere
    return init(spec.rng, runs, spec["n"], spec["d"])


def _observed(spec, states) -> Chunk:
    """Per-run observables of states (runs, times, n, d) at the save times."""
    x = schemes.stream_tokens(spec["normalization_layer"], states)
    stats = attention.pair_statistics(x, spec["delta"], spec["beta"])
    labels = attention.cluster_labels(x, spec["delta"])
    clusters = attention.count_clusters(labels)
    one = clusters == 1
    first = np.where(one.any(axis=1), spec.times[np.argmax(one, axis=1)], spec.horizon)
    values = {"pair_fraction": stats[..., 0], "p_one_cluster": one, "n_clusters": clusters,
              "min_inner": stats[..., 1], "energy": stats[..., 2],
              "time_to_one_cluster": first,
              "held_by_first": events.held_by(labels, 1),
              "held_by_early": events.held_by(labels, spec["early"]),
              "first_alignment": np.einsum("etid,ed->et", x, x[:, 0, 0]) / spec["n"]}
    if any(s in STREAM_SCHEMES for s in spec.setup.values_of("normalization_layer")):
        values["radius"] = schemes.stream_radius(spec["normalization_layer"], states)
    if "equiangular" in spec.setup.values_of("init"):
        values["rho"] = equiangular.mean_inner(x)
        theory = _rho_theory(spec)
        gram = np.einsum("etid,etjd->etij", x, x)
        off = gram[..., ~np.eye(spec["n"], dtype=bool)]
        values["rho_error"] = np.abs(off - theory[None, :, None]).max(axis=(1, 2))
    if spec["events"]:
        times, size_a, size_b = _merges(labels, spec.times)
        values.update(merge_time=times, merge_size_a=size_a, merge_size_b=size_b,
                      run_clusters=clusters.astype(np.float64), run_energy=stats[..., 2])
    return Chunk(values, states=states)


def _rho_theory(spec) -> np.ndarray:
    """The scalar ODE's rho at the save times where it applies, else NaN."""
    theory = np.full(len(spec.times), np.nan)
    if spec["init"] == "equiangular" and _scalar_ode_applies(spec):
        theory = equiangular.equiangular_rho(spec.times, spec["rho0"], spec["beta"],
                                             spec["n"], spec["normalization"] == "USA")
    return theory


def _merges(labels, times):
    rows = [events.merges(run, times) for run in labels]
    return tuple(np.array([r[i] for r in rows]) for i in range(3))
