r"""Positional attention: attention weights set by the tokens' positions alone make the token
flow linear, and on a periodic patch grid its modes are Fourier modes with closed-form rates
(Jelassi, Sander & Li, "Vision transformers provably learn spatial structure", arXiv
2210.09221). Only the abstract could be read here, not the paper's body: the model below is our
reading of it (patches on a grid, an attention whose logits are a function of the patches'
positions, trained to attend within groups of spatially close patches: "patch association"),
and the derivations are ours, checked by the tests.

The flow. Tokens x_1 .. x_n in R^d (n = g^2 patches of a g x g grid, token i at the grid point
(i // g, i mod g)), written with the public API as ``dyn.particles(phi, geometry="euclidean")``
with a position-dependent interaction phi(s, i, j) and the row normalization SA:

    dx_i/dt = sum_j A_ij (x_j - x_i),      A_ij = w_ij / sum_k w_ik.

When w_ij = k(p_i, p_j) does not depend on the tokens (s = <x_i, x_j> is not read), A is a
constant matrix and the flow is linear, x' = (A - I) x: along a (right) eigenvector u of A with
eigenvalue lambda, the amplitude of x decays exactly like e^{-(1 - lambda) t}. With equal row
sums and a symmetric kernel A is symmetric, so its eigenvectors are orthogonal and every mode's
rate is 1 - lambda_k(A).

Gaussian kernel on the periodic grid (``kernel = "gaussian"``). w_ij = k(i1 - j1) k(i2 - j2)
with k(delta) = exp(-|delta|_g^2 / (2 sigma^2)), |delta|_g = min(delta mod g, g - delta mod g)
the distance on the cycle Z_g (the torus' minimum image). w depends on the difference of the
positions only, so every row has the same sum s = (sum_delta k(delta))^2 and A = w / s is a
symmetric block-circulant matrix. Its eigenvectors are the discrete Fourier modes
e_{ab}(i) = exp(2 pi sqrt(-1) (a i1 + b i2) / g), a, b = 0 .. g - 1, and

    A e_{ab} = mu_a mu_b e_{ab},       mu_a = sum_{delta=0}^{g-1} k(delta) cos(2 pi a delta / g)
                                              / sum_{delta=0}^{g-1} k(delta),

(the sine part cancels: k(delta) = k(g - delta)), so the mode (a, b) decays at the closed-form
rate 1 - mu_a mu_b. The mode (0, 0) is the tokens' mean, conserved (rate 0). For
1 << sigma << g, Poisson summation gives mu_a ~ exp(-2 pi^2 sigma^2 a^2 / g^2): the heat
kernel's coefficients (the wrapped Gaussian's coefficients are a theta function; the finite
sum above is the exact one for the minimum-image kernel the engine runs). The measurement: the
2D DFT of the state (per coordinate), c_{ab}(t) = sum_i x_i e_{ab}(i)^*, so
|c_{ab}(t)| = e^{-(1 - mu_a mu_b) t} |c_{ab}(0)| and the rate is log(|c(0)| / |c(t1)|) / t1
over the first save interval (amplitudes far above rounding). RK4 with step h multiplies a mode
by R(-r h) = 1 - r h + (r h)^2/2 - (r h)^3/6 + (r h)^4/24 per step, so it measures the rate
-log R(-r h) / h = r - r^5 h^4 / 120 + O(h^5): at h = 0.005 and r <= 1 the step error is below
6e-12 (a test checks the measured rates against the RK4 polynomial to rounding, and against the
closed form to 1e-10).

Patch association (``kernel = "blocks"``). The grid is cut into G = (g / b)^2 square patches of
side b (groups of m = b^2 tokens); w_ij = a within a group (i = j included), epsilon across. With
J the all-ones matrix and B the block-diagonal matrix of the groups' all-ones blocks,
w = epsilon J + (a - epsilon) B; every row sums to s = a m + epsilon (n - m), and A = w / s has
three eigenspaces:

- the consensus (constant vectors): eigenvalue 1, rate 0;
- the group contrasts (constant on each group, summing to zero; G - 1 of them): eigenvalue
  (a - epsilon) m / s, rate r_merge = epsilon n / s = G epsilon / (a + (G - 1) epsilon);
- within the groups (summing to zero on each group; n - G of them): eigenvalue 0, rate 1.

So the flow has two time scales, read off A's spectrum: the G clusters form at rate exactly 1
(within(t) = |P_w x(t)| / |P_w x(0)| = e^{-t} for every run, P_w the projection on the
within-group space), then merge at the rate r_merge ~ G epsilon / a for small epsilon
(between(t) = |P_b x(t)| / |P_b x(0)| = e^{-r_merge t}, P_b the projection on the contrasts).
The outputs measure both per run, and both rates from the first save interval.

Mixed attention (``kernel = "mixed"``). w_ij = exp(beta <x_i, x_j> + <p_i, p_j>) with the
positional embedding p_i = rho (cos(2 pi i1/g), sin(2 pi i1/g), cos(2 pi i2/g),
sin(2 pi i2/g)), so <p_i, p_j> = rho^2 (cos(2 pi (i1 - j1)/g) + cos(2 pi (i2 - j2)/g)). Its two
limits:

- beta -> 0: the logits are positional only, w = exp(rho^2 (cos + cos)), again a product of a
  circulant kernel along each axis (von Mises on Z_g), so the flow is linear with rates
  1 - nu_a nu_b, nu_a = sum_delta e^{rho^2 cos(2 pi delta/g)} cos(2 pi a delta/g) /
  sum_delta e^{rho^2 cos(2 pi delta/g)}; the difference of the flows is O(beta) on a bounded
  time interval (Gronwall: the fields differ by O(beta) and are Lipschitz);
- rho -> 0: <p_i, p_j> -> 0 and the flow is the softmax self-attention flow in R^d,
  softmax(beta <x_i, x_j>), with a difference O(rho^2).

Both are tests (the drifts, and the trajectories against the matrix exponential). The scenario's
mode rates for the mixed kernel are those of the beta -> 0 limit (its `mode_rate_exact`): at
beta > 0 they measure how far the flow is from it.

About the public API: phi(s, i, j) receives the tokens' indices, not positions, so the grid
(its side g) is a parameter of the interaction and n = g^2 is checked; the three kernels are
three built classes handed each point by a small `dyn.System` (one particles class has one
interaction); the builder's initial law (standard normal in R^d) is kept and its cluster
outputs are replaced by subclassing. The gradient flow of the positional logits on the paper's
structured task (the issue's optional part) is not written here.
"""

from __future__ import annotations

import math

import numpy as np

import dyn

KERNELS = ("gaussian", "blocks", "mixed")


def grid_gaussian(s, i, j, g, sigma):
    """w_ij = exp(-|p_i - p_j|^2 / (2 sigma^2)), |.| the minimum-image distance on the g x g
    torus of token positions (i // g, i mod g); s is not read."""
    side = int(g + 0.5)
    d1 = abs(i // side - j // side)
    d1 = min(d1, side - d1)
    d2 = abs(i % side - j % side)
    d2 = min(d2, side - d2)
    return math.exp(-(d1 * d1 + d2 * d2) / (2.0 * sigma * sigma))


def patch_blocks(s, i, j, g, block, a, eps):
    """w_ij = a when tokens i and j lie in the same b x b patch of the grid (b = block), else
    eps; s is not read."""
    side, b = int(g + 0.5), int(block + 0.5)
    same = (i // side) // b == (j // side) // b and (i % side) // b == (j % side) // b
    return a if same else eps


def mixed_logits(s, i, j, g, beta, rho):
    """w_ij = exp(beta <x_i, x_j> + <p_i, p_j>), p the Fourier positional embedding of amplitude
    rho (module doc)."""
    side = int(g + 0.5)
    t1 = 2.0 * math.pi * (i // side - j // side) / side
    t2 = 2.0 * math.pi * (i % side - j % side) / side
    return math.exp(beta * s + rho * rho * (math.cos(t1) + math.cos(t2)))


PARAMS = {
    "g": dyn.Field(
        "int",
        8,
        "side of the periodic patch grid (n = g^2 tokens; fixed in a sweep: it sets the modes)",
        lo=2,
        hi=64,
        sweepable=False,
    ),
    "sigma": dyn.Field("float", 1.0, "gaussian kernel: its width in grid units", gt=0.0, hi=100.0),
    "block": dyn.Field("int", 4, "blocks kernel: side of a patch group (divides g)", lo=1, hi=64),
    "a": dyn.Field("float", 1.0, "blocks kernel: the weight within a group", gt=0.0, hi=1e3),
    "eps": dyn.Field("float", 0.02, "blocks kernel: the weight across groups", gt=0.0, hi=1e3),
    "beta": dyn.Field("float", 0.0, "mixed kernel: weight of the tokens' inner product in the logits", lo=0.0, hi=10.0),
    "rho": dyn.Field("float", 1.0, "mixed kernel: amplitude of the positional embedding", lo=0.0, hi=10.0),
}

Gaussian = dyn.particles(
    grid_gaussian,
    name="positional_gaussian",
    geometry="euclidean",
    normalization="SA",
    params=PARAMS,
    description="attention by a Gaussian kernel of grid positions",
)
Blocks = dyn.particles(
    patch_blocks,
    name="positional_blocks",
    geometry="euclidean",
    normalization="SA",
    params=PARAMS,
    description="attention by patch groups of the grid",
)
Mixed = dyn.particles(
    mixed_logits,
    name="positional_mixed",
    geometry="euclidean",
    normalization="SA",
    params=PARAMS,
    description="attention by tokens and positions",
)


# --- the theory --------------------------------------------------------------------------------
def cycle_coefficients(weights) -> np.ndarray:
    """mu_a = sum_delta k(delta) cos(2 pi a delta / g) / sum_delta k(delta), a = 0 .. g - 1,
    for a symmetric kernel on Z_g given by its values k(0 .. g - 1)."""
    k = np.asarray(weights, dtype=float)
    g = len(k)
    delta = np.arange(g)
    return np.cos(2 * np.pi * np.outer(delta, delta) / g) @ k / k.sum()


def gaussian_coefficients(g: int, sigma: float) -> np.ndarray:
    """mu_a of the minimum-image Gaussian kernel on Z_g (module doc)."""
    delta = np.arange(g)
    near = np.minimum(delta, g - delta)
    return cycle_coefficients(np.exp(-(near**2) / (2 * sigma**2)))


def von_mises_coefficients(g: int, rho: float) -> np.ndarray:
    """nu_a of the kernel e^{rho^2 cos(2 pi delta / g)} on Z_g (the mixed kernel at beta = 0)."""
    return cycle_coefficients(np.exp(rho**2 * np.cos(2 * np.pi * np.arange(g) / g)))


def mode_rates(kernel: str, g: int, sigma: float = 1.0, rho: float = 1.0) -> np.ndarray:
    """1 - mu_a mu_b for the Fourier mode (a, b), flattened as a g + b: the closed-form rates of
    the gaussian kernel and of the mixed kernel's beta -> 0 limit."""
    mu = gaussian_coefficients(g, sigma) if kernel == "gaussian" else von_mises_coefficients(g, rho)
    return (1.0 - np.outer(mu, mu)).ravel()


def merge_rate(g: int, block: int, a: float, eps: float) -> float:
    """r_merge = eps n / s, s = a m + eps (n - m): the rate of the group contrasts (module doc)."""
    n, m = g * g, block * block
    return eps * n / (a * m + eps * (n - m))


def attention_matrix(kernel: str, g: int, **p) -> np.ndarray:
    """A = w / (row sums) built pair by pair from the kernel (positional kernels only)."""
    n = g * g
    phi = {
        "gaussian": lambda i, j: grid_gaussian(0.0, i, j, g, p["sigma"]),
        "blocks": lambda i, j: patch_blocks(0.0, i, j, g, p["block"], p["a"], p["eps"]),
        "mixed": lambda i, j: mixed_logits(0.0, i, j, g, 0.0, p["rho"]),
    }[kernel]
    w = np.array([[phi(i, j) for j in range(n)] for i in range(n)])
    return w / w.sum(axis=1, keepdims=True)


def groups(g: int, block: int) -> np.ndarray:
    """The patch group of each token (n,), numbered 0 .. G - 1."""
    i = np.arange(g * g)
    per_side = g // block
    return (i // g) // block * per_side + (i % g) // block


def split(x, labels):
    """(within, between) parts of states x (..., n, d): x less its group's mean, and the group
    means less the overall mean (each token carrying its group's)."""
    x = np.asarray(x, dtype=float)
    count = np.bincount(labels)
    sums = np.zeros(x.shape[:-2] + (len(count), x.shape[-1]))
    for k in range(len(count)):
        sums[..., k, :] = x[..., labels == k, :].sum(axis=-2)
    means = sums / count[:, None]
    member = means[..., labels, :]
    return x - member, member - x.mean(axis=-2, keepdims=True)


# --- the system --------------------------------------------------------------------------------
class PositionalTokens:
    """What the scenario changes in a built particles class: the outputs (modes, groups)."""

    def validate(self, spec) -> None:
        dyn.Model.validate(self, spec)

    def simulate(self, spec, runs: range):
        return dyn.Model.simulate(self, spec, runs)

    def trajectory_dims(self, setup):
        return None

    def observe(self, spec, states) -> dyn.Chunk:
        x = np.asarray(states)  # (runs, T, n, d)
        runs, _, n, d = x.shape
        g, dt1 = spec["g"], float(spec.times[1] - spec.times[0])
        modes = np.fft.fft2(x.reshape(runs, -1, g, g, d), axes=(2, 3))
        size = np.linalg.norm(modes, axis=-1).reshape(runs, -1, g * g)
        rate = np.log(size[:, 0] / size[:, 1]) / dt1
        within, between = split(x, groups(g, spec["block"]))
        w, b = np.linalg.norm(within, axis=(2, 3)), np.linalg.norm(between, axis=(2, 3))
        values = {
            "mode_rate": rate,
            "within": w / w[:, :1],
            "between": b / b[:, :1],
            "rate_within": np.log(w[:, 0] / w[:, 1]) / dt1,
            "rate_between": np.log(b[:, 0] / b[:, 1]) / dt1,
        }
        kernel = spec["kernel"]
        if kernel == "blocks":
            exact = merge_rate(g, spec["block"], spec["a"], spec["eps"])
            error = np.maximum(np.abs(values["rate_within"] - 1.0), np.abs(values["rate_between"] - exact))
        else:
            error = np.abs(rate - mode_rates(kernel, g, spec["sigma"], spec["rho"])).max(axis=1)
        values["rate_error"] = error
        return dyn.Chunk(values)


class GaussianTokens(PositionalTokens, Gaussian):
    """Tokens under the Gaussian positional kernel."""


class BlockTokens(PositionalTokens, Blocks):
    """Tokens under patch-association attention."""


class MixedTokens(PositionalTokens, Mixed):
    """Tokens under mixed token-positional attention."""


TOKENS = {"gaussian": GaussianTokens, "blocks": BlockTokens, "mixed": MixedTokens}


class PositionalAttention(dyn.System):
    """Attention set by the tokens' grid positions (gaussian, blocks) or by tokens and positions
    (mixed): measured mode rates against A's closed-form spectrum."""

    name = "positional_attention"
    description = (
        "attention set by patch positions on a periodic grid: the linear flow's mode "
        "rates against the closed-form spectrum of A"
    )
    default_plot = "between"
    params = {
        "kernel": dyn.Field(
            "str",
            "gaussian",
            "the positional attention: gaussian "
            "(Gaussian kernel of grid distance), blocks (a within patch "
            "groups, eps across) or mixed (softmax(beta <x_i, x_j> + "
            "<p_i, p_j>))",
            choices=KERNELS,
        ),
        **PARAMS,
        "n": dyn.Field("int", 64, "number of tokens (g^2)", lo=4, hi=4096, sweepable=False),
        "d": dyn.Field("int", 2, "dimension of the tokens", lo=1, hi=64),
    }
    equation = "ode"
    integrator = Gaussian.integrator

    @staticmethod
    def tokens(spec):
        """The particles system of the point's kernel."""
        return TOKENS[spec["kernel"]]()

    def validate(self, spec) -> None:
        g = spec["g"]
        if spec["n"] != g * g:
            raise dyn.ScenarioError(
                "params.n", f"the tokens are the g x g grid's patches: n must be g^2 = {g * g}, got {spec['n']}"
            )
        if g % spec["block"] or spec["block"] == g:
            raise dyn.ScenarioError(
                "params.block",
                f"a patch group's side must divide g = {g} and leave at least two groups, got {spec['block']}",
            )
        self.tokens(spec).validate(spec)

    def simulate(self, spec, runs: range) -> dyn.Chunk:
        return self.tokens(spec).simulate(spec, runs)

    def run_bytes(self, spec) -> int:
        return self.tokens(spec).run_bytes(spec)

    def coords(self, setup) -> dict:
        g = int(setup.params.get("g") or 8)
        return {"mode": dyn.Coord(np.arange(g * g), "Fourier mode (a, b) as a g + b")}

    def outputs(self, setup) -> list:
        return [
            dyn.Output(
                "mode_rate",
                "decay rate of the Fourier mode (a, b) of the tokens over the first save interval (mean over runs)",
                "1",
                ("mode",),
                "mean_se",
            ),
            dyn.Output(
                "rate_error",
                "largest |measured - closed-form rate|: over the Fourier "
                "modes (gaussian, mixed: its beta -> 0 limit), or of the within and "
                "between rates (blocks)",
                "1",
                (),
                "max",
            ),
            dyn.Output(
                "within",
                "|x - group mean| / its start: the tokens around their patch group's mean (mean over runs)",
                "1",
                ("time",),
                "mean_se",
            ),
            dyn.Output(
                "between",
                "|group means - mean| / its start: the patch groups around the tokens' mean (mean over runs)",
                "1",
                ("time",),
                "mean_se",
            ),
            dyn.Output("rate_within", "decay rate of `within` over the first save interval", "1", (), "mean_se"),
            dyn.Output("rate_between", "decay rate of `between` over the first save interval", "1", (), "mean_se"),
        ]

    def references(self, setup) -> list:
        keys = ("kernel", "g", "sigma", "block", "a", "eps", "rho")
        dims = tuple(a for a in setup.axes if a in keys)
        shape = tuple(len(setup.axes[a]) for a in dims)
        g0 = int(setup.params.get("g") or 8)
        times = np.asarray(setup.times)
        rates = np.full(shape + (g0 * g0,), np.nan)
        within = np.full(shape + (len(times),), np.nan)
        between = np.full(shape + (len(times),), np.nan)
        merge = np.full(shape, np.nan)
        for index in np.ndindex(*shape):
            p = {k: setup.params.get(k, PARAMS[k].default if k in PARAMS else None) for k in keys}
            p.update({a: setup.axes[a][i] for a, i in zip(dims, index, strict=True)})
            p = {k: (PARAMS[k].default if v is None and k in PARAMS else v) for k, v in p.items()}
            kernel, g = p["kernel"] or "gaussian", int(p["g"])
            if kernel == "blocks":
                r = merge_rate(g, int(p["block"]), float(p["a"]), float(p["eps"]))
                merge[index] = r
                within[index] = np.exp(-times)
                between[index] = np.exp(-r * times)
            elif g == g0:
                rates[index] = mode_rates(kernel, g, float(p["sigma"]), float(p["rho"]))
        return [
            dyn.Reference(
                "mode_rate_exact",
                "1 - mu_a mu_b: the closed-form rate of the mode (a, b) (mixed: at beta -> 0)",
                rates,
                dims + ("mode",),
                draw=dyn.Draw(over=("mode_rate",), color="black", label="closed form"),
            ),
            dyn.Reference(
                "within_exact",
                "e^{-t}: the within-group part (blocks)",
                within,
                dims + ("time",),
                draw=dyn.Draw(over=("within",), color="black", label="e^{-t}"),
            ),
            dyn.Reference(
                "between_exact",
                "e^{-r_merge t}: the group contrasts (blocks)",
                between,
                dims + ("time",),
                draw=dyn.Draw(over=("between",), color="black", label="e^{-r_merge t}"),
            ),
            dyn.Reference("rate_between_exact", "r_merge = G eps / (a + (G - 1) eps) (blocks)", merge, dims),
        ]
