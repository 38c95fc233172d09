r"""In-context autoregressive learning (Sander, Giryes, Suzuki, Blondel & Peyre, "How do
transformers perform in-context autoregressive learning?", arXiv 2402.05787, ICML 2024; code at
github.com/michaelsdr/ical, read for its closed-form loss, not copied). The paper's abstract and
the authors' code could be read here; the paper's body could not.

**Training, as a gradient flow** (``ICLTraining``, through ``dyn.gradient_flow``). Sequences
s_{t+1} = W s_t with W a random commuting orthogonal matrix: d/2 planar rotations R(theta_k),
theta_k uniform, s_1 = (1, ..., 1). A one-layer linear transformer with H heads, value/key
matrices A, B (H x d) and a positional matrix P (T x T) predicts s_{t+2} from the first t + 2
tokens with the positional row p = P[t, :t+2]. Its expected square loss depends on A, B through
C = B^T A only. With u = p_{-2}, v = p_{-1} (the last two entries), q = p without u, rho_i the
row sums of C, tau(C) = sum_k rho_{2k} C_{2k,2k+1} + rho_{2k+1} C_{2k+1,2k} and omega(C) =
sum_k C_{2k,2k+1}^2 + C_{2k+1,2k}^2 (the off-diagonals inside the 2 x 2 blocks), the authors'
closed form reads (our notation)

    l(C, p) = u^2 |rho|^2 + (|p|^2 - u^2) |C|_F^2 + 2 u (sum p - u) tau(C)
              + ((sum q)^2 - |q|^2) omega(C) - 2 v tr C + d,

and the loss is L(A, B, P) = sum_{t=0}^{T-2} l(B^T A, P[t, :t+2]). The flow runs over (A, B, P).

**Its minima, derived (the issue's reading corrected).** The reading "B^T A proportional to
the identity and p one-hot on its last entry" gives minima (l = d (a c - 1)^2 = 0 at C = c I, p
= e_last / c), but not all of them, and not those the flow reaches. With q's other entries 0,
l is a quadratic in (u, v): l = u^2 t1 + v^2 t2 + 2 u v t3 - 2 v tr C + d (t1 = |rho|^2, t2 =
|C|_F^2, t3 = tau(C)), minimal at (u, v) = tr C (-t3, t1) / (t1 t2 - t3^2) with value d - (tr
C)^2 t1 / (t1 t2 - t3^2). For C = c I + e M, M the symmetric off-diagonals inside every block,
t1 = d (c + e)^2, t2 = d (c^2 + e^2), t3 = d (c + e) e: the value is 0 for every e. So the
minima form the family

    C = c I + e M,    v = 1 / c,    u = -e / (c (c + e))    (u / v = -e / (c + e)),

the "trigonometric relation" the abstract names: the head mixes s_{T-1} into the prediction
through R + R^{-1} = 2 cos(theta) I. From small random starts the flow lands at e != 0 (e / c
from 0.015 to 0.985 over the scenario's starts): the off-diagonal share of B^T A and the
positional mass off the last entry tend to start-dependent limits, not to 0. What does tend to 0 is measured:
``off_block`` (C outside the 2 x 2 blocks), ``block_asym`` (antisymmetric part inside them),
``e_spread`` (the block off-diagonals' spread: one e for all blocks), ``pos_off_two`` (positional
mass off the last two entries) and ``trig`` (u (c + e) + v e, relative: the relation above),
with ``off_share`` and ``pos_off_last`` beside them. The loss needs H >= d to reach 0 (C has rank
at most H); the authors' script uses H = 8 < d = 10, whose minimum is positive.

**The local rate.** Near the minimum L(t) ~ e^{-2 lambda t}, lambda the smallest nonzero
eigenvalue of the Hessian of L in (A, B, P) at the limit (the zero ones are the GL(H) gauge of
(A, B), the scale C -> C / s, P -> s P, the e-family and P's unused entries). ``hessian_min`` is
that eigenvalue at the run's state (jax.hessian); ``hessian_law`` is its closed form on the
e = 0 branch, derived at a balanced limit (A^T A = B^T B = |C|, which the flow keeps from small
starts since A A^T - B B^T is conserved): the Hessian's nonzero spectrum is that of Lambda K,
K the Hessian of sum_t l in (C, P), Lambda = 2 |c| on C and 1 on P, whose eigenvalues are 4 (T -
1) / |c|, 2 d c^2 and their sum; the smallest is 2 d c^2 for |c|^3 <= 2 (T - 1) / d. From small
starts ||P||^2 - (|A|^2 + |B|^2) / 2 is conserved (the scale symmetry), so |c|^3 = ((T - 1) / d)
(1 + e^2 / (c + e)^2) at the limit; at e != 0 the law is not derived here (the measured
hessian_min lies below 2 d c^2).

**Measured** (the scenario: d = 2, 4, 6, H = d, T = 8, 8 starts each at scale 0.3, dopri5 at
rtol 1e-12). Every start reaches L < 1e-10 (the largest final loss 1.5e-14), 23 of 24 by t =
7.8; off_block, block_asym, e_spread, pos_off_two and trig end at 0 (below 1e-6), while
off_share ends between 0.015 and 0.70 and pos_off_last between 0 and 0.20. The local rate
(fitted on 1e-13 < L < 1e-7) over hessian_min at the end: 1.00 to 1.09 in all 24 runs. The slow
start (d = 4, L < 1e-10 only at t = 94) lands at e / c = 0.985: C = c I + e M is nearly
singular (eigenvalue c - e = -0.019), and hessian_min = 0.092, the slow direction's metric
factor 2 |c - e| being small. So the loss reaches 0 from every start, but not in a time bounded
uniformly over starts: the family's singular end |e| = |c| (rank d/2, still loss 0) is
approached at a rate that vanishes with |c - e|.

**In-context prediction against the context length** (``ICLContext``, a ``dyn.System``). The
augmented one-layer transformer performs one gradient step Gamma_T = (1/T) sum_{t=1}^T s_{t+1}
s_t^T on the inner objective; it predicts s_{T+2} by Gamma_T s_{T+1}. In W's rotation planes,
(1/T) sum_t s_t s_t^T = I + (Dirichlet sums of frequencies theta_j +- theta_k and 2 theta_k,
each of size 1 / (T |frequency|)); so the error is about min(1, 1 / (T delta)), delta the
smallest frequency gap, whose density is flat at 0: its median falls like 1 / T and its mean
like (log T) / T (the integral of 1 / (T delta) over delta > 1 / T). The run's saved state is
W's rows and the query (t = 0), then W's rows and the prediction (every later save time; the
time axis carries nothing else); ``reference`` puts W s_{T+1} in the last row, so
``dyn compare FILE --reference exact --against context --at final --statistic median`` (or
``mean``) fits the two slopes: -1, and the slope of log T / T over the same range
(``log_slope``, -1 + 1 / log T).

Measured (the scenario: d = 4, 4096 W, T = 4 ... 4096): the median's slope -1.016 [-1.043,
-0.990] over all T and -1.005 [-1.012, -0.998] on T >= 128 (median x T -> 3.0); the mean's
-0.812 [-0.848, -0.777] (log T / T over the same T: -0.759) and -0.882 [-0.901, -0.862] on T >=
128 (law -0.845); mean x T against log T is a line, a = 1.34 +- 0.04, b = 1.51 (r = 0.997): the
mean is (a log T + b) / T. With N runs the sample mean sees gaps down to about 1/N only, so it
follows log T / T up to T ~ N and falls like 1/T beyond (256 runs to T = 8192: slope -1.01 on
T >= 256).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import dyn

REL_TOL = 1e-6  # Hessian eigenvalues below REL_TOL * largest are its null space


def _heads(spec) -> int:
    return spec["heads"] or spec["d"]


def block_loss(c, p_rows, used):
    """sum over rows t of l(C, p_t) (module doc); p_rows (T - 1, T) with entries beyond t + 1
    masked out by `used`."""
    d = c.shape[0]
    rho = c.sum(axis=1)
    up, lo = jnp.diagonal(c, 1)[::2], jnp.diagonal(c, -1)[::2]
    tau = jnp.sum(rho[::2] * up + rho[1::2] * lo)
    omega = jnp.sum(up**2 + lo**2)
    p = jnp.where(used, p_rows, 0.0)
    rows = jnp.arange(p.shape[0])
    u, v = p[rows, rows], p[rows, rows + 1]
    total, square = p.sum(axis=1), (p**2).sum(axis=1)
    q_total, q_square = total - u, square - u**2
    per_row = (
        u**2 * jnp.sum(rho**2)
        + (square - u**2) * jnp.sum(c**2)
        + 2 * u * q_total * tau
        + (q_total**2 - q_square) * omega
        - 2 * v * jnp.trace(c)
        + d
    )
    return jnp.sum(per_row)


def _mask(t: int):
    return np.arange(t)[None, :] <= np.arange(t - 1)[:, None] + 1


def training_loss(theta, data):
    """L(A, B, P) = sum_t l(B^T A, P[t, :t+2]) (module doc)."""
    p = theta["P"]
    return block_loss(theta["B"].T @ theta["A"], p[:-1], _mask(p.shape[0]))


def _parts(theta):
    c = theta["B"].T @ theta["A"]
    d = c.shape[0]
    blocks = np.kron(np.eye(d // 2), np.ones((2, 2))) > 0
    return c, blocks


def off_share(theta):
    c, _ = _parts(theta)
    return jnp.linalg.norm(c - jnp.diag(jnp.diagonal(c))) / jnp.linalg.norm(c)


def off_block(theta):
    c, blocks = _parts(theta)
    return jnp.linalg.norm(jnp.where(blocks, 0.0, c)) / jnp.linalg.norm(c)


def block_asym(theta):
    c, blocks = _parts(theta)
    inside = jnp.where(blocks, c, 0.0)
    return jnp.linalg.norm(inside - inside.T) / (2 * jnp.linalg.norm(c))


def _c_e(c):
    up, lo = jnp.diagonal(c, 1)[::2], jnp.diagonal(c, -1)[::2]
    return jnp.mean(jnp.diagonal(c)), jnp.mean(jnp.concatenate([up, lo])), up, lo


def e_spread(theta):
    c, _ = _parts(theta)
    cc, e, up, lo = _c_e(c)
    return jnp.sqrt(jnp.mean((jnp.concatenate([up, lo]) - e) ** 2) + jnp.mean((jnp.diagonal(c) - cc) ** 2)) / jnp.abs(
        cc
    )


def _positional(theta):
    p = theta["P"]
    used = _mask(p.shape[0])
    rows = p[:-1]
    weight = jnp.where(used, rows, 0.0) ** 2
    t = jnp.arange(rows.shape[0])
    return rows, weight, t


def pos_off_last(theta):
    rows, weight, t = _positional(theta)
    return 1.0 - jnp.sum(rows[t, t + 1] ** 2) / jnp.sum(weight)


def pos_off_two(theta):
    rows, weight, t = _positional(theta)
    return 1.0 - jnp.sum(rows[t, t + 1] ** 2 + rows[t, t] ** 2) / jnp.sum(weight)


def trig(theta):
    """RMS over rows of (u (c + e) + v e) / (v c): 0 on the family of minima."""
    c, _ = _parts(theta)
    cc, e, _, _ = _c_e(c)
    rows, _, t = _positional(theta)
    u, v = rows[t, t], rows[t, t + 1]
    return jnp.sqrt(jnp.mean(((u * (cc + e) + v * e) / (v * cc)) ** 2))


def hessian_min(theta):
    """The smallest eigenvalue of the Hessian of L in (A, B, P) above REL_TOL times the largest."""
    import jax

    names = ("A", "B", "P")
    shapes = [theta[k].shape for k in names]
    sizes = [int(np.prod(s)) for s in shapes]
    flat = jnp.concatenate([theta[k].reshape(-1) for k in names])

    def of(x):
        parts, at = {}, 0
        for k, s, n in zip(names, shapes, sizes, strict=True):
            parts[k] = x[at : at + n].reshape(s)
            at += n
        return training_loss(parts, {})

    ev = jnp.linalg.eigvalsh(jax.hessian(of)(flat))
    return jnp.min(jnp.where(ev > REL_TOL * ev[-1], ev, jnp.inf))


def hessian_law(theta):
    """2 d c^2, c the mean diagonal of B^T A: the closed form on the e = 0 branch."""
    c, _ = _parts(theta)
    return 2 * c.shape[0] * jnp.mean(jnp.diagonal(c)) ** 2


_TRAINING = dyn.gradient_flow(
    training_loss,
    name="icl_autoregressive",
    description="one-layer linear transformer trained on s_{t+1} = W s_t (commuting "
    "orthogonal W): gradient flow of the closed-form loss over (A, B, P)",
    weights={
        "A": lambda spec: (_heads(spec), spec["d"]),
        "B": lambda spec: (_heads(spec), spec["d"]),
        "P": lambda spec: (spec["context"], spec["context"]),
    },
    params={
        "d": dyn.Field("int", 4, "token dimension d (even: d/2 rotation planes)", lo=2, hi=32),
        "heads": dyn.Field("int", 0, "heads H (0: H = d; the loss reaches 0 for H >= d)", lo=0, hi=64),
        "context": dyn.Field("int", 8, "sequence length T of the positional matrix", lo=3, hi=64),
        "init_scale": dyn.Field("float", 0.3, "scale of the standard normal start", lo=0.0, hi=10.0),
    },
    observables={
        "off_share": off_share,
        "off_block": off_block,
        "block_asym": block_asym,
        "e_spread": e_spread,
        "pos_off_last": pos_off_last,
        "pos_off_two": pos_off_two,
        "trig": trig,
        "hessian_min": hessian_min,
        "hessian_law": hessian_law,
    },
)


class ICLTraining(_TRAINING):
    """The gradient flow of the training loss (module doc); d must be even."""

    def validate(self, spec) -> None:
        if spec["d"] % 2:
            raise dyn.ScenarioError("params.d", f"d must be even (d/2 rotation planes), got {spec['d']}")
        super().validate(spec)


def local_rate(times, loss, lo=1e-13, hi=1e-7) -> float:
    """-(1/2) d log L / dt fitted where lo < L < hi: the rate lambda of L ~ e^{-2 lambda t}."""
    times, loss = np.asarray(times, dtype=float), np.asarray(loss, dtype=float)
    use = (loss > lo) & (loss < hi)
    if use.sum() < 2:
        return float("nan")
    return float(-np.polyfit(times[use], np.log(loss[use]), 1)[0] / 2)


# --- second part: the one gradient step against the context length --------------------------


def rotations(rng, d: int) -> np.ndarray:
    """Angles of a commuting orthogonal W: d/2 planar rotations by uniform angles."""
    return rng.uniform(0.0, 2 * np.pi, d // 2)


def matrix(angles: np.ndarray) -> np.ndarray:
    """W, block diagonal with the rotations R(angle)."""
    w = np.zeros((2 * angles.size, 2 * angles.size))
    for k, a in enumerate(angles):
        w[2 * k : 2 * k + 2, 2 * k : 2 * k + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return w


def sequence(angles: np.ndarray, length: int) -> np.ndarray:
    """(length, d): s_1 = (1, ..., 1), s_{t+1} = W s_t, in closed form R(a t) (1, 1)."""
    phase = np.arange(length)[:, None] * angles[None, :]
    cos, sin = np.cos(phase), np.sin(phase)
    return np.stack([cos - sin, sin + cos], axis=2).reshape(length, -1)


def one_step(angles: np.ndarray, context: int):
    """(Gamma_T, s_{T+1}): Gamma_T = (1/T) sum_{t=1}^T s_{t+1} s_t^T."""
    s = sequence(angles, context + 1)
    return s[1:].T @ s[:-1] / context, s[-1]


def log_slope(context) -> np.ndarray:
    """The slope of log T / T against T on log axes, -1 + 1 / log T (the mean's law)."""
    return -1.0 + 1.0 / np.log(np.asarray(context, dtype=float))


class ICLContext(dyn.System):
    name = "icl_context"
    description = "one gradient step Gamma_T s_{T+1} against the next token, over the context length T"
    default_plot = "error"
    integrator = frozenset({"horizon"})
    params = {
        "d": dyn.Field("int", 4, "token dimension d (even)", lo=2, hi=64),
        "context": dyn.Field("int", 16, "context length T (pairs in Gamma_T)", lo=1, hi=10**6),
    }

    def validate(self, spec) -> None:
        if spec["d"] % 2:
            raise dyn.ScenarioError("params.d", f"d must be even, got {spec['d']}")

    def trajectory_dims(self, setup) -> dict[str, int]:
        sizes = set(setup.values_of("d"))
        if len(sizes) != 1:
            raise dyn.ScenarioError("output.trajectories", "saving trajectories needs params.d fixed")
        d = int(sizes.pop())
        return {"row": d + 1, "coordinate": d}

    def outputs(self, setup) -> list:
        return [
            dyn.Output("error", "|Gamma_T s_{T+1} - s_{T+2}| / sqrt d", "1", reduce="per_run"),
            dyn.Output("mean_error", "mean over W of the error", "1"),
        ]

    @staticmethod
    def reference(x0, t):
        """W's rows, then W s_{T+1} (the next token) in the last row."""
        out = np.array(x0, dtype=float)
        if t > 0:
            out[-1] = x0[:-1] @ x0[-1]
        return out

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        d, context = spec["d"], spec["context"]
        errors, states = [], []
        for _ in runs:
            angles = rotations(spec.rng, d)
            w = matrix(angles)
            gamma, query = one_step(angles, context)
            guess = gamma @ query
            errors.append(np.linalg.norm(guess - w @ query) / np.sqrt(d))
            later = np.vstack([w, guess])
            states.append(np.stack([np.vstack([w, query])] + [later] * (len(spec.times) - 1)))
        errors = np.array(errors)
        return dyn.Chunk(
            {"error": errors, "mean_error": errors}, states=np.stack(states) if spec.setup.trajectories else None
        )
