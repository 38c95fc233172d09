r"""Compile numba's kernels ahead of use, split over processes so that none is compiled twice.

A kernel needs every kernel it calls compiled (or loaded) before it: numba types the calls
against them, and numba links their code into the caller and optimizes it again
(:mod:`integrators.numba.jit`). Two processes that start on a cold cache and both need the attention
field therefore both pay for its whole tree (the field, its three regimes and their helpers), which is what a
test session on two cores did.

This module deals the declared kernels (:func:`integrators.numba.jit.declared_kernels`) to `shares`
processes by *family*: kernels joined by calls are one family, except that a kernel which calls
no other and is called from several modules (a shared leaf such as the vectorised exp) joins
none. A family costs about the sum, over its kernels, of the source each one compiles (its own,
plus a quarter of everything below it, which it optimizes again);
families go to the least loaded share, largest first. Share i compiles its families, or loads
them from numba's cache; the other processes then find them there. ``dyn compile`` runs every
share at once (:func:`compile_all`, instead of each
sweep paying for its own on its first run); a test session runs one share in each pytest-xdist
worker before its first test. `dyn compile`'s workers die with it
(:func:`dyn.engine.lifetime.die_with`): a killed command leaves none compiling.
"""
from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from .lifetime import die_with

RELINK = 0.25  # cost of re-optimizing a linked callee's code in a caller, per unit of its own


def import_kernel_modules() -> None:
    """Import every module that declares kernels: the model packages, the systems, the engine's
    sums over runs, and the numba integrators (not the JAX ones: they declare none, and importing
    JAX costs seconds)."""
    from ..core.dynamics import registered
    from ..systems import names
    from . import runsums  # noqa: F401 - every sweep's reductions call its kernels

    registered()
    names()
    import integrators.numba

    for module in pkgutil.iter_modules(integrators.numba.__path__):
        importlib.import_module(f"integrators.numba.{module.name}")


def families(kernels) -> tuple[list[list], list[float]]:
    """The kernels grouped into families (see the module doc), costliest first, each with its
    callers after its callees; and the cost of each family."""
    from integrators.numba.jit import callees

    known = {id(k): k for k in kernels}
    calls = {i: {id(c) for c in callees(k) if id(c) in known} for i, k in known.items()}
    modules: dict[int, set[str]] = {i: set() for i in known}
    for i, targets in calls.items():
        for j in targets:
            modules[j].add(known[i].py_func.__module__)
    shared = {i for i in known if not calls[i] and len(modules[i]) > 1}

    root = {i: i for i in known}

    def find(i):
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    for i, targets in calls.items():
        for j in targets - shared:
            root[find(i)] = find(j)
    size = {i: source_cost(k) for i, k in known.items()}  # characters of source

    def below(i, seen):  # i and every kernel it reaches, once each
        if i not in seen:
            seen.add(i)
            for j in calls[i]:
                below(j, seen)
        return seen

    # linked code is optimized again in each caller, at about a quarter of its first cost
    cost = {i: size[i] + RELINK * sum(size[j] for j in below(i, set()) - {i}) for i in known}
    groups: dict[int, list[int]] = {}
    for i in known:
        groups.setdefault(find(i), []).append(i)
    ordered = sorted(groups.values(), key=lambda g: -sum(cost[i] for i in g))
    return [[known[i] for i in sorted(g, key=lambda i: cost[i])] for g in ordered], \
        [sum(cost[i] for i in g) for g in ordered]


def source_cost(kernel) -> int:
    """What compiling `kernel` costs, in characters of its source (a rough, stable measure: a
    kernel's compile time grows with its source)."""
    try:
        return len(inspect.getsource(kernel.py_func))
    except (OSError, TypeError):
        return 1000


def share_of(index: int, shares: int) -> list:
    """The kernels share `index` of `shares` compiles: families dealt largest first to the share
    with the least cost so far (the same deal in every process: it depends on the source only)."""
    if not 0 <= index < shares:
        raise ValueError(f"share index must lie in [0, {shares}), got {index}")
    import_kernel_modules()
    from integrators.numba.jit import declared_kernels

    groups, costs = families(declared_kernels())
    load = [0] * shares
    mine = []
    for group, cost in zip(groups, costs, strict=True):
        target = load.index(min(load))
        load[target] += cost
        if target == index:
            mine.extend(group)
    return mine


def compile_share(index: int, shares: int) -> tuple[int, float]:
    """Compile (or load from numba's cache) the kernels of share `index` of `shares`; returns
    how many and the seconds it took."""
    from integrators.numba.jit import ensure

    start = time.perf_counter()
    kernels = share_of(index, shares)
    for kernel in kernels:
        ensure(kernel)
    return len(kernels), time.perf_counter() - start


def _init_worker(driver: int) -> None:
    # in each of compile_all's workers, before its share
    die_with(driver)


def compile_all(workers: int | None = None) -> tuple[int, float]:
    """Compile every declared kernel into numba's cache with `workers` processes (default: one
    per core); returns the number of kernels and the seconds it took."""
    workers = workers or os.cpu_count() or 1
    start = time.perf_counter()
    if workers == 1:
        count, _ = compile_share(0, 1)
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn"),
                                 initializer=_init_worker, initargs=(os.getpid(),)) as pool:
            count = sum(c for c, _ in pool.map(compile_share, range(workers), [workers] * workers))
    return count, time.perf_counter() - start
