"""Geometry preparation (SPEC section 2): repair, drop, areas, home zone, tiles."""

from __future__ import annotations

import logging

import geopandas
import numpy as np
import pytest
import shapely
from shapely.geometry import GeometryCollection, LineString, MultiPolygon, Point, Polygon, box

from evalcore.crs import edge_split_length, equal_area_crs_from, utm_epsg_of
from evalcore.errors import CRSError, EvalInputError
from evalcore.polygons import repair_polygonal
from evalcore.prepare import prepare_layer
from pyproj import CRS
from tests.common import EA, EA_X0, EA_Y0, UTM, WGS84, X0, Y0, ea_area, layer, square

BOW_TIE = Polygon([(0, 0), (2, 2), (2, 0), (0, 2)])


# --------------------------------------------------------------------------------------
# Repair
# --------------------------------------------------------------------------------------


def test_repair_bow_tie_keeps_both_triangles():
    geoms, repaired = repair_polygonal(np.array([BOW_TIE], dtype=object))
    assert repaired.tolist() == [True]
    assert geoms[0].geom_type == "MultiPolygon"
    assert geoms[0].area == pytest.approx(2.0)  # two triangles of area 1
    assert geoms[0].is_valid


def test_repair_keeps_valid_polygons_untouched():
    poly = box(0, 0, 1, 1)
    multi = MultiPolygon([box(0, 0, 1, 1), box(2, 0, 3, 1)])
    geoms, repaired = repair_polygonal(np.array([poly, multi], dtype=object))
    assert repaired.tolist() == [False, False]
    assert geoms[0].equals(poly) and geoms[1].equals(multi)


def test_repair_drops_what_is_not_polygonal():
    collapsed = Polygon([(0, 0), (1, 0), (2, 0), (0, 0)])  # zero area: collapses
    inputs = [None, Point(0, 0), LineString([(0, 0), (1, 1)]), collapsed, GeometryCollection([Point(0, 0)])]
    geoms, repaired = repair_polygonal(np.array(inputs, dtype=object))
    assert all(g is None or g.is_empty for g in geoms)
    # Through prepare_layer every row is dropped, and a dropped row is not "repaired".
    shifted = [None if g is None else shapely.affinity.translate(g, X0, Y0) for g in inputs]
    prep = prepare_layer(layer(shifted), "reference")
    assert (len(prep), prep.n_dropped, prep.n_repaired) == (0, 5, 0)


def test_repair_keeps_polygonal_parts_of_a_collection():
    coll = GeometryCollection([box(0, 0, 1, 1), LineString([(5, 5), (6, 6)]), Point(9, 9), box(2, 0, 3, 1)])
    geoms, _ = repair_polygonal(np.array([coll], dtype=object))
    assert geoms[0].area == pytest.approx(2.0)
    assert shapely.get_type_id(geoms[0]) in (3, 6)  # Polygon or MultiPolygon


def test_repair_without_structure_method_raises_import_error(monkeypatch):
    def old_make_valid(geometry, **kwargs):
        if "method" in kwargs:
            raise TypeError("make_valid() got an unexpected keyword argument 'method'")
        return geometry

    monkeypatch.setattr(shapely, "make_valid", old_make_valid)
    with pytest.raises(ImportError):
        repair_polygonal(np.array([BOW_TIE], dtype=object))
    # No repair needed: no error.
    geoms, _ = repair_polygonal(np.array([box(0, 0, 1, 1)], dtype=object))
    assert geoms[0].area == 1.0


# --------------------------------------------------------------------------------------
# prepare_layer: rows, counts, areas
# --------------------------------------------------------------------------------------


def test_prepare_counts_and_positions():
    bow_tie = shapely.affinity.translate(shapely.affinity.scale(BOW_TIE, 50, 50, origin=(0, 0)), X0, Y0)
    geoms = [
        None,
        square(X0, Y0, 100),
        Point(X0, Y0),
        bow_tie,
        Polygon(),
        LineString([(X0, Y0), (X0 + 1, Y0)]),
        square(X0 + 500, Y0, 50),
    ]
    gdf = layer(geoms, index=["a", "b", "c", "d", "e", "f", "g"])
    prep = prepare_layer(gdf, "reference")
    assert prep.positions.tolist() == [1, 3, 6]
    assert prep.labels.tolist() == ["b", "d", "g"]
    assert (prep.n_input, prep.n_dropped, prep.n_repaired) == (7, 4, 1)
    assert len(prep) == 3
    assert prep.area_m2[0] == pytest.approx(ea_area(square(X0, Y0, 100), UTM), rel=1e-6)
    assert prep.area_m2[1] == pytest.approx(ea_area(square(X0, Y0, 100), UTM) / 2, rel=1e-6)
    assert prep.area_m2[2] == pytest.approx(ea_area(square(X0 + 500, Y0, 50), UTM), rel=1e-6)


def test_prepare_geoseries_and_z_coordinates():
    poly_z = Polygon([(X0, Y0, 5), (X0 + 100, Y0, 5), (X0 + 100, Y0 + 100, 7), (X0, Y0 + 100, 7)])
    prep = prepare_layer(geopandas.GeoSeries([poly_z], crs=UTM), "predicted")
    assert not shapely.has_z(prep.geoms_source[0])
    assert prep.area_m2[0] == pytest.approx(ea_area(square(X0, Y0, 100), UTM), rel=1e-9)


def test_z_and_m_rows_beside_flat_ones_are_flattened_and_give_the_flat_results():
    # Only rows with a third or fourth ordinate go through force_2d (issue 29): a layer
    # mixing flat, Z, M and ZM rows must prepare exactly like the same layer all flat.
    rings = [[(X0 + 300 * k + dx, Y0 + dy) for dx, dy in ((0, 0), (100, 0), (100, 100), (0, 100), (0, 0))] for k in range(4)]
    flat = [Polygon(ring) for ring in rings]
    with_z = Polygon([(x, y, 9.0) for x, y in rings[1]])
    with_m = shapely.from_wkt("POLYGON M ((%s))" % ", ".join(f"{x!r} {y!r} 1" for x, y in rings[2]))
    with_zm = shapely.from_wkt("POLYGON ZM ((%s))" % ", ".join(f"{x!r} {y!r} 2 3" for x, y in rings[3]))
    mixed = prepare_layer(geopandas.GeoSeries([flat[0], with_z, with_m, with_zm], crs=UTM), "reference")
    plain = prepare_layer(geopandas.GeoSeries(flat, crs=UTM), "reference")
    assert not shapely.has_z(mixed.geoms_source).any() and not shapely.has_m(mixed.geoms_source).any()
    assert shapely.to_wkb(mixed.geoms_source).tolist() == shapely.to_wkb(plain.geoms_source).tolist()
    assert mixed.area_m2.tobytes() == plain.area_m2.tobytes()
    assert mixed.perimeter_m.tolist() == [400.0] * 4  # UTM squares of 100 m, in their own zone


def test_area_in_the_equal_area_crs_is_exact_for_its_own_coordinates():
    prep = prepare_layer(layer([square(EA_X0, EA_Y0, 100), box(EA_X0, EA_Y0, EA_X0 + 30, EA_Y0 + 70)], EA), "reference")
    assert prep.area_m2.tolist() == [10_000.0, 2_100.0]


def test_area_of_a_lon_lat_box_is_the_ellipsoidal_area():
    # 0.01 deg x 0.01 deg at lat 40 on WGS 84: EPSG:6933 is equal-area, so its area is
    # the geodesic (ellipsoidal) area of the box, to the precision of the projection.
    from pyproj import Geod

    lon_lat_box = box(-105.0, 40.0, -104.99, 40.01)
    prep = prepare_layer(layer([lon_lat_box], WGS84), "reference")
    # Geod.geometry_area_perimeter follows geodesic edges; the box's E-W edges are
    # parallels, so compare on a finely segmentized box (parallels ~ geodesics at 1e-5).
    area, _ = Geod(ellps="WGS84").geometry_area_perimeter(shapely.segmentize(lon_lat_box, 1e-5))
    assert prep.area_m2[0] == pytest.approx(abs(area), rel=1e-6)


def test_edges_are_split_at_50_m_before_reprojection_but_not_for_utm():
    side = 1_000.0
    prep = prepare_layer(layer([square(X0, Y0, side)]), "reference")
    # 4 edges of 1000 m in pieces of at most 50 m: at least 80 segments in EPSG:6933.
    assert shapely.get_num_coordinates(prep.geoms_ea[0]) >= 4 * 20 + 1
    # The UTM geometry is reprojected from the source without the split.
    assert shapely.get_num_coordinates(prep.geoms_utm[0]) == 5
    assert edge_split_length(CRS.from_user_input(UTM)) == 50.0
    assert edge_split_length(CRS.from_user_input(WGS84)) == pytest.approx(50.0 / 111_320.0)
    assert edge_split_length(CRS.from_user_input("EPSG:2263")) == pytest.approx(50.0 / 0.3048006096, rel=1e-6)


def test_long_utm_edge_area_uses_the_split():
    # A 20 km x 100 m strip: reprojecting only its 4 corners would turn its long edges into
    # chords; with the split the area equals that of the finely segmentized strip.
    strip = box(X0 - 10_000, Y0, X0 + 10_000, Y0 + 100)
    prep = prepare_layer(layer([strip]), "reference")
    assert prep.area_m2[0] == pytest.approx(ea_area(strip, UTM), rel=1e-7)


def test_perimeter_counts_all_rings_in_the_home_zone():
    with_hole = Polygon(
        [(X0, Y0), (X0 + 100, Y0), (X0 + 100, Y0 + 100), (X0, Y0 + 100)],
        [[(X0 + 40, Y0 + 40), (X0 + 60, Y0 + 40), (X0 + 60, Y0 + 60), (X0 + 40, Y0 + 60)]],
    )
    multi = MultiPolygon([square(X0 + 500, Y0, 100), square(X0 + 700, Y0, 50)])
    prep = prepare_layer(layer([with_hole, multi]), "reference")
    assert prep.perimeter_m.tolist() == [480.0, 600.0]
    assert prep.utm_epsg.tolist() == [32613, 32613]
    assert prep.area_m2[0] == pytest.approx(ea_area(with_hole, UTM), rel=1e-6)


def test_empty_layers():
    prep = prepare_layer(geopandas.GeoDataFrame(geometry=[]), "reference")
    assert (len(prep), prep.n_input, prep.n_dropped) == (0, 0, 0)
    prep = prepare_layer(layer([None, Polygon()], crs=None), "predicted")
    assert (len(prep), prep.n_input, prep.n_dropped) == (2 - 2, 2, 2)


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


def test_no_crs_is_refused_naming_the_layer():
    with pytest.raises(CRSError, match="predicted"):
        prepare_layer(layer([square(X0, Y0, 1)], crs=None), "predicted")


def test_not_a_layer_is_a_type_error():
    with pytest.raises(TypeError, match="reference"):
        prepare_layer([square(X0, Y0, 1)], "reference")


def test_antimeridian_in_a_projected_crs():
    # In EPSG:3832 (PDC Mercator, centred on 150 E) a box straddling 180 is an ordinary box.
    pdc = CRS.from_epsg(3832)
    from pyproj import Transformer

    t = Transformer.from_crs(WGS84, pdc, always_xy=True)
    (x0, x1), (y0, y1) = t.transform([179.9, -179.9], [-20.0, -19.9])
    with pytest.raises(EvalInputError, match="antimeridian"):
        prepare_layer(layer([box(x0, y0, x1, y1)], "EPSG:3832"), "reference")


@pytest.mark.parametrize("value", ["EPSG:4326", 4326, "EPSG:2263", "EPSG:4979"])
def test_equal_area_crs_must_be_projected_in_metres(value):
    with pytest.raises(CRSError, match="equal_area_crs"):
        equal_area_crs_from(value)
    with pytest.raises(ValueError, match="equal_area_crs"):
        prepare_layer(layer([square(X0, Y0, 100)]), "reference", equal_area_crs=value)


def test_equal_area_crs_accepts_projected_metres():
    assert equal_area_crs_from(6933).to_epsg() == 6933
    assert equal_area_crs_from("EPSG:5070").to_epsg() == 5070


def test_area_change_warning(caplog):
    gdf = layer([square(X0, Y0, 100)])
    with caplog.at_level(logging.WARNING, logger="evalcore"):
        prepare_layer(gdf, "reference", equal_area_crs="EPSG:6933")
        prepare_layer(gdf, "reference", equal_area_crs="EPSG:5070")  # Albers equal-area
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    caplog.clear()
    # UTM is conformal: at the central meridian areas shrink by 0.9996² (-0.08 %).
    with caplog.at_level(logging.WARNING, logger="evalcore"):
        prepare_layer(gdf, "reference", equal_area_crs=UTM)
    assert [r for r in caplog.records if r.levelno == logging.WARNING]
    caplog.clear()
    # Mollweide on a sphere is not equal-area for WGS 84 coordinates (seed 000).
    with caplog.at_level(logging.WARNING, logger="evalcore"):
        prepare_layer(gdf, "reference", equal_area_crs="ESRI:54009")
    assert [r for r in caplog.records if r.levelno == logging.WARNING]


# --------------------------------------------------------------------------------------
# Home zone and tiles
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lon, lat, epsg",
    [
        (-105.0, 40.0, 32613),
        (3.0, -1.0, 32731),
        (0.5, 0.0, 32631),  # the equator belongs to the north
        (-180.0, 10.0, 32601),
        (179.99, 10.0, 32660),
        (-108.0, 40.0, 32613),  # a zone's west edge belongs to it
        (-108.0001, 40.0, 32612),
        (5.0, 60.0, 32631),  # no Norway exception (would be 32)
        (10.0, 78.0, 32632),  # no Svalbard exception (would be 33)
        (20.0, -34.0, 32734),
    ],
)
def test_utm_zone_of_a_point(lon, lat, epsg):
    assert utm_epsg_of(np.array([lon]), np.array([lat])).tolist() == [epsg]


def test_home_zone_is_the_zone_of_the_centroid():
    # Both boxes straddle lon -108 (zones 12 | 13); their centroids fall on either side.
    west = box(-108.5, 40.0, -107.6, 40.1)  # centroid -108.05
    east = box(-108.4, 40.0, -107.5, 40.1)  # centroid -107.95
    prep = prepare_layer(layer([west, east], WGS84), "reference")
    assert prep.utm_epsg.tolist() == [32612, 32613]
    # The UTM geometry is in the home zone: its perimeter is a length in metres there.
    expected = [
        geopandas.GeoSeries([west], crs=WGS84).to_crs(32612).length.iloc[0],
        geopandas.GeoSeries([east], crs=WGS84).to_crs(32613).length.iloc[0],
    ]
    np.testing.assert_allclose(prep.perimeter_m, expected, rtol=1e-9)
    np.testing.assert_allclose(prep.lon, [-108.05, -107.95], atol=1e-3)


def test_tiles_are_the_floor_of_the_centroid_over_the_tile_size():
    gdf = layer([square(X0, Y0, 100), square(X0 + 1_200, Y0 - 600, 100), square(X0 - 300, Y0, 100)])
    prep = prepare_layer(gdf, "reference", partition_size_m=1_000.0)
    # centroids (500050, 4400050), (501250, 4399450), (499750, 4400050)
    assert prep.partition_x.tolist() == [500, 501, 499]
    assert prep.partition_y.tolist() == [4400, 4399, 4400]
    prep = prepare_layer(gdf, "reference")  # 50 km
    assert prep.partition_x.tolist() == [10, 10, 9]
    assert prep.partition_y.tolist() == [88, 87, 88]
    assert prep.partition_size_m == 50_000.0


def test_reproject_polygons_with_a_split_gives_the_coordinates_of_segmentize_then_transform():
    """The flat split + reprojection equals shapely.segmentize then a vertex-by-vertex transform,
    bit for bit, for polygons, holes and multipolygons; types are kept and empties stay empty."""
    from pyproj import CRS

    from evalcore.crs import reproject_polygons, transform_geoms

    rng = np.random.default_rng(5)
    x0, y0 = 500_000.0, 4_400_000.0
    geoms = [shapely.Polygon(), shapely.box(x0, y0, x0 + 20, y0 + 20)]
    for _ in range(40):
        cx, cy = x0 + rng.uniform(0, 5000), y0 + rng.uniform(0, 5000)
        outer = shapely.buffer(shapely.Point(cx, cy), rng.uniform(30, 400), quad_segs=int(rng.integers(1, 8)))
        hole = shapely.buffer(shapely.Point(cx, cy), 10.0, quad_segs=2)
        geoms.append(outer.difference(hole) if rng.random() < 0.5 else outer)
    geoms.append(shapely.MultiPolygon([shapely.box(x0, y0, x0 + 130, y0 + 70), shapely.box(x0 + 300, y0, x0 + 301, y0 + 260)]))
    geoms = np.array(geoms, dtype=object)
    src, dst = CRS.from_epsg(32613), CRS.from_epsg(6933)
    expected = transform_geoms(shapely.segmentize(geoms, 50.0), src, dst)
    got = reproject_polygons(geoms, src, dst, split=50.0)
    assert [g.geom_type for g in got] == [g.geom_type for g in expected]
    assert shapely.to_wkb(got).tolist() == shapely.to_wkb(expected).tolist()
