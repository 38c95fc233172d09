"""Sums over runs (dyn.engine.runsums) are the last row of the cumulative sum along the run axis,
bit for bit (NaN payloads and signs, inf, -0.0 included), wherever the chunks are cut."""

import numpy as np
import pytest

from dyn.core.system import Output
from dyn.engine.reductions import Mean, Proportion, Reductions, Rms
from dyn.engine.runsums import add_runs, add_shifted_runs


def cumulative(acc, v):
    """The reference: a cumulative sum along the runs, from acc (zeros at first), its last row:
    ((acc + v_0) + v_1) + ... in run order (what the reductions computed before the kernels)."""
    v = np.asarray(v, dtype=np.float64)
    start = np.zeros(v.shape[1:]) if acc is None else acc
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, overflow: as the sums do
        return np.cumsum(np.concatenate([start[None], v]), axis=0)[-1]


def bits(x) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64).view(np.uint64)


NAN_PAYLOAD = np.uint64(0x7FF8000000000123).view(np.float64)


def awkward(rng, shape) -> np.ndarray:
    """Values across 10 decades, with NaN of both signs and another payload, +-inf, values that
    overflow when squared or summed, and -0.0."""
    v = rng.standard_normal(shape) * 10.0 ** rng.integers(-5, 5, size=shape)
    for value, share in (
        (np.nan, 0.02),
        (-np.nan, 0.02),
        (NAN_PAYLOAD, 0.01),
        (np.inf, 0.02),
        (-np.inf, 0.02),
        (1e308, 0.02),
        (-1e308, 0.01),
        (-0.0, 0.05),
    ):
        v[rng.random(shape) < share] = value
    return v


def cuts(rng, runs: int) -> list[int]:
    return sorted(set(rng.integers(0, runs + 1, size=int(rng.integers(0, 4))).tolist()) | {0, runs})


@pytest.mark.parametrize("shape", [(1,), (1, 7), (37,), (64, 33), (20, 3, 4)])
def test_sums_are_the_cumulative_sums_last_row_bit_for_bit_wherever_chunks_are_cut(shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(25):
        v = awkward(rng, shape)
        shift = v[0].copy()
        where = cuts(rng, shape[0])
        want = [None, None, None]
        total, sums = None, None
        for start, stop in zip(where[:-1], where[1:], strict=True):
            part = v[start:stop]
            with np.errstate(invalid="ignore", over="ignore"):
                u = part - shift
                want = [cumulative(want[0], part), cumulative(want[1], u), cumulative(want[2], u * u)]
            total = add_runs(total, part)
            sums = add_shifted_runs(sums, shift, part)
        for got, expected in zip((total, *sums), (want[0], *want), strict=True):
            assert got.shape == shape[1:]
            np.testing.assert_array_equal(bits(got), bits(expected))


def test_a_nan_sum_keeps_its_own_nan_as_the_cumulative_sum_does():
    # inf + -inf makes the machine's default NaN; a later NaN of other bits must not replace it
    v = np.array([[np.inf], [-np.inf], [np.nan], [-np.nan], [NAN_PAYLOAD], [1.0]])
    for first in range(1, len(v) + 1):
        for order in (v, v[::-1]):
            want = cumulative(None, order[:first])
            np.testing.assert_array_equal(bits(add_runs(None, order[:first])), bits(want))


def test_squares_are_rounded_before_they_are_added():
    # u = 1 + 2^-30: u^2 = 1 + 2^-29 + 2^-60 rounds to 1 + 2^-29. Added to 2^-53 (half an ulp of
    # 1), the rounded square ties and stays at 1 + 2^-29 (even); a fused multiply-add would see
    # the 2^-60 and round up to 1 + 2^-29 + 2^-52.
    v = np.array([[2.0**-27], [2.0**-27], [1.0 + 2.0**-30]])  # squares: 2^-54 twice, then u^2
    _, _, squares = add_shifted_runs(None, np.zeros(1), v)
    np.testing.assert_array_equal(bits(squares), bits(cumulative(None, v * v)))
    assert squares[0] == 1.0 + 2.0**-29


def test_the_reductions_keep_their_numbers_with_the_kernels():
    """Mean, Rms and Proportion as computed from the cumulative sums, bit for bit: integer and
    boolean values are summed as float64."""
    rng = np.random.default_rng(7)
    runs = 29
    outs = [
        Output("m", "m", dims=("time",)),
        Output("k", "k", dims=("time",)),
        Output("r", "r", reduce="rms"),
        Output("p_hit", "fraction of runs hitting", "1", reduce="proportion"),
    ]
    values = {
        "m": rng.standard_normal((runs, 6)) + 3.0,
        "k": rng.integers(0, 9, (runs, 6)),
        "r": rng.standard_normal(runs),
        "p_hit": rng.random(runs) < 0.4,
    }
    reduction = Reductions(outs, runs)
    for part in np.split(np.arange(runs), [4, 5, 17]):
        reduction.add({name: v[part] for name, v in values.items()})
    got = reduction.finish()
    for name in ("m", "k"):
        v = values[name].astype(np.float64)
        u = v - v[0]
        shifted, squares = cumulative(None, u), cumulative(None, u * u)
        centre = shifted / runs
        spread = np.maximum(squares / runs - centre * centre, 0.0)
        np.testing.assert_array_equal(bits(got[name]), bits(cumulative(None, v) / runs))
        np.testing.assert_array_equal(bits(got[f"{name}_se"]), bits(np.sqrt(spread * runs / (runs - 1) / runs)))
    r = values["r"]
    np.testing.assert_array_equal(bits(got["r"]), bits(np.sqrt(cumulative(None, r * r) / runs)))
    hits = cumulative(None, values["p_hit"])
    assert got["n_hit"] == hits == values["p_hit"].sum() and got["p_hit"] == hits / runs
    assert {type(p) for p in reduction.parts} == {Mean, Rms, Proportion}


def test_sums_refuse_values_of_another_shape():
    total = add_runs(None, np.ones((3, 4)))
    with pytest.raises(ValueError, match="shape"):
        add_runs(total, np.ones((3, 5)))
    with pytest.raises(ValueError, match="shift"):
        add_shifted_runs(None, np.zeros(3), np.ones((2, 4)))
    with pytest.raises(ValueError, match="run axis"):
        add_runs(None, np.float64(1.0))
