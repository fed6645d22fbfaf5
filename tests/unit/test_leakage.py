"""The spatial leakage audit (SPEC 6.9, seed 004 §12.3): rows within a buffer of a training area.

Every expected value is worked out by hand in the comments from the layout; the distances
that decide the two-zone cases are checked here with pyproj and shapely directly. The
single-zone layout is in UTM zone 13N around (X0, Y0) (tests/common.py), in metres from
(X0, Y0); the training area is T = [0, 200] x [0, 200].
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import shapely
from pyproj import Transformer
from shapely.geometry import Point, box

from evalcore import evaluate, evaluate_frame
from evalcore.errors import EvalInputError
from tests.common import UTM, WGS84, X0, Y0, layer

FAST = {"boundary_sample_spacing_m": None, "iou_sweep_thresholds": None}


def ubox(x0: float, y0: float, x1: float, y1: float) -> shapely.Polygon:
    return box(X0 + x0, Y0 + y0, X0 + x1, Y0 + y1)


TRAIN = ubox(0, 0, 200, 200)

# Reference fields and their distance to T:
#   overlap [150, 250] x [50, 150]     overlaps T          0
#   touch   [200, 300] x [160, 200]    shares T's edge     0 (touching)
#   near5   [205, 305] x [0, 40]       east of T           5 m
#   near15  [-115, -15] x [50, 150]    west of T           15 m
#   far     [1000, 1100] x [0, 100]                        800 m
REF = {
    "overlap": ubox(150, 50, 250, 150),
    "touch": ubox(200, 160, 300, 200),
    "near5": ubox(205, 0, 305, 40),
    "near15": ubox(-115, 50, -15, 150),
    "far": ubox(1_000, 0, 1_100, 100),
}
WITHIN = {0.0: {"overlap", "touch"}, 10.0: {"overlap", "touch", "near5"}, 20.0: {"overlap", "touch", "near5", "near15"}}


def _ref():
    return layer(list(REF.values()), UTM, index=list(REF))


def _pred():
    # The reference fields themselves, and one more prediction inside T (a false positive
    # within every buffer): 6 predictions.
    return layer(list(REF.values()) + [ubox(20, 20, 80, 80)], UTM, index=list(REF) + ["fp_in_t"])


@pytest.mark.parametrize("buffer_m", [0.0, 10.0, 20.0])
def test_rows_within_the_buffer_are_counted(buffer_m):
    m = evaluate(_pred(), _ref(), training_area=layer([TRAIN]), leakage_buffer_m=buffer_m, **FAST)
    n = len(WITHIN[buffer_m])
    leak = m["leakage"]
    assert leak["buffer_m"] == buffer_m and leak["excluded"] is False and "note" not in leak
    assert leak["count_reference_within_buffer"] == n
    assert leak["count_predicted_within_buffer"] == n + 1  # and the prediction inside T
    assert (leak["count_reference_audited"], leak["count_predicted_audited"]) == (5, 6)
    assert leak["fraction"] == n / 5 and leak["fraction_predicted"] == (n + 1) / 6
    # Counted, not excluded: every row is evaluated.
    assert (m["count_reference"], m["count_predicted"], m["count_tp"], m["count_fp"]) == (5, 6, 5, 1)


def test_excluded_rows_leave_both_layers_and_the_output_says_so():
    # At 10 m: overlap, touch, near5 and the prediction inside T leave; near15 and far
    # stay on both sides, matched.
    m = evaluate(_pred(), _ref(), training_area=layer([TRAIN]), leakage_buffer_m=10.0, exclude_training_area=True, **FAST)
    leak = m["leakage"]
    assert leak["excluded"] is True and "excluded" in leak["note"]
    assert (leak["count_reference_within_buffer"], leak["count_predicted_within_buffer"]) == (3, 4)
    assert (leak["count_reference_audited"], leak["count_predicted_audited"]) == (5, 6)
    assert leak["fraction"] == 3 / 5
    assert (m["count_reference"], m["count_predicted"], m["count_tp"], m["count_fp"], m["count_fn"]) == (2, 2, 2, 0, 0)
    frame = evaluate_frame(_pred(), _ref(), training_area=layer([TRAIN]), leakage_buffer_m=10.0, exclude_training_area=True, **FAST)
    assert set(frame.index) == {"near15", "far"}
    # Exclusion is not a drop: the dropped counts stay those of SPEC 2.
    assert (m["count_reference_dropped"], m["count_predicted_dropped"]) == (0, 0)


def test_the_audit_covers_the_rows_the_study_area_kept():
    # A study area around everything but "far": 4 reference fields and 5 predictions are
    # audited; at 0 m, 2 and 3 of them are within.
    study = layer([ubox(-500, -500, 500, 500)])
    m = evaluate(_pred(), _ref(), study_area=study, training_area=layer([TRAIN]), **FAST)
    assert m["count_reference_outside_study_area"] == m["count_predicted_outside_study_area"] == 1
    leak = m["leakage"]
    assert (leak["count_reference_audited"], leak["count_predicted_audited"]) == (4, 5)
    assert (leak["count_reference_within_buffer"], leak["count_predicted_within_buffer"]) == (2, 3)
    assert leak["fraction"] == 2 / 4


def test_nothing_audited_gives_a_null_fraction():
    m = evaluate(layer([ubox(0, 0, 1, 1)])[:0], layer([ubox(0, 0, 1, 1)])[:0], training_area=layer([TRAIN]), **FAST)
    assert m["leakage"]["count_reference_audited"] == 0
    assert math.isnan(m["leakage"]["fraction"])


def test_without_a_training_area_there_is_no_leakage_block():
    assert "leakage" not in evaluate(_pred(), _ref(), **FAST)


# --------------------------------------------------------------------------- two UTM zones
#
# Around lon -102 (the line between zones 13 and 14) at lat 40. In each zone a training
# square Tz of 200 m and, to its outer side, fields at gaps measured in that zone: 5 m and
# 15 m (the 10 m hand case) and a gap chosen to straddle a 5 km buffer, where the other
# zone's scale would decide the other way (checked with pyproj below). The layers are given
# in EPSG:4326: the fields by their four corners (so each is the same box again in its home
# zone), the training squares densified at 1 m first (so their edges stay straight there).

Z13, Z14 = "EPSG:32613", "EPSG:32614"


def _zone_xy(lon: float, lat: float, zone: str) -> tuple[float, float]:
    return Transformer.from_crs(WGS84, zone, always_xy=True).transform(lon, lat)


def _to_wgs84(geom: shapely.Geometry, zone: str, densify_m: float | None = None) -> shapely.Geometry:
    t = Transformer.from_crs(zone, WGS84, always_xy=True)
    g = shapely.segmentize(geom, densify_m) if densify_m else geom
    return shapely.transform(g, lambda xy: np.column_stack(t.transform(xy[:, 0], xy[:, 1])))


def _in_zone(geom_wgs84: shapely.Geometry, zone: str, densify_deg: float | None = None) -> shapely.Geometry:
    t = Transformer.from_crs(WGS84, zone, always_xy=True)
    g = shapely.segmentize(geom_wgs84, densify_deg) if densify_deg else geom_wgs84
    return shapely.transform(g, lambda xy: np.column_stack(t.transform(xy[:, 0], xy[:, 1])))


def _two_zone_layout(wide_gap_m: dict[str, float]):
    """(training squares, fields {name: (polygon, zone)}) in EPSG:4326.

    In zone 14 the square is east of lon -102 with its fields further east; in zone 13 it
    is west of -102 with its fields further west. Field names: ``<zone>_5``, ``<zone>_15``
    and ``<zone>_wide`` (the gap of ``wide_gap_m[zone]``)."""
    train, fields = [], {}
    for zone, lon, side in ((Z14, -101.97, 1.0), (Z13, -102.03, -1.0)):
        e, n = _zone_xy(lon, 40.0, zone)
        t = box(e, n, e + 200.0, n + 200.0) if side > 0 else box(e - 200.0, n, e, n + 200.0)
        train.append(_to_wgs84(t, zone, densify_m=1.0))
        edge = e + 200.0 if side > 0 else e - 200.0
        key = zone[-2:]
        for name, gap, y in (("5", 5.0, 0.0), ("15", 15.0, 100.0), ("wide", wide_gap_m[key], 0.0)):
            near = edge + side * gap
            far = near + side * 100.0
            f = box(min(near, far), n + y, max(near, far), n + y + 80.0)
            fields[f"{key}_{name}"] = (_to_wgs84(f, zone), zone, t)
    return train, fields


def test_the_hand_case_in_two_zones():
    train, fields = _two_zone_layout({"13": 3_000.0, "14": 3_000.0})
    ref = layer([g for g, _, _ in fields.values()], WGS84, index=list(fields))
    t = layer(train, WGS84)
    for buffer_m, expected in ((0.0, set()), (10.0, {"13_5", "14_5"}), (20.0, {"13_5", "14_5", "13_15", "14_15"})):
        frame = evaluate_frame(ref, ref, training_area=t, leakage_buffer_m=buffer_m, exclude_training_area=True, **FAST)
        assert set(frame.index) == set(fields) - expected, buffer_m
    m = evaluate(ref, ref, training_area=t, leakage_buffer_m=10.0, **FAST)
    assert set(m["utm_epsg_codes"]) == {32613, 32614}
    assert m["leakage"]["count_reference_within_buffer"] == 2


def test_distances_are_measured_in_each_fields_own_zone():
    # Near the zone line a distance is about 5e-5 longer in the other zone's metres than in
    # the home zone's: at lon -101.97 zone 14's central meridian is 2.97° away and zone
    # 13's 3.03°, and the other way round at -102.03 (checked below with pyproj). A gap of
    # 4 999.9 m in the home zone is then over 5 000 m in the other zone (and over 5 600 m
    # in EPSG:6933, whose scale along x is cos 30° / cos 40° = 1.13 there): at a 5 km
    # buffer both fields are within only when each is measured in its own zone.
    train, fields = _two_zone_layout({"14": 4_999.9, "13": 4_999.9})
    for key, other in (("14", Z13), ("13", Z14)):
        geom, home, t = fields[f"{key}_wide"]
        assert math.isclose(shapely.distance(_in_zone(geom, home), t), 4_999.9, abs_tol=1e-6)
        t_other = _in_zone(_to_wgs84(t, home, densify_m=1.0), other)
        d_other = shapely.distance(_in_zone(geom, other, densify_deg=1e-5), t_other)
        assert 5_000.0 < d_other < 5_001.0, (key, d_other)
    names = ["14_wide", "13_wide"]
    ref = layer([fields[k][0] for k in names], WGS84, index=names)
    t = layer(train, WGS84)
    m = evaluate(ref, ref, training_area=t, leakage_buffer_m=5_000.0, **FAST)
    assert m["leakage"]["count_reference_within_buffer"] == 2
    assert m["leakage"]["count_predicted_within_buffer"] == 2
    m = evaluate(ref, ref, training_area=t, leakage_buffer_m=4_999.8, **FAST)
    assert m["leakage"]["count_reference_within_buffer"] == 0


# --------------------------------------------------------------------------- bad input


def test_bad_training_area_and_buffer():
    with pytest.raises(EvalInputError, match="training-area layer.*no CRS"):
        evaluate(_pred(), _ref(), training_area=layer([TRAIN], None), **FAST)
    with pytest.raises(EvalInputError, match="training-area layer.*no polygon"):
        evaluate(_pred(), _ref(), training_area=layer([Point(X0, Y0)], UTM), **FAST)
    with pytest.raises(ValueError, match=r"leakage_buffer_m \(--leakage-buffer-m\).*-1"):
        evaluate(_pred(), _ref(), training_area=layer([TRAIN]), leakage_buffer_m=-1.0, **FAST)
    with pytest.raises(ValueError, match="leakage_buffer_m"):
        evaluate(_pred(), _ref(), training_area=layer([TRAIN]), leakage_buffer_m=float("nan"), **FAST)
    with pytest.raises(ValueError, match="needs a training area"):
        evaluate(_pred(), _ref(), exclude_training_area=True, **FAST)
    with pytest.raises(ValueError, match="needs a training area"):
        evaluate(_pred(), _ref(), leakage_buffer_m=10.0, **FAST)
