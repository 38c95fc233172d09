r"""Attention of your own: :func:`attention_particles` builds the System of tokens moved by
multi-head attention with query, key and value matrices and a row normalization of choice,

    s^h_ij = beta <Q_h x_i, K_h x_j>,     A^h_i. = N(s^h_i.)   (one row at a time),
    sphere:  dx_i = P_{x_i}( (1/H) sum_h sum_j A^h_ij V_h x_j ) dt,
    R^d:     dx_i = (1/H) sum_h sum_j A^h_ij V_h (x_j - x_i) dt,

(the residual, x_j or x_j - x_i, is a choice on either geometry). N is one of
:data:`dyn.user.normalize.NAMES` (softmax, usa, sinkhorn, hardmax, sparsemax, entmax with
alpha, topk with k) or the user's numba function ``f(s) -> w`` of one row of scores, whose
weights must be >= 0 and sum to 1 (checked on the start state's rows of every point; a
normalization that fails is refused in one line). beta is a scalar factor of Q_h^T K_h, so
a sweep over beta moves the temperature of random matrices drawn once.

Q, K and V are parameters of kind "matrices" (d x d, or a stack of H of them: the heads), given
in the scenario literally or by a law (:mod:`dyn.core.laws`: gaussian, orthogonal, identity;
drawn per point, per run or once for the sweep). Their default is the identity, so with
beta swept and softmax this is `attention_sphere`'s flow, bit for bit (and to rounding with
Q = K = sqrt(beta) I, V = I and beta = 1). Per-run matrices make each run its own problem
(the runs are solved one by one); the numba backend runs the field.

Softmax, and USA with the residual x_j, run the engine's own attention field
(:mod:`dyn.user.attention_engine`, with M_h = Q_h^T K_h): its regimes and its work per pair.
The other normalizations are applied one row of scores at a time (:mod:`dyn.user.attention_jit`).
"""

from __future__ import annotations

import numpy as np

from ..core import laws
from ..core.errors import ScenarioError
from ..core.schema import Field
from . import attention_engine, attention_jit, normalize
from .particles import Particles, particles

RESIDUALS = ("x_j", "x_j - x_i")
IDENTITY = {"law": "identity", "scale": 1.0, "draw": "point"}
MATRICES = ("Q", "K", "V")


def attention_particles(
    *, name: str, description: str = "", normalization="softmax", geometry: str = "sphere", residual: str | None = None
):
    """The System class of tokens moved by attention with Q, K, V per head (module doc).

    normalization: a name of :data:`dyn.user.normalize.NAMES`, or a numba-jittable ``f(s) ->
    w`` of one row of scores; geometry: "circle", "sphere" or "euclidean"; residual: "x_j"
    (the default on the sphere) or "x_j - x_i" (the default in R^d).

    Parameters: those of :func:`dyn.particles` (n, d, delta, until_decided, decide_cap), beta
    (the factor of the scores, default 1), Q, K, V (default the identity), and alpha (entmax,
    default 1.5), k (topk, default 4) or sinkhorn_iterations (sinkhorn).

    Returns a new ``dyn.Model`` subclass (the system; name it in a scenario as module:Class).
    Raises ValueError (one line) for an unknown normalization, geometry or residual.
    """
    if isinstance(normalization, str) and normalization not in normalize.NAMES:
        raise ValueError(
            f"attention_particles: normalization must be one of {normalize.NAMES} "
            f"or a function of one row of scores; got {normalization!r}"
        )
    if residual is None:
        residual = "x_j - x_i" if geometry == "euclidean" else "x_j"
    if residual not in RESIDUALS:
        raise ValueError(f"attention_particles: residual must be one of {RESIDUALS}, got {residual!r}")
    own = {"beta": Field("float", 1.0, "factor beta of the scores beta <Q x_i, K x_j>")}
    for m, what in zip(MATRICES, ("query", "key", "value"), strict=True):
        own[m] = Field("matrices", IDENTITY, f"{what} matrices (d x d, one per head; or a law)")
    if normalization == "entmax":
        own["alpha"] = Field("float", 1.5, "entmax's alpha (2: sparsemax)", gt=1.0, hi=10.0)
    elif normalization == "topk":
        own["k"] = Field("int", 4, "the scores each row keeps (top-k)", lo=1, hi=1 << 20)
    plain = "sinkhorn" if normalization == "sinkhorn" else "SA"
    base = particles(
        _unused,
        name=name,
        description=description or f"attention with Q, K, V on the {geometry}: {name}",
        geometry=geometry,
        normalization=plain,
        params=own,
    )
    label = (
        normalization
        if isinstance(normalization, str)
        else getattr(getattr(normalization, "py_func", normalization), "__qualname__", "user")
    )
    body = dict(
        norm=normalization if isinstance(normalization, str) else staticmethod(normalization),
        norm_label=label,
        euclidean_residual=residual == "x_j - x_i",
        __module__=base.__module__,
        __qualname__=name,
    )
    import sys

    body["__module__"] = sys._getframe(1).f_globals.get("__name__", __name__)  # the caller's
    return type(name, (AttentionModel, base), body)


def _unused(s):  # the interaction slot of dyn.particles: the drift below replaces it
    return s


class AttentionModel(Particles):
    """What :func:`attention_particles` builds; not written by hand."""

    norm = "softmax"
    norm_label = "softmax"
    euclidean_residual = False
    jax_methods = frozenset()

    @classmethod
    def has_form(cls, form: str) -> bool:
        return form == "numba"

    @classmethod
    def parameters(cls) -> tuple[str, ...]:
        return ("beta",) + tuple(a for a in ("alpha", "k", "sinkhorn_iterations") if a in cls.params) + MATRICES

    @classmethod
    def numba_function(cls, kind: str = "drift"):
        from .model import _COMPILED

        if kind != "drift":
            return None
        if attention_engine.serves(cls.norm, cls.euclidean_residual):
            return attention_engine.drift
        if (cls, kind) not in _COMPILED:
            _COMPILED[cls, kind] = attention_jit.drift(
                cls.norm, cls.euclidean_residual, f"{cls.__module__}.{cls.__qualname__}"
            )
        return _COMPILED[cls, kind]

    @classmethod
    def jax_function(cls, kind: str = "drift", layout: tuple = ()):
        return None

    @classmethod
    def work_size(cls, n: int, d: int, p=None) -> int:
        """Scratch floats of the drift for n tokens in dimension d; p: the packed vector (its
        heads size the engine field's scratch, where the drift is the engine's)."""
        if not attention_engine.serves(cls.norm, cls.euclidean_residual):
            return attention_jit.work_size(n, d, cls.norm == "sinkhorn")
        if p is None:
            raise ValueError(f"{cls.__name__}.work_size needs the packed vector p (its heads size the scratch)")
        return attention_engine.work_size(n, d, int(p[attention_engine.HEADS]))

    # --- the matrices -------------------------------------------------------------------
    def per_run(self, spec) -> bool:
        """Whether some matrix is drawn per run."""
        return any(laws.is_law(spec[m]) and spec[m]["draw"] == "run" for m in MATRICES)

    def matrices(self, spec, run: int = 0) -> tuple[np.ndarray, ...]:
        """Q, K, V of the point (of its run `run`, for draws per run), each (H, d, d); a
        matrix of another order than d, or stacks of different lengths, one line."""
        d = spec["d"]
        out = []
        for m in MATRICES:
            value = spec[m]
            if laws.is_law(value):
                a = laws.draw(m, value, "matrices", d, spec.setup.seed, spec.stream, run)
            else:
                a = np.asarray(value, dtype=np.float64)
                a = a[None] if a.ndim == 2 else a
            if a.shape[1:] != (d, d):
                raise ScenarioError(
                    f"params.{m}",
                    f"is {a.shape[1]} x {a.shape[2]}; the state's dimension is d = {d}: give {d} x {d} matrices",
                )
            out.append(a)
        heads = {a.shape[0] for a in out} - {1}
        if len(heads) > 1:
            raise ScenarioError(
                "params.V",
                f"Q, K and V have stacks of {[a.shape[0] for a in out]}"
                " heads: give them one length (or one matrix, shared)",
            )
        h = heads.pop() if heads else 1
        return tuple(np.broadcast_to(a, (h, d, d)) for a in out)

    def packed(self, spec, run: int = 0) -> np.ndarray:
        a = spec["alpha"] if self.norm == "entmax" else spec["k"] if self.norm == "topk" else 0.0
        iterations = spec["sinkhorn_iterations"] if self.norm == "sinkhorn" else 0
        return type(self).pack_matrices(spec["beta"], *self.matrices(spec, run), a=a, iterations=iterations)

    @classmethod
    def pack_matrices(cls, beta: float, q, k, v, a: float = 0.0, iterations: int = 0) -> np.ndarray:
        """The drift's packed vector for these matrices (each (H, d, d)), with this class's
        normalization and residual flags (:func:`dyn.user.attention_jit.pack`); a: entmax's
        alpha or top-k's k, iterations: Sinkhorn's."""
        usa = cls.norm == "usa"
        return attention_jit.pack(beta, a, iterations, q, k, v, usa=usa, difference=cls.euclidean_residual)

    def problem(self, spec, state=None, run: int = 0):
        import integrators

        geometry = integrators.EUCLIDEAN if self.space == "euclidean" else integrators.SPHERE
        return integrators.Problem(
            type(self).numba_function("drift"), None, self.packed(spec, run), geometry, work=type(self).work_size
        )

    def _probe(self, jax: bool, x, spec):
        cls = type(self)
        out = np.empty_like(x)
        p = self.packed(spec)
        cls.numba_function("drift")(0.0, x, p, out, np.empty(cls.work_size(*x.shape, p)))
        return out

    def validate(self, spec) -> None:
        if self.per_run(spec) and spec["until_decided"]:
            raise ScenarioError(
                "params.until_decided",
                "matrices drawn per run are solved run by run: until_decided needs one problem per point",
            )
        super().validate(spec)
        if not isinstance(self.norm, str):
            self._check_rows(spec)

    def _check_rows(self, spec) -> None:
        """The user's normalization maps the start state's rows of scores (every head) to
        weights >= 0 summing to 1."""
        x = np.ascontiguousarray(self.initial_state(spec.variant(salt=(1,)), 1)[0])
        q, k, _ = self.matrices(spec)
        user = type(self).norm
        for h in range(q.shape[0]):
            scores = spec["beta"] * (x @ q[h].T) @ (x @ k[h].T).T
            problem = normalize.row_check(user, scores)
            if problem:
                raise ScenarioError(
                    "scenario.system",
                    f"{type(self).__name__}'s normalization "
                    f"{self.norm_label} {problem}: a normalization returns "
                    "weights >= 0 summing to 1",
                )

    def simulate(self, spec, runs: range):
        if not self.per_run(spec):
            return super().simulate(spec, runs)
        x0 = np.ascontiguousarray(self.initial_state(spec, len(runs)), dtype=np.float64)
        integ = spec.solver.get()
        states, status = [], []
        for r, x in zip(runs, x0, strict=True):
            solution = integ.solve(self.problem(spec, x.shape, run=r), x[None], spec.times)
            states.append(solution.states)
            status.append(solution.status)
        states = np.concatenate(states)
        chunk = self.observe(spec, states)
        chunk.status = np.concatenate(status)
        if chunk.states is None and self.trajectory_dims(spec.setup) is not None:
            chunk.states = states
        return chunk
