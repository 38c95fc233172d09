r"""An attention architecture as parameters: mask, distance bias, heads, feed-forward term.

The layer output read by every normalization scheme (:mod:`.schemes`), for unit tokens x_i::

    u_i = (1/H) sum_h sum_{j in N(i)} A^h_ij V_h x_j + gamma W_2 tanh(W_1 x_i),
    A^h_ij = exp(beta <Q_h x_i, K_h x_j> - lambda |i - j|) / Z^h_i

with N(i) every token (mask "none") or the tokens j <= i (mask "causal"), SA (Z the sum over
N(i)) or USA (Z = n) weights, H heads (M_h = Q_h^T K_h, V_h; physics.md §1.4: H identical heads
are one head) and an optional token-wise feed-forward term (gamma = 0: none). With the defaults
(no mask, lambda = 0, one head, gamma = 0) u is the mean field of the attention flow of
:mod:`.flow`.

The flat vector (:data:`ARCH`): beta, usa, d, heads, causal, slope (lambda), m_identity,
v_identity, alpha (the nGPT step rate), ff (gamma); then the blocks M (H x d x d), V (H x d x d),
W1, W2 (d x d). Its length tells H (:func:`heads_of`), so a JAX twin sees the number of heads
as a static shape.

Scenario fields (:data:`FIELDS`): those of :mod:`.params` (Q, K, V also as a stack of H, one per
head), the mask, bias, heads and scheme, and `head_noise` and `feedforward`: per-head matrices
Q_h = Q + head_noise G / sqrt(d) (and K_h, V_h alike; G standard normal), W_1, W_2 with
N(0, 1/d) entries, drawn from streams shared by every point of a sweep (common random numbers).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..core.layout import Layout
from ..core.schema import Field
from .params import FIELDS as ATTENTION_FIELDS, _matrix, check_common, real

MASKS = ("none", "causal")
SCHEMES = ("post", "pre", "peri", "ngpt")
MAX_HEADS = 64
HEAD_SALT, FEEDFORWARD_SALT = 0xA77E, 0xFF0  # common_rng keys of the random heads and W_1, W_2

FIELDS = {
    # the attention fields, with Q, K, V also accepted as one matrix per head
    **{
        k: replace(f, kind="matrices", doc=f"{f.doc}: d x d for every head, or H x d x d")
        if k in ("Q", "K", "V")
        else f
        for k, f in ATTENTION_FIELDS.items()
    },
    "mask": Field("str", "none", "attention mask: every token, or causal (j <= i)", choices=MASKS),
    "bias_slope": Field("float", 0.0, "distance bias lambda: b_ij = -lambda |i - j|", lo=0.0, hi=100.0),
    "heads": Field("int", 1, "attention heads H (output averaged over heads)", lo=1, hi=MAX_HEADS),
    "head_noise": Field(
        "float",
        0.0,
        "per-head matrices Q_h = Q + head_noise G / sqrt(d) (K, V alike), the same at every point",
        lo=0.0,
        hi=100.0,
    ),
    "feedforward": Field(
        "float",
        0.0,
        "gamma of the feed-forward term gamma W2 tanh(W1 x_i) (0: none); W1, W2 random, the same at every point",
        lo=-100.0,
        hi=100.0,
    ),
    "normalization_layer": Field(
        "str", "post", "where the normalization sits (Karagodin, Ge, Polyanskiy, Rigollet 2025)", choices=SCHEMES
    ),
    "ngpt_alpha": Field("float", 1.0, "nGPT step rate alpha", lo=1e-6, hi=1e6),
}

ARCH = Layout(
    "attention_architecture",
    scalars=("beta", "usa", "d", "heads", "causal", "slope", "m_identity", "v_identity", "alpha", "ff"),
    blocks={"M": ("heads", "d", "d"), "V": ("heads", "d", "d"), "W1": ("d", "d"), "W2": ("d", "d")},
)


def heads_of(size: int, d: int) -> int:
    """H from the length of an :data:`ARCH` vector for token dimension d (ValueError if no
    vector has that length)."""
    return ARCH.infer(size, {"d": d})["heads"]


def _stack(name: str, a, d: int, heads: int | None) -> np.ndarray:
    """A (d, d) matrix (the same for every head), an (H, d, d) stack, or None (identity)."""
    if a is not None and np.ndim(a) == 3:
        a = np.asarray(a, dtype=np.float64)
        if a.shape[1:] != (d, d) or a.shape[0] < 1 or (heads is not None and a.shape[0] != heads):
            want = f"({heads or 'H'}, {d}, {d})"
            raise ValueError(f"{name} must have shape ({d}, {d}) or {want}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} has non-finite entries")
        return a
    return _matrix(name, a, d)[None]


def pack_architecture(
    beta: float,
    d: int,
    normalization: str = "SA",
    Q=None,
    K=None,
    V=None,
    *,
    mask: str = "none",
    bias_slope: float = 0.0,
    heads: int | None = None,
    feedforward: float = 0.0,
    W1=None,
    W2=None,
    alpha: float = 1.0,
) -> np.ndarray:
    """The :data:`ARCH` vector. Q, K, V: None (identity), one (d, d) matrix for every head, or a
    stack (H, d, d) of per-head matrices; `heads` defaults to the stacks' H (else 1). W1, W2
    default to the identity (they only matter when `feedforward` != 0). ValueError on bad
    input."""
    beta, d, key = check_common(beta, d, normalization)
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {mask!r}")
    slope = real("bias_slope", bias_slope, lo=0.0)
    alpha = real("alpha", alpha)
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    ff = real("feedforward", feedforward)
    if heads is not None and (isinstance(heads, bool) or int(heads) != heads or not 1 <= int(heads) <= MAX_HEADS):
        raise ValueError(f"heads must be an integer in [1, {MAX_HEADS}], got {heads!r}")
    stacks = [_stack(name, a, d, None if heads is None else int(heads)) for name, a in (("Q", Q), ("K", K), ("V", V))]
    H = int(heads) if heads is not None else max(s.shape[0] for s in stacks)
    for name, s in zip("QKV", stacks, strict=True):
        if s.shape[0] not in (1, H):
            raise ValueError(f"{name} has {s.shape[0]} heads, expected {H}")
    q, k, v = (np.broadcast_to(s, (H, d, d)) for s in stacks)
    M = np.einsum("hlk,hlm->hkm", q, k)  # M_h = Q_h^T K_h
    eye = np.eye(d)
    return ARCH.pack(
        beta=beta,
        usa=key == "USA",
        d=d,
        heads=H,
        causal=mask == "causal",
        slope=slope,
        m_identity=bool(np.all(M == eye)),
        v_identity=bool(np.all(v == eye)),
        alpha=alpha,
        ff=ff,
        M=M,
        V=v,
        W1=_matrix("W1", W1, d),
        W2=_matrix("W2", W2, d),
    )


def unpack_architecture(p) -> dict:
    """The fields of an :data:`ARCH` vector (for inspection): scalars as Python numbers, blocks."""
    p = np.asarray(p, dtype=np.float64)
    d = int(p[ARCH.index("d")])
    v = ARCH.unpack(p, {"d": d})
    out = {k: float(v[k]) for k in ARCH.scalars}
    if out["heads"] < 1:
        raise ValueError(f"p of length {p.shape[0]} is no architecture vector for d = {d}")
    out.update(
        d=d,
        heads=int(out["heads"]),
        normalization="USA" if out.pop("usa") else "SA",
        mask="causal" if out.pop("causal") else "none",
    )
    out.update({b: v[b].copy() for b in ARCH.blocks})
    return out


def random_heads(
    rng: np.random.Generator, heads: int, d: int, noise: float, Q=None, K=None, V=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-head (H, d, d) stacks A_h = A + noise G_h / sqrt(d), A in (Q, K, V) (identity when
    None; one matrix for every head, or a stack with one per head), G_h standard normal drawn in
    the order Q, K, V, head by head."""
    base = [_stack(name, a, d, heads) for name, a in (("Q", Q), ("K", K), ("V", V))]
    g = rng.standard_normal((heads, 3, d, d))
    stacks = [a + noise * g[:, i] / math.sqrt(d) for i, a in enumerate(base)]
    return stacks[0], stacks[1], stacks[2]


def random_feedforward(rng: np.random.Generator, d: int) -> tuple[np.ndarray, np.ndarray]:
    """W_1, W_2 with independent N(0, 1/d) entries."""
    w = rng.standard_normal((2, d, d)) / math.sqrt(d)
    return w[0], w[1]


def pack_values(values, common_rng=None) -> np.ndarray:
    """The vector of a sweep point's values (keys of :data:`FIELDS`). ``common_rng(*key)``
    gives the streams of the random heads and of the feed-forward matrices
    (:meth:`dyn.core.spec.Setup.common_rng`); it is needed only when head_noise > 0 or
    feedforward != 0."""
    d, H = values["d"], values.get("heads", 1)
    Q, K, V = (values.get(k) for k in "QKV")
    if values.get("head_noise", 0.0) > 0:
        Q, K, V = random_heads(common_rng(HEAD_SALT, H, d), H, d, values["head_noise"], Q, K, V)
    W1 = W2 = None
    if values.get("feedforward", 0.0) != 0:
        W1, W2 = random_feedforward(common_rng(FEEDFORWARD_SALT, d), d)
    return pack_architecture(
        values["beta"],
        d,
        values["normalization"],
        Q,
        K,
        V,
        mask=values.get("mask", "none"),
        bias_slope=values.get("bias_slope", 0.0),
        heads=H,
        feedforward=values.get("feedforward", 0.0),
        W1=W1,
        W2=W2,
        alpha=values.get("ngpt_alpha", 1.0),
    )
