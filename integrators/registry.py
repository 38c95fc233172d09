"""Name -> integrator class, per backend:  get(backend, method, **options)."""

from . import diffrax_solvers, jax_batch, numba_adaptive, numba_fixed, sde_diffrax, sde_numba

BACKENDS = {
    "numba": {**numba_fixed.METHODS, **numba_adaptive.METHODS, **sde_numba.METHODS},
    "diffrax": {**diffrax_solvers.METHODS, **sde_diffrax.METHODS},
    "jax": jax_batch.METHODS,  # batches of points: solve(problem, x0 (P, R, n, d), ts, keys=...)
}
# Methods that solve SDEs (their solve() takes rng= or increments=, on the jax backend keys=
# or increments=; see integrators.base and integrators.jax_batch).
SDE_METHODS = frozenset(m for methods in BACKENDS.values() for m, cls in methods.items()
                        if cls.stochastic)


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
        raise ValueError(
            f"unknown method {method!r} for backend {backend!r}; allowed: {sorted(methods)}"
        )
    return methods[method]


def get(backend: str, method: str, **opts):
    """An integrator instance; unknown backend, method or option raises ValueError naming what
    is allowed."""
    return _lookup(backend, method)(**opts)
