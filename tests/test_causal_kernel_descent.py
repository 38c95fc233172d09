"""Causal kernel descent (dyn.frontier.causal_kernel_descent, written through the public API):
the batch layer's error law E^(l+1) = E^(l) (I - eta X X^T), its depth limit in closed form,
the network's O(1/L) distance to it, the decay rate against lambda_min, periodic interpolation
and the Kaczmarz sweep."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.linalg

import dyn
from dyn.frontier import causal_kernel_descent as ckd
from dyn.presentation import comparison
from dyn.presentation.cli import main
from dyn.presentation.exact import compare_exact

SMALL = """
[scenario]
name = "ckd_small"
system = "dyn.frontier.causal_kernel_descent:CausalKernelDescent"
[params]
d = 3
tokens = 8
[sweep]
depth = [64, 128, 256]
[ensemble]
runs = 4
seed = 5
common = ["depth"]
[integrator]
horizon = 4.0
[output]
path = "{path}"
saves = 4
trajectories = true
"""


def test_batch_layer_multiplies_the_error_by_i_minus_eta_xxt():
    """Linear kernel, x_{t+1} = W x_t: after l layers E = -W (I - eta X^T X)^l, to rounding."""
    x, w = ckd.prompt(np.random.default_rng(1), 3, 9, "orthogonal", 3)
    keys, eta, depth = x[:8], 0.05, 40
    _, norms = ckd.descend(x, "linear", 1.0, depth, eta, "batch", depth, w=w)
    step = np.eye(3) - eta * keys.T @ keys
    for layer in (1, 7, 40):
        law = np.linalg.norm(-w @ np.linalg.matrix_power(step, layer))
        assert abs(norms[layer] - law) < 1e-12
    bound = np.abs(1 - eta * np.linalg.eigvalsh(keys.T @ keys)).max() ** depth * norms[0]
    assert norms[depth] <= bound * (1 + 1e-12)


@pytest.mark.parametrize("kernel", ckd.KERNELS)
@pytest.mark.parametrize("kind", ["orthogonal", "periodic"])
def test_depth_limit_is_the_integral_of_the_kernel_flow(kernel, kind):
    """limit(): alpha = Y int_0^tau e^{-sK} ds, against the block exponential, to 1e-12; the
    network of depth L is within O(1/L) of it (the distance halves as L doubles)."""
    x, _ = ckd.prompt(np.random.default_rng(2), 3, 8, kind, 3)
    tau = 2.0
    want = np.zeros((8, 3))
    for i in range(1, 8):
        keys, y = x[:i], x[1 : i + 1].T
        k = ckd.gram(keys, keys, kernel, 1.0)
        block = np.zeros((2 * i, 2 * i))
        block[:i, :i], block[:i, i:] = -k, np.eye(i)
        want[i] = y @ scipy.linalg.expm(tau * block)[:i, i:] @ ckd.gram(keys, x[i : i + 1], kernel, 1.0)[:, 0]
    assert np.abs(ckd.limit(x, kernel, 1.0, tau) - want).max() < 1e-12
    gaps = [np.abs(ckd.descend(x, kernel, 1.0, n, tau / n, "batch", n)[0][-1] - want).max() for n in (64, 128)]
    assert 1.8 < gaps[0] / gaps[1] < 2.2


def test_rate_is_the_spectral_law_and_tends_to_lambda_min():
    """rate (-d log|E|/d tau over the last interval) equals the closed form from the prompt's
    spectrum, sum_i (1 - eta mu_i)^{2l}, per run; it is within 2% of lambda_min(X X^T) where
    the spectral gap has decayed ((mu_2 - mu_1) tau > 5)."""
    rng = np.random.default_rng(3)
    tau, depth, every = 12.0, 1024, 128
    checked = 0
    for _ in range(12):
        x, w = ckd.prompt(rng, 3, 10, "orthogonal", 3)
        _, norms = ckd.descend(x, "linear", 1.0, depth, tau / depth, "batch", every, w=w)
        mu = np.linalg.eigvalsh(x[:9].T @ x[:9])
        end = depth
        while norms[end] < ckd.FLOOR * norms[0]:
            end -= every
        rate = -np.log(norms[end] / norms[end - every]) / (tau / depth * every)
        law = [np.log(np.sum((1 - tau / depth * mu) ** (2 * n))) for n in (end - every, end)]
        assert rate == pytest.approx(-(law[1] - law[0]) / (2 * tau / depth * every), rel=1e-6)
        if (mu[1] - mu[0]) * tau > 5:
            checked += 1
            assert rate == pytest.approx(mu[0], rel=0.02)
    assert checked >= 4


def test_periodic_prompts_are_interpolated_once_past_the_period():
    """p = 3: positions i >= p query a past key and their error falls like e^{-lambda^+ tau};
    positions i < p query a new token and keep an O(1) error."""
    x, _ = ckd.prompt(np.random.default_rng(4), 4, 10, "periodic", 3)
    errors = [np.linalg.norm(ckd.limit(x, "exp", 1.0, tau) - x[1:], axis=1) for tau in (20, 40)]
    assert errors[1][3:].max() < 1e-3 and errors[1][3:].max() < 0.5 * errors[0][3:].max()
    assert errors[1][:3].min() > 0.1


def test_a_kaczmarz_step_projects_onto_its_pair():
    """After one cyclic sweep the last pair of each position is fitted exactly (the last step
    projected onto it), and the residual's sweep factor is below 1."""
    x, w = ckd.prompt(np.random.default_rng(6), 3, 7, "orthogonal", 3)
    k, y, kq = ckd.padded(x, "linear", 1.0)
    _, norms = ckd.descend(x, "linear", 1.0, 3, 1.0, "cyclic", 1, w=w)
    assert norms[1] < norms[0] and norms[3] < norms[1]
    # one sweep by hand at the last position: W += (y_s - W x_s) x_s^T in causal order
    wl = np.zeros((3, 3))
    for s in range(6):
        wl += np.outer(x[s + 1] - wl @ x[s], x[s])
    assert abs(wl @ x[5] - x[6]).max() < 1e-12
    assert abs(np.linalg.norm(wl - w) - norms[1]) < 1e-12


@pytest.mark.slow
def test_scenario_slope_against_its_own_limit(tmp_path):
    """A small sweep: the file's states against reference() from each run's own prompt, rate
    -1 in depth; the cyclic order's factor per sweep is recorded beside the Kaczmarz bound."""
    toml = tmp_path / "small.toml"
    toml.write_text(SMALL.format(path=tmp_path / "small.h5"))
    out = dyn.run(str(toml), progress=False, log=io.StringIO())
    rate = comparison.rates(compare_exact(out), "depth")[()]
    assert rate.lo <= -1.0 <= rate.hi and abs(rate.slope + 1) < 0.05, rate
    with dyn.open(out) as ds:
        assert np.all(ds.rate_law.values > 0)
        np.testing.assert_allclose(ds.rate.values, ds.rate_law.values, rtol=1e-6)


@pytest.mark.parametrize("line", ['kernel = "cosine"', "depth = 30"])
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, line):
    key = "saves" if line.startswith("depth") else line.split(" = ")[0]
    text = SMALL.format(path=tmp_path / "bad.h5").replace("depth = [64, 128, 256]", "")
    text = text.replace('common = ["depth"]', "")
    text = text.replace("[params]", f"[params]\n{line}")
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    assert main(["run", str(toml)]) == 2  # in this process: `python -m dyn` is main (test_cli)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and key in err, err
    assert not (tmp_path / "bad.h5").exists()


@pytest.mark.slow
def test_cyclic_order_is_not_bounded_by_the_randomized_kaczmarz_rate():
    """256 Haar prompts (d = 4, T = 12): the randomized order's mean factor per sweep stays
    below (1 - sigma_min^2 / ||X||_F^2)^{m/2} in every prompt; the cyclic (causal) order is
    faster in the median but exceeds that bound in some prompts (8 of 256 in this draw)."""
    rng = np.random.default_rng(11)
    cyclic, randomized, bound = [], [], []
    for r in range(256):
        x, w = ckd.prompt(rng, 4, 12, "orthogonal", 3)
        mu = np.linalg.eigvalsh(x[:11].T @ x[:11])
        bound.append((1 - mu[0] / 11) ** (11 / 2))
        for update, out in (("cyclic", cyclic), ("random", randomized)):
            _, n = ckd.descend(x, "linear", 1.0, 40, 1.0, update, 40, np.random.default_rng(r), w)
            last = np.flatnonzero(n > ckd.FLOOR * n[0])[-1]
            out.append((n[last] / n[0]) ** (1 / last))
    cyclic, randomized, bound = map(np.array, (cyclic, randomized, bound))
    assert np.all(randomized <= bound)
    assert np.median(cyclic) < np.median(randomized) < np.median(bound)
    assert 0 < np.sum(cyclic > bound) < 0.1 * len(bound)
