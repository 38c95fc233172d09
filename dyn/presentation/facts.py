"""What a picture needs of the system that made a sweep file, read from the file as data.

Reading a file never runs code that the file names: a results file may come from anyone, and
its scenario attribute names a module (``system = "module:Class"``, ``system_file``) that
importing would execute. So the readers take the default variable and the parameters' defaults
from the root attributes the run wrote (:mod:`dyn.engine.model_facts`); for a file written
without them, from the package's own system of that name (:func:`dyn.systems.shipped`), and
otherwise from the data alone (the first drawable variable; every fixed parameter named).

The one way to a user's model is the explicit opt-in `trust_model` (``--trust-model``): the
module file the scenario records is loaded only when its sha256 is the one recorded
(``system_sha256``), and a mismatch is refused in one line (:func:`trusted_system`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import ScenarioError
from ..engine.model_facts import DEFAULT_PLOT_ATTR, DEFAULTS_ATTR

FLAG = "--trust-model"


def default_plot(ds, scenario: dict, trust_model: bool = False) -> str:
    """The variable drawn when none is named: the file's record, else the system's (a shipped
    one, or a trusted model), else "" (the caller draws the first drawable variable)."""
    recorded = ds.attrs.get(DEFAULT_PLOT_ATTR)
    if isinstance(recorded, str) and recorded:
        return recorded
    system = model_system(scenario.get("scenario", {}), trust_model)
    return str(getattr(system, "default_plot", "") or "")


def param_defaults(ds, scenario: dict, trust_model: bool = False) -> dict:
    """name -> default of the system's scalar parameters: the file's record, else the system's
    (shipped or trusted), else {} (a title then names every fixed parameter)."""
    recorded = ds.attrs.get(DEFAULTS_ATTR)
    if isinstance(recorded, str):
        try:
            found = json.loads(recorded)
        except (ValueError, RecursionError):
            found = None
        if isinstance(found, dict):
            return found
    system = model_system(scenario.get("scenario", {}), trust_model)
    if system is None:
        return {}
    return {k: f.default for k, f in system.params.items()}


FRONTIER = "dyn.frontier."  # the package's own models written through the public API


def _frontier(rest: str):
    """The package's model ``dyn.frontier.<module>:<Class>``, or None: the module must be one of
    that package's files (no other import path is followed), the class a System."""
    import importlib
    import pkgutil

    from ..core.system import System

    # looked up by name: dyn.frontier is written on the public API, a floor above this one
    frontier = importlib.import_module(FRONTIER[:-1])
    module, _, cls_name = rest.partition(":")
    if not (module.isidentifier() and cls_name.isidentifier()):
        return None
    if module not in {m.name for m in pkgutil.iter_modules(frontier.__path__)}:
        return None
    cls = getattr(importlib.import_module(f"{frontier.__name__}.{module}"), cls_name, None)
    return cls() if isinstance(cls, type) and issubclass(cls, System) else None


def model_system(head: dict, trust_model: bool):
    """The system of a file's scenario head: the package's own (:func:`dyn.systems.shipped`, or
    a model of ``dyn.frontier``), else with `trust_model` the checked user model
    (:func:`trusted_system`), else None."""
    from .. import systems

    name = head.get("system")
    if isinstance(name, str) and name.startswith(FRONTIER):
        return _frontier(name[len(FRONTIER) :])
    found = systems.shipped(name)
    if found is not None or not trust_model:
        return found
    return trusted_system(head)


def code_problem(head: dict) -> str:
    """Why the model code on this machine is not the code that wrote a file ("" when it is),
    checked on the bytes alone, before anything is imported: every file of the recorded listing
    ``system_files`` (:mod:`dyn.user.reach`: the module and what it reaches in its folder, by
    path relative to the folder it was imported from) must have the recorded sha256, and the
    listing its recorded ``system_sha256``. A file written before the listing records the
    module's sha256 alone. The generated kernels are made from those files, so they follow."""
    from ..user.identity import file_digest
    from ..user.reach import combined

    file, recorded = head.get("system_file", ""), head.get("system_sha256", "")
    listing = head.get("system_files")
    if not isinstance(listing, dict):
        now = file_digest(file)
        return (
            ""
            if now == recorded
            else (
                f"{file} is not the model that wrote the results "
                f"(sha256 {now[:12]}..., recorded "
                f"{recorded[:12] or '(none)'}...)"
            )
        )
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in listing.items()):
        return "the results' listing of the model's files is not text"
    if combined(listing) != recorded:
        return "the results' listing of the model's files does not match its recorded sha256"
    module = Path(file).resolve()
    own = [name for name in listing if module.as_posix().endswith("/" + name)]
    if not own:
        return f"the results' listing of the model's files does not hold its module {file}"
    base = Path(module.as_posix()[: -len(own[0]) - 1])
    for name, sha in listing.items():
        if name.startswith("<"):  # a generated kernel, made from the files checked here
            continue
        path = (base / name).resolve()
        if not path.is_relative_to(base) or not path.is_file():
            return f"{name}, a file of the model that wrote the results, is not on this machine"
        if file_digest(str(path)) != sha:
            return f"{path} is not the file that wrote the results (its sha256 differs)"
    return ""


def trusted_system(head: dict):
    """The system a file's scenario names, loaded (its module's top-level code runs) only after
    every file of its code on disk is checked against the recorded sha256s (:func:`code_problem`);
    one line when one differs, is missing, or the name is no system."""
    from .. import systems

    name, file = head.get("system"), head.get("system_file", "")
    recorded = head.get("system_sha256", "")
    if not isinstance(name, str) or not isinstance(file, str) or not isinstance(recorded, str):
        raise ScenarioError(FLAG, "the file's scenario does not name a system and its module")
    if ":" in name and not (file and recorded):
        raise ScenarioError(
            FLAG, f"the results record no module file and sha256 for {name!r}: nothing to check it against, not loaded"
        )
    if file or recorded:
        if not file or not Path(file).is_file():
            raise ScenarioError(
                FLAG, f"the model file {file or '?'} recorded by the results is not on this machine: not loaded"
            )
        problem = code_problem(head)
        if problem:
            raise ScenarioError(FLAG, f"{problem}: not loaded")
    try:
        return systems.get(name, file=file)
    except KeyError:
        raise ScenarioError(FLAG, f"the file names no known system ({name!r})") from None
