"""The `jax` backend (`[integrator] backend = "jax"`): a sweep run in batches of points, each
batch one jitted, vmapped JAX computation on the default JAX device (a GPU when there is one).

    pending points -> groups of equal System.batch_key -> batches sized to the device memory
                   -> System.simulate_batch (one program per shape, parameters traced)
                   -> per point: the engine's reductions -> the single writer

Points are written one by one as their batch finishes; resume works at point granularity (a
killed run loses the batch in flight, whose points are pending). A point's random numbers come
from its own key (RunSpec.jax_key: the point's seed sequence), so a run is reproducible on the
same device; across devices (CPU against GPU) and against the numba backend the numbers agree in
law, not bit for bit (other generators, other rounding).
"""
from __future__ import annotations

import traceback
from itertools import groupby
from pathlib import Path
from typing import Iterator, Sequence

from . import ensemble, trajectories
from .errors import one_line
from .contract import FAILED, PointResult

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


def iter_results(scenario, indices: Sequence[int], sidecar: str | None = None
                 ) -> Iterator[tuple[int, PointResult]]:
    """(index, result) for every point of `indices`, batch after batch."""
    system, setup = scenario.system, scenario.setup
    layout = trajectories.spec(system, setup, ensemble.coords(system, setup)) if sidecar else None
    tag = scenario.hash  # stamped on each point file (see trajectories.prune)
    for batch in batches(system, [scenario.spec(int(i)) for i in indices], device_budget()):
        try:
            chunks = system.simulate_batch(batch)
        except Exception as exc:  # one bad batch must not kill the sweep: its points fail
            last = traceback.extract_tb(exc.__traceback__)[-1]
            message = one_line(f"{type(exc).__name__}: {exc} ({Path(last.filename).name}:{last.lineno})")
            for spec in batch:
                yield spec.index, PointResult({}, FAILED, message)
            continue
        for spec, chunk in zip(batch, chunks):
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
