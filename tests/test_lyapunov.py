"""Finite-time Lyapunov exponents of the random-init network (dyn.tokens_sde.lyapunov): the
tangent of a layer against finite differences, and the exponents at the two-token invariant sets
against the closed forms of dyn.tokens_sde.rho (half of lambda_+-, the rates of the squared gaps).

Statistical checks: fixed seeds, |estimate - prediction| < 3 standard errors plus the O(h) bias
measured by halving h on the same Brownian path (coarse increments = sums of two fine ones).
"""

import math

import numpy as np
import pytest

from dyn import tokens_sde as ts

Z = 3.0  # standard errors


def pair(kind, E, d, rng):
    """E exact two-token invariant states with their tangent: the cluster z_1 = z_2 = z with the
    separation v_1 = -v_2 = w, or the antipodal pair z_1 = -z_2 = z with the symmetric tangent
    v_1 = v_2 = w (w perp z)."""
    z = rng.normal(size=(E, d))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    w = rng.normal(size=(E, d))
    w -= np.sum(w * z, 1, keepdims=True) * z
    if kind == "cluster":
        return np.stack([z, z], 1), np.stack([w, -w], 1)
    return np.stack([z, -z], 1), np.stack([w, w], 1)


def theory(kind, beta, d):
    """(lambda/2, K sigma^4/d^2): the limit and the O(h) coefficient of the FTLE (sigma = 1)."""
    t2 = math.tanh(beta) ** 2
    if kind == "cluster":
        return ts.lyapunov_plus(d) / 2, (d * d - 4 * d + 1) / 4 / d**2
    k = ((2 * d - 7) * (1 + t2 * t2) + 2 * (d - 3) * t2 - (d - 2) * (d - 4) * (1 - t2 * t2)) / 4
    return float(ts.lyapunov_minus(beta, d)) / 2, k / d**2


def coupled_ftle(kind, beta, d, h, T, E, seed, chunk=1000):
    """(E, 2) FTLEs at steps h and h/2 on the same Brownian paths (gaussian noise, vbar = 0)."""
    rng = np.random.default_rng(seed)
    p = ts.pack(beta, d, sigma=1.0)
    L = round(T / h)
    out = []
    for lo in range(0, E, chunk):
        e = min(chunk, E - lo)
        x, v = pair(kind, e, d, rng)
        fine = rng.normal(scale=math.sqrt(h / 2), size=(e, 2 * L, d, d))
        coarse = np.ascontiguousarray(fine[:, 0::2] + fine[:, 1::2])
        out.append(
            np.stack([ts.ftle(x, v, L, T, p, increments=coarse), ts.ftle(x, v, 2 * L, T, p, increments=fine)], 1)
        )
    return np.concatenate(out)


def mean_se(x):
    return x.mean(), x.std(ddof=1) / math.sqrt(len(x))


def check_exponent(kind, beta, d, h, T, E, seed):
    """The FTLE at h/2 against lambda/2 within 3 SE plus the measured bias; the Richardson
    value 2 lambda(h/2) - lambda(h) within 3 SE; the measured bias lambda(h) - lambda(h/2)
    against the derived K sigma^4 h/(2 d^2). Returns the numbers and the FTLEs."""
    f = coupled_ftle(kind, beta, d, h, T, E, seed)
    lam, c = theory(kind, beta, d)
    half, se_half = mean_se(f[:, 1])
    bias, se_bias = mean_se(f[:, 0] - f[:, 1])
    rich, se_rich = mean_se(2 * f[:, 1] - f[:, 0])
    info = {
        "theory": lam,
        "half": half,
        "se": se_half,
        "bias": bias,
        "se_bias": se_bias,
        "bias_derived": c * h / 2,
        "richardson": rich,
        "se_richardson": se_rich,
    }
    assert abs(half - lam) < Z * se_half + abs(bias), info
    assert abs(rich - lam) < Z * se_rich, info
    assert abs(bias - c * h / 2) < Z * se_bias, info
    return info, f


def one_layer_law(kind, beta, d, h, rng, n=1_000_000, reps=4):
    """E log|w'| / h from the one-layer law at the invariant set (module doc: the per-layer
    logs are i.i.d.), sampled directly with the first-order term (mean 0) subtracted as a
    control variate: (mean, SE)."""
    eps, t = math.sqrt(h / d), math.tanh(beta)
    vals = []
    for _ in range(reps):
        xi = rng.normal(scale=eps, size=(n, d))
        if kind == "cluster":
            y = xi.copy()
            y[:, 0] += 1.0
            y2 = np.sum(y * y, 1)
            log = 0.5 * np.log1p(-(xi[:, 1] ** 2) / y2) - 0.5 * np.log(y2) + xi[:, 0]
        else:
            eta = rng.normal(scale=eps, size=(n, d))
            y, u = t * xi, eta.copy()
            y[:, 0] += 1.0
            u[:, 1] += 1.0
            y2, u2, yu = np.sum(y * y, 1), np.sum(u * u, 1), np.sum(y * u, 1)
            log = 0.5 * np.log(u2 * y2 - yu * yu) - np.log(y2) - (eta[:, 1] - t * xi[:, 0])
        vals.append(log.mean() / h)
    return mean_se(np.array(vals))


# ------------------------------------------------------------------------------- the tangent


@pytest.mark.parametrize(
    "noise, vbar, matrix", [("gaussian", 0.0, False), ("goe", 0.7, False), ("gaussian", 0.0, True)]
)
@pytest.mark.parametrize("depth", [1, 3])
def test_tangent_matches_central_differences(noise, vbar, matrix, depth):
    rng = np.random.default_rng(11)
    E, n, d, h, eps = 4, 3, 4, 0.1, 1e-5
    x0 = rng.normal(size=(E, n, d))
    x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
    v0 = ts.tangent_space(x0, rng.normal(size=(E, n, d)))
    p = ts.pack(2.0, d, sigma=1.5, vbar=vbar, noise=noise, Vbar=rng.normal(size=(d, d)) if matrix else None)
    inc = rng.normal(scale=math.sqrt(h), size=(E, depth, d, d))
    growth, _, v = ts.tangent_run(x0, v0, depth, depth * h, p, increments=inc)
    norm = np.sqrt(np.sum(v0 * v0, axis=(1, 2)))[:, None, None]
    jv = np.exp(growth[:, -1])[:, None, None] * v * norm  # J v0
    # network() normalizes x0 +- eps v0: a retraction, whose eps^2 term cancels in the difference
    plus, _ = ts.network(x0 + eps * v0, depth, depth * h, p, increments=inc)
    minus, _ = ts.network(x0 - eps * v0, depth, depth * h, p, increments=inc)
    fd = (plus - minus) / (2 * eps)
    for e in range(E):
        assert np.abs(fd[e] - jv[e]).max() < 1e-6 * np.abs(jv[e]).max()


def test_tokens_are_the_networks():
    rng = np.random.default_rng(3)
    x0, v0 = rng.normal(size=(6, 3, 4)), rng.normal(size=(6, 3, 4))
    p = ts.pack(1.3, 4, sigma=0.8, vbar=0.4)
    growth, z, v = ts.tangent_run(x0, v0, 40, 2.0, p, rng=np.random.default_rng(5), save_every=10)
    net, _ = ts.network(x0, 40, 2.0, p, rng=np.random.default_rng(5), exact_pair=False)
    assert np.abs(z - net).max() < 1e-12
    assert growth.shape == (6, 5) and np.all(growth[:, 0] == 0.0)
    assert np.allclose(np.sum(v * v, axis=(1, 2)), 1.0)
    assert np.abs(np.sum(v * z, -1)).max() < 1e-12  # tangent to the spheres
    assert np.allclose(
        ts.ftle(x0, v0, 40, 2.0, p, rng=np.random.default_rng(5)), growth[:, -1] / 2.0, rtol=0, atol=1e-14
    )


def test_invariant_sets_keep_their_tangent_direction():
    rng = np.random.default_rng(8)
    p = ts.pack(0.9, 4)
    for kind, sign in (("cluster", -1.0), ("antipodal", 1.0)):
        x, v0 = pair(kind, 5, 4, rng)
        _, z, v = ts.tangent_run(x, v0, 200, 4.0, p, rng=rng)
        assert np.abs(z[:, 1] + sign * z[:, 0]).max() == 0.0  # z_2 = z_1 or -z_1, exactly
        assert np.abs(v[:, 1] - sign * v[:, 0]).max() < 1e-12  # v_2 = -v_1 or v_1


def test_rejects_a_tangent_without_a_tangent_part():
    x = np.ones((2, 2, 3))
    p = ts.pack(1.0, 3)
    with pytest.raises(ValueError, match="nonzero"):
        ts.ftle(x, 2 * x, 4, 1.0, p, rng=np.random.default_rng(0))  # radial only
    with pytest.raises(ValueError, match="shape"):
        ts.ftle(x, x[:, :1], 4, 1.0, p, rng=np.random.default_rng(0))


# ------------------------------------------------------------- the two-token exponents


def test_cluster_exponent():
    """Separation of an exact cluster (d = 3): lambda_+/2 = -1/3, bias -h/18."""
    check_exponent("cluster", 1.0, 3, h=0.1, T=10.0, E=4000, seed=1)


@pytest.mark.parametrize("beta, sign", [(0.3, 1), (1.5, -1)])
def test_antipodal_exponent(beta, sign):
    """Symmetric tangent of an exact antipodal pair, d = 4 (beta_c = arccosh(2)/2 = 0.658):
    lambda_-/2 = +0.0932 (beta = 0.3), -0.1822 (beta = 1.5)."""
    info, _ = check_exponent("antipodal", beta, 4, h=0.1, T=10.0, E=4000, seed=2)
    assert sign * info["half"] > Z * info["se"], info


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, beta, d", [("cluster", 1.0, 3), ("cluster", 1.0, 5), ("antipodal", 0.3, 4), ("antipodal", 1.5, 4)]
)
def test_exponents_sharp(kind, beta, d):
    """The checks above with 5x the runs and twice the horizon (SE ~ 1e-3), and the FTLE at
    each step against the exact-in-h one-layer law."""
    info, f = check_exponent(kind, beta, d, h=0.1, T=20.0, E=20000, seed=4)
    rng = np.random.default_rng(9)
    for col, h in ((0, 0.1), (1, 0.05)):
        mean, se = mean_se(f[:, col])
        law, se_law = one_layer_law(kind, beta, d, h, rng)
        assert abs(mean - law) < Z * math.hypot(se, se_law), (h, mean, se, law, se_law, info)
