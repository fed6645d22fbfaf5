"""Units' replicate sums made a block of units at a time (:class:`evalcore.levels.BlockedReplicates`):
the same bits as :class:`~evalcore.levels.UnitSumsAdder`'s rows, which hold them all.

A hand-worked case checks the sums; the property test checks every block against the
adder's rows bit for bit, with replicate values whose float sum depends on the order of
the additions, parts sharing units, the units added last cut into blocks that straddle
the blocks read, and blocks of 1, 2, 3 and 256 units.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.levels import BlockedReplicates, UnitSums, UnitSumsAdder, replicate_rows
from tests.unit.test_unit_sums_adder import COLUMNS, REP_COLUMNS, VALUES, part


def blocked(parts: list[UnitSums], last: list[UnitSums], keys: np.ndarray, reads: list | None = None) -> BlockedReplicates:
    """The parts keyed by their position; ``reads`` records which part was read."""
    by_key = dict(enumerate(parts))

    def read_part(key: int) -> np.ndarray:
        if reads is not None:
            reads.append(key)
        return by_key[key].replicates

    n_rep = parts[0].replicates.shape[1] if parts else last[0].replicates.shape[1]
    return BlockedReplicates(keys, n_rep, REP_COLUMNS, tuple((k, p.keys) for k, p in by_key.items()), read_part, lambda: iter(last))


def test_by_hand():
    # Units in key order: (1,) (2,) (3,) (4,). Part 0 holds 1 and 3, part 1 holds 3 and 4,
    # the last units are 2 and 3. Unit 3: 0.5 + 0.25 + 1.0 = 1.75 in its first replicate,
    # 0.0 + 4.0 + 1.0 = 5.0 in its second.
    p0 = part([(1,), (3,)], [[0, 0], [0, 0]], [[[1.0], [2.0]], [[0.5], [0.0]]])
    p1 = part([(3,), (4,)], [[0, 0], [0, 0]], [[[0.25], [4.0]], [[8.0], [0.5]]])
    homeless = part([(2,), (3,)], [[0, 0], [0, 0]], [[[3.0], [3.0]], [[1.0], [1.0]]])
    keys = np.array([[1], [2], [3], [4]])
    reads: list = []
    out = list(blocked([p0, p1], [homeless], keys, reads).blocks(2))
    assert [b.shape for b in out] == [(2, 2, 1), (2, 2, 1)]
    assert out[0][:, :, 0].tolist() == [[1.0, 2.0], [3.0, 3.0]]
    assert out[1][:, :, 0].tolist() == [[1.75, 5.0], [8.0, 0.5]]
    # Block [1, 2] needs part 0 only; block [3, 4] both.
    assert reads == [0, 0, 1]


def test_no_unit_is_one_empty_block():
    empty = UnitSums.empty(1, 3, COLUMNS, REP_COLUMNS)
    (block,) = BlockedReplicates(np.empty((0, 1), np.int64), 3, REP_COLUMNS, (), lambda key: None, lambda: []).blocks()
    assert block.shape == (0, 3, 1)
    assert len(BlockedReplicates(empty.keys, 3, REP_COLUMNS, (), lambda key: None, lambda: [])) == 0


def test_a_unit_not_among_the_units_is_refused():
    p0 = part([(5,)], [[0, 0]], [[[1.0]]])
    with pytest.raises(ValueError, match=r"unit \(5,\) of part 0 is not among the units"):
        list(blocked([p0], [], np.array([[1]])).blocks())


def test_the_last_units_out_of_order_are_refused():
    p0 = part([(1,), (2,)], [[0, 0], [0, 0]], [[[1.0]], [[1.0]]])
    late = [part([(2,)], [[0, 0]], [[[1.0]]]), part([(1,)], [[0, 0]], [[[1.0]]])]
    with pytest.raises(ValueError, match="increasing key order"):
        list(blocked([p0], late, np.array([[1], [2]])).blocks(1))


@st.composite
def parts_and_last(draw):
    n_rep = draw(st.sampled_from([1, 3]))
    universe = [(k,) for k in range(12)]
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        keys = draw(st.lists(st.sampled_from(universe), unique=True, min_size=1, max_size=6))
        parts.append(part(keys, [[0.0, 0.0] for _ in keys], [[[draw(VALUES)] for _ in range(n_rep)] for _ in keys]))
    last_keys = sorted(draw(st.lists(st.sampled_from(universe), unique=True, max_size=8)))
    cuts = sorted(draw(st.lists(st.integers(0, len(last_keys)), max_size=3)))
    last = []
    for a, b in zip([0, *cuts], [*cuts, len(last_keys)]):
        chunk = last_keys[a:b]
        if chunk:
            last.append(part(chunk, [[0.0, 0.0] for _ in chunk], [[[draw(VALUES)] for _ in range(n_rep)] for _ in chunk]))
    return n_rep, parts, last


def adders_total(n_rep: int, parts: list[UnitSums], last: list[UnitSums]) -> UnitSums:
    """What :class:`UnitSumsAdder` holds after the parts in their order, then the units added last."""
    adder = UnitSumsAdder(UnitSums.empty(1, n_rep, COLUMNS, REP_COLUMNS), np.concatenate([p.keys for p in parts + last]))
    for p in parts + last:
        adder.add(p)
    return adder.total()


@settings(max_examples=200, deadline=None)
@given(parts_and_last(), st.sampled_from([1, 2, 3, 256]))
def test_blocks_are_the_adders_rows(case, size):
    n_rep, parts, last = case
    total = adders_total(n_rep, parts, last)
    out = list(blocked(parts, last, total.keys).blocks(size))
    assert [len(b) for b in out] == [min(size, len(total.keys) - s) for s in range(0, len(total.keys), size)]
    assert np.concatenate(out).tobytes() == total.replicates.tobytes()


def test_rows_by_hand_across_blocks():
    # Four units of one replicate each: 10, 20, 30, 40. Blocks of 2 hold [10, 20] and [30, 40];
    # the rows [1, 2] straddle them, [3] is in the second, [] wants nothing.
    p0 = part([(1,), (2,), (3,), (4,)], [[0, 0]] * 4, [[[10.0]], [[20.0]], [[30.0]], [[40.0]]])
    reps = blocked([p0], [], np.array([[1], [2], [3], [4]]))
    out = list(replicate_rows(reps, [np.array([0]), np.array([], np.int64), np.array([1, 2]), np.array([3])], size=2))
    assert [o[:, 0, 0].tolist() for o in out] == [[10.0], [], [20.0, 30.0], [40.0]]


def test_rows_that_go_back_are_refused():
    p0 = part([(1,), (2,)], [[0, 0]] * 2, [[[1.0]], [[2.0]]])
    reps = blocked([p0], [], np.array([[1], [2]]))
    with pytest.raises(ValueError, match="must increase"):
        list(replicate_rows(reps, [np.array([1]), np.array([0])]))
    with pytest.raises(ValueError, match="must increase"):
        list(replicate_rows(reps, [np.array([2])]))


@settings(max_examples=100, deadline=None)
@given(parts_and_last(), st.sampled_from([1, 2, 3, 256]), st.data())
def test_rows_are_the_adders_rows(case, size, data):
    n_rep, parts, last = case
    total = adders_total(n_rep, parts, last)
    n = len(total.keys)
    rows = sorted(data.draw(st.lists(st.integers(0, n - 1), unique=True)))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=4)))
    wanted = [np.array(rows[a:b], np.int64) for a, b in zip([0, *cuts], [*cuts, len(rows)])]
    out = list(replicate_rows(blocked(parts, last, total.keys), wanted, size))
    assert len(out) == len(wanted)
    for rows_wanted, got in zip(wanted, out):
        assert got.tobytes() == total.replicates[rows_wanted].tobytes()
