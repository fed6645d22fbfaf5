"""The per-unit sums added part by part (:class:`evalcore.levels.UnitSumsAdder`): the same
bits as :meth:`UnitSums.concat` of every part, while only the total is held.

The hand-worked case checks the sums themselves; the property test checks the adder
against ``concat`` bit for bit on parts that share units, with replicate values chosen so
that the order of their additions changes the float result.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore import levels
from evalcore.errors import IncompatibleStatsError
from evalcore.exact import digits
from evalcore.levels import UnitSums, UnitSumsAdder

COLUMNS = ("tp", "n_ref")
REP_COLUMNS = ("tp",)


def part(keys: list[tuple[int, ...]], values: list[list[float]], reps: list[list[float]] | None) -> UnitSums:
    """One partition's unit sums: ``keys`` unique, a row of ``values`` and of replicates per key."""
    order = sorted(range(len(keys)), key=lambda i: keys[i])
    width = len(keys[0]) if keys else 3
    k = np.array([keys[i] for i in order], dtype=np.int64).reshape(len(keys), width)
    d = digits(np.array([values[i] for i in order], dtype=float).reshape(len(keys), len(COLUMNS)))
    r = None if reps is None else np.array([reps[i] for i in order], dtype=float).reshape(len(keys), -1, len(REP_COLUMNS))
    return UnitSums(k, d, r, COLUMNS, REP_COLUMNS)


def same_bits(a: UnitSums, b: UnitSums) -> None:
    assert a.keys.tolist() == b.keys.tolist()
    assert a.digits.tobytes() == b.digits.tobytes()
    assert (a.replicates is None) == (b.replicates is None)
    if a.replicates is not None:
        assert a.replicates.shape == b.replicates.shape
        assert a.replicates.tobytes() == b.replicates.tobytes()
    assert (a.columns, a.replicate_columns) == (b.columns, b.replicate_columns)


def test_two_partitions_sharing_a_tile_by_hand():
    # Tile (32633, 5, -1) is in both partitions: tp 2 + 3 = 5, n_ref 4 + 1 = 5; its replicate
    # sums are (1.5 + 0.25, 0.5 + 0.0) = (1.75, 0.5). The other tiles are one partition's.
    first = part([(32633, 5, -1), (32633, 4, 0)], [[2.0, 4.0], [1.0, 1.0]], [[[1.5], [0.5]], [[1.0], [1.0]]])
    second = part([(32633, 5, -1), (32633, 6, -1)], [[3.0, 1.0], [0.0, 2.0]], [[[0.25], [0.0]], [[0.0], [2.0]]])
    adder = UnitSumsAdder(UnitSums.empty(3, 2, COLUMNS, REP_COLUMNS), np.concatenate([first.keys, second.keys]))
    adder.add(first)
    adder.add(second)
    total = adder.total()
    # increasing key order: (4, 0) < (5, -1) < (6, -1)
    assert total.keys.tolist() == [[32633, 4, 0], [32633, 5, -1], [32633, 6, -1]]
    assert total.values.tolist() == [[1.0, 1.0], [5.0, 5.0], [0.0, 2.0]]
    assert total.replicates[:, :, 0].tolist() == [[1.0, 1.0], [1.75, 0.5], [0.0, 2.0]]


def test_negative_keys_sort_as_numbers():
    parts = [part([(32633, 1, 3)], [[1.0, 1.0]], None), part([(32633, -2, 7), (32633, 1, -3)], [[1.0, 1.0], [2.0, 2.0]], None)]
    adder = UnitSumsAdder(UnitSums.empty(3, None, COLUMNS, REP_COLUMNS), np.concatenate([p.keys for p in parts]))
    for p in parts:
        adder.add(p)
    assert adder.total().keys.tolist() == [[32633, -2, 7], [32633, 1, -3], [32633, 1, 3]]


def test_units_declared_ahead():
    # Declared (32633, 9, 9) is never added: left out of the total, as concat would not have it.
    declared = np.array([[32633, 5, -1], [32633, 9, 9], [32633, 4, 0], [32633, 5, -1]])
    adder = UnitSumsAdder(UnitSums.empty(3, 1, COLUMNS, REP_COLUMNS), declared)
    adder.add(part([(32633, 5, -1), (32633, 4, 0)], [[2.0, 4.0], [1.0, 1.0]], [[[1.5]], [[1.0]]]))
    adder.add(part([(32633, 5, -1)], [[3.0, 1.0]], [[[0.25]]]))
    total = adder.total()
    assert total.keys.tolist() == [[32633, 4, 0], [32633, 5, -1]]
    assert total.values.tolist() == [[1.0, 1.0], [5.0, 5.0]]
    assert total.replicates[:, 0, 0].tolist() == [1.0, 1.75]
    with pytest.raises(ValueError, match=r"unit \(32633, 6, -1\) is not among the units declared"):
        adder.add(part([(32633, 6, -1)], [[0.0, 2.0]], [[[0.0]]]))


def test_nothing_added_is_an_empty_total():
    total = UnitSumsAdder(UnitSums.empty(1, 4, COLUMNS, REP_COLUMNS), np.empty((0, 1), np.int64)).total()
    same_bits(total, UnitSums.concat([UnitSums.empty(1, 4, COLUMNS, REP_COLUMNS)]))


def test_parts_that_cannot_merge_are_refused():
    adder = UnitSumsAdder(UnitSums.empty(3, 2, COLUMNS, REP_COLUMNS), np.empty((0, 3), np.int64))
    with pytest.raises(ValueError, match="different kinds"):
        adder.add(UnitSums.empty(1, 2, COLUMNS, REP_COLUMNS))
    with pytest.raises(ValueError, match="with and without"):
        adder.add(UnitSums.empty(3, None, COLUMNS, REP_COLUMNS))
    with pytest.raises(IncompatibleStatsError, match="different columns"):
        adder.add(UnitSums.empty(3, 2, ("tp",), REP_COLUMNS))


# Values spread over many magnitudes, so that a replicate sum's bits depend on the order of its additions.
VALUES = st.sampled_from([0.1, 0.2, 0.3, 1e-3, 7.0, 1e6, -0.0, 0.0, 2.5e-9, 123456.789, -4.0])


@st.composite
def parts_of_units(draw):
    width = draw(st.sampled_from([1, 3]))
    n_rep = draw(st.sampled_from([None, 1, 3]))
    n_parts = draw(st.integers(0, 7))
    universe = [(k,) if width == 1 else (32633, k % 3 - 1, k // 3 - 2) for k in range(9)]
    out = []
    for _ in range(n_parts):
        keys = draw(st.lists(st.sampled_from(universe), unique=True, max_size=6))
        values = [[draw(VALUES), draw(VALUES)] for _ in keys]
        reps = None if n_rep is None else [[[draw(VALUES)] for _ in range(n_rep)] for _ in keys]
        p = part(keys, values, reps) if keys else UnitSums.empty(width, n_rep, COLUMNS, REP_COLUMNS)
        out.append(p)
    return width, n_rep, out


@settings(max_examples=200, deadline=None)
@given(parts_of_units(), st.integers(0, 3), st.sampled_from([1, 2, 256]))
def test_the_adder_gives_concat_bits(case, n_unused, units_per_block):
    # Units declared that no part holds (n_unused of them) are left out, as concat has none.
    # A part is added a block of units at a time (blocks of 1 and 2 cut every part).
    width, n_rep, parts = case
    start = UnitSums.empty(width, n_rep, COLUMNS, REP_COLUMNS)
    unused = np.array([[100 + k] * width for k in range(n_unused)], dtype=np.int64).reshape(n_unused, width)
    saved = levels.UNITS_PER_BLOCK
    levels.UNITS_PER_BLOCK = units_per_block
    try:
        adder = UnitSumsAdder(start, np.concatenate([start.keys, unused] + [p.keys for p in parts]))
        for p in parts:
            adder.add(p)
    finally:
        levels.UNITS_PER_BLOCK = saved
    same_bits(adder.total(), UnitSums.concat([start] + parts))
