"""Scenario parsing: defaults, sweep expansion, overrides, hashing, and every class of bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dyn
from _scenarios import SMALL_SCENARIO
from dyn.core import sweep
from dyn.core.errors import ScenarioError
from dyn.engine.scenario import apply_overrides, parse_toml, resolve


def doc(**changes):
    data = parse_toml(SMALL_SCENARIO)
    for dotted, value in changes.items():
        table, key = dotted.split("__")
        if value is None:
            data[table].pop(key, None)
        else:
            data.setdefault(table, {})[key] = value
    return data


def test_defaults_filled_and_sweep_in_file_order():
    sc = resolve(doc())
    assert "beta" not in sc.params and "normalization" not in sc.params  # swept, not fixed
    assert list(sc.axes) == ["beta", "normalization"]
    assert sc.params["form"] == "flow" and sc.ensemble["runs"] == 6
    assert sweep.shape(sc.axes) == (3, 2) and sweep.count(sc.axes) == sc.count == 6
    # C order: the last axis varies fastest
    assert [(p["beta"], p["normalization"]) for p in sweep.iter_points(sc.params, sc.axes)][:3] == [
        (0.5, "SA"),
        (0.5, "USA"),
        (1.0, "SA"),
    ]
    spec = sc.spec(2)  # what a system receives: values of point 2, no scenario
    assert (spec["beta"], spec["normalization"], spec["n"]) == (1.0, "SA", 5)
    assert spec.runs == 6 and spec.times.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_range_axes_expand_linear_log_and_integer():
    sc = resolve(
        doc(
            sweep__beta={"start": 0.0, "stop": 1.0, "num": 5},
            sweep__n={"start": 2, "stop": 32, "num": 5, "spacing": "log"},
            params__n=None,
        )
    )
    assert sc.axes["beta"] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert sc.axes["n"] == [2, 4, 8, 16, 32]


def test_point_seeds_depend_on_index_only():
    sc = resolve(doc())
    a = [sc.spec(i).rng.standard_normal(3) for i in range(sc.count)]
    b = [sc.spec(i).rng.standard_normal(3) for i in reversed(range(sc.count))][::-1]
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    assert len({tuple(x) for x in a}) == len(a)  # distinct streams


def test_hash_ignores_output_path_but_not_physics():
    base = resolve(doc())
    assert resolve(doc(output__path="elsewhere.h5")).hash == base.hash
    assert resolve(doc(ensemble__runs=7)).hash != base.hash
    assert parse_toml(base.text) == base.data  # the stored text round-trips


def test_an_override_wins_over_the_other_table():
    # --set params.beta fixes a swept beta (the axis collapses); --set sweep.n sweeps a fixed n
    sc = resolve(apply_overrides(doc(), ["params.beta=2.0", "sweep.n=[4, 6]"]))
    assert list(sc.axes) == ["normalization", "n"] and sc.params["beta"] == 2.0
    assert "n" not in sc.params
    with pytest.raises(ScenarioError, match="params.beta: must be finite"):
        resolve(apply_overrides(doc(), ["params.beta=nan"]))
    with pytest.raises(ScenarioError, match="params.beta: beta is both fixed in"):
        resolve(doc(params__beta=2.0))  # a file that says both is ambiguous


def test_overrides_are_toml_values_and_bare_words():
    data = apply_overrides(doc(), ["ensemble.runs=11", "sweep.beta=[1.0, 2.0]", "params.init=hemisphere"])
    sc = resolve(data)
    assert sc.ensemble["runs"] == 11 and sc.axes["beta"] == [1.0, 2.0]
    assert sc.params["init"] == "hemisphere"


@pytest.mark.parametrize(
    "changes, key, words",
    [
        ({"scenario__system": "nope"}, "scenario.system", "unknown system"),
        ({"params__bogus": 1}, "params.bogus", "unknown key"),
        ({"integrator__method": "rk45"}, "integrator.method", "unknown ODE method"),
        ({"integrator__method": "euler_maruyama"}, "integrator.method", "unknown ODE method"),
        ({"integrator__backend": "cuda"}, "integrator.backend", "must be one of"),
        ({"ensemble__runs": -5}, "ensemble.runs", ">= 1"),
        ({"ensemble__runs": "many"}, "ensemble.runs", "expected an integer"),
        ({"params__d": 1}, "params.d", ">= 2"),
        ({"params__n": 2.5}, "params.n", "expected an integer"),
        ({"params__beta": math.inf, "sweep__beta": None}, "params.beta", "finite"),
        ({"sweep__beta": [1.0, math.nan]}, "sweep.beta[1]", "finite"),
        ({"sweep__beta": []}, "sweep.beta", "at least one value"),
        ({"sweep__Q": [[1.0]]}, "sweep.Q", "cannot be swept"),
        ({"sweep__nope": [1]}, "sweep.nope", "unknown parameter"),
        ({"params__V": [[1.0, 0.0], [0.0, 1.0]]}, "params.V", "must be 3 x 3"),
        ({"params__V": [[1.0, 0.0], [0.0]]}, "params.V", "square"),
        ({"integrator__dt": -0.1}, "integrator.dt", "must be > 0"),  # as for 0: one bound, one message
        ({"integrator__dt": 0.0}, "integrator.dt", "> 0"),
        ({"integrator__backend": "diffrax", "integrator__method": "tsit5"}, "integrator.dt", "not an option"),
        ({"output__saves": 0}, "output.saves", ">= 1"),
        ({"output__plot": "nothing"}, "output.plot", "unknown variable"),
        ({"output__observables": ["pair_fraction", "nothing"]}, "output.observables", "no output 'nothing'"),
        ({"output__observables": ["energy", "energy"]}, "output.observables", "distinct"),
        ({"output__observables": []}, "output.observables", "names no output"),
        (
            {"output__observables": ["energy"], "output__plot": "pair_fraction"},
            "output.plot",
            "not among output.observables",
        ),
        ({"scenario__name": "../evil"}, "scenario.name", "letters"),
        ({"scenario__system": None}, "scenario.system", "missing required key"),
    ],
)
def test_bad_input_names_the_key(changes, key, words):
    with pytest.raises(ScenarioError) as info:
        resolve(doc(**changes))
    assert info.value.key == key and words in info.value.problem


def test_malformed_and_structural_errors():
    with pytest.raises(ScenarioError, match="malformed TOML"):
        parse_toml("[scenario\nname=1")
    with pytest.raises(ScenarioError, match="unknown table"):
        resolve({**doc(), "extra": {}})
    with pytest.raises(ScenarioError, match="missing required table"):
        resolve({})
    with pytest.raises(ScenarioError) as info:
        apply_overrides(doc(), ["nosuch.key=1"])
    assert info.value.key == "nosuch.key"
    with pytest.raises(ScenarioError, match="KEY=VALUE"):
        apply_overrides(doc(), ["params.beta"])
    with pytest.raises(ScenarioError, match="not a TOML value"):
        apply_overrides(doc(), ["params.beta=[1,"])


def test_network_depth_must_fit_saves():
    with pytest.raises(ScenarioError) as info:
        resolve(doc(params__form="network", params__depth=10))  # saves = 4
    assert info.value.key == "params.depth"


def test_public_load(small_scenario):
    sc = dyn.load(small_scenario, ["ensemble.seed=3"])
    assert sc.ensemble["seed"] == 3 and sc.source == str(small_scenario)


def test_log_spaced_save_times_and_their_checks():
    sc = resolve(doc(output__spacing="log", output__t_min=0.01, output__saves=3, integrator__horizon=10.0))
    assert sc.setup.times.tolist() == [0.0, *np.geomspace(0.01, 10.0, 3).tolist()]
    for changes, words in (
        ({"output__spacing": "log"}, "needs 0 < t_min < horizon"),
        ({"output__spacing": "log", "output__t_min": 5.0}, "t_min < horizon"),
        ({"output__t_min": 0.1}, "only used with spacing"),
    ):
        with pytest.raises(ScenarioError, match=words):
            resolve(doc(**changes))


def test_common_axes_must_be_sweep_axes():
    with pytest.raises(ScenarioError, match="ensemble.common: 'form' is not a sweep axis"):
        resolve(doc(ensemble__common=["form"]))
    with pytest.raises(ScenarioError, match="ensemble.common: expected a list of names"):
        resolve(doc(ensemble__common="beta"))
    sc = resolve(doc(ensemble__common=["normalization"]))
    # points that differ only in normalization share a stream; beta still separates them
    assert [sc.spec(k).stream for k in range(6)] == [0, 0, 1, 1, 2, 2]
    assert "common" not in resolve(doc(ensemble__common=[])).ensemble  # default: all apart
