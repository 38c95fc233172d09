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
families go to the least loaded share, largest first. A family that costs more than one share's
fair part is dealt kernel by kernel, level by level up its call graph (:func:`units`), so that a
kernel mostly finds the callees another share compiled in the cache. Share i compiles its
pieces, or loads them from numba's cache; the other processes then find them there.
``dyn compile`` runs every share at once (:func:`compile_all`, instead of each sweep paying for
its own on its first run); a test session runs one share in each pytest-xdist worker before its
first test. `dyn compile`'s workers die with it
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
    """The kernels grouped into families (see the module doc), costliest first, each family's
    kernels cheapest first (:func:`integrators.numba.jit.ensure` makes a kernel's callees before
    it, whatever the order); and the cost of each family."""
    groups, costs = _families(kernels)
    return groups, [sum(costs[id(k)] for k in g) for g in groups]


def _families(kernels) -> tuple[list[list], dict[int, float]]:
    """The families (as :func:`families`) and the cost of each kernel, by its id."""
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
    return [[known[i] for i in sorted(g, key=lambda i: cost[i])] for g in ordered], cost


def units(kernels, shares: int) -> list[tuple[list, float, int]]:
    """The pieces dealt to `shares` processes: (kernels, cost, level). A family is one piece at
    level 0, except a family that costs more than a share's fair part (the total over
    `shares`): its kernels then go one by one, each at its height in the family's call graph (a
    kernel that calls none of the family is at 0, a caller one above its highest callee). Pieces
    are dealt and compiled level by level, so a kernel compiled away from its callees mostly
    finds them in numba's cache, made by the other share on the level below."""
    groups, cost = _families(kernels)
    fair = sum(cost.values()) / shares
    found = []
    for group in groups:
        total = sum(cost[id(k)] for k in group)
        if shares == 1 or total <= fair:
            found.append((group, total, 0))
            continue
        height = heights(group)
        found += [([k], cost[id(k)], height[id(k)]) for k in group]
    return found


def heights(group) -> dict[int, int]:
    """Each kernel's height in `group`'s call graph, by its id: 0 for one that calls none of the
    group, else one above its highest callee (the graph has no cycle: jit.compiled refuses
    one)."""
    from integrators.numba.jit import callees

    members = {id(k) for k in group}
    height: dict[int, int] = {}

    def up(kernel) -> int:
        if id(kernel) not in height:
            below = [up(c) for c in callees(kernel) if id(c) in members]
            height[id(kernel)] = 1 + max(below) if below else 0
        return height[id(kernel)]

    for kernel in group:
        up(kernel)
    return height


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

    load = [0.0] * shares
    mine = []
    # level by level, largest first within a level (see units)
    for group, cost, _ in sorted(units(declared_kernels(), shares), key=lambda u: (u[2], -u[1])):
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
        with ProcessPoolExecutor(
            workers, mp_context=get_context("spawn"), initializer=_init_worker, initargs=(os.getpid(),)
        ) as pool:
            count = sum(c for c, _ in pool.map(compile_share, range(workers), [workers] * workers))
    return count, time.perf_counter() - start
