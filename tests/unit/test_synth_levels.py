"""Tests of the site layers of evalcore.synth: the AOI and annotated-area layers of write_layers."""

from __future__ import annotations

import geopandas
import numpy as np
import pytest
import shapely

from evalcore.synth import (
    LAYER_NAMES,
    PRED_CRS,
    REF_CRS,
    make_layers,
    make_site_layers,
    write_layers,
)

N_REF = 300
SEED = 7
ZONE_BOUNDARIES_LON = (-114.0, -108.0, -102.0, -96.0)


def polygons(layer: geopandas.GeoDataFrame) -> np.ndarray:
    """The non-empty valid Polygon / MultiPolygon geometries of ``layer``, in lon/lat."""
    layer = layer.to_crs(REF_CRS)
    geoms = layer.geometry.values
    keep = np.isin(layer.geom_type.to_numpy(), ["Polygon", "MultiPolygon"]) & ~shapely.is_empty(geoms) & shapely.is_valid(geoms)
    return np.asarray(geoms[keep], dtype=object)


def contains_matrix(areas: np.ndarray, geoms: np.ndarray, predicate: str) -> np.ndarray:
    """``(len(areas), len(geoms))`` booleans: ``predicate(area, geom)``."""
    tree = shapely.STRtree(geoms)
    out = np.zeros((len(areas), len(geoms)), dtype=bool)
    i_area, i_geom = tree.query(areas, predicate=predicate)
    out[i_area, i_geom] = True
    return out


def wkb(layer: geopandas.GeoDataFrame) -> list[bytes]:
    return list(shapely.to_wkb(layer.geometry.values))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    pred_path, ref_path = write_layers(out, N_REF, SEED)
    return out, pred_path, ref_path


@pytest.fixture(scope="module")
def layers(written):
    out = written[0]
    return {name: geopandas.read_parquet(out / f"{name}.parquet") for name in LAYER_NAMES}


@pytest.fixture(scope="module")
def ref_centroids(layers) -> np.ndarray:
    return shapely.centroid(polygons(layers["reference"]))


@pytest.fixture(scope="module")
def pred_polygons(layers) -> np.ndarray:
    return polygons(layers["predicted"])


# --- files -------------------------------------------------------------------


def test_write_layers_writes_four_files_and_returns_the_two_paths(written):
    out, pred_path, ref_path = written
    assert (pred_path, ref_path) == (out / "predicted.parquet", out / "reference.parquet")
    assert LAYER_NAMES == ("predicted", "reference", "aoi", "annotated")
    # Written atomically like the others: no temporary file is left behind.
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{name}.parquet" for name in LAYER_NAMES)


def test_site_layers_are_read_back_in_lon_lat(layers):
    for name in ("aoi", "annotated"):
        layer = layers[name]
        assert layer.crs == REF_CRS
        assert set(layer.geom_type) == {"Polygon"}
        assert shapely.is_valid(layer.geometry.values).all()
        assert not shapely.is_empty(layer.geometry.values).any()
        assert list(layer.index) == list(range(len(layer)))
    assert list(layers["aoi"].columns) == ["aoi_id", "name", "geometry"]
    assert list(layers["annotated"].columns) == ["area_id", "geometry"]


def test_gpkg_holds_the_site_layers_too(tmp_path):
    pred_path, _ = write_layers(tmp_path, 100, 3, fmt="gpkg")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{name}.gpkg" for name in LAYER_NAMES)
    pred, ref = make_layers(100, 3)
    aoi, annotated = make_site_layers(ref, pred, seed=3)
    for name, expected in (("aoi", aoi), ("annotated", annotated)):
        got = geopandas.read_file(pred_path.with_name(f"{name}.gpkg"), layer=name)
        assert got.crs == REF_CRS
        assert list(got.drop(columns="geometry").astype(object).itertuples(index=False)) == list(
            expected.drop(columns="geometry").astype(object).itertuples(index=False)
        )
        assert shapely.equals_exact(got.geometry.values, expected.geometry.values, tolerance=1e-9).all()


# --- AOI layer ---------------------------------------------------------------


def test_aoi_ids_and_names(layers):
    aoi = layers["aoi"]
    assert 8 <= len(aoi) <= 20
    assert aoi["aoi_id"].is_unique and aoi["name"].is_unique
    assert all(isinstance(v, str) and len(v) == 3 and v.startswith("A") for v in aoi["aoi_id"])
    assert sorted(aoi["aoi_id"]) == [f"A{k:02d}" for k in range(len(aoi))]
    # Like field_id and pred_id, an id is not its row position.
    assert list(aoi["aoi_id"]) != sorted(aoi["aoi_id"])


def test_at_least_two_aois_hold_no_field_and_touch_no_prediction(layers, ref_centroids, pred_polygons):
    aoi = layers["aoi"].geometry.values
    fields_in = contains_matrix(aoi, ref_centroids, "contains").sum(axis=1)
    preds_touching = contains_matrix(aoi, pred_polygons, "intersects").sum(axis=1)
    assert np.count_nonzero((fields_in == 0) & (preds_touching == 0)) >= 2
    # The other AOIs are not all empty: most hold fields.
    assert np.count_nonzero(fields_in > 0) >= len(aoi) // 2


def test_most_but_not_all_fields_lie_in_an_aoi(layers, ref_centroids):
    inside = contains_matrix(layers["aoi"].geometry.values, ref_centroids, "contains")
    share = inside.any(axis=0).mean()
    assert 0.5 < share < 1.0


def test_some_aois_overlap_so_that_fields_lie_in_two(layers, ref_centroids):
    aoi = layers["aoi"].geometry.values
    overlapping_pairs = [
        (i, j) for i in range(len(aoi)) for j in range(i + 1, len(aoi)) if shapely.area(shapely.intersection(aoi[i], aoi[j])) > 0
    ]
    assert len(overlapping_pairs) >= 2
    in_two = contains_matrix(aoi, ref_centroids, "contains").sum(axis=0) >= 2
    assert in_two.any()
    # A little: an overlap is a small share of either AOI.
    for i, j in overlapping_pairs:
        shared = shapely.area(shapely.intersection(aoi[i], aoi[j]))
        assert shared < 0.2 * min(shapely.area(aoi[i]), shapely.area(aoi[j]))


def test_aoi_edges_are_long_and_need_densifying(layers):
    aoi = layers["aoi"].to_crs("EPSG:32613")
    geoms = layers["aoi"].geometry.values
    # Edge lengths in UTM zone 13 (the middle zone of the data).
    xy, index = shapely.get_coordinates(shapely.get_exterior_ring(aoi.geometry.values), return_index=True)
    same = index[1:] == index[:-1]
    edge_m = np.hypot(*np.diff(xy, axis=0)[same].T)
    assert np.median(edge_m) > 8_000 and edge_m.max() > 20_000
    # Reprojecting the vertices only, or the densified edges, gives AOIs more than 5 m apart.
    densified = geopandas.GeoSeries(shapely.segmentize(geoms, 0.01), crs=REF_CRS).to_crs("EPSG:32613").values
    apart = shapely.hausdorff_distance(aoi.geometry.values, densified)
    assert apart.max() > 5.0


def test_aois_hold_fields_in_every_utm_zone_of_the_data(layers, ref_centroids):
    inside = contains_matrix(layers["aoi"].geometry.values, ref_centroids, "contains").any(axis=0)
    zone = np.floor((shapely.get_x(ref_centroids) + 180.0) / 6.0).astype(int) + 1
    assert set(zone.tolist()) == {12, 13, 14}
    assert set(zone[inside].tolist()) == set(zone.tolist())
    # AOIs around the clusters on the zone boundaries cross them.
    bounds = shapely.bounds(layers["aoi"].geometry.values)
    crossing = [lon for lon in ZONE_BOUNDARIES_LON[1:3] if ((bounds[:, 0] < lon) & (bounds[:, 2] > lon)).any()]
    assert crossing == [-108.0, -102.0]


# --- annotated-area layer ------------------------------------------------------


def test_annotated_area_covers_most_predictions_but_not_all(layers, pred_polygons):
    annotated = layers["annotated"]
    assert annotated["area_id"].dtype == np.int64
    assert sorted(annotated["area_id"]) == list(range(len(annotated)))
    assert 2 <= len(annotated) <= 20
    union = shapely.union_all(annotated.geometry.values)
    share_inside = shapely.area(shapely.intersection(pred_polygons, union)) / shapely.area(pred_polygons)
    assert (share_inside > 0.5).mean() > 0.5
    assert np.count_nonzero(share_inside < 0.5) >= 3


def test_some_false_positives_lie_outside_the_annotated_area(layers, pred_polygons):
    ref = polygons(layers["reference"])
    union = shapely.union_all(layers["annotated"].geometry.values)
    touches_a_field = contains_matrix(pred_polygons, ref, "intersects").any(axis=1)
    free = pred_polygons[~touches_a_field]
    share_inside = shapely.area(shapely.intersection(free, union)) / shapely.area(free)
    assert np.count_nonzero(share_inside < 0.5) >= 1


def test_annotated_polygons_may_overlap(layers):
    geoms = layers["annotated"].geometry.values
    assert shapely.area(shapely.union_all(geoms)) < shapely.area(geoms).sum()


# --- determinism and independence ----------------------------------------------


def test_same_seed_gives_identical_site_files(tmp_path, layers):
    write_layers(tmp_path, N_REF, SEED)
    for name in LAYER_NAMES:
        again = geopandas.read_parquet(tmp_path / f"{name}.parquet")
        assert wkb(again) == wkb(layers[name])
        assert again.drop(columns="geometry").equals(layers[name].drop(columns="geometry"))


def test_other_seed_gives_other_site_layers(layers):
    pred, ref = make_layers(N_REF, SEED + 1)
    aoi, annotated = make_site_layers(ref, pred, SEED + 1)
    assert wkb(aoi) != wkb(layers["aoi"])
    assert wkb(annotated) != wkb(layers["annotated"])


def test_site_layers_leave_the_field_layers_alone(layers):
    pred, ref = make_layers(N_REF, SEED)
    before = wkb(pred), wkb(ref)
    make_site_layers(ref, pred, SEED)
    assert (wkb(pred), wkb(ref)) == before
    # The written field layers are those of make_layers (the site layers draw from their own generator).
    assert wkb(layers["predicted"]) == before[0] and wkb(layers["reference"]) == before[1]
    assert layers["predicted"].crs == PRED_CRS


@pytest.mark.parametrize(
    ("n_ref", "seed", "kwargs"),
    [(0, 0, {"bad_rows": False}), (0, 1, {}), (40, 2, {}), (400, 3, {"n_clusters": 1}), (600, 4, {"n_clusters": 12})],
)
def test_site_layers_for_other_layouts(n_ref, seed, kwargs):
    pred, ref = make_layers(n_ref, seed, **kwargs)
    aoi, annotated = make_site_layers(ref, pred, seed)
    assert 8 <= len(aoi) <= 20 and aoi["aoi_id"].is_unique
    assert len(annotated) >= 1
    for layer in (aoi, annotated):
        assert set(layer.geom_type) == {"Polygon"} and shapely.is_valid(layer.geometry.values).all()
    preds = polygons(pred)
    fields = shapely.centroid(polygons(ref))
    empty = (contains_matrix(aoi.geometry.values, fields, "contains").sum(axis=1) == 0) & (
        contains_matrix(aoi.geometry.values, preds, "intersects").sum(axis=1) == 0
    )
    assert np.count_nonzero(empty) >= 2
