"""Reverse diffusion of Gaussian data (dyn/frontier/reverse_diffusion.py): the score is the OU
marginal's, the reverse moment equation with the exact score runs the forward marginal backwards
for every noise level, its solution against the closed forms with a score error (the
probability-flow ODE with the scale error; the shift and scale errors on isotropic data, where
the SDE beats the ODE exactly when T > 1.594), the Gaussian W2 and KL, bad values in one line,
and (slow tier) the shipped sweep: closed forms to 1e-8 and the sign of W2_sde - W2_ode."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

import dyn
from dyn.frontier import reverse_diffusion as rd
from dyn.presentation.cli import main

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
LAW = dict(d=3, var=2.0, kappa=5.0, angle=0.7, mean=1.5)


def _args(T, noise, eps, error, **law):
    law = {**LAW, **law}
    return (law["d"], T, law["var"], law["kappa"], law["angle"], law["mean"], noise, eps, error)


# slow tier: compiles the score on its own; by default the score drives
# test_the_exact_score_runs_the_marginal_backwards, which only the right score passes
@pytest.mark.slow
def test_the_score_is_the_ou_marginals():
    # N(m_t, S_t) solves the OU moment equations m' = -m, S' = -2 S + 2 I, and hat s with
    # eps = 0 is -S_t^{-1} (x - m_t)
    t, h = 0.7, 1e-5
    (m1, s1), (m2, s2) = (rd.marginal(t + k, **LAW) for k in (-h, h))
    m, s = rd.marginal(t, **LAW)
    assert np.abs((m2 - m1) / (2 * h) + m).max() < 1e-8
    assert np.abs((s2 - s1) / (2 * h) + 2 * s - 2 * np.eye(3)).max() < 1e-8
    big, c = rd.affine_score(t, 3, 2.0, 5.0, 0.7, 1.5, 0.0, 0)
    x = np.array([0.3, -1.0, 2.0])
    assert np.abs(big @ x + c + np.linalg.solve(s, x - m)).max() < 1e-12


@pytest.mark.parametrize("noise", [0.0, 0.5, 1.0, 3.0])
def test_the_exact_score_runs_the_marginal_backwards(noise):
    T = 2.0
    times = np.linspace(0.0, T, 9)
    mu, cov = rd.lyapunov(times, "exact", *_args(T, noise, 0.0, 0))
    for j, s in enumerate(times):
        m_t, s_t = rd.marginal(T - s, **LAW)
        assert np.abs(mu[j] - m_t).max() < 1e-9 and np.abs(cov[j] - s_t).max() < 1e-9


@pytest.fixture
def source_kernels(monkeypatch):
    """The module's numba kernels as their Python source (py_func): the same formulas, without
    compiling them from Python (~10 s on a cold cache: the engine compiles them in its drift,
    which the slow tier runs, as it runs test_the_drift_is_the_lyapunov_equation compiled)."""
    for name in ("moment_field", "affine_score", "basis", "spectrum"):
        monkeypatch.setattr(rd, name, getattr(rd, name).py_func)


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_drift_is_the_lyapunov_equation(compiled, request):
    # the engine's drift, integrated by scipy, against lyapunov's own right side
    if not compiled:
        request.getfixturevalue("source_kernels")
    T, times = 1.5, np.array([0.0, 0.5, 1.5])
    for noise, eps, error, start in [(1.0, 0.3, 0, "exact"), (0.0, 0.2, 1, "stationary"), (0.5, 0.1, 2, "exact")]:
        args = _args(T, noise, eps, error)
        mu0, c0 = rd.start_moments(start, 3, T, LAW["var"], LAW["kappa"], LAW["angle"], LAW["mean"])
        y0 = np.vstack([mu0, c0])
        sol = solve_ivp(
            lambda s, y: rd.moment_field(s, y.reshape(4, 3), *args).ravel(),  # noqa: B023 solve_ivp calls it at once
            (0.0, T),
            y0.ravel(),
            method="DOP853",
            rtol=1e-12,
            atol=1e-14,
            t_eval=times,
        )
        mu, cov = rd.lyapunov(times, start, *args)
        got = sol.y.T.reshape(len(times), 4, 3)
        assert np.abs(got[:, 0] - mu).max() < 1e-9 and np.abs(got[:, 1:] - cov).max() < 1e-9


@pytest.mark.parametrize("start, eps", [("exact", 0.3), ("stationary", 0.05)])
def test_the_probability_flow_with_the_scale_error_is_in_closed_form(start, eps):
    T = 2.5
    times = np.linspace(0.0, T, 6)
    _, cov = rd.lyapunov(times, start, *_args(T, 0.0, eps, 0))
    r = rd.basis(3, LAW["angle"])
    values = rd.spectrum(3, LAW["var"], LAW["kappa"])
    _, c0 = rd.start_moments(start, 3, T, LAW["var"], LAW["kappa"], LAW["angle"], LAW["mean"])
    closed = rd.pf_scale_variances(times, np.diag(r.T @ c0 @ r), values, T, eps)
    rotated = np.einsum("ki,tkl,lj->tij", r, cov, r)  # R^T C R: diagonal
    assert np.abs(rotated - closed[:, :, None] * np.eye(3)).max() < 1e-9


def test_on_isotropic_data_the_sde_beats_the_ode_for_a_shift_exactly_when_t_exceeds_1_594():
    # S = I: the ODE carries the shift eps q along (|mu - m| = eps T), the SDE contracts it
    # (2 eps (1 - e^{-T})); the covariances stay exact, so W2 is the mean's error
    crossing = brentq(lambda t: 2 * (1 - np.exp(-t)) - t, 0.5, 3.0)
    assert abs(crossing - 1.5936) < 1e-4
    eps = 0.1
    for T in (0.5, 1.0, 1.5, 1.7, 3.0):
        gaps = {}
        for noise in (0.0, 1.0):
            mu, cov = rd.lyapunov(np.array([0.0, T]), "exact", *_args(T, noise, eps, 2, var=1.0, kappa=1.0))
            m, s = rd.data_law(3, 1.0, 1.0, LAW["angle"], LAW["mean"])
            assert np.abs(cov[-1] - np.eye(3)).max() < 1e-10
            gaps[noise] = rd.w2(mu[-1], cov[-1], m, s)
        assert abs(gaps[0.0] - eps * T) < 1e-9
        assert abs(gaps[1.0] - 2 * eps * (1 - np.exp(-T))) < 1e-9
        assert (gaps[1.0] < gaps[0.0]) == (T > crossing)


def test_on_isotropic_data_the_scale_error_has_its_closed_variances():
    T, eps = 1.2, 0.4
    ode = rd.lyapunov(np.array([0.0, T]), "exact", *_args(T, 0.0, eps, 0, var=1.0, kappa=1.0))[1]
    sde = rd.lyapunov(np.array([0.0, T]), "exact", *_args(T, 1.0, eps, 0, var=1.0, kappa=1.0))[1]
    rate = 1 + 2 * eps
    assert np.abs(ode[-1] - np.exp(-2 * eps * T) * np.eye(3)).max() < 1e-10
    want = 1 / rate + (1 - 1 / rate) * np.exp(-2 * rate * T)
    assert np.abs(sde[-1] - want * np.eye(3)).max() < 1e-10


def test_gaussian_w2_and_kl():
    mu1, mu2 = np.array([1.0, 0.0]), np.array([0.0, 2.0])
    a, b = np.array([1.0, 4.0]), np.array([9.0, 0.25])
    assert abs(rd.w2(mu1, np.diag(a), mu2, np.diag(b)) ** 2 - (5.0 + ((np.sqrt(a) - np.sqrt(b)) ** 2).sum())) < 1e-12
    want = 0.5 * ((a / b).sum() + ((mu2 - mu1) ** 2 / b).sum() - 2 + np.log(b / a).sum())
    assert abs(rd.kl(mu1, np.diag(a), mu2, np.diag(b)) - want) < 1e-12
    rot = rd.basis(2, 0.4)  # W2 is invariant under a common rotation
    assert (
        abs(
            rd.w2(rot @ mu1, rot @ np.diag(a) @ rot.T, rot @ mu2, rot @ np.diag(b) @ rot.T)
            - rd.w2(mu1, np.diag(a), mu2, np.diag(b))
        )
        < 1e-10
    )
    assert abs(rd.kl(mu1, np.diag(a), mu1, np.diag(a))) < 1e-14


@pytest.mark.parametrize(
    "setting, key",
    [
        ("params.eps=-0.1", "params.eps"),
        ("params.error=3", "params.error"),
        ("params.d=9", "params.d"),
        ('params.start="zero"', "params.start"),
        ("params.kappa=0.5", "params.kappa"),
        ("integrator.horizon=3.0", "integrator.horizon"),
    ],
)
def test_bad_values_are_one_line_and_exit_2(setting, key, tmp_path, capsys):
    code = main(["run", str(SCENARIOS / "reverse_diffusion.toml"), "--out", str(tmp_path / "x.h5"), "--set", setting])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("dyn: ") and key in err[0]
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.slow  # the shipped sweep, 384 points (about a minute)
def test_the_shipped_sweep_meets_the_closed_forms(tmp_path):
    out = dyn.run(SCENARIOS / "reverse_diffusion.toml", tmp_path / "r.h5", progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        assert (ds["status"].values == 1).all()
        exact = ds.sel(eps=0.0, start="exact")
        assert float(exact["mean_error"].max()) < 1e-8 and float(exact["cov_error"].max()) < 1e-8
        assert float(ds["lyapunov_error"].max()) < 1e-8
        ratio = ds["w2_log_ratio"].sel(start="exact").isel(eps=slice(1, None))
        assert (ratio.sel(T=0.1) > 0).all() and (ratio.sel(T=3.0) < 0).all()  # the SDE: worse, better
        assert np.isnan(ds["w2_log_ratio"].sel(start="exact", eps=0.0)).all()  # both exact
        # the ODE carried in each point, against scipy's Lyapunov solution at nu = 0
        point = ds.sel(T=2.0, eps=0.1, error=1, start="stationary")
        mu, cov = rd.lyapunov(
            np.array([0.0, 2.0]), "stationary", *_args(2.0, 0.0, 0.1, 1, var=1.0, kappa=4.0, angle=0.5, mean=1.0)
        )
        m, s = rd.data_law(3, 1.0, 4.0, 0.5, 1.0)
        assert abs(float(point["w2_ode"].isel(time=-1)) - rd.w2(mu[-1], cov[-1], m, s)) < 1e-9


def test_the_euler_maruyama_law_tends_to_the_lyapunov_solution_at_first_order(source_kernels):
    # the exact law of the chain the engine runs, against the continuous moments: error O(dt)
    args, times = _args(2.0, 1.0, 0.1, 0), np.linspace(0.0, 1.0, 5)
    mu, cov = rd.lyapunov(2.0 * times, "exact", *args)
    errors = []
    for dt in (0.02, 0.01, 0.005):
        mu_em, cov_em, _, _ = rd.euler_law(times, dt, "exact", *args)
        errors.append(max(np.abs(mu_em - mu).max(), np.abs(cov_em - cov).max()))
    slopes = np.diff(np.log(errors)) / np.diff(np.log([0.02, 0.01, 0.005]))
    assert np.all(np.abs(slopes - 1.0) < 0.05), slopes


def test_without_noise_the_chain_is_its_affine_map(source_kernels):
    args, times = _args(1.0, 0.0, 0.3, 1), np.linspace(0.0, 1.0, 3)
    mu, cov, phi_mat, phi = rd.euler_law(times, 0.01, "stationary", *args)
    assert np.abs(mu - phi).max() < 1e-14  # from mu0 = 0
    assert np.abs(cov - np.einsum("tij,tkj->tik", phi_mat, phi_mat)).max() < 1e-13  # C0 = I


SAMPLES = """
[scenario]
name = "samples"
system = "dyn.frontier.reverse_diffusion:ReverseSamples"
[params]
d = 3
T = 2.0
n = 3000
eps = 0.1
error = 2
noise = {noise}
[ensemble]
runs = 6
seed = 11
[integrator]
backend = "numba"
method = "euler_maruyama"
dt = 0.01
horizon = 1.0
[output]
saves = 2
"""


@pytest.mark.slow  # compiles the samples' numba drift and diffusion (about 20 s)
@pytest.mark.parametrize("noise", [0.0, 1.0])
def test_the_engines_samples_follow_the_chains_law(noise, tmp_path):
    # noise = 0: the sample moments are the chain's affine map of the start's, to rounding;
    # noise = 1: the samples of each run are i.i.d. N(mu_k, C_k) (the chain's exact law), so the
    # whitened sample means z = sqrt(n) C^{-1/2} (mean - mu) of the 6 runs give sum |z|^2 ~
    # chi^2 with 18 degrees of freedom: checked inside its 1e-6 and 1 - 1e-6 quantiles
    # (false-failure rate 2e-6; the seed is fixed)
    from scipy.stats import chi2

    path = tmp_path / "s.toml"
    path.write_text(SAMPLES.format(noise=noise))
    scenario = dyn.load(path)
    spec, model = scenario.spec(0), scenario.system
    x0 = model.initial_state(spec, 6)
    states = spec.solver.get().solve(model.problem(spec, x0.shape[1:]), x0, spec.times, rng=spec.rng).states
    chunk = model.observe(spec, states)
    args = (3, 2.0, 1.0, 4.0, 0.5, 1.0, noise, 0.1, 2)
    mu, cov, _, _ = rd.euler_law(spec.times, spec.dt, "exact", *args)
    if noise == 0.0:
        assert np.nanmax(chunk.values["map_error"]) < 1e-12
        return
    assert np.isnan(chunk.values["map_error"]).all()
    root = np.linalg.cholesky(cov[-1])
    z = np.sqrt(3000) * np.linalg.solve(root, (states[:, -1].mean(axis=1) - mu[-1]).T)
    total = float((z**2).sum())
    assert chi2.ppf(1e-6, 18) < total < chi2.ppf(1 - 1e-6, 18)
