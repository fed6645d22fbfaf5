"""Replicate sums from weights made a block of rows at a time (:class:`evalcore.bootstrap.WeightBlocks`):
the same bits as from the whole replicates-by-rows matrix.

The homeless task of a country held 1000 replicates x every homeless prediction of the
run as one matrix (2.4 GB at 10M fields). Hand-worked cases check the sums, with values
whose float sum depends on the order of the additions; the property tests compare every
block size against the whole matrix bit for bit, through the kernel's sums and through
the unit sums of tiles the homeless task writes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.bootstrap import WeightBlocks, replicate_group_sums
from evalcore.levels import unit_sums


def test_ones_by_hand_keeps_the_order_of_the_rows():
    # In position order: 1e16 - 1e16 is 0, plus 1 is 1. Last row first, 1 - 1e16 rounds to
    # -1e16 (the spacing there is 2) and the sum is 0. Blocks of one row, then of all rows.
    values = np.array([[1e16], [-1e16], [1.0]])
    groups = np.zeros((3, 0), np.int64)
    for chunk_bytes in (8 * 2, 8 * 2 * 3):
        sums = replicate_group_sums(WeightBlocks.ones(2, 3, chunk_bytes), values, groups, 1).groups
        assert sums.shape == (1, 2, 1)
        assert sums[0, :, 0].tolist() == [1.0, 1.0]


def test_of_units_by_hand():
    # Two replicates, two units drawn [[1, 2], [0, 1]]: row 0 is in unit 0, row 1 in no
    # unit (weight 0), row 2 in unit 1. Replicate 0: 1 * 1.0 + 2 * 0.25 = 1.5; replicate 1:
    # 0 * 1.0 + 1 * 0.25 = 0.25. Group 1 holds rows 0 and 1, group 2 row 2.
    counts = np.array([[1.0, 2.0], [0.0, 1.0]])
    weights = WeightBlocks.of_units(counts, np.array([0, -1, 1]), chunk_bytes=8 * 2)
    assert [w.tolist() for _, _, w in weights.blocks()] == [[[1.0], [0.0]], [[0.0], [0.0]], [[2.0], [1.0]]]
    values = np.array([[1.0], [5.0], [0.25]])
    sums = replicate_group_sums(weights, values, np.array([[1], [1], [2]]), 3).groups
    assert sums[0, :, 0].tolist() == [1.5, 0.25]
    assert sums[1, :, 0].tolist() == [1.0, 0.0]
    assert sums[2, :, 0].tolist() == [0.5, 0.25]


def test_blocks_cover_the_rows_once_in_order():
    weights = WeightBlocks.ones(4, 10, chunk_bytes=8 * 4 * 3)  # three rows a block
    assert [(a, b) for a, b, _ in weights.blocks()] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert list(WeightBlocks.ones(4, 0).blocks()) == []


def test_rows_of_weights_and_values_must_agree():
    with pytest.raises(ValueError, match="3 rows of weights for 2 rows of values"):
        replicate_group_sums(WeightBlocks.ones(2, 3), np.ones((2, 1)), np.zeros((2, 0), np.int64), 1)


@st.composite
def weighted_rows(draw):
    n = draw(st.integers(0, 40))
    n_rep = draw(st.integers(1, 5))
    n_units = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # Magnitudes from 1e-8 to 1e8: the float sums depend on the order of the additions.
    values = rng.standard_normal((n, 3)) * 10.0 ** rng.integers(-8, 9, size=(n, 3))
    counts = rng.integers(0, 4, size=(n_rep, n_units)).astype(np.float64)
    units = rng.integers(-1, n_units, size=n)
    groups = rng.integers(-1, 4, size=(n, 2))
    rows_per_block = draw(st.integers(1, max(n, 1) + 2))
    return values, counts, units, groups, rows_per_block


def matrix_of(counts: np.ndarray, units: np.ndarray) -> np.ndarray:
    """The whole replicates-by-rows matrix, written out directly."""
    out = np.zeros((counts.shape[0], len(units)))
    for i, u in enumerate(units):
        if u >= 0:
            out[:, i] = counts[:, u]
    return out


@settings(max_examples=150, deadline=None)
@given(weighted_rows())
def test_group_sums_from_blocks_equal_the_matrix_bit_for_bit(case):
    values, counts, units, groups, rows_per_block = case
    n_rep = counts.shape[0]
    blocks = WeightBlocks.of_units(counts, units, chunk_bytes=8 * n_rep * rows_per_block)
    whole = replicate_group_sums(matrix_of(counts, units), values, groups, 5).groups
    assert replicate_group_sums(blocks, values, groups, 5).groups.tobytes() == whole.tobytes()
    ones = WeightBlocks.ones(n_rep, len(values), chunk_bytes=8 * n_rep * rows_per_block)
    assert (replicate_group_sums(ones, values, groups, 5).groups.tobytes()
            == replicate_group_sums(np.ones((n_rep, len(values))), values, groups, 5).groups.tobytes())


@settings(max_examples=60, deadline=None)
@given(weighted_rows())
def test_unit_sums_from_blocks_equal_the_matrix_bit_for_bit(case):
    values, counts, units, groups, rows_per_block = case
    keys = np.stack([np.full(len(values), 32631), groups[:, 0], groups[:, 1]], axis=1).astype(np.int64)
    columns, rep_columns = ("a", "b", "c"), ("a", "c")
    blocks = WeightBlocks.of_units(counts, units, chunk_bytes=8 * counts.shape[0] * rows_per_block)
    got = unit_sums(keys, values, blocks, columns, rep_columns)
    want = unit_sums(keys, values, matrix_of(counts, units), columns, rep_columns)
    assert got.keys.tobytes() == want.keys.tobytes()
    assert got.replicates.tobytes() == want.replicates.tobytes()
    assert got.digits.tobytes() == want.digits.tobytes()


@settings(max_examples=150, deadline=None)
@given(weighted_rows(), st.booleans())
def test_unit_sums_kernel_equals_the_group_sums_of_the_units_bit_for_bit(case, with_nan):
    """:func:`replicate_unit_sums` (no overall group, a weight of 0 not skipped) has the bits of
    :func:`replicate_group_sums` with the units as groups: rows of no unit, values whose float
    sums depend on the order, and a NaN or an infinity (in rows some replicates do not draw),
    from the whole matrix and from blocks."""
    from evalcore.bootstrap import replicate_unit_sums

    values, counts, units, groups, rows_per_block = case
    n_rep = counts.shape[0]
    rng = np.random.default_rng(len(values))
    if with_nan and len(values):
        values[rng.integers(0, len(values)), 0] = np.nan
        values[rng.integers(0, len(values)), 2] = -np.inf
    weights = matrix_of(counts, units)
    cells = groups[:, 0]  # 0..3 or -1 (no unit)
    expected = replicate_group_sums(weights, values, (cells + 1)[:, None], 5).groups[1:]
    assert replicate_unit_sums(weights, values, cells, 4).tobytes() == expected.tobytes()
    blocks = WeightBlocks.of_units(counts, units, chunk_bytes=8 * n_rep * rows_per_block)
    assert replicate_unit_sums(blocks, values, cells, 4).tobytes() == expected.tobytes()


def test_unit_sums_kernel_by_hand():
    """Two units and a row of none; replicate 1 draws the first row twice, the third not at all."""
    from evalcore.bootstrap import replicate_unit_sums

    values = np.array([[1.0, 10.0], [2.0, 20.0], [4.0, 40.0], [8.0, 80.0]])
    weights = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 0.0, 3.0]])
    got = replicate_unit_sums(weights, values, np.array([0, 1, 0, -1]), 2)
    assert got.tolist() == [[[5.0, 50.0], [2.0, 20.0]], [[2.0, 20.0], [2.0, 20.0]]]
