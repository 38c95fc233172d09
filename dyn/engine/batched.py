"""The `jax` backend (`[integrator] backend = "jax"`): a sweep run in batches of points, each
batch one jitted, vmapped JAX computation on the default JAX device (a GPU when there is one).

    pending points -> groups of equal System.batch_key -> batches sized to the device memory
                   -> per point System.solves: Solves (problem, starts, save times, key)
                   -> per name, one integrators.get("jax", method, dt=...).solve of the
                      batch's stacked Solves (one program per shape, parameters traced)
                   -> per point System.observe -> the engine's reductions -> the single writer

Points are written one by one as their batch finishes; resume works at point granularity (a
killed run loses the batch in flight, whose points are pending). A point's random numbers come
from its own key (RunSpec.jax_key: the point's seed sequence), so a run is reproducible on the
same device; across devices (CPU against GPU) and against the numba backend the numbers agree in
law, not bit for bit (other generators, other rounding).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator, Sequence
from dataclasses import replace
from itertools import groupby
from pathlib import Path

import numpy as np

from ..core.contract import FAILED, Chunk, PointResult, Solve
from ..core.errors import one_line
from . import ensemble, trajectories

DEVICE_FRACTION = 0.5  # of the device memory a batch may fill
HOST_BUDGET = 2 * 2**30  # on a device that reports no memory (the CPU)


def device_budget() -> int:
    """Bytes a batch may use on the default JAX device."""
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    limit = stats.get("bytes_limit")
    return int(limit * DEVICE_FRACTION) if limit else HOST_BUDGET


def batches(system, specs: Sequence, budget: int) -> list[list]:
    """Specs grouped by batch key (in order), each group cut to fit `budget` bytes."""
    out = []
    keyed = sorted(specs, key=lambda s: (repr(system.batch_key(s)), s.index))
    for _, group in groupby(keyed, key=lambda s: repr(system.batch_key(s))):
        batch, used = [], 0
        for spec in group:
            size = max(1, system.batch_bytes(spec))
            if batch and used + size > budget:
                out.append(batch)
                batch, used = [], 0
            batch.append(spec)
            used += size
        out.append(batch)
    return out


def solve_batch(system, specs: Sequence) -> list[Chunk]:
    """One Chunk per point of a batch (equal batch keys): the points' Solves stacked and solved
    once per name, each point's slice observed."""
    plans = [system.solves(spec) for spec in specs]
    single = isinstance(plans[0], Solve)
    named = [{None: plan} if single else plan for plan in plans]
    solved = {name: _solve([plan[name] for plan in named]) for name in named[0]}
    chunks = []
    for i, spec in enumerate(specs):
        mine = {name: _row(out, i) for name, out in solved.items()}
        chunks.append(system.observe(spec, mine[None] if single else mine))
    return chunks


def _solve(solves: list[Solve]):
    """One jax solve of the Solves of a batch (which must agree on everything but their data)."""
    import integrators

    first = solves[0]
    for other in solves[1:]:
        for name in ("method", "dt", "absorbing"):
            if getattr(other, name) != getattr(first, name):
                raise ValueError(f"the points of a batch must share Solve.{name}")
        if (other.key is None) != (first.key is None) or ((other.increments is None) != (first.increments is None)):
            raise ValueError("the points of a batch must take their noise alike")
    # the numba drift is the numba backend's (points may pick different but equivalent ones,
    # e.g. dyn.attention.schemes' per regime): the jax backend reads drift_jax only
    problem = integrators.Problem.stack([replace(s.problem, drift=None) for s in solves])
    x0 = np.stack([s.x0 for s in solves])
    rows = [np.asarray(s.ts, dtype=np.float64) for s in solves]
    shared = all(np.array_equal(r, rows[0]) for r in rows)
    ts = rows[0] if shared else np.stack(rows)  # (T,) shared, or one row per point
    noise = {}
    if first.key is not None:
        noise["rng"] = np.stack([s.key for s in solves])  # one key per point
    if first.increments is not None:
        noise["increments"] = np.stack([s.increments for s in solves])
    integ = integrators.get("jax", first.method, dt=first.dt, absorbing=first.absorbing)
    solution = integ.solve(problem, x0, ts, **noise)
    # what System.observe takes: the states, and for an absorbing solve the steps of each run
    return (solution.states, solution.stats["steps"]) if first.absorbing else solution.states


def _row(out, i: int):
    """Point i's part of a batched result (an array, or a tuple of arrays)."""
    return tuple(a[i] for a in out) if isinstance(out, tuple) else out[i]


def iter_results(scenario, indices: Sequence[int], sidecar: str | None = None) -> Iterator[tuple[int, PointResult]]:
    """(index, result) for every point of `indices`, batch after batch."""
    system, setup = scenario.system, scenario.setup
    layout = trajectories.spec(system, setup, ensemble.coords(system, setup)) if sidecar else None
    tag = scenario.hash  # stamped on each point file (see trajectories.prune)
    for batch in batches(system, [scenario.spec(int(i)) for i in indices], device_budget()):
        try:
            chunks = solve_batch(system, batch)
        except Exception as exc:  # one bad batch must not kill the sweep: its points fail
            last = traceback.extract_tb(exc.__traceback__)[-1]
            message = one_line(f"{type(exc).__name__}: {exc} ({Path(last.filename).name}:{last.lineno})")
            for spec in batch:
                yield spec.index, PointResult({}, FAILED, message)
            continue
        for spec, chunk in zip(batch, chunks, strict=True):
            sink = None
            try:  # a full disk fails the point (its file reserves its space first), not the run
                if layout is not None:
                    sink = trajectories.TrajectoryFile(Path(sidecar), spec.index, layout, tag)
                result = ensemble.reduce_point(system, spec, [(range(spec.runs), chunk)], sink)
            except Exception as exc:
                if sink is not None:
                    sink.discard()
                yield spec.index, PointResult({}, FAILED, one_line(f"{type(exc).__name__}: {exc}"))
                continue
            if sink is not None:
                sink.close()
            yield spec.index, result
