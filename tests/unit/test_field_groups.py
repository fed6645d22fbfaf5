"""The (pool, reporting tile) groups of some rows (:func:`evalcore.bootstrap._field_groups`):
the groups of ``np.unique(keys, axis=0)`` in its order, each group's rows in position order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.bootstrap import _field_groups


def _by_unique(pools: np.ndarray, tiles: np.ndarray) -> list:
    """The obvious way: np.unique of the rows, then each group's rows by a scan."""
    keys = np.column_stack([pools, tiles])
    out = []
    for row in np.unique(keys, axis=0).tolist():
        rows = [i for i in range(len(keys)) if keys[i].tolist() == row]
        out.append((row[0], tuple(row[1:]), rows))
    return out


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 60), st.integers(0, 2**32 - 1))
def test_field_groups_are_those_of_np_unique_in_its_order(n, seed):
    rng = np.random.default_rng(seed)
    # Pools are 63-bit hashes; tile keys hold negative coordinates too.
    pools = rng.choice(np.array([3, 2**62 + 5, 17], np.int64), size=n)
    tiles = np.stack([rng.choice([32612, 32613], n), rng.integers(-2, 3, n), rng.integers(-2, 3, n)], axis=1).astype(np.int64)
    got = [(p, t, rows.tolist()) for p, t, rows in _field_groups(pools, tiles)]
    assert got == _by_unique(pools, tiles)


def test_field_groups_by_hand():
    pools = np.array([7, 5, 7, 5, 7])
    tiles = np.array([[1, 0, 0], [1, 0, 0], [1, 0, 0], [1, -1, 0], [1, 0, 0]])
    got = [(p, t, rows.tolist()) for p, t, rows in _field_groups(pools, tiles)]
    assert got == [(5, (1, -1, 0), [3]), (5, (1, 0, 0), [1]), (7, (1, 0, 0), [0, 2, 4])]
    assert list(_field_groups(np.empty(0, np.int64), np.empty((0, 3), np.int64))) == []
