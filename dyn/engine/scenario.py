"""Scenario files: TOML in, a validated and fully resolved `Scenario` out.

Tables (see README "Scenario files"):
  [scenario]   name, system, description
  [params]     fixed parameters of the system (defaults filled in)
  [sweep]      axis = [values...] or {start, stop, num[, spacing = "linear" | "log"]};
               the sweep is the cartesian product of the axes, in file order
  [ensemble]   runs, seed
  [integrator] backend, method, horizon, dt | rtol, atol, max_steps
  [output]     path, saves (number of save intervals on [0, horizon]), plot, observables
               (the outputs to keep; default all), trajectories, trajectory_every,
               trajectory_runs

The resolved scenario (every default written out, every sweep expanded to an explicit list)
is what the output file stores, and its hash identifies the computation: resuming is allowed only
onto a file with the same hash. The output path is not part of the hash.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import tomli_w

from .. import systems
from ..core import sweep
from ..core.contract import AVERAGING_KEYS
from ..core.errors import MissingFile, ScenarioError, did_you_mean, short_repr
from ..core.schema import Field, check_table
from ..core.spec import RunSpec, Setup, Solver, refine_of
from .averaging import DEFAULT_CAP_BLOCKS
from .ensemble import file_outputs
from .reductions import companions

MAX_POINTS = 1_000_000  # a sweep larger than this is almost surely a typo in a range
MAX_SWEEP_NUM = 100_000
MAX_DEPTH = 32  # nesting of arrays and tables: no scenario needs more, and 800 levels overflow
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

TABLES = ("scenario", "params", "sweep", "ensemble", "integrator", "output", "executor")
SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"  # the shipped scenarios

SCENARIO_FIELDS = {
    "name": Field(
        "str",
        doc="short identifier, used for the default output file name",
        check=lambda s: None if NAME_PATTERN.match(s) else "must be 1-64 characters of letters, digits, '_', '.', '-'",
    ),
    "system": Field(
        "str",
        doc="system name (see `dyn list`), or import path module:Class "
        "of your own (the module beside the scenario file or on sys.path)",
    ),
    "description": Field("str", default=""),
}
ENSEMBLE_FIELDS = {
    "runs": Field("int", default=1, lo=1, hi=100_000_000, doc="Monte Carlo runs per point"),
    "seed": Field("int", default=0, lo=0, hi=2**63 - 1, doc="root seed of every point"),
    "common": Field(
        "names",
        default=None,
        doc="sweep axes along which points share their random numbers (common random numbers); default none",
    ),
}
INTEGRATOR_FIELDS = {
    "backend": Field(
        "str",
        default="numba",
        choices=("numba", "diffrax", "jax"),
        doc="numba or diffrax (point by point), or jax (whole batches of points)",
    ),
    "method": Field("str", default="rk4"),
    "horizon": Field("float", default=1.0, gt=0.0, doc="final time T"),
    "dt": Field(
        "float",
        default=None,
        gt=0.0,
        auto=True,
        doc='(largest) step size, or "auto": step_tol / the point\'s fastest rate (SDEs)',
    ),
    "rtol": Field("float", default=None, gt=0.0),
    "atol": Field("float", default=None, gt=0.0),
    "max_steps": Field("int", default=None, lo=1, hi=10**9),
    "burn_in": Field(
        "float",
        default=None,
        lo=0.0,
        auto=True,
        doc='start of the window of time averages, or "auto" (MSER truncation)',
    ),
    "horizon_cap": Field(
        "float", default=None, gt=0.0, doc="longest horizon time averages are extended to (default 8 horizons)"
    ),
    "step_tol": Field(
        "float", default=None, gt=0.0, hi=1.0, doc='dt = "auto": largest dt x (the point\'s fastest rate)'
    ),
    "check_step": Field(
        "bool",
        default=None,
        doc="rerun runs at dt/2 (an SDE on the same Brownian path, an ODE from the same starts): step error per output",
    ),
}
OUTPUT_FIELDS = {
    "path": Field("str", default=""),
    "saves": Field("int", default=100, lo=1, hi=100_000, doc="save intervals on [0, horizon]"),
    "spacing": Field(
        "str",
        default="linear",
        choices=("linear", "log"),
        doc="save times evenly spaced on [0, T], or 0 then geometric from t_min to T",
    ),
    "t_min": Field("float", default=None, gt=0.0, doc="first nonzero save time (spacing = log)"),
    "plot": Field("str", default=""),
    "observables": Field(
        "names",
        default=None,
        doc="keep only these outputs of the system (default: all of them); "
        "the work of the others is skipped where the system can",
    ),
    "per_run": Field(
        "names",
        default=None,
        doc="outputs whose every run's value is also kept, as X_per_run over (run, "
        "...): for histograms, bootstraps, per-run analysis",
    ),
    "trajectories": Field("bool", default=False, doc="also save states (see dyn/engine/trajectories.py)"),
    "trajectory_every": Field("int", default=1, lo=1, hi=10**6, doc="keep every k-th save time"),
    "trajectory_runs": Field("int", default=0, lo=0, hi=10**8, doc="runs kept per point (0: all)"),
}
SOLVER_OPTIONS = ("dt", "rtol", "atol", "max_steps")
# [integrator] keys that may be a [sweep] axis instead (the axis sets the solver of each point;
# a system parameter of the same name is swept as that parameter)
SOLVER_AXES = {
    "dt": Field("float", gt=0.0, doc="the step of each point (a fixed-step method)"),
    "method": Field("str", doc="the integrator's method at each point"),
}
# Engine settings of [integrator] written out (when not given) only for the systems that read
# them, so that the resolved text, and the hash, of every other scenario stays as it was.
ENGINE_DEFAULTS = {"burn_in": "auto", "step_tol": 0.01, "check_step": False}
# A fixed dt is refused where (the point's fastest rate) x dt exceeds this many step_tol.
STEP_REFUSE = 10.0
SWEEP_RANGE_FIELDS = {
    "start": Field("float"),
    "stop": Field("float"),
    "num": Field("int", lo=1, hi=MAX_SWEEP_NUM),
    "spacing": Field("str", default="linear", choices=("linear", "log")),
}


@dataclass(frozen=True)
class Scenario:
    """A validated scenario. `data` is the resolved TOML document (plain dicts and lists)."""

    data: dict
    source: str = "<dict>"
    # [executor]: where the points run (options of `--executor submitit`); not in `data`, so
    # neither in the file's scenario nor in its hash: where a sweep runs never changes its numbers
    executor: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.data["scenario"]["name"]

    @property
    def system(self) -> systems.System:
        head = self.data["scenario"]
        return systems.get(head["system"], file=head.get("system_file", ""))

    @property
    def params(self) -> dict:
        return self.data["params"]

    @property
    def axes(self) -> dict[str, list]:
        return self.data["sweep"]

    @property
    def ensemble(self) -> dict:
        return self.data["ensemble"]

    @property
    def integrator(self) -> dict:
        return self.data["integrator"]

    @property
    def output(self) -> dict:
        return self.data["output"]

    @property
    def text(self) -> str:
        return tomli_w.dumps(self.data)

    @property
    def hash(self) -> str:
        """sha256 of the resolved scenario without its output path (where results go is not what they are)."""
        return document_hash(self.data)

    def default_output_path(self) -> Path:
        return Path(self.output.get("path") or f"outputs/{self.name}.h5")

    @cached_property
    def setup(self) -> Setup:
        """What every point shares, as systems see it (they never see this document)."""
        cfg = self.integrator
        return Setup(
            params=self.params,
            axes=self.axes,
            runs=self.ensemble["runs"],
            seed=self.ensemble["seed"],
            common=tuple(self.ensemble.get("common", ())),
            horizon=cfg["horizon"],
            saves=self.output["saves"],
            spacing=self.output["spacing"],
            t_min=self.output.get("t_min"),
            solver=Solver(cfg["backend"], cfg["method"], solver_options(cfg)),
            trajectories=self.output["trajectories"],
            trajectory_every=self.output["trajectory_every"],
            trajectory_runs=self.output["trajectory_runs"],
            observables=tuple(self.output.get("observables") or ()),
            per_run=tuple(self.output.get("per_run") or ()),
            burn_in=None if cfg.get("burn_in", "auto") == "auto" else cfg["burn_in"],
            horizon_cap=cfg.get("horizon_cap"),
            step_tol=cfg.get("step_tol") or ENGINE_DEFAULTS["step_tol"],
            check_step=bool(cfg.get("check_step")),
            system_name=self.data["scenario"]["system"],
            system_file=self.data["scenario"].get("system_file", ""),
            auto_dt=cfg.get("dt") == "auto",
            tag=self.hash,
            solver_axes=tuple(a for a in self.axes if a in SOLVER_AXES and a not in self.system.params),
        )

    def spec(self, index: int) -> RunSpec:
        """The run specification of point `index` (see :meth:`dyn.core.spec.Setup.spec`)."""
        return self.setup.spec(index, self.system)

    @property
    def count(self) -> int:
        """Number of sweep points."""
        return sweep.count(self.axes)


def document_hash(data: dict) -> str:
    """sha256 of a resolved document without where things lie: the output path, and the file
    of a system's module from outside the package (its sha256, which stays, says what it is)."""
    data = copy.deepcopy(data)
    data["output"].pop("path", None)
    data["scenario"].pop("system_file", None)
    return hashlib.sha256(tomli_w.dumps(data).encode()).hexdigest()


def parse_toml(text: str, source: str = "<string>") -> dict:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError("", f"{source}: malformed TOML: {exc}") from None
    except RecursionError:  # the parser recurses once per level of nesting
        raise ScenarioError("", f"{source}: nested more than {MAX_DEPTH} levels deep") from None
    check_depth(source, doc)
    return doc


def check_depth(key: str, value: Any) -> None:
    """Refuse a value nested more than MAX_DEPTH levels (arrays, tables): later steps (copies,
    hashing, messages) recurse once per level. Iterative, so it cannot overflow itself."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ScenarioError(key, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)


MAX_SCENARIO_BYTES = 2**20  # a scenario file is a few kB of TOML; past 1 MiB it is refused unread


def read_file(path: str | Path) -> dict:
    """The TOML document of a scenario file. Only a regular file of at most MAX_SCENARIO_BYTES
    is read: a FIFO or a device (which could block, or never end) is refused in one line without
    waiting (opened non-blocking, checked on the open descriptor)."""
    import io
    import os
    import stat

    from .disk import file_kind

    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise MissingFile("", f"no such scenario file: {path}{_near_shipped(path)}") from None
    except OSError as exc:
        raise ScenarioError("", f"cannot read scenario file {path}: {exc}") from None
    try:
        mode, size = (info := os.fstat(fd)).st_mode, info.st_size
        if not stat.S_ISREG(mode):
            raise ScenarioError("", f"scenario file {path} is not a regular file ({file_kind(mode)}): give a TOML file")
        if size > MAX_SCENARIO_BYTES:
            raise ScenarioError(
                "",
                f"scenario file {path} is larger than "
                f"{MAX_SCENARIO_BYTES // 2**20} MiB ({size} bytes): a scenario "
                "is a few kB of TOML",
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_SCENARIO_BYTES + 1)  # it may have grown since fstat
        if len(data) > MAX_SCENARIO_BYTES:
            raise ScenarioError(
                "",
                f"scenario file {path} is larger than "
                f"{MAX_SCENARIO_BYTES // 2**20} MiB: a scenario is a few kB of TOML",
            )
        # as Path.read_text reads: UTF-8, universal newlines
        text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError("", f"cannot read scenario file {path}: {exc}") from None
    finally:
        os.close(fd)
    return parse_toml(text, str(path))


def scenario_file(name: str | Path) -> Path:
    """The file of a scenario named on the command line or to `dyn.run`/`dyn.load`: `name`
    itself when it exists or ends in .toml, else the shipped scenario of that name
    (scenarios/NAME.toml) when there is one, else `name` (which read_file refuses, naming the
    nearest shipped scenarios)."""
    path = Path(name)
    if path.exists() or path.suffix == ".toml":
        return path
    shipped = SCENARIO_DIR / f"{path.name}.toml"
    return shipped if path.name == str(name) and shipped.exists() else path


def _near_shipped(path: Path) -> str:
    """' (did you mean ...?)' with the shipped scenarios named nearest the missing file's name."""
    return did_you_mean(path.stem, sorted(p.stem for p in SCENARIO_DIR.glob("*.toml")))


_BARE_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")


def parse_override(item: str) -> tuple[list[str], Any]:
    """`dotted.key=TOML_VALUE` -> (["dotted", "key"], value). A bare word is taken as a string."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ScenarioError("--set", f"expected KEY=VALUE, got {short_repr(item)}")
    parts = key.split(".")
    if len(parts) != 2 or not all(parts):
        raise ScenarioError(key, "--set keys are TABLE.KEY, e.g. params.beta or sweep.beta")
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except RecursionError:
        raise ScenarioError(key, f"--set value nested more than {MAX_DEPTH} levels deep") from None
    except tomllib.TOMLDecodeError:
        if not _BARE_WORD.match(raw):
            raise ScenarioError(key, f"--set value {short_repr(raw)} is not a TOML value") from None
        value = raw
    check_depth(key, value)
    return parts, value


def apply_overrides(doc: dict, overrides: list[str] | tuple[str, ...], unset=(), notes=None) -> dict:
    """Apply `--set TABLE.KEY=TOML_VALUE` strings to a raw document (a copy is returned), after
    removing the `--unset TABLE.KEY` entries `unset` (see :func:`apply_values`)."""
    values = {}
    for item in overrides:
        parts, value = parse_override(item)
        values[".".join(parts)] = value
    return apply_values(doc, values, unset, notes)


def apply_values(doc: dict, values: dict[str, Any], unset=(), notes=None) -> dict:
    """Apply `{"table.key": value}` to a raw document (a copy is returned); validation comes later.

    First the keys of `unset` ("table.key", `--unset`) are removed: each must be set by the
    document (a misspelt key is refused, naming those it sets), and then takes its default.
    A parameter lives in [params] or in [sweep], never both: an override wins over the other
    table's entry. `params.beta=2.0` fixes beta (the beta axis collapses); `sweep.d=[2, 3]`
    sweeps d (a fixed params.d is dropped). A method or backend set here drops the document's
    solver options that the new method does not take (dt for an adaptive one, rtol and atol for
    a fixed step), saying so: each note is appended to the list `notes` (to be shown once the
    scenario is valid, so that bad input stays one line), or printed on stderr when `notes` is
    None (:func:`drop_foreign_options`)."""
    check_depth("", doc)
    for dotted, value in values.items():
        check_depth(str(dotted), value)
    doc = remove_keys(copy.deepcopy(doc), unset)
    for dotted, value in values.items():
        table, _, key = dotted.partition(".")
        if not key or "." in key:
            raise ScenarioError(dotted, "override keys are TABLE.KEY, e.g. params.beta")
        if table not in TABLES:
            raise ScenarioError(
                f"{table}.{key}", f"--set names no key: unknown table [{table}] (tables: {', '.join(TABLES)})"
            )
        section = doc.setdefault(table, {})
        if not isinstance(section, dict):
            raise ScenarioError(table, "is not a table")
        section[key] = value
        other = {"params": "sweep", "sweep": "params"}.get(table)
        if other and isinstance(doc.get(other), dict):
            doc[other].pop(key, None)
    said = drop_foreign_options(doc, values)
    if notes is None:
        import sys

        for note in said:
            print(note, file=sys.stderr)
    else:
        notes.extend(said)
    return doc


def remove_keys(doc: dict, keys) -> dict:
    """`doc` (changed in place) without the entries "table.key" of `keys` (`--unset`): each
    must be one the document sets, else the key is refused in one line naming those it does."""
    for dotted in keys:
        if not isinstance(dotted, str):
            raise ScenarioError("--unset", f"expected TABLE.KEY, got {short_repr(dotted)}")
        table, _, key = dotted.strip().partition(".")
        if not key or "." in key or not table:
            raise ScenarioError("--unset", f"keys are TABLE.KEY, e.g. integrator.dt; got {short_repr(dotted)}")
        section = doc.get(table)
        if not isinstance(section, dict) or key not in section:
            sets = ", ".join(f"{table}.{k}" for k in section) if isinstance(section, dict) else ""
            raise ScenarioError(
                f"{table}.{key}",
                "--unset names a key the scenario does not set"
                + (f" (it sets {sets})" if sets else f" (it has no [{table}] table)"),
            )
        del section[key]
    return doc


def drop_foreign_options(doc: dict, values: dict[str, Any]) -> list[str]:
    """When `values` (the command line's --set) changes [integrator] method or backend, remove
    from `doc` (in place) the solver options the document itself sets (not those `values`
    sets: they are refused as usual) that the new backend/method does not take, e.g. a fixed
    `dt` when the method becomes dopri5. Returns one note per key removed, naming it."""
    if not {"integrator.method", "integrator.backend"} & set(values):
        return []
    cfg = doc.get("integrator")
    if not isinstance(cfg, dict):
        return []
    backend = cfg.get("backend", INTEGRATOR_FIELDS["backend"].default)
    method = cfg.get("method", INTEGRATOR_FIELDS["method"].default)
    try:
        import integrators

        allowed = integrators.options(backend, method)
    except Exception:  # noqa: BLE001 - an unknown backend or method: validation says so
        return []
    dropped = [key for key in SOLVER_OPTIONS if key in cfg and f"integrator.{key}" not in values and key not in allowed]
    takes = ", ".join(k for k in SOLVER_OPTIONS if k in allowed) or "none of them"
    return [
        f"dyn: note: integrator.{key} = {short_repr(cfg.pop(key))} dropped: {backend}/"
        f"{method} does not take it (of {', '.join(SOLVER_OPTIONS)} it takes {takes})"
        for key in dropped
    ]


def resolve(doc: Any, source: str = "<dict>", points: bool = True) -> Scenario:
    """Validate a raw TOML document and return the resolved `Scenario`. ``points=False`` skips
    the checks of each sweep point (the system's ``validate`` and the step-size check): for a
    reader of the scenario's structure (its setup, axes and outputs) that runs nothing, such as
    `dyn list`, where a model that checks each point by compiling its gradient would pay a
    compile per point."""
    try:
        return _resolve(doc, source, points)
    except ScenarioError:
        raise
    except SystemExit as exc:  # a hook of the user's system (its constructor, outputs...) exited
        name = _outside_system(doc) or "the system"
        code = "" if exc.code is None else repr(exc.code)
        raise ScenarioError(
            "scenario.system", f"{name} called sys.exit({code}) while the scenario was checked"
        ) from None
    except Exception as exc:
        name = _outside_system(doc)
        if not name:
            raise  # the package's own: a bug, shown whole
        # a hook of the user's system raised (outputs, validate, initial_state...): one line
        # with the user's text
        raise ScenarioError("scenario.system", f"{name}: {type(exc).__name__}: {exc}") from None


def _outside_system(doc: Any) -> str:
    """The system's name when it comes from outside the package (import path, entry point)."""
    from ..user import locate

    head = doc.get("scenario") if isinstance(doc, dict) else None
    name = head.get("system") if isinstance(head, dict) else None
    if not isinstance(name, str):
        return ""
    return name if locate.is_import_path(name) or name in locate.entry_points() else ""


def _integrator_table(doc: dict, system, swept: dict | None = None) -> dict:
    """The scenario's [integrator] table, checked against what `system` reads: a setting the
    system would ignore is refused, not dropped; the engine's defaults fill the keys it reads.
    `swept`: the solver axes of [sweep] (dt, method: :func:`_check_solver_axes`); a swept
    method's first value stands in the table as the sweep's base solver."""
    swept = swept or {}
    raw_integrator = _table(doc, "integrator")
    _check_solver_axes(raw_integrator, swept, system)
    integrator = check_table("integrator", raw_integrator, INTEGRATOR_FIELDS)
    if "method" in swept:
        integrator["method"] = swept["method"][0]
    for key in raw_integrator:
        if key not in system.integrator and integrator[key] != INTEGRATOR_FIELDS[key].default:
            if key == "check_step" and system.equation == "ode":  # checked in _check_averaging
                if not integrator[key]:
                    del integrator[key]  # false, the default: the resolved text stays as it was
                continue
            if key == "check_step" and system.equation != "sde":
                raise ScenarioError(
                    "integrator.check_step",
                    f"the step check reruns an SDE or an ODE at dt/2; system {system.name} solves neither",
                )
            reads = ", ".join(sorted(system.integrator)) or "nothing"
            hint = (
                "; a dyn.Model reads it once it declares step_rate"
                if key in AVERAGING_KEYS and system.equation == "sde"
                else ""
            )
            raise ScenarioError(
                f"integrator.{key}", f"system {system.name} does not use it (it reads from [integrator]: {reads}){hint}"
            )
    for key, value in ENGINE_DEFAULTS.items():
        if key in system.integrator:
            integrator.setdefault(key, value)
    if system.integrator:
        for method in swept.get("method", [integrator["method"]]):  # each point's solver
            point = {**integrator, "method": method}
            if "dt" in swept:
                _check_fixed_step(point, system)
                point["dt"] = min(swept["dt"])
            _check_integrator(point, system)
    return integrator


def _check_solver_axes(raw: dict, swept: dict, system) -> None:
    """A solver axis ([sweep] dt or method) is a key the system reads from [integrator], and is
    not given there too (one source for a value, as for [params])."""
    for axis in swept:
        if axis not in system.integrator:
            reads = ", ".join(sorted(system.integrator)) or "nothing"
            raise ScenarioError(
                f"sweep.{axis}", f"system {system.name} does not read integrator.{axis} (it reads: {reads})"
            )
        if axis in raw:
            raise ScenarioError(
                f"integrator.{axis}",
                f"{axis} is both set in [integrator] and swept in [sweep]; keep one "
                f"(on the command line, --unset integrator.{axis} drops the first)",
            )


def _check_fixed_step(cfg: dict, system) -> None:
    """[sweep] dt needs a method with a fixed step (a step check's or an adaptive method's
    tolerances are not a step)."""
    import integrators

    backend, method = cfg["backend"], cfg["method"]
    if backend == "jax" or method not in integrators.available().get(backend, ()):
        return  # _check_integrator names the method's problem
    if "dt" not in integrators.options(backend, method):
        raise ScenarioError(
            "sweep.dt", f"{backend}/{method} has no fixed step to sweep (it is adaptive: rtol, atol, max_steps)"
        )


def _check_common_steps(system, cfg: dict, swept: dict, output: dict) -> None:
    """[sweep] dt in [ensemble] common: every point draws one start and one Brownian path. A
    point at step h draws each increment as the sum of r = h / h_min increments of the finest
    step h_min (the integrators' option refine; :meth:`dyn.core.spec.Setup.solver_of`), so r
    must be an integer, the save intervals must hold whole steps of every h (else the step grid
    cuts them unequally and the sums do not match), and the system must draw its noise
    through the integrator from the point's stream in the same order at any step."""
    import integrators
    from integrators.core.base import step_grid

    dts = swept["dt"]
    finest = min(dts)
    for method in swept.get("method", [cfg["method"]]):
        if method not in integrators.SDE_METHODS:
            continue  # an ODE: the shared starts are all a common step needs
        if cfg["backend"] != "numba" or "refine" not in integrators.options(cfg["backend"], method):
            raise ScenarioError(
                "ensemble.common",
                f"a common dt refines one Brownian path: {cfg['backend']}/{method} "
                "has no option refine (use backend numba)",
            )
        if not system.step_check:
            raise ScenarioError(
                "ensemble.common",
                f"a common dt needs a system whose runs draw their noise through the integrator from the "
                f"point's stream at any step ({system.name} does not declare it: System.step_check; a "
                "dyn.Model declares it with step_rate)",
            )
    if output["spacing"] != "linear":
        raise ScenarioError("ensemble.common", 'a common dt needs save times evenly spaced (spacing = "linear")')
    width = cfg["horizon"] / output["saves"]
    times = np.array([0.0, width])
    fine = step_grid(times, finest)[0][0]
    for dt in dts:
        try:
            r = refine_of(dt, finest)
        except ValueError as exc:
            raise ScenarioError("sweep.dt", f"with dt in ensemble.common, {exc} (h / h_min is the refine)") from None
        if step_grid(times, dt)[0][0] * r != fine:
            raise ScenarioError(
                "sweep.dt",
                f"with dt in ensemble.common, the save interval {width:g} must hold whole steps of "
                f"every dt (dt = {dt:g} does not): raise or lower output.saves",
            )


def _resolve(doc: Any, source: str, points: bool = True) -> Scenario:
    if not isinstance(doc, dict):
        raise ScenarioError("", "a scenario must be a TOML document of tables")
    check_depth("", doc)
    for table in doc:
        if table not in TABLES:
            raise ScenarioError(table, f"unknown table (tables: {', '.join(TABLES)})")
    if "scenario" not in doc:
        raise ScenarioError("scenario", "missing required table [scenario] (name, system)")
    head = check_table("scenario", doc["scenario"], SCENARIO_FIELDS)
    system = _system(head, source)

    raw_sweep = doc.get("sweep", {})
    if not isinstance(raw_sweep, dict):
        raise ScenarioError("sweep", "expected a table of axes")
    sweep_axes = {
        axis: _parse_axis(axis, values, {**SOLVER_AXES, **system.params}) for axis, values in raw_sweep.items()
    }
    swept_solver = {axis: v for axis, v in sweep_axes.items() if axis in SOLVER_AXES and axis not in system.params}
    raw_params = _table(doc, "params")
    for key in raw_params:
        if key in sweep_axes:  # one source for a value: never silently drop either
            raise ScenarioError(
                f"params.{key}",
                f"{key} is both fixed in [params] and swept in "
                "[sweep]; keep one (on the command line, --set params.KEY fixes "
                "it and --set sweep.KEY sweeps it)",
            )
    params_fields = {k: f for k, f in system.params.items() if k not in sweep_axes}
    params = check_table("params", raw_params, params_fields)
    integrator = _integrator_table(doc, system, swept_solver)
    output = check_table("output", _table(doc, "output"), OUTPUT_FIELDS)
    _check_output(output, integrator)
    ensemble = check_table("ensemble", _table(doc, "ensemble"), ENSEMBLE_FIELDS)
    for axis in ensemble.get("common", ()):
        if axis not in sweep_axes:
            raise ScenarioError(
                "ensemble.common", f"{axis!r} is not a sweep axis (axes: {', '.join(sweep_axes) or 'none'})"
            )
    if not ensemble.get("common"):
        ensemble.pop("common", None)  # the default: every point on its own stream
    if "dt" in swept_solver and "dt" in ensemble.get("common", ()):
        _check_common_steps(system, integrator, swept_solver, output)
    data = {
        "scenario": head,
        "params": params,
        "sweep": sweep_axes,
        "ensemble": ensemble,
        "integrator": integrator,
        "output": output,
    }
    executor = _table(doc, "executor")
    from .job_array import array_options

    array_options(executor)  # one line for a bad key or value, before anything runs
    scenario = Scenario(data, source, executor)
    n_points = int(np.prod([len(v) for v in sweep_axes.values()], dtype=np.float64))
    if n_points > MAX_POINTS:
        raise ScenarioError("sweep", f"{n_points} points exceed the limit of {MAX_POINTS}")
    _check_outputs(scenario, system)
    for index in range(scenario.count if points else 0):
        spec = scenario.spec(index)
        system.validate(spec)
        check_step_size(system, spec, integrator)
    return scenario


def _system(head: dict, source: str) -> systems.System:
    """The scenario's system (a registered or installed name, or an import path module:Class
    looked for next to the scenario file, then on sys.path); a system from outside the package
    adds its provenance to `head` (module, file, sha256 of its source: part of the hash, but for
    the file's place, so a resume against an edited module is refused)."""
    from ..user import locate

    name = head["system"]
    if locate.is_import_path(name):
        near = Path(source).parent if source not in ("<dict>", "<string>") else Path.cwd()
        cls = locate.load(name, near)
    elif systems.known(name):
        cls = type(systems.get(name))
    else:
        raise ScenarioError(
            "scenario.system",
            f"unknown system {name!r}"
            f"{did_you_mean(name, systems.names())} "
            f"(known: {', '.join(systems.names())}; or an import path "
            "module:Class)",
        )
    head.update(locate.provenance(cls))
    return _instance(cls, name)


def _instance(cls, name: str) -> systems.System:
    try:
        return cls()
    except Exception as exc:  # a user's class whose constructor raises: its text, one line
        raise ScenarioError("scenario.system", f"{name}() raised {type(exc).__name__}: {exc}") from None


def _check_output(output: dict, integrator: dict) -> None:
    if output["spacing"] == "log":
        t_min = output.get("t_min")
        if t_min is None or not 0 < t_min < integrator["horizon"]:
            raise ScenarioError(
                "output.t_min",
                f'spacing = "log" needs 0 < t_min < horizon (horizon {integrator["horizon"]}), got {t_min}',
            )
    elif output.get("t_min") is not None:
        raise ScenarioError("output.t_min", 'only used with spacing = "log"')


def _check_outputs(scenario: Scenario, system: systems.System) -> None:
    setup = scenario.setup
    declared = system.outputs(setup)  # all of them: [output] observables may keep fewer
    every = [o.name for o in declared]
    if scenario.output.get("observables") == []:
        raise ScenarioError(
            "output.observables", f"names no output: leave the key out to keep all of them ({', '.join(every)})"
        )
    unknown = [name for name in setup.observables if name not in every]
    if unknown:
        raise ScenarioError(
            "output.observables",
            f"system {system.name} has no output {', '.join(map(repr, unknown))} (its outputs: {', '.join(every)})",
        )
    _check_per_run(scenario.output.get("per_run"), declared, setup)
    outputs = file_outputs(system, setup)
    names = {o.name for o in outputs}
    plot = scenario.output["plot"]
    if plot and plot not in names:
        kept = " (not among output.observables)" if plot in every else ""
        raise ScenarioError("output.plot", f"unknown variable {plot!r}{kept} (variables: {', '.join(sorted(names))})")
    if all(o.reduce == "point" for o in declared) and setup.runs != 1:
        raise ScenarioError(
            "ensemble.runs", f"system {system.name} is deterministic: one run per point (runs = 1), got {setup.runs}"
        )
    if setup.spacing == "log" and any(o.reduce == "time_average" for o in declared):
        raise ScenarioError(
            "output.spacing",
            f'system {system.name} averages in time over evenly spaced samples: use spacing = "linear"',
        )
    if setup.trajectories and system.trajectory_dims(setup) is None:
        raise ScenarioError("output.trajectories", f"system {system.name} does not save trajectories")


def _check_per_run(names, declared: list, setup: Setup) -> None:
    """[output] per_run names outputs reduced over runs that the sweep keeps, whose per-run
    value is a number per run (not a per-point value): a time average's is the run's own mean
    over the window (X_per_run, e.g. for biases paired run by run: `dyn compare --observable`)."""
    if names is None:
        return
    if not names:
        raise ScenarioError("output.per_run", "names no output: leave the key out to keep none")
    by_name = {o.name: o for o in declared}
    taken = set(by_name) | {c.name for o in declared for c in companions(o)}
    eligible = [o.name for o in declared if o.reduce not in ("point", "per_run")]
    for name in names:
        out = by_name.get(name)
        if out is None:
            raise ScenarioError(
                "output.per_run",
                f"system {setup.system_name} has no output "
                f"{name!r}{did_you_mean(name, eligible)} (outputs with per-run "
                f"values: {', '.join(eligible)})",
            )
        if not setup.keeps(name):
            raise ScenarioError("output.per_run", f"{name} is not among output.observables")
        if out.reduce in ("point", "per_run"):
            why = {"point": "one value per point, not per run", "per_run": "already kept run by run"}
            raise ScenarioError(
                "output.per_run",
                f"{name} is {why[out.reduce]} (outputs with per-run values: {', '.join(eligible) or 'none'})",
            )
        if f"{name}_per_run" in taken:
            raise ScenarioError("output.per_run", f"{name}_per_run is taken by another output")


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = (), unset=(), points: bool = True) -> Scenario:
    """Read, override and validate a scenario file, or a shipped scenario by its name
    (`dyn.load("attention_clusters")`); `overrides` are `--set` strings ("params.beta=2.0"),
    `unset` the keys to remove first (`--unset`, "integrator.dt": they take their defaults);
    ``points=False`` as in :func:`resolve`.

    Returns the resolved Scenario (every default written out). Raises MissingFile (a
    ScenarioError and a FileNotFoundError) when there is no such file or shipped scenario, with
    the nearest shipped names, and ScenarioError (one line naming the key) for any bad input."""
    import sys

    path = scenario_file(path)
    notes: list[str] = []
    scenario = resolve(apply_overrides(read_file(path), overrides, unset, notes), str(path), points)
    for note in notes:  # once it is valid: bad input stays one line
        print(note, file=sys.stderr)
    return scenario


def _table(doc: dict, name: str) -> dict:
    table = doc.get(name, {})
    if not isinstance(table, dict):
        raise ScenarioError(name, "expected a table")
    return table


def _parse_axis(axis: str, raw: Any, fields: dict[str, Field]) -> list:
    key = f"sweep.{axis}"
    spec = fields.get(axis)
    if spec is None:
        raise ScenarioError(
            key, f"unknown parameter{did_you_mean(axis, fields)} (parameters: {', '.join(sorted(fields))})"
        )
    if not spec.sweepable:
        raise ScenarioError(key, "this parameter cannot be swept")
    if isinstance(raw, dict):
        raw = _expand_range(key, raw, spec)
    elif not isinstance(raw, list):
        raw = [raw]
    if not raw:
        raise ScenarioError(key, "an axis needs at least one value")
    if len(raw) > MAX_SWEEP_NUM:
        raise ScenarioError(key, f"{len(raw)} values exceed the limit of {MAX_SWEEP_NUM}")
    values = [spec.parse(f"{key}[{i}]", v) for i, v in enumerate(raw)]
    if len(set(map(repr, values))) != len(values):
        raise ScenarioError(key, "values must be distinct")
    return values


def _expand_range(key: str, raw: dict, spec: Field) -> list:
    if spec.kind not in ("int", "float"):
        raise ScenarioError(key, "a {start, stop, num} range needs a numeric parameter")
    r = check_table(key, raw, SWEEP_RANGE_FIELDS)
    if r["spacing"] == "log":
        if r["start"] <= 0 or r["stop"] <= 0:
            raise ScenarioError(key, "log spacing needs positive start and stop")
        values = np.geomspace(r["start"], r["stop"], r["num"])
    else:
        values = np.linspace(r["start"], r["stop"], r["num"])
    if spec.kind == "int":
        ints = np.round(values)
        if not np.allclose(ints, values, rtol=0, atol=1e-9):
            raise ScenarioError(key, "this range does not fall on integers")
        return [int(v) for v in ints]
    return [float(v) for v in values]


def _check_integrator(cfg: dict, system: systems.System) -> None:
    import integrators  # light: jax is only imported when a diffrax or jax solve runs

    equation = system.equation
    if cfg["backend"] == "jax":
        methods = sorted(system.jax_methods)
        if not methods:
            raise ScenarioError(
                "integrator.backend", f"system {system.name} has no batched JAX path (backends: numba, diffrax)"
            )
    else:
        methods = integrators.available()[cfg["backend"]]
        if equation is not None:  # only the methods for this system's kind of equation
            sde = equation == "sde"
            methods = [m for m in methods if (m in integrators.SDE_METHODS) == sde]
    if cfg["method"] not in methods:
        kind = f"{equation.upper()} " if equation else ""
        raise ScenarioError(
            "integrator.method",
            f"unknown {kind}method {cfg['method']!r} for backend {cfg['backend']} (methods: {', '.join(methods)})",
        )
    if cfg["horizon"] <= 0:
        raise ScenarioError("integrator.horizon", "must be > 0")
    allowed = integrators.options(cfg["backend"], cfg["method"])
    for key in SOLVER_OPTIONS:
        if key in cfg and key not in allowed:
            raise ScenarioError(
                f"integrator.{key}",
                f"not an option of {cfg['backend']}/{cfg['method']} (options: {', '.join(sorted(allowed))})",
            )
        if key in cfg and cfg[key] != "auto" and cfg[key] <= 0:
            raise ScenarioError(f"integrator.{key}", "must be > 0")
    if cfg.get("dt") == "auto" and (equation != "sde" or "dt" not in allowed):
        raise ScenarioError(
            "integrator.dt",
            'dt = "auto" chooses the step of a fixed-step SDE '
            f"method; give a number for {cfg['backend']}/{cfg['method']}",
        )
    _check_averaging(cfg, system)


def _check_averaging(cfg: dict, system: systems.System) -> None:
    """The engine's settings of [integrator]: time-average window and cap, the step check."""
    cap = cfg.get("horizon_cap")
    if cap is not None and cap < cfg["horizon"]:
        raise ScenarioError(
            "integrator.horizon_cap",
            f"must be >= horizon = {cfg['horizon']:g}, "
            f"got {cap:g} (the runs are extended from the horizon up to the cap)",
        )
    burn_in = cfg.get("burn_in", "auto")
    if burn_in not in (None, "auto"):
        limit = cap if cap is not None else DEFAULT_CAP_BLOCKS * cfg["horizon"]
        if burn_in >= limit:
            raise ScenarioError(
                "integrator.burn_in",
                f"burn_in = {burn_in:g} leaves no window "
                f"before the cap horizon_cap = {limit:g}; lower burn_in or "
                "raise horizon_cap",
            )
    if cfg.get("check_step") and system.equation == "ode":
        from .stepcheck import ODE_ORDER

        if cfg["backend"] == "jax":
            raise ScenarioError(
                "integrator.check_step",
                "the step check reruns a point's first runs at dt/2 point by point: use backend numba or diffrax",
            )
        if cfg["method"] not in ODE_ORDER:
            raise ScenarioError(
                "integrator.check_step",
                f"{cfg['method']} is adaptive: it "
                "bounds its error by rtol and atol, with no step to halve (the "
                f"step check needs a fixed step: {', '.join(ODE_ORDER)})",
            )
    elif cfg.get("check_step"):
        if cfg["backend"] != "numba" or not system.step_check:
            raise ScenarioError(
                "integrator.check_step",
                "the step check reruns runs on one "
                "Brownian path at dt and dt/2: it needs backend numba and a "
                f"system that draws its noise through the integrator "
                f"({system.name} on {cfg['backend']} does not)",
            )
        if cfg.get("dt") is None:
            raise ScenarioError(
                "integrator.check_step", 'the step check needs a step: set integrator.dt (a number or "auto")'
            )


def check_step_size(system: systems.System, spec: RunSpec, cfg: dict) -> None:
    """Refuse a step that takes more than integrators.core.base.MAX_STEPS steps per run over the
    save times, and a fixed dt too coarse for the point's fastest rate (see STEP_REFUSE); a swept
    dt ([sweep] dt) is a study of the step's error, coarse steps included: only its count."""
    _check_step_count(system, spec, cfg)
    dt = cfg.get("dt")
    if dt in (None, "auto"):
        return
    rate = system.step_rate(spec)
    if rate is None:
        return
    tol = cfg.get("step_tol") or ENGINE_DEFAULTS["step_tol"]
    if rate * dt > STEP_REFUSE * tol:
        at = ", ".join(
            f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}"
            for k, v in spec.values.items()
            if k in spec.setup.axes
        )
        raise ScenarioError(
            "integrator.dt",
            f"dt = {dt:g} is too coarse{' at ' + at if at else ''}"
            f": rate x dt = {rate:.3g} x {dt:g} = {rate * dt:.3g} > "
            f"{STEP_REFUSE:g} step_tol = {STEP_REFUSE * tol:g} (Euler-Maruyama's "
            f'bias grows like it); use dt = "auto" or dt <= '
            f"{STEP_REFUSE * tol / rate:.3g}",
        )


def _check_step_count(system: systems.System, spec: RunSpec, cfg: dict) -> None:
    from integrators.core.base import MAX_STEPS

    if "dt" not in system.integrator or "backend" not in cfg:
        return
    import integrators

    if cfg["backend"] != "jax" and "dt" not in integrators.options(cfg["backend"], spec.solver.method):
        return  # an adaptive method: max_steps bounds it (the point's method: it may be swept)
    steps = _step_count(spec.times.tobytes(), spec.dt)
    if steps <= MAX_STEPS:
        return
    at = ", ".join(
        f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in spec.values.items() if k in spec.setup.axes
    )
    years = steps * spec.runs / 1e8 / 3.15e7
    raise ScenarioError(
        "integrator.dt",
        f"dt = {spec.dt:.3g}{' at ' + at if at else ''} takes "
        f"{steps:.3g} steps per run to the horizon {spec.horizon:g}, past the "
        f"limit of {MAX_STEPS:.0e} (at 10^8 steps per second the point's "
        f"{spec.runs} runs would take {_span_text(years)}); raise dt, shorten "
        "the horizon, or save less often",
    )


@functools.lru_cache(maxsize=64)
def _step_count(times: bytes, dt: float) -> float:
    """integrators' step_count of save times (their float64 bytes): once per distinct grid and
    step, not once per point (a 10^5-point sweep has one or a few)."""
    from integrators.core.base import step_count

    return step_count(np.frombuffer(times, dtype=np.float64), dt)


def _span_text(years: float) -> str:
    seconds = years * 3.15e7
    if seconds < 7200:
        return f"about {seconds / 60:.0f} min"
    if years < 1:
        return f"about {seconds / 3600:.0f} h"
    return f"about {years:.3g} years"


def solver_options(cfg: dict) -> dict:
    """The `[integrator]` entries that are options of the solver itself."""
    return {key: cfg[key] for key in SOLVER_OPTIONS if key in cfg}
