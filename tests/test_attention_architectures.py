"""Laws of the attention architectures (physics.md §1.4): masks, heads, normalization schemes,
equiangular starts, and the system that sweeps them."""

import numpy as np
import pytest

import integrators
from dyn import attention as att
from dyn.attention import architecture as arch, equiangular as eq, schemes
from integrators.core.geometry import SPHERE

RK4 = integrators.get("numba", "rk4", dt=0.01)


def unit(rng, E, n, d):
    """Tokens that the sphere's retraction leaves unchanged (re-normalized until fixed), so a
    token that must not move can be compared bit for bit."""
    x = att.uniform_sphere(rng, E, n, d)
    for e in range(E):
        for _ in range(4):
            SPHERE.retract(x[e])
    return x


# ------------------------------------------------------------------------------ causal masks


@pytest.mark.parametrize("how", ["rk4", "dopri5", "network"])
def test_causal_value_identity_keeps_the_first_token_fixed_exactly(how):
    rng = np.random.default_rng(1)
    x0 = unit(rng, 3, 12, 3)
    p = arch.pack_architecture(4.0, 3, mask="causal", bias_slope=0.3)
    ts = np.linspace(0.0, 5.0, 6)
    if how == "network":
        xs = att.network_layers(schemes.POST_NETWORK.problem(p), x0, 100, 5.0, save_every=20)
    else:
        integ = RK4 if how == "rk4" else integrators.get("numba", "dopri5", rtol=1e-8, atol=1e-10)
        xs = integ.solve(schemes.POST.problem(p), x0, ts).states
    for k in range(xs.shape[1]):
        if how == "network":
            # a layer maps x_1 to normalize((1 + h) x_1): x_1 in exact arithmetic, and within a
            # few ulps in floating point (the flow's tangent velocity is exactly 0 instead)
            np.testing.assert_allclose(xs[:, k, 0], x0[:, 0], rtol=0, atol=2e-15)
        else:
            np.testing.assert_array_equal(xs[:, k, 0], x0[:, 0])
    assert np.abs(xs[:, -1, 1:] - x0[:, 1:]).max() > 0.1  # the others do move


def test_pre_ln_causal_first_token_keeps_its_direction():
    rng = np.random.default_rng(2)
    z0 = att.uniform_sphere(rng, 2, 8, 3)
    p = arch.pack_architecture(2.0, 3, mask="causal")
    zs = RK4.solve(schemes.PRE.problem(p), z0, np.linspace(0.0, 3.0, 4)).states
    direction = zs[:, :, 0] / np.linalg.norm(zs[:, :, 0], axis=-1, keepdims=True)
    np.testing.assert_allclose(direction, np.broadcast_to(z0[:, None, 0], direction.shape), atol=1e-15)
    # dz_1/dt = u_1 = x_1: the stream of token 1 grows at unit speed, r_1(t) = 1 + t
    np.testing.assert_allclose(
        np.linalg.norm(zs[:, :, 0], axis=-1), np.broadcast_to(1.0 + np.linspace(0, 3, 4), (2, 4)), atol=1e-13
    )


@pytest.mark.parametrize("name", ["post", "pre", "peri", "ngpt"])
def test_causal_first_tokens_ignore_the_later_ones(name):
    rng = np.random.default_rng(3)
    m = 5
    x0 = att.uniform_sphere(rng, 2, 14, 3)
    Q, K, V = (np.eye(3) + 0.4 * rng.standard_normal((2, 3, 3)) for _ in range(3))
    p = arch.pack_architecture(2.5, 3, "SA", Q, K, V, mask="causal", bias_slope=0.2)
    ts = np.linspace(0.0, 4.0, 5)
    problem = schemes.scheme(name).flow.problem(p)
    full = RK4.solve(problem, x0, ts).states
    head = RK4.solve(problem, x0[:, :m].copy(), ts).states
    np.testing.assert_allclose(full[:, :, :m], head, rtol=0, atol=1e-12)
    network = schemes.scheme(name).network.problem(p)
    full = att.network_layers(network, x0, 40, 4.0, save_every=10)
    head = att.network_layers(network, x0[:, :m].copy(), 40, 4.0, save_every=10)
    np.testing.assert_allclose(full[:, :, :m], head, rtol=0, atol=1e-12)


# ------------------------------------------------------------------------ post-LN = §1.1 flow


@pytest.mark.parametrize("norm", ["SA", "USA"])
@pytest.mark.parametrize("mats", [False, True])
def test_post_ln_is_the_attention_flow(norm, mats):
    rng = np.random.default_rng(4)
    d = 3
    Q, K, V = [np.eye(d) + 0.3 * rng.standard_normal((d, d)) for _ in range(3)] if mats else [None] * 3
    x0 = att.uniform_sphere(rng, 3, 9, d)
    ts = np.linspace(0.0, 2.0, 5)
    old = RK4.solve(att.flow_problem(att.pack_params(1.8, d, norm, Q, K, V)), x0, ts).states
    new = RK4.solve(schemes.POST.problem(arch.pack_architecture(1.8, d, norm, Q, K, V)), x0, ts).states
    np.testing.assert_allclose(new, old, rtol=0, atol=1e-12)
    old = att.postnorm_layers(x0, 50, 2.0, 1.8, norm, Q, K, V, save_every=10)
    new = att.network_layers(
        schemes.POST_NETWORK.problem(arch.pack_architecture(1.8, d, norm, Q, K, V)), x0, 50, 2.0, save_every=10
    )
    np.testing.assert_allclose(new, old, rtol=0, atol=1e-12)


# four runs of RK4 (dt = 0.05) to T = 2 with their states saved: the engine half of a scenario
RK4_RUNS = """
[ensemble]
runs = 4
seed = 3
[integrator]
backend = "numba"
method = "rk4"
dt = 0.05
horizon = 2.0
[output]
saves = 4
trajectories = true
"""


def test_attention_sphere_with_post_ln_is_the_plain_flow(tmp_path):
    """Through the engine: the states of `normalization_layer = "post"` (every new parameter at
    its default) against the §1.1 flow (dyn.attention.FLOW) from the same saved starts."""
    import dyn

    text = (
        """
[scenario]
name = "post"
system = "attention_sphere"
[params]
n = 10
d = 3
normalization_layer = "post"
mask = "none"
heads = 1
[sweep]
beta = [0.5, 3.0]
"""
        + RK4_RUNS
    )
    path = tmp_path / "post.toml"
    path.write_text(text)
    out = dyn.run(path, tmp_path / "post.h5", progress=False)
    with dyn.open(out) as ds:
        states = ds["trajectory"].values  # (beta, run, trajectory_time, token, coordinate)
        times = ds["time"].values
        for b, beta in enumerate(ds["beta"].values):
            want = (
                integrators.get("numba", "rk4", dt=0.05)
                .solve(att.flow_problem(att.pack_params(beta, 3)), states[b, :, 0], times)
                .states
            )
            np.testing.assert_allclose(states[b], want, rtol=0, atol=1e-12)
            pairs = att.pair_statistics(want, 1e-3, beta)
            np.testing.assert_allclose(ds["pair_fraction"].values[b], pairs[..., 0].mean(0), atol=1e-12)


HEADS_TOML = (
    """
[scenario]
name = "heads"
system = "attention_sphere"
[params]
n = 6
d = 2
heads = 2
Q = [[[1.0, 0.5], [0.0, 1.0]], [[0.8, 0.0], [0.3, 1.2]]]
K = [[1.0, 0.2], [-0.1, 0.9]]
V = [[[1.0, 0.0], [0.0, 1.0]], [[0.5, -0.4], [0.4, 0.5]]]
mask = "causal"
[sweep]
beta = [1.0, 3.0]
"""
    + RK4_RUNS
)


@pytest.mark.parametrize("backend", ["numba", "jax"])
def test_per_head_matrices_from_a_scenario_file(tmp_path, backend):
    """Q and V given per head in TOML (K shared): the engine's states are the flow of the
    architecture vector packed from those stacks in Python, from the same saved starts."""
    import tomllib

    import dyn

    path = tmp_path / "heads.toml"
    path.write_text(HEADS_TOML)
    out = dyn.run(path, tmp_path / "heads.h5", progress=False, overrides={"integrator.backend": backend})
    given = tomllib.loads(HEADS_TOML)["params"]
    with dyn.open(out) as ds:
        states = ds["trajectory"].values
        for b, beta in enumerate(ds["beta"].values):
            p = arch.pack_architecture(beta, 2, "SA", given["Q"], given["K"], given["V"], mask="causal")
            assert arch.unpack_architecture(p)["heads"] == 2
            want = (
                integrators.get("numba", "rk4", dt=0.05)
                .solve(schemes.POST.problem(p), states[b, :, 0], ds["time"].values)
                .states
            )
            np.testing.assert_allclose(states[b], want, rtol=0, atol=1e-12)
    assert np.abs(states[:, :, -1] - states[:, :, 0]).max() > 0.05  # the tokens moved
    with pytest.raises(dyn.ScenarioError, match="one per head"):
        dyn.load(path, ["params.heads=3"])
    with pytest.raises(dyn.ScenarioError, match="same size"):
        dyn.load(path, ["params.Q=[[[1.0]], [[1.0, 0.0], [0.0, 1.0]]]"])
    with pytest.raises(dyn.ScenarioError, match="must be 2 x 2"):
        dyn.load(path, ["params.K=[[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]"])


# --------------------------------------------------------------------------------- heads


@pytest.mark.parametrize("name", ["post", "peri"])
def test_identical_heads_equal_one_head(name):
    rng = np.random.default_rng(5)
    d = 3
    Q, K, V = (np.eye(d) + 0.4 * rng.standard_normal((d, d)) for _ in range(3))
    x0 = att.uniform_sphere(rng, 2, 10, d)
    ts = np.linspace(0.0, 3.0, 4)
    one = arch.pack_architecture(2.0, d, "SA", Q, K, V, heads=1, bias_slope=0.1)
    three = arch.pack_architecture(2.0, d, "SA", *(np.stack([a] * 3) for a in (Q, K, V)), bias_slope=0.1)
    assert arch.heads_of(len(three), d) == 3
    flow = schemes.scheme(name).flow
    a = RK4.solve(flow.problem(one), x0, ts).states
    b = RK4.solve(flow.problem(three), x0, ts).states
    np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
    # and distinct heads are not one head
    heads = arch.random_heads(np.random.default_rng(0), 3, d, 0.5, Q, K, V)
    c = RK4.solve(flow.problem(arch.pack_architecture(2.0, d, "SA", *heads)), x0, ts).states
    assert np.abs(c - a).max() > 1e-3


# -------------------------------------------------------------------- normalization schemes


def _two_tokens(beta, rho0):
    a = np.array([1.0, 0.0, 0.0])
    b = np.array([rho0, np.sqrt(1 - rho0**2), 0.0])
    return np.stack([a, b])[None]


@pytest.mark.parametrize("name", ["pre", "peri", "ngpt"])
def test_schemes_are_speed_regulations_of_post_ln(name):
    """Karagodin et al.: dx_i/dt = P_{x_i} u_i / s_i. Two tokens of equal radius keep equal
    speeds, so the angle follows post-LN's rho (the n = 2 equiangular ODE) at the reparametrized
    time tau(t) = int_0^t ds / s(s), s = r (pre), r |u| (peri), |u| / alpha (nGPT)."""
    beta, rho0, alpha = 1.5, -0.3, 0.7
    p = arch.pack_architecture(beta, 3, alpha=alpha)
    ts = np.linspace(0.0, 6.0, 3001)
    xs = (
        integrators.get("numba", "dopri5", rtol=1e-11, atol=1e-12)
        .solve(schemes.scheme(name).flow.problem(p), _two_tokens(beta, rho0), ts)
        .states[0]
    )
    r = np.linalg.norm(xs[:, 0], axis=-1)
    x = xs / np.linalg.norm(xs, axis=-1, keepdims=True)
    u = np.array([_layer(xt, p) for xt in x])
    speed = np.linalg.norm(u[:, 0], axis=-1)
    s = {"pre": r, "peri": r * speed, "ngpt": speed / alpha}[name]
    tau = np.concatenate([[0.0], np.cumsum(np.diff(ts) * 0.5 * (1 / s[1:] + 1 / s[:-1]))])
    rho = np.einsum("td,td->t", x[:, 0], x[:, 1])
    want = eq.equiangular_rho(tau, rho0, beta, 2)
    assert np.abs(rho - want).max() < 1e-6  # the trapezoid rule's error, (dt = 0.002)^2
    assert np.abs(rho - eq.equiangular_rho(ts, rho0, beta, 2)).max() > 1e-2  # not post-LN's clock


def _layer(x, p):
    out = np.empty_like(x)
    schemes.layer_output(0.0, np.ascontiguousarray(x), p, out, np.empty(schemes.work_size(*x.shape, p)))
    return out


def test_stream_schemes_grow_at_most_at_unit_speed():
    """SA with V = I: |u_i| <= 1, so pre-LN's r_i' = <x_i, u_i> and peri-LN's |dz_i/dt| = 1
    bound the radius by 1 + t; peri-LN moves every stream at exactly unit speed."""
    rng = np.random.default_rng(6)
    z0 = att.uniform_sphere(rng, 3, 12, 2)
    ts = np.linspace(0.0, 10.0, 11)
    p = arch.pack_architecture(3.0, 2)
    for name in ("pre", "peri"):
        zs = RK4.solve(schemes.scheme(name).flow.problem(p), z0, ts).states
        assert (np.linalg.norm(zs, axis=-1) <= 1.0 + ts[None, :, None] + 1e-12).all()
        rad = schemes.stream_radius(name, zs)
        assert rad.shape == (3, 11) and (rad[:, -1] > 2.0).all()
    step = schemes.PERI.problem(p)
    v = np.empty_like(z0[0])
    schemes.peri_drift(0.0, z0[0], p, v, np.empty(step.work_size(12, 2)))
    np.testing.assert_allclose(np.linalg.norm(v, axis=-1), 1.0, atol=1e-15)


def test_one_layer_of_each_network_by_hand():
    rng = np.random.default_rng(7)
    x0 = att.uniform_sphere(rng, 1, 6, 3)
    Q, K, V = (np.eye(3) + 0.3 * rng.standard_normal((3, 3)) for _ in range(3))
    p = arch.pack_architecture(1.2, 3, "SA", Q, K, V, alpha=0.5)
    h = 0.1
    x = x0[0]
    u = _layer(x, p)

    def ln(y):
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    want = {"post": ln(x + h * u), "pre": x + h * u, "peri": x + h * ln(u), "ngpt": ln(x + 0.5 * h * (ln(u) - x))}
    for name, layer in want.items():
        got = att.network_layers(schemes.scheme(name).network.problem(p), x0, 1, h)[0, -1]
        np.testing.assert_allclose(got, layer, atol=1e-15, err_msg=name)


@pytest.mark.parametrize("name", ["post", "pre", "peri", "ngpt"])
def test_network_converges_to_its_flow_at_order_one(name):
    rng = np.random.default_rng(8)
    x0 = att.uniform_sphere(rng, 3, 8, 3)
    p = arch.pack_architecture(1.0, 3, mask="causal", bias_slope=0.2)
    scheme = schemes.scheme(name)
    ref = integrators.get("numba", "rk4", dt=1e-3).solve(scheme.flow.problem(p), x0, np.array([0.0, 2.0])).states[:, -1]
    depths = np.array([16, 32, 64, 128])
    err = [np.abs(att.network_layers(scheme.network.problem(p), x0, L, 2.0)[:, -1] - ref).max() for L in depths]
    slope = np.polyfit(np.log(depths), np.log(err), 1)[0]
    assert -1.15 < slope < -0.85, (slope, err)


# diffrax compiles each architecture (seconds): the default tier keeps the drift twins of every
# scheme (test_models) and numba against diffrax on the plain flow (test_attention_backends)
@pytest.mark.slow
@pytest.mark.parametrize("name", ["pre", "post", "peri", "ngpt"])
def test_numba_and_diffrax_solves_agree(name):
    pytest.importorskip("jax")
    rng = np.random.default_rng(9)
    x0 = att.uniform_sphere(rng, 2, 7, 3)
    Q, K, V = (np.eye(3) + 0.3 * rng.standard_normal((2, 3, 3)) for _ in range(3))
    p = arch.pack_architecture(1.5, 3, "SA", Q, K, V, mask="causal", bias_slope=0.3, feedforward=0.5, alpha=1.3)
    problem = schemes.scheme(name).flow.problem(p)
    ts = np.linspace(0.0, 2.0, 3)
    a = integrators.get("numba", "dopri5", rtol=1e-11, atol=1e-12).solve(problem, x0, ts).states
    b = integrators.get("diffrax", "tsit5", rtol=1e-11, atol=1e-12).solve(problem, x0, ts).states
    np.testing.assert_allclose(a, b, atol=1e-9)


# ----------------------------------------------------------------------- equiangular starts


@pytest.mark.parametrize("norm", ["SA", "USA"])
def test_equiangular_starts_follow_the_scalar_ode(norm):
    rng = np.random.default_rng(10)
    n, d, beta = 6, 7, 2.5
    for rho0 in (eq.lowest(n), -0.1, 0.4):
        x0 = eq.equiangular_start(rng, 2, n, d, rho0)
        g = np.einsum("eid,ejd->eij", x0, x0)
        want = np.where(np.eye(n, dtype=bool), 1.0, rho0)
        np.testing.assert_allclose(g, np.broadcast_to(want, g.shape), atol=1e-14)
        ts = np.linspace(0.0, 5.0, 11)
        tol = 1e-10
        xs = (
            integrators.get("numba", "dopri5", rtol=tol, atol=tol)
            .solve(schemes.POST.problem(arch.pack_architecture(beta, d, norm)), x0, ts)
            .states
        )
        gram = np.einsum("etid,etjd->etij", xs, xs)[..., ~np.eye(n, dtype=bool)]
        want = eq.equiangular_rho(ts, rho0, beta, n, norm == "USA")
        assert np.abs(gram - want[None, :, None]).max() < 100 * tol
        # the regular simplex (rho0 = -1/(n-1)) is an equilibrium; any other start moves
        assert want[-1] - rho0 > 0.05 or (rho0 == eq.lowest(n) and want[-1] == rho0)


def test_equiangular_input_is_checked():
    rng = np.random.default_rng(0)
    for n, d, rho, words in ((4, 4, 0.0, "need d >= 5"), (4, 5, -0.5, r"rho0 must lie"), (1, 3, 0.0, "n >= 2")):
        with pytest.raises(ValueError, match=words):
            eq.equiangular_start(rng, 1, n, d, rho)
    x = eq.equiangular_start(rng, 1, 4, 4, -1 / 3)  # the regular simplex fits in d = n
    np.testing.assert_allclose(eq.mean_inner(x), [-1 / 3], atol=1e-15)


# ------------------------------------------------------------------------------- parameters


def test_pack_architecture_layout_and_checks():
    d, H = 3, 2
    rng = np.random.default_rng(11)
    Q, K = rng.standard_normal((2, H, d, d))
    p = arch.pack_architecture(2.0, d, "USA", Q, K, None, mask="causal", bias_slope=0.5, feedforward=0.3, alpha=2.0)
    u = arch.unpack_architecture(p)
    assert (u["heads"], u["mask"], u["normalization"], u["slope"], u["ff"], u["alpha"]) == (
        H,
        "causal",
        "USA",
        0.5,
        0.3,
        2.0,
    )
    np.testing.assert_allclose(u["M"], np.einsum("hlk,hlm->hkm", Q, K))
    assert u["v_identity"] == 1.0 and u["m_identity"] == 0.0
    for bad, words in (
        (dict(mask="future"), "mask must be"),
        (dict(bias_slope=-1), "bias_slope"),
        (dict(heads=0), "heads must be"),
        (dict(alpha=0.0), "alpha must be > 0"),
        (dict(Q=np.ones((2, 3, 3)), heads=3), "Q must have shape"),
        (dict(Q=np.ones((2, 3, 3)), K=np.ones((3, 3, 3))), "heads, expected"),
    ):
        with pytest.raises(ValueError, match=words):
            arch.pack_architecture(1.0, 3, **bad)


# ------------------------------------------------------------------------- the field's regime


def _regime_cases(rng):
    """(name, vector, the regime it fixes or None) over masks, matrices, heads and d."""
    skew = np.eye(2) + 0.4 * rng.standard_normal((2, 2))
    sym3 = np.eye(3) + 0.2 * (lambda a: a + a.T)(rng.standard_normal((3, 3)))
    W = rng.standard_normal((2, 3, 3))
    return [
        ("d=2 plain", arch.pack_architecture(2.0, 2), schemes.af.SYMMETRIC),
        (
            "d=2 plain, beta past the symmetric path's exp bound",
            arch.pack_architecture(400.0, 2),
            schemes.af.SYMMETRIC,
        ),  # 2 |beta| R^2 > EXP_MAX_ARG: the path falls back to columns
        (
            "d=2 causal, biased",
            arch.pack_architecture(3.0, 2, "USA", mask="causal", bias_slope=0.2),
            schemes.af.COLUMNS,
        ),
        ("d=2 asymmetric M", arch.pack_architecture(1.5, 2, Q=skew), schemes.af.COLUMNS),
        (
            "d=3 two symmetric heads, feed-forward",
            arch.pack_architecture(1.0, 3, Q=np.stack([sym3, np.eye(3)]), feedforward=0.7, W1=W[0], W2=W[1], alpha=1.5),
            schemes.af.SYMMETRIC,
        ),
        ("d=3 causal", arch.pack_architecture(2.0, 3, mask="causal"), None),
        ("d=4 plain", arch.pack_architecture(2.0, 4), None),
    ]


@pytest.mark.parametrize("name", ["post", "pre", "peri", "ngpt"])
def test_each_scheme_drift_takes_the_regime_its_vector_fixes_with_the_same_numbers(name):
    """A problem's drift is the scheme's drift of the regime its vector fixes
    (schemes.fixed_regime: the attention field's table, af.CROSSOVER), or the one whose field
    picks per call where n decides; bit for bit the numbers of the latter, on both sides of the
    d = 4 crossover (n = 127, 128) where n decides."""
    rng = np.random.default_rng(11)
    scheme = schemes.scheme(name)
    for case, p, regime in _regime_cases(rng):
        assert schemes.fixed_regime(p) == regime, case
        for record in {scheme.flow, scheme.network}:
            drift = record.problem(p).drift
            assert drift is schemes.DRIFTS[name][regime], (case, record.name)
            d = int(p[schemes.DIM])
            for n in (127, 128) if d == 4 else (9, 40):
                x = unit(rng, 1, n, d)[0] * (rng.uniform(0.5, 3.0, (n, 1)) if scheme.stream else 1)
                work = np.full(schemes.work_size(n, d, p), np.nan)
                want, got = np.empty_like(x), np.empty_like(x)
                record.drift(0.3, x, p, want, work.copy())
                drift(0.3, x, p, got, work.copy())
                assert np.all(np.isfinite(want)), case
                assert np.array_equal(got, want), (case, record.name, n)
