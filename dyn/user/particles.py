r"""Interacting particles from one interaction: :func:`particles` builds the System.

Tokens x_1 .. x_n on the sphere S^{d-1} (the circle for d = 2) or in R^d, each pushed by the
others through a scalar interaction of their inner products (and, for masks and biases, of
their positions):

    w_ij = phi(<x_i, x_j>, i, j; theta),      A = N(w)   (the normalization),
    sphere:   dx_i = P_{x_i}( sum_j A_ij x_j ) dt  (+ sigma P_{x_i} dB_i),
    R^d:      dx_i = sum_j A_ij (x_j - x_i) dt     (+ sigma dB_i),

with N: "SA" (rows sum to 1: A_ij = w_ij / sum_k w_ik), "USA" (A = w / n), "none" (A = w) or
"sinkhorn" (w scaled to a doubly stochastic matrix by `sinkhorn_iterations` alternate column
and row normalizations, ending with rows). phi(s, beta) = e^{beta s} with SA is the
self-attention flow of dyn's `attention_sphere`.

The user writes phi once, as a numba-jittable scalar function ``phi(s, <params>)`` or
``phi(s, i, j, <params>)`` (i, j the tokens' positions, from 0; s = <x_i, x_j>, or
|x_i - x_j|^2 with ``of="distance"``, e.g. a Gaussian kernel in R^d), and optionally its JAX form
(called on the whole matrix of inner products, so written with array operations) for the
diffrax and jax backends; and, where the flow has an energy, its potential Phi (Phi' = phi,
numpy operations), for the energy E = sum_ij Phi(<x_i, x_j>) / (2 n^2) of USA dynamics.

The system's outputs are those of `attention_sphere`, computed by the same functions:
pair_fraction, min_inner and the clusters (union-find of pairs with <x_i, x_j> > 1 - delta on
the sphere; |x_i - x_j| < delta in R^d), the fraction of runs in one cluster and the time to it,
the first plateau of the cluster count (:mod:`dyn.attention.plateaus`), the energy, and with
`until_decided` the runs continued past the horizon until they are one cluster (decision_time,
p_undecided).
"""

from __future__ import annotations

import inspect

import numpy as np

from ..core.contract import UNDECIDED, Chunk, Output, bytes_of
from ..core.errors import ScenarioError
from ..core.lazy import lazy
from ..core.schema import Field
from ..core.system import state_dims
from . import arrays
from .model import Model

attention = lazy("dyn.attention")
plateaus = lazy("dyn.attention.plateaus")

GEOMETRIES = ("circle", "sphere", "euclidean")
NORMALIZATIONS = ("SA", "USA", "none", "sinkhorn")
_CODES = {name: code for code, name in enumerate(NORMALIZATIONS)}
_ENGINE_PARAMS = ("sinkhorn_iterations",)
ARGUMENTS = ("inner", "distance")  # s = <x_i, x_j>, or s = |x_i - x_j|^2


def particles(
    interaction,
    *,
    name: str,
    description: str = "",
    params: dict | None = None,
    geometry: str = "sphere",
    normalization: str = "SA",
    noise: bool = False,
    interaction_jax=None,
    potential=None,
    of: str = "inner",
) -> type[Model]:
    """The System class of particles pushed by `interaction` (module doc).

    interaction: ``phi(s, <params>)`` or ``phi(s, i, j, <params>)``, numba-jittable, a float;
    name, description: the system's; params: the interaction's parameters (name -> dyn.Field);
    geometry: "circle", "sphere" or "euclidean" (R^d); normalization: "SA", "USA", "none" or
    "sinkhorn"; noise: add sigma dB (a parameter `sigma`; the SDE methods);
    interaction_jax: phi in JAX (array operations); potential: Phi with Phi' = phi (numpy);
    of: what s is, "inner" (<x_i, x_j>, the default) or "distance" (|x_i - x_j|^2, e.g. a
    Gaussian kernel in R^d).
    interaction = "exp": phi(s) = e^{beta s} (parameter beta), run by the engine's own attention
    flow (its numba and JAX drifts; SA or USA on the circle or the sphere, no noise).

    Parameters the engine adds: n (tokens), d (dimension; 2 on the circle), delta (the cluster
    threshold), until_decided and decide_cap (run until one cluster), sigma (with noise),
    sinkhorn_iterations (with sinkhorn).

    Returns a new ``dyn.Model`` subclass (the system; name it in a scenario as module:Class).
    Raises ValueError (one line naming the argument) for an unknown geometry, normalization or
    `of`, or a parameter the engine already declares.
    """
    if isinstance(interaction, str):
        return _engine_kernel(interaction, name, description, params, geometry, normalization, noise)
    if geometry not in GEOMETRIES:
        raise ValueError(f"particles: geometry must be one of {GEOMETRIES}, got {geometry!r}")
    if of not in ARGUMENTS:
        raise ValueError(f"particles: of must be one of {ARGUMENTS}, got {of!r}")
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"particles: normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    own = dict(params or {})
    fields = {
        "n": Field("int", 16, "number of tokens", lo=1, hi=4096),
        "d": Field("int", 3, "dimension of the space", lo=1, hi=4096),
        "delta": Field(
            "float",
            1e-3,
            "cluster threshold: <x_i,x_j> > 1 - delta (sphere), |x_i - x_j| < delta (R^d)",
            gt=0.0,
            hi=2.0,
        ),
    }
    fields["until_decided"] = Field(
        "bool",
        False,
        "continue each run past the horizon, in "
        "stretches of the horizon, until its tokens form one cluster "
        "or decide_cap horizons have passed",
        sweepable=False,
    )
    fields["decide_cap"] = Field("float", 8.0, "with until_decided: the longest time, in horizons", gt=1.0, hi=1e4)
    if geometry == "circle":
        fields["d"] = Field("int", 2, "dimension (the circle)", lo=2, hi=2)
    elif geometry == "sphere":
        fields["d"] = Field("int", 3, "dimension of the space of the sphere S^{d-1}", lo=2, hi=4096)
    if noise:
        fields["sigma"] = Field("float", 0.1, "noise level sigma", lo=0.0)
    if normalization == "sinkhorn":
        fields["sinkhorn_iterations"] = Field("int", 20, "Sinkhorn's normalizations per drift", lo=1, hi=10_000)
    clash = sorted(set(own) & set(fields))
    if clash:
        raise ValueError(f"particles: parameters {clash} are the engine's; name them otherwise")
    names = list(inspect.signature(getattr(interaction, "py_func", interaction)).parameters)
    positions = names[1:3] == ["i", "j"]
    args = tuple(names[3 if positions else 1 :])
    missing = [a for a in args if a not in own]
    if missing:
        raise ValueError(f"particles: the interaction takes {missing}, not declared in params")
    body = dict(
        name=name,
        description=description or f"particles on the {geometry}: {name}",
        default_plot="pair_fraction",
        geometry="euclidean" if geometry == "euclidean" else "sphere",
        params={**own, **fields},
        interaction=staticmethod(interaction),
        interaction_jax=None if interaction_jax is None else staticmethod(interaction_jax),
        potential=None if potential is None else staticmethod(potential),
        interaction_args=args,
        positions=positions,
        normalization=normalization,
        distance=of == "distance",
        space=geometry,
        noisy=noise,
        equation="sde" if noise else "ode",
        jax_methods=frozenset()
        if interaction_jax is None
        else frozenset({"euler_maruyama"} if noise else {"euler", "heun", "rk4"}),
        __module__=getattr(interaction, "__module__", __name__),
        __qualname__=name,
    )
    return type(name, (Particles,), body)


class Particles(Model):
    """What :func:`particles` builds; not written by hand."""

    forms_from_functions = False  # equation and jax_methods are set by the builder
    interaction = interaction_jax = potential = None
    interaction_args: tuple = ()
    positions = distance = False
    normalization, space, noisy = "SA", "sphere", False

    @classmethod
    def parameters(cls) -> tuple[str, ...]:
        extra = ("sigma",) if cls.noisy else ()
        return cls.interaction_args + extra + tuple(p for p in _ENGINE_PARAMS if p in cls.params)

    @classmethod
    def numba_function(cls, kind: str = "drift"):
        from . import particles_jit

        key = (cls, kind)
        from .model import _COMPILED

        if key not in _COMPILED:
            if kind == "diffusion":
                _COMPILED[key] = particles_jit.diffusion(cls.parameters().index("sigma")) if cls.noisy else None
            else:
                at = tuple(arrays.expression(cls.params.get(a), i) for i, a in enumerate(cls.interaction_args))
                iterations = cls.parameters().index("sinkhorn_iterations") if cls.normalization == "sinkhorn" else -1
                _COMPILED[key] = particles_jit.drift(
                    cls.interaction,
                    cls.positions,
                    at,
                    _CODES[cls.normalization],
                    cls.space == "euclidean",
                    iterations,
                    cls.distance,
                )
        return _COMPILED[key]

    @classmethod
    def jax_function(cls, kind: str = "drift", layout: tuple = ()):
        from .model import _COMPILED

        if cls.interaction_jax is None:
            return None
        key = (cls, kind, "jax", layout)
        if key not in _COMPILED:
            names = cls.parameters()
            if kind == "diffusion":
                at = names.index("sigma") if cls.noisy else None
                _COMPILED[key] = None if at is None else (lambda t, x, p, dw: p[at] * dw)
            else:
                _COMPILED[key] = _drift_jax(
                    cls.interaction_jax,
                    cls.positions,
                    arrays.jax_readers(names, layout)[: len(cls.interaction_args)],
                    cls.normalization,
                    cls.space == "euclidean",
                    names.index("sinkhorn_iterations") if cls.normalization == "sinkhorn" else -1,
                    cls.distance,
                )
        return _COMPILED[key]

    @classmethod
    def has_form(cls, form: str) -> bool:
        return form == "numba" or cls.interaction_jax is not None

    @staticmethod
    def work_size(n: int, d: int, p) -> int:
        from . import particles_jit

        return particles_jit.work_size(n, d)  # the weights w (n x n) and the row sums

    @classmethod
    def _probe_numba(cls, x, p):
        out = np.empty_like(x)
        cls.numba_function("drift")(0.0, x, p, out, np.empty(cls.work_size(*x.shape, p)))
        return out

    def validate(self, spec) -> None:
        if spec["until_decided"] and spec.solver.backend == "jax":
            raise ScenarioError(
                "params.until_decided", "runs continue one by one past the horizon: use backend numba or diffrax"
            )
        super().validate(spec)

    def simulate(self, spec, runs: range) -> Chunk:
        chunk = super().simulate(spec, runs)
        if spec["until_decided"]:
            chunk.values.update(self._decided(spec, np.asarray(chunk.states)))
        return chunk

    def _decided(self, spec, states) -> dict:
        """Run until decided: the runs not in one cluster at the horizon go on (the flow is
        autonomous: each stretch starts again at t = 0, drawing its noise from the point's
        stream in order) until they are, or decide_cap horizons have passed. The time each was
        decided (the cap if never; a save time when decided by the horizon) and whether it was
        not."""
        clusters = self._clusters(spec, states[:, -1:])[:, 0]
        one = self._clusters(spec, states) == 1
        times = np.where(one.any(axis=1), spec.times[np.argmax(one, axis=1)], np.inf)
        active = np.flatnonzero(clusters > 1)
        x = np.ascontiguousarray(states[active, -1])
        cap, t = spec["decide_cap"] * spec.horizon, spec.horizon
        problem = self.problem(spec, states.shape[2:])
        noise = {"rng": spec.rng} if self.equation == "sde" else {}
        integ = spec.solver.get()
        while active.size and t < cap * (1 - 1e-12):
            stretch = min(spec.horizon, cap - t)
            x = np.ascontiguousarray(integ.solve(problem, x, np.array([0.0, stretch]), **noise).states[:, -1])
            t += stretch
            done = self._clusters(spec, x[:, None])[:, 0] == 1
            times[active[done]] = t
            active, x = active[~done], x[~done]
        undecided = ~np.isfinite(times)
        return {"decision_time": np.where(undecided, cap, times), "p_undecided": undecided}

    def _clusters(self, spec, x) -> np.ndarray:
        """Cluster counts of configurations x (runs, times, n, d)."""
        if self.space == "euclidean":
            labels, _ = _distance_clusters(x, spec["delta"])
        else:
            labels = attention.pairs_and_clusters(x, spec["delta"], 0.0, True)[1]
        return attention.count_clusters(labels)

    def initial_state(self, spec, runs: int) -> np.ndarray:
        n, d = spec["n"], spec["d"]
        if self.space == "euclidean":
            return spec.rng.standard_normal((runs, n, d))
        return attention.uniform_sphere(spec.rng, runs, n, d)

    def trajectory_dims(self, setup) -> dict[str, int]:
        return state_dims(setup, token="n", coordinate="d")

    def run_bytes(self, spec) -> int:
        return bytes_of(len(spec.times), spec["n"], spec["d"]) + bytes_of(spec["n"], spec["n"])

    def outputs(self, setup) -> list[Output]:
        near = "|x_i - x_j| < delta" if self.space == "euclidean" else "<x_i,x_j> > 1 - delta"
        outs = [
            Output("pair_fraction", f"fraction of token pairs with {near} (mean over runs)", "1", ("time",)),
            Output("p_one_cluster", "fraction of runs whose tokens form one cluster", "1", ("time",), "proportion"),
            Output("n_clusters", "number of clusters (mean over runs)", "1", ("time",)),
            Output("time_to_one_cluster", "time to one cluster (T if never; mean over runs)", "1"),
            Output(
                "first_plateau_clusters",
                "cluster count at the first plateau (mean over runs)",
                "1",
                (),
                "mean_se",
                nan_means="some run has no first plateau",
            ),
            Output("p_first_plateau", "fraction of runs whose count has a first plateau", "1", (), "proportion"),
        ]
        if self.space != "euclidean":
            outs.append(Output("min_inner", "minimum pairwise inner product (mean over runs)", "1", ("time",)))
        else:
            outs.append(
                Output("spread", "mean squared distance of the tokens to their mean (mean over runs)", "1", ("time",))
            )
        if setup.params.get("until_decided"):
            outs += [
                Output(
                    "decision_time",
                    "time the run's tokens formed one cluster, continued "
                    "past the horizon until decide_cap horizons (the cap if never; mean over "
                    "runs)",
                    "1",
                ),
                Output(
                    "p_undecided",
                    "fraction of runs not in one cluster by the cap",
                    "1",
                    (),
                    "proportion",
                    role=UNDECIDED,
                ),
            ]
        if self.potential is not None:
            s = "|x_i - x_j|^2" if self.distance else "<x_i,x_j>"
            outs.append(Output("energy", f"E = sum_ij Phi({s}) / (2 n^2) (mean over runs)", "1", ("time",)))
        return outs

    def observe(self, spec, states) -> Chunk:
        x = np.asarray(states)
        values = {}
        if self.space == "euclidean":
            labels, fraction = _distance_clusters(x, spec["delta"])
            values.update(pair_fraction=fraction, spread=((x - x.mean(axis=2, keepdims=True)) ** 2).sum(-1).mean(-1))
        else:
            stats, labels = attention.pairs_and_clusters(x, spec["delta"], 0.0, True)
            values.update(pair_fraction=stats[..., 0], min_inner=stats[..., 1])
        clusters = attention.count_clusters(labels)
        one = clusters == 1
        values.update(
            n_clusters=clusters,
            p_one_cluster=one,
            time_to_one_cluster=np.where(one.any(axis=1), spec.times[np.argmax(one, axis=1)], spec.horizon),
        )
        count, _, _ = plateaus.first_plateau(clusters, spec.times)
        values.update(first_plateau_clusters=count, p_first_plateau=np.isfinite(count))
        if self.potential is not None:
            gram = (
                np.einsum("etid,etjd->etij", x, x)
                if not self.distance
                else ((x[..., :, None, :] - x[..., None, :, :]) ** 2).sum(-1)
            )
            theta = [spec[a] for a in self.interaction_args]
            values["energy"] = self.potential(gram, *theta).sum(axis=(2, 3)) / (2 * spec["n"] ** 2)
        return Chunk(values, states=states)


def _engine_kernel(
    kernel: str, name: str, description: str, params, geometry: str, normalization: str, noise: bool
) -> type[Model]:
    """`particles("exp", ...)`: phi(s) = e^{beta s}, run by the engine's own attention flow."""
    if kernel != "exp":
        raise ValueError(
            f"particles: the engine's kernels are 'exp'; got {kernel!r} (or give your interaction as a function)"
        )
    if geometry not in ("circle", "sphere") or normalization not in ("SA", "USA") or noise:
        raise ValueError(
            "particles('exp'): the engine's attention flow is on the circle or the "
            "sphere, with SA or USA, without noise; write phi(s, beta) = "
            "exp(beta * s) as a function for the other cases"
        )
    fields = {"beta": Field("float", 1.0, "inverse temperature beta", lo=0.0)}
    if params:
        raise ValueError("particles('exp'): its one parameter is beta")
    cls = particles(
        _exp_kernel,
        name=name,
        description=description or f"self-attention ({normalization}) on the {geometry}",
        params=fields,
        geometry=geometry,
        normalization=normalization,
    )
    import sys

    module = sys._getframe(2).f_globals.get("__name__", __name__)  # the caller's module
    return type(name, (AttentionParticles, cls), {"__module__": module, "__qualname__": name})


def _exp_kernel(s, beta):
    return np.exp(beta * s)


class AttentionParticles(Particles):
    """phi(s) = e^{beta s}: the drift is the engine's attention flow (dyn.attention, numba and
    JAX), the energy its USA energy E = sum_ij e^{beta <x_i,x_j>} / (2 beta n^2)."""

    jax_methods = frozenset({"euler", "heun", "rk4"})

    @classmethod
    def has_form(cls, form: str) -> bool:
        return True

    def problem(self, spec, state=None):
        from ..attention import architecture, schemes

        p = architecture.pack_values({"d": spec["d"], "beta": spec["beta"], "normalization": self.normalization})
        return schemes.scheme("post").flow.problem(p)

    def _probe(self, jax: bool, x, spec):
        problem = self.problem(spec)
        out = np.empty_like(x)
        problem.drift(0.0, x, np.array(problem.p), out, np.empty(problem.work_size(*x.shape)))
        return out

    def outputs(self, setup) -> list[Output]:
        return super().outputs(setup) + [
            Output(
                "energy",
                "USA energy E = sum_ij exp(beta <x_i,x_j>) / (2 beta n^2) (mean over runs)",
                "1",
                ("time",),
                nan_means="beta = 0, where the energy is undefined",
            )
        ]

    def observe(self, spec, states) -> Chunk:
        chunk = super().observe(spec, states)
        stats, _ = attention.pairs_and_clusters(np.asarray(states), spec["delta"], spec["beta"], False)
        chunk.values["energy"] = stats[..., 2]
        return chunk


def _distance_clusters(x, delta: float):
    """Labels (smallest index of each cluster) of the graph |x_i - x_j| < delta, and the
    fraction of pairs i < j within delta, per configuration of x (..., n, d)."""
    from scipy.sparse.csgraph import connected_components

    n = x.shape[-2]
    near = np.linalg.norm(x[..., :, None, :] - x[..., None, :, :], axis=-1) < delta
    flat = near.reshape(-1, n, n)
    labels = np.empty(flat.shape[:1] + (n,), dtype=np.int64)
    for c, graph in enumerate(flat):
        _, found = connected_components(graph, directed=False)
        first = {}
        labels[c] = [first.setdefault(k, i) for i, k in enumerate(found)]
    upper = np.triu(np.ones((n, n), dtype=bool), 1)
    fraction = near[..., upper].mean(axis=-1) if n > 1 else np.ones(near.shape[:-2])
    return labels.reshape(near.shape[:-1]), fraction


def _drift_jax(
    phi, positions: bool, readers, normalization: str, euclidean: bool, iterations: int, distance: bool = False
):
    """The JAX drift of the particles on one member x (n, d); `readers`: one function of p per
    parameter of the interaction (:func:`dyn.user.arrays.jax_readers`)."""

    def drift(t, x, p):
        import jax
        import jax.numpy as jnp

        n = x.shape[0]
        s = x @ x.T
        if distance:
            s = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
        theta = [read(p) for read in readers]
        if positions:
            i, j = jnp.arange(n)[:, None], jnp.arange(n)[None, :]
            w = phi(s, i, j, *theta)
        else:
            w = phi(s, *theta)
        w = jnp.broadcast_to(w, (n, n))
        if normalization == "SA":
            a = w / w.sum(axis=1, keepdims=True)
        elif normalization == "USA":
            a = w / n
        elif normalization == "sinkhorn":

            def scale(_, m):
                m = m / m.sum(axis=0, keepdims=True)
                return m / m.sum(axis=1, keepdims=True)

            a = jax.lax.fori_loop(0, p[iterations].astype(jnp.int32), scale, w)
        else:
            a = w
        if euclidean:
            return a @ x - a.sum(axis=1)[:, None] * x
        return a @ x

    return drift
