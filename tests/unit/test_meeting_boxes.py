"""The box join of the tolerance candidates (:func:`evalcore.arrays.meeting_boxes`, a
uniform grid in numba) against the obvious double loop over closed intervals, and
against GEOS's envelope query (the STRtree the candidates were selected with before)."""

from __future__ import annotations

import numpy as np
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st

from evalcore.arrays import meeting_boxes as _meeting_pairs


def _by_loop(a: np.ndarray, b: np.ndarray) -> set[tuple[int, int]]:
    return {
        (i, j)
        for i in range(len(a))
        for j in range(len(b))
        if np.isfinite(a[i]).all() and np.isfinite(b[j]).all()
        and a[i, 0] <= b[j, 2] and b[j, 0] <= a[i, 2] and a[i, 1] <= b[j, 3] and b[j, 1] <= a[i, 3]
    }


def _pairs(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    i, j = _meeting_pairs(a, b)
    assert i.dtype == j.dtype == np.int64
    return list(zip(i.tolist(), j.tolist()))


# Coordinates on a coarse lattice, so that boxes often touch, share edges or coincide.
_coord = st.integers(-40, 40).map(lambda v: v * 2.5)
_size = st.sampled_from([0.0, 0.5, 2.5, 5.0, 12.5, 60.0, 400.0])


@st.composite
def _boxes(draw, max_size=25):
    rows = draw(st.lists(st.tuples(_coord, _coord, _size, _size), max_size=max_size))
    boxes = np.array([[x, y, x + w, y + h] for x, y, w, h in rows], dtype=np.float64).reshape(-1, 4)
    if len(boxes) and draw(st.booleans()):
        boxes[draw(st.integers(0, len(boxes) - 1)), draw(st.integers(0, 3))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return boxes


@settings(max_examples=300, deadline=None)
@given(_boxes(), _boxes())
def test_the_pairs_are_those_of_the_double_loop(a, b):
    got = _pairs(a, b)
    assert len(got) == len(set(got))  # no pair twice
    assert set(got) == _by_loop(a, b)


def test_touching_corners_and_edges_meet():
    a = np.array([[0.0, 0.0, 1.0, 1.0]])
    b = np.array([
        [1.0, 1.0, 2.0, 2.0],  # corner to corner
        [1.0, 0.0, 2.0, 1.0],  # edge to edge
        [1.0 + 1e-12, 0.0, 2.0, 1.0],  # a hair apart
        [0.5, 0.5, 0.5, 0.5],  # a point inside
        [-5.0, -5.0, 5.0, 5.0],  # around it
        [np.nan, 0.0, 1.0, 1.0],
    ])
    assert sorted(_pairs(a, b)) == [(0, 0), (0, 1), (0, 3), (0, 4)]
    assert sorted(_pairs(b, a)) == [(0, 0), (1, 0), (3, 0), (4, 0)]


def test_the_same_pairs_as_geos_envelopes_on_fields():
    """20,000 and 24,000 boxes of 50-400 m over 20 km, one of 15 km among them: the pairs
    GEOS's STRtree finds for the same boxes."""
    rng = np.random.default_rng(1)

    def boxes(n):
        x, y = rng.random(n) * 20_000, rng.random(n) * 20_000
        w, h = rng.uniform(50, 400, n), rng.uniform(50, 400, n)
        return np.stack([x, y, x + w, y + h], axis=1)

    a, b = boxes(20_000), boxes(24_000)
    b[7] = [1_000.0, 2_000.0, 16_000.0, 2_300.0]
    i, j = shapely.STRtree(shapely.box(*b.T)).query(shapely.box(*a.T))
    expected = set(zip(i.tolist(), j.tolist()))
    got = _pairs(a, b)
    assert len(got) == len(set(got)) and set(got) == expected
    assert len(expected) > 200_000 and sum(1 for _, e in got if e == 7) > 100


def test_nothing_to_pair():
    empty = np.empty((0, 4))
    one = np.array([[0.0, 0.0, 1.0, 1.0]])
    assert _pairs(empty, one) == [] and _pairs(one, empty) == [] and _pairs(empty, empty) == []
