"""A cold kernel tree compiles on two processes: the first run of a sweep waits less.

numba compiles in one thread, under one lock: on a cold cache the first solve of a sweep
compiles the whole tree of declared kernels under its stepping kernel, its drift and its
geometry (the attention field's regimes and their helpers, the scheme above them: about 10 s
for this project's main job), and then the observation's, one after the other, while the other
core idles. Independent subtrees can compile apart, though: each lands in numba's cache, where
the other process finds it.

So where a tree's top is first needed (:func:`integrators.jit.compile_ahead`, which the numba
integrators call with their stepping kernel and the functions they pass it, together with any
kernel a system said it will need soon; or any kernel's first need), and the uncached part of
the trees is large:

1. a set ``H`` of subtrees goes to a helper process, ``C`` = every pending kernel they reach;
2. this process compiles, first, the kernels of ``C`` that its own share reaches too (shared
   leaves such as the vectorised exp), so that both processes use one compiled copy of each
   (a kernel's compiled name differs between processes, and a caller names its callees);
3. the helper starts, loads those from the cache and compiles the rest of ``C``; meanwhile this
   process compiles every pending kernel that neither lies in ``C`` nor reaches it;
4. when the helper is done, the ordinary ensure loads ``C`` from the cache and compiles what is
   left: the kernels that call into ``C``, up to the roots.

``H`` is chosen greedily to minimise the estimated wait (source length as the cost of a
kernel, plus fixed costs per kernel and for starting the helper), among the subtrees whose
kernels all live in a package's submodules: the helper imports their modules, never a script.
The numbers are unchanged: every kernel is compiled once from the same source, and loading it
from the cache gives the same code (the fingerprints of the shipped scenarios are equal). Where
the helper fails, this process compiles what is missing itself. ``DYN_COMPILE_JOBS=1`` turns
the split off; so do a single core, pool workers (they fill the cores already) and
:mod:`dyn.engine.warmup`'s shares. The helper dies with this process
(:func:`integrators.lifetime.die_with`): a killed run leaves no compile behind.
"""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
from dataclasses import dataclass

HELPER_ENV = "DYN_COMPILE_HELPER"  # set in the helper, to its parent's pid: it never splits again
JOBS_ENV = "DYN_COMPILE_JOBS"
# Costs in characters of source (a kernel's compile time grows with its source)
PER_KERNEL = 300  # numba's own work per kernel, whatever its size
MIN_SPLIT = 12000  # uncached cost below which the trees compile in one process
HELPER_START = 3000  # a helper's start (interpreter, numba, the kernels' modules: about 1 s)
HELPER = ("import sys; from integrators.split_compile import helper_main; "
          "sys.exit(helper_main(sys.argv[1:]))")
HELPER_TIMEOUT = 900.0  # seconds; past it the helper is stopped and this process goes on alone


def enabled() -> bool:
    """Whether cold trees may be split (not in a helper, more than one core, not turned off)."""
    if os.environ.get(HELPER_ENV):
        return False
    jobs = os.environ.get(JOBS_ENV, "").strip()
    return (int(jobs) if jobs.isdigit() else os.cpu_count() or 1) >= 2


def cost(kernel) -> int:
    """What compiling `kernel` costs, in characters of its source (a rough, stable measure)."""
    found = getattr(kernel, "_source_cost", None)
    if found is None:
        try:
            found = len(inspect.getsource(kernel.py_func))
        except (OSError, TypeError):
            found = 1000
        kernel._source_cost = found
    return found


def _cache_file(kernel):
    """numba's cache file of `kernel` (None when numba does not cache it)."""
    return getattr(getattr(kernel, "_cache", None), "_cache_file", None)


def cached(kernel) -> bool:
    """Whether numba's cache holds `kernel` for every declared signature (read from the cache
    index alone: nothing is loaded)."""
    if _cache_file(kernel) is None:
        return False
    try:
        index = _cache_file(kernel)._load_index()
        codegen = kernel.targetctx.codegen()
        return all(kernel._cache._index_key(sig, codegen) in index for sig in kernel._declared)
    except Exception:  # an unreadable index is a miss
        return False


@dataclass(frozen=True)
class Plan:
    """Which pending kernels go where (the module doc's steps 2 and 3)."""

    first: list  # compiled here before the helper starts (the part of C this process reaches)
    helper: list  # compiled by the helper (C minus first)
    alongside: list  # compiled here while the helper runs
    wait: float  # the estimated wait, in cost units (the kernels left compile after it)


def plan(roots, callees, pending) -> Plan | None:
    """The split of the pending trees of `roots` (kernels compiled together), or None where
    one process is as quick. `callees(k)`: the declared kernels k calls; `pending(k)`: whether
    k still has to be ensured (not yet loaded in this process)."""
    tree, todo = {}, list(roots)
    while todo:
        k = todo.pop()
        if id(k) not in tree and pending(k):
            tree[id(k)] = k
            todo.extend(callees(k))
    price = {i: PER_KERNEL + cost(tree[i]) for i in tree}
    if sum(price.values()) < MIN_SPLIT:  # small even if all cold: no cache index read
        return None
    if not all(_cache_file(k) for k in tree.values()):
        return None  # a kernel numba does not cache: the helper's work would not reach here
    calls = {i: {id(c) for c in callees(k) if id(c) in tree} for i, k in tree.items()}
    cold = {i for i, k in tree.items() if not cached(k)}

    def total(ids):
        return sum(price[i] for i in ids & cold)

    if total(set(tree)) < MIN_SPLIT:
        return None

    def reach(starts):
        seen, todo = set(), list(starts)
        while todo:
            i = todo.pop()
            if i not in seen:
                seen.add(i)
                todo.extend(calls[i])
        return seen

    below = {i: reach([i]) for i in tree}

    def split(heads):
        share = set().union(*(below[i] for i in heads))
        above = {i for i in tree if i not in share and below[i] & heads}
        alongside = set(tree) - share - above
        first = share & reach(alongside)
        wait = (total(first) + max(total(alongside), HELPER_START + total(share - first))
                + total(above))
        return wait, first, share - first, alongside

    # the helper imports each kernel's module: only a package's submodules, never a script's
    movable = {i for i, k in tree.items() if "." in k.py_func.__module__}
    best, heads = (total(set(tree)), None, None, None), set()
    while True:  # add the head that shortens the wait most, while one does
        trials = [(split(heads | {i}), i) for i in cold - heads if below[i] <= movable]
        trial, head = min(trials, key=lambda t: t[0][0], default=((best[0],), None))
        if head is None or trial[0] >= best[0]:
            break
        best, heads = trial, heads | {head}
    wait, first, helper, alongside = best
    if not helper:
        return None
    pick = lambda ids: [k for i, k in tree.items() if i in ids]  # noqa: E731 (ensure orders)
    return Plan(pick(first), pick(helper), pick(alongside), wait)


def name_of(kernel) -> str:
    return f"{kernel.py_func.__module__}:{kernel.py_func.__qualname__}"


def start_helper(kernels) -> subprocess.Popen | None:
    """A process that compiles `kernels` into numba's cache (see :func:`helper_main`)."""
    env = {**os.environ, HELPER_ENV: str(os.getpid()),
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        return subprocess.Popen([sys.executable, "-c", HELPER, *map(name_of, kernels)], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:
        return None


def finish(helper: subprocess.Popen | None, wait: bool = True) -> None:
    """Wait for the helper (up to HELPER_TIMEOUT), or with ``wait=False`` stop it; an
    interrupt while waiting stops it too."""
    if helper is None:
        return
    try:
        if wait:
            helper.wait(timeout=HELPER_TIMEOUT)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if helper.poll() is None:
            helper.kill()
            helper.wait()


def helper_main(names: list[str]) -> int:
    """Compile (or load) the declared kernels named ``module:qualname``, callees first as
    always; a name not found is skipped (the parent compiles it). Dies with its parent."""
    import importlib

    from . import called_kernels
    from .lifetime import die_with

    parent = os.environ.get(HELPER_ENV, "")
    if parent.isdigit():  # started by start_helper
        die_with(int(parent))

    for name in names:
        importlib.import_module(name.partition(":")[0])
    for name in names:
        called_kernels.load_by_name(name.replace(":", ".", 1))  # set by integrators.jit
    return 0

