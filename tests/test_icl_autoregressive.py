"""In-context autoregressive learning (dyn.frontier.icl_autoregressive, written through the
public API): the closed-form training loss and its family of minima C = c I + e M, the Hessian's
closed-form spectrum on the e = 0 branch, the gradient flow to loss 0, and the one gradient step
Gamma_T against the context length through `dyn compare --reference exact --statistic`."""

from __future__ import annotations

import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dyn
import integrators
from dyn.frontier import icl_autoregressive as icl
from dyn.presentation import comparison
from dyn.presentation.cli import main
from dyn.presentation.exact import compare_exact

integrators.configure_jax()  # float64, as the engine runs the flow

CONTEXT = """
[scenario]
name = "icl_context_small"
system = "dyn.frontier.icl_autoregressive:ICLContext"
[params]
d = 4
[sweep]
context = [16, 32, 64, 128, 256]
[ensemble]
runs = 64
seed = 2
common = ["context"]
[integrator]
horizon = 1.0
[output]
path = "{path}"
saves = 1
trajectories = true
"""


def _theta(c, e, d, t):
    """A balanced point of the family: A = B = C^{1/2} (C = c I + e M), rows (.., u, v)."""
    m = np.zeros((d, d))
    for k in range(d // 2):
        m[2 * k, 2 * k + 1] = m[2 * k + 1, 2 * k] = 1.0
    w, v = np.linalg.eigh(c * np.eye(d) + e * m)
    root = (v * np.sqrt(np.abs(w))) @ v.T
    signed = (v * (np.sign(w) * np.sqrt(np.abs(w)))) @ v.T  # B^T A = C, C indefinite too
    p = np.zeros((t, t))
    rows = np.arange(t - 1)
    p[rows, rows + 1] = 1.0 / c
    p[rows, rows] = -e / (c * (c + e))
    return {"A": jnp.asarray(root), "B": jnp.asarray(signed), "P": jnp.asarray(p)}


@pytest.mark.parametrize("e", [0.0, 0.3, 0.9, 1.2])
def test_the_loss_vanishes_on_the_whole_family(e):
    """l = 0 at C = c I + e M, v = 1/c, u = -e/(c (c + e)) for every e, not only at C = c I
    with a one-hot p; and l > 0 away from it (an expected square error is nonnegative)."""
    theta = _theta(1.2, e * 1.2, 4, 7)
    assert abs(float(icl.training_loss(theta, {}))) < 1e-12
    assert float(icl.trig(theta)) < 1e-12 and float(icl.pos_off_two(theta)) < 1e-12
    rng = np.random.default_rng(0)
    for _ in range(20):
        shaken = {k: v + 0.1 * rng.standard_normal(v.shape) for k, v in theta.items()}
        assert float(icl.training_loss(shaken, {})) > 0


@pytest.mark.parametrize(
    "d, t, c",
    [(2, 5, 1.3), pytest.param(4, 8, 0.7, marks=pytest.mark.slow), pytest.param(4, 6, -1.1, marks=pytest.mark.slow)],
)
def test_hessian_spectrum_on_the_e0_branch_is_the_closed_form(d, t, c):
    """At a balanced minimum with e = 0 the Hessian's nonzero eigenvalues are 4 (T - 1)/|c|,
    2 d c^2 and their sum; hessian_min is the smallest, hessian_law = 2 d c^2."""
    theta = _theta(c, 0.0, d, t)
    names = ("A", "B", "P")
    flat = jnp.concatenate([theta[k].reshape(-1) for k in names])

    def of(x):
        return icl.training_loss(
            {"A": x[: d * d].reshape(d, d), "B": x[d * d : 2 * d * d].reshape(d, d), "P": x[2 * d * d :].reshape(t, t)},
            {},
        )

    ev = np.linalg.eigvalsh(np.asarray(jax.jit(jax.hessian(of))(flat)))
    found = np.unique(np.round(ev[ev > 1e-8], 8))
    law = sorted([4 * (t - 1) / abs(c), 2 * d * c * c, 4 * (t - 1) / abs(c) + 2 * d * c * c])
    np.testing.assert_allclose(found, law, rtol=1e-9)
    assert float(jax.jit(icl.hessian_min)(theta)) == pytest.approx(min(law), rel=1e-9)
    assert float(icl.hessian_law(theta)) == pytest.approx(2 * d * c * c, rel=1e-12)


def test_one_step_is_exact_over_whole_periods():
    """Angles 2 pi k / 7 with every frequency (theta_j +- theta_k, 2 theta_k) nonzero mod 2 pi:
    the Dirichlet sums vanish at T = 7, 14, so Gamma_T = W exactly; not at T = 10."""
    angles = 2 * np.pi * np.array([1.0, 2.0]) / 7
    w = icl.matrix(angles)
    for t in (7, 14):
        gamma, _ = icl.one_step(angles, t)
        assert np.abs(gamma - w).max() < 1e-12
    gamma, query = icl.one_step(angles, 10)
    assert np.linalg.norm(gamma @ query - w @ query) > 1e-2
    s = icl.sequence(angles, 4)
    np.testing.assert_allclose(s[1:], s[:-1] @ w.T, atol=1e-12)


def test_statistic_selects_the_curve_that_rates_fit():
    """Distances d = c / T times a heavy tail: --statistic median fits slope -1 exactly, the RMS
    (`error`) and the mean fit their own curves; an unknown statistic is refused by name."""
    import xarray as xr

    t = np.array([8.0, 16.0, 32.0, 64.0])
    tail = np.array([1.0, 1.0, 1.0, 50.0, 0.5])
    d = xr.DataArray(tail[None, :] / t[:, None], dims=("context", "run"), coords={"context": t})
    result = xr.Dataset(
        {"distance": d, "error": np.sqrt((d**2).mean("run")), "mean": d.mean("run"), "median": d.median("run")}
    )
    for statistic in ("error", "mean", "median"):
        chosen = comparison.select(result, statistic)
        rate = comparison.rates(chosen, "context")[()]
        assert rate.slope == pytest.approx(-1.0, abs=1e-12)  # every curve is c / T here
        assert np.allclose(chosen["error"], result[statistic])
    assert "median" in comparison.rate_lines(comparison.select(result, "median"), "context")[0]
    with pytest.raises(dyn.ScenarioError, match="statistic"):
        comparison.select(result, "mode")


@pytest.mark.slow
def test_compare_fits_median_and_mean_against_the_context_length(tmp_path, capsys):
    """The per-run reference W s_{T+1}: compare's distances are the runs' errors; --statistic
    median fits the median's slope (about -1; the mean's is shallower, log T / T)."""
    toml = tmp_path / "ctx.toml"
    toml.write_text(CONTEXT.format(path=tmp_path / "ctx.h5"))
    out = dyn.run(str(toml), progress=False, log=io.StringIO())
    result = compare_exact(out, at="final")
    with dyn.open(out) as ds:
        errors = ds["error"].values * np.sqrt(4)  # the output is divided by sqrt d
    np.testing.assert_allclose(result["distance"].values, errors, rtol=1e-9, atol=1e-12)
    median = comparison.rates(comparison.select(result, "median"), "context")[()]
    mean = comparison.rates(comparison.select(result, "mean"), "context")[()]
    assert -1.25 < median.slope < -0.8 and mean.slope > median.slope
    png = tmp_path / "m.png"
    assert (
        main(
            [
                "compare",
                str(out),
                "--reference",
                "exact",
                "--against",
                "context",
                "--statistic",
                "median",
                "--out",
                str(png),
            ]
        )
        == 0
    )
    assert "rate of the median against context" in capsys.readouterr().out and png.exists()


@pytest.mark.slow
def test_gradient_flow_reaches_zero_on_the_family(tmp_path):
    """d = 2, T = 5 from small starts: the loss falls below 1e-10, and the measures of the
    family (off_block, block_asym, pos_off_two, trig) to 0, while the local rate of L ~ e^{-2
    lambda t} matches the Hessian's smallest nonzero eigenvalue at the end within 10%."""
    toml = tmp_path / "flow.toml"
    toml.write_text("""
[scenario]
name = "icl_flow"
system = "dyn.frontier.icl_autoregressive:ICLTraining"
[params]
d = 2
context = 5
init_scale = 0.3
[ensemble]
runs = 3
seed = 1
[integrator]
backend = "jax"
method = "rk4"
dt = 0.01
horizon = 10.0
[output]
saves = 50
per_run = ["loss", "hessian_min"]
""")
    out = dyn.run(str(toml), progress=False, log=io.StringIO())
    with dyn.open(out) as ds:
        loss = ds["loss_per_run"].values
        assert np.abs(loss[:, -1]).max() < 1e-10
        for key in ("block_asym", "pos_off_two", "trig"):
            assert float(ds[key].isel(time=-1)) < 1e-6, key
        for r in range(loss.shape[0]):
            rate = icl.local_rate(ds.time.values, loss[r])
            assert rate == pytest.approx(float(ds["hessian_min_per_run"].values[r, -1]), rel=0.1)


@pytest.mark.parametrize("line, key", [("d = 3", "d"), ("heads = -1", "heads")])
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, line, key):
    text = CONTEXT.format(path=tmp_path / "bad.h5").replace("ICLContext", "ICLTraining").replace("d = 4", line)
    text = text.replace("context = [16, 32, 64, 128, 256]", "").replace('common = ["context"]', "")
    text = text.replace("horizon = 1.0", 'horizon = 1.0\nbackend = "jax"\nmethod = "rk4"\ndt = 0.1')
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    assert main(["run", str(toml)]) == 2  # in this process: `python -m dyn` is main (test_cli)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and key in err, err
    assert not (tmp_path / "bad.h5").exists()
