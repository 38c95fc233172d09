"""The hardmax limit (dyn/frontier/hardmax.py): straight paths to the cell vertices, checked
against a construction written here (scipy's convex hull, then brute-force argmax), the ties,
the parameter bounds, the finite-beta deviation's derived law (c1 + c2/beta)/beta and the
tokens that cross to another vertex; the scenario's fits over beta in the slow tier."""

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import ConvexHull

import dyn
import integrators
from dyn.frontier import hardmax as H
from dyn.presentation.cli import main

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "hardmax_limit.toml"
VALUES = dict(beta=16.0, kq_ratio=1.0, tie_tol=1e-12, hardmax=True)


def hardmax_paths(x0, kq_ratio, times):
    problem = integrators.Problem(
        H.Hardmax.numba_function("drift"), None, H.Hardmax.pack({**VALUES, "kq_ratio": kq_ratio}), integrators.EUCLIDEAN
    )
    solved = integrators.get("numba", "rk4", dt=0.25).solve(problem, x0, times)
    return np.asarray(getattr(solved, "states", solved))  # an array, or a Solution's states


@pytest.mark.parametrize("layout, d, m, kq", [("polygon", 2, 7, 1.0), ("sphere", 3, 9, 2.5), ("sphere", 2, 6, 0.4)])
def test_paths_are_straight_to_the_vertex_of_the_cell(layout, d, m, kq):
    rng = np.random.default_rng(5)
    runs, n = 3, 30
    x0 = np.empty((runs, n, d))
    for r in range(runs):
        v = H.vertices(rng, m, d, kq, layout)
        x0[r, :m], x0[r, m:] = v, H.interior(rng, v, n - m, layout)
    times = np.linspace(0.0, 30.0, 61)
    paths = hardmax_paths(x0, kq, times)
    b = np.r_[1.0, np.full(d - 1, kq)]
    for r in range(runs):
        # the independent construction: the hull's vertices, then argmax_k <B x0, v_k>
        hull = np.sort(ConvexHull(x0[r]).vertices)
        assert hull.tolist() == list(range(m))
        cell = hull[np.argmax((x0[r] * b) @ x0[r, hull].T, axis=1)]
        end = np.argmin(np.linalg.norm(paths[r, -1][:, None] - x0[r, None], axis=-1), axis=1)
        assert np.array_equal(end, cell)
        # straight: distance of x_i(t) from the line x_i(0) -> v_cell(i)
        chord = x0[r, cell] - x0[r]
        inner = np.arange(m, n)
        unit = chord[inner] / np.linalg.norm(chord[inner], axis=1, keepdims=True)
        rel = paths[r][:, inner] - x0[r, inner]
        off = rel - np.einsum("tnd,nd->tn", rel, unit)[..., None] * unit
        assert np.abs(off).max() < 1e-10
        # the vertices stay: exactly while every token is farther than ~tie_tol from them
        # (t <= 20: e^-20 = 2e-9), then within the tolerance, where near tokens tie and merge
        early = times <= 20.0
        assert np.abs(paths[r][early, :m] - x0[r, :m]).max() == 0.0
        assert np.abs(paths[r][:, :m] - x0[r, :m]).max() < 1e-10
        # the law x(t) = v + (x0 - v) e^{-t} (RK4 at 0.25: ~1e-5)
        law = x0[r, cell] - chord * np.exp(-times)[:, None, None]
        assert np.abs(paths[r] - law).max() < 1e-4


def test_ties_are_averaged():
    """A token at the centre of a square ties with all four vertices: it stays (as under
    softmax at any beta); with tie_tol = 0 it would pick one vertex by rounding."""
    x = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [0.0, 0.0]])
    f = H.drift(0.0, x, 16.0, 1.0, 1e-12, True)
    assert np.abs(f).max() == 0.0
    # a centre off by rounding (1e-17) breaks the exact tie: still averaged within tie_tol
    y = x.copy()
    y[4, 0] = 1e-17
    assert np.abs(H.drift(0.0, y, 16.0, 1.0, 1e-12, True)[4]).max() < 1e-15
    assert np.abs(H.drift(0.0, y, 16.0, 1.0, 0.0, True)[4]).max() > 0.9  # no tolerance: one
    # a token off the centre goes to its vertex alone, as the softmax at large beta
    z = np.vstack([x[:4], [[0.5, 0.1]]])
    assert np.array_equal(H.drift(0.0, z, 16.0, 1.0, 1e-12, True)[4], z[0] - z[4])
    assert np.abs(H.drift(0.0, z, 400.0, 1.0, 0.0, False) - H.drift(0.0, z, 1.0, 1.0, 0.0, True)).max() < 1e-12


def test_softmax_tends_to_hardmax_drift():
    rng = np.random.default_rng(2)
    v = H.vertices(rng, 5, 2, 1.0, "polygon")
    x = np.vstack([v, H.interior(rng, v, 10, "polygon")])
    hard = H.drift(0.0, x, 1.0, 1.0, 1e-12, True)
    gaps = [np.abs(H.drift(0.0, x, b, 1.0, 0.0, False) - hard).max() for b in (50.0, 100.0, 200.0)]
    assert gaps[0] > gaps[1] > gaps[2]


def polygon_starts(seed, runs, n, m):
    rng = np.random.default_rng(seed)
    x0 = np.empty((runs, n, 2))
    for r in range(runs):
        v = H.vertices(rng, m, 2, 1.0, "polygon")
        x0[r, :m], x0[r, m:] = v, H.interior(rng, v, n - m, "polygon")
    return x0


def test_deviation_is_c1_over_beta_plus_c2_over_beta_squared():
    """The derived law (module docstring, (i)): with every token far from its cell's boundary
    (beta Delta_0 > 3 at the smallest beta: none crosses), D = (c1 + c2/beta)/beta, so the local
    log-log slope is -1 - (c2/c1)/beta: steeper than -1 by an amount that halves as beta
    doubles, and the law's fitted exponent holds -1."""
    m, n = 6, 14
    x0 = polygon_starts(0, 2, n, m)
    scores = np.sort(np.einsum("rnd,rmd->rnm", x0, x0[:, :m]), axis=-1)[:, m:]
    betas = np.array([256.0, 512.0, 1024.0, 2048.0, 4096.0])
    assert betas[0] * (scores[..., -1] - scores[..., -2]).min() > 3.0
    times = np.r_[0.0, np.geomspace(0.01, 30.0, 120)]  # T = 30: e^-30 << c1/beta
    hard = hardmax_paths(x0, 1.0, times)
    deviation = []
    for beta in betas:
        problem = integrators.Problem(
            H.Hardmax.numba_function("drift"),
            None,
            H.Hardmax.pack({**VALUES, "beta": beta, "hardmax": False}),
            integrators.EUCLIDEAN,
        )
        solved = integrators.get("numba", "dopri5", rtol=1e-10, atol=1e-12).solve(problem, x0, times)
        flow = np.asarray(getattr(solved, "states", solved))
        ends = np.argmin(np.linalg.norm(flow[:, -1, :, None] - x0[:, None, :m], axis=-1), axis=-1)
        assert np.array_equal(
            ends, np.argmin(np.linalg.norm(hard[:, -1, :, None] - x0[:, None, :m], axis=-1), axis=-1)
        )  # no crossing
        deviation.append(np.linalg.norm(flow - hard, axis=-1).mean(axis=-1).max(axis=1).mean())
    deviation = np.array(deviation)
    excess = np.diff(np.log(deviation)) / np.diff(np.log(betas)) + 1.0  # measured -1.8e-3 .. -2.3e-4
    assert np.all(excess < 0.0)
    assert np.all(np.abs(excess[1:] / excess[:-1] - 0.5) < 0.05)  # O(1/beta): halves per doubling
    law = H.convergence_law(betas, deviation)  # measured -0.999995 [-1.000005, -0.999986]
    assert law["lo"] <= -1.0 <= law["hi"] and law["hi"] - law["lo"] < 1e-4
    assert law["kappa"][0] > 0.0


def test_crossed_counts_tokens_ending_at_another_vertex():
    """`crossed`: the share of interior tokens whose beta flow, at t = window, is nearest to
    another vertex than their hardmax path's; here one of n - m is sent to the next vertex."""
    spec = dyn.load(SCENARIO, ["params.n=14", "params.vertices=6"]).spec(0)
    model = H.Hardmax()
    m, n = 6, 14
    x0 = model.initial_state(spec, 1)
    fade = np.exp(-np.asarray(spec.times))[:, None, None]
    cell = H.construction_cells(x0, x0[:, :m], 1.0)[0]
    target = x0[0, cell]
    hard = target + (x0[0] - target) * fade
    flow = hard.copy()
    other = x0[0, (cell[m] + 1) % m]
    flow[:, m] = other + (x0[0, m] - other) * fade[:, 0]
    values = model.observe(spec, np.stack([flow, hard], axis=1)[None]).values
    assert values["crossed"][0] == 1.0 / (n - m)
    assert values["cell_agreement"][0] == 1.0
    same = model.observe(spec, np.stack([hard, hard], axis=1)[None]).values
    assert same["crossed"][0] == 0.0 and same["deviation"][0] == 0.0


@pytest.mark.parametrize(
    "setting", ["params.hardmax_dt=2.0", "params.escape=0.0", "params.layout=cube", "params.kq_ratio=0.01"]
)
def test_every_new_parameter_is_bounded(setting):
    with pytest.raises(dyn.ScenarioError, match=setting.split("=")[0]):
        dyn.load(SCENARIO, [setting])


@pytest.mark.parametrize("setting, key", [("params.tie_tol=-1.0", "tie_tol"), ("params.vertices=40", "vertices")])
def test_bad_values_get_one_line_and_exit_2(setting, key, tmp_path, capsys):
    out = tmp_path / "x.h5"
    # in this process: `python -m dyn` is main (test_cli)
    assert main(["run", "hardmax_limit", "--set", setting, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and key in err, err
    assert not out.exists()


@pytest.mark.slow
def test_trapping_rate_and_convergence_in_beta(tmp_path):
    import dyn

    path = dyn.run("hardmax_limit", out=tmp_path / "h.h5")
    ds = dyn.open(path)
    assert ds["straightness"].max() < 1e-10 and ds["cell_agreement"].min() == 1.0
    found = H.fits(path)
    conv, law, trap = found["convergence"], found["law"], found["trapping"]
    # the regular betas: from 192 up no token of the sample crosses to another vertex; below,
    # a few do (4 of 320 at beta = 64), which made a fit over 64 .. 256 read -1.15
    assert found["convergence_beta"].tolist() == [192.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1536.0, 2048.0]
    assert float(ds["crossed"].sel(beta=64.0)) > 0.0
    # the derived law beta^p (c1 + c2/beta) holds p = -1 (measured -0.99954 [-1.00024, -0.99884])
    assert law["lo"] <= -1.0 <= law["hi"] and law["hi"] - law["lo"] < 2e-3
    # the one-term slope is -1 - (c2/c1) <1/beta>, c2/c1 > 0: steeper than -1, by little
    # (measured -1.0027 [-1.0037, -1.0017], c2/c1 = 1.66)
    assert law["kappa"][0] > 0.0 and -1.01 < conv["lo"] < conv["hi"] < -1.0
    # the trapping rate's 95% interval holds g = 1 - cos(2 pi / 12) (measured [0.122, 0.137])
    assert trap["lo"] <= found["gap"] <= trap["hi"]
    assert trap["hi"] - trap["lo"] < 0.3 * found["gap"]
