r"""A system from one vector field: :class:`Model`.

    dx = P_x f(t, x; theta) dt  (+ P_x g(t, x; theta)[dW])

on R^{n x d} (geometry "euclidean") or on (S^{d-1})^n (geometry "sphere": P_x projects each
row on the sphere's tangent space, and the integrators retract onto it). The user writes f once,
as a function of the state and of named parameters, ``drift(t, x, theta, sigma) -> array like
x``: numba-jittable (``drift``), for the numba backend, or JAX (``drift_jax``), for the diffrax
and jax backends, or both (then they must agree: :meth:`Model.twin_error`). The parameters it
takes by name are declared once in ``params`` (:class:`dyn.Field`: kind, default, bounds) and
the engine packs them into the flat vector the integrators pass around; no offsets to write.

What the engine calls is :class:`dyn.System`'s contract; a Model fills in ``simulate``,
``problem``, ``solves``, ``batch_key`` and ``validate`` (which calls the drift once at a start
of every point before anything is written, so a drift that raises or returns the wrong shape
is refused in one line). The user still says what to start from (``initial_state``), what to
measure (``outputs``, ``observe``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..core import stages
from ..core.contract import INTEGRATOR_KEYS, Solve
from ..core.errors import ScenarioError
from ..core.system import System
from . import arrays, budget, geometry as user_geometry, observe as user_observe
from .hooks import _arguments, _call, _function

GEOMETRIES = ("euclidean", "sphere")
LEADING = {"drift": ("t", "x"), "diffusion": ("t", "x", "dw")}  # the arguments before the params
ODE_JAX, SDE_JAX = frozenset({"euler", "heun", "rk4"}), frozenset({"euler_maruyama"})
_COMPILED: dict = {}  # (class, kind) -> its numba ABI function, made once per process


class Model(System):
    """A System whose dynamics is one vector field (module doc). Class data beyond a System's:

    - ``drift(t, x, <params>)``: the drift, numba-jittable; ``drift_jax``: the same in JAX;
      at least one of the two;
    - ``diffusion(t, x, dw, <params>)`` / ``diffusion_jax``: g(t, x)[dW] for an SDE (None: an
      ODE); ``noise_shape(spec, state)`` the shape of dW (default: the state's (n, d));
    - ``geometry``: "euclidean", "sphere" or a :class:`dyn.Geometry` (dyn.user.geometry).

    Each function's arguments after (t, x[, dw]) are parameter names of ``params`` (int, float,
    bool, or an array: vector, matrix, matrices, literal or drawn by a law, :mod:`dyn.user.arrays`),
    read from the point by name. ``one_source = True``: the drift is written once in numpy
    arithmetic and its JAX form derived (:mod:`dyn.user.one_source`). Hooks a Model must give:
    ``initial_state(spec, runs)`` -> (runs, n, d) drawn from ``spec.rng``, ``outputs(setup)``,
    ``observe(spec, states)`` -> Chunk (states (runs, times, n, d)).
    """

    drift: ClassVar[Callable | None] = None
    drift_jax: ClassVar[Callable | None] = None
    diffusion: ClassVar[Callable | None] = None
    diffusion_jax: ClassVar[Callable | None] = None
    geometry: ClassVar[str] = "euclidean"
    # scratch floats the numba drift needs per run: an int or (n, d, p) -> int (one object per
    # class: a JAX batch's problems must share it)
    work_size: ClassVar = 0
    integrator = INTEGRATOR_KEYS
    # equation and jax_methods read off the functions given (False: the class sets them)
    forms_from_functions: ClassVar[bool] = True
    # in-loop observation (dyn.user.observe): observe_state(t, x, <params>) -> values, named
    observe_state: ClassVar[Callable | None] = None
    observed: ClassVar[tuple] = ()
    # one source: drift (diffusion) written in numpy arithmetic, its JAX form derived
    # (dyn.user.one_source; an explicit drift_jax is used where given)
    one_source: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.forms_from_functions:
            return
        for attr in ("drift", "drift_jax", "diffusion", "diffusion_jax", "observe_state", "reference"):
            if inspect.isfunction(cls.__dict__.get(attr)):  # plain functions: not methods
                setattr(cls, attr, staticmethod(cls.__dict__[attr]))
        sde = _function(cls, "diffusion") is not None or _function(cls, "diffusion_jax") is not None
        if "equation" not in cls.__dict__:
            cls.equation = "sde" if sde else "ode"
        if "jax_methods" not in cls.__dict__:
            cls.jax_methods = (SDE_JAX if sde else ODE_JAX) if cls.has_form("jax") else frozenset()
        budget.declare(cls)  # a declared step_rate: dt = "auto", check_step (dyn.user.budget)

    # --- the parameter vector --------------------------------------------------------------
    @classmethod
    def parameters(cls) -> tuple[str, ...]:
        """The parameter names the vector field reads, in the order of the packed vector."""
        names = []
        for kind in ("drift", "diffusion"):
            for attr in (kind, f"{kind}_jax"):
                fn = _function(cls, attr)
                if fn is not None:
                    names += _arguments(cls, attr, fn, LEADING[kind])
        return tuple(dict.fromkeys(names))

    @classmethod
    def pack(cls, values, spec=None, run: int = 0) -> np.ndarray:
        """The flat float64 vector of the point's values (a mapping, e.g. a RunSpec's); array
        parameters after the numbers (:mod:`dyn.user.arrays`; `spec` draws their laws)."""
        return arrays.pack(cls.parameters(), cls.params, values, spec, run)[0]

    @classmethod
    def _at(cls, kind: str, attr: str) -> tuple[int, ...]:
        names = cls.parameters()
        return tuple(
            arrays.expression(cls.params.get(a), names.index(a))
            for a in _arguments(cls, attr, _function(cls, attr), LEADING[kind])
        )

    @classmethod
    def numba_function(cls, kind: str = "drift"):
        """The numba ABI function of `kind` ("drift" or "diffusion"), made once per process
        (compiled, or loaded from the cache of :mod:`dyn.user.cache`); None when the model has
        no numba form of it."""
        fn = _function(cls, kind)
        if fn is None:
            return None
        if (cls, kind) not in _COMPILED:
            from . import jit

            _COMPILED[cls, kind] = jit.abi(kind, fn, cls._at(kind, kind))
        return _COMPILED[cls, kind]

    @classmethod
    def jax_function(cls, kind: str = "drift", layout: tuple = ()):
        """The JAX twin ``(t, x, p[, dw])`` of `kind`; None when the model has no JAX form.
        `layout`: where p holds the point's arrays (:func:`dyn.user.arrays.pack`)."""
        fn = _function(cls, f"{kind}_jax")
        if fn is None and cls.one_source and _function(cls, kind) is not None:
            from . import one_source

            fn = _COMPILED.setdefault((cls, kind, "derived"), one_source.derive(_function(cls, kind)))
        if fn is None:
            return None
        if (cls, kind, "jax", layout) not in _COMPILED:  # one object: a batch's problems share it
            names = cls.parameters()
            readers = arrays.jax_readers(names, layout)
            at = [readers[names.index(a)] for a in _arguments(cls, f"{kind}_jax", fn, LEADING[kind])]
            if kind == "drift":
                made = lambda t, x, p: fn(t, x, *(r(p) for r in at))  # noqa: E731
            else:
                made = lambda t, x, p, dw: fn(t, x, dw, *(r(p) for r in at))  # noqa: E731
            _COMPILED[cls, kind, "jax", layout] = made
        return _COMPILED[cls, kind, "jax", layout]

    @classmethod
    def has_form(cls, form: str) -> bool:
        """Whether the model's field is written for `form`, "numba" or "jax"."""
        if form == "jax" and cls.one_source and _function(cls, "drift") is not None:
            return True
        return _function(cls, "drift" if form == "numba" else "drift_jax") is not None

    # --- what the engine calls -------------------------------------------------------------
    def noise_shape(self, spec, state: tuple[int, ...]) -> tuple[int, int]:
        """The shape of one Brownian increment dW (default: the state's, (n, d))."""
        return tuple(state)

    def problem(self, spec, state: tuple[int, ...] | None = None, run: int = 0):
        """The point's integrators.Problem (`state`: the shape (n, d) of one run's state;
        `run`: the run whose draws of array laws it holds, where they are drawn per run)."""
        import integrators

        cls = type(self)
        p, layout = arrays.pack(cls.parameters(), cls.params, spec.values, spec, run)
        noise = {}
        if self.equation == "sde":
            if state is None:
                state = np.shape(self.initial_state(spec.variant(salt=(1,)), 1))[1:]
            noise = dict(
                diffusion=cls.numba_function("diffusion"),
                diffusion_jax=cls.jax_function("diffusion", layout),
                noise_shape=tuple(self.noise_shape(spec, state)),
            )
        geometry = user_geometry.resolve(self.geometry)
        return integrators.Problem(
            cls.numba_function("drift"), cls.jax_function("drift", layout), p, geometry, work=cls.work_size, **noise
        )

    def simulate(self, spec, runs: range):
        if user_observe.observes(self):
            return user_observe.simulate(self, spec, runs)
        if arrays.per_run(self.params, spec.values):  # each run its own draw of the arrays
            return self._chunk(spec, *arrays.solve_per_run(self, spec, runs))
        module = type(self).__module__  # the hooks are named for a user's exit (core.stages)
        with stages.running(f"{module}.initial_state"):
            x0 = np.ascontiguousarray(self.initial_state(spec, len(runs)), dtype=np.float64)
        noise = {"rng": spec.rng} if self.equation == "sde" else {}
        with stages.running(f"{module}.drift"):
            solution = spec.solver.get().solve(self.problem(spec, x0.shape[1:]), x0, spec.times, **noise)
        return self._chunk(spec, solution.states, solution.status)

    def _chunk(self, spec, states, status):
        """The chunk `observe` makes of the solved states."""
        with stages.running(f"{type(self).__module__}.observe"):
            chunk = self.observe(spec, states)
        chunk.status = status  # runs cut short by max_steps are named, not averaged
        if chunk.carry is None:  # the runs' last states, where time averages continue them
            chunk.carry = user_observe.carry_of(self, spec, states)
        if chunk.states is None and self.trajectory_dims(spec.setup) is not None:
            chunk.states = states  # the model declares states: they are the solved ones
        return chunk

    def extend(self, spec, carry, times):
        """Continue the runs from their last states `carry` over `times` with the point's
        solver and stream (:func:`dyn.user.budget.extend`): time averages for every Model."""
        return budget.extend(self, spec, carry, times)

    def solves(self, spec):
        import integrators

        x0 = np.ascontiguousarray(self.initial_state(spec, spec.runs), dtype=np.float64)
        method = spec.solver.method
        key = spec.jax_key() if method in integrators.SDE_METHODS else None
        return Solve(method, spec.dt, self.problem(spec, x0.shape[1:]), x0, spec.times, key=key)

    def batch_key(self, spec) -> tuple:
        """Points that share the program: equal runs, step, method and every int, bool or
        string parameter (those that may set shapes)."""
        shaping = tuple(
            (k, spec[k]) for k, f in self.params.items() if f.kind in ("int", "bool", "str") and k in spec.values
        )
        return (spec.runs, spec.dt, spec.solver.method, shaping)

    def validate(self, spec) -> None:
        """The backend has the form of the field it needs; the field, called once at a start
        of the point, returns a finite array of the state's shape (else one line, naming the
        user's exception)."""
        backend = spec.solver.backend
        jax = backend in ("diffrax", "jax")
        budget.check(self, spec, arrays.per_run(self.params, spec.values))
        if backend != "numba" and arrays.per_run(self.params, spec.values):
            raise ScenarioError(
                "integrator.backend",
                'arrays drawn per run (draw = "run") are solved run by run on the numba backend: use backend numba',
            )
        name = f"{type(self).__name__}.{'drift_jax' if jax else 'drift'}"
        if not type(self).has_form("jax" if jax else "numba"):
            other = "numba" if jax else "diffrax or jax"
            raise ScenarioError(
                "integrator.backend",
                f"system {self.name} has no {name} (the {backend} backend runs it): use backend {other}",
            )
        self.parameters()  # every argument declared
        x = np.ascontiguousarray(self.initial_state(spec.variant(salt=(1,)), 1), dtype=np.float64)
        if x.ndim != 3:
            raise ScenarioError(
                "scenario.system",
                f"{type(self).__name__}.initial_state(spec, 1) returned shape {x.shape}; expected (runs, n, d)",
            )
        user_geometry.check(self.geometry, x[0], type(self).__name__, jax)
        got = _call(name, lambda: self._probe(jax, x[0], spec))
        if np.shape(got) != x.shape[1:]:
            raise ScenarioError(
                "scenario.system",
                f"{name} returned shape {np.shape(got)} for a "
                f"state of shape {x.shape[1:]}; it must return one of the state's shape",
            )
        if self.forms_from_functions and self.has_form("numba") and self.has_form("jax"):
            # the user wrote both forms (or one source): they must agree
            from . import one_source

            _call(f"{type(self).__name__}.drift (twin check)", lambda: one_source.check_twins(self, spec, x[0]))
        user_observe.check(self, spec)

    def run_bytes(self, spec) -> int:
        """With ``observe_state``: a run's memory in the loop, else its stored states
        (dyn.user.observe); 0 (unsized) for a model without it."""
        return user_observe.run_bytes(self, spec) if user_observe.observes(self) else 0

    def observe(self, spec, states):
        """With ``observe_state``: its values at the stored states (runs, times, n, d)."""
        if not user_observe.observes(self):
            raise NotImplementedError(f"{type(self).__name__} writes neither observe nor observe_state")
        return user_observe.chunk(self, spec, user_observe.values_of(self, spec, states))

    def _probe(self, jax: bool, x: np.ndarray, spec):
        p, layout = arrays.pack(self.parameters(), self.params, spec.values, spec)
        if jax:
            import integrators

            integrators.configure_jax()
            import jax.numpy as jnp

            return np.asarray(type(self).jax_function("drift", layout)(0.0, jnp.asarray(x), jnp.asarray(p)))
        return type(self)._probe_numba(x, p)

    @classmethod
    def _probe_numba(cls, x, p):
        """The user's numba drift at (0, x) with the parameters p, its shape unchecked."""
        drift = cls.numba_function("drift")
        bound = drift.py_func.__globals__["bound"]  # the user's function with p read by name
        value = np.asarray(bound(0.0, x, p))
        if value.shape == x.shape:  # the ABI function too: what the integrators will call
            drift(0.0, x, p, np.empty_like(x), np.empty(0))
        return value

    # --- the drift pair ----------------------------------------------------------------------
    @classmethod
    def twin_error(cls, x, t: float = 0.0, **values) -> float:
        """max |drift - drift_jax| at the state `x` (n, d), time t and the parameters `values`
        (defaults filled in): what the drift-pair check bounds (1e-12 relative)."""
        import integrators

        integrators.configure_jax()
        import jax.numpy as jnp

        values = {k: f.default for k, f in cls.params.items()} | values
        x = np.ascontiguousarray(x, dtype=np.float64)
        p, layout = arrays.pack(cls.parameters(), cls.params, values)
        want = np.empty_like(x)
        size = cls.work_size(*x.shape, p) if callable(cls.work_size) else cls.work_size
        cls.numba_function("drift")(float(t), x, p, want, np.empty(size))
        got = np.asarray(cls.jax_function("drift", layout)(float(t), jnp.asarray(x), jnp.asarray(p)))
        return float(np.abs(got - want).max())
