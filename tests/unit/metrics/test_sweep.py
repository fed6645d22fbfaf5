"""IoU-threshold sweep (SPEC 6.1): one entry per threshold, equal to a separate evaluate.

Each entry of ``iou_sweep`` (overall, per stratum, per size class) must equal, key for
key, what ``evaluate(..., iou_threshold=t)`` returns for precision, recall, f1,
iou_mean, count_tp, count_fp and count_fn in the same group, including SPEC section
4's empty-denominator values (rates 0.0 when a denominator is empty, 1.0 when both
layers are empty, NaN in an empty size class).

Layouts are strips in EPSG:6933 (tests.common.strip: one unit = 100 m, 100 m high, so
1 unit = 1 ha exactly and IoUs of strips are exact ratios). Hand values are worked
out in the comments.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from shapely.geometry import box

from evalcore import evaluate
from tests.common import cli_in_process, EA, EA_X0, EA_Y0, empty_layer, layer, scenario_a, strips

SWEEP_KEYS = ("precision", "recall", "f1", "iou_mean", "count_tp", "count_fp", "count_fn")
ENTRY_KEYS = {"iou_threshold", *SWEEP_KEYS}
COUNT_KEYS = ("count_tp", "count_fp", "count_fn")
DEFAULT_THRESHOLDS = [round(0.5 + 0.05 * k, 2) for k in range(10)]
GROUPS = ("per_stratum", "per_size_class")
MATCHINGS = ("one_to_one", "many_to_one", "max_weight")


def same(a: object, b: object, rel: float = 1e-12) -> bool:
    """Equal counts; floats equal to ``rel`` with NaN == NaN."""
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)
    return a == b


def assert_entry(entry: dict, expected: dict, where: str) -> None:
    for key in SWEEP_KEYS:
        assert same(entry[key], expected[key]), (where, key, entry[key], expected[key])
    for key in COUNT_KEYS:
        assert isinstance(entry[key], int), (where, key, type(entry[key]))


def assert_sweep_equals_separate_runs(pred, ref, thresholds=None, **kwargs) -> dict:
    """Compare every sweep entry (overall and per group) with ``evaluate(iou_threshold=t)``."""
    if thresholds is None:
        m = evaluate(pred, ref, **kwargs)  # the default sweep
        thresholds = DEFAULT_THRESHOLDS
    else:
        m = evaluate(pred, ref, iou_sweep_thresholds=thresholds, **kwargs)
    assert [e["iou_threshold"] for e in m["iou_sweep"]] == list(thresholds)
    for group in GROUPS:
        for key, entry in m.get(group, {}).items():
            assert [e["iou_threshold"] for e in entry["iou_sweep"]] == list(thresholds), (group, key)
    for i, t in enumerate(thresholds):
        single = evaluate(pred, ref, iou_threshold=t, iou_sweep_thresholds=None, **kwargs)
        assert ENTRY_KEYS <= set(m["iou_sweep"][i])
        assert_entry(m["iou_sweep"][i], single, f"overall t={t}")
        for group in GROUPS:
            if group not in single:
                continue
            assert set(m[group]) == set(single[group])
            for key in single[group]:
                assert_entry(m[group][key]["iou_sweep"][i], single[group][key], f"{group}[{key}] t={t}")
    return m


# --------------------------------------------------------------------------------------
# A layout where a prediction's home changes with the threshold.
# --------------------------------------------------------------------------------------
#
# Reference fields (position: strip, stratum, area):
#   0 A   [0, 3]     "s1"   3 ha
#   1 B   [0, 20]    "s2"  20 ha   (contains A: overlapping references)
#   2 C   [30, 31]   "s1"   1 ha
#   3 D   [31, 32]   "s3"   1 ha
#   4 E   [40, 42]   "s3"   2 ha
#   5 H   [70, 71]   None   1 ha
# Predictions:
#   0 P   [0, 5]       IoU(A) = 3/5 = 0.6, IoU(B) = 5/20 = 0.25; largest intersection B.
#                      t <= 0.6: matched to A (home A, "s1"); t > 0.6: unmatched, home B ("s2").
#   1 Q   [0, 19]      IoU(B) = 19/20 = 0.95, IoU(A) = 3/19: matched to B up to t = 0.95.
#   2 M   [30, 32]     IoU 1/2 with C and with D: one-to-one takes C (reference order),
#                      many-to-one both, at t <= 0.5.
#   3 E1  [40, 41.4]   IoU(E) = 0.7
#   4 E2  [41.2, 42]   IoU(E) = 0.4: a duplicate, home E
#   5 F   [60, 61]     overlaps nothing
#   6 G   [70, 71.25]  IoU(H) = 0.8
# Size classes [0, 1.5, 2.5, 10, 30, 100] ha: C, D, H in 0-1.5; E in 1.5-2.5; A in
# 2.5-10; B in 10-30; 30-100 is empty.

HOME_REF = [(0, 3), (0, 20), (30, 31), (31, 32), (40, 42), (70, 71)]
HOME_STRATA = ["s1", "s2", "s1", "s3", "s3", None]
HOME_PRED = [(0, 5), (0, 19), (30, 32), (40, 41.4), (41.2, 42), (60, 61), (70, 71.25)]
HOME_BINS = [0, 1.5, 2.5, 10, 30, 100]


def _home_layers():
    return layer(strips(HOME_PRED, EA), EA), layer(strips(HOME_REF, EA), EA, county=HOME_STRATA)


@pytest.mark.parametrize("matching", MATCHINGS)
def test_sweep_equals_separate_runs_when_homes_move(matching):
    pred, ref = _home_layers()
    m = assert_sweep_equals_separate_runs(pred, ref, matching=matching, strata="county", size_bins=HOME_BINS)
    # By hand, stratum "s1" (A, C) and "s2" (B) at t = 0.5 and 0.65 (entries 0 and 3):
    s1 = m["per_stratum"]["s1"]["iou_sweep"]
    s2 = m["per_stratum"]["s2"]["iou_sweep"]
    # t = 0.5: P matched to A and M to C: s1 TP 2, FP 0; s2: Q matched to B, TP 1, FP 0.
    assert (s1[0]["count_tp"], s1[0]["count_fp"], s1[0]["count_fn"]) == (2, 0, 0)
    assert (s2[0]["count_tp"], s2[0]["count_fp"], s2[0]["count_fn"]) == (1, 0, 0)
    # t = 0.65: P unmatched, home B: its FP moves to s2; A and C are missed in s1, and
    # M (home C, the first of its tied largest intersections) is an FP of s1.
    assert s1[3]["iou_threshold"] == 0.65
    assert (s1[3]["count_tp"], s1[3]["count_fp"], s1[3]["count_fn"]) == (0, 1, 2)
    assert (s2[3]["count_tp"], s2[3]["count_fp"], s2[3]["count_fn"]) == (1, 1, 0)
    assert s2[3]["precision"] == pytest.approx(0.5, rel=1e-12)
    # t = 0.95: Q's IoU is exactly 0.95 and still matches; nothing else does.
    last = m["iou_sweep"][-1]
    assert last["iou_threshold"] == 0.95
    assert (last["count_tp"], last["count_fp"], last["count_fn"]) == (1, 6, 5)
    assert last["iou_mean"] == pytest.approx(0.95, rel=1e-12)
    # The empty size class: n = 0, NaN rates, zero counts, at every threshold.
    for entry in m["per_size_class"]["30-100"]["iou_sweep"]:
        assert all(math.isnan(entry[key]) for key in ("precision", "recall", "f1", "iou_mean"))
        assert (entry["count_tp"], entry["count_fp"], entry["count_fn"]) == (0, 0, 0)


def test_many_to_one_counts_both_fields_of_a_tie():
    pred, ref = _home_layers()
    one = evaluate(pred, ref, strata="county", iou_sweep_thresholds=[0.5])
    many = evaluate(pred, ref, strata="county", matching="many_to_one", iou_sweep_thresholds=[0.5])
    # M matches C only one-to-one (D is an FN of s3), C and D many-to-one.
    assert one["per_stratum"]["s3"]["iou_sweep"][0]["count_tp"] == 1  # E
    assert many["per_stratum"]["s3"]["iou_sweep"][0]["count_tp"] == 2  # E, D
    assert many["iou_sweep"][0]["count_tp"] == one["iou_sweep"][0]["count_tp"] + 1


@pytest.mark.parametrize("matching", MATCHINGS)
def test_sweep_equals_separate_runs_on_scenario_a_in_utm(matching):
    pred, ref = scenario_a(county=["a", "b", "a", None])
    assert_sweep_equals_separate_runs(pred, ref, [0.3, 0.35, 0.4, 0.6, 0.9, 1.0], matching=matching, strata="county", size_bins=[0, 1.5, 3])


# --------------------------------------------------------------------------------------
# A hand-computed sweep
# --------------------------------------------------------------------------------------
#
#   R0 [0, 1] "x"    P0 [0, 0.8]    IoU(R0) = 0.8
#   R1 [2, 4] "y"    P1 [2, 3.2]    IoU(R1) = 1.2 / 2 = 0.6
#   R2 [6, 7] "x"    P2 [3.2, 4]    IoU(R1) = 0.8 / 2 = 0.4   (home R1)
#                    P3 [6.5, 7.5]  IoU(R2) = 0.5 / 1.5 = 1/3
# One-to-one and many-to-one agree (no prediction is eligible with two fields, and R1
# prefers P1). Size classes [0, 1.5, 3, 10]: R0, R2 in 0-1.5 ("x"), R1 in 1.5-3 ("y"),
# 3-10 empty.

HAND_THRESHOLDS = [0.3, 0.5, 0.6, 0.65, 0.8, 0.85]
# t: (precision, recall, f1, iou_mean, TP, FP, FN)
HAND_OVERALL = {
    0.3: (3 / 4, 1.0, 6 / 7, (0.8 + 0.6 + 1 / 3) / 3, 3, 1, 0),  # R0-P0, R1-P1, R2-P3
    0.5: (1 / 2, 2 / 3, 4 / 7, 0.7, 2, 2, 1),  # R0-P0, R1-P1
    0.6: (1 / 2, 2 / 3, 4 / 7, 0.7, 2, 2, 1),  # IoU exactly 0.6 matches
    0.65: (1 / 4, 1 / 3, 2 / 7, 0.8, 1, 3, 2),  # R0-P0
    0.8: (1 / 4, 1 / 3, 2 / 7, 0.8, 1, 3, 2),  # IoU exactly 0.8 matches
    0.85: (0.0, 0.0, 0.0, 0.0, 0, 4, 3),  # nothing: iou_mean 0.0 (empty denominator)
}
HAND_X = {  # R0, R2 with P0, P3
    0.3: (1.0, 1.0, 1.0, (0.8 + 1 / 3) / 2, 2, 0, 0),
    0.5: (1 / 2, 1 / 2, 1 / 2, 0.8, 1, 1, 1),
    0.6: (1 / 2, 1 / 2, 1 / 2, 0.8, 1, 1, 1),
    0.65: (1 / 2, 1 / 2, 1 / 2, 0.8, 1, 1, 1),
    0.8: (1 / 2, 1 / 2, 1 / 2, 0.8, 1, 1, 1),
    0.85: (0.0, 0.0, 0.0, 0.0, 0, 2, 2),
}
HAND_Y = {  # R1 with P1, P2
    0.3: (1 / 2, 1.0, 2 / 3, 0.6, 1, 1, 0),
    0.5: (1 / 2, 1.0, 2 / 3, 0.6, 1, 1, 0),
    0.6: (1 / 2, 1.0, 2 / 3, 0.6, 1, 1, 0),
    0.65: (0.0, 0.0, 0.0, 0.0, 0, 2, 1),
    0.8: (0.0, 0.0, 0.0, 0.0, 0, 2, 1),
    0.85: (0.0, 0.0, 0.0, 0.0, 0, 2, 1),
}
NAN4 = (math.nan,) * 4


def _hand_layers():
    ref = layer(strips([(0, 1), (2, 4), (6, 7)], EA), EA, crop=["x", "y", "x"])
    pred = layer(strips([(0, 0.8), (2, 3.2), (3.2, 4), (6.5, 7.5)], EA), EA)
    return pred, ref


def assert_hand(sweep: list[dict], expected: dict, where: str) -> None:
    assert [e["iou_threshold"] for e in sweep] == HAND_THRESHOLDS
    for entry in sweep:
        want = dict(zip(SWEEP_KEYS, expected[entry["iou_threshold"]]))
        assert_entry(entry, want, f"{where} t={entry['iou_threshold']}")


@pytest.mark.parametrize("matching", MATCHINGS)
def test_hand_layout_sweep_equals_separate_runs(matching):
    pred, ref = _hand_layers()
    assert_sweep_equals_separate_runs(pred, ref, HAND_THRESHOLDS, matching=matching, strata="crop", size_bins=[0, 1.5, 3, 10])


@pytest.mark.parametrize("matching", MATCHINGS)
def test_hand_computed_sweep(matching):
    pred, ref = _hand_layers()
    m = evaluate(pred, ref, matching=matching, strata="crop", size_bins=[0, 1.5, 3, 10], iou_sweep_thresholds=HAND_THRESHOLDS)
    assert_hand(m["iou_sweep"], HAND_OVERALL, "overall")
    assert_hand(m["per_stratum"]["x"]["iou_sweep"], HAND_X, "x")
    assert_hand(m["per_stratum"]["y"]["iou_sweep"], HAND_Y, "y")
    assert_hand(m["per_size_class"]["0-1.5"]["iou_sweep"], HAND_X, "0-1.5")
    assert_hand(m["per_size_class"]["1.5-3"]["iou_sweep"], HAND_Y, "1.5-3")
    assert m["per_size_class"]["3-10"]["n"] == 0
    assert_hand(m["per_size_class"]["3-10"]["iou_sweep"], {t: NAN4 + (0, 0, 0) for t in HAND_THRESHOLDS}, "3-10")


def test_hand_computed_many_to_one_sweep():
    # R0 = [0, 1], R1 = [1, 2]; P = [0, 2]: IoU 1/2 with each.
    ref = layer(strips([(0, 1), (1, 2)], EA), EA)
    pred = layer(strips([(0, 2)], EA), EA)
    one = evaluate(pred, ref, iou_sweep_thresholds=[0.5, 0.55])["iou_sweep"]
    many = evaluate(pred, ref, matching="many_to_one", iou_sweep_thresholds=[0.5, 0.55])["iou_sweep"]
    # one-to-one at 0.5: R0-P (tie to reference position 0): TP 1, FP 0, FN 1.
    assert_entry(one[0], dict(zip(SWEEP_KEYS, (1.0, 0.5, 2 / 3, 0.5, 1, 0, 1))), "one 0.5")
    # many-to-one at 0.5: both fields matched by P: TP 2, FP 0, FN 0.
    assert_entry(many[0], dict(zip(SWEEP_KEYS, (1.0, 1.0, 1.0, 0.5, 2, 0, 0))), "many 0.5")
    # 0.55: nothing matches either way.
    for entry in (one[1], many[1]):
        assert_entry(entry, dict(zip(SWEEP_KEYS, (0.0, 0.0, 0.0, 0.0, 0, 1, 2))), "0.55")


# --------------------------------------------------------------------------------------
# Empty denominators (SPEC section 4)
# --------------------------------------------------------------------------------------


def test_empty_predicted_layer():
    _, ref = scenario_a()
    for entry in evaluate(empty_layer(), ref)["iou_sweep"]:
        # TP + FP = 0: precision 0.0; nothing matched: iou_mean 0.0.
        assert_entry(entry, dict(zip(SWEEP_KEYS, (0.0, 0.0, 0.0, 0.0, 0, 0, 4))), "empty pred")


def test_empty_reference_layer():
    pred, _ = scenario_a()
    for entry in evaluate(pred, empty_layer())["iou_sweep"]:
        # TP + FN = 0: recall 0.0.
        assert_entry(entry, dict(zip(SWEEP_KEYS, (0.0, 0.0, 0.0, 0.0, 0, 5, 0))), "empty ref")


def test_both_layers_empty_rates_are_one():
    m = evaluate(empty_layer(), empty_layer())
    assert [e["iou_threshold"] for e in m["iou_sweep"]] == DEFAULT_THRESHOLDS
    for entry in m["iou_sweep"]:
        assert_entry(entry, dict(zip(SWEEP_KEYS, (1.0, 1.0, 1.0, 1.0, 0, 0, 0))), "both empty")


def test_stratum_without_predictions_has_zero_rates():
    # Stratum "z" has a field and no prediction at all: precision 0.0 (TP + FP = 0).
    ref = layer(strips([(0, 1), (5, 6)], EA), EA, crop=["w", "z"])
    pred = layer(strips([(0, 1)], EA), EA)
    m = evaluate(pred, ref, strata="crop", iou_sweep_thresholds=[0.5, 0.9])
    for entry in m["per_stratum"]["z"]["iou_sweep"]:
        assert_entry(entry, dict(zip(SWEEP_KEYS, (0.0, 0.0, 0.0, 0.0, 0, 0, 1))), "z")
    for entry in m["per_stratum"]["w"]["iou_sweep"]:
        assert_entry(entry, dict(zip(SWEEP_KEYS, (1.0, 1.0, 1.0, 1.0, 1, 0, 0))), "w")


def test_empty_layers_with_groups():
    ref = empty_layer()
    ref["county"] = pd.Series([], dtype=object)
    m = evaluate(empty_layer(), ref, strata="county", size_bins=[0, 1, 2])
    assert m["per_stratum"] == {}
    for entry in m["per_size_class"].values():
        assert len(entry["iou_sweep"]) == len(DEFAULT_THRESHOLDS)
        for e in entry["iou_sweep"]:
            assert_entry(e, dict(zip(SWEEP_KEYS, NAN4 + (0, 0, 0))), "empty class")


# --------------------------------------------------------------------------------------
# The option: default, custom, None, and bad values
# --------------------------------------------------------------------------------------


def test_default_thresholds():
    assert DEFAULT_THRESHOLDS == [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95]
    pred, ref = scenario_a(county=["a", "b", "a", None])
    m = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 3])
    assert [e["iou_threshold"] for e in m["iou_sweep"]] == DEFAULT_THRESHOLDS
    for group in GROUPS:
        for entry in m[group].values():
            assert [e["iou_threshold"] for e in entry["iou_sweep"]] == DEFAULT_THRESHOLDS
    for entry in m["iou_sweep"]:
        assert ENTRY_KEYS <= set(entry)


def test_custom_thresholds_keep_their_order_and_need_not_contain_the_main_one():
    pred, ref = scenario_a()
    m = evaluate(pred, ref, 0.5, iou_sweep_thresholds=(0.3, 0.8))  # a tuple is fine
    assert [e["iou_threshold"] for e in m["iou_sweep"]] == [0.3, 0.8]
    assert m["iou_threshold"] == 0.5
    # scenario A at 0.3: TP 3, FP 2, FN 1; at 0.8: only R0-P0 (0.9).
    assert [e["count_tp"] for e in m["iou_sweep"]] == [3, 1]
    assert m["count_tp"] == 2  # the main threshold is untouched


def test_none_turns_the_sweep_off():
    pred, ref = scenario_a(county=["a", "b", "a", None])
    m = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 3], iou_sweep_thresholds=None)
    assert "iou_sweep" not in m
    for group in GROUPS:
        for entry in m[group].values():
            assert "iou_sweep" not in entry
    with_sweep = evaluate(pred, ref, strata="county", size_bins=[0, 1.5, 3])
    for key in SWEEP_KEYS:
        assert same(m[key], with_sweep[key])


BAD_THRESHOLDS = [[], [0.7, 0.5], [0.5, 0.5], [0.0], [1.2], [-0.5, 0.5], [0.5, float("nan")]]


@pytest.mark.parametrize("value", BAD_THRESHOLDS, ids=repr)
def test_bad_thresholds_name_the_option_and_the_value(value):
    pred, ref = scenario_a()
    with pytest.raises(ValueError, match="iou_sweep_thresholds") as info:
        evaluate(pred, ref, iou_sweep_thresholds=value)
    message = str(info.value)
    if value:
        assert all(repr(t) in message for t in value), message
    else:
        assert "[]" in message or "()" in message or "empty" in message, message


# --------------------------------------------------------------------------------------
# Random boxes
# --------------------------------------------------------------------------------------


@st.composite
def sweep_layouts(draw):
    """(pred, ref) GeoDataFrames in EPSG:6933: a few dozen boxes, integer metres.

    Reference fields on a grid of 100 m cells with random offsets and sizes (up to
    130 m, so neighbours can overlap), each in a random stratum or none, and a few
    large fields over several cells (overlapping the small ones: where a prediction
    matched to a small field at a low threshold has its largest intersection with the
    large one, its home moves when the threshold rises). Predictions are shifted,
    resized copies of fields (IoUs spread over the sweep), duplicates, or random boxes.
    """
    nx, ny = draw(st.integers(2, 5)), draw(st.integers(1, 4))
    refs, strata = [], []
    for i in range(nx):
        for j in range(ny):
            if draw(st.integers(0, 4)) == 0:
                continue
            x0, y0 = i * 100 + draw(st.integers(0, 30)), j * 100 + draw(st.integers(0, 30))
            refs.append((x0, y0, x0 + draw(st.integers(30, 100)), y0 + draw(st.integers(30, 100))))
            strata.append(draw(st.sampled_from(["a", "b", "c", None])))
    for _ in range(draw(st.integers(0, 2))):
        x0, y0 = draw(st.integers(-20, (nx - 1) * 100)), draw(st.integers(-20, max(ny - 1, 0) * 100))
        refs.append((x0, y0, x0 + draw(st.integers(120, 260)), y0 + draw(st.integers(120, 260))))
        strata.append(draw(st.sampled_from(["a", "b", "c", "big"])))
    if not refs:
        refs.append((0, 0, 50, 50))
        strata.append("a")
    preds = []
    for x0, y0, x1, y1 in refs:
        for _ in range(draw(st.integers(0, 2))):
            dx, dy = draw(st.integers(-20, 20)), draw(st.integers(-20, 20))
            gx, gy = draw(st.integers(-15, 30)), draw(st.integers(-15, 30))
            preds.append((x0 + dx, y0 + dy, max(x1 + dx + gx, x0 + dx + 5), max(y1 + dy + gy, y0 + dy + 5)))
    for _ in range(draw(st.integers(0, 3))):
        a, c = draw(st.integers(-50, nx * 100)), draw(st.integers(-50, ny * 100))
        preds.append((a, c, a + draw(st.integers(10, 200)), c + draw(st.integers(10, 200))))

    def geoms(boxes):
        return [box(EA_X0 + a, EA_Y0 + b, EA_X0 + c, EA_Y0 + d) for a, b, c, d in boxes]

    return layer(geoms(preds), EA), layer(geoms(refs), EA, county=strata)


RANDOM_THRESHOLDS = [0.3, 0.5, 0.55, 0.7, 0.85]
RANDOM_BINS = [0.1, 0.3, 0.6, 1.0, 2.0, 10.0]  # ha; fields of 0.09-6.8 ha: those below 0.1 ha are in no class


@pytest.mark.parametrize("matching", MATCHINGS)
@settings(max_examples=10, deadline=None)
@given(layout=sweep_layouts())
def test_sweep_equals_separate_runs_on_random_boxes(matching, layout):
    pred, ref = layout
    assert_sweep_equals_separate_runs(pred, ref, RANDOM_THRESHOLDS, matching=matching, strata="county", size_bins=RANDOM_BINS)


# --------------------------------------------------------------------------------------
# Intervals: the same resamples as section 5
# --------------------------------------------------------------------------------------

CI_KEYS = ("precision", "recall", "f1")


def _assert_interval(ci: object) -> None:
    lo, hi = ci
    assert 0.0 <= lo <= hi <= 1.0


@pytest.mark.parametrize("matching", MATCHINGS)
def test_sweep_intervals_at_the_main_threshold_are_the_bootstrap_intervals(matching):
    pred, ref = _home_layers()
    m = evaluate(pred, ref, matching=matching, strata="county", bootstrap=40)
    assert m["iou_sweep"][0]["iou_threshold"] == m["iou_threshold"] == 0.5
    for i, entry in enumerate(m["iou_sweep"]):
        assert set(entry["ci"]) >= set(CI_KEYS), i
        for key in CI_KEYS:
            _assert_interval(entry["ci"][key])
    for key in CI_KEYS:
        assert m["iou_sweep"][0]["ci"][key] == pytest.approx(m["bootstrap"]["ci"][key], rel=1e-12)


def test_sweep_intervals_at_another_main_threshold():
    pred, ref = _home_layers()
    m = evaluate(pred, ref, 0.65, strata="county", bootstrap=40, iou_sweep_thresholds=[0.5, 0.65, 0.8])
    entry = m["iou_sweep"][1]
    assert entry["iou_threshold"] == 0.65
    for key in CI_KEYS:
        assert entry["ci"][key] == pytest.approx(m["bootstrap"]["ci"][key], rel=1e-12)


def test_sweep_intervals_in_groups_at_the_main_threshold():
    pred, ref = _home_layers()
    m = evaluate(pred, ref, strata="county", size_bins=HOME_BINS[:-1], bootstrap=40)
    for group in GROUPS:
        for name, entry in m[group].items():
            sweep = entry["iou_sweep"]
            for key in CI_KEYS:
                assert "ci" in sweep[0], (group, name)
                assert sweep[0]["ci"][key] == pytest.approx(entry["ci"][key], rel=1e-12, nan_ok=True), (group, name, key)


def test_recall_intervals_do_not_grow_with_the_threshold():
    """In each resample the matched fields at t are a subset of those at a lower t, and
    the number of fields does not depend on t: recall is non-increasing, and so are its
    percentiles. (Precision is not: a prediction's home, and so the resample's
    predictions, change with t.)"""
    pred, ref = _home_layers()
    m = evaluate(pred, ref, strata="county", bootstrap=40)
    lows = [e["ci"]["recall"][0] for e in m["iou_sweep"]]
    highs = [e["ci"]["recall"][1] for e in m["iou_sweep"]]
    assert lows == sorted(lows, reverse=True) and highs == sorted(highs, reverse=True)


def test_no_intervals_without_a_bootstrap():
    pred, ref = _home_layers()
    for entry in evaluate(pred, ref)["iou_sweep"]:
        assert "ci" not in entry


# --------------------------------------------------------------------------------------
# The command line: --iou-sweep-thresholds
# --------------------------------------------------------------------------------------


@pytest.fixture()
def layer_files(tmp_path):
    pred, ref = _hand_layers()
    ref_path, pred_path = tmp_path / "ref.gpkg", tmp_path / "pred.parquet"
    ref.to_file(ref_path)
    pred.to_parquet(pred_path)
    return pred_path, ref_path


def test_cli_sweep_thresholds(layer_files, tmp_path):
    pred, ref = layer_files
    out = tmp_path / "m.json"
    done = cli_in_process("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(out), "-q", "--strata-column", "crop", "--iou-sweep-thresholds", "0.5,0.8")
    assert done.returncode == 0, done.stderr
    metrics = json.loads(out.read_text())
    assert [e["iou_threshold"] for e in metrics["iou_sweep"]] == [0.5, 0.8]
    for entry in metrics["iou_sweep"]:
        assert_entry(entry, dict(zip(SWEEP_KEYS, HAND_OVERALL[entry["iou_threshold"]])), "cli")
    for entry in metrics["per_stratum"]["y"]["iou_sweep"]:
        assert_entry(entry, dict(zip(SWEEP_KEYS, HAND_Y[entry["iou_threshold"]])), "cli y")


def test_cli_sweep_none(layer_files, tmp_path):
    pred, ref = layer_files
    out = tmp_path / "m.json"
    done = cli_in_process("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(out), "-q", "--iou-sweep-thresholds", "none")
    assert done.returncode == 0, done.stderr
    metrics = json.loads(out.read_text())
    assert "iou_sweep" not in metrics
    assert metrics["count_tp"] == 2


@pytest.mark.parametrize("value", ["0.75,0.5"])
def test_cli_bad_sweep_thresholds_exit_2_with_one_line(layer_files, tmp_path, value):
    pred, ref = layer_files
    out = tmp_path / "m.json"
    done = cli_in_process("evaluate", "-p", str(pred), "-r", str(ref), "-o", str(out), "--iou-sweep-thresholds", value)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("evalcore: error:")
    assert "unrecognized arguments" not in done.stderr  # the option must exist
    assert "iou_sweep_thresholds" in done.stderr.replace("-", "_")
    assert not out.exists()
