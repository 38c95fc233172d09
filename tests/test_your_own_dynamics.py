"""Systems written outside the package (docs/your_own_system.md): the example folder
examples/your_own_dynamics copied outside the repository runs there with `dyn run sync.toml`, on
every executor, with the same numbers; its trajectories are those of a plain numpy reference;
its provenance is in the file, and a resume against an edited module is refused; an installed
package's system is listed by `dyn list`; bad input gets one line and exit 2; the builder's
numba drift agrees with its JAX form and, for the exponential kernel, with the engine's own
attention flow."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.presentation import cli
from dyn.user import reach

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "your_own_dynamics"
# a smaller sweep of the example for the default tier (the file's own runs in the slow one)
SMALL = [
    "--set",
    "sweep.beta=[1.0, 4.0]",
    "--set",
    "ensemble.runs=3",
    "--set",
    "integrator.horizon=4.0",
    "--set",
    "output.saves=8",
]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The example copied into an empty folder outside the repository, as the working folder;
    the user's module forgotten afterwards (another test's copy must import its own)."""
    where = tmp_path / "mine"
    shutil.copytree(EXAMPLE, where)
    monkeypatch.chdir(where)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield where
    for name in [m for m in sys.modules if m in ("my_sync", "bad_models", "toy_model")]:
        del sys.modules[name]


def _cli(*args) -> tuple[int, str]:
    err = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        code = cli.main(list(args))
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    return code, err.getvalue()


def _values(path) -> dict:
    with dyn.open(path) as ds:
        return {k: ds[k].values.copy() for k in ds.data_vars if ds[k].dtype.kind == "f"}


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k], equal_nan=True), k


def test_the_example_runs_outside_the_repository_serial_and_process_alike(folder):
    assert not str(folder).startswith(str(ROOT))
    code, err = _cli("run", "sync.toml", "--no-progress", *SMALL)
    assert code == 0, err
    code, err = _cli(
        "run", "sync.toml", "--no-progress", "--out", "pool.h5", "--executor", "process", "--workers", "2", *SMALL
    )
    assert code == 0, err
    serial = _values(folder / "outputs" / "sync.h5")
    _same(serial, _values(folder / "pool.h5"))
    assert "trajectory" in serial and (serial["n_clusters"][:, 0] == 12).all()
    with dyn.open(folder / "outputs" / "sync.h5") as ds:  # where the system came from
        text = ds.attrs["scenario"]
        assert (ds["status"].values == 1).all()
    source = (folder / "my_sync.py").read_bytes()
    assert f'system_file = "{folder / "my_sync.py"}"' in text
    head = tomllib.loads(text)["scenario"]  # the module's bytes, and one hash of all its code
    assert head["system_files"]["my_sync.py"] == hashlib.sha256(source).hexdigest()
    assert head["system_sha256"] == reach.combined(head["system_files"])
    assert 'system_module = "my_sync"' in text


def _sigmoid_sa_rk4(x0, beta, b, times, dt):
    """The example's flow, written plainly: RK4 on the engine's step grid, each stage's drift
    projected on the tangent space, the tokens renormalized after each step."""

    def field(x):
        w = 1.0 / (1.0 + np.exp(-(beta * (x @ x.T) + b)))
        u = (w / w.sum(axis=1, keepdims=True)) @ x
        return u - (u * x).sum(axis=1, keepdims=True) / (x * x).sum(axis=1, keepdims=True) * x

    x, out = x0.copy(), [x0.copy()]
    for t0, t1 in zip(times[:-1], times[1:], strict=True):
        steps = max(int(np.ceil((t1 - t0) / dt * (1 - 1e-9))), 1)
        h = (t1 - t0) / steps
        for _ in range(steps):
            k1 = field(x)
            k2 = field(x + h / 2 * k1)
            k3 = field(x + h / 2 * k2)
            k4 = field(x + h * k3)
            x = x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            x = x / np.linalg.norm(x, axis=1, keepdims=True)
        out.append(x.copy())
    return np.array(out)


def test_the_examples_trajectories_are_the_plain_reference(folder):
    out = dyn.run(
        folder / "sync.toml",
        folder / "ref.h5",
        progress=False,
        log=io.StringIO(),
        overrides=[s for s in SMALL if s != "--set"],
    )
    with dyn.open(out) as ds:
        states = ds["trajectory"].transpose("beta", "run", "trajectory_time", "token", "coordinate").values
        times, betas = ds["trajectory_time"].values, ds["beta"].values
    checked = 0
    for a, beta in enumerate(betas):
        for r in range(states.shape[1]):
            want = _sigmoid_sa_rk4(states[a, r, 0], beta, 0.0, times, 0.05)
            np.testing.assert_allclose(states[a, r], want, rtol=0, atol=1e-12)
            checked += 1
    assert checked == 4
    # the file is drawn where the module is not: `dyn plot` needs only the file
    (folder / "my_sync.py").rename(folder / "elsewhere.py")
    sys.modules.pop("my_sync", None)
    code, err = _cli("plot", str(out))
    assert code == 0 and (folder / "ref.png").exists(), err


def test_a_resume_against_an_edited_module_is_refused_then_overwritten(folder):
    code, err = _cli("run", "sync.toml", "--no-progress", *SMALL)
    assert code == 0, err
    with open(folder / "my_sync.py", "a") as f:
        f.write("# an edit\n")
    code, err = _cli("run", "sync.toml", "--no-progress", *SMALL)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "changed since: my_sync.py" in err
    code, err = _cli("run", "sync.toml", "--no-progress", "--overwrite", *SMALL)
    assert code == 0, err


BAD_MODELS = """
import numpy as np
import dyn


class Base(dyn.Model):
    name, description, default_plot = "bad", "bad", "x2"
    params = {"theta": dyn.Field("float", 1.0, "rate")}

    def outputs(self, setup):
        return [dyn.Output("x2", "x2", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 2, 3))

    def observe(self, spec, states):
        return dyn.Chunk({"x2": (np.asarray(states) ** 2).mean(axis=(2, 3))})


class Raises(Base):
    def drift(t, x, theta):
        if theta > 0.5:
            raise ValueError("theta too large for this model")
        return -theta * x


class WrongShape(Base):
    def drift(t, x, theta):
        return -theta * x[0]


class StartFails(Base):
    def drift(t, x, theta):
        return -theta * x

    def initial_state(self, spec, runs):
        return np.ones((runs, 2, spec["dimension"]))


def not_a_class():
    pass
"""


@pytest.mark.parametrize(
    "system, says",
    [
        ("nowhere:Sync", "no module 'nowhere'"),
        ("bad_models:Missing", "has no 'Missing'"),
        ("bad_models:not_a_class", "not a subclass of dyn.System"),
        ("bad_models:Raises", "ValueError: theta too large for this model"),
        ("bad_models:WrongShape", "returned shape (3,) for a state of shape (2, 3)"),
        ("broken:Sync", "RuntimeError: broken at import"),
        ("bad_models:StartFails", "KeyError: 'dimension'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(folder, system, says):
    (folder / "bad_models.py").write_text(BAD_MODELS)
    (folder / "broken.py").write_text("raise RuntimeError('broken at import')\n")
    (folder / "bad.toml").write_text(
        f'[scenario]\nname = "bad"\nsystem = "{system}"\n[integrator]\ndt = 0.1\n[output]\nsaves = 2\n'
    )
    code, err = _cli("run", "bad.toml", "--no-progress", "--out", "bad.h5")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert says in err and "Traceback" not in err
    assert not (folder / "bad.h5").exists()
    sys.modules.pop("broken", None)


PLUGIN = """
import numpy as np
import dyn


def repel(s, beta):
    return np.exp(-beta * s)


Repel = dyn.particles(repel, name="repel", description="repulsive tokens from a plugin",
                      params={"beta": dyn.Field("float", 1.0, "strength", gt=0.0)})
"""


def test_dyn_list_shows_an_installed_packages_system(tmp_path):
    site = tmp_path / "site"
    (site / "dyn_plugin").mkdir(parents=True)
    (site / "dyn_plugin" / "__init__.py").write_text(PLUGIN)
    info = site / "dyn_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dyn-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[dyn.systems]\nrepel_tokens = dyn_plugin:Repel\nbroken_one = dyn_plugin:Missing\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]))
    listed = subprocess.run(
        [sys.executable, "-m", "dyn", "list"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if line.startswith("  ")}
    assert "from a plugin" in lines["repel_tokens"], listed.stdout
    assert "cannot be loaded" in lines["broken_one"]  # one broken package hides no other
    assert "attention_sphere" in lines


@pytest.mark.parametrize(
    "geometry, normalization, positions, of",
    [
        ("sphere", "SA", False, "inner"),
        pytest.param("sphere", "USA", True, "inner", marks=pytest.mark.slow),
        pytest.param("euclidean", "none", False, "inner", marks=pytest.mark.slow),
        ("euclidean", "SA", False, "distance"),
        pytest.param("circle", "sinkhorn", True, "inner", marks=pytest.mark.slow),
    ],
)
def test_the_builders_numba_drift_agrees_with_its_jax_form(geometry, normalization, positions, of):
    if positions:

        def phi(s, i, j, beta):
            return np.exp(beta * s) * (j <= i)

        def phi_jax(s, i, j, beta):
            import jax.numpy as jnp

            return jnp.exp(beta * s) * (j <= i)
    else:

        def phi(s, beta):
            return (1.0 + s) ** 2 * beta

        def phi_jax(s, beta):
            return (1.0 + s) ** 2 * beta

    cls = dyn.particles(
        phi,
        interaction_jax=phi_jax,
        name="pair",
        geometry=geometry,
        normalization=normalization,
        of=of,
        params={"beta": dyn.Field("float", 1.0, "beta")},
    )
    rng = np.random.default_rng(7)
    d = 2 if geometry == "circle" else 3
    for _ in range(3):
        x = rng.standard_normal((5, d))
        if geometry != "euclidean":
            x /= np.linalg.norm(x, axis=1, keepdims=True)
        assert cls.twin_error(x, beta=rng.uniform(0.2, 2.0)) <= 1e-12 * 10


@pytest.mark.slow  # the default tier runs the whole flow against attention_sphere, bit for bit
def test_the_exponential_kernel_is_the_engines_attention_flow():
    """phi(s) = e^{beta s} with SA (and USA) is the flow of `attention_sphere`: the builder's
    projected drift equals the engine's attention drift."""
    import integrators
    from dyn.attention import architecture, schemes
    from dyn.core.spec import Setup, Solver

    def exp_kernel(s, beta):
        return np.exp(beta * s)

    rng = np.random.default_rng(11)
    system = dyn.systems.get("attention_sphere")
    for normalization in ("SA", "USA"):
        cls = dyn.particles(
            exp_kernel, name="exp", normalization=normalization, params={"beta": dyn.Field("float", 1.0, "beta")}
        )
        values = {k: f.default for k, f in system.params.items()}
        values.update(n=6, d=3, beta=1.7, normalization=normalization)
        setup = Setup(params=values, axes={}, runs=1, seed=0, horizon=1.0, saves=1, solver=Solver("numba", "rk4", {}))
        spec = setup.spec(0, system)
        engine = schemes.scheme("post").flow.problem(architecture.pack_values(spec.values, setup.common_rng))
        x = rng.standard_normal((6, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        want, got = np.empty_like(x), np.empty_like(x)
        engine.drift(0.0, x, np.array(engine.p), want, np.empty(engine.work_size(6, 3)))
        integrators.SPHERE.project(x, want)
        p = cls.pack({"beta": 1.7})
        cls.numba_function("drift")(0.0, x, p, got, np.empty(cls.work_size(6, 3, p)))
        integrators.SPHERE.project(x, got)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)


def test_the_example_module_is_short():
    assert len((EXAMPLE / "my_sync.py").read_text().splitlines()) <= 45


@pytest.mark.slow
def test_the_example_on_a_dask_cluster_gives_the_serial_numbers(folder):
    code, err = _cli("run", "sync.toml", "--no-progress")
    assert code == 0, err
    code, err = _cli("run", "sync.toml", "--no-progress", "--out", "dask.h5", "--executor", "dask", "--workers", "2")
    assert code == 0, err
    _same(_values(folder / "outputs" / "sync.h5"), _values(folder / "dask.h5"))


KILL_AFTER_WRITE = textwrap.dedent("""
    import os, signal, sys
    from dyn.presentation import cli
    from dyn.engine import store
    write, seen = store.Writer.write, []
    def writing(self, index, result):
        write(self, index, result)
        seen.append(1)
        if len(seen) == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
    store.Writer.write = writing
    sys.exit(cli.main(sys.argv[2:]))
""")


@pytest.mark.slow
def test_the_example_killed_then_resumed_gives_the_same_numbers(folder):
    code, err = _cli("run", "sync.toml", "--no-progress", "--out", "whole.h5")
    assert code == 0, err
    (folder / "kill.py").write_text(KILL_AFTER_WRITE)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "kill.py", "1", "run", "sync.toml", "--no-progress", "--out", "killed.h5"],
        capture_output=True,
        env=env,
        cwd=folder,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with dyn.open(folder / "killed.h5") as ds:
        assert (ds["status"].values == 1).sum() == 1
    code, err = _cli("run", "sync.toml", "--no-progress", "--out", "killed.h5")
    assert code == 0, err
    _same(_values(folder / "whole.h5"), _values(folder / "killed.h5"))


ATTENTION = """
[scenario]
name = "{name}"
system = "{system}"
[params]
n = 6
d = 3
delta = 0.01
[sweep]
beta = [0.5, 3.0]
[ensemble]
runs = 3
seed = 4
[integrator]
method = "rk4"
dt = 0.1
horizon = 3.0
[output]
saves = 6
"""


def test_the_exponential_kernel_runs_the_engines_attention_flow(folder):
    """particles("exp") is `attention_sphere` (post-LN flow, SA): the same starts, solve and
    observables, so the same numbers bit for bit."""
    (folder / "attn.py").write_text("import dyn\n\nSoftmax = dyn.particles('exp', name='softmax')\n")
    outs = {}
    for system in ("attention_sphere", "attn:Softmax"):
        name = system.split(":")[0]
        (folder / f"{name}.toml").write_text(ATTENTION.format(name=name, system=system))
        outs[system] = _values(
            dyn.run(folder / f"{name}.toml", folder / f"{name}.h5", progress=False, log=io.StringIO())
        )
    mine, engine = outs["attn:Softmax"], outs["attention_sphere"]
    shared = set(mine) & set(engine)
    assert {"pair_fraction", "min_inner", "n_clusters", "p_one_cluster", "time_to_one_cluster", "energy"} <= shared
    # attention_sphere observes inside its step loop and reads the energy off the field's
    # normalizers, e^c sum_i Z_i, where the particles' observation exponentiates the pairs again:
    # the same sum in another order, so the energy (and its standard error) agree to rounding
    # only (measured: 4e-16 relative); everything else, the same arithmetic, bit for bit
    rounded = {k for k in shared if k.startswith("energy")}
    _same({k: mine[k] for k in shared - rounded}, {k: engine[k] for k in shared - rounded})
    for k in rounded:
        np.testing.assert_allclose(mine[k], engine[k], rtol=1e-13, atol=1e-15, err_msg=k)
    sys.modules.pop("attn", None)


def test_a_dask_worker_that_cannot_import_the_module_stops_the_run_in_one_line():
    from dyn.engine import executors

    class Refusing:  # what distributed.Client.upload_file raises when a worker's import fails
        def upload_file(self, path):
            raise ImportError("No module named 'scipy_fork' (on worker tcp://10.0.0.7:4242)")

    with pytest.raises(dyn.ScenarioError) as caught:
        executors.ship_modules(Refusing(), ["/somewhere/my_sync.py"])
    text = str(caught.value)
    assert len(text.splitlines()) == 1 and "my_sync.py" in text and "scipy_fork" in text


def test_the_examples_numba_and_jax_forms_agree(folder):
    """The drift-pair check, wherever a model has both forms: the example's sigmoid."""
    sys.path.insert(0, str(folder))
    import my_sync

    rng = np.random.default_rng(5)
    for _ in range(3):
        x = rng.standard_normal((7, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        values = dict(beta=rng.uniform(0.5, 9.0), b=rng.uniform(-1, 1))
        assert my_sync.Sync.twin_error(x, **values) <= 1e-12


ONE_FORM = """
import numpy as np
import dyn


class Decay(dyn.Model):
    name, description, default_plot = "decay", "dx/dt = -k x", "x"
    params = {"k": dyn.Field("float", 1.0, "rate", gt=0.0)}

    def outputs(self, setup):
        return [dyn.Output("x", "x(t)", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 1, 1))

    def observe(self, spec, states):
        return dyn.Chunk({"x": np.asarray(states)[..., 0, 0]})


class NumbaOnly(Decay):
    def drift(t, x, k):
        return -k * x


class JaxOnly(Decay):
    def drift_jax(t, x, k):
        return -k * x
"""


@pytest.mark.parametrize("system, backend", [("NumbaOnly", "diffrax"), ("JaxOnly", "numba"), ("JaxOnly", "jax")])
def test_a_model_runs_on_the_backends_of_the_forms_it_has(folder, system, backend):
    """numba alone: the numba backend; JAX alone: diffrax and jax; the others are refused in
    one line naming what is missing."""
    (folder / "one_form.py").write_text(ONE_FORM)
    (folder / "decay.toml").write_text(
        f'[scenario]\nname = "decay"\nsystem = "one_form:{system}"'
        f'\n[integrator]\nbackend = "{backend}"\ndt = 0.1\n'
        "[output]\nsaves = 2\n"
    )
    code, err = _cli("run", "decay.toml", "--no-progress", "--out", "decay.h5")
    if (system, backend) == ("JaxOnly", "jax"):
        assert code == 0, err
        with dyn.open(folder / "decay.h5") as ds:  # rk4 at dt = 0.1: error O(dt^4)
            np.testing.assert_allclose(ds["x"].values, np.exp(-np.array([0, 0.5, 1.0])), rtol=1e-6)
    else:
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "integrator.backend" in err and ("drift_jax" in err if backend != "numba" else ".drift " in err)
        assert not (folder / "decay.h5").exists()
    sys.modules.pop("one_form", None)


def test_the_readme_shows_the_example_module_whole():
    assert (EXAMPLE / "my_sync.py").read_text() in (ROOT / "README.md").read_text()


GAUSSIAN = """
import numpy as np
import dyn


def gaussian(s, width):  # s = |x_i - x_j|^2: symmetric, so sum_i dx_i/dt = 0
    return np.exp(-s / width**2)


Consensus = dyn.particles(gaussian, name="consensus", geometry="euclidean", normalization="none",
                          of="distance", params={"width": dyn.Field("float", 1.0, "width", gt=0)})
"""


def test_a_symmetric_kernel_in_rd_keeps_the_tokens_mean(folder):
    """w_ij = exp(-|x_i - x_j|^2 / width^2) unnormalized: sum_ij w_ij (x_j - x_i) = 0, so the
    mean of the tokens is an invariant RK4 keeps up to rounding, while the tokens contract."""
    (folder / "consensus.py").write_text(GAUSSIAN)
    (folder / "consensus.toml").write_text(
        '[scenario]\nname = "c"\nsystem = "consensus:Consensus"\n[params]\nn = 7\nd = 2\n'
        "width = 1.5\ndelta = 0.05\n[ensemble]\nruns = 3\n[integrator]\ndt = 0.05\n"
        "horizon = 10.0\n[output]\nsaves = 10\ntrajectories = true\n"
    )
    out = dyn.run(folder / "consensus.toml", folder / "c.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        x = ds["trajectory"].transpose("run", "trajectory_time", "token", "coordinate").values
        spread = ds["spread"].values
    mean = x.mean(axis=2)
    np.testing.assert_allclose(mean, np.broadcast_to(mean[:, :1], mean.shape), rtol=0, atol=1e-13)
    assert spread[-1] < 0.5 * spread[0]  # and they draw together
    sys.modules.pop("consensus", None)


def test_run_until_decided_continues_the_runs_as_one_longer_run_would(folder):
    """until_decided: runs not in one cluster at the horizon T go on in stretches of T up to
    decide_cap T. The flow is autonomous, so each run's decision time is the first multiple of
    T at which it is one cluster in one run to decide_cap T saved every T: the same numbers."""
    sets = ["sweep.beta=[1.0, 9.0]", "ensemble.runs=6", "output.trajectories=false", "integrator.dt=0.1"]
    decided = dyn.run(
        folder / "sync.toml",
        folder / "decided.h5",
        progress=False,
        log=io.StringIO(),
        overrides=sets
        + ["integrator.horizon=4.0", "output.saves=1", "params.until_decided=true", "params.decide_cap=5.0"],
    )
    longer = dyn.run(
        folder / "sync.toml",
        folder / "longer.h5",
        progress=False,
        log=io.StringIO(),
        overrides=sets + ["integrator.horizon=20.0", "output.saves=5"],
    )
    with dyn.open(decided) as a, dyn.open(longer) as b:
        assert np.array_equal(a["decision_time"].values, b["time_to_one_cluster"].values)
        assert np.array_equal(a["n_undecided"].values, 6 - b["n_one_cluster"].values[:, -1])
        assert (a["decision_time"].values > 4.0).any()  # some runs went past the horizon
