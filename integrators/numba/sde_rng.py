r"""Per-member random streams for numba ensemble kernels (xoshiro256** + Box-Muller).

Inside threaded kernels ``np.random`` draws from per-thread states, so results would depend on
the thread schedule. Instead every ensemble member e owns a 256-bit xoshiro256** state
``streams[e]`` (four uint64), seeded from the caller's numpy Generator by :func:`member_streams`.
Member e's numbers are then a function of (seed, e) only: bit-identical whatever the number of
threads or worker processes.

- ``next_u64(s)``: the xoshiro256** output, advancing ``s`` (Blackman & Vigna 2018).
- ``uniform(s)`` in (0, 1]: the top 53 bits, plus one ulp, so ``log`` never sees 0.
- ``normal_pair(s)``: two independent N(0, 1) by the Box-Muller transform.
- ``fill_normals(s, buf)``: ``buf`` (any C-contiguous float64 1-D view) <- i.i.d. N(0, 1).

Kernels copy ``streams[e]`` into a local 4-vector, draw from it and write it back, so a later
call continues each member's stream where it stopped.
"""

import math

import numpy as np
from numba import types

from .abi import NJIT
from .arrays import copy1
from .jit import njit

STREAM = types.uint64[::1]  # one member's state (4,)
STREAMS = types.uint64[:, ::1]  # (E, 4)

_U64 = np.uint64
_TWO_PI = 2.0 * math.pi
_INV_2_53 = 1.0 / 9007199254740992.0  # 2^-53


@njit(types.uint64(types.uint64, types.uint64), inline="always", **NJIT)
def _rotl(x, k):
    return (x << k) | (x >> (_U64(64) - k))


@njit(types.uint64(STREAM), **NJIT)
def next_u64(s):
    s0, s1, s2, s3 = s[0], s[1], s[2], s[3]
    result = _rotl(s1 * _U64(5), _U64(7)) * _U64(9)
    t = s1 << _U64(17)
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = _rotl(s3, _U64(45))
    s[0], s[1], s[2], s[3] = s0, s1, s2, s3
    return result


@njit(types.float64(STREAM), **NJIT)
def uniform(s):
    return ((next_u64(s) >> _U64(11)) + _U64(1)) * _INV_2_53


@njit(types.UniTuple(types.float64, 2)(STREAM), **NJIT)
def normal_pair(s):
    r = math.sqrt(-2.0 * math.log(uniform(s)))
    a = _TWO_PI * uniform(s)
    return r * math.cos(a), r * math.sin(a)


@njit(types.void(STREAM, types.float64[::1]), **NJIT)
def fill_normals(s, buf):
    m = buf.shape[0]
    k = 0
    while k + 1 < m:
        g0, g1 = normal_pair(s)
        buf[k] = g0
        buf[k + 1] = g1
        k += 2
    if k < m:
        g0, _ = normal_pair(s)
        buf[k] = g0


def member_streams(rng: np.random.Generator, members: int) -> np.ndarray:
    """(members, 4) uint64 xoshiro256** states drawn from ``rng`` (never all zero)."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    s = rng.integers(0, np.iinfo(np.uint64).max, size=(int(members), 4), dtype=np.uint64, endpoint=True)
    s[:, 0] |= np.uint64(1)  # the all-zero state is the one fixed point of xoshiro
    return np.ascontiguousarray(s)


@njit(types.void(STREAMS, types.float64[:, ::1]), **NJIT)
def _normals_kernel(streams, out):
    for e in range(out.shape[0]):
        s = streams[e].copy()
        fill_normals(s, out[e])
        copy1(streams[e], s)


def normals(streams: np.ndarray, count: int) -> np.ndarray:
    """(E, count) standard normals, row e from stream e (advances ``streams``): for tests."""
    out = np.empty((streams.shape[0], int(count)))
    _normals_kernel(streams, out)
    return out


__all__ = ["STREAM", "STREAMS", "next_u64", "uniform", "normal_pair", "fill_normals", "member_streams", "normals"]
