"""Reliability, issue 20, defect 5 (max_steps): an adaptive member that runs out of max_steps is
told apart from one that blew up, and keeps the last state it reached."""

from __future__ import annotations

import numpy as np
import pytest

import dyn
import integrators
from _problems import LOGISTIC_P, LOGISTIC_X0, logistic_drift, logistic_drift_jax
from _scenarios import SCENARIOS, SMALL_SCENARIO

LOGISTIC = integrators.Problem(drift=logistic_drift, p=LOGISTIC_P)


def test_running_out_of_max_steps_is_reported_and_keeps_the_last_state():
    ts = np.array([0.0, 50.0])
    capped = integrators.get("numba", "dopri5", max_steps=3).solve(LOGISTIC, LOGISTIC_X0, ts)
    assert np.isnan(capped.states[:, 1]).all()  # the save time was not reached: no state there
    assert (capped.status == integrators.MAX_STEPS).all()  # not NONFINITE: told apart
    assert capped.count(integrators.MAX_STEPS) == len(LOGISTIC_X0)
    assert (capped.stats["steps"] + capped.stats["rejections"] == 3).all()
    last = capped.last_state
    assert last.shape == LOGISTIC_X0.shape and np.isfinite(last).all()
    assert not np.array_equal(last, LOGISTIC_X0)  # it moved: the steps it took are kept
    free = integrators.get("numba", "dopri5").solve(LOGISTIC, LOGISTIC_X0, ts)
    assert free.ok.all() and free.count(integrators.MAX_STEPS) == 0
    np.testing.assert_array_equal(free.last_state, free.states[:, -1])


@pytest.mark.slow  # JAX compiles a program of its own (seconds); numba's case above stays default
def test_diffrax_tells_max_steps_apart_too():
    problem = integrators.Problem(logistic_drift, logistic_drift_jax, LOGISTIC_P)
    ts = np.array([0.0, 50.0])
    capped = integrators.get("diffrax", "dopri5", max_steps=3).solve(problem, LOGISTIC_X0, ts)
    assert (capped.status == integrators.MAX_STEPS).all() and np.isnan(capped.states[:, 1]).all()
    free = integrators.get("diffrax", "dopri5").solve(problem, LOGISTIC_X0, ts)
    assert free.ok.all() and (free.stats["steps"] > 3).all() and (free.stats["rejections"] >= 0).all()


def test_a_point_that_ran_out_of_max_steps_says_so(tmp_path):
    scenario = tmp_path / "adaptive.toml"
    scenario.write_text(SMALL_SCENARIO.replace("dt = 0.1\n", ""))  # dopri5 takes no dt
    out = dyn.run(
        scenario,
        tmp_path / "m.h5",
        progress=False,
        overrides=[
            "integrator.method=dopri5",
            "integrator.max_steps=3",
            "sweep.beta=[1.0]",
            "sweep.normalization=['SA']",
            "ensemble.runs=2",
        ],
    )
    with dyn.open(out) as ds:
        message = ds["message"].values.reshape(-1)[0]
    assert "max_steps" in message and "non-finite" not in message


def test_a_resnet_whose_reference_ran_out_of_max_steps_says_so(tmp_path):
    """resnet_ode solves its reference neural ODE inside the model: the solver's status is handed
    on, so the point names max_steps rather than a non-finite error."""
    out = dyn.run(
        SCENARIOS / "resnet_ode_limit.toml",
        tmp_path / "r.h5",
        progress=False,
        overrides=[
            "integrator.backend=numba",
            "integrator.method=dopri5",
            "integrator.max_steps=3",
            "sweep.depth=[16]",
            "sweep.scheme=['euler']",
            "sweep.weights=['smooth']",
            "ensemble.runs=2",
            "params.inputs=4",
        ],
    )
    with dyn.open(out) as ds:
        message = str(ds["message"].values.reshape(-1)[0])
    assert "max_steps" in message and "non-finite" not in message, message
