"""The exact selection of order statistics over partitions (evalcore.selection), by hand.

The property test against numpy on random partitions is in
tests/properties/test_selection_properties.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalcore.selection import (
    Queries,
    SortedValues,
    answer,
    select,
    select_local,
    statistic_ranks,
    statistic_value,
    statistics_of,
)

STATS = ("count", "min", "max", "median", 0.25, 0.5, 0.75)


def _parts(values_per_partition, groups_per_partition=None, n_groups=1):
    out = []
    for k, values in enumerate(values_per_partition):
        v = np.asarray(values, dtype=np.float64)
        groups = np.empty((len(v), 0), np.int64) if groups_per_partition is None else np.asarray(groups_per_partition[k], np.int64)[:, None]
        out.append(SortedValues.of_columns({"x": v}, groups, n_groups))
    return out


def test_median_and_quartiles_of_four_values_over_two_partitions_by_hand():
    got = select_local({0: STATS}, _parts([[4.0, 1.0], [3.0, 2.0]]))[0]
    # Sorted 1 2 3 4: median (2 + 3) / 2; linear quartiles at virtual ranks 0.75 and 2.25.
    assert got == {"count": 4, "min": 1.0, "max": 4.0, "median": 2.5, 0.25: 1.75, 0.5: 2.5, 0.75: 3.25}


def test_odd_count_median_is_the_middle_value():
    got = select_local({0: ("median", 0.5)}, _parts([[10.0, 30.0], [], [20.0, 50.0, 40.0]]))[0]
    assert got == {"median": 30.0, 0.5: 30.0}


def test_nan_values_are_left_out_and_an_empty_series_is_nan_with_count_zero():
    got = select_local({0: STATS}, _parts([[np.nan, 2.0], [np.nan]]))[0]
    assert got["count"] == 1 and got["median"] == got["min"] == got[0.25] == 2.0
    empty = select_local({0: STATS}, _parts([[np.nan], []]))[0]
    assert empty["count"] == 0 and all(math.isnan(empty[s]) for s in STATS if s != "count")


def test_groups_select_their_own_values_and_fields_in_no_group_count_only_overall():
    # Group 1: 1, 5, 9; group 2: 2, 4; the field with code -1 (value 100) is only in group 0.
    parts = _parts([[1.0, 2.0, 100.0], [5.0, 4.0, 9.0]], [[1, 2, -1], [1, 2, 1]], n_groups=4)
    got = select_local({s: ("count", "median") for s in range(4)}, parts)
    assert got[0] == {"count": 6, "median": 4.5}
    assert got[1] == {"count": 3, "median": 5.0}
    assert got[2] == {"count": 2, "median": 3.0}
    assert got[3]["count"] == 0 and math.isnan(got[3]["median"])


def test_ties_everywhere_end():
    parts = _parts([[0.3] * 500, [0.3] * 700, [0.3] * 10])
    got = select_local({0: STATS}, parts, samples=4, limit=4)[0]
    assert got["count"] == 1210 and all(got[s] == 0.3 for s in STATS if s != "count")


def test_statistic_ranks_by_hand():
    assert statistic_ranks("median", 6) == (2, 3)
    assert statistic_ranks("median", 1) == (0,)
    assert statistic_ranks(0.9, 11) == (9, 10)  # virtual rank 9.0: the element and the next, weight 0
    assert statistic_ranks(0.9, 1) == (0, 0)
    assert statistic_ranks("min", 0) == () and statistic_ranks("count", 5) == ()
    with pytest.raises(ValueError, match="unknown statistic 'mode'"):
        statistic_ranks("mode", 3)
    assert statistic_value(0.5, 2, {0: 1.0, 1: 2.0}) == 1.5


def test_a_partition_answers_counts_below_and_inside_and_samples_when_many():
    part = SortedValues.of_columns({"x": np.arange(100, dtype=np.float64)}, np.empty((100, 0), np.int64), 1)
    q = Queries(np.array([0, 0]), np.array([9.0, 0.0]), np.array([20.0, 0.0]), np.array([True, False]), np.array([True, False]),
                np.zeros(2, bool), samples=4, limit=11)
    a = answer(part, q)
    # (9, 20] holds 10..20: 11 values, sent whole; the unbounded query holds 100, sampled at 4 ranks.
    assert a.below.tolist() == [10, 0] and a.inside.tolist() == [11, 100]
    assert a.values[a.offsets[0]:a.offsets[1]].tolist() == list(np.arange(10.0, 21.0))
    assert a.ranks[a.offsets[1]:a.offsets[2]].tolist() == [0, 33, 66, 99]
    assert a.values[a.offsets[1]:a.offsets[2]].tolist() == [0.0, 33.0, 66.0, 99.0]


def test_a_million_values_over_forty_partitions_take_few_rounds_and_small_answers():
    rng = np.random.default_rng(3)
    values = rng.lognormal(size=1_000_000)
    part = rng.integers(0, 40, size=len(values))
    parts = _parts([values[part == k] for k in range(40)])
    seen = []

    def ask(queries):
        answers = [answer(p, queries) for p in parts]
        seen.append((len(queries), sum(len(a.values) for a in answers)))
        return answers

    stats = ("count", "min", "max", "median", 0.05, 0.1, 0.25, 0.5, 0.75, 0.9)
    got = select({0: stats}, ask, samples=32)
    assert got[0] == statistics_of(values, stats)
    assert len(seen) <= 6
    # The client holds at most partitions x limit values per query and round (40 x 64 here).
    assert all(n_values <= n_queries * 40 * 64 for n_queries, n_values in seen)
