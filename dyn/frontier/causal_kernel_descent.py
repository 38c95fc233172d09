r"""Causal kernel descent: a causal transformer whose layers learn x_{t+1} = f(x_t) in context
(Sander & Peyre, "Towards understanding the universality of transformers for next-token
prediction", arXiv 2410.03011). The abstract, and summaries of the paper, could be read here;
its body could not, so the construction below is our own derivation of the method the abstract
names (a kernel gradient descent over the past pairs, with a Kaczmarz connection), written
through the public API as a ``dyn.System`` (the network is discrete).

**The network.** A prompt x_0, x_1, ..., x_T of unit tokens in R^d. At position i (0 <= i < T)
the past pairs are (x_s, x_{s+1}), s < i: keys X_i = [x_0 .. x_{i-1}], targets Y_i = [x_1 ..
x_i] (d x i). Position i holds an estimate f_i(x) = sum_s alpha_s k(x_s, x) of the map (alpha_i:
d x i), and predicts x_{i+1} by f_i(x_i). With the Gram matrix K_{s s'} = k(x_s, x_{s'}) and the
residual R = Y - alpha K, layer l takes one kernel gradient step of size eta on
(1/2) sum_s |x_{s+1} - f(x_s)|^2 (``update = "batch"``: all past pairs at once),

    alpha^{(l+1)} = alpha^{(l)} + eta R^{(l)},     so     R^{(l+1)} = R^{(l)} (I - eta K),

from alpha^{(0)} = 0. Kernels (``kernel``): linear <x, x'>; exp e^{beta(<x, x'> - 1)} (the
Gaussian kernel e^{-beta |x - x'|^2 / 2} on the sphere, so k(x, x) = 1 and eta K stays stable
at the same depths as the linear one); softmax e^{beta <x_s, x>} / sum_{s'} e^{beta <x_{s'},
x>}, normalized over the keys (K = G D^{-1}, G the exp Gram matrix, similar to D^{-1/2} G
D^{-1/2}: real, nonnegative eigenvalues).

**The linear law, derived.** With the linear kernel f(x) = W x, W = alpha X^T, and with x_{s+1}
= W* x_s the error E = W - W* obeys E^{(l+1)} = E^{(l)} (I - eta X X^T) (multiply the alpha step
by X^T: R X^T = -E X X^T). So ||E^{(L)}|| <= max_i |1 - eta sigma_i(X)^2|^L ||E^{(0)}||. This
holds for the full-batch step. A causal *sequential* order (one pair after the other, the pair
s updating before s + 1) is a product of rank-one factors prod_s (I - eta x_s x_s^T), which is
not I - eta X X^T (the factors do not commute); it is the cyclic Kaczmarz method at eta =
1/|x_s|^2 (``update = "cyclic"``: each layer one sweep in causal order, alpha_s += R_s /
K_ss). ``update = "random"``: each layer i pairs drawn with probability proportional to K_ss
(randomized Kaczmarz).

**The depth limit.** With eta = tau / L and L -> infinity, R(tau) = Y e^{-tau K} and alpha(tau)
= Y Phi(K), Phi(K) = int_0^tau e^{-s K} ds (defined for singular K: the top-right block of
exp(tau [[-K, I], [0, 0]])); for the linear kernel E(tau) = E(0) e^{-tau X X^T}, exactly. The
network at depth L is Euler's method for this linear ODE in alpha, so its distance to the limit
is O(1/L): ``reference(x0, kernel, beta, t)`` is the limit from each run's own prompt (read from
the saved state), and ``dyn compare FILE --reference exact --against depth`` fits the slope -1.

**Rates.** ||R(tau)||_F^2 = sum_i c_i^2 e^{-2 tau lambda_i} over K's eigenpairs: the residual
decays at lambda_min^+(K), the smallest nonzero eigenvalue (Y has no component on K's null
space: for the linear kernel Y = W* X, for periodic prompts duplicate keys carry equal targets).
For the linear kernel with i >= d pairs, lambda_min^+(K) = lambda_min(X X^T). The output
``rate`` is -d log ||R|| / d tau over the last save interval at the last position, beside
``lambda_min`` from the run's own prompt; the network's own per-layer law is |1 - eta
lambda_min|, i.e. a rate -log(1 - eta lambda) / eta = lambda (1 + eta lambda / 2 + ...).

**Periodic prompts.** x_{t+p} = x_t. Once i > p every query x_i is a past key (x_i = x_{i-p}),
so f_i(x_i) -> x_{i+1} exactly (interpolation), at the rate lambda_min^+ of the Gram matrix of
the past keys; for i < p the query is new and the error stays O(1) (``position_error``).

**Kaczmarz.** The randomized bound, E|e_{k+1}|^2 <= (1 - lambda_min^+(K) / tr K) E|e_k|^2 per
step (Strohmer-Vershynin; for the linear kernel 1 - sigma_min(X)^2 / ||X||_F^2), gives per
sweep of m = i steps the factor (1 - lambda_min^+ / tr K)^{m/2} on the RMS norm
(``kaczmarz_bound``). It holds in expectation for the randomized order; the causal order is
cyclic, for which no bound in sigma_min / ||X||_F alone holds in general. ``sweep_factor`` is the
measured mean factor of a layer, (||e^{(l)}|| / ||e^{(0)}||)^{1/l} up to the last layer l above
1e-9 (a Kaczmarz sweep; for ``batch`` one gradient step).

**Measured** (d = 4, T = 12, linear kernel, Haar prompts). Per run, ``rate`` equals the
spectral law ``rate_law`` to 3e-9 (relative) in every run of the scenario: the batch law E^(l+1)
= E^(l) (I - eta X X^T) holds exactly. Against lambda_min(X X^T) the rate is an asymptotic law:
||E(tau)||^2 = sum_i e^{-2 tau mu_i} is dominated by mu_1 only once tau (mu_2 - mu_1) >> 1. At
tau = 12, L = 2048: median rate / lambda_min 1.003, 26 of 32 runs (81%) within 2%; 88% of 256
prompts in a separate draw; all prompts with (mu_2 - mu_1) tau > 5 (56% of them) within 0.7%.
The others have a near-degenerate pair mu_1 ~ mu_2 (or mu_1 ~ 1e-5: an orbit close to a
3-dimensional subspace), for which no finite horizon gives 2% uniformly. Periodic prompts (p =
3): all 32 runs within 2%.
Kaczmarz, 256 prompts, per sweep of m = 11 steps: the cyclic (causal) order contracts by a
median 0.50 (the spectral radius of the sweep product prod_s (I - x_s x_s^T), median 0.51), the
randomized order by 0.62 (geometric mean over sweeps), and the randomized bound is 0.80. The
randomized order met its bound in 256 of 256 prompts; the cyclic order beat it in 248 and
exceeded it in 8 (3.1%, by up to 1.44 times): the bound (1 - sigma_min^2 / ||X||_F^2)^{m/2} is
not a bound for the causal order, though it is faster in the median.
"""

from __future__ import annotations

import numpy as np

import dyn

KERNELS = ("linear", "exp", "softmax")
RANK_TOL = 1e-9  # eigenvalues below RANK_TOL * largest are K's null space
FLOOR = 1e-9  # rates are measured where |e| / |e(0)| is above it (rounding is 1e-16)


def _fixed(setup, key: str) -> int:
    """The one value of `key` over the sweep (trajectories need one state shape)."""
    sizes = set(setup.values_of(key))
    if len(sizes) != 1:
        raise dyn.ScenarioError(
            "output.trajectories",
            f"saving trajectories needs params.{key} fixed (every point's states must have one shape)",
        )
    return int(sizes.pop())


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def prompt(rng, d: int, tokens: int, kind: str, period: int):
    """(x, W): (tokens + 1, d) unit tokens, x_{t+1} = W x_t with W Haar on O(d); or p-periodic
    (W None)."""
    if kind == "orthogonal":
        q, r = np.linalg.qr(rng.standard_normal((d, d)))
        w = q * np.sign(np.diag(r))  # Haar on O(d)
        x = np.empty((tokens + 1, d))
        x[0] = unit(rng.standard_normal(d))
        for t in range(tokens):
            x[t + 1] = w @ x[t]
        return x, w
    base = unit(rng.standard_normal((period, d)))
    return base[np.arange(tokens + 1) % period], None


def gram(keys: np.ndarray, queries: np.ndarray, kernel: str, beta: float) -> np.ndarray:
    """(keys, queries): k(x_s, q) for every key s and query q (softmax: normalized over keys)."""
    s = keys @ queries.T
    if kernel == "linear":
        return s
    if kernel == "exp":
        return np.exp(beta * (s - 1.0))
    z = beta * s
    z = np.exp(z - z.max(axis=0, keepdims=True))
    return z / z.sum(axis=0, keepdims=True)


def smallest_nonzero(k: np.ndarray) -> float:
    """lambda_min^+ of K (real spectrum: K symmetric, or G D^{-1} similar to a symmetric one)."""
    ev = np.sort(np.abs(np.linalg.eigvals(k).real))
    return float(ev[ev > RANK_TOL * ev[-1]][0])


def padded(x: np.ndarray, kernel: str, beta: float):
    """Every position at once, zero-padded to m = T - 1 pairs: Gram matrices K (T, m, m),
    targets Y (T, d, m) and query columns k(X_i, x_i) (T, m); position i uses its first i."""
    tokens, d = x.shape[0] - 1, x.shape[1]
    m = tokens - 1
    k, y, kq = np.zeros((tokens, m, m)), np.zeros((tokens, d, m)), np.zeros((tokens, m))
    for i in range(1, tokens):
        keys = x[:i]
        k[i, :i, :i] = gram(keys, keys, kernel, beta)
        y[i, :, :i] = x[1 : i + 1].T
        kq[i, :i] = gram(keys, x[i : i + 1], kernel, beta)[:, 0]
    return k, y, kq


def descend(x: np.ndarray, kernel: str, beta: float, depth: int, eta: float, update: str, every: int, rng=None, w=None):
    """The network on prompt x (tokens + 1, d), all positions at once: predictions (saves,
    tokens, d) after layers 0, every, 2 every, ...; and the last position's error norm after
    each layer (depth + 1): |E| = |alpha X - W| when the map W is given (linear kernel), else
    the residual |R| = |Y - alpha K|."""
    tokens, d = x.shape[0] - 1, x.shape[1]
    k, y, kq = padded(x, kernel, beta)
    m = tokens - 1
    alpha = np.zeros((tokens, d, m))
    preds = np.zeros((depth // every + 1, tokens, d))
    norms = np.zeros(depth + 1)
    keys = x[:m]

    def error():
        if w is not None:
            return np.linalg.norm(alpha[-1] @ keys - w)
        return np.linalg.norm(y[-1] - alpha[-1] @ k[-1])

    norms[0] = error()
    live = np.arange(tokens)[:, None] > np.arange(m)[None, :]  # (position, pair): s < i
    diag = np.where(live, np.diagonal(k, axis1=1, axis2=2), 1.0)
    for layer in range(1, depth + 1):
        if update == "batch":
            alpha += eta * (y - alpha @ k)
        else:
            for step in range(m):
                if update == "cyclic":
                    s = np.full(tokens, step)
                else:  # each position draws its pair with probability K_ss / tr K
                    prob = np.where(live, diag, 0.0)
                    s = np.array([rng.choice(m, p=p / p.sum()) if p.sum() > 0 else 0 for p in prob])
                rows = np.arange(tokens)
                on = live[rows, s] & (step < rows)  # position i: i steps a sweep
                r = y[rows, :, s] - np.einsum("tdm,tm->td", alpha, k[rows, :, s])
                alpha[rows, :, s] += np.where(on[:, None], r / diag[rows, s][:, None], 0.0)
        if layer % every == 0:
            preds[layer // every] = np.einsum("tdm,tm->td", alpha, kq)
        norms[layer] = error()
    return preds, norms


_SPECTRA: dict = {}  # (prompt bytes, kernel, beta) -> per position (V, lambda, D^{1/2}, kq)


def spectra(x: np.ndarray, kernel: str, beta: float) -> list:
    """Per position i: K = D^{1/2} V diag(lambda) V^T D^{-1/2} (symmetric: D = I; softmax: K = G
    D^{-1}, D the column sums), and the query's kernel column; cached per prompt, since the
    reference is asked at every save time of every depth."""
    key = (x.tobytes(), x.shape, kernel, float(beta))
    if key not in _SPECTRA:
        if len(_SPECTRA) > 4096:
            _SPECTRA.clear()
        found = [None]
        for i in range(1, x.shape[0] - 1):
            keys, q = x[:i], x[i : i + 1]
            k = gram(keys, keys, kernel, beta)
            half = np.ones(i)
            if kernel == "softmax":
                g = np.exp(beta * (keys @ keys.T))
                half = np.sqrt(g.sum(axis=0))
                k = g / np.outer(half, half)  # D^{-1/2} G D^{-1/2}
            lam, v = np.linalg.eigh(k)
            found.append((v, lam, half, gram(keys, q, kernel, beta)[:, 0]))
        _SPECTRA[key] = found
    return _SPECTRA[key]


def limit(x: np.ndarray, kernel: str, beta: float, tau: float) -> np.ndarray:
    """The depth limit's predictions (tokens, d) at depth tau: f_i(x_i) = Y Phi(K) k(X, x_i),
    Phi(K) = int_0^tau e^{-s K} ds = K^{-1} (I - e^{-tau K}) (tau on K's null space)."""
    tokens, d = x.shape[0] - 1, x.shape[1]
    out = np.zeros((tokens, d))
    found = spectra(x, kernel, beta)
    for i in range(1, tokens):
        v, lam, half, kq = found[i]
        small = np.abs(lam) < 1e-12
        phi = np.where(small, tau, -np.expm1(-tau * lam) / np.where(small, 1.0, lam))
        y = x[1 : i + 1].T
        out[i] = ((y * half) @ v) @ (phi * (v.T @ (kq / half)))
    return out


class CausalKernelDescent(dyn.System):
    name = "causal_kernel_descent"
    description = "causal transformer whose layers take kernel gradient steps on the past pairs"
    default_plot = "error"
    integrator = frozenset({"horizon"})
    params = {
        "d": dyn.Field("int", 4, "token dimension d", lo=1, hi=64),
        "tokens": dyn.Field("int", 12, "prompt length T (positions 0 .. T-1; x_T their last target)", lo=2, hi=256),
        "prompt": dyn.Field(
            "str",
            "orthogonal",
            "x_{t+1} = W x_t, W Haar on O(d), or a p-periodic sequence",
            choices=("orthogonal", "periodic"),
        ),
        "period": dyn.Field("int", 3, "period p of periodic prompts", lo=1, hi=256),
        "kernel": dyn.Field("str", "linear", "attention kernel", choices=KERNELS),
        "beta": dyn.Field("float", 1.0, "inverse temperature of the exp and softmax kernels", gt=0.0, hi=100.0),
        "depth": dyn.Field("int", 100, "number of layers L (step eta = horizon / L)", lo=1, hi=10**6),
        "update": dyn.Field(
            "str",
            "batch",
            "a layer: one gradient step on all past pairs, or one Kaczmarz sweep in causal (cyclic) or random order",
            choices=("batch", "cyclic", "random"),
        ),
    }

    def validate(self, spec) -> None:
        if spec["depth"] % spec.setup.saves:
            raise dyn.ScenarioError(
                "output.saves",
                f"{spec.setup.saves} saves must divide depth {spec['depth']} (the network saves after whole layers)",
            )

    def trajectory_dims(self, setup) -> dict[str, int]:
        return {"token": _fixed(setup, "tokens"), "row": 2, "coordinate": _fixed(setup, "d")}

    def coords(self, setup) -> dict:
        t = _fixed(setup, "tokens")
        return {"position": dyn.Coord(np.arange(t), "position i (its prediction is of x_{i+1})")}

    def outputs(self, setup) -> list:
        law = "no closed form: softmax kernel or a Kaczmarz order"
        return [
            dyn.Output(
                "error",
                "|e^(L)| / |e^(0)| at the last position: e = E = W^(l) - W "
                "(linear kernel, orthogonal prompt), else the residual R",
                "1",
            ),
            dyn.Output("rate", "-d log|e| / d tau over the last save interval where |e| / |e(0)| > 1e-9", "1"),
            dyn.Output(
                "rate_law",
                "the same from the spectrum: |e^(l)|^2 = sum_i c_i^2 (1 - eta lambda_i)^{2l}",
                "1",
                nan_means=law,
            ),
            dyn.Output("lambda_min", "lambda_min^+ of the last position's Gram matrix K", "1"),
            dyn.Output("rate_ratio", "rate / lambda_min, per run", "1", reduce="per_run"),
            dyn.Output("p_rate_within", "|rate / lambda_min - 1| < 0.02", "1", reduce="proportion"),
            dyn.Output(
                "sweep_factor",
                "(|e^(l)| / |e^(0)|)^(1/l), l the last layer above "
                "1e-9: the mean contraction of a layer (a Kaczmarz sweep)",
                "1",
            ),
            dyn.Output("kaczmarz_bound", "randomized Kaczmarz bound per sweep, (1 - lambda_min^+ / tr K)^{m/2}", "1"),
            dyn.Output("position_error", "|f_i(x_i) - x_{i+1}| after L layers", "1", dims=("position",)),
        ]

    def run_bytes(self, spec) -> int:
        return 8 * (len(spec.times) + 2) * spec["tokens"] * spec["d"] * 2 + 8 * spec["depth"]

    @staticmethod
    def reference(x0, kernel, beta, t):
        """The depth limit at depth t from the run's own prompt (rows 0 of the saved state)."""
        tokens = x0[:, 0]
        # the last target x_T is not a row of the state: it is not needed (keys and targets of
        # position i < T stop at x_i)
        x = np.vstack([tokens, tokens[-1:]])
        out = np.empty_like(x0)
        out[:, 0] = tokens
        out[:, 1] = limit(x, kernel, float(beta), float(t))
        return out

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        d, tokens, depth = spec["d"], spec["tokens"], spec["depth"]
        kernel, beta, update = spec["kernel"], float(spec["beta"]), spec["update"]
        eta = spec.horizon / depth
        every = depth // spec.setup.saves
        keep = {o.name: [] for o in self.outputs(spec.setup)}
        states = []
        for _ in runs:
            x, w = prompt(spec.rng, d, tokens, spec["prompt"], spec["period"])
            w = w if kernel == "linear" else None
            preds, norms = descend(x, kernel, beta, depth, eta, update, every, spec.rng, w)
            keys, y = x[: tokens - 1], x[1:tokens].T
            k = gram(keys, keys, kernel, beta)
            lam = smallest_nonzero(k)
            end = depth  # the last save interval above the rounding floor
            while end > every and norms[end] < FLOOR * norms[0]:
                end -= every
            rate = -np.log(norms[end] / norms[end - every]) / (eta * every)
            law = np.nan
            if update == "batch" and kernel != "softmax":
                if w is not None:  # E^(l) = -W (I - eta X^T X)^l: |E|^2 = sum_i (1 - eta mu_i)^{2l}
                    mu, c2 = np.linalg.eigvalsh(keys.T @ keys), np.ones(d)
                else:  # R^(l) = Y (I - eta K)^l, K = V diag(mu) V^T
                    mu, v = np.linalg.eigh(k)
                    c2 = ((y @ v) ** 2).sum(axis=0)
                ln = np.log(np.abs(1.0 - eta * mu))

                def sq(layer, c2=c2, ln=ln):
                    return np.log(np.sum(c2 * np.exp(2 * layer * ln)))

                law = -(sq(end) - sq(end - every)) / (2 * eta * every)
            keep["error"].append(norms[depth] / norms[0])
            keep["rate"].append(rate)
            keep["rate_law"].append(law)
            keep["lambda_min"].append(lam)
            keep["rate_ratio"].append(rate / lam)
            keep["p_rate_within"].append(abs(rate / lam - 1.0) < 0.02)
            above = np.flatnonzero(norms > FLOOR * norms[0])[-1]
            keep["sweep_factor"].append((norms[above] / norms[0]) ** (1.0 / max(above, 1)))
            keep["kaczmarz_bound"].append((1.0 - lam / np.trace(k)) ** ((tokens - 1) / 2))
            keep["position_error"].append(np.linalg.norm(preds[-1] - x[1:], axis=-1))
            if spec.setup.trajectories:
                s = np.empty((preds.shape[0], tokens, 2, d))
                s[:, :, 0] = x[:tokens]
                s[:, :, 1] = preds
                states.append(s)
        return dyn.Chunk({k: np.array(v) for k, v in keep.items()}, states=np.stack(states) if states else None)
