"""Name -> integrator class, per backend:  get(backend, method, **options)."""

from .diffrax import sde as diffrax_sde, solvers as diffrax_solvers
from .jax import batch as jax_batch
from .numba import adaptive as numba_adaptive, fixed as numba_fixed, sde as numba_sde, sde_heun as numba_sde_heun

BACKENDS = {
    "numba": {**numba_fixed.METHODS, **numba_adaptive.METHODS, **numba_sde.METHODS, **numba_sde_heun.METHODS},
    "diffrax": {**diffrax_solvers.METHODS, **diffrax_sde.METHODS},
    "jax": jax_batch.METHODS,  # also a batch of points: solve(problem, x0 (P, R, n, d), ts, rng=keys)
}
# Methods that solve SDEs (their solve() takes rng= or increments=; on the jax backend rng is a
# JAX key; see integrators.core.base and integrators.jax.batch).
SDE_METHODS = frozenset(m for methods in BACKENDS.values() for m, cls in methods.items() if cls.stochastic)


def available() -> dict[str, list[str]]:
    """{backend: [method, ...]} of every registered integrator."""
    return {backend: sorted(methods) for backend, methods in BACKENDS.items()}


def options(backend: str, method: str) -> dict:
    """The options (name -> default) that ``get(backend, method, ...)`` accepts."""
    return dict(_lookup(backend, method).OPTIONS)


def _lookup(backend: str, method: str):
    if backend not in BACKENDS:
        raise ValueError(f"unknown integrator backend {backend!r}; allowed: {sorted(BACKENDS)}")
    methods = BACKENDS[backend]
    if method not in methods:
        raise ValueError(f"unknown method {method!r} for backend {backend!r}; allowed: {sorted(methods)}")
    return methods[method]


def get(backend: str, method: str, **opts):
    """An integrator instance; unknown backend, method or option raises ValueError naming what
    is allowed."""
    return _lookup(backend, method)(**opts)
