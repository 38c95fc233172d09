"""Positional attention (dyn/frontier/positional_attention.py): the attention matrix of each
positional kernel against its closed-form spectrum, the engine's drift as (A - I) x, the
measured mode rates against the closed form to 1e-10, the two time scales of patch groups,
and the limits of mixed attention (beta -> 0: linear; rho -> 0: the softmax flow)."""

import numpy as np
import pytest

import dyn
from dyn.frontier import positional_attention as pa
from dyn.presentation.cli import main

G = 6


def _drift(cls, x, **values):
    """The engine's numba drift of a built class at a state x (n, d), params by name."""
    p = np.array([float(values[k]) for k in cls.parameters()])
    out = np.empty_like(x)
    cls.numba_function("drift")(0.0, x, p, out, np.empty(cls.work_size(*x.shape, p)))
    return out


LAW = dict(g=G, sigma=1.3, block=3, a=1.0, eps=0.05, beta=0.0, rho=0.8)


def _fourier(g):
    """The Fourier modes e_ab(i) (g^2 modes by a g + b, g^2 tokens)."""
    i = np.arange(g * g)
    a, b = np.divmod(np.arange(g * g), g)
    return np.exp(2j * np.pi * (np.outer(a, i // g) + np.outer(b, i % g)) / g)


@pytest.mark.parametrize("kernel", ["gaussian", "mixed"])
def test_circulant_kernels_have_the_closed_form_fourier_spectrum(kernel):
    # A e_ab = mu_a mu_b e_ab for every Fourier mode, mu the kernel's cosine sums on Z_g
    # (mixed: its positional part, beta = 0)
    a = pa.attention_matrix(kernel, **LAW)
    assert np.abs(a - a.T).max() < 1e-15 and np.abs(a.sum(axis=1) - 1).max() < 1e-15
    modes = _fourier(G)
    lam = 1 - pa.mode_rates(kernel, G, LAW["sigma"], LAW["rho"])
    assert np.abs(modes @ a.T - lam[:, None] * modes).max() < 1e-13
    # the engine's drift is (A - I) x, so each real mode is an eigenvector with rate 1 - lambda
    cls = pa.Gaussian if kernel == "gaussian" else pa.Mixed
    x = np.stack([modes[7].real, modes[7].imag], axis=1)
    assert np.abs(_drift(cls, x, **LAW) - (lam[7] - 1) * x).max() < 1e-13


def test_gaussian_coefficients_tend_to_the_heat_kernels():
    # for 1 << sigma << g Poisson summation gives mu_a ~ exp(-2 pi^2 sigma^2 a^2 / g^2), up to
    # the aliased images, of relative size e^{-2 pi^2 sigma^2} (large for sigma < 1)
    g = 256
    a = np.arange(0, g // 2 + 1, 16)
    for sigma, low, high in ((6.0, 0.0, 1e-13), (2.0, 1e-10, 1e-7), (0.7, 1e-2, 1.0)):
        mu = pa.gaussian_coefficients(g, sigma)[a]
        gap = np.abs(mu - np.exp(-2 * np.pi**2 * sigma**2 * a**2 / g**2)).max()
        assert low <= gap < high, (sigma, gap)


def test_blocks_spectrum_has_three_eigenspaces():
    # w = eps J + (a - eps) B: eigenvalues 1 (consensus), (a - eps) m / s (G - 1 contrasts),
    # 0 (n - G within-group), so the rates are 0, r_merge = G eps / (a + (G - 1) eps), 1
    a = pa.attention_matrix("blocks", **LAW)
    lam = np.sort(np.linalg.eigvalsh(a))
    n, m, groups = G * G, 9, 4
    r = pa.merge_rate(G, 3, 1.0, 0.05)
    assert abs(r - groups * 0.05 / (1 + (groups - 1) * 0.05)) < 1e-15
    assert abs((1 - 0.05) * m / (m + 0.05 * (n - m)) - (1 - r)) < 1e-15
    expected = np.sort(np.r_[np.zeros(n - groups), np.full(groups - 1, 1 - r), 1.0])
    assert np.abs(lam - expected).max() < 1e-13
    x = np.random.default_rng(1).standard_normal((n, 2))
    within, between = pa.split(x, pa.groups(G, 3))
    drift = _drift(pa.Blocks, x, **LAW)
    assert np.abs(drift - (-within - r * between)).max() < 1e-13


SMALL = """
[scenario]
name = "positional_small"
system = "dyn.frontier.positional_attention:PositionalAttention"

[params]
g = 6
n = 36
d = 2
sigma = 1.3
block = 3
eps = 0.05
rho = 0.8

[sweep]
kernel = ["gaussian", "blocks", "mixed"]

[ensemble]
runs = 2
seed = 3

[integrator]
method = "rk4"
dt = 0.005
horizon = 2.0

[output]
path = "{path}"
saves = 2
"""


def _small(tmp_path, name, extra=""):
    toml = tmp_path / f"{name}.toml"
    toml.write_text(SMALL.format(path=tmp_path / f"{name}.h5") + extra)
    return dyn.open(dyn.run(str(toml)))


def test_measured_rates_match_the_closed_form(tmp_path):
    ds = _small(tmp_path, "small")
    # every Fourier mode's rate (gaussian; mixed at beta = 0) and the blocks' within and
    # between rates against the closed form to 1e-10
    assert float(ds.rate_error.max()) < 1e-10
    # RK4 multiplies a mode by R(-r h) per step: the measured rate is -log R(-r h) / h to
    # rounding, r - r^5 h^4 / 120 to leading order
    h = 0.005
    for kernel in ("gaussian", "mixed"):
        r = ds.mode_rate_exact.sel(kernel=kernel).values
        z = -r * h
        rk4 = -np.log(1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24) / h
        assert np.abs(ds.mode_rate.sel(kernel=kernel).values - rk4).max() < 1e-12
        assert float(ds.mode_rate_se.sel(kernel=kernel).max()) < 1e-12  # every run alike
        assert abs(float(ds.mode_rate.sel(kernel=kernel, mode=0))) < 1e-13  # the mean stays
    blocks = ds.sel(kernel="blocks")
    assert np.abs(blocks.within - blocks.within_exact).max() < 1e-10
    assert np.abs(blocks.between - blocks.between_exact).max() < 1e-10
    assert float(blocks.rate_between_exact) < 0.25 < float(blocks.rate_within)  # two scales


def test_mixed_attention_limits():
    # beta -> 0: the positional (linear) flow; rho -> 0: the softmax flow softmax(beta <x_i, x_j>)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((G * G, 3)) * 0.7
    linear = (pa.attention_matrix("mixed", **LAW) - np.eye(G * G)) @ x
    assert np.abs(_drift(pa.Mixed, x, **LAW) - linear).max() < 1e-14
    gaps = [np.abs(_drift(pa.Mixed, x, **{**LAW, "beta": b}) - linear).max() for b in (1e-3, 1e-4)]
    assert 9 < gaps[0] / gaps[1] < 11  # O(beta)
    beta = 1.5
    s = beta * x @ x.T
    w = np.exp(s - s.max(axis=1, keepdims=True))
    softmax = (w / w.sum(axis=1, keepdims=True)) @ x - x
    law = {**LAW, "beta": beta}
    assert np.abs(_drift(pa.Mixed, x, **{**law, "rho": 0.0}) - softmax).max() < 1e-13
    gaps = [np.abs(_drift(pa.Mixed, x, **{**law, "rho": r}) - softmax).max() for r in (1e-2, 1e-3)]
    assert 90 < gaps[0] / gaps[1] < 110  # O(rho^2)


def test_mixed_flow_leaves_the_linear_rates_at_order_beta(tmp_path):
    # along the trajectory: the mixed flow's mode rates differ from the beta = 0 closed form by
    # O(beta) (Gronwall on a bounded interval)
    errors = []
    for beta in (1e-3, 1e-4):
        text = SMALL.replace('kernel = ["gaussian", "blocks", "mixed"]', "").replace(
            "[params]\n", f'[params]\nkernel = "mixed"\nbeta = {beta}\n'
        )
        toml = tmp_path / f"b{beta}.toml"
        toml.write_text(text.format(path=tmp_path / f"b{beta}.h5"))
        ds = dyn.open(dyn.run(str(toml)))
        errors.append(float(ds.rate_error))
    assert errors[1] > 1e-9
    assert 5 < errors[0] / errors[1] < 20


@pytest.mark.parametrize("line", ["n = 30", "block = 4", 'kernel = "fourier"', "sigma = 0.0"])
def test_bad_values_exit_2_in_one_line(tmp_path, capsys, line):
    key = line.split(" = ")[0]
    text = SMALL.format(path=tmp_path / "bad.h5").replace('kernel = ["gaussian", "blocks", "mixed"]', "")
    text = "\n".join(t for t in text.splitlines() if not t.startswith(f"{key} =")).replace(
        "[params]", f"[params]\n{line}"
    )
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    assert main(["run", str(toml)]) == 2  # in this process: `python -m dyn` is main (test_cli)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and key in err, err
    assert not (tmp_path / "bad.h5").exists()
