"""The study area (SPEC 6.9, seed 000 "In the pipeline"): one rule selects both layers.

Every expected value is worked out by hand in the comments from the layout (or, for
areas, with pyproj and shapely directly), never taken from evalcore's output. The
layouts are in UTM zone 13N around (X0, Y0) (tests/common.py); the study area is the
square S = [0, 1000] x [0, 1000] metres from (X0, Y0).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import geopandas
import numpy as np
import pytest
import shapely
from shapely.geometry import Point, box

from evalcore import evaluate, evaluate_frame
from evalcore.errors import EvalInputError
from tests.common import LEAKAGE_KEYS, STUDY_AREA_KEYS, UTM, X0, Y0, ea_area, layer

FAST = {"boundary_sample_spacing_m": None, "iou_sweep_thresholds": None}


def ubox(x0: float, y0: float, x1: float, y1: float) -> shapely.Polygon:
    """A box in metres from (X0, Y0), UTM 13N."""
    return box(X0 + x0, Y0 + y0, X0 + x1, Y0 + y1)


STUDY = ubox(0, 0, 1_000, 1_000)

# The reference fields, each 100 m tall, in rows of their own:
#   A [100, 200]     inside S
#   B [900, 1040]    across the outline, centroid x = 970: inside
#   C [980, 1100]    across the outline, centroid x = 1040: outside
#   F [900, 1000]    inside, its right edge on the outline (within: no point outside)
#   E [3000, 3100]   outside, far
FIELDS = {
    "A": ubox(100, 100, 200, 200),
    "B": ubox(900, 300, 1_040, 400),
    "C": ubox(980, 500, 1_100, 600),
    "F": ubox(900, 700, 1_000, 800),
    "E": ubox(3_000, 100, 3_100, 200),
}
KEPT = {
    "intersects": {"A", "B", "C", "F"},  # everything that shares a point with S
    "within": {"A", "F"},                # nothing outside S
    "centroid": {"A", "B", "F"},         # the centroid inside S
}


def _ref() -> geopandas.GeoDataFrame:
    return layer(list(FIELDS.values()), UTM, index=list(FIELDS))


@pytest.mark.parametrize("rule", list(KEPT))
def test_each_rule_keeps_its_fields(rule):
    frame = evaluate_frame(_ref(), _ref(), study_area=layer([STUDY]), study_area_rule=rule, **FAST)
    assert set(frame.index) == KEPT[rule]


@pytest.mark.parametrize("rule", list(KEPT))
def test_the_same_rule_selects_both_layers(rule):
    # The predictions are the reference fields themselves: whatever the rule keeps of one
    # layer it keeps of the other, so every kept field is matched and nothing is a false
    # positive or a false negative.
    m = evaluate(_ref(), _ref(), study_area=layer([STUDY]), study_area_rule=rule, **FAST)
    n_kept = len(KEPT[rule])
    assert (m["count_reference"], m["count_predicted"], m["count_tp"]) == (n_kept, n_kept, n_kept)
    assert (m["count_fp"], m["count_fn"]) == (0, 0)
    assert m["count_reference_outside_study_area"] == m["count_predicted_outside_study_area"] == 5 - n_kept


def test_a_field_across_the_outline_is_kept_or_dropped_on_both_sides_alike():
    # Reference R = [900, 1100] across the outline and its prediction P = [920, 1100]
    # (IoU 180 / 200 = 0.9): with "intersects" both are kept and matched; with "within"
    # both are left out, so R is no false negative and P no false positive.
    ref = layer([ubox(900, 0, 1_100, 100)], UTM)
    pred = layer([ubox(920, 0, 1_100, 100)], UTM)
    study = layer([STUDY])
    inter = evaluate(pred, ref, study_area=study, **FAST)  # the default rule: intersects
    assert (inter["count_reference"], inter["count_predicted"], inter["count_tp"]) == (1, 1, 1)
    within = evaluate(pred, ref, study_area=study, study_area_rule="within", **FAST)
    assert (within["count_reference"], within["count_predicted"], within["count_fn"], within["count_fp"]) == (0, 0, 0, 0)
    assert within["count_reference_outside_study_area"] == within["count_predicted_outside_study_area"] == 1


def test_the_centroid_rule_uses_the_equal_area_centroid():
    # A right triangle whose planar UTM centroid is inside S while its area lies mostly
    # outside is decided by the centroid alone: legs of 600 m from (700, 100), the
    # centroid at (700 + 200, 100 + 200) = (900, 300), inside; the triangle reaches
    # x = 1300, so with "within" it is out, with "intersects" in.
    tri = shapely.Polygon([(X0 + 700, Y0 + 100), (X0 + 1_300, Y0 + 100), (X0 + 700, Y0 + 700)])
    # A second one mirrored so its centroid (1100, 300) is outside though it crosses S.
    tri_out = shapely.Polygon([(X0 + 1_400, Y0 + 100), (X0 + 800, Y0 + 100), (X0 + 1_400, Y0 + 700)])
    ref = layer([tri, tri_out], UTM, index=["in", "out"])
    for rule, expected in (("centroid", {"in"}), ("within", set()), ("intersects", {"in", "out"})):
        frame = evaluate_frame(ref, ref, study_area=layer([STUDY]), study_area_rule=rule, **FAST)
        assert set(frame.index) == expected, rule


def test_dropped_rows_stay_dropped_and_are_not_outside():
    # Two rows SPEC 2 drops (a null and an empty geometry), one outside S, two inside.
    geoms = [FIELDS["A"], None, shapely.Polygon(), FIELDS["E"], FIELDS["B"]]
    ref = layer(geoms, UTM)
    pred = layer([FIELDS["A"], FIELDS["E"], Point(X0, Y0)], UTM)  # the point is dropped
    m = evaluate(pred, ref, study_area=layer([STUDY]), **FAST)
    assert (m["count_reference_dropped"], m["count_reference_outside_study_area"], m["count_reference"]) == (2, 1, 2)
    assert (m["count_predicted_dropped"], m["count_predicted_outside_study_area"], m["count_predicted"]) == (1, 1, 1)


def test_the_study_area_is_prepared_and_its_area_reported():
    # S given in EPSG:4326 (its corners transformed from UTM): its area in EPSG:6933,
    # computed here with pyproj on a 1e-5 degree split, in km²; and two overlapping
    # polygons count their overlap once.
    study = layer([STUDY], UTM).to_crs("EPSG:4326")
    m = evaluate(_ref(), _ref(), study_area=study, **FAST)
    assert m["study_area"]["rule"] == "intersects"
    assert m["study_area"]["count_polygons"] == 1
    assert math.isclose(m["study_area"]["area_km2"], ea_area(study.geometry.iloc[0], "EPSG:4326") / 1e6, rel_tol=1e-6)
    halves = layer([ubox(0, 0, 600, 1_000), ubox(400, 0, 1_000, 1_000)], UTM)
    m2 = evaluate(_ref(), _ref(), study_area=halves, **FAST)
    assert math.isclose(m2["study_area"]["area_km2"], ea_area(STUDY, UTM) / 1e6, rel_tol=1e-9)
    assert m2["study_area"]["count_polygons"] == 2


def test_the_keys_appear_only_with_their_layers():
    plain = set(evaluate(_ref(), _ref(), **FAST))
    assert not (STUDY_AREA_KEYS | LEAKAGE_KEYS) & plain
    with_study = evaluate(_ref(), _ref(), study_area=layer([STUDY]), **FAST)
    assert set(with_study) == plain | STUDY_AREA_KEYS
    both = evaluate(_ref(), _ref(), study_area=layer([STUDY]), training_area=layer([STUDY]), **FAST)
    assert set(both) == plain | STUDY_AREA_KEYS | LEAKAGE_KEYS
    assert set(both["study_area"]) == {"rule", "area_km2", "count_polygons"}
    assert set(both["leakage"]) == {
        "buffer_m", "distance_crs", "count_reference_within_buffer", "count_predicted_within_buffer",
        "count_reference_audited", "count_predicted_audited", "fraction", "fraction_predicted", "excluded",
        "training_area_km2", "count_polygons",
    }


def test_the_within_rule_across_grid_lines_of_a_large_study_area():
    # A 10 km study area is cut into 2 km pieces; fields straddling a piece's edge are
    # decided against the whole area. 100 m fields on a 230 m grid from -1 km to 11 km:
    # a field is within S10 exactly when its box lies in [0, 10 000]² (no field edge
    # comes within 10 m of the outline, so the answer is plain from the coordinates).
    s10 = ubox(0, 0, 10_000, 10_000)
    fields, expected = [], set()
    starts = np.arange(-1_000.0, 11_000.0, 230.0)
    for i, x in enumerate(starts):
        for j, y in enumerate(starts[::4]):
            fields.append(ubox(x, y, x + 100, y + 100))
            if 0 <= x and x + 100 <= 10_000 and 0 <= y and y + 100 <= 10_000:
                expected.add(len(fields) - 1)
    ref = layer(fields, UTM)
    frame = evaluate_frame(ref, ref, study_area=layer([s10]), study_area_rule="within", **FAST)
    assert set(frame.index) == expected
    inter = evaluate_frame(ref, ref, study_area=layer([s10]), **FAST)
    touching = {k for k, g in enumerate(fields) if g.intersects(s10)}
    assert set(inter.index) == touching


# --------------------------------------------------------------------------- bad input


def _write(frame: geopandas.GeoDataFrame, path: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "'crs' was not provided" for the layer without a CRS
        frame.to_file(path, driver="GPKG", engine="pyogrio")
    return str(path)


def test_bad_study_area_in_the_library(tmp_path):
    with pytest.raises(EvalInputError, match="no CRS"):
        evaluate(_ref(), _ref(), study_area=layer([STUDY], None), **FAST)
    with pytest.raises(EvalInputError, match="no polygon"):
        evaluate(_ref(), _ref(), study_area=layer([Point(X0, Y0)], UTM), **FAST)
    with pytest.raises(EvalInputError, match="row 1"):
        evaluate(_ref(), _ref(), study_area=layer([STUDY, Point(X0, Y0)], UTM), **FAST)
    with pytest.raises(ValueError, match="study_area_rule.*'inside'"):
        evaluate(_ref(), _ref(), study_area=layer([STUDY]), study_area_rule="inside", **FAST)
    with pytest.raises(ValueError, match="needs a study area"):
        evaluate(_ref(), _ref(), study_area_rule="within", **FAST)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("study_cli")
    ref = _write(_ref(), d / "ref.gpkg")
    return d, ref


BAD = {
    # name: (study-area layer or None, extra arguments, strings the one line must hold)
    "no_crs": (lambda: layer([STUDY], None), [], ["study.gpkg", "CRS"]),
    "no_polygon": (lambda: layer([Point(X0, Y0)], UTM), [], ["study.gpkg", "no polygon"]),
    "unknown_rule": (lambda: layer([STUDY], UTM), ["--study-area-rule", "inside"], ["--study-area-rule", "inside"]),
    "training_no_crs": (None, ["--training-area", "TRAIN"], ["train.gpkg", "CRS"]),
    "negative_buffer": (None, ["--training-area", "TRAIN", "--leakage-buffer-m", "-1"], ["--leakage-buffer-m", "-1"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_on_the_command_line(inputs, case, tmp_path, capsys):
    from evalcore.cli import main

    d, ref = inputs
    make, extra, expected = BAD[case]
    args = ["evaluate", "-p", ref, "-r", ref, "-q", "-o", str(tmp_path / "m.json")]
    if make is not None:
        args += ["--study-area", _write(make(), tmp_path / "study.gpkg")]
    if "TRAIN" in extra:
        train = layer([STUDY], None) if case == "training_no_crs" else layer([STUDY], UTM)
        extra = [_write(train, tmp_path / "train.gpkg") if a == "TRAIN" else a for a in extra]
    capsys.readouterr()
    status = main(args + extra)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, err
    assert len(lines) == 1, err
    for text in expected:
        assert text in lines[0], (text, lines[0])
    assert not (tmp_path / "m.json").exists()
