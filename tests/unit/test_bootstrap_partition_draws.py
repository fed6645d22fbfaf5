"""The field bootstrap's draws made per partition (the resolve on the workers) equal the run's.

:func:`evalcore.bootstrap.partition_field_draws` ranks a partition's fields among the
positions of the other partitions holding fields of the same (pool, reporting tile)
groups; with the counts :func:`evalcore.bootstrap.partition_groups_draws` makes from the
groups' sizes alone, every field's weights equal those of :func:`evalcore.bootstrap.field_draws`
over the whole run, to the bit, however the fields are split.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalcore.bootstrap import (
    draw_field_counts,
    field_draws,
    field_group_sizes,
    partition_field_draws,
    partition_groups_draws,
)

B, SEED = 30, 11


def _run(n: int = 600, seed: int = 4):
    """A run's reference rows: positions (shuffled among the partitions), 3 pools, 4 reporting tiles."""
    rng = np.random.default_rng(seed)
    pos = np.sort(rng.choice(10 * n, size=n, replace=False)).astype(np.int64)
    pools = rng.choice(np.array([7, 11, 2**62 + 5], dtype=np.int64), size=n)
    tiles = np.column_stack([np.full(n, 32613), rng.integers(-1, 1, n), rng.integers(4, 6, n)]).astype(np.int64)
    return pos, pools, tiles


def _split(n: int, n_parts: int, seed: int) -> list[np.ndarray]:
    """Rows cut into partitions at random (each a sorted run of rows, as a partition holds its fields in position order)."""
    part = np.random.default_rng(seed).integers(0, n_parts, n)
    return [np.flatnonzero(part == k) for k in range(n_parts)]


@pytest.mark.parametrize("n_parts", [1, 2, 3, 5])
def test_partition_draws_equal_the_runs(n_parts):
    pos, pools, tiles = _run()
    run = field_draws(pos, pools, tiles, B, SEED)
    parts = _split(len(pos), n_parts, seed=n_parts)
    sizes: dict = {}
    for rows in parts:
        for group, n in field_group_sizes(pools[rows], tiles[rows]).items():
            sizes[group] = sizes.get(group, 0) + n
    groups = partition_groups_draws(sizes, B, SEED)
    # The central counts are the run's, whatever the split.
    assert groups.keys() == run.groups.keys()
    for key, (size, counts) in groups.items():
        assert size == run.groups[key][0]
        np.testing.assert_array_equal(counts, run.groups[key][1])
    spanning = 0
    for k, rows in enumerate(parts):
        others = [(pos[r], pools[r], tiles[r]) for j, r in enumerate(parts) if j != k]
        draws = partition_field_draws(pos[rows], pools[rows], tiles[rows], groups, others, B, SEED)
        np.testing.assert_array_equal(draws.ranks, run.ref_ranks[rows])
        expected = run.rows(rows).weights()
        assert np.array_equal(draws.weights(), expected)
        spanning = max(spanning, sum(1 for r in parts if len(set(map(tuple, np.column_stack([pools[r], tiles[r]]).tolist()))
                                                             & set(map(tuple, np.column_stack([pools[rows], tiles[rows]]).tolist())))))
    assert spanning == n_parts  # groups span every partition
    # And the whole run's weights, column by column, are draw_field_counts' over each group.
    whole = np.zeros((B, len(pos)))
    for rows in parts:
        others = [(pos[r], pools[r], tiles[r]) for r in parts if r is not rows]
        whole[:, rows] = partition_field_draws(pos[rows], pools[rows], tiles[rows], groups, others, B, SEED).weights()
    for (pool, tile), (size, counts) in groups.items():
        members = np.flatnonzero((pools == pool) & np.all(tiles == tile, axis=1))  # in position order: ranks 0..size-1
        assert np.array_equal(whole[:, members], draw_field_counts(counts, size, SEED, pool, tile))


def test_only_the_groups_here_are_shipped_and_other_groups_are_ignored():
    pos, pools, tiles = _run(n=200)
    run = field_draws(pos, pools, tiles, B, SEED)
    a = np.arange(0, 200, 2)
    mine = a[pools[a] == pools[a][0]]  # one pool only
    rest = np.setdiff1d(np.arange(200), mine)
    draws = partition_field_draws(pos[mine], pools[mine], tiles[mine], run.groups, [(pos[rest], pools[rest], tiles[rest])], B, SEED)
    assert {p for p, _ in draws.groups} == {int(pools[a][0])}
    assert np.array_equal(draws.weights(), run.rows(mine).weights())


def test_missing_positions_of_a_partition_sharing_a_group_are_refused():
    pos, pools, tiles = _run(n=300)
    run = field_draws(pos, pools, tiles, B, SEED)
    first, second, third = _split(300, 3, seed=9)
    with pytest.raises(ValueError, match="fields found but the run has"):
        partition_field_draws(pos[first], pools[first], tiles[first], run.groups, [(pos[second], pools[second], tiles[second])], B, SEED)


def test_an_empty_partition_has_no_draws():
    draws = partition_field_draws(np.empty(0, np.int64), np.empty(0, np.int64), np.empty((0, 3), np.int64), {}, [], B, SEED)
    assert draws.weights().shape == (B, 0)
    assert partition_groups_draws({}, B, SEED) == {}
