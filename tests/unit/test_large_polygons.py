"""Real large polygons (issue item 7): countries pass the split-size guard and the antimeridian check.

The geometries are built here, to the sizes of Natural Earth's countries (no download):
a Canada in EPSG:4326 with about 82,600 km of boundary, which the old guard (degrees
measured as if each were 111 km) refused as "longer than 100,000 km"; the United States
and New Zealand in EPSG:8857 (Equal Earth), which the old antimeridian check refused
because the corners of their bounding boxes are not longitudes of the polygons; Fiji
and Antarctica as Natural Earth draws them (split at ±180, along ±180 to the pole),
which cross nothing; and polygons that really cross ±180, which are still refused.
Expected areas and lengths come from pyproj's geodesic computations, not from evalcore.
"""

from __future__ import annotations


import geopandas
import numpy as np
import pytest
import shapely
from pyproj import CRS, Geod, Transformer
from shapely.geometry import MultiPolygon, Polygon, box

import evalcore
from evalcore.crs import edge_split_length, reproject_polygons
from evalcore.errors import EvalInputError
from evalcore.polygons import MAX_SPLIT_VERTICES, crosses_antimeridian, split_vertex_counts
from evalcore.prepare import prepare_layer
from tests.common import UTM, WGS84, X0, Y0, layer

EQUAL_EARTH = "EPSG:8857"
PDC_MERCATOR = "EPSG:3832"  # centred on 150 E: the antimeridian is inside the map
GEOD = Geod(ellps="WGS84")


# --------------------------------------------------------------------------------------
# Geometries
# --------------------------------------------------------------------------------------


def coast(
    lon0: float, lat0: float, rx: float, ry: float, n: int, fjords: float = 0.0, phase: float = 0.0
) -> np.ndarray:
    """A ring of ``n`` vertices (not closed) around (lon0, lat0): an ellipse with bays and,
    with ``fjords``, a zigzag of that relative depth at every vertex (a detailed coast)."""
    t = np.linspace(0.0, 2.0 * np.pi, n, endpoint=False)
    r = 1.0 + 0.05 * np.sin(9 * t + phase) + 0.02 * np.sin(40 * t + 2 * phase)
    r += fjords * np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return np.column_stack([lon0 + rx * r * np.cos(t), lat0 + ry * r * np.sin(t)])


def canada(n_coast: int = 20_000, fjords: float = 0.00075, n_islands: int = 60) -> MultiPolygon:
    """A Canada in longitude/latitude: a mainland from about -141 to -52, 42 to 72 degrees,
    and an Arctic archipelago of ``n_islands`` islands up to 83 degrees north. With the
    defaults its boundary is 82,400 km long on the ellipsoid."""
    mainland = Polygon(coast(-96.5, 57.0, 42.5, 14.0, n_coast, fjords))
    k = np.arange(n_islands)
    lons = -118.0 + 52.0 * (k % 20) / 19.0
    lats = 75.0 + 3.5 * (k // 20)
    islands = [
        Polygon(coast(lon, lat, 1.0, 0.5, 200, fjords, phase=float(i))) for i, (lon, lat) in enumerate(zip(lons, lats))
    ]
    out = MultiPolygon([mainland, *islands])
    assert out.is_valid
    return out


def united_states() -> MultiPolygon:
    """The lower 48, Alaska west to -171 (St. Lawrence Island) and Hawaii, with edges of
    at most 0.25 degree so that they follow their lines of latitude once projected."""
    conus = Polygon([
        (-124.7, 48.4), (-123.0, 49.0), (-95.2, 49.0), (-83.0, 46.1), (-67.0, 44.8), (-70.0, 41.2), (-75.5, 35.2),
        (-80.0, 25.1), (-81.8, 24.5), (-97.4, 25.9), (-106.6, 31.8), (-117.1, 32.5), (-124.4, 40.4),
    ])  # fmt: skip
    alaska = Polygon([
        (-141.0, 60.3), (-141.0, 69.6), (-156.8, 71.4), (-166.2, 68.9), (-165.0, 64.5), (-171.0, 63.8),
        (-168.9, 62.9), (-165.0, 60.5), (-162.5, 55.1), (-158.0, 56.6), (-150.0, 59.4),
    ])  # fmt: skip
    hawaii = Polygon([(-160.2, 21.9), (-156.0, 21.0), (-154.8, 19.5), (-155.9, 18.9), (-157.8, 21.2)])
    return shapely.segmentize(MultiPolygon([conus, alaska, hawaii]), 0.25)


def new_zealand() -> MultiPolygon:
    """North Island (east to 178.5) and South Island (west to 166.5)."""
    north = Polygon([(172.6, -34.4), (174.4, -35.8), (178.5, -37.7), (176.9, -39.6), (174.6, -41.3), (174.3, -39.4)])
    south = Polygon([(172.7, -40.5), (174.2, -41.7), (171.2, -44.5), (169.0, -46.7), (166.5, -46.0), (168.3, -44.0)])
    return shapely.segmentize(MultiPolygon([north, south]), 0.25)


def fiji_across() -> Polygon:
    """A polygon from 177 to -179 degrees written the way that crosses: 177 -> -179 is 4 degrees east."""
    return Polygon([(177.0, -18.0), (-179.0, -18.0), (-179.0, -16.0), (177.0, -16.0)])


def in_crs(geom: shapely.Geometry, crs: str, index: list | None = None) -> geopandas.GeoDataFrame:
    """``geom`` (longitude/latitude) as a one-row layer in ``crs``, projected vertex by vertex."""
    return geopandas.GeoDataFrame(geometry=[geom], crs=WGS84, index=index).to_crs(crs)


def concat_layers(*frames: geopandas.GeoDataFrame) -> geopandas.GeoDataFrame:
    """The rows of ``frames`` (all in one CRS) in one layer, with their index labels."""
    return geopandas.GeoDataFrame(
        geometry=np.concatenate([f.geometry.array for f in frames]),
        crs=frames[0].crs,
        index=np.concatenate([f.index for f in frames]),
    )


def geodesic_area_m2(geom: shapely.Geometry) -> float:
    """Area on the WGS 84 ellipsoid of a (multi)polygon in longitude/latitude (pyproj sums
    signed areas: exteriors are oriented counter-clockwise first)."""
    return GEOD.geometry_area_perimeter(shapely.orient_polygons(geom))[0]


def bbox_corner_lon_span(gdf: geopandas.GeoDataFrame) -> float:
    """Longitude span of the bounding box's corners: what the old check looked at."""
    x0, y0, x1, y1 = gdf.total_bounds
    lon, _ = Transformer.from_crs(gdf.crs, WGS84, always_xy=True).transform([x0, x1, x0, x1], [y0, y0, y1, y1])
    lon = np.asarray(lon)
    lon = lon[np.isfinite(lon)]
    return float(lon.max() - lon.min())


# --------------------------------------------------------------------------------------
# Split-size guard
# --------------------------------------------------------------------------------------


def test_split_vertex_counts_by_hand():
    # 100 x 50 at 50: the 100-long edges split in 2 pieces, the 50-long ones stay whole:
    # 2 + 1 + 2 + 1 pieces, plus the closing vertex. A 1 x 1 box: 4 + 1.
    with_hole = Polygon(box(0, 0, 100, 50).exterior.coords, [box(10, 10, 20, 20).exterior.coords])
    multi = MultiPolygon([box(0, 0, 100, 50), box(200, 0, 201, 1)])
    counts = split_vertex_counts(np.array([box(0, 0, 100, 50), with_hole, multi], dtype=object), 50.0)
    assert counts.tolist() == [7.0, 7.0 + 5.0, 7.0 + 5.0]
    assert split_vertex_counts(np.array([], dtype=object), 50.0).tolist() == []


def test_split_vertex_counts_match_the_split():
    # The count is what the 50 m split then creates (up to coincident points, none here).
    wgs84 = CRS.from_user_input(WGS84)
    geoms = np.array([canada(n_coast=2_000, n_islands=5), Polygon(coast(-100.0, 45.0, 0.3, 0.2, 500))], dtype=object)
    split = edge_split_length(wgs84)
    made = shapely.get_num_coordinates(reproject_polygons(geoms, wgs84, CRS.from_epsg(6933), split=split))
    assert split_vertex_counts(geoms, split).tolist() == made.astype(float).tolist()


def test_canada_passes_the_split_size_guard():
    country = canada()
    boundary_km = GEOD.geometry_length(country) / 1e3
    assert 75_000 < boundary_km < 90_000  # Natural Earth's Canada: about 82,600 km
    split = edge_split_length(CRS.from_user_input(WGS84))
    assert country.length / split * 50.0 > 1e8  # precondition: an input the old guard refused ("longer than 100,000 km")
    prep = prepare_layer(in_crs(country, WGS84), "reference")
    assert len(prep) == 1 and prep.n_dropped == 0
    n_split = split_vertex_counts(np.array([country]), split)[0]
    assert 1e6 < n_split < MAX_SPLIT_VERTICES / 50
    assert prep.area_m2[0] == pytest.approx(geodesic_area_m2(country), rel=1e-3)


def _evaluate_against_itself_and_shifted(country: MultiPolygon) -> None:
    ref = in_crs(country, WGS84)
    itself = evalcore.evaluate(ref, ref)
    assert (itself["count_tp"], itself["count_fp"], itself["count_fn"]) == (1, 0, 0)
    assert itself["iou_mean"] == 1.0
    # About 700 m east and 550 m north: a small fraction of the area changes.
    shifted = evalcore.evaluate(in_crs(shapely.affinity.translate(country, 0.01, 0.005), WGS84), ref)
    assert shifted["count_tp"] == 1
    assert 0.98 < shifted["iou_mean"] < 1.0


def test_country_sized_polygon_evaluates():
    # The extent of Canada, with a smooth coast and 8 islands: 18,000 km of boundary, 0.6 M
    # vertices after the split. The time (about 7 s) goes to shapely.covers in the pair
    # computation and to the boundary distances, in proportion to the vertices: the full
    # country (2.8 M vertices, about 90 s) runs with EVALCORE_SLOW=1.
    _evaluate_against_itself_and_shifted(canada(n_coast=3_000, fjords=0.0, n_islands=8))


@pytest.mark.slow
def test_canada_evaluates():
    _evaluate_against_itself_and_shifted(canada())


def test_split_size_guard_refuses_broken_coordinates():
    # Two edges of 1e12 m in a metre CRS: 4e10 vertices, about 3,000 GiB.
    gdf = layer([box(X0, Y0, X0 + 100, Y0 + 100), box(X0, Y0, X0 + 1e12, Y0 + 100)], UTM, index=["ok", "bad"])
    with pytest.raises(EvalInputError, match="too long to split") as info:
        prepare_layer(gdf, "predicted")
    message = str(info.value)
    needles = ("predicted layer", "row 'bad' ", "40,000,000,0", "GiB", f"{MAX_SPLIT_VERTICES:,}", "CRS", "simplify")
    for needle in needles:
        assert needle in message, needle
    assert "'ok'" not in message


def test_split_size_guard_in_degrees():
    # A zigzag over the whole globe (500 teeth from -80 to 80 degrees of latitude): about
    # 160,000 degrees of boundary, 3.6e8 vertices at 50 m in degree terms.
    x = np.linspace(-179.0, 179.0, 1000)
    y = np.where(np.arange(1000) % 2 == 0, -80.0, 80.0)
    comb = Polygon(np.column_stack([np.r_[x, 179.5, -179.5], np.r_[y, 85.0, 85.0]]))
    assert comb.is_valid
    with pytest.raises(EvalInputError, match="too long to split.*row 0 ") as info:
        prepare_layer(layer([comb], WGS84), "reference")
    assert "degree" in str(info.value)


def test_metres_labelled_as_degrees_are_refused():
    # Coordinates in metres with an EPSG:4326 label: millions of "degrees", refused by range.
    with pytest.raises(EvalInputError, match="outside longitude"):
        prepare_layer(layer([box(X0, Y0, X0 + 100, Y0 + 100)], WGS84), "reference")


# --------------------------------------------------------------------------------------
# Antimeridian
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("country", [united_states, new_zealand], ids=["united_states", "new_zealand"])
def test_projected_countries_that_cross_nothing_are_accepted(country):
    geom = country()
    gdf = in_crs(geom, EQUAL_EARTH)
    assert bbox_corner_lon_span(gdf) > 180.0  # the old check refused them for this
    prep = prepare_layer(gdf, "reference")
    assert len(prep) == 1
    # Equal Earth's straight edges of 0.25 degree are not EPSG:4326's: 0.1 % apart.
    assert prep.area_m2[0] == pytest.approx(geodesic_area_m2(geom), rel=2e-3)


@pytest.mark.parametrize("crs", [WGS84, EQUAL_EARTH, PDC_MERCATOR])
def test_polygon_across_the_antimeridian_is_refused(crs):
    # In EPSG:4326 the edge jumps from 177 to -179; in Equal Earth, projected vertex by
    # vertex, the same ring spans the whole width of the map; in PDC Mercator it is an
    # ordinary polygon around 180. Each is refused, naming the row.
    gdf = in_crs(fiji_across(), crs, index=["fiji"])
    near = in_crs(box(170.0, -18.0, 171.0, -17.0), crs, index=["near"])
    with pytest.raises(EvalInputError, match="antimeridian") as info:
        prepare_layer(concat_layers(near, gdf), "reference")
    assert "row 'fiji'." in str(info.value)


@pytest.mark.parametrize("crs", [WGS84, EQUAL_EARTH])
def test_polygons_split_at_the_antimeridian_are_accepted(crs):
    # Natural Earth's Fiji and Russia are split at ±180 into parts on both sides, and its
    # Antarctica runs along the antimeridian to the pole: none of their edges crosses.
    fiji = MultiPolygon([box(177.0, -18.0, 180.0, -16.5), box(-180.0, -17.5, -179.5, -16.8)])
    lon = np.linspace(180.0, -180.0, 241)
    coast_lat = -70.0 + 5.0 * np.sin(np.radians(3.0 * lon))
    antarctica = Polygon([(180.0, -90.0), *zip(lon, coast_lat), (-180.0, -90.0)])
    gdf = concat_layers(in_crs(fiji, crs, index=["fiji"]), in_crs(antarctica, crs, index=["antarctica"]))
    prep = prepare_layer(gdf, "reference")
    assert len(prep) == 2
    assert prep.area_m2 == pytest.approx([geodesic_area_m2(fiji), geodesic_area_m2(antarctica)], rel=5e-3)


def test_crosses_antimeridian_decides_from_the_vertices():
    wgs84 = CRS.from_user_input(WGS84)
    # A band around the globe drawn from edge to edge of the map: its edges 180 -> -180 run
    # along the antimeridian. A multipolygon crosses when one of its parts does.
    band = Polygon([(180.0, 10.0), (-180.0, 10.0), (-180.0, 11.0), (180.0, 11.0)])
    touching = box(170.0, -17.0, 180.0, -16.0)
    geoms = np.array([fiji_across(), touching, band, MultiPolygon([box(0, 0, 1, 1), fiji_across()])])
    assert crosses_antimeridian(geoms, wgs84).tolist() == [True, False, False, True]
    assert crosses_antimeridian(np.array([], dtype=object), wgs84).tolist() == []
    # Vertices PROJ cannot transform (inf) are not taken for a jump.
    far = np.array([box(X0, Y0, 1e9, Y0 + 100)])
    assert crosses_antimeridian(far, CRS.from_user_input(UTM)).tolist() == [False]


def test_a_crossing_polygon_among_many_fields_is_found():
    # The pre-filter clears boxes of fields in bulk; it must not clear the one that crosses.
    fields = [box(lon, -17.0, lon + 0.01, -16.99) for lon in np.linspace(170.0, 179.9, 400)]
    across = Polygon([(179.995, -17.0), (-179.995, -17.0), (-179.995, -16.99), (179.995, -16.99)])
    for crs in (WGS84, PDC_MERCATOR, EQUAL_EARTH, "EPSG:32760"):
        gdf = geopandas.GeoDataFrame(geometry=[*fields, across], crs=WGS84).to_crs(crs)
        with pytest.raises(EvalInputError, match="antimeridian.*row 400"):
            prepare_layer(gdf, "predicted")
        assert len(prepare_layer(gdf.iloc[:-1], "predicted")) == 400
