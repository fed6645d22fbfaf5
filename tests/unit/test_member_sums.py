"""The replicate group sums kernel that takes four replicates and four fields at a time
(:func:`evalcore._sum_kernels._weighted_member_sums`): the bits of the kernel that adds one
field at a time and skips a weight of 0 (:func:`evalcore._sum_kernels._weighted_group_sums`).

Values span sixteen orders of magnitude, so a sum made in another order differs in its last
bits; replicate and field counts that are not multiples of four use the tails; a NaN or
an infinity sends :func:`evalcore.bootstrap.replicate_group_sums` to the skipping kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore._sum_kernels import _group_members, _weighted_group_sums, _weighted_member_sums
from evalcore.bootstrap import WeightBlocks, replicate_group_sums


def _one_at_a_time(weights: np.ndarray, values: np.ndarray, flat_groups: np.ndarray, n_groups: int) -> np.ndarray:
    """Python loops: every field in position order into the overall group and its groups,
    a weight of 0 skipped."""
    out = np.zeros((n_groups, weights.shape[0], values.shape[1]))
    for b in range(weights.shape[0]):
        for i in range(values.shape[0]):
            w = weights[b, i]
            if w == 0.0:
                continue
            for k in [0, *[int(k) for k in flat_groups[i] if k >= 0]]:
                for j in range(values.shape[1]):
                    out[k, b, j] = out[k, b, j] + w * values[i, j]
    return out


@st.composite
def cases(draw):
    n = draw(st.integers(0, 41))
    n_rep = draw(st.integers(1, 9))
    n_cols = draw(st.integers(1, 11))
    n_groupings = draw(st.integers(0, 3))
    n_groups = draw(st.integers(1, 7))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = rng.standard_normal((n, n_cols)) * 10.0 ** rng.integers(-8, 9, size=(n, n_cols))
    values[rng.random((n, n_cols)) < 0.2] = 0.0
    weights = rng.poisson(1.0, size=(n_rep, n)).astype(np.float64)
    flat_groups = rng.integers(-1, n_groups, size=(n, n_groupings))
    return weights, values, flat_groups, n_groups


def _rows_by_replicates(weights: np.ndarray) -> np.ndarray:
    """The weights as :meth:`evalcore.bootstrap.RowDraws.draw_counts` keeps them: bytes, each
    row's replicates contiguous, seen as replicates x rows."""
    return np.ascontiguousarray(weights.T.astype(np.uint8)).T


@settings(max_examples=200, deadline=None)
@given(cases(), st.integers(1, 9))
def test_member_kernel_has_the_bits_of_the_one_field_kernel(case, member_block):
    weights, values, flat_groups, n_groups = case
    want = np.zeros((n_groups, weights.shape[0], values.shape[1]))
    _weighted_group_sums(weights, values, flat_groups, want)
    members, bounds = _group_members(flat_groups, n_groups)
    for w, block in ((weights, max(1, len(values))), (weights, member_block), (_rows_by_replicates(weights), member_block)):
        got = np.zeros_like(want)
        _weighted_member_sums(w, values, members, bounds, got, block)
        assert got.tobytes() == want.tobytes()
    if values.size <= 200:
        assert want.tobytes() == _one_at_a_time(weights, values, flat_groups, n_groups).tobytes()


@settings(max_examples=60, deadline=None)
@given(cases(), st.integers(1, 12))
def test_replicate_group_sums_from_blocks_with_and_without_a_nan(case, rows_per_block):
    weights, values, flat_groups, n_groups = case
    want = _one_at_a_time(weights, values, flat_groups, n_groups)
    assert replicate_group_sums(weights, values, flat_groups, n_groups).groups.tobytes() == want.tobytes()
    assert replicate_group_sums(_rows_by_replicates(weights), values, flat_groups, n_groups).groups.tobytes() == want.tobytes()
    if len(values):
        values = values.copy()
        values[len(values) // 2, 0] = np.nan
        values[-1, -1] = np.inf
        want = _one_at_a_time(weights, values, flat_groups, n_groups)
        got = replicate_group_sums(weights, values, flat_groups, n_groups).groups
        assert got.tobytes() == want.tobytes()
    ones = WeightBlocks.ones(weights.shape[0], len(values), chunk_bytes=8 * weights.shape[0] * rows_per_block)
    got = replicate_group_sums(ones, values, flat_groups, n_groups).groups
    assert got.tobytes() == _one_at_a_time(np.ones_like(weights), values, flat_groups, n_groups).tobytes()


@settings(max_examples=100, deadline=None)
@given(cases())
def test_unit_sums_in_either_layout_are_the_rows_added_in_order(case):
    """:func:`evalcore.bootstrap.replicate_unit_sums` (each row into its unit's cell, -1 in
    none) from the float64 matrix and from byte counts kept rows by replicates: the bits of
    the Python loop."""
    from evalcore.bootstrap import replicate_unit_sums

    weights, values, flat_groups, n_groups = case
    units = flat_groups[:, 0] if flat_groups.shape[1] else np.full(len(values), -1)
    want = np.zeros((n_groups, weights.shape[0], values.shape[1]))
    for b in range(weights.shape[0]):
        for i in range(len(values)):
            if units[i] >= 0:
                for j in range(values.shape[1]):
                    want[units[i], b, j] = want[units[i], b, j] + weights[b, i] * values[i, j]
    for w in (weights, _rows_by_replicates(weights)):
        assert replicate_unit_sums(w, values, units, n_groups).tobytes() == want.tobytes()


def test_group_members_by_hand():
    # Fields 0..4; grouping A puts them in groups 1, 2, 1, -, 2; grouping B in 3, 3, -, 3, 4.
    flat_groups = np.array([[1, 3], [2, 3], [1, -1], [-1, 3], [2, 4]])
    members, bounds = _group_members(flat_groups, 5)
    assert bounds.tolist() == [0, 5, 7, 9, 12, 13]
    assert members.tolist() == [0, 1, 2, 3, 4, 0, 2, 1, 4, 0, 1, 3, 4]


def test_member_sums_by_hand():
    # Five fields (the last after a block of four), five replicates (the last alone), one
    # grouping: fields 0, 2, 4 in group 1, fields 1, 3 in none. Near 1e16 the doubles are 2
    # apart and a tie rounds to an even significand (1e16 + 4k).
    values = np.array([[1e16], [5.0], [1.0], [7.0], [-1e16]])
    weights = np.array([
        [1.0, 1.0, 0.0, 1.0, 1.0],
        [1.0, 0.0, 1.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [0.0, 2.0, 1.0, 0.0, 0.0],
        [2.0, 0.0, 0.0, 0.0, 0.0],
    ])
    flat_groups = np.array([[1], [-1], [1], [-1], [1]])
    got = replicate_group_sums(weights, values, flat_groups, 2).groups[:, :, 0]
    # Replicate 0: 1e16 + 5 -> 1e16 + 4, + 7 -> 1e16 + 12 (from 11), - 1e16 = 12; group 1:
    # 1e16 - 1e16 = 0. Replicate 1: 1e16 + 1 -> 1e16, - 1e16 = 0 in both groups (1e16 - 1e16
    # + 1, another order, is 1). Replicate 2 draws nothing; replicate 3: 2 x 5 + 1 = 11 and
    # group 1 gets field 2's 1; replicate 4 draws field 0 twice.
    assert got[0].tolist() == [12.0, 0.0, 0.0, 11.0, 2e16]
    assert got[1].tolist() == [0.0, 0.0, 0.0, 1.0, 2e16]


def test_a_group_out_of_range_is_refused():
    with pytest.raises(ValueError, match="flat groups must be -1 .. 1"):
        replicate_group_sums(np.ones((1, 2)), np.ones((2, 1)), np.array([[1], [2]]), 2)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_score_risk_groups_are_the_member_lists(n, n_groups, seed):
    """:func:`evalcore.metrics.score_ranges.group_members` (every prediction, then each stratum's,
    -1 in none) through :func:`evalcore.bootstrap.group_members`: the lists written out."""
    from evalcore.metrics.score_ranges import group_members as risk_groups
    from evalcore.metrics.score_ranges import step_ends

    rng = np.random.default_rng(seed)
    group = rng.integers(-1, n_groups - 1, size=n) if n_groups > 1 else np.full(n, -1)
    score = np.sort(rng.choice([0.1, 0.5, 0.9], size=n))[::-1].copy()
    parts = [np.arange(n)] + [np.flatnonzero(group == k) for k in range(n_groups - 1)]
    members, starts, last = risk_groups(group, score, n_groups)
    assert members.tolist() == np.concatenate(parts).tolist()
    assert starts.tolist() == np.concatenate([[0], np.cumsum([len(p) for p in parts])]).tolist()
    want_last = np.concatenate([step_ends(score[p]) for p in parts]) if n else np.empty(0, bool)
    assert last.tolist() == want_last.tolist()
