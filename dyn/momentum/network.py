"""The Momentum ResNet and its inverse, in floating point and in exact fixed-point arithmetic.

Layer n (n = 0 .. N-1) with residual f_n(x) = f(x, theta_n)::

    v_{n+1} = gamma v_n + (1 - gamma) f_n(x_n),      x_{n+1} = x_n + v_{n+1}
    inverse:  x_n = x_{n+1} - v_{n+1},               v_n = (v_{n+1} - (1 - gamma) f_n(x_n)) / gamma

In floating point the inverse divides by gamma at every layer, so rounding errors grow like
gamma^{-N}: the inversion error is reported, not hidden (:func:`inversion_error`).

Exact mode (Maclaurin, Duvenaud & Adams 2015): x and v are fixed-point integers (``frac_bits``
fractional bits, Python ints: no overflow), gamma = num / 2^k is a ratio of integers, and the
multiplication by gamma is made a bijection by an information buffer B (one natural number per
entry)::

    multiply v by n/d:   B <- B d + (v mod d);  v <- (v div d) n;  v <- v + (B mod n);  B <- B div n

(the inverse is the same map with n and d swapped). The residual is computed in float from the
fixed-point x and quantized, so the inverse recomputes the very same integer. The buffer grows by
about log2(1/gamma) bits per entry and layer, the information that multiplying by gamma destroys;
inversion returns every integer (and B = 0) bit for bit at any depth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Bits of the denominator 2^k of gamma, and fractional bits F of the fixed-point state (Python
# ints: no overflow). k = 48 puts gamma = num/2^k within 2e-15 of the float gamma. The exact
# product v num/2^k differs from the real one by up to num units of 2^-F (the low bits dropped
# and the buffer's digit added), i.e. ~2^(k-F) per layer: F = 112 makes that 2^-64, far below
# float64 rounding of the residual, so the exact network tracks the float one.
GAMMA_BITS = 48
FRAC_BITS = 112

Residual = Callable[[int, np.ndarray], np.ndarray]  # (layer n, x) -> f_n(x), same shape as x


def forward(x0, v0, gamma: float, residual: Residual, depth: int, *, save: bool = False):
    """Run ``depth`` layers on float arrays of any shape (the residual acts on the last axis).
    Returns (x_N, v_N), or with ``save`` the stacked states (N+1, ...) of x and of v."""
    x, v = np.array(x0, dtype=np.float64), np.array(v0, dtype=np.float64)
    xs, vs = [x.copy()], [v.copy()]
    for n in range(int(depth)):
        v = gamma * v + (1.0 - gamma) * residual(n, x)
        x = x + v
        if save:
            xs.append(x)
            vs.append(v)
    return (np.stack(xs), np.stack(vs)) if save else (x, v)


def inverse(x, v, gamma: float, residual: Residual, depth: int):
    """Undo ``depth`` layers in float: (x_N, v_N) -> (x_0, v_0). Needs gamma != 0."""
    if gamma == 0.0:
        raise ValueError("gamma = 0 is not invertible (v_n is forgotten)")
    x, v = np.array(x, dtype=np.float64), np.array(v, dtype=np.float64)
    for n in reversed(range(int(depth))):
        x = x - v
        v = (v - (1.0 - gamma) * residual(n, x)) / gamma
    return x, v


def inversion_error(x0, v0, gamma: float, residual: Residual, depth: int) -> float:
    """max |(x_0, v_0) - inverse(forward(x_0, v_0))| in float64."""
    x, v = forward(x0, v0, gamma, residual, depth)
    xr, vr = inverse(x, v, gamma, residual, depth)
    return float(max(np.max(np.abs(xr - x0)), np.max(np.abs(vr - v0))))


# --- exact fixed-point mode -------------------------------------------------------------------
@dataclass(frozen=True)
class FixedPoint:
    """Fixed-point format: reals r <-> integers round(r 2^frac_bits); gamma <-> num / 2^gamma_bits."""

    frac_bits: int = FRAC_BITS
    gamma_bits: int = GAMMA_BITS

    def gamma_ratio(self, gamma: float) -> tuple[int, int]:
        """(num, den) with den = 2^gamma_bits and num/den the nearest such ratio to gamma."""
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"exact mode needs 0 < gamma <= 1, got {gamma}")
        den = 1 << self.gamma_bits
        num = max(1, round(gamma * den))
        return num, den

    def to_fixed(self, a) -> np.ndarray:
        """Float array -> object array of Python ints (nearest fixed-point value)."""
        a = np.asarray(a, dtype=np.float64)
        if not np.all(np.isfinite(a)):
            raise ValueError("cannot quantize non-finite values")
        scaled = np.rint(np.ldexp(a, self.frac_bits))
        out = np.empty(a.shape, dtype=object)
        out.flat[:] = [int(s) for s in scaled.flat]
        return out

    def to_float(self, q: np.ndarray) -> np.ndarray:
        """Object array of ints -> float64 (each int rounded once, then scaled exactly by 2^-F)."""
        return np.ldexp(np.asarray(q, dtype=object).astype(np.float64), -self.frac_bits)


@dataclass
class ExactState:
    """Integer state of the exact network: x, v fixed point; ``buffer`` the lost bits of v."""

    x: np.ndarray
    v: np.ndarray
    buffer: np.ndarray

    def buffer_bits(self) -> int:
        """Total size of the information buffer in bits."""
        return int(sum(int(b).bit_length() for b in self.buffer.flat))


def _mul_ratio(v: np.ndarray, buffer: np.ndarray, n: int, d: int) -> None:
    """v <- v n/d exactly invertibly, the bits of (v mod d) kept in ``buffer`` (in place)."""
    buffer *= d
    buffer += v % d
    v //= d
    v *= n
    v += buffer % n
    buffer //= n


def _residual_fixed(fmt: FixedPoint, gamma_q: float, residual: Residual, n: int, x: np.ndarray) -> np.ndarray:
    """The quantized (1 - gamma) f_n(x), a deterministic function of the integer x."""
    return fmt.to_fixed((1.0 - gamma_q) * residual(n, fmt.to_float(x)))


def exact_forward(x0, v0, gamma: float, residual: Residual, depth: int, fmt: FixedPoint = FixedPoint()) -> ExactState:
    """Run ``depth`` exact layers from float x0, v0 (quantized first). The network computed is
    the one with gamma replaced by num/2^k (see :meth:`FixedPoint.gamma_ratio`)."""
    state = ExactState(fmt.to_fixed(x0), fmt.to_fixed(v0), None)
    state.buffer = np.zeros(state.v.shape, dtype=object)
    state.buffer.flat[:] = [0] * state.v.size
    return exact_layers(state, gamma, residual, range(int(depth)), fmt)


def exact_layers(
    state: ExactState, gamma: float, residual: Residual, layers, fmt: FixedPoint = FixedPoint()
) -> ExactState:
    """Apply the exact layers n in ``layers`` (in order) to a copy of ``state``."""
    num, den = fmt.gamma_ratio(gamma)
    gamma_q = num / den
    x, v, buf = state.x.copy(), state.v.copy(), state.buffer.copy()
    for n in layers:
        r = _residual_fixed(fmt, gamma_q, residual, n, x)
        _mul_ratio(v, buf, num, den)
        v += r
        x += v
    return ExactState(x, v, buf)


def exact_inverse(
    state: ExactState, gamma: float, residual: Residual, depth: int, fmt: FixedPoint = FixedPoint()
) -> ExactState:
    """Undo ``depth`` exact layers: returns the input integers (and the buffer it started with)."""
    num, den = fmt.gamma_ratio(gamma)
    gamma_q = num / den
    x, v, buf = state.x.copy(), state.v.copy(), state.buffer.copy()
    for n in reversed(range(int(depth))):
        x -= v
        v -= _residual_fixed(fmt, gamma_q, residual, n, x)
        _mul_ratio(v, buf, den, num)
    return ExactState(x, v, buf)


def quantized_gamma(gamma: float, fmt: FixedPoint = FixedPoint()) -> float:
    """The gamma the exact network actually uses: num / 2^gamma_bits."""
    num, den = fmt.gamma_ratio(gamma)
    return num / den
