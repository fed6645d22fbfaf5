"""The study area and the training area as a cell index, boundary pieces and a union by block
(:mod:`evalcore.site_cells`, :func:`evalcore.study.prepare_study`).

What a row's predicate says must be, to the bit, what it says with every grid piece and
the whole union held (:func:`evalcore.sites.grid_pieces`, the code before the cell index):
inside the study area by each rule, within the training buffer, for fields on cell edges
and corners, on the outline, across holes and between the parts of a multipolygon, looked
up in groups with the pieces of their own extent only (as prepare chunks do). The layers are
random: boxes on and off the grid, stars, polygons with holes, multipolygons.
"""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyproj import CRS
from shapely.geometry import box

from evalcore.config import EDGE_SPLIT_M
from evalcore.crs import WGS84, reproject_polygons, transform_xy, utm_crs
from evalcore.prepare import utm_epsg_of
from evalcore.site_cells import BLOCK_CELLS, NearUnion, cut_layer, near_union, write_cell_pieces
from evalcore.sites import grid_pieces
from evalcore.study import STUDY_RULES, StudyArea, TrainingArea, study_area_mask, within_training_buffer
from tests.unit.test_site_cells import CELL, _fields, _groups, _polygon

EA = CRS.from_epsg(6933)
# The layers of the training test sit in France in EPSG:6933 (x about 4.5 deg E, y about 46 deg N),
# moved by a whole number of cells so that the "on the grid" polygons stay on it.
SHIFT = (4_500 * CELL, 50_000 * CELL)


def _site_polygon(rng):
    """A random site polygon made valid, as SPEC 2's preparation leaves a study or training area's rows."""
    return shapely.make_valid(_polygon(rng), method="structure")


def _outline_rows(rng, geoms, n):
    """Rows sharing the outline: the layer's polygons themselves and pieces of them clipped by random boxes."""
    rows = list(geoms)
    for _ in range(n):
        g = geoms[rng.integers(0, len(geoms))]
        minx, miny, maxx, maxy = g.bounds
        x, y = rng.uniform(minx, maxx), rng.uniform(miny, maxy)
        w, h = rng.uniform(20, 400, 2)
        part = shapely.clip_by_rect(g, x - w, y - h, x + w, y + h)
        if not part.is_empty and part.area > 0:
            rows.append(part)
    return rows


def _rows(rng, geoms):
    """Fields anywhere (on cell edges too), fields on the outline, and boxes centred on grid lines
    (their centroids on a cell edge, for the centroid rule)."""
    rows = list(_fields(rng, 150)) + _outline_rows(rng, geoms, 30)
    for _ in range(20):
        x, y = np.round(rng.uniform(-3000, 3000, 2) / CELL) * CELL
        w, h = rng.uniform(5, 120, 2)
        rows.append(box(x - w, y - h, x + w, y + h))
    return np.asarray(rows, dtype=object)


def _study(rule, geoms, store=None):
    """The study area as before (every piece and the union held) and with a cell index, in memory or stored."""
    union = shapely.union_all(geoms)
    whole = StudyArea(rule, union, grid_pieces(geoms, CELL), 0.0, len(geoms), "study area (test)")
    cells = cut_layer([geoms], CELL)
    if store is None:
        return whole, StudyArea(rule, None, None, 0.0, len(geoms), "study area (test)", cells, near_union(union, cells))
    near = near_union(union, cells, store)
    return whole, StudyArea(rule, None, None, 0.0, len(geoms), "study area (test)", write_cell_pieces(cells, store), near)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_parts=st.integers(1, 4), n_groups=st.integers(1, 5), rule=st.sampled_from(STUDY_RULES))
def test_study_area_from_cells_equals_the_whole_layer(tmp_path_factory, seed, n_parts, n_groups, rule):
    rng = np.random.default_rng(seed)
    geoms = np.asarray([_site_polygon(rng) for _ in range(n_parts)], dtype=object)
    rows = _rows(rng, geoms)
    whole, stored = _study(rule, geoms, tmp_path_factory.mktemp("study"))
    _, in_memory = _study(rule, geoms)
    expected = study_area_mask(whole, rows)
    np.testing.assert_array_equal(study_area_mask(in_memory, rows), expected)
    for group in _groups(rng, len(rows), n_groups):
        np.testing.assert_array_equal(study_area_mask(stored, rows[group]), expected[group])
    # The rule itself, on the union (the pieces partition it; a row touching the outline may
    # be decided by a clipped piece's rounding, so nearly all, not all).
    union = shapely.union_all(geoms)
    if rule == "intersects":
        truth = shapely.intersects(union, rows)
    elif rule == "within":
        truth = shapely.contains(union, rows)
    else:
        truth = shapely.contains(union, shapely.centroid(rows))
    assert (expected == truth).mean() > 0.97


def test_rows_inside_and_outside_whole_cells_need_no_geometry(tmp_path):
    # A square of 60 x 60 cells with a square hole of 20 x 20 cells: rows a cell or more from
    # the outline (inside, in the hole, outside) are answered by the cell index, with every
    # boundary piece and the union removed from the store.
    outer = box(0, 0, 60 * CELL, 60 * CELL).difference(box(20 * CELL, 20 * CELL, 40 * CELL, 40 * CELL))
    geoms = np.asarray([outer], dtype=object)
    rows = np.asarray([
        box(5 * CELL + 1, 5 * CELL + 1, 8 * CELL, 6 * CELL),      # inside, across grid lines: in
        box(30 * CELL, 30 * CELL, 31 * CELL, 31 * CELL),          # in the hole, on grid lines: out
        box(70 * CELL, 10 * CELL, 71 * CELL, 11 * CELL),          # outside: out
    ], dtype=object)
    for rule in STUDY_RULES:
        whole, stored = _study(rule, geoms, tmp_path / rule)
        for f in list((tmp_path / rule).glob("*.npz")) + list((tmp_path / rule).glob("*.wkb")):
            f.unlink()
        assert study_area_mask(stored, rows).tolist() == study_area_mask(whole, rows).tolist() == [True, False, False]
        # Next to the outline the pieces are needed, and they are gone.
        with pytest.raises(FileNotFoundError):
            study_area_mask(stored, np.asarray([box(59 * CELL + 10, 10 * CELL, 59 * CELL + 90, 11 * CELL)], dtype=object))


def test_the_union_by_block_answers_as_the_whole_union(tmp_path):
    # A wavy ring of 3,000 short edges (about 10 m, as a 50 m split outline has) over many
    # blocks; rows sharing its outline, across it, inside and outside. Rows within a block's
    # neighbourhood are answered from it, the union file gone; a row reaching past the
    # neighbourhood reads the whole union.
    rng = np.random.default_rng(3)
    angles = np.sort(rng.uniform(0, 2 * np.pi, 3_000))
    radius = 5_000 + 600 * np.sin(7 * angles) + rng.uniform(-5, 5, 3_000)
    star = shapely.Polygon(np.column_stack([radius * np.cos(angles), radius * np.sin(angles)]))
    cells = cut_layer([np.asarray([star], dtype=object)], CELL)
    near = near_union(star, cells, tmp_path / "near")
    assert isinstance(near, NearUnion) and near.block_m == CELL * BLOCK_CELLS and len(near.blocks) > 10
    rows = np.asarray(_outline_rows(rng, [star], 200)[1:] + list(_fields(rng, 200)), dtype=object)
    b = shapely.bounds(rows)
    block = np.floor(b[:, :2] / near.block_m).astype(np.int64)
    stored = (block[:, None, :] == near.blocks[None, :, :]).all(axis=2).any(axis=1)
    # Rows starting in a block with a neighbourhood and reaching less than its margin past it.
    rows = rows[stored & (b[:, 2] - b[:, 0] < 600) & (b[:, 3] - b[:, 1] < 600)]
    assert len(rows) > 200
    shapely.prepare(star)
    expected = shapely.contains(star, rows)
    assert expected.any() and not expected.all()
    (tmp_path / "near" / "union.wkb").rename(tmp_path / "union.wkb")
    np.testing.assert_array_equal(near.contains(rows), expected)
    big = np.asarray([box(-3_000, -3_000, 3_000, 3_000)], dtype=object)  # past every neighbourhood
    with pytest.raises(FileNotFoundError):
        near.contains(big)
    (tmp_path / "union.wkb").rename(tmp_path / "near" / "union.wkb")
    assert near.contains(big).tolist() == [True]


def _in_zone(rows_ea):
    """The rows in their home UTM zone, with their centroids' degrees and zones, as the prepare phase has them."""
    c = shapely.centroid(rows_ea)
    lon, lat = transform_xy(shapely.get_x(c), shapely.get_y(c), EA, WGS84)
    epsg = utm_epsg_of(lon, lat).astype(np.int64)
    utm = np.empty(len(rows_ea), dtype=object)
    for code in np.unique(epsg):
        sel = epsg == code
        utm[sel] = reproject_polygons(rows_ea[sel], EA, utm_crs(int(code)), split=EDGE_SPLIT_M)
    return utm, epsg, lon, lat


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_parts=st.integers(1, 4), n_groups=st.integers(1, 4),
       buffer_m=st.sampled_from([0.0, 0.0005, 30.0, 250.0]))
def test_training_buffer_from_cells_equals_the_whole_layer(tmp_path_factory, seed, n_parts, n_groups, buffer_m):
    rng = np.random.default_rng(seed)
    move = lambda g: shapely.transform(g, lambda xy: xy + np.array(SHIFT))  # noqa: E731
    geoms = np.asarray([move(_site_polygon(rng)) for _ in range(n_parts)], dtype=object)
    rows = np.asarray([move(g) for g in _rows(rng, [shapely.transform(g, lambda xy: xy - np.array(SHIFT)) for g in geoms])],
                      dtype=object)
    utm, epsg, lon, lat = _in_zone(rows)
    whole = TrainingArea(grid_pieces(geoms, CELL), buffer_m, False, 0.0, len(geoms), EA, "training area (test)")
    cells = cut_layer([geoms], CELL)
    in_memory = TrainingArea(None, buffer_m, False, 0.0, len(geoms), EA, "training area (test)", cells)
    stored = TrainingArea(None, buffer_m, False, 0.0, len(geoms), EA, "training area (test)",
                          write_cell_pieces(cells, tmp_path_factory.mktemp("training")))
    expected = within_training_buffer(whole, rows, utm, epsg, lon, lat)
    np.testing.assert_array_equal(within_training_buffer(in_memory, rows, utm, epsg, lon, lat), expected)
    for g in _groups(rng, len(rows), n_groups):
        np.testing.assert_array_equal(within_training_buffer(stored, rows[g], utm[g], epsg[g], lon[g], lat[g]), expected[g])
    # Against the distance to the union in each row's zone, away from the buffer's edge.
    union = shapely.union_all(geoms)
    distance = np.array([shapely.distance(u, reproject_polygons(np.asarray([union], dtype=object), EA, utm_crs(int(z)),
                                                                split=EDGE_SPLIT_M)[0]) for u, z in zip(utm, epsg)])
    clear = np.abs(distance - max(buffer_m, 1e-3)) > 0.01
    np.testing.assert_array_equal(expected[clear], (distance <= max(buffer_m, 1e-3))[clear])
