"""Attention of one's own (dyn.attention_particles): with Q = K = V = I and beta its field is the
engine's attention flow bit for bit (with Q = K = sqrt(beta) I to 1e-13); heads average;
matrices given by a law are drawn from the point's (or the run's) own stream, the same on every
executor; a matrix of the wrong order and a normalization whose weights are not a distribution
are refused in one line, exit 2. The example examples/your_own_transformer runs outside the
repository with the same numbers serial, in a process pool, on a Dask cluster and after a kill
and a resume."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import dyn
from dyn.core import laws
from dyn.presentation import cli
from dyn.user import attention_jit

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "your_own_transformer"
Softmax = dyn.attention_particles(name="Softmax")
Sparse = dyn.attention_particles(name="Sparse", normalization="sparsemax")


def _sphere(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _field(cls, x, p):
    out = np.empty_like(x)
    cls.numba_function("drift")(0.0, x, p, out, np.empty(cls.work_size(*x.shape, p)))
    return out


def test_identity_matrices_give_the_engines_attention_field():
    import integrators
    from dyn.attention import architecture, schemes

    rng = np.random.default_rng(3)
    for n, d, beta in [(7, 3, 1.0), (16, 5, 4.5), (33, 2, 0.3)]:
        x = _sphere(rng, n, d)
        eye = np.eye(d)[None]
        mine = _field(Softmax, x, attention_jit.pack(1.0, 0, 0, np.sqrt(beta) * eye, np.sqrt(beta) * eye, eye))
        swept = _field(Softmax, x, attention_jit.pack(beta, 0, 0, eye, eye, eye))
        problem = schemes.scheme("post").flow.problem(
            architecture.pack_values({"d": d, "beta": beta, "normalization": "SA"})
        )
        want = _field_of(problem, x)
        for got in (mine, swept):
            integrators.SPHERE.project(x, got)
        np.testing.assert_allclose(mine, want, rtol=0, atol=1e-13)  # M = (sqrt(beta))^2 I, rounded
        assert np.array_equal(swept.view(np.int64), want.view(np.int64))  # the engine's own calls


def _field_of(problem, x):
    import integrators

    out = np.empty_like(x)
    problem.drift(0.0, x, np.array(problem.p), out, np.empty(problem.work_size(*x.shape)))
    integrators.SPHERE.project(x, out)
    return out


def test_the_field_is_its_formula_with_heads_and_a_difference_residual():
    rng = np.random.default_rng(4)
    n, d, heads, beta = 9, 4, 3, 0.7
    x = rng.standard_normal((n, d))
    q, k, v = (rng.standard_normal((heads, d, d)) for _ in range(3))
    Diff = dyn.attention_particles(name="Diff", geometry="euclidean")
    got = _field(Diff, x, Diff.pack_matrices(beta, q, k, v))
    want = np.zeros_like(x)
    for h in range(heads):
        s = beta * (x @ q[h].T) @ (x @ k[h].T).T
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        want += (a @ x - x) @ v[h].T / heads
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_usa_is_its_formula_with_heads():
    """USA with the residual x_j runs the engine's field: (1/H) sum_h sum_j e^{s^h_ij} V_h x_j / n."""
    rng = np.random.default_rng(8)
    n, d, heads, beta = 11, 3, 2, 0.9
    x = _sphere(rng, n, d)
    q, k, v = (rng.standard_normal((heads, d, d)) for _ in range(3))
    Usa = dyn.attention_particles(name="Usa", normalization="usa")
    got = _field(Usa, x, Usa.pack_matrices(beta, q, k, v))
    want = sum(np.exp(beta * (x @ q[h].T) @ (x @ k[h].T).T) @ x @ v[h].T / n for h in range(heads)) / heads
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)


# slow tier: a field compiled for it alone; by default sparsemax is checked against its numpy
# reference in tests/test_normalizations.py, and the field calls a row normalization row by row
# in test_a_user_normalization_is_called_row_by_row
@pytest.mark.slow
def test_sparsemax_attention_is_its_numpy_reference():
    from tests.test_normalizations import sparsemax_reference

    rng = np.random.default_rng(5)
    x = _sphere(rng, 12, 3)
    x[3] = x[7]  # equal tokens: tied scores
    q, k = rng.standard_normal((2, 1, 3, 3))
    got = _field(Sparse, x, attention_jit.pack(2.0, 0, 0, q, k, np.eye(3)[None]))
    s = 2.0 * (x @ q[0].T) @ (x @ k[0].T).T
    want = np.array([sparsemax_reference(row) for row in s]) @ x
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_laws_draw_from_their_own_streams():
    law = {"law": "orthogonal", "scale": 2.0, "draw": "run"}
    a = laws.draw("Q", law, "matrices", 4, seed=1, stream=0, run=3)
    assert a.shape == (1, 4, 4)
    np.testing.assert_allclose(a[0] @ a[0].T, 4 * np.eye(4), atol=1e-12)
    assert np.array_equal(a, laws.draw("Q", law, "matrices", 4, seed=1, stream=0, run=3))
    assert not np.array_equal(a, laws.draw("Q", law, "matrices", 4, seed=1, stream=0, run=4))
    assert not np.array_equal(a, laws.draw("K", law, "matrices", 4, seed=1, stream=0, run=3))
    common = {"law": "gaussian", "scale": 1.0, "draw": "common", "heads": 2}
    b = laws.draw("V", common, "matrices", 3, seed=1, stream=0)
    assert b.shape == (2, 3, 3)
    assert np.array_equal(b, laws.draw("V", common, "matrices", 3, seed=1, stream=5))
    eye = laws.draw("V", {"law": "identity", "scale": 0.5, "draw": "point"}, "matrix", 3, 1, 0)
    assert np.array_equal(eye, 0.5 * np.eye(3))


def _cli(*args) -> tuple[int, str]:
    err = io.StringIO()
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), err
    try:
        code = cli.main(list(args))
    finally:
        sys.stdout, sys.stderr = stdout, stderr
    return code, err.getvalue()


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The example copied into an empty folder outside the repository, as the working folder."""
    where = tmp_path / "mine"
    shutil.copytree(EXAMPLE, where)
    monkeypatch.chdir(where)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield where
    for name in [m for m in sys.modules if m in ("my_transformer", "bad_attention")]:
        del sys.modules[name]


BAD = """
import numpy as np
import dyn


def halves(s):
    return np.full(s.shape[0], 0.5)


def shifted(s):
    return s - s.mean() + 1.0 / s.shape[0]


Halves = dyn.attention_particles(name="Halves", normalization=halves)
Shifted = dyn.attention_particles(name="Shifted", normalization=shifted)
Plain = dyn.attention_particles(name="Plain")
"""


# Halves and Shifted each compile a field of their own: slow tier; by default
# tests/test_normalizations.py::test_row_check_names_weights_that_are_not_a_distribution checks
# the same refusals
@pytest.mark.parametrize(
    "system, extra, says",
    [
        pytest.param("Halves", "", "summing to", marks=pytest.mark.slow),
        pytest.param("Shifted", "", "negative weight", marks=pytest.mark.slow),
        ("Plain", "Q = [[1.0, 0.0], [0.0, 1.0]]", "params.Q: is 2 x 2; the state's dimension is d = 3"),
        ("Plain", 'Q = {law = "gaussian", size = 4}', "params.Q: is 4 x 4"),
        ("Plain", 'V = {law = "haar"}', "params.V: law must be one of"),
        (
            "Plain",
            "d = 2\nK = [[[1.0, 0.0], [0.0, 1.0]]] \nQ = [[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 1.0]]]\n"
            "V = [[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 1.0]], [[3.0, 0.0], [0.0, 1.0]]]",
            "heads",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(folder, system, extra, says):
    (folder / "bad_attention.py").write_text(BAD)
    (folder / "bad.toml").write_text(
        f'[scenario]\nname = "bad"\nsystem = "bad_attention:{system}"'
        f"\n[params]\nn = 5\n{extra}\n[integrator]\ndt = 0.1\n"
        "horizon = 0.2\n[output]\nsaves = 2\n"
    )
    code, err = _cli("run", "bad.toml", "--no-progress")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("dyn: ") and says in err, err
    assert not (folder / "outputs" / "bad.h5").exists()


def _values(path) -> dict:
    with dyn.open(path) as ds:
        return {k: ds[k].values.copy() for k in ds.data_vars if ds[k].dtype.kind == "f"}


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k], equal_nan=True), k


def test_the_example_is_short():
    assert len((EXAMPLE / "my_transformer.py").read_text().splitlines()) <= 60


@pytest.mark.slow
def test_the_example_runs_outside_the_repository_serial_process_and_dask_alike(folder):
    assert not str(folder).startswith(str(ROOT))
    code, err = _cli("run", "transformer.toml", "--no-progress")
    assert code == 0, err
    serial = _values(folder / "outputs" / "transformer.h5")
    assert (serial["n_clusters"][:, 0] > 11).all() and (serial["n_clusters"][:, -1] < 8).all()
    for executor in ("process", "dask"):
        code, err = _cli(
            "run",
            "transformer.toml",
            "--no-progress",
            "--out",
            f"{executor}.h5",
            "--executor",
            executor,
            "--workers",
            "2",
        )
        assert code == 0, err
        _same(serial, _values(folder / f"{executor}.h5"))


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
    code, err = _cli("run", "transformer.toml", "--no-progress", "--out", "whole.h5")
    assert code == 0, err
    (folder / "kill.py").write_text(KILL_AFTER_WRITE)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "kill.py", "1", "run", "transformer.toml", "--no-progress", "--out", "killed.h5"],
        capture_output=True,
        env=env,
        cwd=folder,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    code, err = _cli("run", "transformer.toml", "--no-progress", "--out", "killed.h5")
    assert code == 0, err
    _same(_values(folder / "whole.h5"), _values(folder / "killed.h5"))


def _my_softmax(s):
    w = np.exp(s - s.max())
    return w / w.sum()


def test_a_user_normalization_is_called_row_by_row():
    Mine = dyn.attention_particles(name="Mine", normalization=_my_softmax)
    rng = np.random.default_rng(6)
    x = _sphere(rng, 10, 3)
    q, k, v = rng.standard_normal((3, 2, 3, 3))
    p = attention_jit.pack(1.3, 0, 0, q, k, v)
    np.testing.assert_allclose(_field(Mine, x, p), _field(Softmax, x, p), rtol=0, atol=1e-13)
