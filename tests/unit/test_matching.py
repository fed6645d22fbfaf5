"""Matching (SPEC section 3): eligibility, one-to-one and many-to-one, home references.

The first half tests evalcore.matching on hand-made pair tables; the second half the
same rules through evaluate / evaluate_frame on geometries in EPSG:6933, where the
IoU of boxes with integer coordinates is exact (so a pair at exactly the threshold,
and exact ties, can be built).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evalcore import evaluate, evaluate_frame
from evalcore.matching import (
    eligible_pairs,
    home_references,
    match_many_to_one,
    match_one_to_one,
    resolve,
)
from evalcore.pairtable import PairTable
from tests.common import EA, layer, strip, strips


def pairs(rows: list[tuple[int, int, float, float]]) -> PairTable:
    """PairTable from (ref_pos, pred_pos, iou, inter_m2) rows, sorted as the contract says."""
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    return PairTable(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[3] for r in rows], dtype=np.float64),
        np.array([r[2] for r in rows], dtype=np.float64),
    )


def accepted(table: PairTable, mask: np.ndarray) -> set[tuple[int, int]]:
    return {(int(r), int(p)) for r, p in zip(table.ref_pos[mask], table.pred_pos[mask])}


# --------------------------------------------------------------------------------------
# Eligibility: IoU >= iou_threshold * (1 - 1e-9)
# --------------------------------------------------------------------------------------


def test_eligibility_relative_tolerance():
    ious = [0.5, 0.5 * (1 - 0.5e-9), 0.5 * (1 - 2e-9), 0.6, 0.4, 1.0]
    t = pairs([(k, 0, iou, 1.0) for k, iou in enumerate(ious)])
    assert eligible_pairs(t, 0.5).tolist() == [True, True, False, True, False, True]
    assert eligible_pairs(t, 1.0).tolist() == [False, False, False, False, False, True]


# --------------------------------------------------------------------------------------
# One-to-one: greedy by descending IoU, ties by reference then prediction position.
# --------------------------------------------------------------------------------------


def test_one_to_one_is_greedy_not_optimal():
    # (r0, p0) 0.9 is taken first; then r0 and p0 are both used, so (r0, p1) and (r1, p0)
    # are rejected although accepting both would give two matches.
    t = pairs([(0, 0, 0.9, 1), (0, 1, 0.85, 1), (1, 0, 0.8, 1)])
    assert accepted(t, match_one_to_one(t, 0.5)) == {(0, 0)}


def test_one_to_one_descending_iou_not_position():
    t = pairs([(0, 0, 0.6, 1), (0, 1, 0.7, 1), (1, 0, 0.65, 1)])
    # (0,1) 0.7 first, then (1,0) 0.65; (0,0) 0.6: r0 taken.
    assert accepted(t, match_one_to_one(t, 0.5)) == {(0, 1), (1, 0)}


def test_one_to_one_ties_by_reference_then_prediction_position():
    t = pairs([(0, 1, 0.7, 1), (0, 0, 0.7, 1)])
    assert accepted(t, match_one_to_one(t, 0.5)) == {(0, 0)}
    t = pairs([(1, 0, 0.7, 1), (0, 0, 0.7, 1)])
    assert accepted(t, match_one_to_one(t, 0.5)) == {(0, 0)}
    # (0, 5) and (3, 2) tie: reference 0 first takes prediction 5, then reference 3
    # cannot take 5 but takes 2.
    t = pairs([(3, 5, 0.8, 1), (3, 2, 0.8, 1), (0, 5, 0.8, 1)])
    assert accepted(t, match_one_to_one(t, 0.5)) == {(0, 5), (3, 2)}


def test_one_to_one_ignores_ineligible_pairs():
    t = pairs([(0, 0, 0.49, 1), (1, 1, 0.5, 1), (2, 2, 0.51, 1)])
    assert accepted(t, match_one_to_one(t, 0.5)) == {(1, 1), (2, 2)}
    assert not match_one_to_one(t, 0.9).any()


def test_one_to_one_does_not_depend_on_row_order_of_the_pair_table():
    rng = np.random.default_rng(3)
    n = 40
    ref = rng.integers(0, 8, n)
    pred = rng.integers(0, 8, n)
    keep = np.unique(ref * 100 + pred, return_index=True)[1]
    ref, pred = ref[keep], pred[keep]
    iou = rng.choice([0.5, 0.6, 0.7, 0.8], len(ref))  # many ties
    t = PairTable(ref, pred, np.ones(len(ref)), iou)
    expected = accepted(t, match_one_to_one(t, 0.5))
    for _ in range(5):
        perm = rng.permutation(len(ref))
        tp = PairTable(ref[perm], pred[perm], np.ones(len(ref)), iou[perm])
        assert accepted(tp, match_one_to_one(tp, 0.5)) == expected
        assert accepted(tp, match_many_to_one(tp, 0.5)) == accepted(t, match_many_to_one(t, 0.5))
    # A matching: no reference and no prediction twice.
    refs = [r for r, _ in expected]
    preds = [p for _, p in expected]
    assert len(set(refs)) == len(refs) and len(set(preds)) == len(preds)


def test_empty_pair_table():
    t = PairTable.empty()
    assert match_one_to_one(t, 0.5).shape == (0,)
    assert match_many_to_one(t, 0.5).shape == (0,)
    home_pred, home_ref = home_references(t, np.zeros(0, bool))
    assert len(home_pred) == len(home_ref) == 0


# --------------------------------------------------------------------------------------
# Many-to-one: each reference takes its highest-IoU eligible prediction.
# --------------------------------------------------------------------------------------


def test_many_to_one_lets_a_prediction_match_several_references():
    t = pairs([(0, 0, 0.6, 1), (1, 0, 0.7, 1), (1, 1, 0.7, 1), (2, 1, 0.4, 1), (3, 2, 0.55, 1), (3, 3, 0.9, 1)])
    # r0 -> p0; r1: tie 0.7 between p0 and p1 -> first prediction position, p0;
    # r2: nothing eligible; r3 -> p3 (0.9).
    assert accepted(t, match_many_to_one(t, 0.5)) == {(0, 0), (1, 0), (3, 3)}
    # one_to_one on the same pairs: (3,3) .9, (1,0) .7, (1,1) r1 taken, (0,0) p0 taken, (3,2) r3 taken.
    assert accepted(t, match_one_to_one(t, 0.5)) == {(3, 3), (1, 0)}


# --------------------------------------------------------------------------------------
# Home references
# --------------------------------------------------------------------------------------


def test_home_reference_rules_one_to_one():
    # (ref, pred, iou, inter)
    t = pairs(
        [
            (0, 0, 0.3, 5.0),  # p0: largest intersection with r0 ...
            (1, 0, 0.6, 4.0),  # ... but matched to r1: home r1
            (0, 1, 0.1, 2.0),  # p1 unmatched: largest intersection r1 (3 > 2)
            (1, 1, 0.2, 3.0),
            (2, 2, 0.1, 2.0),  # p2 unmatched: tie 2 = 2 between r0 and r2 -> r0
            (0, 2, 0.2, 2.0),
        ]
    )
    is_match = match_one_to_one(t, 0.5)
    assert accepted(t, is_match) == {(1, 0)}
    home_pred, home_ref = home_references(t, is_match)
    assert home_pred.tolist() == [0, 1, 2]  # p3 has no pair, so no home
    assert home_ref.tolist() == [1, 1, 0]


def test_home_reference_many_to_one_is_highest_iou_match_then_first_reference():
    t = pairs(
        [
            (0, 0, 0.5, 9.0),
            (1, 0, 0.6, 1.0),  # p0 matched to r0 and r1: highest IoU r1
            (2, 1, 0.7, 1.0),
            (3, 1, 0.7, 1.0),  # p1 matched to r2 and r3 at equal IoU: r2
        ]
    )
    is_match = match_many_to_one(t, 0.5)
    assert accepted(t, is_match) == {(0, 0), (1, 0), (2, 1), (3, 1)}
    home_pred, home_ref = home_references(t, is_match)
    assert home_pred.tolist() == [0, 1]
    assert home_ref.tolist() == [1, 2]


def test_resolve_checks_the_matching_mode():
    t = pairs([(0, 0, 0.7, 1.0)])
    assert resolve(t, 0.5, "one_to_one").is_match.tolist() == [True]
    assert resolve(t, 0.5, "many_to_one").is_match.tolist() == [True]
    with pytest.raises(ValueError, match="one_to_one"):
        resolve(t, 0.5, "hungarian")


# --------------------------------------------------------------------------------------
# Through evaluate, exact geometry in EPSG:6933
# --------------------------------------------------------------------------------------


def test_iou_exactly_at_threshold_matches():
    ref = layer([strip(0, 2, EA)], EA)
    pred = layer([strip(0, 1, EA)], EA)  # inside the reference: IoU = 1/2 exactly
    assert evaluate(pred, ref, 0.5)["count_tp"] == 1
    assert evaluate_frame(pred, ref, iou_threshold=0.5)["iou"].tolist() == [0.5]
    # Within the relative tolerance 1e-9 of the threshold: still a match.
    assert evaluate(pred, ref, 0.5 * (1 + 0.5e-9))["count_tp"] == 1
    # Beyond it: no match.
    assert evaluate(pred, ref, 0.5 * (1 + 2e-9))["count_tp"] == 0
    assert evaluate(pred, ref, 0.500001)["count_tp"] == 0


def test_iou_one_third_exactly_at_threshold():
    ref = layer([strip(0, 1, EA)], EA)
    pred = layer([strip(0.5, 1.5, EA)], EA)
    assert evaluate(pred, ref, 1 / 3)["count_tp"] == 1
    assert evaluate(pred, ref, (1 / 3) * (1 + 1e-10))["count_tp"] == 1
    assert evaluate(pred, ref, (1 / 3) * (1 + 1e-8))["count_tp"] == 0


def test_prediction_tie_goes_to_the_first_prediction_position_not_label():
    ref = layer([strip(0, 2, EA)], EA, index=["r"])
    halves = strips([(1, 2), (0, 1)], EA)
    # Labels in reverse order of position: position 0 is label "z".
    pred = layer(halves, EA, index=["z", "a"])
    assert evaluate_frame(pred, ref)["pred_index"].tolist() == ["z"]
    assert evaluate_frame(pred, ref, matching="many_to_one")["pred_index"].tolist() == ["z"]
    # Swap the rows: now the left half is at position 0 and wins.
    pred = layer(halves[::-1], EA, index=["z", "a"])
    assert evaluate_frame(pred, ref)["pred_index"].tolist() == ["z"]
    assert evaluate_frame(pred, ref)["max_overlap_pred_index"].tolist() == ["z"]


def test_reference_tie_goes_to_the_first_reference_position_not_label():
    ref = layer(strips([(1, 2), (0, 1)], EA), EA, index=["z", "a"])
    pred = layer([strip(0, 2, EA)], EA, index=[7])
    f = evaluate_frame(pred, ref)
    assert f["matched"].tolist() == [True, False]
    assert f.index.tolist() == ["z", "a"]
    assert f["pred_index"].tolist() == [7, pd.NA]


def test_dropped_rows_keep_their_positions_for_tie_breaks():
    # A dropped row at position 0 does not shift the others: the tie still goes to the
    # half at the lower input position.
    ref = layer([strip(0, 2, EA)], EA)
    pred = layer([None, strip(1, 2, EA), strip(0, 1, EA)], EA, index=[0, 1, 2])
    assert evaluate_frame(pred, ref)["pred_index"].tolist() == [1]


def test_higher_iou_wins_over_position():
    ref = layer([strip(0, 1, EA)], EA)
    pred = layer(strips([(0.2, 1.2), (0, 0.9)], EA), EA, index=[0, 1])  # IoU 0.8/1.2 and 0.9
    f = evaluate_frame(pred, ref)
    assert f["pred_index"].tolist() == [1]
    assert f["iou"].iloc[0] == pytest.approx(0.9, rel=1e-12)
    assert f["best_iou"].iloc[0] == pytest.approx(0.9, rel=1e-12)


def test_greedy_one_to_one_on_geometry():
    # R0 = [0, 1], R1 = [0.6, 1.6]; P0 = [0.1, 1.1], P1 = [-0.5, 0.9]; threshold 0.3.
    # IoU: R0-P0 0.9/1.1, R0-P1 0.9/1.5 = 0.6, R1-P0 0.5/1.5 = 1/3, R1-P1 0.3/2.1.
    # Greedy takes R0-P0 first; R1-P0 and R0-P1 are then blocked: one match, where an
    # optimal assignment would find two.
    ref = layer(strips([(0, 1), (0.6, 1.6)], EA), EA)
    pred = layer(strips([(0.1, 1.1), (-0.5, 0.9)], EA), EA)
    m = evaluate(pred, ref, 0.3)
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (1, 1, 1)
    assert m["iou_mean"] == pytest.approx(0.9 / 1.1, rel=1e-12)
    # many_to_one: R0 -> P0 and R1 -> P0 (its best, 1/3).
    m = evaluate(pred, ref, 0.3, matching="many_to_one")
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (2, 1, 0)
    assert m["iou_mean"] == pytest.approx((0.9 / 1.1 + 1 / 3) / 2, rel=1e-12)


def test_lower_iou_pair_matches_after_a_higher_one_takes_its_rival():
    # R0 = [0, 1], R1 = [1, 2]; P0 = [0.5, 1.5] (IoU 1/3 with each), P1 = [0, 0.6]
    # (IoU 0.6 with R0). Threshold 0.3: R0-P1 first, then R0-P0 is blocked and R1-P0 taken.
    ref = layer(strips([(0, 1), (1, 2)], EA), EA, index=[0, 1])
    pred = layer(strips([(0.5, 1.5), (0, 0.6)], EA), EA, index=[0, 1])
    f = evaluate_frame(pred, ref, iou_threshold=0.3)
    assert f["pred_index"].tolist() == [1, 0]
    np.testing.assert_allclose(f["iou"].to_numpy(), [0.6, 1 / 3], rtol=1e-12)


# Scenario B: R0 = [0, 1], R1 = [1, 2]; P0 = [0, 2] (IoU 1/2 with each), P1 = [5, 6].
def _scenario_b() -> tuple:
    ref = layer(strips([(0, 1), (1, 2)], EA), EA, index=[1, 0], county=["a", "b"])
    pred = layer(strips([(0, 2), (5, 6)], EA), EA, index=["p0", "p1"])
    return pred, ref


def test_many_to_one_precision_can_exceed_the_matched_fraction():
    pred, ref = _scenario_b()
    m = evaluate(pred, ref, 0.5, matching="many_to_one")
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (2, 1, 0)
    assert m["precision"] == pytest.approx(2 / 3, rel=1e-12)
    matched_fraction = 1 / 2  # P0 of P0, P1
    assert m["precision"] > matched_fraction
    assert m["recall"] == 1.0
    assert m["f1"] == pytest.approx(0.8, rel=1e-12)
    assert m["iou_mean"] == 0.5
    assert m["under_segmentation"] == 0.5  # P0 has two references at IoU >= 0.5; 1 of 2
    assert m["over_segmentation"] == 0.0
    assert m["area_weighted_recall"] == 1.0
    assert m["area_weighted_precision"] == pytest.approx(2 / 3, rel=1e-12)  # P0 matched (2 of 3 ha)
    assert m["area_error_mean_m2"] == 10_000.0  # |2 ha - 1 ha| for both pairs
    assert m["area_error_signed_mean_m2"] == 10_000.0
    assert m["count_fp_unassigned"] == 1


def test_one_to_one_on_scenario_b():
    pred, ref = _scenario_b()
    m = evaluate(pred, ref, 0.5)
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (1, 1, 1)
    assert m["precision"] == 0.5 and m["recall"] == 0.5 and m["f1"] == 0.5
    assert m["under_segmentation"] == 0.5
    assert m["area_weighted_recall"] == 0.5
    assert m["area_weighted_precision"] == pytest.approx(2 / 3, rel=1e-12)
    f = evaluate_frame(pred, ref)
    assert f.index.tolist() == [1, 0]
    # reference position 0 wins the tie; the other is unmatched (missing label)
    assert f["pred_index"].iloc[0] == "p0" and pd.isna(f["pred_index"].iloc[1])


# --------------------------------------------------------------------------------------
# Home references, visible through per-stratum prediction counts
# --------------------------------------------------------------------------------------


def _stratum_counts(m: dict) -> dict[str, tuple[int, int, int]]:
    return {k: (v["count_predicted"], v["count_tp"], v["count_fp"]) for k, v in m["per_stratum"].items()}


def test_home_is_the_matched_reference_even_when_another_overlaps_more():
    # R0 = [0, 1] ("a"), R1 = [1, 11] ("b"); P = [0, 2.5]: IoU(R0) = 1/2.5 = 0.4,
    # |P ∩ R1| = 1.5 > |P ∩ R0| = 1. Threshold 0.3: P matches R0, its home.
    ref = layer(strips([(0, 1), (1, 11)], EA), EA, county=["a", "b"])
    pred = layer([strip(0, 2.5, EA)], EA)
    m = evaluate(pred, ref, 0.3, strata="county")
    assert _stratum_counts(m) == {"a": (1, 1, 0), "b": (0, 0, 0)}
    assert m["per_stratum"]["a"]["precision"] == 1.0
    assert m["per_stratum"]["b"]["precision"] == 0.0  # no prediction: 0/0 -> 0.0
    assert m["per_stratum"]["b"]["recall"] == 0.0


def test_home_of_an_unmatched_prediction_is_the_largest_intersection():
    # P = [0.6, 1.6]: |P ∩ R0| = 0.4, |P ∩ R1| = 0.6; IoU 0.25 and 0.6/1.4 < 0.5.
    ref = layer(strips([(0, 1), (1, 2)], EA), EA, county=["a", "b"])
    pred = layer([strip(0.6, 1.6, EA)], EA)
    m = evaluate(pred, ref, 0.5, strata="county")
    assert m["count_tp"] == 0
    assert _stratum_counts(m) == {"a": (0, 0, 0), "b": (1, 0, 1)}
    assert m["count_fp_unassigned"] == 0


def test_home_tie_in_intersection_goes_to_the_first_reference_position():
    # P = [0.5, 1.5] overlaps R at [0, 1] and [1, 2] by 0.5 each.
    pred = layer([strip(0.5, 1.5, EA)], EA)
    ref = layer(strips([(0, 1), (1, 2)], EA), EA, county=["b", "a"])
    assert _stratum_counts(evaluate(pred, ref, strata="county")) == {"a": (0, 0, 0), "b": (1, 0, 1)}
    ref = layer(strips([(1, 2), (0, 1)], EA), EA, county=["b", "a"])
    assert _stratum_counts(evaluate(pred, ref, strata="county")) == {"a": (0, 0, 0), "b": (1, 0, 1)}


def test_many_to_one_home_is_the_highest_iou_match():
    # P = [0, 2]; R0 = [0, 0.8] (IoU 0.4), R1 = [0.8, 2] (IoU 0.6); threshold 0.4:
    # P matches both; its home is R1 although R0 comes first.
    pred = layer([strip(0, 2, EA)], EA)
    ref = layer(strips([(0, 0.8), (0.8, 2)], EA), EA, county=["a", "b"])
    m = evaluate(pred, ref, 0.4, matching="many_to_one", strata="county")
    assert m["count_tp"] == 2
    assert _stratum_counts(m) == {"a": (0, 1, 0), "b": (1, 1, 0)}
    # A stratum can count a TP without the prediction: precision = TP / (TP + FP) = 1.
    assert m["per_stratum"]["a"]["precision"] == 1.0


def test_many_to_one_home_tie_goes_to_the_first_reference():
    pred, ref = _scenario_b()  # P0 matches R0 ("a") and R1 ("b") at IoU 1/2 each
    m = evaluate(pred, ref, 0.5, matching="many_to_one", strata="county")
    assert _stratum_counts(m) == {"a": (1, 1, 0), "b": (0, 1, 0)}
    # P1 overlaps nothing: it counts only overall.
    assert m["count_predicted"] == 2
    assert sum(v["count_predicted"] for v in m["per_stratum"].values()) == 1


def test_one_to_one_scenario_b_home_and_fn_by_stratum():
    pred, ref = _scenario_b()
    m = evaluate(pred, ref, 0.5, strata="county")
    assert _stratum_counts(m) == {"a": (1, 1, 0), "b": (0, 0, 0)}
    assert m["per_stratum"]["b"]["count_fn"] == 1
