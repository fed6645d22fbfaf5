"""Levels (SPEC 6.3, 6.4): support and the worst group in every grouping, reporting tiles,
AOIs, micro and macro, the annotated-area rule, and the level tables and their files.

Every expected value is computed by hand in the comments (or, for areas, with pyproj and
shapely directly), never taken from evalcore's output. Most layouts are built in UTM
zone 33N (EPSG:32633) around easting 500 000, northing 5 000 000 (lon 15°, lat ~45.1°):
there the 10 km tile of an offset (dx, dy) in metres is (50 + ⌊dx / 10 000⌋,
500 + ⌊dy / 10 000⌋), and a tile square is far inside the zone's 6° band (100 km²).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import pytest
import shapely
from pyproj import Transformer
from shapely.geometry import Point, Polygon, box

from evalcore import evaluate, evaluate_tables
from evalcore.summary import worst_group
from tests.common import EA, EA_X0, EA_Y0, UTM, WGS84, X0, Y0, ea_area, layer, square

ZONE = "EPSG:32633"
EPSG = 32633
E0, N0 = 500_000.0, 5_000_000.0
FAST = {"boundary_sample_spacing_m": None, "iou_sweep_thresholds": None}
ROOT = Path(__file__).resolve().parents[2]


def sq(dx: float, dy: float, side: float = 100.0) -> shapely.Polygon:
    """A square with its lower-left corner at (E0 + dx, N0 + dy) in zone 33N."""
    return square(E0 + dx, N0 + dy, side)


def rbox(dx0: float, dy0: float, dx1: float, dy1: float) -> shapely.Polygon:
    return box(E0 + dx0, N0 + dy0, E0 + dx1, N0 + dy1)


def tile_row(tiles: pd.DataFrame, x: int, y: int = 500, epsg: int = EPSG) -> pd.Series:
    rows = tiles[(tiles["epsg"] == epsg) & (tiles["tile_x"] == x) & (tiles["tile_y"] == y)]
    assert len(rows) == 1, (x, y, tiles[["epsg", "tile_x", "tile_y"]])
    return rows.iloc[0]


def counts_of(row: object) -> dict[str, int]:
    keys = ("count_reference", "count_predicted", "count_tp", "count_fp", "count_fn", "count_fp_unassigned")
    return {k: int(row[k]) for k in keys}


def counts(n_ref: int, n_pred: int, tp: int, fp: int, fn: int, unassigned: int) -> dict[str, int]:
    return {"count_reference": n_ref, "count_predicted": n_pred, "count_tp": tp, "count_fp": fp, "count_fn": fn,
            "count_fp_unassigned": unassigned}


def is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


# --------------------------------------------------------------------------- support and the worst group


def _strata_layout(n_a: int, n_b: int, n_c: int):
    """Stratum a: every field matched; b: half matched; c: none matched. One prediction per field,
    identical (matched) or 60 m away (unmatched)."""
    refs, preds, county = [], [], []
    k = 0
    for name, n, matched in (("a", n_a, lambda i: True), ("b", n_b, lambda i: i % 2 == 0), ("c", n_c, lambda i: False)):
        for i in range(n):
            x = X0 + 300.0 * (k % 20)
            y = Y0 + 300.0 * (k // 20)
            refs.append(square(x, y, 100))
            preds.append(square(x if matched(i) else x + 60, y, 100))
            county.append(name)
            k += 1
    return layer(preds, UTM), layer(refs, UTM, county=county)


def test_support_and_insufficient_support_in_every_group():
    pred, ref = _strata_layout(30, 30, 29)
    m = evaluate(pred, ref, strata="county", size_bins=[0, 0.5, 2])
    for name, n in (("a", 30), ("b", 30), ("c", 29)):
        entry = m["per_stratum"][name]
        assert entry["support"] == n == entry["n"]
        assert entry["insufficient_support"] is (n < 30)
    assert m["per_size_class"]["0-0.5"]["support"] == 0 and m["per_size_class"]["0-0.5"]["insufficient_support"] is True
    assert m["per_size_class"]["0.5-2"]["support"] == 89


def test_the_worst_group_skips_insufficient_support():
    pred, ref = _strata_layout(30, 30, 29)
    m = evaluate(pred, ref, strata="county")
    # c (recall 0) has 29 fields < 30: the worst is b (recall 15/30 = 0.5).
    worst = m["worst"]["per_stratum"]
    assert worst["recall"] == {"group": "b", "value": 0.5, "support": 30}
    assert worst["precision"]["group"] == "b" and worst["f1"]["group"] == "b"
    m = evaluate(pred, ref, strata="county", min_support=29)
    assert m["worst"]["per_stratum"]["recall"] == {"group": "c", "value": 0.0, "support": 29}
    assert m["per_stratum"]["c"]["insufficient_support"] is False


def test_no_group_with_enough_support_is_null():
    pred, ref = _strata_layout(3, 3, 3)
    m = evaluate(pred, ref, strata="county", size_bins=[0, 2])
    assert m["worst"] == {"per_stratum": None, "per_size_class": None}
    assert "worst" not in evaluate(pred, ref)  # no grouping, no worst


def test_ties_go_to_the_first_group_in_key_order():
    entries = {
        k: {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 40, "insufficient_support": False} for k in ("x", "m", "z")
    }
    assert worst_group(entries)["f1"]["group"] == "x"  # key order is the dict's (sorted stratum names)
    entries["m"]["f1"] = float("nan")  # undefined values are passed over
    entries["z"]["f1"] = 0.4
    assert worst_group(entries)["f1"] == {"group": "z", "value": 0.4, "support": 40}


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_min_support_must_be_a_positive_integer(bad):
    pred, ref = _strata_layout(1, 1, 1)
    with pytest.raises(ValueError, match="min_support"):
        evaluate(pred, ref, strata="county", min_support=bad)


# --------------------------------------------------------------------------- tiles


def test_a_tile_with_only_a_false_positive():
    # R0 and its identical prediction in tile (50, 500); a prediction 20 km east, in tile
    # (52, 500), overlaps nothing: no home, so it counts in its own tile, the only thing there.
    ref = layer([sq(100, 100)], ZONE)
    pred = layer([sq(100, 100), sq(20_100, 100)], ZONE)
    t = evaluate_tables(pred, ref, **FAST)
    assert len(t.tiles) == 2
    a, b = tile_row(t.tiles, 50), tile_row(t.tiles, 52)
    assert counts_of(a) == counts(1, 1, 1, 0, 0, 0)
    assert counts_of(b) == counts(0, 1, 0, 1, 0, 1)
    assert b["precision"] == 0.0  # 0 / (0 + 1)
    assert is_nan(b["recall"]) and is_nan(b["f1"]) and is_nan(b["count_ratio"])  # no reference field
    assert b["count_error"] == 1
    assert b["area_bias_ha"] == pytest.approx(ea_area(sq(20_100, 100), ZONE) / 1e4, rel=1e-9)
    assert b["support"] == 0 and bool(b["insufficient_support"]) is True
    # Both squares lie far inside the band 12°-18°E: 10 km x 10 km = 100 km²; 1 FP / 100 km².
    assert a["tile_area_km2"] == pytest.approx(100.0, rel=1e-12)
    assert b["tile_area_km2"] == pytest.approx(100.0, rel=1e-12)
    assert b["fp_per_km2"] == pytest.approx(0.01, rel=1e-12)
    assert a["fp_per_km2"] == 0.0
    assert (a["precision"], a["recall"], a["f1"]) == (1.0, 1.0, 1.0)

    s = t.summary["tiles"]
    assert s["tile_km"] == 10.0
    assert (s["count_tiles"], s["count_tiles_with_reference"], s["count_tiles_without_reference"]) == (2, 1, 1)
    assert s["fp_per_km2_reference_free"] == pytest.approx(0.01, rel=1e-12)
    assert s["fraction_tiles_with_fn"] == 0.0  # the one tile with reference fields has no FN
    # Micro: TP 1, FP 1, 1 reference field -> precision 1/2, recall 1, F1 2/3.
    assert s["micro"]["precision"] == pytest.approx(0.5)
    assert s["micro"]["recall"] == pytest.approx(1.0)
    assert s["micro"]["f1"] == pytest.approx(2 / 3)
    # Macro: precision over both tiles (1, 0); recall and F1 only where defined (tile a).
    assert s["macro"]["precision"] == {"value": pytest.approx(0.5), "n_units": 2}
    assert s["macro"]["recall"] == {"value": pytest.approx(1.0), "n_units": 1}
    assert s["macro"]["f1"] == {"value": pytest.approx(1.0), "n_units": 1}
    assert s["quantiles"]["f1"] == {f"p{q}": pytest.approx(1.0) for q in (10, 25, 50, 75, 90)}
    assert s["quantiles"]["count_ratio"] == {f"p{q}": pytest.approx(1.0) for q in (10, 25, 50, 75, 90)}
    assert s["worst"] is None  # min_support 30: no tile has enough
    json.dumps(t.summary, allow_nan=False)  # undefined values are null, never NaN
    assert evaluate(pred, ref, **FAST)["tiles"] == s


def _area_west_of_18e_km2(square_geom: shapely.Polygon) -> float:
    """Area of a zone-33 square west of the meridian 18°E (the zone's band edge), km², here
    with pyproj: the meridian sampled every 1e-4° of latitude."""
    lat = np.linspace(44.0, 46.0, 20_001)
    x, y = Transformer.from_crs(WGS84, ZONE, always_xy=True).transform(np.full(len(lat), 18.0), lat)
    west = Polygon([(300_000.0, y[0])] + list(zip(x, y)) + [(300_000.0, y[-1])])
    return west.intersection(square_geom).area / 1e6


def test_fp_per_km2_counts_the_tile_area_inside_the_zone_band_and_pools_reference_free_tiles():
    # The meridian 18°E crosses northing 5 000 000 near easting 736 000: tile (73, 500) of
    # zone 33 ([730, 740] km x [5000, 5010] km) sticks out of the band. Three homeless
    # predictions near easting 733 km (lon ~17.96°, zone 33) fall in it; one in tile (52, 500).
    ref = layer([sq(100, 100)], ZONE)
    edge = [square(733_000.0 + 300 * i, N0 + 100, 100) for i in range(3)]
    pred = layer([sq(100, 100), sq(20_100, 100)] + edge, ZONE)
    t = evaluate_tables(pred, ref, **FAST)
    area = _area_west_of_18e_km2(box(730_000, 5_000_000, 740_000, 5_010_000))
    assert 40 < area < 70  # the meridian does cross the square
    e = tile_row(t.tiles, 73)
    assert counts_of(e) == counts(0, 3, 0, 3, 0, 3)
    assert e["tile_area_km2"] == pytest.approx(area, rel=1e-5)
    assert e["fp_per_km2"] == pytest.approx(3 / area, rel=1e-5)
    s = t.summary["tiles"]
    assert s["count_tiles_without_reference"] == 2
    # Pooled: 4 FP over 100 + area km² (the mean of the two rates would be (0.01 + 3 / area) / 2).
    assert s["fp_per_km2_reference_free"] == pytest.approx(4 / (100 + area), rel=1e-5)
    # The tile's polygon in EPSG:4326 stops at 18°E.
    geom = t.tiles.geometry[(t.tiles["tile_x"] == 73).to_numpy()].iloc[0]
    assert geom.bounds[2] == pytest.approx(18.0, abs=1e-6)


def test_tile_keys_use_the_home_zone_and_floor_of_the_coordinates():
    # One field in zone 33 and one given in zone 33's CRS but lying in zone 34 (lon > 18°):
    # its tile is keyed in EPSG:32634 with the coordinates of its centroid in that zone.
    lon, lat = 18.5, 45.05
    x34, y34 = Transformer.from_crs(WGS84, "EPSG:32634", always_xy=True).transform(lon, lat)
    x33, y33 = Transformer.from_crs(WGS84, ZONE, always_xy=True).transform(lon, lat)
    far = square(x33 - 50, y33 - 50, 100)
    ref = layer([sq(100, 100), far], ZONE)
    t = evaluate_tables(ref, ref, **FAST)
    keys = sorted(map(tuple, t.tiles[["epsg", "tile_x", "tile_y"]].to_numpy().tolist()))
    assert keys == [(32633, 50, 500), (32634, math.floor(x34 / 10_000), math.floor(y34 / 10_000))]
    assert t.fields["utm_epsg"].tolist() == [32633, 32634]
    assert t.fields["tile_x"].tolist() == [50, math.floor(x34 / 10_000)]
    # A smaller tile side changes the keys: 2.5 km tiles of offset (100, 100) -> (200, 2000).
    t = evaluate_tables(layer([sq(100, 100)], ZONE), layer([sq(100, 100)], ZONE), tile_km=2.5, **FAST)
    assert t.tiles[["epsg", "tile_x", "tile_y"]].to_numpy().tolist() == [[32633, 200, 2000]]
    assert t.summary["tiles"]["tile_km"] == 2.5
    assert t.tiles["tile_area_km2"].iloc[0] == pytest.approx(6.25, rel=1e-12)


def _cross_tile_layout():
    """R (offsets 9800-9990 x 100-200, centroid easting offset 9895: tile 50) and P
    (9950-10150, centroid 10050: tile 51) overlap 40 x 100 m: IoU 4000 / 35000, unmatched,
    home R. R2 (9850-10050, centroid 9950: tile 50) and P2 (9910-10110, centroid 10010:
    tile 51): IoU 14000 / 26000 = 0.54, matched. Q (offset 15000, 5000) overlaps nothing."""
    ref = layer([rbox(9800, 100, 9990, 200), rbox(9850, 1000, 10050, 1100)], ZONE, index=["R", "R2"])
    pred = layer([rbox(9950, 100, 10150, 200), rbox(9910, 1000, 10110, 1100), sq(15_000, 5_000)], ZONE,
                 index=["P", "P2", "Q"])
    aoi = layer([rbox(9000, 0, 10000, 2000), rbox(10000, 0, 16000, 6000)], ZONE, id=["west", "east"])
    return pred, ref, aoi


def test_a_prediction_counts_in_its_homes_tile_and_aoi_else_in_its_own():
    pred, ref, aoi = _cross_tile_layout()
    t = evaluate_tables(pred, ref, aoi=aoi, aoi_id_column="id", **FAST)
    p = t.predictions
    assert p.index.tolist() == ["P", "P2", "Q"]
    assert p["matched"].tolist() == [False, True, False]
    assert p["home_ref_index"].tolist()[:2] == ["R", "R2"] and pd.isna(p["home_ref_index"].tolist()[2])
    assert p["utm_epsg"].tolist() == [EPSG] * 3 and p["tile_epsg"].tolist() == [EPSG] * 3
    assert p["tile_x"].tolist() == [50, 50, 51]  # P and P2 follow their home; Q stays in its own tile
    assert p["tile_y"].tolist() == [500, 500, 500]
    assert p["aoi"].tolist() == ["west", "west", "east"]
    assert t.fields["tile_x"].tolist() == [50, 50] and t.fields["aoi"].tolist() == ["west", "west"]

    assert len(t.tiles) == 2
    assert counts_of(tile_row(t.tiles, 50)) == counts(2, 2, 1, 1, 1, 0)
    assert counts_of(tile_row(t.tiles, 51)) == counts(0, 1, 0, 1, 0, 1)
    per_aoi = t.summary["aois"]["per_aoi"]
    assert counts_of(per_aoi["west"]) == counts(2, 2, 1, 1, 1, 0)
    assert counts_of(per_aoi["east"]) == counts(0, 1, 0, 1, 0, 1)
    assert per_aoi["west"]["precision"] == 0.5 and per_aoi["west"]["recall"] == 0.5
    assert per_aoi["east"]["precision"] == 0.0 and per_aoi["east"]["recall"] is None and per_aoi["east"]["f1"] is None
    assert t.summary["count_fp_unassigned"] == 1
    assert t.summary["tiles"]["count_tiles_without_reference"] == 1


def test_without_its_pair_a_prediction_counts_in_its_own_tile():
    # Without R the prediction P has no candidate pair: it moves to its own tile (51).
    pred, ref, _ = _cross_tile_layout()
    t = evaluate_tables(pred, ref.iloc[[1]], **FAST)
    assert t.predictions["tile_x"].tolist() == [51, 50, 51]
    assert counts_of(tile_row(t.tiles, 50)) == counts(1, 1, 1, 0, 0, 0)
    assert counts_of(tile_row(t.tiles, 51)) == counts(0, 2, 0, 2, 0, 2)


def _two_tile_layout():
    """Tile A (50, 500): 20 fields (5 x 4 grid, 300 m apart), each with an identical prediction.
    Tile B (51, 500): 5 fields; one with an identical prediction, two with a prediction 60 m
    off (IoU 40 / 160, unmatched, home the field), two with none; and three predictions
    overlapping nothing (offset 15 000, 5 000 + ...)."""
    refs, preds = [], []
    for i in range(20):
        g = sq(100 + 300 * (i % 5), 100 + 300 * (i // 5))
        refs.append(g)
        preds.append(g)
    for i in range(5):
        refs.append(sq(10_100 + 300 * i, 100))
    preds.append(sq(10_100, 100))
    preds += [sq(10_100 + 300 * 1 + 60, 100), sq(10_100 + 300 * 2 + 60, 100)]
    preds += [sq(15_000 + 300 * j, 5_000) for j in range(3)]
    aoi = layer([rbox(0, 0, 10_000, 10_000), rbox(10_000, 0, 20_000, 10_000)], ZONE, id=["A", "B"])
    return layer(preds, ZONE), layer(refs, ZONE), aoi


def _assert_micro_macro(block: dict) -> None:
    # A: TP 20, FP 0, FN 0 -> precision = recall = F1 = 1.
    # B: TP 1, FP 2 + 3 = 5, 5 fields -> precision 1/6, recall 1/5, F1 2 (1/30) / (11/30) = 2/11.
    # Micro: TP 21, FP 5, 25 fields -> precision 21/26, recall 21/25, F1 42 / (42 + 5 + 4) = 42/51.
    assert block["micro"]["precision"] == pytest.approx(21 / 26, rel=1e-12)
    assert block["micro"]["recall"] == pytest.approx(21 / 25, rel=1e-12)
    assert block["micro"]["f1"] == pytest.approx(42 / 51, rel=1e-12)
    # Macro: the mean of the two units' values.
    assert block["macro"]["precision"] == {"value": pytest.approx((1 + 1 / 6) / 2, rel=1e-12), "n_units": 2}
    assert block["macro"]["recall"] == {"value": pytest.approx((1 + 1 / 5) / 2, rel=1e-12), "n_units": 2}
    assert block["macro"]["f1"] == {"value": pytest.approx((1 + 2 / 11) / 2, rel=1e-12), "n_units": 2}
    # Quantiles (numpy linear) of two values a < b: a + q (b - a).
    for q in (10, 25, 50, 75, 90):
        assert block["quantiles"]["f1"][f"p{q}"] == pytest.approx(2 / 11 + q / 100 * (1 - 2 / 11), rel=1e-12)
        assert block["quantiles"]["count_ratio"][f"p{q}"] == pytest.approx(1.0 + q / 100 * (6 / 5 - 1.0), rel=1e-12)


def test_micro_and_macro_over_two_tiles_and_two_aois():
    pred, ref, aoi = _two_tile_layout()
    t = evaluate_tables(pred, ref, aoi=aoi, aoi_id_column="id", **FAST)
    assert t.summary["precision"] == pytest.approx(21 / 26) and t.summary["recall"] == pytest.approx(21 / 25)
    tiles = t.summary["tiles"]
    _assert_micro_macro(tiles)
    assert tiles["fraction_tiles_with_fn"] == 0.5  # B has FN, A none
    assert (tiles["count_tiles"], tiles["count_tiles_without_reference"]) == (2, 0)
    assert tiles["fp_per_km2_reference_free"] is None  # no reference-free tile
    a, b = tile_row(t.tiles, 50), tile_row(t.tiles, 51)
    assert counts_of(a) == counts(20, 20, 20, 0, 0, 0)
    assert counts_of(b) == counts(5, 6, 1, 5, 4, 3)
    assert b["precision"] == pytest.approx(1 / 6) and b["recall"] == pytest.approx(1 / 5) and b["f1"] == pytest.approx(2 / 11)
    assert b["count_ratio"] == pytest.approx(6 / 5) and b["count_error"] == 1
    assert b["fp_per_km2"] == pytest.approx(5 / 100, rel=1e-12)
    b_pred = [g for g in pred.geometry if g.centroid.x >= E0 + 10_000]
    b_ref = [g for g in ref.geometry if g.centroid.x >= E0 + 10_000]
    bias = (sum(ea_area(g, ZONE) for g in b_pred) - sum(ea_area(g, ZONE) for g in b_ref)) / 1e4
    assert b["area_bias_ha"] == pytest.approx(bias, rel=1e-7)
    assert a["area_bias_ha"] == pytest.approx(0.0, abs=1e-9)
    aois = t.summary["aois"]
    _assert_micro_macro(aois)
    assert aois["fraction_aois_with_fn"] == 0.5
    assert (aois["count_aois"], aois["count_aois_with_reference"], aois["id_column"]) == (2, 2, "id")
    assert counts_of(aois["per_aoi"]["B"]) == counts(5, 6, 1, 5, 4, 3)
    assert aois["per_aoi"]["B"]["area_bias_ha"] == pytest.approx(bias, rel=1e-7)


# --------------------------------------------------------------------------- AOIs


def test_an_aoi_with_nothing_in_it():
    # "full" holds R0 (matched) and R1 (its prediction 60 m off: FP with a home, and an FN);
    # "empty" holds nothing; R2 lies in no AOI (an FN counted only overall).
    ref = layer([sq(100, 100), sq(400, 100), sq(3_000, 100)], ZONE)
    pred = layer([sq(100, 100), sq(460, 100)], ZONE)
    aoi = layer([rbox(0, 0, 1_000, 1_000), rbox(5_000, 5_000, 6_000, 6_000)], ZONE, id=["full", "empty"])
    t = evaluate_tables(pred, ref, aoi=aoi, aoi_id_column="id", **FAST)
    block = t.summary["aois"]
    assert list(block["per_aoi"]) == ["full", "empty"]
    assert block["per_aoi"]["empty"] == {
        **counts(0, 0, 0, 0, 0, 0), "precision": None, "recall": None, "f1": None, "count_ratio": None,
        "count_error": 0, "area_bias_ha": 0.0, "count_fn_missed": 0, "count_fn_localisation": 0,
        "count_fp_background": 0, "count_fp_duplicate": 0, "count_fp_localisation": 0, "count_merges": 0,
        "count_splits": 0, "support": 0, "insufficient_support": True,
    }
    full = block["per_aoi"]["full"]
    assert counts_of(full) == counts(2, 2, 1, 1, 1, 0)
    assert (full["precision"], full["recall"], full["f1"], full["count_ratio"]) == (0.5, 0.5, 0.5, 1.0)
    assert (block["count_aois"], block["count_aois_with_reference"]) == (2, 1)
    assert block["fraction_aois_with_fn"] == 1.0
    # Micro pools the AOIs only (R2 is in none): TP 1, FP 1, 2 fields.
    assert block["micro"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert t.summary["recall"] == pytest.approx(1 / 3)
    assert block["macro"]["f1"] == {"value": 0.5, "n_units": 1}
    assert t.fields["aoi"].tolist()[:2] == ["full", "full"] and pd.isna(t.fields["aoi"].tolist()[2])

    table = t.aois
    assert len(table) == 2 and table["id"].tolist() == ["full", "empty"]
    assert table.crs == aoi.crs
    empty = table.iloc[1]
    assert counts_of(empty) == counts(0, 0, 0, 0, 0, 0)
    assert all(is_nan(float(empty[k])) for k in ("precision", "recall", "f1", "count_ratio"))
    assert empty.geometry.equals(aoi.geometry.iloc[1])
    json.dumps(t.summary, allow_nan=False)


@pytest.mark.parametrize("order", [("big", "small"), ("small", "big")])
def test_a_field_in_two_overlapping_aois_goes_to_the_first_by_position(order):
    # F (centroid offset 950, 950) lies in both AOIs; G (150, 150) only in "big".
    shapes = {"big": rbox(0, 0, 2_000, 2_000), "small": rbox(500, 500, 1_500, 1_500)}
    ref = layer([sq(900, 900), sq(100, 100)], ZONE, index=["F", "G"])
    pred = layer([sq(900, 900)], ZONE)
    aoi = layer([shapes[k] for k in order], ZONE, name=list(order))
    t = evaluate_tables(pred, ref, aoi=aoi, aoi_id_column="name", **FAST)
    first, second = order
    assert t.fields.loc["F", "aoi"] == first and t.fields.loc["G", "aoi"] == "big"
    assert t.predictions["aoi"].tolist() == [first]  # the matched prediction follows F
    per_aoi = t.summary["aois"]["per_aoi"]
    assert list(per_aoi) == list(order)
    n_big = 2 if first == "big" else 1
    assert per_aoi["big"]["count_reference"] == n_big
    assert per_aoi["small"]["count_reference"] == 2 - n_big
    assert per_aoi[first]["count_tp"] == 1 and per_aoi[second]["count_tp"] == 0
    assert t.aois["name"].tolist() == list(order)


def test_aoi_ids_keep_their_type_in_the_table_and_are_strings_in_the_summary():
    ref = layer([sq(100, 100)], ZONE)
    aoi = layer([rbox(0, 0, 1_000, 1_000), rbox(2_000, 0, 3_000, 1_000)], ZONE, code=[7, 3])
    t = evaluate_tables(ref, ref, aoi=aoi, aoi_id_column="code", **FAST)
    assert list(t.summary["aois"]["per_aoi"]) == ["7", "3"]
    assert t.aois["code"].tolist() == [7, 3]
    assert t.summary["aois"]["id_column"] == "code"


def test_the_aoi_of_a_field_is_that_of_its_centroid():
    # The field spans offsets 950-1150: a quarter of it lies in "left" ([0, 1000]), but its
    # centroid (1050) lies in "right".
    ref = layer([rbox(950, 100, 1_150, 200)], ZONE)
    aoi = layer([rbox(0, 0, 1_000, 1_000), rbox(1_000, 0, 2_000, 1_000)], ZONE, id=["left", "right"])
    t = evaluate_tables(ref, ref, aoi=aoi, aoi_id_column="id", **FAST)
    assert t.fields["aoi"].tolist() == ["right"]
    assert t.summary["aois"]["per_aoi"]["left"]["count_reference"] == 0


# --------------------------------------------------------------------------- worst group per tile, AOI and stratum


def _worst_layout():
    """Four tiles (x = 50..53, 10 km apart), one AOI and one stratum each:
    t50: 3 fields, 2 matched, 1 without a prediction   -> P 1,   R 2/3, F1 0.8;
    t51: 2 fields, both with a prediction 60 m off      -> P 0,   R 0,   F1 null;
    t52: 4 fields, 3 matched, 1 with a prediction off   -> P 3/4, R 3/4, F1 3/4;
    t53: 6 fields, 4 matched, 2 without a prediction    -> P 1,   R 2/3, F1 0.8."""
    plan = {50: (3, 2, 0), 51: (2, 0, 2), 52: (4, 3, 1), 53: (6, 4, 0)}  # fields, matched, shifted
    refs, preds, group = [], [], []
    for x, (n, matched, shifted) in plan.items():
        dx = (x - 50) * 10_000
        for i in range(n):
            g = sq(dx + 100 + 300 * i, 100)
            refs.append(g)
            group.append(f"t{x}")
            if i < matched:
                preds.append(g)
            elif i < matched + shifted:
                preds.append(sq(dx + 100 + 300 * i + 60, 100))
    # The AOIs in reverse order: t53 comes first in the AOI table.
    aoi = layer([rbox((x - 50) * 10_000, 0, (x - 49) * 10_000, 10_000) for x in (53, 52, 51, 50)], ZONE,
                id=["t53", "t52", "t51", "t50"])
    return layer(preds, ZONE), layer(refs, ZONE, group=group), aoi


def test_the_worst_tile_aoi_and_stratum_skip_insufficient_support():
    pred, ref, aoi = _worst_layout()
    m = evaluate(pred, ref, aoi=aoi, aoi_id_column="id", strata="group", min_support=3, **FAST)
    key = {x: f"{EPSG}_{x}_500" for x in (50, 51, 52, 53)}
    # t51 (P 0, R 0) would be the worst of everything but has 2 < 3 fields.
    worst = m["tiles"]["worst"]
    assert worst["precision"] == {"group": key[52], "value": 0.75, "support": 4}
    assert worst["f1"] == {"group": key[52], "value": pytest.approx(0.75), "support": 4}
    # Recall 2/3 in t50 and in t53 (4/6): the tie goes to the first tile in table order.
    assert worst["recall"] == {"group": key[50], "value": pytest.approx(2 / 3), "support": 3}
    assert m["tiles"]["fraction_tiles_with_fn"] == 1.0
    # Macro: precision over the 4 tiles, recall too, F1 over the 3 where it is defined.
    macro = m["tiles"]["macro"]
    assert macro["precision"] == {"value": pytest.approx((1 + 0 + 0.75 + 1) / 4), "n_units": 4}
    assert macro["recall"] == {"value": pytest.approx((2 / 3 + 0 + 0.75 + 2 / 3) / 4), "n_units": 4}
    assert macro["f1"] == {"value": pytest.approx((0.8 + 0.75 + 0.8) / 3), "n_units": 3}
    assert m["aois"]["macro"] == macro

    worst = m["aois"]["worst"]
    assert worst["precision"] == {"group": "t52", "value": 0.75, "support": 4}
    assert worst["f1"] == {"group": "t52", "value": pytest.approx(0.75), "support": 4}
    assert worst["recall"] == {"group": "t53", "value": pytest.approx(2 / 3), "support": 6}  # first AOI by position
    assert m["aois"]["per_aoi"]["t51"]["insufficient_support"] is True
    assert m["aois"]["per_aoi"]["t50"]["insufficient_support"] is False  # 3 fields: not < 3

    worst = m["worst"]["per_stratum"]
    assert worst["precision"] == {"group": "t52", "value": 0.75, "support": 4}
    assert worst["f1"]["group"] == "t52"
    tied = [k for k in m["per_stratum"] if k in ("t50", "t53")]
    assert worst["recall"] == {"group": tied[0], "value": pytest.approx(2 / 3), "support": 3 if tied[0] == "t50" else 6}
    assert m["per_stratum"]["t51"]["insufficient_support"] is True and m["per_stratum"]["t51"]["support"] == 2

    # Without min_support 3, t51 is the worst precision and recall of each grouping.
    m = evaluate(pred, ref, aoi=aoi, aoi_id_column="id", strata="group", min_support=2, **FAST)
    for worst in (m["tiles"]["worst"], m["aois"]["worst"], m["worst"]["per_stratum"]):
        assert worst["precision"]["value"] == 0.0 and worst["recall"]["value"] == 0.0
        assert worst["precision"]["support"] == 2 and worst["recall"]["support"] == 2
    # t51's F1 is null per tile and per AOI (passed over), but 0.0 per stratum (a seed-000
    # key: empty denominators are 0.0 there, SPEC 4).
    assert m["tiles"]["worst"]["f1"]["group"] == key[52]
    assert m["aois"]["worst"]["f1"]["group"] == "t52"
    assert m["worst"]["per_stratum"]["f1"] == {"group": "t51", "value": 0.0, "support": 2}
    # With min_support 7 no unit has enough: null everywhere.
    m = evaluate(pred, ref, aoi=aoi, aoi_id_column="id", strata="group", min_support=7, **FAST)
    assert m["tiles"]["worst"] is None and m["aois"]["worst"] is None and m["worst"]["per_stratum"] is None


def test_the_tile_table_marks_insufficient_support():
    pred, ref, _ = _worst_layout()
    t = evaluate_tables(pred, ref, min_support=3, **FAST)
    table = t.tiles.sort_values("tile_x")
    assert table["support"].tolist() == [3, 2, 4, 6]
    assert table["insufficient_support"].tolist() == [False, True, False, False]


# --------------------------------------------------------------------------- incomplete references (SPEC 6.4)


def ea_box(x0: int, y0: int, x1: int, y1: int) -> shapely.Polygon:
    """A box in EPSG:6933 at integer offsets from (EA_X0, EA_Y0): its areas are exact."""
    return box(EA_X0 + x0, EA_Y0 + y0, EA_X0 + x1, EA_Y0 + y1)


def _annotated_layout():
    """In EPSG:6933. Annotated: [0, 1000]². R1 with an identical prediction M (TP); R2 and F,
    60 m off (IoU 0.25: FP with a home), fully annotated; H (900-1100 x 500-600) half inside,
    overlapping nothing; O far outside, overlapping nothing."""
    ref = layer([ea_box(100, 100, 200, 200), ea_box(400, 100, 500, 200)], EA)
    pred = layer([ea_box(100, 100, 200, 200), ea_box(460, 100, 560, 200), ea_box(900, 500, 1_100, 600),
                  ea_box(3_000, 3_000, 3_100, 3_100)], EA, index=["M", "F", "H", "O"])
    return pred, ref


@pytest.mark.parametrize("overlapping", [False, True], ids=["one-polygon", "overlapping-polygons"])
@pytest.mark.parametrize(
    ("fraction", "annotated_fp", "outside"),
    [
        (0.5, 1, 2),   # H has exactly 0.5 inside: not more than 0.5 -> outside (with O)
        (0.49, 2, 1),  # H has more than 0.49 inside -> an annotated FP; only O outside
        (0.0, 2, 1),   # O has nothing inside: not more than 0
    ],
)
def test_the_annotated_area_rule(fraction, annotated_fp, outside, overlapping):
    pred, ref = _annotated_layout()
    parts = [ea_box(0, 0, 1_000, 1_000)]
    if overlapping:  # a second polygon over H's inside half: the union counts once
        parts.append(ea_box(800, 400, 1_000, 700))
    annotated = layer(parts, EA)
    t = evaluate_tables(pred, ref, annotated_area=annotated, annotated_fraction=fraction, **FAST)
    m = t.summary
    # TP 1 (M); unmatched F, H, O.
    assert m["precision_annotated"] == pytest.approx(1 / (1 + annotated_fp), rel=1e-12)
    assert m["count_fp_outside_annotation"] == outside
    assert m["precision"] == pytest.approx(1 / 4) and m["recall"] == pytest.approx(1 / 2)  # unchanged
    assert m["precision_touching"] == pytest.approx(1 / (1 + 3 - 2))  # H and O have no home
    assert m["annotated_fraction"] == fraction
    assert t.predictions["annotated_fraction"].tolist() == [1.0, 1.0, 0.5, 0.0]


def test_without_an_annotated_area_there_is_no_annotated_precision():
    pred, ref = _annotated_layout()
    m = evaluate(pred, ref, **FAST)
    assert "precision_annotated" not in m and "count_fp_outside_annotation" not in m
    assert m["precision_touching"] == pytest.approx(0.5)


def test_precision_touching_by_hand():
    # R0 matched; R1's prediction 60 m off (an FP that touches R1); two predictions overlap nothing.
    ref = layer([sq(100, 100), sq(400, 100)], ZONE, group=["a", "b"])
    pred = layer([sq(100, 100), sq(460, 100), sq(3_000, 3_000), sq(4_000, 3_000)], ZONE)
    m = evaluate(pred, ref, strata="group", **FAST)
    assert (m["count_tp"], m["count_fp"], m["count_fp_unassigned"]) == (1, 3, 2)
    assert m["precision"] == pytest.approx(1 / 4)
    assert m["precision_touching"] == pytest.approx(1 / (1 + 3 - 2))
    # In a group only predictions with a home count: there it is the group's precision.
    assert m["per_stratum"]["a"]["precision_touching"] == 1.0
    assert m["per_stratum"]["b"]["precision_touching"] == 0.0
    # Nothing touches a reference field and nothing matched: TP 0 over 0 -> null.
    m = evaluate(layer([sq(3_000, 3_000)], ZONE), ref, **FAST)
    assert m["precision_touching"] is None or is_nan(m["precision_touching"])


# --------------------------------------------------------------------------- per-AOI intervals


def test_per_aoi_bootstrap_intervals():
    # "many": 40 fields, 30 with an identical prediction, 10 with one 60 m off -> P = R = F1 = 0.75.
    # "fp_only": one prediction overlapping nothing (the same in every resample) -> P 0 always.
    # "empty": nothing.
    refs, preds = [], []
    for i in range(40):
        g = sq(100 + 300 * (i % 8), 100 + 300 * (i // 8))
        refs.append(g)
        preds.append(g if i % 4 else sq(160 + 300 * (i % 8), 100 + 300 * (i // 8)))
    preds.append(sq(5_100, 100))
    aoi = layer([rbox(0, 0, 3_000, 3_000), rbox(5_000, 0, 6_000, 1_000), rbox(7_000, 0, 8_000, 1_000)], ZONE,
                id=["many", "fp_only", "empty"])
    m = evaluate(layer(preds, ZONE), layer(refs, ZONE), aoi=aoi, aoi_id_column="id", bootstrap=50, **FAST)
    many = m["aois"]["per_aoi"]["many"]
    assert (many["precision"], many["recall"], many["f1"]) == (0.75, 0.75, 0.75)
    for metric in ("precision", "recall", "f1"):
        lo, hi = many["ci"][metric]
        assert 0.0 <= lo <= 0.75 <= hi <= 1.0 and lo < hi
    assert "ci_n_undefined" not in many
    fp_only = m["aois"]["per_aoi"]["fp_only"]
    assert fp_only["ci"]["precision"] == [0.0, 0.0]
    assert fp_only["ci"]["recall"] == [None, None] and fp_only["ci"]["f1"] == [None, None]
    assert fp_only["ci_n_undefined"] == {"recall": 50, "f1": 50}
    empty = m["aois"]["per_aoi"]["empty"]
    assert empty["ci"] == {"precision": [None, None], "recall": [None, None], "f1": [None, None]}
    assert empty["ci_n_undefined"] == {"precision": 50, "recall": 50, "f1": 50}
    json.dumps(m, allow_nan=False)
    # The point values do not depend on the bootstrap.
    plain = evaluate(layer(preds, ZONE), layer(refs, ZONE), aoi=aoi, aoi_id_column="id", **FAST)
    for key in ("many", "fp_only", "empty"):
        entry = {k: v for k, v in m["aois"]["per_aoi"][key].items() if k not in ("ci", "ci_n_undefined")}
        assert entry == plain["aois"]["per_aoi"][key]




# --------------------------------------------------------------------------- the CLI: table files and bad input
#
# The runs that write tables are subprocesses (what a user runs), started together by the
# fixture ``cli_runs`` (a few seconds each, mostly imports); the bad inputs run through
# ``evalcore.cli.main`` in this process (its exit status and its stderr), and one of them
# also as a subprocess.


class _Run:
    def __init__(self, args: list[str], directory: Path) -> None:
        self.directory = directory
        self.proc = subprocess.Popen([sys.executable, "-m", "evalcore.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._result: tuple[int, str, str] | None = None

    def result(self) -> tuple[int, str, str]:
        if self._result is None:
            out, err = self.proc.communicate(timeout=300)
            self._result = (self.proc.returncode, out, err)
        return self._result


def _write(frame: geopandas.GeoDataFrame, path: Path) -> str:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "'crs' was not provided" for the layer without a CRS
        frame.to_file(path, driver="GPKG", engine="pyogrio")
    return str(path)


# The good layers: R0-R2 in tile (50, 500), R3 in tile (51, 500). Predictions (in EPSG:3035):
# P0, P1 identical to R0, R1; P2 of zero area (dropped); P3 identical to R3; P4 in tile
# (53, 500) overlapping nothing. AOIs (in EPSG:3857): A over tile 50, B over tile 51, and
# "empty" over nothing.
GOOD_REF = [sq(100, 100), sq(400, 100), sq(700, 100), sq(10_100, 100)]
GOOD_PRED = [sq(100, 100), sq(400, 100), rbox(5_000, 100, 5_000, 200), sq(10_100, 100), sq(30_100, 100)]
GOOD_AOI = [rbox(0, 0, 10_000, 10_000), rbox(10_000, 0, 20_000, 10_000), rbox(50_000, 0, 60_000, 10_000)]
PRED_CRS, AOI_CRS = "EPSG:3035", "EPSG:3857"

BAD_CASES = {
    # name: (AOI layer or None, extra arguments, strings the message must hold)
    "aoi_without_the_id_column": (
        lambda: layer(GOOD_AOI[:2], ZONE, name=["a", "b"], zone=[1, 2]), ["--aoi-id-column", "id"],
        ["aoi.gpkg", "'id'", "'name'", "'zone'"]),
    "duplicate_aoi_ids": (
        lambda: layer(GOOD_AOI, ZONE, id=["a", "b", "a"]), ["--aoi-id-column", "id"], ["aoi.gpkg", "'a'", "id"]),
    "aoi_without_crs": (lambda: layer(GOOD_AOI[:2], None, id=["a", "b"]), ["--aoi-id-column", "id"], ["aoi.gpkg", "CRS"]),
    "point_aoi": (
        lambda: layer([GOOD_AOI[0], Point(E0 + 15_000, N0 + 100)], ZONE, id=["ok", "pt"]), ["--aoi-id-column", "id"],
        ["aoi.gpkg", "'pt'"]),
    "tile_km_0": (None, ["--tile-km", "0"], ["tile", "km", "0"]),
    "min_support_0": (None, ["--min-support", "0"], ["min", "support", "0"]),
}


def _bad_case_args(name: str, pred: str, ref: str, d: Path) -> list[str]:
    make_aoi, extra, _ = BAD_CASES[name]
    args = ["evaluate", "-p", pred, "-r", ref, "-q", "-o", str(d / "m.json"), "--tiles-out", str(d / "t.parquet"),
            "--predictions-out", str(d / "p.parquet")]
    if make_aoi is not None:
        args += ["--aoi", _write(make_aoi(), d / "aoi.gpkg"), "--aois-out", str(d / "a.parquet")]
    return args + extra


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("levels_cli")
    good = base / "good"
    good.mkdir()
    ref = _write(layer(GOOD_REF, ZONE), good / "ref.gpkg")
    pred = _write(layer(GOOD_PRED, ZONE).to_crs(PRED_CRS), good / "pred.gpkg")
    aoi = _write(layer(GOOD_AOI, ZONE, id=["A", "B", "empty"]).to_crs(AOI_CRS), good / "aoi.gpkg")
    common = ["evaluate", "-p", pred, "-r", ref, "-q", "--aoi", aoi, "--aoi-id-column", "id"]
    runs = {"inputs": (pred, ref)}
    for suffix in ("parquet", "gpkg"):
        out = base / f"out_{suffix}"
        out.mkdir()
        runs[suffix] = _Run(common + ["-o", str(out / "m.json"), "--tiles-out", str(out / f"t.{suffix}"),
                                      "--aois-out", str(out / f"a.{suffix}"), "--predictions-out", str(out / f"p.{suffix}")], out)
    d = base / "bad_subprocess"
    d.mkdir()
    runs["bad"] = _Run(_bad_case_args("duplicate_aoi_ids", pred, ref, d), d)
    yield runs
    for run in runs.values():
        if isinstance(run, _Run) and run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


def _keys(frame: pd.DataFrame) -> list[tuple[int, int, int]]:
    return sorted(tuple(int(v) for v in row) for row in frame[["epsg", "tile_x", "tile_y"]].to_numpy())


def _check_tile_rows(tiles: pd.DataFrame) -> None:
    assert _keys(tiles) == [(EPSG, 50, 500), (EPSG, 51, 500), (EPSG, 53, 500)]
    assert counts_of(tile_row(tiles, 50)) == counts(3, 2, 2, 0, 1, 0)
    assert counts_of(tile_row(tiles, 51)) == counts(1, 1, 1, 0, 0, 0)
    assert counts_of(tile_row(tiles, 53)) == counts(0, 1, 0, 1, 0, 1)


@pytest.mark.cli
def test_the_level_tables_as_geoparquet(cli_runs):
    status, _, err = cli_runs["parquet"].result()
    assert status == 0, err
    out = cli_runs["parquet"].directory
    tiles = geopandas.read_parquet(out / "t.parquet")
    assert tiles.crs.to_epsg() == 4326
    assert {"epsg", "tile_x", "tile_y", "count_reference", "count_predicted", "count_tp", "count_fp", "count_fn",
            "count_fp_unassigned", "precision", "recall", "f1", "count_ratio", "count_error", "area_bias_ha",
            "tile_area_km2", "fp_per_km2", "support", "insufficient_support"} <= set(tiles.columns)
    _check_tile_rows(tiles)
    assert tile_row(tiles, 53)["fp_per_km2"] == pytest.approx(0.01, rel=1e-12)
    # The square [500, 510] km x [5000, 5010] km of zone 33, in lon/lat, computed here.
    tr = Transformer.from_crs(ZONE, WGS84, always_xy=True)
    ring = np.asarray(shapely.segmentize(rbox(0, 0, 10_000, 10_000), 10.0).exterior.coords)
    lon, lat = tr.transform(ring[:, 0], ring[:, 1])
    geom = tiles.geometry[(tiles["tile_x"] == 50).to_numpy()].iloc[0]
    np.testing.assert_allclose(geom.bounds, (lon.min(), lat.min(), lon.max(), lat.max()), atol=1e-6)

    aois = geopandas.read_parquet(out / "a.parquet")
    assert aois.crs == geopandas.GeoSeries([], crs=AOI_CRS).crs
    assert aois["id"].tolist() == ["A", "B", "empty"]
    assert counts_of(aois.iloc[0]) == counts(3, 2, 2, 0, 1, 0)
    assert counts_of(aois.iloc[1]) == counts(1, 1, 1, 0, 0, 0)
    assert counts_of(aois.iloc[2]) == counts(0, 0, 0, 0, 0, 0)
    assert is_nan(float(aois.iloc[2]["precision"])) and is_nan(float(aois.iloc[2]["recall"]))

    preds = geopandas.read_parquet(out / "p.parquet")
    assert preds.crs == geopandas.GeoSeries([], crs=PRED_CRS).crs
    assert len(preds) == 4  # the zero-area P2 is not kept
    assert preds["pred_index"].tolist() == [0, 1, 3, 4]
    assert preds["tile_x"].tolist() == [50, 50, 51, 53]
    assert preds["matched"].tolist() == [True, True, True, False]
    assert preds["aoi"].tolist()[:3] == ["A", "A", "B"] and pd.isna(preds["aoi"].tolist()[3])

    metrics = json.loads((out / "m.json").read_text())
    assert metrics["tiles"]["count_tiles"] == 3 and metrics["aois"]["count_aois"] == 3
    assert metrics["count_predicted_dropped"] == 1


@pytest.mark.cli
def test_the_level_tables_as_geopackage(cli_runs):
    import pyogrio

    status, _, err = cli_runs["gpkg"].result()
    assert status == 0, err
    out = cli_runs["gpkg"].directory
    tiles = pyogrio.read_dataframe(out / "t.gpkg")
    assert tiles.crs.to_epsg() == 4326
    _check_tile_rows(tiles)
    aois = pyogrio.read_dataframe(out / "a.gpkg")
    assert aois.crs == geopandas.GeoSeries([], crs=AOI_CRS).crs
    assert aois["id"].tolist() == ["A", "B", "empty"]
    preds = pyogrio.read_dataframe(out / "p.gpkg")
    assert preds.crs == geopandas.GeoSeries([], crs=PRED_CRS).crs
    assert preds["pred_index"].tolist() == [0, 1, 3, 4]


def _assert_refused(status: int, err: str, case: str, directory: Path) -> None:
    assert status == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("evalcore: error: ")
    for text in BAD_CASES[case][2]:
        assert text in lines[0], (text, lines[0])
    # Nothing written: only the AOI layer the test put there is left in the directory.
    left = sorted(p.name for p in directory.iterdir())
    assert left == (["aoi.gpkg"] if BAD_CASES[case][0] is not None else []), left


@pytest.mark.cli
@pytest.mark.parametrize("case", list(BAD_CASES))
def test_bad_level_input_on_the_command_line(cli_runs, case, tmp_path, capsys):
    from evalcore.cli import main

    pred, ref = cli_runs["inputs"]
    args = _bad_case_args(case, pred, ref, tmp_path)
    capsys.readouterr()
    status = main(args)
    _assert_refused(status, capsys.readouterr().err, case, tmp_path)


@pytest.mark.cli
def test_bad_level_input_in_a_subprocess(cli_runs):
    status, _, err = cli_runs["bad"].result()
    _assert_refused(status, err, "duplicate_aoi_ids", cli_runs["bad"].directory)


# --------------------------------------------------------------------------- more placement rules


def test_the_tile_and_aoi_of_a_large_field_are_those_of_its_equal_area_centroid():
    # A 40 km right triangle: its planar UTM centroid and its equal-area centroid differ by
    # about 7 m east and 14 m north. Placed so that the tile lines at offset 10 000 fall
    # between them, the equal-area one decides (computed here with pyproj).
    tri = Polygon([(E0 - 3_330, N0 - 3_326), (E0 + 36_670, N0 - 3_326), (E0 - 3_330, N0 + 36_674)])
    to_ea = Transformer.from_crs(ZONE, EA, always_xy=True)
    from_ea = Transformer.from_crs(EA, ZONE, always_xy=True)
    ea = shapely.transform(shapely.segmentize(tri, 10.0), lambda xy: np.column_stack(to_ea.transform(xy[:, 0], xy[:, 1])))
    cx, cy = from_ea.transform(ea.centroid.x, ea.centroid.y)
    expected = (math.floor(cx / 10_000), math.floor(cy / 10_000))
    assert expected == (50, 500)
    assert (math.floor(tri.centroid.x / 10_000), math.floor(tri.centroid.y / 10_000)) == (51, 501)  # the planar one
    aoi = layer([rbox(0, 0, 10_000, 20_000), rbox(10_000, 0, 20_000, 20_000)], ZONE, id=["west", "east"])
    ref = layer([tri], ZONE)
    t = evaluate_tables(ref, ref, aoi=aoi, aoi_id_column="id", **FAST)
    assert t.tiles[["epsg", "tile_x", "tile_y"]].to_numpy().tolist() == [[EPSG, *expected]]
    assert t.fields["aoi"].tolist() == ["west"]
    assert t.predictions["tile_x"].tolist() == [50] and t.predictions["aoi"].tolist() == ["west"]


def test_a_prediction_homed_across_a_zone_line_counts_in_its_homes_zone_and_tile():
    # The meridian 18°E at lat 45.1° (easting xm in zone 33): R's centroid is 100 m west of it
    # (zone 33), P's 40 m east (zone 34); they overlap 50 x 100 m (IoU 5000 / 33000): P is
    # unmatched and its home is R.
    xm, ym = Transformer.from_crs(WGS84, ZONE, always_xy=True).transform(18.0, 45.1)
    r = box(xm - 190, ym - 50, xm - 10, ym + 50)
    p = box(xm - 60, ym - 50, xm + 140, ym + 50)
    t = evaluate_tables(layer([p], ZONE), layer([r], ZONE), **FAST)
    assert t.fields["utm_epsg"].tolist() == [32633]
    row = t.predictions.iloc[0]
    assert (row["utm_epsg"], row["tile_epsg"]) == (32634, 32633)
    assert (row["tile_x"], row["tile_y"]) == (math.floor((xm - 100) / 10_000), math.floor(ym / 10_000))
    assert len(t.tiles) == 1
    assert counts_of(t.tiles.iloc[0]) == counts(1, 1, 0, 1, 1, 0)
    assert t.tiles["epsg"].tolist() == [32633]


@pytest.mark.parametrize("matching", ["one_to_one", "many_to_one", "max_weight"])
def test_a_prediction_matching_fields_in_two_tiles_counts_once(matching):
    # R1 (offsets 9800-9990, tile 50) and R2 (10010-10150, tile 51); P (9800-10200) overlaps
    # both: IoU 19000 / 40000 = 0.475 with R1 and 14000 / 40000 = 0.35 with R2. At threshold
    # 0.3, one-to-one matches R1 only; many-to-one matches both, P's home is R1 (highest IoU);
    # max_weight takes the heavier of the two pairs that share P, R1, as one-to-one does.
    ref = layer([rbox(9_800, 100, 9_990, 200), rbox(10_010, 100, 10_150, 200)], ZONE)
    pred = layer([rbox(9_800, 100, 10_200, 200)], ZONE)
    t = evaluate_tables(pred, ref, iou_threshold=0.3, matching=matching, **FAST)
    a, b = tile_row(t.tiles, 50), tile_row(t.tiles, 51)
    assert counts_of(a) == counts(1, 1, 1, 0, 0, 0)
    assert t.predictions["tile_x"].tolist() == [50]
    if matching in ("one_to_one", "max_weight"):
        assert counts_of(b) == counts(1, 0, 0, 0, 1, 0)
        assert is_nan(b["precision"]) and b["recall"] == 0.0 and is_nan(b["f1"])
        micro = {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3)}
    else:
        # R2 is a TP of tile 51 without a prediction there: precision 1 / (1 + 0).
        assert counts_of(b) == counts(1, 0, 1, 0, 0, 0)
        assert (b["precision"], b["recall"], b["f1"], b["count_ratio"]) == (1.0, 1.0, 1.0, 0.0)
        micro = {"precision": 1.0, "recall": 1.0, "f1": 1.0}
    assert t.summary["tiles"]["micro"] == micro
    assert t.summary["precision"] == micro["precision"] and t.summary["recall"] == micro["recall"]


def test_empty_layers_have_no_tiles_and_null_levels():
    empty = geopandas.GeoDataFrame(geometry=geopandas.GeoSeries([], crs=ZONE), crs=ZONE)
    aoi = layer([rbox(0, 0, 1_000, 1_000)], ZONE, id=["a"])
    t = evaluate_tables(empty, empty, aoi=aoi, aoi_id_column="id", **FAST)
    s = t.summary["tiles"]
    assert (s["count_tiles"], s["count_tiles_with_reference"], s["count_tiles_without_reference"]) == (0, 0, 0)
    assert s["fp_per_km2_reference_free"] is None and s["fraction_tiles_with_fn"] is None
    assert s["micro"] == {"precision": None, "recall": None, "f1": None}
    assert s["macro"] == {m: {"value": None, "n_units": 0} for m in ("precision", "recall", "f1")}
    assert s["quantiles"]["f1"] == {f"p{q}": None for q in (10, 25, 50, 75, 90)}
    assert s["worst"] is None
    assert len(t.tiles) == 0 and t.tiles.crs.to_epsg() == 4326
    a = t.summary["aois"]
    assert (a["count_aois"], a["count_aois_with_reference"], a["fraction_aois_with_fn"]) == (1, 0, None)
    assert a["per_aoi"]["a"]["count_reference"] == 0 and a["per_aoi"]["a"]["precision"] is None
    assert len(t.aois) == 1


def test_the_annotated_rule_in_groups_counts_only_predictions_with_a_home():
    # Strata: R1 "a", R2 "b". F (annotated FP) has home R2; H and O have none and count overall only.
    pred, ref = _annotated_layout()
    ref["group"] = ["a", "b"]
    m = evaluate(pred, ref, strata="group", annotated_area=layer([ea_box(0, 0, 1_000, 1_000)], EA), **FAST)
    assert m["per_stratum"]["a"]["precision_annotated"] == 1.0  # 1 / (1 + 0)
    assert m["per_stratum"]["b"]["precision_annotated"] == 0.0  # 0 / (0 + 1)
    assert m["per_stratum"]["a"]["count_fp_outside_annotation"] == 0
    assert m["per_stratum"]["b"]["count_fp_outside_annotation"] == 0
    assert m["count_fp_outside_annotation"] == 2  # H and O


def test_the_units_intervals_do_not_depend_on_their_blocks(monkeypatch):
    # Tiles' intervals are made a block of units at a time (memory); blocks of 1 and 3 units
    # must give the bits of one block of all of them. Eight 1 km tiles with 1-3 fields each.
    from evalcore import levels

    refs, preds = [], []
    for t in range(8):
        for k in range(1 + t % 3):
            g = sq(1_000 * t + 100 + 250 * k, 100)
            refs.append(g)
            preds.append(g if (t + k) % 2 else sq(1_000 * t + 160 + 250 * k, 100))
    kwargs = dict(bootstrap=30, tile_km=1, **FAST)
    whole = evaluate_tables(layer(preds, ZONE), layer(refs, ZONE), **kwargs).tiles
    assert len(whole) == 8 and whole["f1_ci_lower"].notna().any()
    for size in (1, 3):
        monkeypatch.setattr(levels, "UNITS_PER_BLOCK", size)
        blocked = evaluate_tables(layer(preds, ZONE), layer(refs, ZONE), **kwargs).tiles
        pd.testing.assert_frame_equal(blocked, whole, check_exact=True)
