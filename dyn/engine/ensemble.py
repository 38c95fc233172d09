"""The Monte Carlo ensemble of one sweep point, owned by the engine.

    runs -> chunks (memory budget) -> System.simulate -> per-run values -> reductions -> file variables

- **Chunks.** `runs` are split into ceil(runs x System.run_bytes / Setup.chunk_bytes) consecutive
  chunks; runs are independent and draw from the point's stream in run order, and sums run on
  across chunk boundaries, so chunking never changes a number of a system whose runs are drawn
  run by run.
- **Reductions** (``Output.reduce``, one class each in :mod:`dyn.engine.reductions`): sums over runs
  are accumulated run after run, the same order whatever the array shapes, then divided once.
  Proportions also give their count and 95% Wilson bounds; means (``mean``, ``mean_se``: the
  same since every mean carries its error) their standard error over runs X_se (from the
  running sums of the values and their squares, shifted by the first run's value; NaN with one
  run).
- **Divergence.** A run whose states (or values) are not finite marks the point DIVERGED, with
  the count in the message; the values are still written.
- **Time averages** (``reduce = "time_average"``): the runs' series go to
  :mod:`dyn.engine.averaging`, which extends the runs until their window is stationary (up to a
  cap) and writes the average with its error budget; with ``[integrator] check_step``,
  :mod:`dyn.engine.stepcheck` adds the step error (of an ODE system: of every simulated mean,
  its first runs again at half the step). With ``dt = "auto"`` the point's step is written as ``dt_used``.
- **Checks in the worker.** Values missing, undeclared or of the wrong shape raise
  :class:`OutputMismatch`, which fails that point (status FAILED, with the message) and not the
  sweep.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from ..core.contract import DIVERGED, OK, REFERENCE, UNDECIDED, Coord, Output, PointResult, Reference
from . import averaging, stepcheck
from .reductions import Reductions, companions, kept_runs

if TYPE_CHECKING:
    from ..core.spec import RunSpec, Setup
    from ..core.system import System


class OutputMismatch(RuntimeError):
    """A system returned values that do not match its declared outputs."""


RUN = "run"  # the dimension of per-run outputs


def declared_outputs(system: System, setup: Setup) -> list[Output]:
    """The system's outputs this sweep keeps: all of them, or those its [output] observables
    names (:meth:`Setup.keeps`)."""
    return [out for out in system.outputs(setup) if setup.keeps(out.name)]


def file_outputs(system: System, setup: Setup) -> list[Output]:
    """Every variable written per point, in file order (per-run outputs lead with `run`; the
    time averages and their error budget after the system's own outputs)."""
    outs = []
    declared = declared_outputs(system, setup)
    for out in declared:
        if out.reduce == "time_average":
            if out.name in setup.per_run:  # each run's own mean over the window
                outs.append(kept_runs(replace(out, dims=(), long_name="its own time average over the window"), RUN))
            continue
        if out.reduce == "per_run":
            out = replace(out, dims=(RUN, *out.dims))
        outs += companions(out)
        if out.name in setup.per_run:  # [output] per_run: every run's value beside
            outs.append(kept_runs(out, RUN))
    outs += averaging.point_outputs(declared)
    if setup.check_step:
        outs += stepcheck.point_outputs(declared, ode=system.equation == "ode")
    if setup.solver.options.get("dt") == "auto":
        outs.append(Output("dt_used", "step of the point (dt = auto: step_tol / its fastest rate)", "1", (), "point"))
    return outs


# Attributes of every output variable saying what is known of its errors (dyn show --errors).
MC_ERROR, STEP_ERROR_ATTR, HORIZON_ATTR = "dyn_mc_error", "dyn_step_error", "dyn_horizon"


def error_budget(system: System, setup: Setup) -> dict[str, dict[str, str]]:
    """Per declared output: where its Monte Carlo error, its step error and its horizon status
    are found in the file (variable names), or why they are not."""
    declared = declared_outputs(system, setup)
    undecided = [o.name for o in declared if o.role == UNDECIDED]
    dt = setup.solver.options.get("dt")
    if "dt" in setup.solver_axes:
        dt = f"{', '.join(map(str, setup.axes['dt']))} (swept)"
    if system.equation != "sde":
        step = "deterministic dynamics: no Euler-Maruyama step error (see the solver's step or tolerances)"
    elif setup.check_step:  # on, but it reruns the runs of the time averages only
        step = f"not checked (check_step = true covers the time averages; dt = {dt})"
    elif stepcheck.refused(system, setup):  # suggest only what the system accepts
        step = f"not estimated ({stepcheck.refused(system, setup)}; dt = {dt})"
    else:
        step = f"not checked (integrator.check_step = false; dt = {dt})"
    budget = {}
    for out in declared:
        if out.reduce in ("mean", "mean_se"):
            mc = f"{out.name}_se (standard error over {setup.runs} runs)"
        elif out.reduce == "proportion":
            mc = f"{out.name}_lo, {out.name}_hi (95% Wilson interval over {setup.runs} runs)"
        elif out.reduce == "time_average":
            mc = f"{out.name}_se (from the effective sample size {out.name}_ess)"
        elif out.reduce == "time_to_event":
            mc = (
                f"{out.name}_se (over {setup.runs} runs, of the mean censored at T: biased low); "
                f"{out.name}_median_lower, {out.name}_median_upper (95% interval of the "
                f"Kaplan-Meier median); {out.name}_censored (share never reached by T)"
            )
        elif out.reduce == "point":
            mc = "none: not a Monte Carlo estimate"
        else:
            mc = f"not estimated ({out.reduce} over runs)"
        if out.reduce == "time_average":
            horizon = (
                "until stationary: see stationary, burn_in_used, horizon_used (cap "
                f"{averaging.cap_of(setup):g}), nonstationary_runs, {out.name}_drift"
            )
        elif undecided:
            horizon = f"runs classified when stopped: see {', '.join(undecided)}"
        else:
            horizon = f"fixed horizon T = {setup.horizon:g}"
        steps = f"{out.name}_step_error" if setup.check_step and out.reduce == "time_average" else step
        if setup.check_step and system.equation == "ode":  # the means (stepcheck.ode_checked)
            checked = bool(stepcheck.ode_checked([out]))
            steps = f"{out.name}_step_error" if checked else "not checked (check_step covers means)"
        if out.reduce == "point":  # computed for the point (a closed form, a reference)
            steps = horizon = "none: not simulated by runs"
        budget[out.name] = {MC_ERROR: mc, STEP_ERROR_ATTR: steps, HORIZON_ATTR: horizon}
    return budget


def coords(system: System, setup: Setup) -> dict[str, Coord]:
    """The system's own dimensions: `time` (the save times) when an output or the saved states
    use it, `run` when an output is kept per run, and the system's other coordinates."""
    found = {}
    outputs = declared_outputs(system, setup)
    saves_states = setup.trajectories and system.trajectory_dims(setup) is not None
    if saves_states or any("time" in out.dims for out in outputs):
        found["time"] = Coord(np.asarray(setup.times), "time t", "1")
    if any(out.reduce == "per_run" or out.name in setup.per_run for out in outputs):
        found[RUN] = Coord(np.arange(setup.runs), "Monte Carlo run")
    found.update(system.coords(setup))
    return found


def references(system: System, setup: Setup) -> list[Reference]:
    """The system's references (computed once per setup), checked against the file's layout:
    each dim a sweep axis, a system dimension or one of its own coords (equal wherever two
    references bring the same), values of that shape, names unused by any other variable."""
    return setup.shared(("references",), lambda: _checked_references(system, setup))


def _checked_references(system: System, setup: Setup) -> list[Reference]:
    sizes = {a: len(v) for a, v in setup.axes.items()}
    sizes.update({d: len(c.values) for d, c in coords(system, setup).items()})
    taken = set(sizes) | {o.name for o in file_outputs(system, setup)}
    brought: dict[str, Coord] = {}
    found = system.references(setup)
    for ref in found:
        if ref.name in taken:
            raise ValueError(f"reference {ref.name} of {system.name}: the name is taken")
        taken.add(ref.name)
        for dim, coord in ref.coords.items():
            if dim in sizes and not (dim in brought and np.array_equal(brought[dim].values, coord.values)):
                raise ValueError(f"reference {ref.name}: dimension {dim} exists with other values")
            brought[dim] = coord
            sizes[dim] = len(coord.values)
        unknown = [d for d in ref.dims if d not in sizes]
        shape = tuple(sizes.get(d, -1) for d in ref.dims)
        if unknown or np.shape(ref.values) != shape:
            raise ValueError(
                f"reference {ref.name} of {system.name}: values of shape "
                f"{np.shape(ref.values)} for dims {ref.dims} (unknown: {unknown})"
            )
    return found


def chunks(runs: int, run_bytes: int, budget: int) -> list[range]:
    """Consecutive ranges of runs whose states fit the budget (at least one run each)."""
    count = max(1, -(-runs * int(run_bytes) // int(budget)))
    return [range(int(c[0]), int(c[-1]) + 1) for c in np.array_split(np.arange(runs), min(count, runs))]


def _shape(out: Output, sizes: dict[str, int]) -> tuple[int, ...]:
    return tuple(sizes[d] for d in out.dims)


def _check(values: dict, outputs: list[Output], sizes: dict[str, int], lead: tuple, what: str):
    names = {out.name for out in outputs}
    missing = sorted(names - set(values))
    extra = sorted(set(values) - names)
    if missing or extra:
        raise OutputMismatch(
            f"{what} returned "
            + "; ".join(
                part
                for part in (
                    f"no values for {', '.join(missing)}" if missing else "",
                    f"undeclared {', '.join(extra)}" if extra else "",
                )
                if part
            )
        )
    for out in outputs:
        want = lead + _shape(out, sizes)
        got = np.shape(values[out.name])
        if got != want:
            raise OutputMismatch(f"{what} returned {out.name} of shape {got}, expected {want}")


def _without(values: dict, names: set) -> dict:
    return {k: v for k, v in values.items() if k not in names}


def _bad_runs(chunk, n: int, censored=()) -> int:
    """Runs of the chunk that are not finite (by its flags, else its states, else its values
    but the censored times named in `censored`, whose NaN means not reached)."""
    if chunk.finite is not None:
        finite = np.asarray(chunk.finite, dtype=bool)
    elif chunk.states is not None:
        finite = np.isfinite(chunk.states).reshape(n, -1).all(axis=1)
    else:
        finite = np.ones(n, dtype=bool)
        for name, v in chunk.values.items():
            v = np.asarray(v, dtype=np.float64)
            ok = ~np.isinf(v) if name in censored else np.isfinite(v)
            finite &= ok.reshape(n, -1).all(axis=1)
    return int(n - finite.sum())


def run_point(system: System, spec: RunSpec, sink=None) -> PointResult:
    """Simulate every run of one point, chunk by chunk, and reduce to the file variables.
    `sink` (a :class:`dyn.engine.trajectories.TrajectoryFile`) receives the states when given."""
    from integrators import MAX_STEPS

    short = 0  # runs the integrator cut short by max_steps (Chunk.status)

    def simulated():
        nonlocal short
        for runs in chunks(spec.runs, system.run_bytes(spec), spec.setup.chunk_bytes):
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                chunk = system.simulate(spec, runs)
            if chunk.status is not None:
                short += int(np.count_nonzero(chunk.status == MAX_STEPS))
            yield runs, chunk

    result = reduce_point(system, spec, simulated(), sink)
    if short and result.status == DIVERGED:  # not an overflow: say what stopped the runs
        result.message = (
            f"{short} of {spec.runs} runs reached integrator.max_steps before the "
            "horizon (raise it): their states from there on are NaN"
            + ("" if result.message.startswith(f"{short} of") else f"; {result.message}")
        )
    return result


def reduce_point(system: System, spec: RunSpec, simulated, sink=None) -> PointResult:
    """The file variables of one point from its simulated chunks, pairs (runs: range, Chunk)
    covering every run in order (the numba path simulates them chunk by chunk; the batched
    JAX path, :mod:`dyn.engine.batched`, hands over one chunk of all runs)."""
    setup = spec.setup
    declared = declared_outputs(system, setup)
    simulated_outputs = [o for o in declared if o.reduce != "point"]
    averaged = [o.name for o in declared if o.reduce == "time_average"]
    per_run = [o for o in simulated_outputs if o.reduce != "time_average"]
    sizes = {dim: len(c.values) for dim, c in coords(system, setup).items()}
    sizes[averaging.SERIES] = len(spec.times)
    # the ODE step check: the first runs' values of the means, compared with a rerun at h/2
    ode_check = (
        [o.name for o in stepcheck.ode_checked(declared)] if setup.check_step and system.equation == "ode" else []
    )
    first: dict[str, list] = {name: [] for name in ode_check}
    kept_runs = 0
    # a per-run output's values from `simulate` have the output's own dims after the run axis
    reduction = Reductions(per_run, spec.runs, setup.per_run, spec.horizon)
    censored = {o.name for o in per_run if o.reduce == "time_to_event"}  # NaN there: not reached
    pieces = []
    bad = 0
    unkept = {o.name for o in system.outputs(setup)} - {o.name for o in declared}
    for runs, chunk in simulated if simulated_outputs else ():
        kept = _without(chunk.values, unkept)  # a system may compute what the sweep drops
        _check(
            kept, [averaging.as_series(o) for o in simulated_outputs], sizes, (len(runs),), f"{system.name}.simulate"
        )
        reduction.add(kept)
        if averaged:
            pieces.append(
                averaging.Piece(
                    runs, chunk.carry, {n: [np.asarray(chunk.values[n], dtype=np.float64)] for n in averaged}
                )
            )
        if sink is not None:
            _check_states(chunk.states, system.name)
            sink.write(runs.start, chunk.states)
        bad += _bad_runs(chunk, len(runs), censored)
        if ode_check and kept_runs < stepcheck.ode_check_runs(spec.runs):
            take = min(len(runs), stepcheck.ode_check_runs(spec.runs) - kept_runs)
            for name in ode_check:
                first[name].append(np.array(kept[name][:take], dtype=np.float64))
            kept_runs += take
    values = reduction.finish() if per_run else {}
    if ode_check and not bad:
        values.update(stepcheck.ode_step_errors(system, spec, {name: np.concatenate(v) for name, v in first.items()}))
    elif ode_check:  # diverged: no step error to speak of (the writer stores NaN anyway)
        values.update(
            {
                f"{name}{part}": np.full(np.shape(values[name]), np.nan)
                for name in ode_check
                for part in ("_step_error", "_step_error_se")
            }
        )
    if averaged:
        window = averaging.until_stationary(system, spec, pieces, averaged)
        bad += window.bad
        values.update(window.values())
        values.update(averaging.run_means(pieces, window, [n for n in averaged if n in setup.per_run]))
        if setup.check_step and not bad:
            values.update(stepcheck.step_errors(system, spec, averaged, window, pieces))
        elif setup.check_step:  # diverged: no step error to speak of
            values.update(dict.fromkeys((o.name for o in stepcheck.point_outputs(declared)), np.nan))
    if setup.solver.options.get("dt") == "auto":
        values["dt_used"] = spec.dt
    points = _without(system.point_values(spec), unkept)
    _check(points, [o for o in declared if o.reduce == "point"], sizes, (), f"{system.name}.point_values")
    values.update(points)
    values = {name: np.asarray(v, dtype=np.float64) for name, v in values.items()}
    if bad:
        return PointResult(values, DIVERGED, f"{bad} of {spec.runs} runs became non-finite (overflow or NaN)")
    broken = nonfinite_outputs(values, declared, spec.runs, setup.per_run)
    if broken:
        return PointResult(
            values,
            DIVERGED,
            f"not finite: {', '.join(broken)} (overflow or NaN in the outputs; the states stayed finite)",
        )
    return PointResult(values, OK)


def _check_states(states, name: str) -> None:
    """A system that declares `trajectory_dims` saves its states: none, or none finite (a run
    starts from a finite state, so even a diverging run has finite ones), fails the point
    rather than writing NaN trajectories under an ok status."""
    if states is None:
        raise OutputMismatch(
            f"{name}.simulate returned no states (Chunk.states), although the system declares trajectory_dims"
        )
    if not np.isfinite(states).any():
        raise OutputMismatch(f"{name}.simulate returned states that are all NaN or inf")


def nonfinite_outputs(values: dict[str, np.ndarray], declared: list[Output], runs: int, kept=()) -> list[str]:
    """The file variables of a point holding values that are not answers: any inf, and any NaN
    except where NaN is declared to mean something (`Output.nan_means`, a reference) - in such an
    output, and in its companions where it is NaN itself - or where a statistic needs two runs
    and the point has one (a standard error). A time average's diagnostics (X_se, X_ess,
    X_drift, X_mixing) are not checked: NaN there means a window too short to estimate them, inf
    runs constant but unequal, and either makes the point non-stationary (marked), while the
    average itself must be finite. A companion that declares its own `nan_means` (a censored
    time's median, every run's values kept by `[output] per_run` `kept`) may hold NaN."""
    allowed: dict[str, str] = {}  # variable -> the declared output whose NaN it may share
    derived, diagnostics = set(), set()
    for out in declared:
        if out.reduce == "time_average":
            parts = averaging.point_outputs([out])[:5]
            diagnostics |= {part.name for part in parts[1:]}
        else:
            parts = companions(out)
        if out.name in kept:
            parts = [*parts, kept_runs(out, RUN)]
        derived |= {part.name for part in parts[1:]}
        if out.nan_means or out.role == REFERENCE:
            allowed.update({part.name: out.name for part in parts})
        allowed.update({part.name: part.name for part in parts[1:] if part.nan_means})
    own = {out.name for out in declared}
    found = []
    for name, v in values.items():
        if name in diagnostics or np.isfinite(v).all():
            continue
        nan = np.isnan(v)
        if np.isinf(v).any():
            found.append(name)
        elif name in allowed and (
            allowed[name] == name
            or allowed[name] not in values
            or np.array_equal(nan, nan & np.isnan(values[allowed[name]]))
        ):
            continue
        elif runs < 2 and (name in derived or name not in own):
            continue
        else:
            found.append(name)
    return found
