"""Pixel metrics through evaluate and the CLI (issue 16): seed 001's merged fields, zone
lines, the annotated mask, the tiles table, and bad input."""

from __future__ import annotations

import json
import math

import geopandas
import pytest
from shapely.geometry import box

import evalcore
from tests.common import run_cli

UTM33 = "EPSG:32633"
X0, Y0 = 500_000.0, 5_000_000.0  # a tile corner at 10 km tiles


def layer(geoms, crs=UTM33):
    return geopandas.GeoDataFrame(geometry=list(geoms), crs=crs)


def test_seed_001_two_fields_merged_lose_few_pixels_and_half_the_objects():
    # Fields of 300 m x 100 m and 100 m x 100 m, 10 m apart; the prediction covers both and
    # the gap: IoU 300/410 with the first (matched), 100/410 with the second (missed).
    a = box(X0 + 1000, Y0 + 1000, X0 + 1300, Y0 + 1100)
    b = box(X0 + 1310, Y0 + 1000, X0 + 1410, Y0 + 1100)
    merged = box(X0 + 1000, Y0 + 1000, X0 + 1410, Y0 + 1100)
    m = evalcore.evaluate(layer([merged]), layer([a, b]), pixel_gsd_m=10.0)
    assert m["recall"] == 0.5 and m["count_merges"] == 1
    px = m["pixel"]
    # 10 m pixels: the fields 30 x 10 and 10 x 10 pixels, the gap 1 x 10, all centres inside.
    assert (px["count_tp"], px["count_fp"], px["count_fn"]) == (400, 10, 0)
    assert px["count_pixels"] == 1000 * 1000  # one 10 km tile, inside the band
    accuracy = (px["count_tp"] + px["count_tn"]) / px["count_pixels"]
    assert accuracy > 0.99
    assert px["micro"]["recall"] == 1.0 and px["micro"]["precision"] == pytest.approx(400 / 410)
    assert px["micro"]["f1"] == pytest.approx(800 / 810)  # Dice
    assert px["micro"]["iou"] == pytest.approx(px["micro"]["f1"] / (2 - px["micro"]["f1"]))


def test_only_the_tiles_holding_a_field_or_a_prediction_are_rasterised():
    # The tile edge at x0 + 10 km cuts the field in two; its centroid's tile is the only
    # tile there is, so only the half inside it is counted (SPEC 6.7: evaluated pixels
    # lie in a tile holding a reference field or a prediction).
    field = box(X0 + 9_900, Y0 + 500, X0 + 10_100, Y0 + 600)
    m = evalcore.evaluate(layer([field]), layer([field]), pixel_gsd_m=10.0)
    assert m["pixel"]["count_fp"] == 0 and m["pixel"]["count_fn"] == 0
    assert m["tiles"]["count_tiles"] == 1  # the tiles are those holding a field or a prediction
    tables = evalcore.evaluate_tables(layer([field]), layer([field]), pixel_gsd_m=10.0)
    assert tables.tiles["pixel_tp"].sum() == 200 // 2  # only the tile holding the centroid is rasterised
    assert m["pixel"]["count_tp"] == 100


def test_a_field_across_a_zone_line_is_counted_once_per_evaluated_tile():
    # 18 degrees east is the line between zones 33 and 34; a field straddling it, given in
    # lon/lat. Each side's tile counts only the pixels inside its own zone's band.
    lon0, lat0 = 18.0, 45.0
    field = box(lon0 - 0.01, lat0, lon0 + 0.01, lat0 + 0.005)
    extra = [box(lon0 - 0.05, lat0, lon0 - 0.045, lat0 + 0.003), box(lon0 + 0.045, lat0, lon0 + 0.05, lat0 + 0.003)]
    ref = layer([field] + extra, "EPSG:4326")
    m = evalcore.evaluate(ref, ref, pixel_gsd_m=10.0)
    assert sorted(m["utm_epsg_codes"]) == [32633, 32634]
    area_m2 = sum(geopandas.GeoSeries([g], crs="EPSG:4326").to_crs("EPSG:6933").area.iloc[0] for g in [field] + extra)
    assert m["pixel"]["count_fp"] == 0 and m["pixel"]["count_fn"] == 0
    # every pixel of the three fields once (counted twice across the line, it would be ~2x)
    assert abs(m["pixel"]["count_tp"] * 100.0 - area_m2) < 0.05 * area_m2


def test_the_annotated_area_is_the_valid_mask():
    field = box(X0 + 1000, Y0 + 1000, X0 + 1100, Y0 + 1100)
    fp = box(X0 + 5000, Y0 + 5000, X0 + 5100, Y0 + 5100)
    annotated = layer([box(X0, Y0, X0 + 2000, Y0 + 2000)])
    m = evalcore.evaluate(layer([field, fp]), layer([field]), pixel_gsd_m=10.0, annotated_area=annotated)
    assert m["pixel"]["count_pixels"] == 200 * 200
    assert (m["pixel"]["count_tp"], m["pixel"]["count_fp"]) == (100, 0)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--pixel-gsd-m", "0"], "--pixel-gsd-m"),  # the CLI names the flag (the library names pixel_gsd_m)
        (["--pixel-gsd-m", "-3"], "--pixel-gsd-m"),
        (["--pixel-gsd-m", "10", "--pixel-tolerance-px", "1.5"], "tolerance"),
        (["--pixel-gsd-m", "10", "--tversky-alpha", "-1"], "--tversky-alpha"),
        (["--pixel-gsd-m", "0.001"], "pixel_gsd_m"),
    ],
)
@pytest.mark.cli
def test_bad_pixel_options_exit_2_with_one_line(tmp_path, args, needle):
    field = box(X0 + 1000, Y0 + 1000, X0 + 1100, Y0 + 1100)
    layer([field]).to_parquet(tmp_path / "p.parquet")
    layer([field]).to_parquet(tmp_path / "r.parquet")
    out = tmp_path / "m.json"
    done = run_cli("evaluate", "-p", str(tmp_path / "p.parquet"), "-r", str(tmp_path / "r.parquet"), "-o", str(out), *args)
    status, stdout, stderr = done.returncode, done.stdout, done.stderr
    assert status == 2, (stdout, stderr)
    lines = [line for line in stderr.strip().splitlines() if line]
    assert len(lines) == 1 and needle in lines[0], stderr
    assert not out.exists()


def test_pixel_block_layout(tmp_path):
    field = box(X0 + 1000, Y0 + 1000, X0 + 1100, Y0 + 1100)
    m = json.loads(json.dumps(evalcore.evaluate(layer([field]), layer([field]), pixel_gsd_m=10.0), default=str))
    block = m["pixel"]
    assert set(block) >= {"gsd_m", "count_pixels", "count_tp", "count_fp", "count_fn", "count_tn", "micro", "macro", "boundary_f1"}
    assert set(block["micro"]) == {"precision", "recall", "f1", "iou", "mcc", "tversky"}
    assert set(block["boundary_f1"]) == {"precision", "recall", "f1", "tolerance_px"}
    assert block["macro"]["f1"] == {"value": 1.0, "n_units": 1}
    assert math.isclose(block["micro"]["tversky"], block["micro"]["f1"])
