r"""The hardmax limit of self-attention (Alcalde, Geshkovski & Ruiz-Balet, "Attention's forward
pass and Frank-Wolfe", arXiv 2508.09628; code github.com/borjanG/2025-transformers-frank-wolfe).

Only the abstract and the authors' plotting scripts (the dominance cells drawn as argmax_k
<x, v_k> over the hull vertices v_k, vertices sampled on a circle) could be read here; the
paper's body could not. Everything below is derived here, not transcribed.

**The flow.** Tokens x_1 .. x_n in R^d, a symmetric key-query matrix B (here
B = diag(1, kappa, ..., kappa), kappa = `kq_ratio` > 0: positive definite), value matrix I:

    dx_i/dt = sum_j P_ij x_j - x_i,    P_ij = exp(beta s_ij) / sum_k exp(beta s_ik),
    s_ij = <B x_i, x_j>,

the continuous limit (step alpha -> 0) of the forward pass x_i <- x_i + alpha (sum_j P_ij x_j
- x_i). As beta -> oo, exp(beta (s_ij - max_k s_ik)) -> 1 on the maximizers and 0 elsewhere, so
P_ij -> 1/|J_i| on J_i = argmax_j s_ij: the **hardmax flow**

    dx_i/dt = (1/|J_i|) sum_{j in J_i} x_j - x_i.                                    (H)

*Ties.* Exact ties are where the limit of the softmax is the uniform average over the tied
maximizers (a token at the centre of a regular polygon stays there at every beta, and so
under (H)). Floating-point scores of tied tokens differ by rounding, so J_i is taken within a
tolerance: J_i = {j : s_ij >= max_k s_ik - tie_tol max(1, |max_k s_ik|)} (`tie_tol`, default
1e-12, relative to the score's size). tie_tol = 0 keeps the exact maximizers only. A token
that has come within ~tie_tol of its vertex ties with it, and the two merge: the paths are
straight, and the vertices fixed, to ~tie_tol (exactly, before that).

**Frank-Wolfe.** With f(x) = <B x, x>/2 (grad f = B x) and K = conv{x_1 .. x_n}, the linear
maximization oracle argmax_{y in K} <B x_i, y> is attained at a token, and a forward-Euler
step of (H) with step alpha is the Frank-Wolfe step x_i + alpha (s_i - x_i) for maximizing
the convex f over K.

**Cells, fixed vertices, straight paths (B positive definite).** Let v_1 .. v_m be the vertices
of K, scaled to the B-unit sphere <B v_k, v_k> = 1 (the layouts below). Cauchy-Schwarz in the
B inner product gives <B v_k, v_l> <= 1 with equality only for l = k, so each vertex is the
unique maximizer of its own score: J(v_k) = {k} and v_k does not move (every token lies in K,
and a linear function's maximum over K is attained only on the face of maximizing vertices,
here v_k alone). The cells

    C_k = {x in K : <B x, v_k> >= <B x, v_l> for all l}

are K cut by the convex cone of the half-spaces <x, B (v_k - v_l)> >= 0, and v_k is in C_k.
A token x_0 in the interior of C_k has J = {the token at v_k} (the others are convex
combinations with weight off v_k, so their scores are strictly lower); then dx/dt = v_k - x,

    x(t) = v_k + (x_0 - v_k) e^{-t},

the straight segment from x_0 to v_k, which stays in C_k (convex, holding both ends) and in K:
the assignment never changes and the solution is this one. Every Runge-Kutta stage of a
straight-line field stays on the line, so the numerical paths are straight up to rounding
(what the test checks to 1e-10), and the cell of each token is the argmax over the vertices of
<B x_0, v_k> (what `cell_agreement` checks against the flow's end points).

**Finite beta -> hardmax: D = c1/beta + c2/beta^2 + ... (derived).** The deviation is
D(beta) = sup_{t <= T} (1/n) sum_i |x_i^beta(t) - x_i^H(t)| (T = `window`). The abstract states
no rate in beta (the hardmax flow approximates the finite-beta one over times exponential in
beta); this is derived here, with three parts.

(i) The cluster at a vertex: the leading term. Near a vertex v write y = beta (x - v). For
tokens of its cell within O(1/beta) of v, the scores the softmax compares are

    beta (<B x_i, x_j> - <B x_i, v>) = <B x_i, y_j> = <B v, y_j> + <B y_i, y_j> / beta,

so at leading order every token of the cluster uses the same weights w_j ~ exp(<B v, y_j>)
(tokens of other cells weigh e^{-beta g}), and dy_i/dt = sum_j w_j y_j - y_i + O(1/beta). A
token still far (beta |x - v| >> 1) is on its hardmax line, y_i = beta (x_i(0) - v) e^{-t}: in
the shifted time s = t - log beta, the beta-free curve (x_i(0) - v) e^{-s}. So (y, s) solve a
beta-free system with a regular O(1/beta) perturbation, and the hardmax tokens, beta (x^H - v)
= (x(0) - v) e^{-s}, are the same incoming curves without interaction. The common weights move
the cluster's weighted centre into the hull, d<B v, ybar>/ds = -Var_w <B v, y> (ybar =
sum_j w_j y_j), by O(1) in y, while the cluster contracts onto it at rate ~1: it merges at a
point O(1/beta) inside v and stays there (vertex token included). Hence x^beta - x^H =
(Y0(s) - Y0^H(s)) / beta + O(1/beta^2), and

    D(beta) = c1/beta + c2/beta^2 + ...,  local slope d log D / d log beta = -1 - (c2/c1)/beta + ...

once T - log beta >~ 5 (merged) and e^{-T} << c1/beta (x^H is e^{-T} |x(0) - v| from its vertex
at T: with T = 10 that is 2% of D at beta = 2048, hence T = 30 in the scenario). The vertices
also drift at speed ~e^{-g beta} (the trapping below), adding ~T e^{-g beta}: +0.08/beta at
beta = 64, nothing from beta ~ 150.

(ii) Tokens that cross to another vertex. The softmax basins' boundaries are the cells'
shifted by O(1/beta) (the weights e^{-beta Delta} of the other vertices and tokens tilt them):
a token whose score gap to its second vertex, Delta_0 = <B x(0), v_k - v_l>, is O(1/beta) can
end at v_l, |v_k - v_l| = 2 sin(pi/m) (0.518 for m = 12) from its hardmax end at every later
time. The band's share is ~w/beta, so its expected part of D is O(1/beta) as well: the rate is
-1 in expectation too. Measured over 8000 interior tokens (400 runs, T = 30): beta x share
0.16 .. 0.26 for beta = 192 .. 1024, every crossing token with beta Delta_0 <= 0.41 (0.89 at
beta = 64, where escapes add to it). A token near the boundary that stays in its cell is
deflected by O(1/beta) for a time O(1/beta) (its gap opens at rate ~g): O(1/beta^2) on average.
(The earlier heuristic, "the mean of e^{-beta Delta} over tokens is ~1/beta", counted weights
as distances.) The authors' plotting scripts draw a cell's strict-dominance cone
{<x, v_k - v_l> > eta for all l} eroded by epsilon, which leaves this band out; whether their
finite-beta statement is made on it, the unread body would say.

(iii) Why a fit over beta = 64 .. 256 gave -1.15 [-1.25, -1.04]. With the same starts at
every beta (common random numbers) the crossings are steps, not a smooth 1/beta: each crossing
token adds 0.518 / (n runs) to D below its own beta. Of the scenario's 320 interior tokens, 4
cross at beta = 64, 2 at beta = 72 .. 128 and none from beta = 192: +0.25 in beta D (T = 10) at
beta = 64 .. 128 on top of the regular 1.26 .. 1.36, steepening the slope; the trapping drift
adds to it at beta <= 80. Not the step: rtol 1e-11 and hardmax_dt = 1/16 change beta D in the
fifth digit. Not (i)'s correction: -(c2/c1)/beta is -0.008 at beta = 200.

So the scenario fits D over the regular betas (`fits`): no token of the sample crossed
(output `crossed` = 0) and the vertices stay (median trapping time > 5 windows), beta = 192 ..
2048. The one-term slope there is -1 - (c2/c1) <1/beta>, not -1: its interval measures the
curvature of a deterministic curve and excludes -1, as (i) says. The law with its exponent free,
log D = a + p log beta + kappa/beta (kappa = c2/c1), is the derived fit; its interval is the
t-interval plus the truncation |p - p'| (p' the exponent with one more term, kappa'/beta^2):
with deterministic data the residual is the omitted order, not noise (`convergence_law`).

**Trapping times grow like e^{beta g} (derived).** Once the cells have collapsed (t ~ log beta),
cluster k (mass mu_k) feels cluster l with weight (mu_l/mu_k) e^{-beta g_kl}, g_kl =
1 - <B v_k, v_l>; the vertex moves at speed ~ e^{-beta g}, g = min gap. Moving by s lowers its
gap linearly, g(s) = g - c s + O(s^2), c > 0, so the time to move by r is
int_0^r e^{beta g(s)} ds / prefactor = e^{beta g} / (beta c prefactor) (1 + o(1)), and

    log tau(beta) = g beta - log beta + O(1).

For the regular m-gon with equal masses the polygon shrinks, rho' = -2 g rho e^{-beta g rho^2},
and tau = e^{beta g} / (4 beta g^2) (1 + o(1)), g = 1 - cos(2 pi / m). The scenario fits
log(beta tau) = a + c beta (`trapping_rate`): c -> g as beta grows, with a bootstrap interval.

**Measured** (scenario hardmax_limit: n = 32, regular 12-gon, 16 runs, beta = 40 .. 2048,
T = 30): hardmax paths straight to 1.9e-12 (the tie tolerance: a token within ~tie_tol of its
vertex merges with it), vertices fixed to 1.9e-12, every interior token ends at argmax_k
<B x_i(0), v_k>, |x(t) - v - (x_0 - v) e^-t| <= 1.8e-7 (RK4 at 0.25). Deviation over beta =
192 .. 2048 (crossing tokens: 88, 51, 17, 4, 2, 2, 2, 2 of 320 at beta = 40 .. 128, then none):
beta D = 1.2598 .. 1.2511; one-term slope -1.0027 [-1.0037, -1.0017]; the law: p = -0.99954
[-1.00024, -0.99884] (t-interval [-0.99976, -0.99932] plus truncation 0.00048), c2/c1 = 1.66;
with a kappa'/beta^2 term p = -1.000019, with a third -1.000042: the rate is -1 to the data's
precision (~5e-5). Trapping rate c = 0.130 [0.122, 0.137] over beta = 48 .. 96 against g =
0.134 (medians 13 to 3100; the unequal cluster masses make them ~17 times shorter than the
equal-mass law, the rate the same).

**Starts.** Vertex tokens first (indices 0 .. m-1), then n - m interior tokens.
`layout = "polygon"`: the regular m-gon in the first two coordinates, rotated by a uniform angle
per run, mapped onto the B-unit ellipse; interior tokens uniform in it (a triangle of the fan
from the centre, then a uniform point of it). `layout = "sphere"`: m uniform directions on the
B-unit sphere of R^d (all of them vertices: points of a strictly convex surface), interior
tokens Dirichlet(1, ..., 1) combinations of them (inside, not uniform).

Written through the public API (dyn.Model). Each point solves its flow at beta (the scenario's
method) and the hardmax flow (H) from the same starts (once per sweep where the starts are common
to the betas: `Hardmax.hardmax_flow`), and measures both. (H) is solved by RK4
at the step `hardmax_dt` <= 1 whatever the method: along dx/dt = v - x, RK4's stages at h <= 1
stay on the segment [x, v] and its amplification factor is in (0, 1), so no token overshoots
its vertex (an adaptive pair, once the field is ~0, grows its step past stability and does).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import tomllib

import numpy as np

import dyn
import integrators

LAYOUTS = ("polygon", "sphere")
TRAPPED_AFTER = 5.0  # the deviation fit: betas trapped for longer than this many windows
FORMED_BY = 10.0  # the trapping fit: an escape before t = 10 (cells within e^-10) is no trapping


def drift(t, x, beta, kq_ratio, tie_tol, hardmax):
    """Softmax attention at beta (hardmax false) or the hardmax flow (H) (numba: plain loops)."""
    n, d = x.shape
    out = np.empty_like(x)
    s = np.empty(n)
    for i in range(n):
        top = -np.inf
        for j in range(n):
            acc = x[i, 0] * x[j, 0]
            for k in range(1, d):
                acc += kq_ratio * x[i, k] * x[j, k]
            s[j] = acc
            top = max(top, acc)
        if hardmax:
            floor = top - tie_tol * max(1.0, abs(top))
            for j in range(n):
                s[j] = 1.0 if s[j] >= floor else 0.0
        else:
            for j in range(n):
                s[j] = np.exp(beta * (s[j] - top))
        total = 0.0
        for j in range(n):
            total += s[j]
        for k in range(d):
            acc = 0.0
            for j in range(n):
                acc += s[j] * x[j, k]
            out[i, k] = acc / total - x[i, k]
    return out


def kq_matrix(d: int, kq_ratio: float) -> np.ndarray:
    """B = diag(1, kappa, ..., kappa)."""
    return np.diag(np.r_[1.0, np.full(d - 1, float(kq_ratio))])


def vertices(rng: np.random.Generator, m: int, d: int, kq_ratio: float, layout: str) -> np.ndarray:
    """m points on the B-unit sphere <B v, v> = 1: a rotated regular polygon in the first two
    coordinates, or uniform directions."""
    if layout == "polygon":
        angle = rng.uniform(0.0, 2.0 * np.pi) + 2.0 * np.pi * np.arange(m) / m
        u = np.zeros((m, d))
        u[:, 0], u[:, 1] = np.cos(angle), np.sin(angle)
    else:
        u = rng.standard_normal((m, d))
    norm = np.sqrt(np.einsum("kd,de,ke->k", u, kq_matrix(d, kq_ratio), u))
    return u / norm[:, None]


def interior(rng: np.random.Generator, v: np.ndarray, count: int, layout: str) -> np.ndarray:
    """`count` points inside conv(v): uniform in the polygon (its fan of equal triangles from
    the centre, then a uniform point of the triangle), or Dirichlet(1) combinations."""
    m = len(v)
    if layout == "polygon":
        k = rng.integers(0, m, size=count)
        a, b = rng.uniform(size=(2, count))
        flip = a + b > 1.0  # fold the square onto the triangle
        a[flip], b[flip] = 1.0 - a[flip], 1.0 - b[flip]
        return a[:, None] * v[k] + b[:, None] * v[(k + 1) % m]  # the centre is the origin
    return rng.dirichlet(np.ones(m), size=count) @ v


def construction_cells(x0: np.ndarray, v: np.ndarray, kq_ratio: float) -> np.ndarray:
    """The paper's cells: argmax_k <B x0_i, v_k> for each token (runs, n) from x0 (runs, n, d)
    and the vertices v (runs, m, d)."""
    b = np.r_[1.0, np.full(x0.shape[-1] - 1, float(kq_ratio))]
    return np.argmax(np.einsum("rnd,rmd->rnm", x0 * b, v), axis=-1)


class Hardmax(dyn.Model):
    name = "hardmax"
    description = "softmax attention in R^d against its hardmax limit: cells, straight paths, trapping"
    default_plot = "distance"
    geometry = "euclidean"
    params = {
        "n": dyn.Field("int", 32, "tokens n (vertices first)", lo=3, hi=2048),
        "d": dyn.Field("int", 2, "dimension d", lo=2, hi=64),
        "vertices": dyn.Field("int", 8, "vertices m of the hull (m < n)", lo=3, hi=512),
        "layout": dyn.Field(
            "str", "polygon", "vertices: regular polygon or random on the B-unit sphere", choices=LAYOUTS
        ),
        "beta": dyn.Field("float", 16.0, "inverse temperature beta", gt=0.0, hi=1e4),
        "kq_ratio": dyn.Field("float", 1.0, "B = diag(1, kq_ratio, ...)", lo=0.1, hi=10.0),
        "tie_tol": dyn.Field(
            "float", 1e-12, "hardmax ties: scores within tie_tol max(1, |top|) of the top are averaged", lo=0.0, hi=1e-3
        ),
        "hardmax": dyn.Field("bool", False, "the point's flow is the hardmax flow (beta unused)"),
        "hardmax_dt": dyn.Field("float", 0.25, "RK4 step of the hardmax flow (<= 1: monotone)", gt=0.0, hi=1.0),
        "window": dyn.Field("float", 10.0, "deviation: sup over saved t <= window", gt=0.0, hi=1e6),
        "escape": dyn.Field("float", 0.25, "trapping: a vertex token moved this far", gt=0.0, hi=2.0),
    }
    drift = staticmethod(drift)

    def validate(self, spec) -> None:
        if spec["vertices"] >= spec["n"]:
            raise dyn.ScenarioError(
                "params.vertices", f"must be < n = {spec['n']} (interior tokens), got {spec['vertices']}"
            )
        super().validate(spec)

    def outputs(self, setup):
        return [
            dyn.Output("distance", "mean over tokens of |x_beta(t) - x_hardmax(t)|", "1", ("time",), reduce="mean_se"),
            dyn.Output("deviation", "sup over t <= window of the mean |x_beta - x_hardmax|", "1", reduce="mean_se"),
            dyn.Output(
                "trap_time", "first time a vertex token of the beta flow moved > escape", "1", reduce="time_to_event"
            ),
            dyn.Output(
                "straightness",
                "hardmax paths: largest distance from the line x_i(0) -> its end vertex",
                "1",
                reduce="max",
            ),
            dyn.Output("exact_error", "hardmax paths: largest |x_i(t) - v - (x_i(0) - v) e^-t|", "1", reduce="max"),
            dyn.Output("vertex_motion", "hardmax: largest displacement of a vertex token", "1", reduce="max"),
            dyn.Output(
                "cell_agreement", "share of interior tokens ending at argmax_k <B x_i(0), v_k>", "1", reduce="mean_se"
            ),
            dyn.Output(
                "crossed",
                "share of interior tokens of the beta flow nearest, at t = window, "
                "to another vertex than their hardmax path's",
                "1",
                reduce="mean_se",
            ),
        ]

    def trajectory_dims(self, setup):
        sizes = {key: set(setup.values_of(key)) for key in ("n", "d")}
        if any(len(v) != 1 for v in sizes.values()):
            raise dyn.ScenarioError("output.trajectories", "saving trajectories needs params.n and params.d fixed")
        return {"flow": 2, "token": sizes["n"].pop(), "coordinate": sizes["d"].pop()}

    def run_bytes(self, spec) -> int:
        return 2 * 8 * (len(spec.times) + 2) * spec["n"] * spec["d"]

    def initial_state(self, spec, runs):
        n, m, d = spec["n"], spec["vertices"], spec["d"]
        starts = np.empty((runs, n, d))
        for r in range(runs):
            v = vertices(spec.rng, m, d, spec["kq_ratio"], spec["layout"])
            starts[r, :m], starts[r, m:] = v, interior(spec.rng, v, n - m, spec["layout"])
        return starts

    def simulate(self, spec, runs):
        x0 = np.ascontiguousarray(self.initial_state(spec, len(runs)))
        hard = self.hardmax_flow(spec, x0)
        if spec["hardmax"]:
            flow = hard
        else:
            flow = spec.solver.get().solve(self.problem(spec, x0.shape[1:]), x0, spec.times)
        chunk = self.observe(spec, np.stack([flow.states, hard.states], axis=2))
        chunk.status = np.maximum(flow.status, hard.status)  # runs cut short are named
        return chunk

    def hardmax_flow(self, spec, x0):
        """The hardmax flow (H) from x0: the same model at hardmax = true (the API has no "this
        point with other values": a RunSpec is a frozen dataclass, replaced), always by RK4 at a
        step <= 1, whose stages stay on the segment [x, v]; an adaptive pair lets its step grow
        past stability where the field vanishes and overshoots the vertices. It does not depend
        on beta: with starts common to the betas of a sweep it is solved once (Setup.shared),
        keyed by the starts and the save times themselves, the same numbers either way."""
        times = np.asarray(spec.times, float)
        digest = hashlib.sha256(x0.tobytes() + times.tobytes()).hexdigest()
        key = (
            "hardmax_flow",
            digest,
            x0.shape,
            spec["kq_ratio"],
            spec["tie_tol"],
            spec["hardmax_dt"],
            spec.solver.backend,
        )
        other = dataclasses.replace(spec, values={**spec.values, "hardmax": True})
        rk4 = integrators.get(spec.solver.backend, "rk4", dt=spec["hardmax_dt"])
        return spec.setup.shared(key, lambda: rk4.solve(self.problem(other, x0.shape[1:]), x0, spec.times))

    def observe(self, spec, states):
        """states (runs, times, 2, n, d): the point's flow and the hardmax flow."""
        m, times = spec["vertices"], np.asarray(spec.times)
        flow, hard = states[:, :, 0], states[:, :, 1]
        x0, v = hard[:, 0], hard[:, 0, :m]
        gap = np.linalg.norm(flow - hard, axis=-1).mean(axis=-1)  # (runs, times)
        inside = times <= spec["window"]
        moved = np.linalg.norm(flow[:, :, :m] - flow[:, :1, :m], axis=-1).max(axis=-1)
        # the hardmax paths of the interior tokens, against the vertex each ends nearest to
        end = np.argmin(np.linalg.norm(hard[:, -1, m:, None] - v[:, None], axis=-1), axis=-1)
        target = np.take_along_axis(v, end[..., None], axis=1)  # (runs, n - m, d)
        start = x0[:, m:]
        chord = target - start
        unit = chord / np.linalg.norm(chord, axis=-1, keepdims=True)
        rel = hard[:, :, m:] - start[:, None]
        along = np.einsum("rtnd,rnd->rtn", rel, unit)
        off = np.linalg.norm(rel - along[..., None] * unit[:, None], axis=-1)
        law = target[:, None] - chord[:, None] * np.exp(-times)[None, :, None, None]
        cells = construction_cells(x0, v, spec["kq_ratio"])[:, m:]
        # a token of the beta flow in a neighbour's basin ends at that vertex, O(1) away from
        # its hardmax path for good (the band of width ~1/beta at the cell boundaries)
        last = np.searchsorted(times, spec["window"], side="right") - 1  # last save <= window
        near = np.argmin(np.linalg.norm(flow[:, last, m:, None] - v[:, None], axis=-1), axis=-1)
        return dyn.Chunk(
            {
                "distance": gap,
                "deviation": gap[:, inside].max(axis=1),
                "trap_time": first_passage(times, moved, spec["escape"]),
                "straightness": off.max(axis=(1, 2)),
                "exact_error": np.linalg.norm(hard[:, :, m:] - law, axis=-1).max(axis=(1, 2)),
                "vertex_motion": np.linalg.norm(hard[:, :, :m] - v[:, None], axis=-1).max(axis=(1, 2)),
                "cell_agreement": (cells == end).mean(axis=1),
                "crossed": (near != end).mean(axis=1),
            },
            states=states,
            finite=np.isfinite(states).all(axis=(1, 2, 3, 4)),
        )


def first_passage(times: np.ndarray, level: np.ndarray, bar: float) -> np.ndarray:
    """Per run, the first time `level` (runs, times) exceeds `bar`, linear between saves; NaN
    where it never does."""
    out = np.full(level.shape[0], np.nan)
    for r, series in enumerate(level):
        above = np.flatnonzero(series > bar)
        if above.size == 0:
            continue
        k = above[0]
        if k == 0:
            out[r] = times[0]
            continue
        a, b = series[k - 1], series[k]
        out[r] = times[k - 1] + (bar - a) / (b - a) * (times[k] - times[k - 1])
    return out


# ---- fits across the sweep (read from the file) ------------------------------------------------


def convergence_rate(beta, deviation, level: float = 0.95) -> dict:
    """Least-squares slope of log deviation against log beta, with its Student-t interval."""
    from scipy import stats

    x, y = np.log(np.asarray(beta, float)), np.log(np.asarray(deviation, float))
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.5 + level / 2.0, x.size - 2) * fit.stderr
    return {"rate": fit.slope, "lo": fit.slope - half, "hi": fit.slope + half}


def law_exponent(beta, deviation, terms: int, level: float = 0.95) -> tuple[float, float, np.ndarray]:
    """Least squares of log D = a + p log beta + sum_{k=1}^{terms-1} kappa_k / beta^k: the
    exponent p, its Student-t half-width and the kappas."""
    from scipy import stats

    beta = np.asarray(beta, float)
    design = np.column_stack([np.ones_like(beta), np.log(beta)] + [beta**-k for k in range(1, terms)])
    dof = beta.size - design.shape[1]
    if dof < 1:
        raise ValueError(f"a {terms}-term law needs >= {design.shape[1] + 1} values of beta, got {beta.size}")
    y = np.log(np.asarray(deviation, float))
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    cov = (residual @ residual / dof) * np.linalg.inv(design.T @ design)
    return float(coef[1]), float(stats.t.ppf(0.5 + level / 2.0, dof) * math.sqrt(cov[1, 1])), coef


def convergence_law(beta, deviation, terms: int = 2, level: float = 0.95) -> dict:
    """The derived law D = c1/beta + c2/beta^2 + ... with its exponent left free, in log form:
    log D = a + p log beta + kappa/beta + ... (kappa = c2/c1), `terms` terms. The interval: the
    fit's Student-t half-width plus the truncation |p - p'|, p' the exponent of the law with
    one more term. The curves are deterministic (the same starts at every beta, solver error
    ~1e-9), so a fit's residual is the order it leaves out, not noise: the t-interval alone
    shrinks with that order and misses the limit by about as much (the one-term slope
    -1.0027 [-1.0037, -1.0017] of the module docstring). Also the bare fit interval."""
    rate, half, coef = law_exponent(beta, deviation, terms, level)
    more, _, _ = law_exponent(beta, deviation, terms + 1, level)
    reach = half + abs(rate - more)
    return {
        "rate": rate,
        "lo": rate - reach,
        "hi": rate + reach,
        "fit_lo": rate - half,
        "fit_hi": rate + half,
        "truncation": abs(rate - more),
        "next_rate": more,
        "kappa": [float(k) for k in coef[2:]],
        "scale": float(math.exp(coef[0])),
    }


def trapping_rate(beta, times, resamples: int = 2000, seed: int = 0, level: float = 0.95) -> dict:
    """Fit log(beta tau) = a + c beta to the per-beta medians of the runs' trapping times
    (times (len(beta), runs), NaN: censored; betas where half or more are censored left out);
    the interval: percentiles of c over bootstrap resamples of the runs within each beta."""
    beta = np.asarray(beta, float)
    times = np.asarray(times, float)

    def medians(t):
        return np.array([np.median(np.where(np.isfinite(r), r, np.inf)) for r in t])

    used = np.isfinite(medians(times))
    if used.sum() < 3:
        raise ValueError(f"need >= 3 values of beta where most runs escaped, got {used.sum()}")
    x, times = beta[used], times[used]
    rate = np.polyfit(x, np.log(x * medians(times)), 1)[0]
    rng = np.random.default_rng(seed)
    rates = []
    for _ in range(resamples):
        pick = rng.integers(0, times.shape[1], size=times.shape)
        again = medians(np.take_along_axis(times, pick, axis=1))
        if np.all(np.isfinite(again)):
            rates.append(np.polyfit(x, np.log(x * again), 1)[0])
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(rates, [tail, 1.0 - tail])
    return {"rate": float(rate), "lo": float(lo), "hi": float(hi), "used": x}


def polygon_gap(m: int) -> float:
    """g = 1 - cos(2 pi / m): the trapping rate of the regular m-gon."""
    return 1.0 - math.cos(2.0 * math.pi / m)


def fits(path) -> dict:
    """The fits of a hardmax_limit file.

    The deviation, over the regular betas: no interior token of the sample crossed to another
    vertex (`crossed` = 0: the crossing band, a step of the fixed sample, is left out) and the
    median trapping time exceeds TRAPPED_AFTER windows (or is censored: the window sees the
    formation alone, not the escape). There, the one-term slope and the two-term law (see
    `convergence_law`). The trapping rate, over the betas whose median exceeds FORMED_BY (the
    cells have formed: an escape before is no trapping) and where most runs escaped. Also g =
    1 - cos(2 pi / m) of the polygon."""
    ds = dyn.open(path)
    params = tomllib.loads(ds.attrs["scenario"])["params"]
    beta = ds["beta"].values
    median = ds["trap_time_median"].values
    window = float(params.get("window", 10.0))
    regular = ~(median <= TRAPPED_AFTER * window) & (ds["crossed"].values == 0)  # NaN: censored
    formed = ~(median <= FORMED_BY)
    dev = ds["deviation"].values
    return {
        "convergence": convergence_rate(beta[regular], dev[regular]),
        "law": convergence_law(beta[regular], dev[regular]),
        "convergence_beta": beta[regular],
        "trapping": trapping_rate(beta[formed], ds["trap_time_per_run"].values[formed]),
        "gap": polygon_gap(int(params["vertices"])),
        "params": params,
    }


def figure(path, out) -> dict:
    """The picture of a hardmax_limit file: (a) the first run's hardmax paths coloured by the
    construction's cell, (b) the deviation against beta with its fit, (c) the trapping time
    against beta with e^{g beta} / beta. Returns the fits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = fits(path)
    conv, trap, g, params = found["convergence"], found["trapping"], found["gap"], found["params"]
    m, kq = int(params["vertices"]), float(params.get("kq_ratio", 1.0))
    ds = dyn.open(path)
    beta = ds["beta"].values
    fig, ax = plt.subplots(1, 3, figsize=(13, 5.0))
    states = ds["trajectory"].isel(beta=0, trajectory_run=0).values  # (time, flow, n, d)
    hard = states[:, 1]
    cells = construction_cells(hard[:1], hard[:1, :m], kq)[0]
    colors = plt.cm.hsv(np.linspace(0, 1, m, endpoint=False))
    for i in range(hard.shape[1]):
        ax[0].plot(hard[:, i, 0], hard[:, i, 1], color=colors[cells[i]], lw=1)
        ax[0].plot(*hard[0, i], "o", color=colors[cells[i]], ms=3 if i >= m else 6)
    ax[0].plot(*np.vstack([hard[0, :m], hard[0, :1]]).T, "k-", lw=0.6)
    ax[0].set_aspect("equal")
    ax[0].set_title("hardmax paths, coloured by argmax_k <x_i(0), v_k>", fontsize=9)
    dev, se = ds["deviation"].values, ds["deviation_se"].values
    regular = np.isin(beta, found["convergence_beta"])
    law = found["law"]
    ax[1].errorbar(
        beta[regular],
        beta[regular] * dev[regular],
        beta[regular] * se[regular],
        fmt="o",
        label="beta sup_{t<=window} mean |x_beta - x_hard|: fitted",
    )
    ax[1].errorbar(
        beta[~regular],
        beta[~regular] * dev[~regular],
        beta[~regular] * se[~regular],
        fmt="o",
        mfc="none",
        color="C0",
        label="a token crossed to another vertex, or escapes",
    )
    grid = np.geomspace(beta[regular].min(), beta[regular].max(), 100)
    kappa = law["kappa"][0]
    ax[1].plot(
        grid,
        law["scale"] * grid ** (law["rate"] + 1.0) * np.exp(kappa / grid),
        "--",
        color="C1",
        label=f"beta^p (c1 + c2/beta): p = {law['rate']:.5f} [{law['lo']:.5f}, {law['hi']:.5f}]",
    )
    ax[1].axhline(
        law["scale"],
        color="k",
        ls=":",
        lw=1,
        label=f"c1 (rate -1); one-term slope {conv['rate']:.4f} "
        f"[{conv['lo']:.4f}, {conv['hi']:.4f}], c2/c1 = {kappa:.2f}",
    )
    top = 1.5 * law["scale"]  # the escapes at the smallest betas, off the top: their values
    off = beta * dev > top
    if off.any():
        ax[1].text(
            0.03,
            0.97,
            "off the top: "
            + ", ".join(f"{y:.1f} (beta {b:g})" for b, y in zip(beta[off], beta[off] * dev[off], strict=True)),
            transform=ax[1].transAxes,
            va="top",
            fontsize=7,
            color="C0",
        )
    ax[1].set(
        xscale="log",
        ylim=(0.9 * law["scale"], top),
        xlabel="beta",
        ylabel="beta x deviation",
        title="finite beta -> hardmax: (c1 + c2/beta) / beta",
    )
    ax[1].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    med = ds["trap_time_median"].values
    ax[2].errorbar(
        beta,
        med,
        [med - ds["trap_time_median_lower"].values, ds["trap_time_median_upper"].values - med],
        fmt="o",
        label="median trapping time (95%)",
    )
    used = np.isin(beta, trap["used"])
    a = np.polyfit(trap["used"], np.log(trap["used"] * med[used]), 1)
    ax[2].plot(
        beta[used],
        np.exp(a[1] + a[0] * beta[used]) / beta[used],
        "--",
        label=f"fit e^(c beta)/beta, c = {trap['rate']:.3f} [{trap['lo']:.3f}, {trap['hi']:.3f}]",
    )
    ax[2].plot(
        beta[used],
        np.exp(g * beta[used]) / (4 * beta[used] * g * g),
        ":k",
        label=f"equal masses e^(g beta)/(4 beta g^2), g = {g:.3f}",
    )
    ax[2].set(yscale="log", xlabel="beta", title="trapping near the vertices")
    ax[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return {"convergence": conv, "trapping": trap, "gap": g}
