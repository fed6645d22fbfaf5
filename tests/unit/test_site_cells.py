"""Site layers as a cell index and a store of boundary pieces (:mod:`evalcore.site_cells`).

The lookups made from the pieces of an extent (read from the store by block) must equal,
to the bit, the lookups made from every piece of the layer held whole
(:func:`evalcore.sites.grid_pieces`): the AOI of a point, including points on the grid's
lines and corners, and the annotated fraction of a field, including fields on cell edges.
The layers are random: boxes, stars, polygons with holes, multipolygons, overlapping AOIs.
"""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from shapely.geometry import MultiPolygon, Polygon, box

from evalcore.levels import AnnotatedArea, AoiLayer, Sites, annotated_fractions, first_aoi, locate, overlapping_aois
from evalcore.site_cells import BLOCK_CELLS, CellPieces, cut_layer, write_cell_pieces
from evalcore.sites import grid_pieces

CELL = 100.0  # small cells, so that a few hundred metres of polygon cross many cells and blocks


def _star(rng, cx, cy, radius, n):
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    r = radius * rng.uniform(0.3, 1.0, n)
    star = Polygon(np.column_stack([cx + r * np.cos(angles), cy + r * np.sin(angles)]))
    # Two nearly equal angles can make rounded edges cross: an invalid polygon, which a run
    # never meets (layers are repaired when prepared) and on which GEOS's overlay fails.
    return star if star.is_valid else shapely.make_valid(star, method="structure", keep_collapsed=False)


def _polygon(rng):
    """One random site polygon: a box (on or off the grid), a star, a box with a hole, or a multipolygon."""
    kind = rng.integers(0, 5)
    cx, cy = rng.uniform(-2500, 2500, 2)
    size = rng.uniform(50, 1500)
    if kind == 0:  # on the grid lines: its edges are cell edges
        x0, y0 = np.floor(cx / CELL) * CELL, np.floor(cy / CELL) * CELL
        return box(x0, y0, x0 + CELL * rng.integers(1, 15), y0 + CELL * rng.integers(1, 15))
    if kind == 1:
        return box(cx, cy, cx + size, cy + size * rng.uniform(0.2, 2))
    if kind == 2:
        return _star(rng, cx, cy, size, int(rng.integers(5, 60)))
    if kind == 3:
        outer = box(cx, cy, cx + 2 * size, cy + 2 * size)
        return outer.difference(box(cx + size * 0.5, cy + size * 0.5, cx + size * 1.2, cy + size * 1.5))
    return MultiPolygon([box(cx, cy, cx + size, cy + size / 2), box(cx + 3 * size, cy - size, cx + 3.5 * size, cy)])


def _points(rng, n):
    """Points anywhere, on cell edges (x or y a multiple of the cell) and on cell corners."""
    xy = rng.uniform(-4000, 4000, (n, 2))
    on_edge = rng.random(n) < 0.3
    xy[on_edge, 0] = np.round(xy[on_edge, 0] / CELL) * CELL
    corner = rng.random(n) < 0.15
    xy[corner] = np.round(xy[corner] / CELL) * CELL
    return shapely.points(xy)


def _fields(rng, n):
    """Small fields, some with their edges on cell edges, some crossing cell corners."""
    out = []
    for _ in range(n):
        x, y = rng.uniform(-4000, 4000, 2)
        w, h = rng.uniform(5, 250, 2)
        if rng.random() < 0.3:
            x = np.round(x / CELL) * CELL
        if rng.random() < 0.3:
            y = np.round(y / CELL) * CELL - h  # the top edge on a grid line
        out.append(box(x, y, x + w, y + h) if rng.random() < 0.5 else _star(rng, x, y, w, 12))
    return np.asarray(out, dtype=object)


def _aoi_layer(geoms, pieces=None, piece_aoi=None, cells=None):
    n = len(geoms)
    ids = np.arange(n).astype(object)
    return AoiLayer("id", ids, [str(i) for i in range(n)], geoms, geoms, None, "AOI layer (test)", pieces, piece_aoi, cells)


def _whole_pieces(geoms):
    cut = [grid_pieces(np.asarray([g], dtype=object), CELL) for g in geoms]
    return np.concatenate(cut), np.concatenate([np.full(len(c), k, dtype=np.int64) for k, c in enumerate(cut)])


def _groups(rng, n, k):
    """``n`` rows dealt into ``k`` groups: each group is looked up alone, with the pieces of its own extent."""
    which = rng.integers(0, k, n)
    return [np.flatnonzero(which == g) for g in range(k) if (which == g).any()]


@pytest.mark.parametrize("seed", range(4))
def test_the_cells_hold_the_same_pieces_as_grid_pieces(seed, tmp_path):
    rng = np.random.default_rng(seed)
    geoms = np.asarray([_polygon(rng) for _ in range(5)], dtype=object)
    pieces, owner = _whole_pieces(geoms)
    cells = cut_layer([np.asarray([g], dtype=object) for g in geoms], CELL)
    assert cells.n_pieces == len(pieces)
    for layer in (cells, write_cell_pieces(cells, tmp_path / "store")):
        got, got_owner = layer.pieces_in()
        np.testing.assert_array_equal(got_owner, owner)
        # The same geometries to the bit: the same WKB.
        assert list(shapely.to_wkb(got)) == list(shapely.to_wkb(pieces))
    stored = write_cell_pieces(cells, tmp_path / "store")
    assert stored.pieces is None and len(list((tmp_path / "store").glob("block_*.npz"))) >= 1


def test_an_extent_reads_only_the_blocks_it_meets(tmp_path):
    # One box over 40 x 40 cells: its boundary crosses the 156 cells of the ring, which lie in
    # 8 of the 9 blocks of 16 x 16 cells (the middle block holds whole cells only).
    cells = write_cell_pieces(cut_layer([np.asarray([box(50, 50, 3950, 3950)], dtype=object)], CELL), tmp_path / "s")
    blocks = sorted(p.name for p in (tmp_path / "s").glob("block_*.npz"))
    assert BLOCK_CELLS == 16 and len(cells.x) == 156
    assert len(blocks) == 8 and "block_1_1.npz" not in blocks
    (tmp_path / "s" / "block_2_2.npz").unlink()  # an extent far from it never opens it
    pieces, owner = cells.pieces_in((0, 3, 0, 3))
    assert len(pieces) == 9 and set(owner) == {0}
    assert shapely.area(pieces).sum() == pytest.approx(300 * 300 - (50 * 300 * 2 - 50 * 50))
    with pytest.raises(FileNotFoundError):
        cells.pieces_in((38, 40, 38, 40))


def test_whole_cells_hold_no_geometry(tmp_path):
    # 1,000 x 1,000 cells inside one square: the index grows with the boundary (ranges of the
    # bisection, each five integers), not with the million squares.
    side = 1000 * CELL
    cells = cut_layer([np.asarray([box(-1, -1, side + 1, side + 1)], dtype=object)], CELL)
    assert cells.n_pieces == 1002 * 1002
    assert len(cells.x) == 4 * 1001 and len(cells.whole) < 1.5 * len(cells.x)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_aoi=st.integers(1, 6), n_groups=st.integers(1, 5))
def test_aoi_lookups_from_extents_equal_the_whole_layer(tmp_path_factory, seed, n_aoi, n_groups):
    rng = np.random.default_rng(seed)
    geoms = np.asarray([_polygon(rng) for _ in range(n_aoi)], dtype=object)
    pieces, owner = _whole_pieces(geoms)
    whole = _aoi_layer(geoms, pieces, owner)
    cells = cut_layer([np.asarray([g], dtype=object) for g in geoms], CELL)
    stored = _aoi_layer(geoms, cells=write_cell_pieces(cells, tmp_path_factory.mktemp("aoi")))
    points = _points(rng, 300)
    expected = first_aoi(whole, points)
    for rows in _groups(rng, len(points), n_groups):
        np.testing.assert_array_equal(first_aoi(stored, points[rows]), expected[rows])
    # The pieces decide what the whole polygons decide (first by position containing the point).
    contains = np.array([next((k for k, g in enumerate(geoms) if g.contains(p)), -1) for p in points])
    assert (expected == contains).mean() > 0.99
    assert overlapping_aois(stored) == overlapping_aois(whole)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_parts=st.integers(1, 4), n_groups=st.integers(1, 5))
@example(seed=34, n_parts=4, n_groups=1)  # drew a self-crossing star field before _star repaired it
def test_annotated_fractions_from_extents_equal_the_whole_layer(tmp_path_factory, seed, n_parts, n_groups):
    rng = np.random.default_rng(seed)
    geoms = np.asarray([_polygon(rng) for _ in range(n_parts)], dtype=object)
    whole = AnnotatedArea(geoms, "annotated (test)", pieces=grid_pieces(geoms, CELL), cell_m=CELL)
    stored = AnnotatedArea(geoms, "annotated (test)", cells=write_cell_pieces(cut_layer([geoms], CELL), tmp_path_factory.mktemp("ann")))
    fields = _fields(rng, 200)
    area = shapely.area(fields)
    expected = annotated_fractions(whole, fields, area)
    for rows in _groups(rng, len(fields), n_groups):
        got = annotated_fractions(stored, fields[rows], area[rows])
        assert got.tobytes() == expected[rows].tobytes()
    # Against the union itself (the pieces partition it), where GEOS can intersect the two
    # (a random star's near-collinear vertices can make the overlay fail).
    union = shapely.union_all(geoms)
    for i, f in enumerate(fields):
        try:
            inside = shapely.area(shapely.intersection(f, union))
        except shapely.errors.GEOSException:
            continue
        assert expected[i] == pytest.approx(min(inside / area[i], 1.0), abs=1e-9)


def test_locate_reads_the_store(tmp_path):
    rng = np.random.default_rng(7)
    geoms = np.asarray([box(0, 0, 2000, 2000), box(1500, 1500, 4000, 4000)], dtype=object)
    aois = _aoi_layer(geoms, cells=write_cell_pieces(cut_layer([np.asarray([g], dtype=object) for g in geoms], CELL), tmp_path / "a"))
    annotated = AnnotatedArea(geoms, "annotated (test)", cells=write_cell_pieces(cut_layer([geoms], CELL), tmp_path / "b"))
    fields = _fields(rng, 50)
    aoi, fraction = locate(fields, shapely.area(fields), Sites(1000.0, aois, annotated), annotate=True)
    whole_aois = _aoi_layer(geoms, *_whole_pieces(geoms))
    whole_ann = AnnotatedArea(geoms, "annotated (test)", pieces=grid_pieces(geoms, CELL), cell_m=CELL)
    ref_aoi, ref_fraction = locate(fields, shapely.area(fields), Sites(1000.0, whole_aois, whole_ann), annotate=True)
    np.testing.assert_array_equal(aoi, ref_aoi)
    assert fraction.tobytes() == ref_fraction.tobytes()
    assert overlapping_aois(aois) == [(0, 1)]


def test_an_empty_layer_has_no_pieces(tmp_path):
    cells = write_cell_pieces(cut_layer([np.empty(0, dtype=object)], CELL), tmp_path / "e")
    pieces, owner = cells.pieces_in()
    assert len(pieces) == 0 and len(owner) == 0 and isinstance(cells, CellPieces)


def test_whole_cells_answer_without_geometry(tmp_path):
    # Rows strictly inside whole cells are answered by the cell index: with every block of
    # boundary pieces removed, they still get their AOI and a fraction of 1.
    geoms = np.asarray([box(-50, -50, 10_050, 10_050), box(5_000, 5_000, 20_000, 20_000)], dtype=object)
    aois = _aoi_layer(geoms, cells=write_cell_pieces(cut_layer([np.asarray([g], dtype=object) for g in geoms], CELL), tmp_path / "a"))
    annotated = AnnotatedArea(geoms, "annotated (test)", cells=write_cell_pieces(cut_layer([geoms], CELL), tmp_path / "b"))
    for block in tmp_path.glob("*/block_*.npz"):
        block.unlink()
    points = shapely.points([[150.5, 220.25], [4_999.0, 120.0], [12_000.5, 15_000.5]])
    np.testing.assert_array_equal(first_aoi(aois, points), [0, 0, 1])
    fields = np.asarray([box(310, 320, 390, 399), box(12_001, 15_001, 12_099, 15_099)], dtype=object)
    assert annotated_fractions(annotated, fields, shapely.area(fields)).tolist() == [1.0, 1.0]
    # Empty rows: in no AOI, no annotated area, as the whole layer says.
    empty = np.asarray([shapely.from_wkt("POINT EMPTY")], dtype=object)
    assert first_aoi(aois, empty).tolist() == first_aoi(_aoi_layer(geoms, *_whole_pieces(geoms)), empty).tolist() == [-1]
    nothing = np.asarray([shapely.from_wkt("POLYGON EMPTY")], dtype=object)
    assert annotated_fractions(annotated, nothing, np.zeros(1)).tolist() == [0.0]
    # A cell both AOIs hold whole is decided on its squares: the first AOI by position.
    assert first_aoi(aois, shapely.points([[7_000.5, 7_000.5]])).tolist() == [0]
    # Near the first AOI's edge the boundary pieces are needed, and they are gone.
    with pytest.raises(FileNotFoundError):
        first_aoi(aois, shapely.points([[10_000.5, 300.5]]))


def test_the_clients_copy_of_the_site_layers_drops_only_the_equal_area_polygons(tmp_path):
    """A distributed run's client keeps the AOIs' ids, keys, source polygons and overlaps and
    the cell indexes; the equal-area polygons (the workers' lookups) are left out, and the
    AOI output layer made from the copy is the one made from the whole layers."""
    import pickle

    import geopandas
    import pandas as pd

    from evalcore.levels import aois_frame, prepare_sites
    from evalcore.options import check_options

    crs = "EPSG:32633"
    aoi = geopandas.GeoDataFrame({"name": ["a", "b"]}, geometry=[shapely.box(500_000, 5_000_000, 520_000, 5_030_000),
                                                                 shapely.box(510_000, 5_010_000, 540_000, 5_020_000)], crs=crs)
    annotated = geopandas.GeoDataFrame(geometry=[shapely.box(495_000, 4_995_000, 545_000, 5_035_000)], crs=crs)
    aoi.to_parquet(tmp_path / "aoi.parquet")
    annotated.to_parquet(tmp_path / "annotated.parquet")
    options = check_options(aoi=str(tmp_path / "aoi.parquet"), aoi_id_column="name", annotated_area=str(tmp_path / "annotated.parquet"))
    whole = prepare_sites(options, options.equal_area_crs, tmp_path / "sites")
    kept = whole.kept_on_client()
    assert kept.aois.geoms_ea is None and kept.annotated.geoms_ea is None
    assert kept.aois.keys == whole.aois.keys == ["a", "b"] and kept.aois.overlaps == whole.aois.overlaps == ((0, 1),)
    assert kept.aois.cells is whole.aois.cells and kept.annotated.cells is whole.annotated.cells
    assert list(kept.annotated.geoms_source) == list(whole.annotated.geoms_source)
    table = pd.DataFrame({"aoi": ["a", "b"], "n_ref": [1, 2]})
    assert aois_frame(table, kept.aois).to_wkb().equals(aois_frame(table, whole.aois).to_wkb())
    assert len(pickle.dumps(kept)) < len(pickle.dumps(whole))
    # Layers held as pieces (no store) fall back on the equal-area polygons: no copy without them.
    with pytest.raises(ValueError, match="cell index"):
        prepare_sites(options, options.equal_area_crs).kept_on_client()


def test_the_site_layers_made_one_kind_per_task_and_joined_are_the_whole(tmp_path):
    """A cluster run prepares the AOIs and the annotated area on two tasks and joins them
    (:meth:`Sites.joined`): the same keys, overlaps and cell indexes as one call for both;
    each part holds only its kind; an unknown kind is refused."""
    import geopandas

    from evalcore.levels import Sites, prepare_sites
    from evalcore.options import check_options

    crs = "EPSG:32633"
    aoi = geopandas.GeoDataFrame({"name": ["a", "b"]}, geometry=[shapely.box(500_000, 5_000_000, 520_000, 5_030_000),
                                                                 shapely.box(510_000, 5_010_000, 540_000, 5_020_000)], crs=crs)
    annotated = geopandas.GeoDataFrame(geometry=[shapely.box(495_000, 4_995_000, 545_000, 5_035_000).difference(
        shapely.box(515_000, 5_012_000, 517_000, 5_014_500))], crs=crs)
    aoi.to_parquet(tmp_path / "aoi.parquet")
    annotated.to_parquet(tmp_path / "annotated.parquet")
    options = check_options(aoi=str(tmp_path / "aoi.parquet"), aoi_id_column="name", annotated_area=str(tmp_path / "annotated.parquet"))
    whole = prepare_sites(options, options.equal_area_crs, tmp_path / "whole")
    aoi_part = prepare_sites(options, options.equal_area_crs, tmp_path / "parts", ("aoi",))
    annotated_part = prepare_sites(options, options.equal_area_crs, tmp_path / "parts", ("annotated_area",))
    assert aoi_part.annotated is None and annotated_part.aois is None
    joined = Sites.joined(aoi_part, annotated_part)
    assert joined.tile_size_m == whole.tile_size_m
    assert joined.aois.keys == whole.aois.keys == ["a", "b"] and joined.aois.overlaps == whole.aois.overlaps == ((0, 1),)
    for got, expected in ((joined.aois.cells, whole.aois.cells), (joined.annotated.cells, whole.annotated.cells)):
        for name in ("whole", "x", "y", "owner"):
            assert np.array_equal(getattr(got, name), getattr(expected, name)), name
        assert len(expected.x) > 0
    assert shapely.equals(joined.annotated.geoms_ea, whole.annotated.geoms_ea).all()
    with pytest.raises(ValueError, match="unknown site layer kinds"):
        prepare_sites(options, options.equal_area_crs, tmp_path / "bad", ("aois",))
