"""Reading a sweep file never runs code that the file names.

A results file is often someone else's: its scenario attribute names a module
(``system = "module:Class"``, ``system_file``), and importing it would run its top-level code.
Here a real sweep file is edited (two attributes, as a hostile sender would) to name a payload
module that writes a marker file when imported: by absolute path, by a path relative to the
working directory, by a bare module name (found on sys.path under ``python -m dyn``), and
``this:X`` (an importable standard module that prints when imported). Every reader (`dyn show`
and its options, `dyn plot` with and without --var, `dyn compare`, `dyn animate`, `dyn.open`)
must draw or show what the data holds, the marker must not exist afterwards, and no reader may
touch sys.path or sys.modules. The records the run wrote for readers are removed from the edited
files, so the readers' fallbacks for files written without them are exercised too.

The explicit opt-in (`--trust-model`) loads a model only when its file's sha256 is the one
recorded, and refuses a mismatch in one line.
"""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import h5py
import pytest
import tomli_w

import dyn
from dyn.engine.model_facts import DEFAULT_PLOT_ATTR, DEFAULTS_ATTR
from dyn.presentation.cli import main

REPO = Path(__file__).resolve().parents[1]
STATES = [
    "sweep.beta=[1.0, 2.0]",
    "sweep.form=['flow', 'network']",
    "params.depth=4",
    "ensemble.runs=2",
    "output.trajectories=true",
    "ensemble.common=['form']",
]


def _payload(folder: Path, module: str, marker: Path) -> Path:
    """A module that writes `marker` when imported (and defines a class X)."""
    path = folder / f"{module}.py"
    path.write_text(
        textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("ran")
        class X:
            pass
        """)
    )
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    """A finished small sweep with saved states along `form` (what every reader can read)."""
    from _scenarios import SMALL_SCENARIO
    from dyn.engine.scenario import apply_overrides, parse_toml

    folder = tmp_path_factory.mktemp("made")
    scenario = folder / "states.toml"
    scenario.write_text(tomli_w.dumps(apply_overrides(parse_toml(SMALL_SCENARIO), STATES)))
    return dyn.run(scenario, folder / "states.h5", progress=False, log=io.StringIO())


def _crafted(made: Path, folder: Path, system: str, file: str = "", sha: str = "") -> Path:
    """A copy of `made` (with its saved states) whose scenario names `system` from `file`,
    without the records for readers (a file of an older version)."""
    import shutil

    path = folder / "crafted.h5"
    shutil.copy(made, path)
    shutil.copytree(f"{made}.d", f"{path}.d")
    with h5py.File(path, "r+") as f:
        doc = tomllib.loads(f.attrs["scenario"])
        doc["scenario"]["system"] = system
        doc["scenario"]["system_file"] = file
        doc["scenario"]["system_sha256"] = sha
        doc["output"].pop("plot", None)  # the default variable: asked of the system
        f.attrs["scenario"] = tomli_w.dumps(doc)
        f.attrs["system"] = system
        del f.attrs[DEFAULT_PLOT_ATTR]
        del f.attrs[DEFAULTS_ATTR]
    return path


def _read_all(path: Path, folder: Path, every: bool = True) -> list[int]:
    """Every reader on `path` (`every`; else `dyn show` and `dyn plot` and `dyn.open`), in
    this process: their exit codes."""
    out = folder / "pictures"
    out.mkdir(exist_ok=True)
    codes = [main(["show", str(path)]), main(["plot", str(path), "--out", str(out / "a.png")])]
    with dyn.open(path) as ds:
        for name in ds.variables:
            ds[name].load()
    if not every:
        return codes
    return codes + [
        main(["show", str(path), "--errors"]),
        main(["show", str(path), "--scenario"]),
        main(["plot", str(path), "--var", "energy", "--out", str(out / "b.png")]),
        main(["plot", str(path), "--tokens", "--out", str(out / "c.png")]),
        main(
            [
                "compare",
                str(path),
                "--along",
                "form",
                "--reference",
                "flow",
                "--against",
                "beta",
                "--out",
                str(out / "d.png"),
            ]
        ),
        main(["animate", str(path), "--out", str(out / "e.gif")]),
    ]


@pytest.mark.parametrize(
    "where, every",
    [
        ("absolute", False),
        pytest.param("absolute", True, marks=pytest.mark.slow),
        pytest.param("relative", True, marks=pytest.mark.slow),
    ],
)
def test_no_reader_imports_the_module_a_file_names(made, tmp_path, monkeypatch, where, every, capsys):
    elsewhere = tmp_path / "sender"
    elsewhere.mkdir()
    marker = tmp_path / "payload_ran"
    payload = _payload(elsewhere, f"payload_{where}", marker)
    monkeypatch.chdir(elsewhere)
    file = str(payload) if where == "absolute" else payload.name
    path = _crafted(made, tmp_path, f"{payload.stem}:X", file, hashlib.sha256(payload.read_bytes()).hexdigest())
    path_before = list(sys.path)
    codes = _read_all(path, tmp_path, every)
    assert codes == [0] * len(codes), capsys.readouterr().err
    assert not marker.exists(), "a reader ran the module the file names"
    assert sys.path == path_before
    assert payload.stem not in sys.modules
    assert not [
        m
        for m, module in sys.modules.items()
        if str(getattr(module, "__file__", None) or "").startswith(str(elsewhere))
    ]
    shown = capsys.readouterr().out
    assert f"system {payload.stem}:X" in shown  # `dyn show` shows what the file says


@pytest.mark.slow
def test_a_file_naming_this_imports_nothing(made, tmp_path, capsys):
    """`this` prints the Zen of Python when imported: a file naming it must not."""
    path = _crafted(made, tmp_path, "this:X")
    already = "this" in sys.modules
    codes = _read_all(path, tmp_path)
    assert codes == [0] * len(codes)
    assert "Beautiful is better than ugly" not in capsys.readouterr().out
    assert already or "this" not in sys.modules


def test_the_default_variable_of_a_file_without_records_is_read_from_the_data(made, tmp_path):
    """A file without the records for readers names no shipped system: the picture draws the
    first drawable variable; the file's own record, when there, is what is drawn."""
    from dyn.presentation.plot import choose_variable, drawable

    path = _crafted(made, tmp_path, "nowhere:X", "/nonexistent/nowhere.py", "0" * 64)
    with dyn.open(path) as ds:
        assert choose_variable(ds, None) == drawable(ds)[0]
    with dyn.open(made) as ds:
        assert ds.attrs[DEFAULT_PLOT_ATTR] == dyn.systems.get("attention_sphere").default_plot
        assert choose_variable(ds, None) == ds.attrs[DEFAULT_PLOT_ATTR]


@pytest.mark.slow
def test_python_m_dyn_does_not_import_a_bare_module_name_from_the_cwd(made, tmp_path):
    """Under `python -m dyn` the working directory is first on sys.path: a bare module name in
    the file must still not be imported."""
    marker = tmp_path / "payload_ran"
    _payload(tmp_path, "payload_bare", marker)
    path = _crafted(made, tmp_path, "payload_bare:X")
    env = dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    for argv in (["plot", path.name, "--out", "p.png"], ["show", path.name]):
        done = subprocess.run(
            [sys.executable, "-m", "dyn", *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert not marker.exists(), argv


def test_trust_model_loads_only_the_recorded_module(made, tmp_path, capsys):
    """--trust-model: a module whose bytes differ from the recorded sha256 is refused in one
    line and not imported; the recorded one is loaded."""
    marker = tmp_path / "payload_ran"
    payload = _payload(tmp_path, "payload_trusted", marker)
    path = _crafted(made, tmp_path, "payload_trusted:X", str(payload), "0" * 64)
    code = main(["plot", str(path), "--trust-model", "--out", str(tmp_path / "t.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--trust-model" in err[0] and "sha256" in err[0], err
    assert not marker.exists()
    (tmp_path / "again").mkdir()
    path = _crafted(
        made, tmp_path / "again", "payload_trusted:X", str(payload), hashlib.sha256(payload.read_bytes()).hexdigest()
    )
    code = main(["plot", str(path), "--trust-model", "--out", str(tmp_path / "t.png")])
    assert marker.exists()  # the opt-in loads it (X is no dyn.System: refused in one line)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "not a subclass of dyn.System" in err[0], err


def test_trust_model_checks_every_file_the_model_reached(made, tmp_path, capsys):
    """--trust-model checks the recorded listing of the model's files (its module and the
    helpers beside it) before importing: an edited helper is named and nothing is imported."""
    from dyn.user.reach import combined

    marker = tmp_path / "payload_ran"
    payload = _payload(tmp_path, "payload_listed", marker)
    helper = tmp_path / "helper_listed.py"
    helper.write_text("SCALE = 1.0\n")
    files = {
        "helper_listed.py": hashlib.sha256(b"SCALE = 2.0\n").hexdigest(),
        "payload_listed.py": hashlib.sha256(payload.read_bytes()).hexdigest(),
    }
    path = _crafted(made, tmp_path, "payload_listed:X", str(payload), combined(files))
    with h5py.File(path, "r+") as f:
        doc = tomllib.loads(f.attrs["scenario"])
        doc["scenario"]["system_files"] = files
        f.attrs["scenario"] = tomli_w.dumps(doc)
    code = main(["plot", str(path), "--trust-model", "--out", str(tmp_path / "t.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "helper_listed.py" in err[0], err
    assert not marker.exists()
    helper.write_text("SCALE = 2.0\n")  # now every file is the recorded one: loaded
    main(["plot", str(path), "--trust-model", "--out", str(tmp_path / "t.png")])
    assert marker.exists()


# What the readers may import, by top-level name, besides the standard library (each with the
# reason it is needed); anything else met while they read a file is a module the file named, or
# a dependency nobody meant readers to have.
ALLOWED = {
    "dyn": "the engine's own modules",
    "integrators": "dyn's own solvers package (the engine's contract names its options)",
    "numpy": "arrays",
    "h5py": "the HDF5 files",
    "cython_runtime": "the module Cython's extensions (h5py) register",
    "h5netcdf": "xarray's engine for the sweep file",
    "xarray": "dyn.open returns a Dataset",
    "pandas": "xarray's indexes",
    "dateutil": "pandas",
    "packaging": "xarray, h5netcdf",
    "matplotlib": "dyn plot, compare and animate draw",
    "mpl_toolkits": "matplotlib",
    "PIL": "matplotlib writes PNG and GIF",
    "kiwisolver": "matplotlib's layout",
    "cycler": "matplotlib",
    "pyparsing": "matplotlib",
    "fontTools": "matplotlib's fonts",
    "scipy": "dyn's statistics (intervals, fits)",
    "dask": "dyn.open reads the saved states lazily",
    "cloudpickle": "dask",
    "toolz": "dask",
    "tlz": "dask",
    "yaml": "dask's configuration",
    "psutil": "dask",
    "importlib_metadata": "dask",
    "zipp": "importlib_metadata",
    "lazy_importer": "importlib_metadata",
    "tblib": "dask.multiprocessing",
    "jinja2": "dask.widgets",
    "markupsafe": "jinja2",
    "numba": "dyn's kernels the engine modules name",
    "llvmlite": "numba",
}
HOOK = """
import importlib.util
import sys
allowed = set(sys.argv[1].split(",")) | set(sys.stdlib_module_names)
met = []
class Refused:
    def create_module(self, spec):
        return None
    def exec_module(self, module):  # runs only when the module is imported, not probed
        met.append(module.__name__)
        raise ImportError(f"not allowed in a reader: {module.__name__}")
class Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in allowed or top.startswith("_"):
            return None
        for finder in sys.meta_path[1:]:
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                return importlib.util.spec_from_loader(name, Refused())
        return None
sys.meta_path.insert(0, Refuse())
import dyn
from dyn.presentation.cli import main
path, out = sys.argv[2], sys.argv[3]
codes = [main(["show", path]), main(["show", path, "--errors"]),
         main(["plot", path, "--out", out + "/a.png"]),
         main(["plot", path, "--tokens", "--out", out + "/b.png"]),
         main(["compare", path, "--along", "form", "--reference", "flow", "--against", "beta",
               "--out", out + "/c.png"]),
         main(["animate", path, "--out", out + "/d.gif"])]
with dyn.open(path) as ds:
    ds.load()
print("CODES", codes, "MET", sorted(set(met)))
"""


@pytest.mark.slow
def test_readers_import_only_dyn_and_its_dependencies(made, tmp_path):
    """Under an import hook that refuses every top-level module outside ALLOWED and the
    standard library, every reader reads a file naming a payload module, and the hook met
    nothing else (private C modules, "_name", are the libraries' own)."""
    marker = tmp_path / "payload_ran"
    _payload(tmp_path, "payload_hooked", marker)
    path = _crafted(made, tmp_path, "payload_hooked:X", str(tmp_path / "payload_hooked.py"))
    env = dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    done = subprocess.run(
        [sys.executable, "-c", HOOK, ",".join(ALLOWED), str(path), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [t for t in done.stdout.splitlines() if t.startswith("CODES")][-1]
    assert line == "CODES [0, 0, 0, 0, 0, 0] MET []", (line, done.stderr[-3000:])
    assert not marker.exists()
