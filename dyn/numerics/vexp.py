"""A vectorizable ``exp`` for non-positive arguments (numba).

numba's ``math.exp`` is a scalar libm call, and this numba/llvmlite build has no SVML, so an exp
loop does not vectorize; on the n = 1024 attention right-hand side it costs more than both GEMMs.
Here ``exp(y) = 2^k exp(r)`` with ``k = round(y / ln 2)``, ``r = y - k ln 2`` (Cody-Waite split,
``|r| <= ln2 / 2``) and a degree-13 Taylor polynomial for ``exp(r)`` (truncation < 1e-17
relative). ``2^k`` is built from its IEEE bits, ``(k + 1023) << 52``, by register bitcasts (two
intrinsics), so the whole exp is one pass with no int64 scratch array (the same bits as a
three-pass form through one), and half the memory a block of exps touches. Every step is
plain arithmetic, which LLVM turns into SIMD code: in 512-bit vectors where the CPU has them
and llvmlite takes LLVM's string attributes (:func:`wide_vectors`; LLVM prefers 256 bits on
AVX-512 CPUs), with the same bits as the 256-bit loop (each element's operations do not depend on the width).
The integer k is read off the bits of ``k + 1.5 * 2^52`` (exact for |k| < 2^51: k sits in the
low bits of the mantissa, and the shift by 52 discards the rest), not converted with
``int64(k)``: AVX2 has no packed double-to-int64 conversion, and LLVM scalarized it, four
conversions and inserts per vector of four exps.

Domain: ``y = w - shift <= EXP_MAX_ARG`` (700). The caller passes the row maximum as ``shift``, or
any value that provably bounds ``y`` by EXP_MAX_ARG (see ``_field_gemm.gemm``). Arguments below ``EXP_MIN`` are clamped
there (``exp(-708) ~ 3e-308``, negligible next to the row maximum's weight 1). NaN propagates.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.extending import intrinsic

from integrators.numba.abi import FASTMATH, FASTMATH_ORDERED, NJIT
from integrators.numba.jit import njit

EXP_MIN = -708.0
EXP_MAX_ARG = 700.0
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # ln 2 with the low bits cleared: k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
# 1/k!, k = 13 .. 2 (Horner from the top)
_C13, _C12, _C11, _C10 = 1 / 6227020800, 1 / 479001600, 1 / 39916800, 1 / 3628800
_C9, _C8, _C7, _C6, _C5 = 1 / 362880, 1 / 40320, 1 / 5040, 1 / 720, 1 / 120
_C4, _C3, _C2 = 1 / 24, 1 / 6, 1 / 2
_ROUND = 6755399441055744.0  # 1.5 * 2^52: k + _ROUND holds the integer k in its low bits


@intrinsic
def _bits_of(typingctx, value):
    """The IEEE bits of a float64 as an int64 (a register bitcast: vectorizes, unlike a view)."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))

    return types.int64(types.float64), codegen


@intrinsic
def _float_of(typingctx, bits):
    """The float64 whose IEEE bits are the int64 `bits`."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))

    return types.float64(types.int64), codegen


WIDE = ('"prefer-vector-width"="512"', '"min-legal-vector-width"="512"')


def _accepts_string_attributes() -> bool:
    """Whether llvmlite's function attributes take LLVM's string attributes through their
    public ``add`` (older llvmlite accepts only its list of keyword attributes)."""
    from llvmlite import ir

    function = ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "probe")
    try:
        for attribute in WIDE:
            function.attributes.add(attribute)
    except ValueError:
        return False
    return True


WIDE_VECTORS = _accepts_string_attributes()  # decided once per process


@intrinsic
def wide_vectors(typingctx):
    """Call first thing in a kernel: its loops may use 512-bit vectors where the CPU has them
    (LLVM's "prefer-vector-width" and "min-legal-vector-width" attributes of the function, which
    default to 256 bits on AVX-512 CPUs), where llvmlite accepts these attributes
    (:data:`WIDE_VECTORS`); elsewhere LLVM's default width. For elementwise loops only: a
    vectorized reduction would change its order with the width."""

    def codegen(context, builder, signature, args):
        if WIDE_VECTORS:
            for attribute in WIDE:
                builder.function.attributes.add(attribute)
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def add(typingctx, a, b):
    """a + b, never reassociated: a chain of these keeps its order in a kernel compiled with
    "reassoc". Its one flag "nsz" (which changes no nonzero sum) keeps numba's fast-math pass
    from adding its own: that pass flags only the float operations that have none."""

    def codegen(context, builder, signature, args):
        return builder.fadd(*args, flags=("nsz",))

    return types.float64(types.float64, types.float64), codegen


@intrinsic
def fma(typingctx, a, b, c):
    """a * b + c rounded once (llvm.fma: vectorizes, and no fast-math flag splits or reorders
    it, so a kernel compiled with "reassoc" gets exactly these roundings)."""

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return types.float64(types.float64, types.float64, types.float64), codegen


# no "reassoc" (FASTMATH_ORDERED): it would be allowed to undo the Cody-Waite split
@njit(types.void(types.float64[::1], types.float64), **NJIT, fastmath=FASTMATH_ORDERED)
def exp_inplace(w, shift):
    """w[j] <- exp(w[j] - shift) for w[j] - shift <= EXP_MAX_ARG, in one pass (no scratch),
    with 512-bit vectors where the CPU has them (elementwise: the same bits at any width)."""
    wide_vectors()
    for j in range(w.shape[0]):
        y = max(w[j] - shift, EXP_MIN)
        k = np.floor(y * _LOG2E + 0.5)
        r = (y - k * _LN2_HI) - k * _LN2_LO
        q = _C13
        q = q * r + _C12
        q = q * r + _C11
        q = q * r + _C10
        q = q * r + _C9
        q = q * r + _C8
        q = q * r + _C7
        q = q * r + _C6
        q = q * r + _C5
        q = q * r + _C4
        q = q * r + _C3
        q = q * r + _C2
        q = q * r + 1.0
        # the low bits of k + _ROUND are k's: (k + 1023) << 52 are 2^k's bits
        w[j] = (q * r + 1.0) * _float_of((_bits_of(k + _ROUND) + 1023) << 52)


@njit(types.float64(types.float64[::1]), **NJIT, fastmath=True)
def row_max(w):
    """max_j w[j]. Full fastmath lets the reduction vectorize; a NaN in w may be missed here, but it
    still propagates through exp(w - max) to the caller's result."""
    m = -np.inf
    for j in range(w.shape[0]):
        v = w[j]
        m = v if v > m else m
    return m


@njit(types.float64(types.float64[::1]), **NJIT, fastmath=FASTMATH - {"afn"})
def row_sum(w):
    """sum_j w[j] (reassociated, so it vectorizes)."""
    z = 0.0
    for j in range(w.shape[0]):
        z += w[j]
    return z
