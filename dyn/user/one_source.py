r"""One source for numba and JAX: a model function written once in numpy arithmetic, its JAX
form derived by the engine.

A :class:`dyn.Model` with ``one_source = True`` writes ``drift`` (and ``diffusion``) once; numba
compiles it for the numba backend, and :func:`derive` makes the JAX form for the diffrax and
jax backends: the same code object run with the module's ``numpy`` (whatever name it is bound
to) replaced by ``jax.numpy``, and each plain function of the same module it calls derived the
same way. What one source may use, so that the two readings agree:

- ``np.<function>`` that jax.numpy has with the same meaning (``np.exp``, ``np.tanh``,
  ``np.where``, ``np.sum(..., axis=)``, ``np.sqrt``, ...), the operators (``@``, ``*``, ``**``),
  ``x.shape``, ``x.T``;
- loops over Python ranges of static sizes (shapes, not values);
- no item assignment (``out[i] = ...``), no ``np.empty``: build arrays from expressions;
  no ``import numpy`` inside the function (the module's global is what is rebound);
- no branching on values (``if s > 0``): ``np.where``.

A function that cannot keep to these keeps an explicit twin, ``drift_jax``. Wherever a model has
both forms (derived or written) the engine checks, on the start state of the first point it
validates, that they agree to 1e-12 relative (:func:`check_twins`).
"""

from __future__ import annotations

import types

import numpy as np

from ..core.errors import ScenarioError

TWIN_TOL = 1e-12
_CHECKED: set = set()  # (class, layout): the twin check passed in this process


def derive(fn, _made: dict | None = None):
    """The JAX form of the numpy function `fn` (module doc); a numba dispatcher's Python
    function is the one derived."""
    import jax.numpy as jnp

    made = {} if _made is None else _made
    py = getattr(fn, "py_func", fn)
    if py in made:
        return made[py]
    scope = dict(py.__globals__)
    new = types.FunctionType(py.__code__, scope, py.__name__, py.__defaults__, py.__closure__)
    made[py] = new
    for name, value in py.__globals__.items():
        if value is np:
            scope[name] = jnp
        else:
            inner = getattr(value, "py_func", value)
            if isinstance(inner, types.FunctionType) and inner.__module__ == py.__module__:
                scope[name] = derive(inner, made)
    return new


def check_twins(model, spec, x) -> None:
    """The model's numba and JAX drifts agree at the state x (n, d) and the point's values to
    TWIN_TOL relative to the drift's largest entry (once per class and layout per process);
    one line otherwise."""
    from . import arrays

    cls = type(model)
    p, layout = arrays.pack(cls.parameters(), cls.params, spec.values, spec)
    if (cls, layout) in _CHECKED:
        return
    import integrators

    integrators.configure_jax()
    import jax.numpy as jnp

    want = np.empty_like(x)
    size = cls.work_size(*x.shape, p) if callable(cls.work_size) else cls.work_size
    cls.numba_function("drift")(0.0, x, p, want, np.empty(size))
    got = np.asarray(cls.jax_function("drift", layout)(0.0, jnp.asarray(x), jnp.asarray(p)))
    error = float(np.abs(got - want).max()) if got.shape == want.shape else np.inf
    scale = max(float(np.abs(want).max()), np.finfo(float).tiny)
    if not error <= TWIN_TOL * scale:
        form = "drift_jax" if getattr(cls, "drift_jax", None) is not None else "JAX form derived from it (one_source)"
        raise ScenarioError(
            "scenario.system",
            f"{cls.__name__}.drift and its {form} differ by "
            f"{error:.3g} (relative {error / scale:.3g} > {TWIN_TOL:g}) at the "
            "start state: the two forms must compute the same field",
        )
    _CHECKED.add((cls, layout))
