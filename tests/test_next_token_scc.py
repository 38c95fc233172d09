"""Next-token mechanics (dyn/frontier/next_token_scc.py): the token graphs and their SCCs, the
graph SVM and the finite part on a hand-solved dataset, the loss's gradient against finite
differences and its closed form, the projections, the data's design, bad values refused in one
line; slow tier: the flow against the four laws (retrieval, composition, directional part,
finite part)."""

import io

import numpy as np
import pytest

import dyn
from dyn.frontier import next_token_scc as nts, next_token_scc_math as nm
from dyn.presentation.cli import main

# K = 4, every context ends in token 3. Edges (label -> context token): 0 <-> 1 (one SCC A),
# A -> 2, A -> 3, 2 -> 3. Labels in A: 0 three times, 1 once (contexts holding both 0 and 1).
HAND_TOKENS = np.array([[0, 1, 3], [1, 0, 3], [0, 2, 3], [2, 2, 3], [0, 1, 3]])
HAND_LABEL = np.array([0, 1, 0, 2, 0])
HAND_LAST = np.full(5, 3)

SMALL = """
[scenario]
name = "next_token_scc_small"
system = "dyn.frontier.next_token_scc:NextTokenSCC"
[params]
K = 6
n = 60
levels = 2
{line}
[ensemble]
runs = {runs}
seed = 5
[integrator]
backend = "diffrax"
method = "tsit5"
rtol = 1e-8
atol = 1e-10
horizon = {horizon}
[output]
path = "{path}"
saves = 24
spacing = "log"
t_min = 0.1
"""


def _hand():
    return nm.structure(HAND_TOKENS, HAND_LAST, HAND_LABEL, 4)


def test_sccs_top_positions_and_groups_of_a_hand_graph():
    found = _hand()
    labels = found["scc"][3]
    assert labels[0] == labels[1] and len({labels[0], labels[2], labels[3]}) == 3
    assert list(found["nodes"][3]) == [0, 1, 2, 3]
    # C_i: the label's SCC; in context [0, 2, 3] only token 0 is on it, in [2, 2, 3] both 2s
    assert found["top"].tolist() == [
        [True, True, False],
        [True, True, False],
        [True, False, False],
        [True, True, False],
        [True, True, False],
    ]
    assert sorted(len(g) for g in found["groups"].values()) == [1, 4]


def test_graph_svm_is_the_hand_solution():
    # equal on A = {0, 1}; c_A - c_2 >= 1, c_2 - c_3 >= 1 (c_A - c_3 >= 1 implied); minimizing
    # 2 c_A^2 + c_2^2 + c_3^2 with both active: 8 c_2 + 2 = 0, so (3/4, 3/4, -1/4, -5/4)
    w, kkt = nm.graph_svm(HAND_TOKENS, HAND_LAST, HAND_LABEL, _hand(), 4)
    expected = np.zeros((4, 4))
    expected[:, 3] = [0.75, 0.75, -0.25, -1.25]
    assert np.abs(w - expected).max() < 1e-9 and kkt < 1e-9


def test_finite_part_is_the_hand_solution_and_matches_the_label_frequencies():
    # S_fin: (f, -f) on A in column 3; three contexts {0, 1} with labels 0, 1, 0: the reduced
    # loss is minimal where sigma(2 f) = 2/3, f = log(2)/2; the group of A (four contexts, the
    # fourth holding 0 alone) has label frequencies (3/4, 1/4) = its mean in-SCC weights
    found = _hand()
    w, grad = nm.finite_part(HAND_TOKENS, HAND_LAST, HAND_LABEL, found, 4)
    expected = np.zeros((4, 4))
    expected[0, 3], expected[1, 3] = np.log(2) / 2, -np.log(2) / 2
    assert np.abs(w - expected).max() < 1e-12 and grad < 1e-12
    s = nm.attention(w, HAND_TOKENS, HAND_LAST) * found["top"]
    s /= s.sum(axis=1, keepdims=True)
    p = nm.token_weights(s, HAND_TOKENS, 4)
    group = found["groups"][(3, int(found["scc"][3][0]))]
    assert np.abs(p[group].mean(axis=0)[:2] - [0.75, 0.25]).max() < 1e-12


def test_loss_gradient_against_finite_differences_and_its_closed_form():
    rng = np.random.default_rng(1)
    data = nm.dataset(12, 4, 5, 2, 2, 1.0, rng)
    tokens, last, label = data["tokens"], data["last"], data["label"]
    w = rng.standard_normal((5, 5))
    # closed form: grad L = (1/n) sum_i (p_i - e_{y_i}) e_{k_i}^T
    p = nm.token_weights(nm.attention(w, tokens, last), tokens, 5)
    closed = np.zeros((5, 5))
    for i in range(12):
        closed[:, last[i]] += (p[i] - np.eye(5)[label[i]]) / 12
    h, fd = 1e-5, np.zeros((5, 5))
    for a in range(5):
        for b in range(5):
            e = np.zeros((5, 5))
            e[a, b] = h
            fd[a, b] = (nm.loss(w + e, tokens, last, label) - nm.loss(w - e, tokens, last, label)) / (2 * h)
    assert np.abs(fd - closed).max() < 1e-9
    # the JAX loss the engine differentiates (float64, as the engine runs it): the same value
    # and gradient
    import integrators

    integrators.configure_jax()
    import jax

    arrays = nm.one_hot(data, 5)
    theta = {"W": w}
    assert abs(float(nts.next_token_loss(theta, arrays)) - nm.loss(w, tokens, last, label)) < 1e-12
    grad = np.asarray(jax.grad(nts.next_token_loss)(theta, arrays)["W"])
    assert np.abs(grad - closed).max() < 1e-12


def test_projections_split_the_data_span():
    rng = np.random.default_rng(2)
    data = nm.dataset(40, 5, 6, 2, 2, 1.0, rng)
    found = nm.structure(data["tokens"], data["last"], data["label"], 6)
    w = rng.standard_normal((3, 6, 6))
    fin, dr, span = nm.project_fin(w, found), nm.project_dir(w, found), nm.project_data(w, found)
    assert np.abs(fin + dr - span).max() < 1e-14
    assert np.abs(np.einsum("rjk,rjk->r", fin, dr)).max() < 1e-12
    assert np.abs(nm.project_fin(fin, found) - fin).max() < 1e-14  # a projection
    svm, _ = nm.graph_svm(data["tokens"], data["last"], data["label"], found, 6)
    assert np.abs(nm.project_dir(svm, found) - svm).max() < 1e-9  # constant on SCCs
    # the loss reads only Pi_D W: entries off the data span change nothing
    off = w[0] - span[0]
    assert (
        abs(
            nm.loss(span[0], data["tokens"], data["last"], data["label"])
            - nm.loss(span[0] + 5 * off, data["tokens"], data["last"], data["label"])
        )
        < 1e-12
    )


def test_labels_lie_in_the_highest_block_and_enough_data_recovers_the_blocks():
    rng = np.random.default_rng(3)
    data = nm.dataset(400, 5, 8, 2, 3, 0.5, rng)
    for i in range(400):
        lv = data["level"][data["last"][i], data["tokens"][i]]
        assert lv[data["tokens"][i] == data["label"][i]][0] == lv.min()
    found = nm.structure(data["tokens"], data["last"], data["label"], 8)
    assert nm.designed_agree(data["level"], found)
    # each query's own token sits in its lowest block
    assert all(data["level"][k, k] == 2 for k in range(2))


@pytest.mark.parametrize(
    "line",
    ["K = 2", "queries = 9", "levels = 7", "T = 1", "n = 1", "logit_scale = -1.0", "init_scale = 11.0", "replica = -1"],
)
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, line):
    key = line.split(" = ")[0]
    text = SMALL.format(line=line, runs=1, horizon=1.0, path=tmp_path / "bad.h5")
    text = "\n".join(t for t in text.splitlines() if not t.startswith(f"{key} = ") or t == line)
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    assert main(["run", str(toml)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("dyn: ") and key in err, err
    assert not (tmp_path / "bad.h5").exists()


@pytest.mark.slow  # diffrax integrates the flow to t = 1e5
def test_the_flow_follows_the_four_laws(tmp_path):
    toml = tmp_path / "small.toml"
    toml.write_text(SMALL.format(line="", runs=2, horizon=1e5, path=tmp_path / "small.h5"))
    out = dyn.run(toml, progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        assert ds["svm_kkt"].item() < 1e-8 and ds["fin_gradient"].item() < 1e-10
        assert ds["composition_fin"].item() < 1e-10
        end = ds.isel(time=-1)
        # hard retrieval: every context retrieves its label's SCC; t mass_off -> |W_svm|^2
        assert end["retrieved"].item() == 1.0
        assert abs(end["mass_law"].item() - 1.0) < 0.01
        # the finite part and the composition: errors O(1/t)
        assert end["fin_error"].item() < 1e-3 and end["composition_error"].item() < 1e-3
        assert end["in_scc_error"].item() < 1e-3
        # the directional part: slope against log t is W_svm
        assert ds["slope_error"].item() < 0.05 and end["corr_svm"].item() > 0.99
        # and the errors fall along the run
        fin = ds["fin_error"].values
        assert fin[-1] < 0.1 * fin[len(fin) // 2]
