"""What a process that computes sweep points runs: the driver itself (the serial executor, a dry
run's calibration) or a pool worker (local processes, Dask, a job array's task).

:func:`compute_point` runs one point of a sweep's :class:`dyn.core.spec.Setup` and never raises
(a failed point is recorded as FAILED with one line); :func:`compute_batch` runs several in
order, each with its wall time. A local pool's workers start with
:func:`dyn.engine.lifetime.init_worker` (they share the cores and die with their driver);
:func:`~dyn.engine.lifetime.exit_if_orphaned` stops one whose driver is gone before its next
point.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from .. import systems
from ..core import stages
from ..core.contract import FAILED, PointResult
from ..core.errors import one_line
from ..core.spec import Setup
from . import ensemble, trajectories
from .lifetime import exit_if_orphaned

_SETUPS: dict[str, Setup] = {}  # in a worker: the first copy of each sweep's Setup, by tag


def _shared_setup(setup: Setup) -> Setup:
    """The worker's one copy of this sweep's Setup, so that its cache (Setup.shared) lives
    across tasks instead of being unpickled afresh with each."""
    if len(_SETUPS) > 4:
        _SETUPS.clear()
    return _SETUPS.setdefault(setup.tag, setup)


def compute_point(setup: Setup, index: int, sidecar: str | None = None) -> PointResult:
    """Run point `index` of the sweep `setup`; never raises."""
    setup = _shared_setup(setup)
    module, _, _ = setup.system_name.rpartition(":")  # a system named by import path: its module
    with stages.running(f"{module or 'dyn'} (import)"):
        system = systems.get(setup.system_name, file=setup.system_file)
    sink = None
    try:
        if sidecar is not None:
            layout = trajectories.spec(system, setup, ensemble.coords(system, setup))
            sink = trajectories.TrajectoryFile(Path(sidecar), index, layout, setup.tag)
        with stages.running(f"{type(system).__module__}.simulate"):
            result = ensemble.run_point(system, setup.spec(index, system), sink)
        if sink is not None:
            sink.close()
        return result
    except stages.UserExit:  # user code asked the process to end: the run stops, one line
        if sink is not None:
            sink.discard()
        raise
    except Exception as exc:  # one bad point must not kill the sweep: record it
        if sink is not None:
            sink.discard()
        last = traceback.extract_tb(exc.__traceback__)[-1]
        return PointResult(
            {},
            FAILED,
            one_line(
                f"{type(exc).__name__}: {exc} "  # one line, even
                f"({os.path.basename(last.filename)}:{last.lineno})"
            ),
        )  # for HDF5 texts


def compute_batch(
    setup: Setup, indices: Sequence[int], sidecar: str | None = None
) -> list[tuple[int, PointResult, float]]:
    """Points in order, each with its wall time (seconds) for the batch-size estimate."""
    done = []
    for index in indices:
        exit_if_orphaned()
        start = time.perf_counter()
        result = compute_point(setup, int(index), sidecar)
        done.append((int(index), result, time.perf_counter() - start))
    return done
