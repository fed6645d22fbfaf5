"""``evalcore.arrays.rows_by_key``, the grouping of a prepare chunk's rows by partition key,
against its definition by ``np.unique`` along the rows and a stable sort of the inverse."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from evalcore.arrays import rows_by_key


def _by_unique(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    rows = np.argsort(inverse, kind="stable")
    return unique, rows, np.searchsorted(inverse[rows], np.arange(len(unique) + 1))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4).flatmap(lambda k: arrays(np.int64, st.tuples(st.integers(0, 60), st.just(k)),
                                                  elements=st.integers(-3, 3) | st.integers(-2**62, 2**62))))
def test_the_groups_of_np_unique_in_the_same_order(keys):
    unique, rows, starts = rows_by_key(keys)
    expected = _by_unique(keys)
    assert unique.tolist() == expected[0].tolist()
    assert rows.tolist() == expected[1].tolist() and starts.tolist() == expected[2].tolist()


def test_a_hand_worked_chunk_and_no_rows():
    keys = np.array([[32633, 4, -1], [32632, 9, 9], [32633, 4, -1], [32633, -2, 0]])
    unique, rows, starts = rows_by_key(keys)
    assert unique.tolist() == [[32632, 9, 9], [32633, -2, 0], [32633, 4, -1]]
    assert rows.tolist() == [1, 3, 0, 2] and starts.tolist() == [0, 1, 2, 4]
    unique, rows, starts = rows_by_key(np.empty((0, 3), np.int64))
    assert unique.shape == (0, 3) and rows.tolist() == [] and starts.tolist() == [0]
