"""Tests of evalcore.synth: layout, error mix, bad rows, determinism and file output."""

from __future__ import annotations

import geopandas
import numpy as np
import pandas as pd
import pytest
import shapely

from evalcore.synth import BAD_ROW_KINDS, PRED_CRS, REF_CRS, make_layers, write_layers

N_REF = 3000
SEED = 7
METRIC_CRS = "EPSG:5070"  # Conus Albers: equal-area, metres
ZONE_BOUNDARIES_LON = (-114.0, -108.0, -102.0, -96.0)


@pytest.fixture(scope="module")
def layers() -> tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]:
    return make_layers(N_REF, SEED)


@pytest.fixture(scope="module")
def pred(layers) -> geopandas.GeoDataFrame:
    return layers[0]


@pytest.fixture(scope="module")
def ref(layers) -> geopandas.GeoDataFrame:
    return layers[1]


def polygonal_valid(layer: geopandas.GeoDataFrame) -> np.ndarray:
    """Rows holding a non-empty, valid Polygon or MultiPolygon."""
    geoms = layer.geometry.values
    return (
        np.isin(layer.geom_type.to_numpy(), ["Polygon", "MultiPolygon"])
        & ~shapely.is_empty(geoms)
        & shapely.is_valid(geoms)
    )


@pytest.fixture(scope="module")
def ref_fields_m(ref) -> np.ndarray:
    """Valid reference fields in a metric equal-area CRS."""
    return ref[polygonal_valid(ref)].to_crs(METRIC_CRS).geometry.values


def assert_layers_equal(a: geopandas.GeoDataFrame, b: geopandas.GeoDataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns="geometry"), b.drop(columns="geometry"))
    assert a.crs == b.crs
    assert list(shapely.to_wkb(a.geometry.values)) == list(shapely.to_wkb(b.geometry.values))


# --- determinism -------------------------------------------------------------


def test_same_seed_gives_identical_layers():
    pred_a, ref_a = make_layers(400, 11)
    pred_b, ref_b = make_layers(400, 11)
    assert_layers_equal(pred_a, pred_b)
    assert_layers_equal(ref_a, ref_b)


def test_different_seed_gives_different_layers():
    pred_a, ref_a = make_layers(400, 11)
    pred_b, ref_b = make_layers(400, 12)
    wkb_a, wkb_b = shapely.to_wkb(ref_a.geometry.values), shapely.to_wkb(ref_b.geometry.values)
    assert list(wkb_a) != list(wkb_b)
    assert not np.array_equal(pred_a["score"].to_numpy(), pred_b["score"].to_numpy()[: len(pred_a)])


def test_global_random_state_is_untouched():
    np.random.seed(0)
    expected = np.random.random(3)
    np.random.seed(0)
    make_layers(50, 1)
    assert np.array_equal(np.random.random(3), expected)


# --- schema ------------------------------------------------------------------


def test_row_counts(ref, pred):
    assert len(ref) == N_REF + len(BAD_ROW_KINDS)
    # Misses and merges remove predictions, splits and false positives add some.
    assert 0.8 * N_REF < len(pred) < 1.2 * N_REF


def test_without_bad_rows_every_row_is_a_valid_polygon():
    pred, ref = make_layers(300, 3, bad_rows=False)
    assert len(ref) == 300
    assert polygonal_valid(ref).all()
    assert polygonal_valid(pred).all()


def test_crs(ref, pred):
    assert ref.crs == REF_CRS == "EPSG:4326"
    assert pred.crs == PRED_CRS == "EPSG:5070"


def test_columns_and_dtypes(ref, pred):
    assert list(ref.columns) == ["field_id", "stratum", "crop", "geometry"]
    assert list(pred.columns) == ["pred_id", "score", "crop", "geometry"]
    assert isinstance(ref.index, pd.RangeIndex) and isinstance(pred.index, pd.RangeIndex)
    assert ref["field_id"].dtype == np.int64 and ref["field_id"].is_unique
    assert pred["pred_id"].dtype == np.int64 and pred["pred_id"].is_unique
    assert pred["score"].dtype == np.float64
    assert pred["score"].between(0.0, 1.0).all()
    for column in ("stratum", "crop"):
        assert pd.api.types.is_string_dtype(ref[column]) or ref[column].dtype == object
    assert 0 < ref["stratum"].isna().sum() < 0.01 * len(ref)
    assert 3 <= ref["stratum"].nunique() <= 10
    assert ref["crop"].notna().all() and ref["crop"].nunique() >= 3
    assert pred["crop"].notna().all() and set(pred["crop"]) <= set(ref["crop"])


def test_predicted_crop_is_mostly_the_fields_with_the_declared_confusions(ref, pred):
    """The matched predictions' crops: the field's in most pairs, else the crop it is declared confused with."""
    import evalcore
    from evalcore.synth.constants import _CROP_CONFUSION

    c = evalcore.evaluate(pred, ref, class_column="crop", iou_sweep_thresholds=None)["classes"]
    counts = np.array(c["confusion"]["counts"])
    names = c["classes"]
    assert 0.8 < c["overall_accuracy"] < 0.97
    declared = sum(counts[names.index(a), names.index(b)] for a, (b, _) in _CROP_CONFUSION.items() if a in names and b in names)
    # most confusions are declared ones; the rest are merged predictions matched to the other field
    assert declared >= 0.85 * (counts.sum() - np.trace(counts))
    # corn is taken for sorghum in about 12 % of its matched fields (binomial: within 5 sigma)
    corn, sorghum = names.index("corn"), names.index("sorghum")
    n = counts[corn].sum()
    assert abs(counts[corn, sorghum] - 0.12 * n) < 5 * np.sqrt(0.12 * 0.88 * n)



def test_ids_are_not_row_positions(ref):
    assert 0 in set(ref["field_id"])
    assert (ref["field_id"].to_numpy() != np.arange(len(ref))).mean() > 0.9


# --- layout ------------------------------------------------------------------


def test_fields_span_at_least_three_utm_zones(ref):
    centroid_lon = shapely.get_coordinates(shapely.centroid(ref.geometry.values[polygonal_valid(ref)]))[:, 0]
    zones = np.floor((centroid_lon + 180.0) / 6.0).astype(int) + 1
    assert len(set(zones.tolist())) >= 3


def test_some_valid_field_crosses_a_utm_zone_boundary(ref):
    bounds = shapely.bounds(ref.geometry.values[polygonal_valid(ref)])
    crosses = np.zeros(len(bounds), dtype=bool)
    for lon in ZONE_BOUNDARIES_LON:
        crosses |= (bounds[:, 0] < lon) & (bounds[:, 2] > lon)
    assert crosses.any()


def test_zone_boundary_crossing_holds_for_tiny_layers():
    _, ref = make_layers(8, 0, bad_rows=False)
    bounds = shapely.bounds(ref.geometry.values)
    assert ((bounds[:, 0] < -108.0) & (bounds[:, 2] > -108.0)).any()
    assert ((bounds[:, 0] < -102.0) & (bounds[:, 2] > -102.0)).any()


def test_fields_lie_in_the_great_plains(ref):
    lon_min, lat_min, lon_max, lat_max = ref.total_bounds
    assert -115.0 < lon_min and lon_max < -95.0
    assert 31.0 < lat_min and lat_max < 46.0


def test_reference_fields_do_not_overlap(ref_fields_m):
    pairs = shapely.STRtree(ref_fields_m).query(ref_fields_m, predicate="intersects")
    pairs = pairs[:, pairs[0] != pairs[1]]
    assert pairs.shape[1] == 0


def test_field_areas(ref_fields_m):
    area_ha = shapely.area(ref_fields_m) / 10_000.0
    assert area_ha.min() >= 0.1 * 0.99
    assert area_ha.max() <= 200.0 * 1.01
    assert 1.0 < np.median(area_ha) < 10.0
    assert area_ha.max() > 30.0  # a long tail of large fields


def test_field_shapes(ref):
    valid = ref.geometry.values[polygonal_valid(ref)]
    type_id = shapely.get_type_id(valid)
    assert (shapely.get_num_interior_rings(valid) > 0).sum() > 10
    assert (type_id == 6).sum() > 10  # MultiPolygon
    n_coords = shapely.get_num_coordinates(valid)
    assert ((n_coords >= 33) & (type_id == 3)).sum() > 50  # centre pivots
    rectangles = valid[(n_coords == 5) & (type_id == 3)]
    assert len(rectangles) > 0.3 * len(valid)
    # Most rectangles face north (survey grid), some are rotated. Measure the angle
    # of the first edge in a local frame: east scaled by cos(latitude).
    corners = shapely.get_coordinates(rectangles).reshape(-1, 5, 2)
    east = (corners[:, 1, 0] - corners[:, 0, 0]) * np.cos(np.deg2rad(corners[:, 0, 1]))
    north = corners[:, 1, 1] - corners[:, 0, 1]
    off_grid_deg = np.abs((np.rad2deg(np.arctan2(north, east)) + 45.0) % 90.0 - 45.0)
    assert np.mean(off_grid_deg < 3.0) > 0.5
    assert np.mean(off_grid_deg > 10.0) > 0.1


# --- predictions -------------------------------------------------------------


def test_predictions_outside_bad_rows_are_valid_polygons(pred):
    assert (~polygonal_valid(pred)).sum() <= len(BAD_ROW_KINDS)


def test_error_mix_and_informative_scores(pred, ref_fields_m):
    pred_m = pred[polygonal_valid(pred)]
    pred_geoms = pred_m.geometry.values
    i_pred, i_ref = shapely.STRtree(ref_fields_m).query(pred_geoms, predicate="intersects")
    inter = shapely.area(shapely.intersection(pred_geoms[i_pred], ref_fields_m[i_ref]))
    iou = inter / (shapely.area(pred_geoms[i_pred]) + shapely.area(ref_fields_m[i_ref]) - inter)
    best_ref = np.zeros(len(ref_fields_m))
    np.maximum.at(best_ref, i_ref, iou)
    best_pred = np.zeros(len(pred_m))
    np.maximum.at(best_pred, i_pred, iou)
    # ~69 % good + ~10 % dilated/eroded match at IoU 0.5; misses have no overlap.
    assert 0.7 < np.mean(best_ref >= 0.5) < 0.9
    assert 0.04 < np.mean(best_ref == 0.0) < 0.12
    score = pred_m["score"].to_numpy()
    assert score[best_pred >= 0.5].mean() > score[best_pred < 0.5].mean() + 0.2


def test_some_false_positives_overlap_no_reference(pred, ref_fields_m):
    pred_geoms = pred.geometry.values[polygonal_valid(pred)]
    i_pred, _ = shapely.STRtree(ref_fields_m).query(pred_geoms, predicate="intersects")
    n_free = len(pred_geoms) - len(np.unique(i_pred))
    # About 2.5 % of N_REF lie in empty space or outside the clusters.
    assert 0.015 * N_REF < n_free < 0.05 * N_REF


def test_predictions_rarely_overlap_each_other(pred):
    geoms = pred.geometry.values[polygonal_valid(pred)]
    pairs = shapely.STRtree(geoms).query(geoms, predicate="intersects")
    pairs = pairs[:, pairs[0] < pairs[1]]
    shared = shapely.area(shapely.intersection(geoms[pairs[0]], geoms[pairs[1]]))
    smaller = np.minimum(shapely.area(geoms[pairs[0]]), shapely.area(geoms[pairs[1]]))
    assert np.count_nonzero(shared > 0.1 * smaller) < 0.01 * len(geoms)


# --- bad rows ----------------------------------------------------------------


@pytest.mark.parametrize("layer_name", ["pred", "ref"])
def test_bad_rows_of_every_kind(layer_name, request):
    layer = request.getfixturevalue(layer_name)
    geoms = layer.geometry.values
    geom_type = layer.geom_type
    assert shapely.is_missing(geoms).sum() == 1
    assert shapely.is_empty(geoms).sum() == 1
    assert (geom_type == "Point").sum() == 1
    assert (geom_type == "LineString").sum() == 1
    polygons = geoms[np.isin(geom_type.to_numpy(), ["Polygon", "MultiPolygon"])]
    invalid = polygons[~shapely.is_valid(polygons)]
    assert len(invalid) == 2
    area = shapely.area(invalid)
    bowtie, zero_area = invalid[np.argmax(area)], invalid[np.argmin(area)]
    assert shapely.area(zero_area) == 0.0
    repaired = shapely.make_valid(bowtie)
    assert shapely.is_valid(repaired) and shapely.area(repaired) > 0


def test_bad_rows_are_spread_through_the_layer(ref, pred):
    for layer in (ref, pred):
        i_bad = np.flatnonzero(~polygonal_valid(layer))
        assert len(i_bad) == len(BAD_ROW_KINDS)
        assert not np.array_equal(i_bad, np.arange(len(layer) - len(i_bad), len(layer)))
        assert not np.array_equal(i_bad, np.arange(len(i_bad)))


# --- edge cases and arguments ------------------------------------------------


def test_no_fields_gives_only_bad_rows():
    pred, ref = make_layers(0, 0)
    assert len(ref) == len(pred) == len(BAD_ROW_KINDS)
    pred, ref = make_layers(0, 0, bad_rows=False)
    assert len(ref) == len(pred) == 0
    assert ref.crs == REF_CRS and pred.crs == PRED_CRS


@pytest.mark.parametrize("n_clusters", [1, 3, 12])
def test_explicit_cluster_count(n_clusters):
    pred, ref = make_layers(500, 5, n_clusters=n_clusters, bad_rows=False)
    assert len(ref) == 500
    fields = ref.to_crs(METRIC_CRS).geometry.values
    pairs = shapely.STRtree(fields).query(fields, predicate="intersects")
    assert (pairs[0] == pairs[1]).all()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_ref": -1}, ValueError, "n_ref must be >= 0"),
        ({"n_ref": 2.5}, TypeError, "n_ref must be an integer"),
        ({"n_ref": 10, "n_clusters": 0}, ValueError, "n_clusters must be >= 1"),
    ],
)
def test_invalid_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_layers(**kwargs)


def test_write_layers_rejects_unknown_format(tmp_path):
    with pytest.raises(ValueError, match=r"fmt must be one of \['gpkg', 'parquet'\], but got 'shp'"):
        write_layers(tmp_path, 10, fmt="shp")
    assert list(tmp_path.iterdir()) == []


# --- files -------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "gpkg"])
def test_write_layers_round_trip(tmp_path, fmt):
    out_dir = tmp_path / "nested" / "out"
    pred_path, ref_path = write_layers(out_dir, 300, 4, fmt=fmt)
    suffix = {"parquet": ".parquet", "gpkg": ".gpkg"}[fmt]
    assert pred_path == out_dir / f"predicted{suffix}"
    assert ref_path == out_dir / f"reference{suffix}"
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(f"{n}{suffix}" for n in ("predicted", "reference", "aoi", "annotated"))
    read = geopandas.read_parquet if fmt == "parquet" else geopandas.read_file
    pred, ref = make_layers(300, 4)
    for path, expected in ((pred_path, pred), (ref_path, ref)):
        got = read(path)
        assert got.crs == expected.crs
        assert list(got.columns) == list(expected.columns)
        assert_layers_equal(got, expected)


def test_write_layers_replaces_existing_files(tmp_path):
    write_layers(tmp_path, 50, 1)
    pred_path, ref_path = write_layers(tmp_path, 80, 2, bad_rows=False)
    assert len(geopandas.read_parquet(ref_path)) == 80
    assert sorted(p.name for p in tmp_path.iterdir()) == ["annotated.parquet", "aoi.parquet", "predicted.parquet", "reference.parquet"]
