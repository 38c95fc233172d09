"""Run until decided (issue 15): classified runs go on until decided, the exact end-state law of
the two-token diffusion, and horizon-limited points marked wherever results are shown.

Statistical tolerances as in test_tokens_sde.py: |estimate - prediction| < 4 standard errors,
fixed seeds (deterministic), plus a stated discretization allowance where a step size enters.
"""

import math

import numpy as np
import pytest

import dyn
from dyn import tokens_sde as ts
from dyn.attention import uniform_sphere
from dyn.engine.verdicts import HORIZON_LIMITED_SHARE, horizon_limited
from dyn.presentation.plot import _edges, _index_map, _scale

PHASE = "scenarios/two_token_phase.toml"


def _run(tmp_path, name, overrides, scenario=PHASE):
    return dyn.run(scenario, out=tmp_path / f"{name}.h5", overrides=overrides, progress=False)


def test_exact_probability_d2_is_one_half_and_zero_below_beta_c():
    # d = 2: S(u) = 2 arctan(e^u) = theta, a martingale; the uniform start has E theta = pi/2.
    for beta in (0.3, 2.0, 5.0):
        assert abs(ts.p_antipodal_exact(beta, 2) - 0.5) < 1e-9
    # below beta_c(d) antipodal pairs do not attract: probability 0; above it, positive and
    # increasing with beta (the antipodal boundary attracts more strongly)
    assert ts.p_antipodal_exact(1.0, 8) == 0.0  # beta_c(8) = 1.24
    above = [ts.p_antipodal_exact(b, 8) for b in (1.5, 2.0, 3.0, 6.0)]
    assert above[0] > 0 and np.all(np.diff(above) > 0)


def test_exit_probability_against_a_direct_quadrature_of_the_scale_density():
    # h(u0) = int_{-inf}^{u0} S' / int S' by scipy.quad on the closed-form integrand, d = 5,
    # beta = 2 (both boundaries attract), vbar = 0.2, sigma = 1.3.
    from scipy.integrate import quad

    from dyn.tokens_sde.fate import _ratio

    beta, d, sigma, vbar = 2.0, 5, 1.3, 0.2

    def dS(u):
        inner, _ = quad(lambda v: _ratio(v, beta, d, sigma, vbar), 0.0, u, limit=200)
        return math.exp(-inner)

    total = quad(dS, -np.inf, 0.0)[0] + quad(dS, 0.0, np.inf, limit=200)[0]
    for u0 in (-1.5, 0.0, 0.7, 2.5):
        expected = quad(dS, -np.inf, u0, limit=200)[0] / total
        assert abs(ts.exit_probability(u0, beta, d, sigma, vbar) - expected) < 1e-6


# d = 32 (the smallest antipodal rate, the harder case) by default; d = 16 is slow
@pytest.mark.parametrize("d", [pytest.param(16, marks=pytest.mark.slow), 32])
def test_decided_probabilities_match_the_exact_law_at_large_d(tmp_path, d):
    # The case: at d = 16, 32 a fixed horizon of 150 cut most antipodal runs short.
    # Runs until decided (default) must agree with the scale-function probability within
    # 4 standard errors. dt = 0.04: the Euler-Maruyama bias of this hitting probability was
    # measured below 0.003 at d = 32, beta = 6 (20000 runs at dt = 0.04, 0.01, 0.0025).
    runs = 2000
    path = _run(
        tmp_path, f"exact{d}", {"sweep.beta": [3.0, 6.0], "sweep.d": [d], "ensemble.runs": runs, "integrator.dt": 0.04}
    )
    with dyn.open(path) as ds:
        for beta in (3.0, 6.0):
            point = ds.sel(beta=beta, d=d)
            exact = ts.p_antipodal_exact(beta, d)
            se = math.sqrt(exact * (1 - exact) / runs)
            assert abs(float(point.p_antipodal) - exact) < 4 * se + 0.003, (beta, exact)
            assert float(point.p_undecided) == 0.0
            assert float(point.horizon_used) > 150.0  # the old fixed horizon was not enough


@pytest.mark.slow  # 5 400 runs to a decision; the exact-law and horizon-cap checks stay default
def test_default_scenario_leaves_no_undecided_runs_where_the_boundary_attracts(tmp_path):
    # Every point whose antipodal rate |lambda_-| >= RATE_FLOOR = 0.05 must have < 2 % of its
    # runs undecided with the shipped defaults; a reduced grid with d = 16 and 32 (where the
    # rate is smallest: -lambda_- < 2/d) and points on both sides of beta_c.
    path = _run(
        tmp_path, "grid", {"sweep.beta": [0.5, 1.5, 2.5, 3.0, 4.5, 6.0], "sweep.d": [3, 16, 32], "ensemble.runs": 300}
    )
    with dyn.open(path) as ds:
        lam = ts.lyapunov_minus(ds.beta.values[:, None], ds.d.values[None, :])
        strong = np.abs(lam) >= ts.RATE_FLOOR
        assert strong.sum() >= 12
        undecided = ds.p_undecided.transpose("beta", "d").values
        assert np.all(undecided[strong] < HORIZON_LIMITED_SHARE), undecided
        cap = ds.horizon_cap.transpose("beta", "d").values
        used = ds.horizon_used.transpose("beta", "d").values
        assert np.all(used <= cap + 1e-9) and np.all(cap >= 150.0)


def test_horizon_mode_keeps_the_fixed_time_question(tmp_path):
    # until = "horizon": every run stops at T; at d = 32 a horizon of 20 leaves most undecided.
    path = _run(
        tmp_path,
        "fixed",
        {
            "sweep.beta": [6.0],
            "sweep.d": [32],
            "ensemble.runs": 100,
            "params.until": "horizon",
            "integrator.horizon": 20.0,
        },
    )
    with dyn.open(path) as ds:
        assert float(ds.horizon_used.max()) == pytest.approx(20.0)
        assert float(ds.horizon_cap.max()) == 20.0
        assert float(ds.p_undecided.max()) > 0.5


def test_network_kernel_stops_only_decided_runs():
    # n = 4 tokens, full d x d noise: a run that stopped before the last layer has every pair
    # past the stop levels, so its census class is one cluster or two antipodal clusters.
    rng = np.random.default_rng(3)
    d, beta = 3, 3.0
    lo, hi = ts.absorbing_levels(beta, d, 1.0, 0.0, ts.THRESHOLD, 1e-6)
    stop_minus, stop_plus = ts.log_gaps_u(lo)[0], ts.log_gaps_u(hi)[1]
    depth = 20000
    z, layers = ts.network(
        uniform_sphere(rng, 60, 4, d),
        depth,
        200.0,
        ts.pack(beta, d),
        rng=rng,
        stop_minus=float(stop_minus),
        stop_plus=float(stop_plus),
    )
    stopped = layers < depth
    assert 10 < stopped.sum() < 60
    minus, plus = ts.log_gaps(z[stopped])
    off = ~np.eye(4, dtype=bool)
    assert np.all(((minus < stop_minus) | (plus < stop_plus))[:, off])
    assert np.all(ts.census(z[stopped]) != ts.OTHER)


# the SDE form in the slow tier (a compile of its own): the network form runs until decided by
# the same stopping rule by default
@pytest.mark.parametrize("form", ["network", pytest.param("sde", marks=pytest.mark.slow)])
def test_d_dimensional_forms_run_until_decided(tmp_path, form):
    # The network (exact pair sampling, in-kernel stop) and the SDE (stretches of the horizon)
    # decide every run at d = 3, beta = 2, and agree in law with the exact probability.
    runs = 400
    path = _run(
        tmp_path,
        form,
        {
            "sweep.beta": [2.0],
            "sweep.d": [3],
            "ensemble.runs": runs,
            "params.form": form,
            "integrator.dt": 0.02,
            "integrator.horizon": 40.0,
        },
    )
    with dyn.open(path) as ds:
        ds = ds.squeeze()
        exact = ts.p_antipodal_exact(2.0, 3)
        assert float(ds.p_undecided) == 0.0
        assert float(ds.horizon_used) > 40.0
        assert abs(float(ds.p_antipodal) - exact) < 4 * math.sqrt(exact * (1 - exact) / runs) + 0.01


def test_horizon_limited_points_are_counted_listed_and_marked(tmp_path, capsys):
    path = dyn.run(
        PHASE,
        out=tmp_path / "short.h5",
        progress=False,
        overrides={
            "sweep.beta": [0.5, 6.0],
            "sweep.d": [3, 32],
            "ensemble.runs": 100,
            "params.until": "horizon",
            "integrator.horizon": 100.0,
        },
    )
    log = capsys.readouterr().err
    with dyn.open(path) as ds:
        limited = horizon_limited(ds)
        count = int((ds.p_undecided > HORIZON_LIMITED_SHARE).sum())
        assert bool(limited.sel(beta=6.0, d=32)) and int(limited.sum()) == count >= 1
        assert not bool(limited.sel(beta=6.0, d=3))  # fast rates: decided by T = 100
    assert f"{count} points are horizon-limited" in log
    text = dyn.presentation.analysis.summary(path)
    assert f"horizon-limited {count} points" in text and "beta = 6, d = 32" in text
    from dyn.presentation.plot import plot

    assert plot(path).exists()


def test_uneven_axes_get_readable_cells():
    assert _scale([2, 3, 4, 5, 6, 8, 10, 16, 32]) == "log"  # uneven, spans a decade
    assert _scale(np.linspace(0.1, 9.0, 45)) == "linear"  # even steps stay linear
    assert _scale([16, 32, 64, 128]) == "log"
    assert _scale([1.0, 2.0, 5.0, 6.0]) == "index"  # uneven within a decade: equal cells
    edges = _edges([2, 3, 4, 5, 6, 8, 10, 16, 32], "log")
    widths = np.diff(np.log(edges))
    assert widths.max() < 3.5 * widths.min()  # no row is a tall block
    forward, inverse = _index_map([1.0, 2.0, 5.0, 6.0])
    np.testing.assert_allclose(forward([1.0, 2.0, 5.0, 6.0, 7.0]), [0, 1, 2, 3, 4])
    np.testing.assert_allclose(inverse(forward([0.3, 3.7, 6.5])), [0.3, 3.7, 6.5])


def test_until_decided_refuses_what_it_cannot_decide():
    with pytest.raises(dyn.ScenarioError, match="params.until"):
        dyn.load(PHASE, ['params.form="network"', 'params.noise="goe"'])
    with pytest.raises(dyn.ScenarioError, match="params.absorb_tol"):
        dyn.load(PHASE, ["params.absorb_tol=0.0"])
    dyn.load(PHASE, ["params.absorb_tol=0.0", 'params.until="horizon"'])  # accepted
