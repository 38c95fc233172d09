"""A block kernel called from Python with kernels as first-class arguments (drift, projection,
retraction, observer): integrators.numba.internals.install_argument_memo skips numba's per-call
look-ups of their compiled addresses and their type. Checked here: the addresses it hands numba
are numba's own (so the same code runs), the solvers' outputs are bit for bit those of numba's
own look-ups (fixed-step stored and observed, adaptive, Euler-Maruyama, a user's dyn.Model), an
exception raised inside a block still reaches the caller, a kernel numba compiles again is looked
up again, and where numba's layout differs nothing is replaced (the plain path, where nothing is
installed at all, is checked in tests/test_numba_seam.py)."""
from __future__ import annotations

import types

import numba
import numpy as np
import pytest

import dyn
import integrators
from integrators import jit
from integrators.core.geometry import SPHERE
from integrators.numba import internals
from integrators.numba_abi import DRIFT_SIG, NJIT
from dyn.attention import architecture, schemes
from dyn.attention.observer import pair_observer

from _problems import SPHERE_P, SPHERE_X0, sphere_drift

needs_memo = pytest.mark.skipif(not internals.argument_memo_installed(),
                                reason="the plain path: numba's own look-ups, nothing to compare")


@pytest.fixture
def two_threads():
    """Two threads, so the members run in several blocks (tests/conftest.py sets one in its
    workers)."""
    threads = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    yield numba.get_num_threads()
    numba.set_num_threads(threads)


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _both(solve):
    """solve() under numba's own look-ups, then remembered (twice: the second from the memo)."""
    with internals.numbas_own_lookups():
        stock = solve()
    return stock, solve(), solve()


def _attention():
    p = architecture.pack_architecture(4.0, 2, "SA")
    problem = schemes.scheme("post").network.problem(p)
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=(9, 8, 2))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    return problem, x0, np.linspace(0.0, 2.0, 6)


def _solution_arrays(sol) -> dict:
    """Every array a Solution carries, by name."""
    found = {name: getattr(sol, name) for name in ("status", "last_state", "states",
                                                   "observations")}
    found.update({f"stats.{k}": v for k, v in sol.stats.items()})
    return {k: np.asarray(v) for k, v in found.items() if v is not None}


def _all_same_bits(runs) -> bool:
    return all(set(run) == set(runs[0]) and all(_same_bits(runs[0][k], run[k]) for k in run)
               for run in runs[1:])


@needs_memo
def test_the_remembered_addresses_are_numbas_own(two_threads):
    """After an observed solve every kernel passed remembers, for each call site, the address
    numba's own look-up gives (wrapper and compiled function alike), and nothing else."""
    problem, x0, ts = _attention()
    obs = pair_observer(8, 2, 1e-3, beta=4.0)
    integrators.get("numba", "euler", dt=0.1).solve(problem, x0, ts, observer=obs)
    passed = [problem.drift, problem.geometry.project, problem.geometry.retract, obs.kernel]
    for kernel in passed:
        memo = kernel.__dict__.get("dyn_addresses")
        assert memo, f"{kernel} was passed but remembers no address"
        kinds = set()
        for (name, _), (sig, addr, _, _) in memo.items():
            assert addr == internals._ADDRESS_STOCK[name](kernel, sig) > 0
            kinds.add(name)
        assert kinds == {"_get_wrapper_address", "_get_jit_address"}


@needs_memo
@pytest.mark.parametrize("method", ["euler", "rk4", "dopri5", "bosh3"])
def test_the_solvers_give_numbas_own_lookups_bits(two_threads, method):
    """Stored states of the fixed-step and adaptive solvers on the sphere, with several blocks
    per thread: the same bytes under numba's own look-ups and remembered."""
    problem = integrators.Problem(sphere_drift, None, SPHERE_P, SPHERE)
    x0 = np.concatenate([SPHERE_X0] * 4)  # 12 members: 4 blocks on 2 threads
    ts = np.linspace(0.0, 1.0, 5)
    options = {"dt": 0.05} if method in ("euler", "rk4") else {"rtol": 1e-8, "atol": 1e-10}
    solver = integrators.get("numba", method, **options)
    runs = _both(lambda: _solution_arrays(solver.solve(problem, x0, ts)))
    assert np.isfinite(runs[0]["states"]).all() and runs[0]["states"].shape == (12, 5, 4, 3)
    assert _all_same_bits(runs)


@needs_memo
def test_the_observed_network_layers_give_numbas_own_lookups_bits(two_threads):
    """The main job's kernel (one-stage observed, the attention layer and the pair observer):
    rows, last states and statuses, the same bytes."""
    problem, x0, ts = _attention()
    obs = pair_observer(8, 2, 1e-3, beta=4.0)
    solver = integrators.get("numba", "euler", dt=0.1)
    runs = _both(lambda: _solution_arrays(solver.solve(problem, x0, ts, observer=obs)))
    rows = runs[0]["observations"]
    assert np.isfinite(rows[..., :2]).all() and rows.shape == (9, 6, obs.columns)
    assert _all_same_bits(runs)


class Ornstein(dyn.Model):
    """A user's model (docs/your_own_system.md): its drift is numba's own eager dispatcher,
    made by dyn.user.jit, not one of the project's deferred kernels."""

    name, description, default_plot = "dispatch_ou", "OU through the block kernels", "x"
    params = {"theta": dyn.Field("float", 1.0, "rate", gt=0.0),
              "sigma": dyn.Field("float", 0.5, "noise", gt=0.0)}

    def drift(t, x, theta):
        return -theta * x

    def diffusion(t, x, dw, sigma):
        return sigma * dw

    def outputs(self, setup):
        return [dyn.Output("x", "x", dims=("time",))]

    def initial_state(self, spec, runs):
        return np.ones((runs, 1, 2))

    def observe(self, spec, states):
        return dyn.Chunk({"x": np.asarray(states).mean(axis=(2, 3))})


@needs_memo
@pytest.mark.parametrize("method", ["euler", "euler_maruyama"])
def test_a_users_model_gives_numbas_own_lookups_bits(two_threads, method):
    """A dyn.Model's drift (and diffusion) through the same block kernels: the same bytes, and
    its drift (numba's own dispatcher) remembers its addresses too."""
    drift = Ornstein.numba_function("drift")
    noise = {}
    if method == "euler_maruyama":
        noise = dict(diffusion=Ornstein.numba_function("diffusion"), noise_shape=(1, 2))
    problem = integrators.Problem(drift, None, np.array([0.7, 0.5]), **noise)
    x0 = np.linspace(-1.0, 1.0, 16).reshape(8, 1, 2)
    ts = np.linspace(0.0, 1.0, 5)
    solver = integrators.get("numba", method, dt=0.05)

    def solve():
        extra = {"rng": np.random.default_rng(11)} if noise else {}
        return _solution_arrays(solver.solve(problem, x0, ts, **extra))

    runs = _both(solve)
    assert np.isfinite(runs[0]["states"]).all() and runs[0]["states"].shape == (8, 5, 1, 2)
    assert _all_same_bits(runs)
    assert not isinstance(drift, internals.DeferredDispatcher) and drift.__dict__["dyn_addresses"]


@jit.njit(DRIFT_SIG, **NJIT)
def raising_drift(t, x, p, out, work):
    """out = -x, until t passes p[0]: then a ValueError (numba raises it to the caller)."""
    if t > p[0]:
        raise ValueError("the drift refuses a time past p[0]")
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[i, k] = -x[i, k]


def test_an_exception_raised_in_a_block_reaches_the_caller(two_threads):
    """The drift raises inside the blocks (every member): the solve raises its ValueError,
    remembered as with numba's own look-ups (the compiled function's address is what carries an
    exception back: through the C wrapper alone it would be printed and lost), and a solve that
    does not raise still runs."""
    x0 = np.ones((8, 2, 2))
    solver = integrators.get("numba", "euler", dt=0.1)

    def raised():
        problem = integrators.Problem(raising_drift, None, np.array([0.3]))
        try:
            solver.solve(problem, x0, np.linspace(0.0, 1.0, 3))
        except ValueError as error:
            return str(error)
        return None

    with internals.numbas_own_lookups():
        stock = raised()
    assert raised() == stock
    if jit.optimized():  # the numba this was checked against propagates it
        assert stock == "the drift refuses a time past p[0]"
    fine = solver.solve(integrators.Problem(raising_drift, None, np.array([5.0])),
                        x0, np.linspace(0.0, 1.0, 3))
    assert np.allclose(fine.states[:, -1], 0.9 ** 10)  # x' = -x by Euler, 10 steps of 0.1


SCALE = 1.0  # read by rescaled_drift when numba compiles it


def rescaled_drift(t, x, p, out, work):  # numba's own eager kernel, made in the test
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            out[i, k] = -SCALE * x[i, k]


@needs_memo
def test_a_kernel_numba_compiles_again_is_looked_up_again(two_threads):
    """numba's ``recompile`` (a user's kernel read a global that changed) replaces its overload
    and its address: the next solve runs the new code, as numba's own look-ups do."""
    global SCALE
    drift = numba.njit(DRIFT_SIG, nogil=True, error_model="numpy")(rescaled_drift)
    problem = integrators.Problem(drift, None, np.zeros(0))
    x0 = np.ones((6, 1, 2))
    ts = np.linspace(0.0, 0.5, 2)
    solver = integrators.get("numba", "euler", dt=0.1)
    before = solver.solve(problem, x0, ts).states[:, -1]
    assert drift.__dict__["dyn_addresses"]
    try:
        SCALE = 2.0
        drift.recompile()
        after = solver.solve(problem, x0, ts).states[:, -1]
        with internals.numbas_own_lookups():
            stock = solver.solve(problem, x0, ts).states[:, -1]
    finally:
        SCALE = 1.0
    assert np.allclose(before, 0.9 ** 5) and np.allclose(after, 0.8 ** 5)
    assert _same_bits(after, stock)


def test_another_numba_layout_replaces_nothing():
    """A numba whose function_type module lacks either look-up: nothing is replaced, numba's
    own look-ups run (the plain path installs nothing: tests/test_numba_seam.py)."""
    stock = dict(internals._ADDRESS_STOCK)
    other = types.SimpleNamespace(_get_wrapper_address=len)
    assert internals._replace_lookups(other) is False
    assert other._get_wrapper_address is len and not hasattr(other, "_get_jit_address")
    assert internals._ADDRESS_STOCK == stock
    assert internals.argument_memo_installed() == (jit.optimized() and bool(stock))
