"""The `jax` backend (dyn.engine.batched): whole batches of points as one JAX computation, on the CPU
here. It must give the numba backend's answers (in law where the noise differs, to rounding
where the two share starts and paths) and the same numbers for the same seed and point,
whatever batch a point runs in."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dyn
from dyn.engine import batched

PHASE = "scenarios/two_token_phase.toml"
GRID = {
    "sweep.beta": [1.0, 3.0, 6.0],
    "sweep.d": [3, 16],
    "ensemble.runs": 1500,
    "params.until": "horizon",
    "integrator.horizon": 60.0,
    "integrator.dt": 0.02,
}


SMALLER = {"sweep.d": [3], "ensemble.runs": 800, "integrator.horizon": 40.0}  # the network:
# d x 2 normals per layer and run; the per-step loop costs more in JAX on 2 CPU cores


def _probabilities(tmp_path, backend, form):
    grid = {**GRID, **(SMALLER if form == "network" else {})}
    path = dyn.run(
        PHASE,
        out=tmp_path / f"{backend}_{form}.h5",
        progress=False,
        overrides={**grid, "integrator.backend": backend, "params.form": form},
    )
    with dyn.open(path) as ds:
        return {k: ds[k].values.copy() for k in ("p_antipodal", "p_cluster", "p_undecided")}


@pytest.mark.slow  # JAX compiles; the default tier keeps the bit-level agreements
@pytest.mark.parametrize("form", ["rho", "network"])
def test_two_token_probabilities_match_numba_in_law(tmp_path, form):
    # different generators, so agreement within Monte Carlo error: |p_jax - p_numba| below
    # 4 standard errors of a difference of two independent estimates (1500 runs each)
    numba = _probabilities(tmp_path, "numba", form)
    jax = _probabilities(tmp_path, "jax", form)
    runs = (SMALLER if form == "network" else GRID)["ensemble.runs"]
    for name, p in numba.items():
        se = np.sqrt(2 * np.maximum(p * (1 - p), 1 / runs) / runs)
        assert np.all(np.abs(jax[name] - p) < 4 * se), (name, p, jax[name])
    if form == "rho":
        (tmp_path / "again").mkdir()
        again = _probabilities(tmp_path / "again", "jax", form)
        for name in jax:
            np.testing.assert_array_equal(jax[name], again[name])  # same seed: same numbers


@pytest.mark.slow  # JAX compiles two batch shapes; test_integrators_jax's batch-independence check stays default
def test_a_point_gives_the_same_numbers_in_any_batch():
    # what resuming relies on: a point's numbers depend on its key, not on its batch-mates
    sc = dyn.load(PHASE, [f"{k}={v}" for k, v in {**GRID, "ensemble.runs": 200}.items()] + ['integrator.backend="jax"'])
    full = dict(batched.iter_results(sc, list(range(sc.count))))
    alone = dict(batched.iter_results(sc, [4]))
    for name, value in full[4].values.items():
        np.testing.assert_array_equal(alone[4].values[name], value)


def test_depth_limit_matches_numba_to_rounding(tmp_path):
    # same starts and the same dyadic Brownian paths on both backends: equal to rounding, so
    # the same strong-error rate
    errors = {}
    for backend in ("numba", "jax"):
        path = dyn.run(
            "scenarios/transformer_depth_limit.toml",
            out=tmp_path / f"{backend}.h5",
            progress=False,
            overrides={
                "sweep.depth": [4, 16, 64],
                "ensemble.runs": 30,
                "params.reference_depth": 256,
                "output.trajectories": False,
                "integrator.backend": backend,
            },
        )
        with dyn.open(path) as ds:
            errors[backend] = ds["strong_error"].values.copy()
    np.testing.assert_allclose(errors["jax"], errors["numba"], rtol=1e-12)
    slope = np.polyfit(np.log([4, 16, 64]), np.log(errors["jax"]), 1)[0]
    assert abs(slope + 0.5) < 0.15


# JAX compiles each form: the per-head flow from a scenario file on JAX against numba
# (test_attention_architectures) and the drift twins of both forms (test_models) stay default
@pytest.mark.slow
@pytest.mark.parametrize("form", ["flow", "network"])
def test_attention_matches_numba_to_rounding(tmp_path, form):
    values = {}
    for backend in ("numba", "jax"):
        path = dyn.run(
            "scenarios/attention_clusters.toml",
            out=tmp_path / f"{backend}.h5",
            progress=False,
            overrides={
                "sweep.beta": [1.0, 4.0],
                "ensemble.runs": 8,
                "output.saves": 10,
                "params.depth": 100,
                "params.form": form,
                "integrator.backend": backend,
            },
        )
        with dyn.open(path) as ds:
            values[backend] = ds["min_inner"].values.copy()
    np.testing.assert_allclose(values["jax"], values["numba"], rtol=0, atol=1e-12)


# JAX compiles one program per scheme (~10 s): the default tier keeps the drift twins of every
# scheme (test_models) and the per-head flow on JAX (test_attention_architectures)
@pytest.mark.slow
@pytest.mark.parametrize("form", ["flow", "network"])
def test_architectures_match_numba_to_rounding(tmp_path, form):
    """Every normalization scheme under a causal mask, a distance bias, two random heads and a
    feed-forward term: one JAX program per scheme gives the numba states to rounding."""
    values = {}
    for backend in ("numba", "jax"):
        path = dyn.run(
            "scenarios/normalization_speed.toml",
            out=tmp_path / f"{backend}.h5",
            progress=False,
            overrides={
                "sweep.beta": [1.0, 4.0],
                "params.mask": "causal",
                "params.bias_slope": 0.3,
                "params.heads": 2,
                "params.head_noise": 0.5,
                "params.feedforward": 0.5,
                "ensemble.runs": 4,
                "output.saves": 6,
                "params.depth": 60,
                "params.form": form,
                "integrator.horizon": 6.0,
                "integrator.method": "rk4",
                "integrator.dt": 0.05,
                "integrator.backend": backend,
            },
        )
        with dyn.open(path) as ds:
            values[backend] = np.stack([ds["min_inner"].values, ds["radius"].values])
    assert np.ptp(values["numba"]) > 0.1  # the schemes and betas differ: nothing trivial
    np.testing.assert_allclose(values["jax"], values["numba"], rtol=0, atol=1e-11)


def test_jax_backend_refusals():
    for sets, words in (
        (['integrator.backend="jax"', 'params.form="sde"'], "two-token forms"),
        (['integrator.backend="jax"', 'integrator.method="heun"'], "methods: euler_maruyama"),
    ):
        with pytest.raises(dyn.ScenarioError, match=words):
            dyn.load(PHASE, sets)
    with pytest.raises(dyn.ScenarioError, match="has no batched JAX path"):
        dyn.load("scenarios/sinkformer_heat.toml", ['integrator.backend="jax"'])
    with pytest.raises(dyn.ScenarioError, match="drop --executor"):
        dyn.run(PHASE, out="/nonexistent/x.h5", executor="process", workers=2, overrides={"integrator.backend": "jax"})
    assert math.isfinite(batched.device_budget())


def test_batches_group_by_key_and_fit_the_budget():
    sc = dyn.load(
        PHASE,
        [
            'integrator.backend="jax"',
            "sweep.d=[3, 8]",
            "sweep.beta=[1.0, 2.0, 3.0]",
            'params.form="network"',
            "ensemble.runs=100",
        ],
    )
    specs = [sc.spec(i) for i in range(sc.count)]
    size = sc.system.batch_bytes(specs[0])
    plan = batched.batches(sc.system, specs, budget=2 * size)
    assert sorted(s.index for b in plan for s in b) == list(range(sc.count))  # every point once
    assert all(len(b) <= 2 for b in plan)  # a sweep larger than the budget streams batches
    for b in plan:  # one batch, one program: the network form's key holds d
        assert len({sc.system.batch_key(s) for s in b}) == 1


NOISY = "scenarios/noisy_phase.toml"
NOISY_GRID = {
    "sweep.beta": [1.0, 4.0],
    "sweep.sigma": [0.6, 2.0],
    "params.n": 32,
    "integrator.burn_in": 2.0,
    "integrator.horizon_cap": 4.0,
    "ensemble.runs": 40,
    "integrator.horizon": 4.0,
    "integrator.dt": 0.01,
    "integrator.step_tol": 0.05,
    "output.saves": 16,
}  # 9 samples in the window [2, 4]: enough for its error


@pytest.mark.slow  # JAX compiles; the default tier keeps the bit-level agreements
def test_noisy_attention_matches_numba_in_law(tmp_path):
    # both sides of sigma_c (1.06 at beta = 1, 2.21 at beta = 4): r_stationary within 4 standard
    # errors of the difference of two independent ensembles (other generators)
    out = {}
    for backend in ("numba", "jax"):
        path = dyn.run(
            NOISY,
            out=tmp_path / f"{backend}.h5",
            progress=False,
            overrides={**NOISY_GRID, "integrator.backend": backend},
        )
        with dyn.open(path) as ds:
            out[backend] = ds["r_stationary"].values.copy(), ds["r_stationary_se"].values.copy()
    (r_n, se_n), (r_j, se_j) = out["numba"], out["jax"]
    assert np.all(np.abs(r_j - r_n) < 4 * np.hypot(se_n, se_j)), (r_n, r_j)
    # (beta, sigma) = (1, 2) is the one uniform point (r ~ sqrt(pi/(4n)) = 0.16); the others
    # cluster: the comparison spans both phases
    assert min(r_j[0, 0], r_j[1, 0], r_j[1, 1]) > 2 * r_j[0, 1]


@pytest.mark.slow  # JAX compiles; the default tier keeps the bit-level agreements
def test_noisy_points_share_a_program_whatever_their_fourier_order():
    # beta = 1 and 4 need orders K = 11 and 18: padded with zeros in one batch, a point
    # gives its numbers alone (own K) to rounding (the sums run over more, zero, terms); same
    # seed, same numbers
    sets = [f"{k}={v}" for k, v in {**NOISY_GRID, "ensemble.runs": 6}.items()]
    sc = dyn.load(NOISY, sets + ['integrator.backend="jax"'])
    assert len(batched.batches(sc.system, [sc.spec(i) for i in range(sc.count)], 2**30)) == 1
    full = dict(batched.iter_results(sc, list(range(sc.count))))
    again = dict(batched.iter_results(sc, list(range(sc.count))))
    alone = dict(batched.iter_results(sc, [0]))
    for name, value in full[0].values.items():
        np.testing.assert_array_equal(again[0].values[name], value)
        np.testing.assert_allclose(alone[0].values[name], value, rtol=1e-12, atol=1e-13)
