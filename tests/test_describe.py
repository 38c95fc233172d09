"""Discovery and the Python API as the command line: `dyn list SYSTEM` / `dyn describe` and
`dyn.describe` say what a system takes and gives, from its declaration; `dyn.run` takes a
shipped scenario's name; a missing file is a FileNotFoundError; near-misses get suggestions."""

from __future__ import annotations

import inspect

import pytest

import dyn
from dyn import systems
from dyn.core.errors import ScenarioError
from dyn.engine.scenario import SCENARIO_DIR, load, scenario_file
from dyn.presentation.cli import main
from dyn.presentation.describe import SystemDescription, describe


def test_dyn_list_system_prints_its_parameters_outputs_methods_and_scenarios(capsys):
    assert main(["list", "attention_sphere"]) == 0
    text = capsys.readouterr().out
    info = describe("attention_sphere")
    assert text.strip() == str(info)
    system = systems.get("attention_sphere")
    params = [p.name for p in info.parameters]
    assert params == list(system.params)  # every parameter, in declaration order
    beta = next(p for p in info.parameters if p.name == "beta")
    field = system.params["beta"]
    assert (beta.kind, beta.default, beta.doc) == (field.kind, field.default, field.doc)
    assert f">= {field.lo:g}" in beta.bounds and f"<= {field.hi:g}" in beta.bounds
    assert "    beta                   float    default 1;" in text and field.doc in text
    # outputs with their reduction and companions, at the default parameters
    p_one = next(o for o in info.outputs if o.name == "p_one_cluster")
    assert p_one.reduce == "proportion" and "p_one_cluster_lo" in p_one.variables
    assert {o.name for o in info.outputs} == {o.name for o in system.outputs(load_default().setup)}
    # settings-dependent outputs come with the shipped scenario that brings them
    radius = next(o for o in info.other_outputs if o.name == "radius")
    assert radius.scenarios == ("normalization_speed",)
    # backends and methods: what the scenario check admits (an ODE: no SDE method)
    assert "rk4" in info.backends["numba"] and "euler_maruyama" not in info.backends["numba"]
    assert info.backends["jax"] == tuple(sorted(system.jax_methods))
    for method in info.backends["diffrax"]:
        load(SCENARIO_DIR / "attention_clusters.toml", ["integrator.backend=diffrax", f"integrator.method={method}"])
    assert {"attention_clusters", "normalization_speed"} <= set(info.scenarios)
    assert "shipped scenarios: attention_clusters" in text
    # describe is an alias, and a scenario's name describes its system
    assert main(["describe", "attention_sphere"]) == 0
    assert capsys.readouterr().out == text
    assert main(["list", "noisy_phase"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("noisy_attention:") and "scenario noisy_phase runs system" in out
    assert "    numba    euler_maruyama" in out  # an SDE: SDE methods only


def load_default():
    from dyn.engine.scenario import resolve

    return resolve({"scenario": {"name": "x", "system": "attention_sphere"}})


@pytest.mark.parametrize("name", systems.names())
def test_every_system_is_described(name):
    info = describe(name)
    assert isinstance(info, SystemDescription) and info.name == name
    assert len(info.parameters) == len(systems.get(name).params)
    assert info.outputs or info.other_outputs  # every system outputs something somewhere
    assert str(info).startswith(f"{name}: ")


def test_an_unknown_name_is_one_line_exit_2_with_did_you_mean(capsys):
    assert main(["list", "attention_spere"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "did you mean 'attention_sphere'" in err
    with pytest.raises(ScenarioError, match="did you mean 'noisy_phase'"):
        dyn.describe("noisy_phse")
    assert main(["describe", "zzzz"]) == 2
    err = capsys.readouterr().err
    assert "unknown system 'zzzz'" in err and "did you mean" not in err


def test_a_system_named_by_import_path_is_described_with_its_scenarios(capsys):
    """`dyn list module:Class` describes a system written through the public API as it does a
    registered one (with the shipped scenarios that run it); a missing one is one line."""
    name = "dyn.frontier.resnet_width:ResNetWidth"
    info = describe(name)
    assert info.name == name and info.scenarios == ("depth_width_limit",)
    assert [p.name for p in info.parameters][:2] == ["d", "inputs"] and not info.notes
    assert main(["list", "nowhere:Sync"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no module 'nowhere'" in err


def test_run_takes_a_shipped_scenario_name_as_the_command_line_does(tmp_path):
    assert scenario_file("attention_clusters") == SCENARIO_DIR / "attention_clusters.toml"
    assert load("attention_clusters").name == "attention_clusters"
    out = dyn.run(
        "attention_clusters",
        tmp_path / "a.h5",
        progress=False,
        overrides=["sweep.beta=[1.0]", "sweep.n=[4]", "ensemble.runs=2", "output.saves=4", "integrator.horizon=1.0"],
    )
    with dyn.open(out) as ds:
        assert ds.attrs["title"].endswith("attention_clusters") and int(ds["status"].values.min()) == 1


def test_missing_files_raise_file_not_found_with_the_nearest_names(tmp_path, capsys):
    with pytest.raises(FileNotFoundError):
        dyn.open(tmp_path / "nope.h5")
    with pytest.raises(FileNotFoundError, match="did you mean 'attention_clusters'"):
        dyn.run("attention_clustres", tmp_path / "x.h5")
    with pytest.raises(FileNotFoundError, match="did you mean 'attention_clusters'"):
        dyn.load(SCENARIO_DIR / "attention_clustres.toml")
    assert not (tmp_path / "x.h5").exists()
    # on the command line: one line, exit 2, the same suggestion
    assert main(["run", "attention_clustres", "--out", str(tmp_path / "x.h5")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "did you mean 'attention_clusters'" in err
    assert main(["show", str(tmp_path / "nope.h5")]) == 2
    assert "no such file" in capsys.readouterr().err
    with pytest.raises(ScenarioError, match="did you mean 'attention_sphere'"):
        load("attention_clusters", ["scenario.system=attention_spher"])


def test_every_public_function_says_what_it_returns_and_raises():
    for name in dyn.__all__:
        obj = getattr(dyn, name)
        if inspect.isfunction(obj):
            doc = inspect.getdoc(obj) or ""
            assert "Returns" in doc or "Return" in doc or "returns" in doc, name
            assert "Raises" in doc, name
    assert "diverge" in inspect.getdoc(dyn.run) and "status" in inspect.getdoc(dyn.run)


def test_misspelt_keys_get_the_nearest_names(small_scenario):
    with pytest.raises(ScenarioError, match=r"params.hedas: unknown key \(did you mean 'heads'\?\)"):
        load(small_scenario, ["params.hedas=1"])
    with pytest.raises(ScenarioError, match=r"sweep.delt: unknown parameter \(did you mean 'delta'"):
        load(small_scenario, ["sweep.delt=[0.1]"])
    with pytest.raises(ScenarioError, match=r"integrator.methd: unknown key \(did you mean 'method'"):
        load(small_scenario, ["integrator.methd=rk4"])


def test_a_model_with_one_form_of_field_lists_only_the_backends_that_run_it(capsys):
    """A gradient flow's field is JAX's gradient of its loss: `dyn list` offers diffrax and jax,
    and not numba, which the scenario check refuses for it."""
    from dyn.frontier.attention_svm import AttentionSVM
    from dyn.presentation.describe import _backends

    assert set(_backends(AttentionSVM())) == {"diffrax", "jax"}  # the table `dyn list` prints
    assert main(["run", "attention_svm", "--set", "integrator.backend=numba", "--dry-run"]) == 2
    assert "use backend diffrax or jax" in capsys.readouterr().err
