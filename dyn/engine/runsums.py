"""Sums over runs in run order, the reductions' one arithmetic (:mod:`dyn.engine.reductions`).

Per element, a sum over runs is ``acc <- ((acc + v_0) + v_1) + ... + v_{r-1}`` with ``acc = 0``
before the first run: one IEEE addition per run, in run order, whatever the chunk shapes. That
is what a cumulative sum along the run axis gives (its last row), and what these kernels give
in one pass over the values, without the (runs + 1, ...) array a cumulative sum writes. A mean's
spread is summed in the same pass: with the shift s (the first run's value), the sums of v, of
u = v - s and of u * u (each product rounded, then added: no fused multiply-add).

NaN bits too: where both operands of an addition are NaN, x86 returns the first operand's, so
the cumulative sum's NaN, once the sum is NaN, is that sum's for ever after; LLVM may swap an
addition's operands (the result is the same number otherwise), so the kernels keep a NaN sum as
it is instead of adding to it. A NaN that an addition makes (inf - inf) is the machine's default
NaN either way.
"""

from __future__ import annotations

import numpy as np
from numba import types

from integrators.numba.abi import F1, F2, NJIT
from integrators.numba.jit import njit


@njit(inline="always", **NJIT)
def _plus(acc, v):
    """acc + v, but a NaN acc stays the NaN it is (see the module doc)."""
    return acc + v if acc == acc else acc


@njit(types.void(F1, F2), **NJIT)
def _add_rows(total, rows):
    # runs outside, elements inside: each element's additions in run order
    for i in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            total[j] = _plus(total[j], rows[i, j])


@njit(types.void(F1, F1, F1, F1, F2), **NJIT)
def _add_shifted_rows(total, shifted, squares, shift, rows):
    for i in range(rows.shape[0]):
        for j in range(rows.shape[1]):
            v = rows[i, j]
            u = v - shift[j]
            total[j] = _plus(total[j], v)
            shifted[j] = _plus(shifted[j], u)
            squares[j] = _plus(squares[j], u * u)


def _rows(v) -> np.ndarray:
    """The per-run values as (runs, elements), float64, C order (a view where they are)."""
    v = np.asarray(v)
    if v.ndim < 1:
        raise ValueError("per-run values need a leading run axis, got a scalar")
    rows = np.ascontiguousarray(v, dtype=np.float64)
    return rows.reshape(v.shape[0], int(np.prod(v.shape[1:], dtype=np.int64)))


def _sum(total, shape: tuple[int, ...]) -> np.ndarray:
    """The running sum to add to: zeros at the first chunk, else `total` (checked)."""
    if total is None:
        return np.zeros(shape)
    if total.shape != shape or total.dtype != np.float64 or not total.flags.c_contiguous:
        raise ValueError(f"a running sum of shape {total.shape} ({total.dtype}) cannot take values of shape {shape}")
    return total


def add_runs(total: np.ndarray | None, v) -> np.ndarray:
    """``total + v[0] + v[1] + ...`` per element, added in run order (v's leading axis);
    ``total = None`` starts from zeros. `total` is updated in place and returned."""
    rows = _rows(v)
    total = _sum(total, np.shape(v)[1:])
    _add_rows(total.reshape(-1), rows)
    return total


def add_shifted_runs(sums: tuple | None, shift: np.ndarray, v) -> tuple[np.ndarray, ...]:
    """The running sums (of v, of u = v - shift, of u * u) over v's runs, in run order, in one
    pass; ``sums = None`` starts from zeros. Updated in place and returned."""
    rows = _rows(v)
    shape = np.shape(v)[1:]
    total, shifted, squares = (None, None, None) if sums is None else sums
    total, shifted, squares = _sum(total, shape), _sum(shifted, shape), _sum(squares, shape)
    shift = np.asarray(shift, dtype=np.float64)
    if shift.shape != shape:
        raise ValueError(f"a shift of shape {shift.shape} for values of shape {shape}")
    _add_shifted_rows(
        total.reshape(-1), shifted.reshape(-1), squares.reshape(-1), np.ascontiguousarray(shift.reshape(-1)), rows
    )
    return total, shifted, squares
