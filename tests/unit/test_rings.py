"""Flat rings as one value (evalcore.rings.Rings): read from WKB bytes, taken, joined.

Every case is compared with flattening the decoded shapely geometries
(:func:`evalcore.rings.flatten_rings`), which the boundary kernels have always taken.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely.geometry import MultiPolygon, Polygon, box

from evalcore.rings import Rings, flatten_rings

HOLED = Polygon([(0, 0), (10, 0), (10, 10), (0, 10)], [[(2, 2), (3, 2), (3, 3), (2, 3)], [(5, 5), (6, 5), (6, 6)]])


def _same(got: Rings, geoms: np.ndarray) -> None:
    want = flatten_rings(geoms)
    for name, a, b in zip(("x", "y", "ring_off", "ring_ext", "geom_off"), (got.x, got.y, got.ring_off, got.ring_ext, got.geom_off), want):
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


def _wkb_column(geoms: np.ndarray, **options: object) -> pa.Array:
    return pa.array([None if g is None else shapely.to_wkb(g, **options) for g in geoms], type=pa.binary())


def test_hand_made_layout():
    # A square (5 coordinates), a holed square (exterior 5, holes 5 and 4), an empty polygon.
    rings = Rings.from_wkb(_wkb_column(np.array([box(0, 0, 1, 1), HOLED, Polygon()], dtype=object)))
    assert rings.geom_off.tolist() == [0, 1, 4, 4]
    assert rings.ring_off.tolist() == [0, 5, 10, 15, 19]
    assert rings.ring_ext.tolist() == [True, True, False, False]
    assert rings.x[5:10].tolist() == [0.0, 10.0, 10.0, 0.0, 0.0]
    assert len(rings) == 3


def test_multipolygons_holes_and_empties_read_from_bytes():
    geoms = np.array([
        box(0, 0, 1, 1), HOLED, MultiPolygon([HOLED, box(20, 0, 21, 1)]), Polygon(), MultiPolygon(), box(-3.5, 1e7, 2.25, 1e7 + 1),
    ], dtype=object)
    _same(Rings.from_wkb(_wkb_column(geoms)), geoms)


@pytest.mark.parametrize("case", ["null", "big-endian", "3d", "collection", "point", "large_binary", "chunked", "sliced"])
def test_other_columns_give_what_geos_decodes(case):
    geoms = np.array([box(0, 0, 1, 1), HOLED, box(2, 2, 4, 5)], dtype=object)
    if case == "null":
        column = _wkb_column(np.array([box(0, 0, 1, 1), None, HOLED], dtype=object))
        geoms = np.array([box(0, 0, 1, 1), None, HOLED], dtype=object)
    elif case == "big-endian":
        column = _wkb_column(geoms, byte_order=0)
    elif case == "3d":
        geoms = shapely.force_3d(geoms)
        column = _wkb_column(geoms)
    elif case == "collection":
        geoms = np.array([box(0, 0, 1, 1), shapely.GeometryCollection([box(5, 5, 6, 6)])], dtype=object)
        column = _wkb_column(geoms)
    elif case == "point":
        geoms = np.array([box(0, 0, 1, 1), shapely.Point(1, 1)], dtype=object)
        column = _wkb_column(geoms)
    elif case == "large_binary":
        column = pa.array([shapely.to_wkb(g) for g in geoms], type=pa.large_binary())
    elif case == "chunked":
        column = pa.chunked_array([_wkb_column(geoms[:1]), _wkb_column(geoms[1:])])
    else:
        column = _wkb_column(np.concatenate([[box(9, 9, 10, 10)], geoms]))[1:]
    _same(Rings.from_wkb(column), shapely.from_wkb(np.asarray(column.to_pylist(), dtype=object)) if case != "chunked" else geoms)


def test_a_truncated_value_is_not_read_as_rings():
    good = shapely.to_wkb(HOLED)
    column = pa.array([good[:-8]], type=pa.binary())  # the last coordinate cut short
    with pytest.raises(shapely.errors.GEOSException):
        Rings.from_wkb(column)  # GEOS decodes it, and refuses


def test_take_and_concat_are_flattening_the_taken_and_joined_geometries():
    geoms = np.array([box(0, 0, 1, 1), None, HOLED, MultiPolygon([HOLED, box(20, 0, 21, 1)]), Polygon()], dtype=object)
    rings = Rings.of(geoms)
    rows = np.array([3, 3, 1, 0, 4, 2], dtype=np.int64)
    _same(rings.take(rows), geoms[rows])
    _same(rings.take(np.empty(0, dtype=np.int64)), geoms[:0])
    _same(Rings.concat([rings.take(rows), rings, Rings.of(geoms[:0])]), np.concatenate([geoms[rows], geoms]))
    _same(Rings.concat([]), geoms[:0])


coordinate = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def polygons(draw: st.DrawFn) -> object:
    x, y = draw(coordinate), draw(coordinate)
    w, h = draw(st.floats(0.5, 1e3)), draw(st.floats(0.5, 1e3))
    outer = box(x, y, x + w, y + h)
    if draw(st.booleans()):
        outer = Polygon(outer.exterior.coords, [box(x + w / 4, y + h / 4, x + w / 2, y + h / 2).exterior.coords])
    if draw(st.integers(0, 4)) == 0:
        return MultiPolygon([outer, box(x + 2 * w, y, x + 3 * w, y + h)])
    if draw(st.integers(0, 9)) == 0:
        return None
    return outer


@settings(max_examples=60, deadline=None)
@given(st.lists(polygons(), max_size=12), st.data())
def test_reading_taking_and_joining_agree_with_flattening(geoms, data):
    geoms = np.array(geoms + [box(0, 0, 1, 1)], dtype=object)[:-1] if geoms else np.empty(0, dtype=object)
    present = np.array([g for g in geoms if g is not None], dtype=object)
    _same(Rings.from_wkb(_wkb_column(present)), present)
    rows = np.array(data.draw(st.lists(st.integers(0, max(len(geoms) - 1, 0)), max_size=10)) if len(geoms) else [], dtype=np.int64)
    _same(Rings.of(geoms).take(rows), geoms[rows])


def test_wkb_written_from_rings_is_what_geos_writes():
    geoms = np.array([
        box(0, 0, 1, 1), HOLED, MultiPolygon([HOLED, box(20, 0, 21, 1)]), MultiPolygon([box(5, 5, 6, 6)]), Polygon(), MultiPolygon(),
        box(-3.5, 1e7, 2.25, 1e7 + 1),
    ], dtype=object)
    written = Rings.of(geoms).to_wkb(shapely.get_type_id(geoms))
    assert written.to_pylist() == list(shapely.to_wkb(geoms))
    # A one-part MultiPolygon stays one: the types say what the rings cannot.
    assert shapely.from_wkb(written[3].as_py()).geom_type == "MultiPolygon"


def test_wkb_from_rings_refuses_what_it_cannot_write():
    rings = Rings.of(np.array([MultiPolygon([box(0, 0, 1, 1), box(2, 0, 3, 1)])], dtype=object))
    with pytest.raises(ValueError, match="several parts"):
        rings.to_wkb(np.array([3]))  # two parts are not a Polygon
    with pytest.raises(ValueError, match="neither"):
        rings.to_wkb(np.array([7]))
    with pytest.raises(ValueError, match="1 geometries"):
        rings.to_wkb(np.array([6, 6]))


def test_lengths_by_hand():
    # A 3 x 4 box: 14; with a 1 x 1 hole: 18; two of them as one multipolygon: 36; empty: 0.
    holed = Polygon(box(0, 0, 3, 4).exterior.coords, [box(1, 1, 2, 2).exterior.coords])
    geoms = np.array([box(0, 0, 3, 4), holed, MultiPolygon([holed, box(10, 0, 13, 4).difference(box(11, 1, 12, 2))]), Polygon(), None], dtype=object)
    assert Rings.of(geoms).lengths().tolist() == [14.0, 18.0, 36.0, 0.0, 0.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(polygons(), max_size=12))
def test_lengths_and_wkb_give_geos_bits(geoms):
    geoms = np.array([g for g in geoms if g is not None] + [box(0, 0, 1, 1)], dtype=object)[:-1] if geoms else np.empty(0, dtype=object)
    # Coordinates with every bit in use (a rotation): the sums' order shows in the last bits.
    geoms = shapely.transform(geoms, lambda c: c @ np.array([[0.8, 0.6], [-0.6, 0.8]]) + [500_000.123, 4_000_000.987]) if len(geoms) else geoms
    rings = Rings.of(geoms)
    np.testing.assert_array_equal(rings.lengths().view(np.int64), shapely.length(geoms).astype(np.float64).view(np.int64))
    assert rings.to_wkb(shapely.get_type_id(geoms)).to_pylist() == list(shapely.to_wkb(geoms))
