r"""Flows of parameters: :func:`gradient_flow`, a system from a loss.

The user writes a loss L(theta; data) in JAX over named array parameters theta = {name:
array} and the engine integrates, one run per draw of the start theta(0),

    plain:     d theta = -grad L(theta) dt                         (+ sqrt(2 T) dW: Langevin)
    momentum:  d theta = v dt,  d v = (-gamma v - grad L(theta)) dt (+ sqrt(2 gamma T) dW)

(the heavy ball; with noise, the underdamped Langevin dynamics, whose stationary law is
proportional to e^{-L / T} in theta). T is the parameter ``temperature``, gamma ``friction``.
The gradient is JAX's (``jax.grad``), so the system runs on the diffrax and jax backends, with
the engine's sweeps, seeds, resume and outputs: at every save time the loss, the Frobenius
norm of each parameter (``norm_<name>``) and the user's observables of theta, each a mean over
runs with its standard error.

The state of a run is the flat vector of theta (the parameters in the order of ``weights``,
each row-major), one row, with the velocity as a second row under momentum. The data a loss
reads are drawn once per point by ``data(spec, rng)`` from a stream of their own (the same in
every chunk of runs; ``spec.setup.common_rng`` gives data shared by all points); they travel in
the problem's parameter vector, so points with equal shapes share one compiled program. The
start theta(0) is ``init_scale`` times standard normal entries drawn from the point's stream in
run order, or the user's ``init(spec, runs) -> {name: (runs, *shape)}``.

A loss JAX cannot differentiate (it leaves JAX for numpy or Python numbers, returns a
non-scalar or an integer, or has a non-finite gradient at the start) is refused in one line
before anything is written (:meth:`validate`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..core.contract import INTEGRATOR_KEYS, Chunk, Output
from ..core.errors import ScenarioError
from ..core.schema import Field
from .model import Model

DATA_SALT = (11,)  # the data's stream: spec.variant(salt=DATA_SALT).rng
ODE_METHODS, SDE_METHODS = frozenset({"euler", "heun", "rk4"}), frozenset({"euler_maruyama"})
_GRADIENTS: dict = {}  # (class, shapes) -> the jitted gradient the start check evaluates
_PROGRAMS: dict = {}  # (class, data layout) -> (drift_jax, diffusion_jax): one object per shape


def gradient_flow(
    loss: Callable,
    *,
    name: str,
    weights: dict,
    description: str = "",
    data: Callable | None = None,
    params: dict | None = None,
    observables: dict | None = None,
    noise: bool = False,
    momentum: bool = False,
    init: Callable | None = None,
) -> type:
    """A :class:`dyn.Model` integrating the gradient flow of `loss` (module doc).

    - `loss(theta, data, <params>) -> scalar` (JAX): theta a dict {name: array of its shape};
      the arguments after (theta, data) are parameter names of `params`;
    - `weights`: {name: shape} of the parameters, each a tuple of ints (or a function of the
      point ``spec -> shape``: shapes set by int parameters);
    - `data(spec, rng) -> {name: array}` (numpy; None: no data), drawn per point;
    - `params`: the scenario parameters the loss and the data read, {name: dyn.Field};
    - `observables`: {name: fn} (JAX), each ``fn(theta) -> scalar``, or
      ``fn(theta, data, <params>) -> scalar`` to read the point's data and parameters as the
      loss does, recorded at save times;
    - `noise`: Langevin noise at temperature ``temperature``; `momentum`: the heavy ball with
      ``friction``; `init(spec, runs)`: the starts (default ``init_scale`` * N(0, 1)).

    Returns the Model class, named `name`, to set as a scenario's system. Raises TypeError when
    `loss` is not a function; a loss JAX cannot differentiate is refused when the scenario is
    checked (ScenarioError, one line).
    """
    if not callable(loss):
        raise TypeError("gradient_flow: loss must be a function (theta, data, <params>)")
    if not weights:
        raise TypeError("gradient_flow: weights must name at least one parameter and its shape")
    fields = dict(params or {})
    fields.setdefault("init_scale", Field("float", 1.0, "scale of the standard normal start", lo=0.0))
    if noise:
        fields.setdefault("temperature", Field("float", 0.01, "temperature T of the noise", lo=0.0))
    if momentum:
        fields.setdefault("friction", Field("float", 1.0, "friction gamma of the heavy ball", lo=0.0))
    sde = bool(noise)
    body = dict(
        name=name,
        description=description or f"gradient flow of {name}'s loss",
        default_plot="loss",
        params=fields,
        loss=staticmethod(loss),
        weights=dict(weights),
        data_fn=staticmethod(data) if data else None,
        observables=dict(observables or {}),
        noisy=bool(noise),
        momentum=bool(momentum),
        init_fn=staticmethod(init) if init else None,
        equation="sde" if sde else "ode",
        jax_methods=SDE_METHODS if sde else ODE_METHODS,
        __module__=getattr(loss, "__module__", __name__),
        __qualname__=name,
    )
    return type(name, (GradientFlow,), body)


class GradientFlow(Model):
    """The system :func:`gradient_flow` makes (module doc); its class data are the builder's."""

    forms_from_functions: ClassVar[bool] = False
    integrator = INTEGRATOR_KEYS
    loss: ClassVar[Callable]
    weights: ClassVar[dict] = {}
    data_fn: ClassVar[Callable | None] = None
    observables: ClassVar[dict] = {}
    noisy: ClassVar[bool] = False
    momentum: ClassVar[bool] = False
    init_fn: ClassVar[Callable | None] = None

    @classmethod
    def has_form(cls, form: str) -> bool:
        """The flow's field is JAX's gradient of the loss: the JAX form only."""
        return form == "jax"

    # --- layout ------------------------------------------------------------------------------
    def shapes(self, spec) -> dict[str, tuple[int, ...]]:
        """{name: shape} of the parameters at this point."""
        found = {}
        for key, shape in self.weights.items():
            shape = shape(spec) if callable(shape) else shape
            found[key] = tuple(int(s) for s in np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
        return found

    def loss_parameters(self) -> tuple[str, ...]:
        names = list(inspect.signature(self.loss).parameters)[2:]
        for key in names:
            if key not in self.params:
                raise ScenarioError(
                    "scenario.system",
                    f"{type(self).__name__}: the loss takes {key!r}, which is not a parameter of params",
                )
        return tuple(names)

    def observable_parameters(self, key: str) -> tuple[str, ...] | None:
        """The parameter names observable `key` reads after (theta, data), or None when it
        takes theta alone."""
        names = list(inspect.signature(self.observables[key]).parameters)
        if len(names) == 1:
            return None
        for name in names[2:]:
            if name not in self.params:
                raise ScenarioError(
                    "scenario.system",
                    f"{type(self).__name__}: observable {key} takes {name!r}, which is not a parameter of params",
                )
        return tuple(names[2:])

    def _observable(self, key, spec, data, shapes):
        """Observable `key` as a function of a flat theta, its data and parameters bound."""
        fn, names = self.observables[key], self.observable_parameters(key)
        if names is None:
            return lambda th: fn(self.unflatten(th, shapes))
        import jax.numpy as jnp

        bound = ({k: jnp.asarray(v) for k, v in data.items()},) + tuple(spec[k] for k in names)
        return lambda th: fn(self.unflatten(th, shapes), *bound)

    def data(self, spec) -> dict[str, np.ndarray]:
        if self.data_fn is None:
            return {}
        made = self.data_fn(spec, spec.variant(salt=DATA_SALT).rng)
        return {k: np.asarray(v, dtype=np.float64) for k, v in dict(made).items()}

    def vector(self, spec, data) -> np.ndarray:
        """The problem's parameter vector: the loss's parameters, T, gamma, then the data."""
        head = [float(spec[k]) for k in self.loss_parameters()]
        head += [float(spec["temperature"]) if self.noisy else 0.0, float(spec["friction"]) if self.momentum else 0.0]
        return np.concatenate([np.array(head)] + [v.reshape(-1) for v in data.values()])

    def unflatten(self, flat, shapes):
        """{name: array} of a flat theta (JAX or numpy), in the order of `shapes`."""
        out, at = {}, 0
        for key, shape in shapes.items():
            size = int(np.prod(shape, dtype=np.int64))
            out[key] = flat[at : at + size].reshape(shape)
            at += size
        return out

    def programs(self, spec, data):
        """(drift_jax, diffusion_jax) for this layout, one object per (class, shapes)."""
        cls = type(self)
        shapes = self.shapes(spec)
        layout = (tuple(shapes.items()), tuple((k, v.shape) for k, v in data.items()))
        if (cls, layout) in _PROGRAMS:
            return _PROGRAMS[cls, layout]
        import jax
        import jax.numpy as jnp

        heads = len(self.loss_parameters())
        grad = jax.grad(self._flat_loss(shapes, dict(layout[1]), heads))
        momentum = self.momentum

        def drift(t, x, p):
            g = grad(x[0], p)
            if not momentum:
                return -g[None, :]
            return jnp.stack([x[1], -p[heads + 1] * x[1] - g])

        def diffusion(t, x, p, dw):
            if not momentum:
                return jnp.sqrt(2.0 * p[heads]) * dw
            scale = jnp.sqrt(2.0 * p[heads + 1] * p[heads])
            return jnp.stack([jnp.zeros_like(dw[0]), scale * dw[1]])

        _PROGRAMS[cls, layout] = (drift, diffusion if self.noisy else None)
        return _PROGRAMS[cls, layout]

    def _flat_loss(self, shapes, data_shapes, heads):
        """L as a function of (flat theta, p): the data read back from p after the heads."""
        loss = self.loss

        def flat_loss(theta, p):
            at, data = heads + 2, {}
            for key, shape in data_shapes.items():
                size = int(np.prod(shape, dtype=np.int64))
                data[key] = p[at : at + size].reshape(shape)
                at += size
            return loss(self.unflatten(theta, shapes), data, *(p[i] for i in range(heads)))

        return flat_loss

    # --- what the engine calls ---------------------------------------------------------------
    def problem(self, spec, state=None):
        import integrators

        integrators.configure_jax()
        data = self.data(spec)
        drift, diffusion = self.programs(spec, data)
        rows = 2 if self.momentum else 1
        size = sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes(spec).values())
        noise = dict(diffusion_jax=diffusion, noise_shape=(rows, size)) if self.noisy else {}
        return integrators.Problem(None, drift, self.vector(spec, data), integrators.EUCLIDEAN, **noise)

    def initial_state(self, spec, runs):
        shapes = self.shapes(spec)
        if self.init_fn is not None:
            made = self.init_fn(spec, runs)
            theta = np.concatenate([np.asarray(made[k], dtype=np.float64).reshape(runs, -1) for k in shapes], axis=1)
        else:
            size = sum(int(np.prod(s, dtype=np.int64)) for s in shapes.values())
            theta = float(spec["init_scale"]) * spec.rng.standard_normal((runs, size))
        rows = [theta[:, None, :]]
        if self.momentum:
            rows.append(np.zeros_like(rows[0]))  # at rest
        return np.concatenate(rows, axis=1)

    def outputs(self, setup):
        outs = [Output("loss", "loss L(theta) (mean over runs)", dims=("time",))]
        outs += [Output(f"norm_{k}", f"Frobenius norm of {k} (mean over runs)", dims=("time",)) for k in self.weights]
        outs += [Output(k, f"observable {k} of theta (mean over runs)", dims=("time",)) for k in self.observables]
        return outs

    def observe(self, spec, states):
        import jax
        import jax.numpy as jnp

        states = np.asarray(states)
        runs, times = states.shape[:2]
        shapes = self.shapes(spec)
        data = self.data(spec)
        p = jnp.asarray(self.vector(spec, data))
        flat_loss = self._flat_loss(shapes, {k: v.shape for k, v in data.items()}, len(self.loss_parameters()))
        theta = jnp.asarray(states[:, :, 0, :].reshape(runs * times, -1))
        values = {"loss": jax.vmap(lambda th: flat_loss(th, p))(theta)}
        for key in shapes:
            values[f"norm_{key}"] = jax.vmap(
                lambda th, key=key: jnp.sqrt(jnp.sum(self.unflatten(th, shapes)[key] ** 2))
            )(theta)
        for key in self.observables:
            values[key] = jax.vmap(self._observable(key, spec, data, shapes))(theta)
        values = {k: np.array(v, dtype=np.float64).reshape(runs, times) for k, v in values.items()}
        return Chunk(
            values,
            finite=np.isfinite(states).all(axis=(1, 2, 3)),
            states=states if self.trajectory_dims(spec.setup) is not None else None,
        )

    def trajectory_dims(self, setup):
        """With ``[output] trajectories = true``: the state, rows (theta[, v]) by the flat
        entries of theta (fixed shapes only: a shape set by a parameter saves none)."""
        if any(callable(s) for s in self.weights.values()):
            return None
        size = sum(int(np.prod(s, dtype=np.int64)) for s in self.weights.values())
        return {"row": 2 if self.momentum else 1, "entry": size}

    def run_bytes(self, spec) -> int:
        return 0

    def validate(self, spec) -> None:
        """The backend is a JAX one; the loss is a finite scalar whose JAX gradient at a start
        is finite (else one line, naming the user's exception)."""
        backend = spec.solver.backend
        if backend not in ("diffrax", "jax"):
            raise ScenarioError(
                "integrator.backend",
                f"system {self.name} differentiates its loss with JAX: use backend diffrax or jax, not {backend}",
            )
        import integrators

        integrators.configure_jax()
        import jax
        import jax.numpy as jnp

        data = self.data(spec)
        x0 = self.initial_state(spec.variant(salt=(1,)), 1)[0]
        p = jnp.asarray(self.vector(spec, data))
        flat_loss = self._flat_loss(
            self.shapes(spec), {k: v.shape for k, v in data.items()}, len(self.loss_parameters())
        )
        where = f"the loss of {self.name}"
        theta0 = jnp.asarray(x0[0])
        try:
            # shapes by abstract evaluation (traced, not compiled); the gradient's values by one
            # compiled program rather than op by op
            value = jax.eval_shape(flat_loss, theta0, p)
            if len(value.shape) != 0:
                raise ScenarioError("scenario.system", f"{where} returned shape {value.shape}; it must return a scalar")
            key = (
                type(self),
                tuple(self.shapes(spec).items()),
                tuple((k, v.shape) for k, v in data.items()),
                len(self.loss_parameters()),
            )
            if key not in _GRADIENTS:  # one compiled gradient per class and shapes
                _GRADIENTS[key] = jax.jit(jax.grad(flat_loss))
            grad = np.asarray(_GRADIENTS[key](theta0, p))
            for key in self.observables:
                observable = self._observable(key, spec, data, self.shapes(spec))
                shape = jax.eval_shape(observable, theta0).shape
                if len(shape) != 0:
                    raise ScenarioError("scenario.system", f"observable {key} of {self.name} must return a scalar")
        except ScenarioError:
            raise
        except Exception as exc:
            text = " / ".join(t.strip() for t in str(exc).splitlines() if t.strip())
            raise ScenarioError(
                "scenario.system",
                f"{where} is not differentiable by JAX at the start: {type(exc).__name__}: {text[:300]}",
            ) from None
        if not np.isfinite(grad).all():
            raise ScenarioError("scenario.system", f"{where} has a non-finite gradient at the start")
