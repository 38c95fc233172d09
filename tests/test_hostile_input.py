"""Hostile input, property-based: whatever a scenario file or `--set` holds, `dyn run` either
accepts it (and computes it into a fresh file) or prints one clear line and exits with status 2 —
never a traceback, never a new, partial or modified output file."""

from __future__ import annotations

import copy
import io
import math
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, example, given, settings, strategies as st

import dyn
from _scenarios import SMALL_SCENARIO
from dyn.core.errors import ScenarioError
from dyn.engine.scenario import TABLES, apply_overrides, parse_toml, resolve
from dyn.presentation.cli import main

BASE = parse_toml(SMALL_SCENARIO)
KEYS = sorted(
    {(t, k) for t, table in BASE.items() for k in table}
    | {("params", k) for k in ("n", "d", "beta", "Q", "V", "form", "depth", "delta", "init")}
    | {("integrator", k) for k in ("rtol", "atol", "max_steps")}
    | {("output", "plot")}
)
FAST_EXAMPLES = 8  # each accepted document is a run; the slow tier draws 150
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

scalars = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 2**40, -(2**40), 10**12]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 1e-320]),
    st.text(max_size=12),
    st.sampled_from(["", "é", "名前", "SA", "USA", "rk4", "tsit5", "\x00"]),
    st.booleans(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8,
)


def _table(doc: dict, name: str) -> dict:
    if not isinstance(doc.get(name), dict):
        doc[name] = {}
    return doc[name]


@st.composite
def mutated_documents(draw):
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["set", "set", "set", "drop_table", "unknown_key", "replace_table"]))
        if action == "set":
            table, key = draw(st.sampled_from(KEYS))
            _table(doc, table)[key] = draw(values)
        elif action == "drop_table":
            doc.pop(draw(st.sampled_from(TABLES)), None)
        elif action == "unknown_key":
            _table(doc, draw(st.sampled_from(TABLES)))[draw(st.text(min_size=1, max_size=8))] = 1
        else:
            doc[draw(st.sampled_from(TABLES))] = draw(scalars)
    return doc


@st.composite
def valid_documents(draw):
    """Small changes that keep the scenario valid, so the accepting half is exercised too."""
    doc = copy.deepcopy(BASE)
    finite = st.floats(-5.0, 5.0, allow_nan=False)
    doc["sweep"]["beta"] = draw(st.lists(finite, min_size=1, max_size=3, unique=True))
    doc["sweep"]["normalization"] = draw(st.lists(st.sampled_from(["SA", "USA"]), min_size=1, max_size=2, unique=True))
    doc["params"]["delta"] = draw(st.floats(0.0, 2.0))
    doc["params"]["init"] = draw(st.sampled_from(["uniform", "hemisphere"]))
    doc["ensemble"]["runs"] = draw(st.integers(1, 4))
    doc["output"]["saves"] = draw(st.sampled_from([1, 2, 4]))
    return doc


def _cheap(scenario) -> bool:
    """Small enough to run inside a property test (a valid mutation may ask for a huge sweep)."""
    setup, cfg = scenario.setup, scenario.integrator
    return (
        scenario.count * setup.runs <= 64
        and setup.saves <= 16
        and cfg["horizon"] / (cfg.get("dt") or 0.1) <= 200
        and scenario.params.get("n", 5) <= 16
        and scenario.params.get("d", 3) <= 4
    )


@pytest.fixture(scope="module")
def existing(tmp_path_factory) -> Path:
    """A finished output file (of the small scenario with sweep.beta = [1.0]) to aim runs at."""
    folder = tmp_path_factory.mktemp("existing")
    scenario = folder / "ok.toml"
    scenario.write_text(SMALL_SCENARIO)
    out = dyn.run(scenario, folder / "existing.h5", overrides=["sweep.beta=[1.0]"], progress=False, log=io.StringIO())
    scenario.unlink()
    return out


def _expect_refusal(out: Path, tmp_path: Path, capsys, scenario_text: str, sets: list[str]) -> None:
    """Exit 2, one line, no traceback; the existing output untouched and no new files beside it."""
    path = tmp_path / "hostile.toml"
    path.write_text(scenario_text, encoding="utf-8")
    before = out.read_bytes()
    listing = sorted(p.name for p in out.parent.iterdir())
    args = ["run", str(path), "--out", str(out), "--no-progress"] + [a for s in sets for a in ("--set", s)]
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's own refusals (e.g. `--set -x`) exit directly
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dyn: error: ") and len(err.splitlines()) == 1 and "Traceback" not in err
    assert out.read_bytes() == before
    assert sorted(p.name for p in out.parent.iterdir()) == listing


def _mutated_scenario_is_accepted_or_refused_cleanly(existing, tmp_path_factory, capsys, doc):
    tmp_path = tmp_path_factory.mktemp("hostile")
    text = tomli_w.dumps(doc)
    try:
        scenario = resolve(doc)
    except ScenarioError:
        scenario = None
    if scenario is not None and _cheap(scenario):
        # accepted: computed into a fresh file, every point done (ok or recorded as diverged)
        path = tmp_path / "valid.toml"
        path.write_text(text, encoding="utf-8")
        fresh = tmp_path / "fresh.h5"
        code = main(["run", str(path), "--out", str(fresh), "--no-progress"])
        with dyn.open(fresh) as ds:
            assert (ds["status"].values != 0).all() and (ds["status"].values != 3).all()
            assert code == (3 if (ds["status"].values == 2).any() else 0)  # 3: points diverged
        capsys.readouterr()
    # Invalid documents are refused by validation; a valid one differs from the scenario that
    # made the existing file, so a run aimed at that file is refused. Either way: exit 2,
    # nothing touched.
    _expect_refusal(existing, tmp_path, capsys, text, [])


# Accepted documents are computed, so examples cost a run each: the default tier draws FAST_EXAMPLES
# of them, the slow tier the full SETTINGS (same strategy, same derandomized order).
DOCUMENTS = st.one_of(mutated_documents(), valid_documents())
test_mutated_scenarios_are_accepted_or_refused_cleanly = settings(SETTINGS, max_examples=FAST_EXAMPLES)(
    given(doc=DOCUMENTS)(_mutated_scenario_is_accepted_or_refused_cleanly)
)
test_mutated_scenarios_thoroughly = pytest.mark.slow(
    SETTINGS(given(doc=DOCUMENTS)(_mutated_scenario_is_accepted_or_refused_cleanly))
)


@SETTINGS
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.binary(max_size=64).map(lambda b: b.decode("latin-1")),
        st.sampled_from(
            ["", "\n", "[scenario]", "[[scenario]]\nname=1", "a = [1,", SMALL_SCENARIO[: len(SMALL_SCENARIO) // 2]]
        ),
    )
)
def test_arbitrary_text_is_refused_cleanly(existing, tmp_path_factory, capsys, text):
    _expect_refusal(existing, tmp_path_factory.mktemp("text"), capsys, text, [])


@SETTINGS
@given(
    sets=st.lists(
        st.one_of(
            st.text(max_size=30),
            st.builds(
                lambda k, v: f"{k[0]}.{k[1]}={v}",
                st.sampled_from(KEYS),
                st.one_of(
                    st.text(max_size=10),
                    values.map(lambda v: tomli_w.dumps({"v": v})[4:].strip() if not isinstance(v, dict) else "{}"),
                ),
            ),
        ),
        min_size=1,
        max_size=3,
    )
)
@example(sets=["sweep.beta=[1.0]"])  # the existing file's scenario: the accepting branch
def test_arbitrary_overrides_are_applied_or_refused_cleanly(existing, tmp_path_factory, capsys, sets):
    try:
        same = resolve(apply_overrides(BASE, sets)).hash == _EXISTING_HASH
    except ScenarioError:
        same = False
    if not same:  # invalid overrides, or a valid scenario other than the existing file's
        _expect_refusal(existing, tmp_path_factory.mktemp("sets"), capsys, SMALL_SCENARIO, sets)
    else:  # the existing file's own scenario: a finished sweep, accepted and left as it is
        path = tmp_path_factory.mktemp("same") / "same.toml"
        path.write_text(SMALL_SCENARIO, encoding="utf-8")
        before = existing.read_bytes()
        args = ["run", str(path), "--out", str(existing), "--no-progress"]
        assert main(args + [a for s in sets for a in ("--set", s)]) == 0
        assert existing.read_bytes() == before
        capsys.readouterr()  # its report, out of the next example's way


_EXISTING_HASH = resolve(apply_overrides(BASE, ["sweep.beta=[1.0]"])).hash
