"""The error taxonomy (SPEC 6.8) by hand: a layout with one of each code.

Strips of the common grid (one unit = 100 m, all in one row, y extent [0, 1]):

    R0 [0, 1]    P0 [0, 1]        identical: TP, TP
    R1 [2, 3]    P1 [2.5, 3.5]    IoU 1/3: R1 M-FN-LOCALISATION, P1 M-FP-LOCALISATION
    R2 [4, 5]                     nothing overlaps it: M-FN-MISSED
    R3 [6, 7]    P3 [6, 7]        identical: TP, TP; R3 also holds P4: a split
                 P4 [6.3, 7]      IoU 0.7 with R3, which P3 took: M-FP-DUPLICATE (split)
                 P2 [10, 11]      overlaps nothing: M-FP-BACKGROUND
    R4 [12, 13]  P5 [12, 14]      P5 covers R4 and R5 (a merge); IoU 0.5 with each, R4
    R5 [13, 14]                   first: R4 TP, R5 M-FN-LOCALISATION, both merge-flagged
    R6 [16, 17]  P6 [16, 17.6]    IoU 1/1.6: TP, its boundary 60 m off on one side

With a 5 m tolerance, M-BOUNDARY holds for the matched pairs whose mean boundary
distance exceeds 5 m: R4/P5 and R6/P6 (R0/P0 and R3/P3 are identical: 0 m).
"""

from __future__ import annotations

import numpy as np
import pytest

from evalcore import evaluate_tables
from evalcore.metrics.taxonomy import prediction_codes, reference_codes
from tests.common import layer, strips

REF = [(0, 1), (2, 3), (4, 5), (6, 7), (12, 13), (13, 14), (16, 17)]
PRED = [(0, 1), (2.5, 3.5), (10, 11), (6, 7), (6.3, 7), (12, 14), (16, 17.6)]
REF_LABELS = [f"R{k}" for k in range(7)]
PRED_LABELS = [f"P{k}" for k in range(7)]
STRATA = ["a", "a", "a", "a", "b", "b", "b"]

REF_CODES = ["TP", "M-FN-LOCALISATION", "M-FN-MISSED", "TP", "TP", "M-FN-LOCALISATION", "TP"]
PRED_CODES = ["TP", "M-FP-LOCALISATION", "M-FP-BACKGROUND", "TP", "M-FP-DUPLICATE", "TP", "TP"]


@pytest.fixture(scope="module")
def tables():
    ref = layer(strips(REF), index=REF_LABELS, crop=STRATA)
    pred = layer(strips(PRED), index=PRED_LABELS)
    return evaluate_tables(pred, ref, strata="crop", boundary_tolerance_m=5.0, bootstrap=0)


def test_reference_codes_and_flags(tables):
    f = tables.fields.loc[REF_LABELS]
    assert f["error_code"].tolist() == REF_CODES
    assert f["merge"].tolist() == [False, False, False, False, True, True, False]
    assert f["split"].tolist() == [False, False, False, True, False, False, False]
    assert f["boundary_error"].tolist() == [False, False, False, False, True, False, True]


def test_prediction_codes_and_flags(tables):
    p = tables.predictions.loc[PRED_LABELS]
    assert p["error_code"].tolist() == PRED_CODES
    assert p["merge"].tolist() == [False, False, False, False, False, True, False]
    assert p["split"].tolist() == [False, False, False, True, True, False, False]
    assert p["boundary_error"].tolist() == [False, False, False, False, False, True, True]


def test_counts_overall_and_per_stratum(tables):
    s = tables.summary
    assert (s["count_tp"], s["count_fp_background"], s["count_fp_duplicate"], s["count_fp_localisation"]) == (4, 1, 1, 1)
    assert (s["count_fn_missed"], s["count_fn_localisation"], s["count_merges"], s["count_splits"]) == (1, 2, 1, 1)
    assert s["count_boundary_errors"] == 2
    a, b = s["per_stratum"]["a"], s["per_stratum"]["b"]
    # P2 has no home: overall only. P1 counts with R1 (a), P4 with R3 (a), P5 with R4 (b).
    assert [a[k] for k in ("count_tp", "count_fp_background", "count_fp_duplicate", "count_fp_localisation",
                           "count_fn_missed", "count_fn_localisation", "count_merges", "count_splits",
                           "count_boundary_errors")] == [2, 0, 1, 1, 1, 1, 0, 1, 0]
    assert [b[k] for k in ("count_tp", "count_fp_background", "count_fp_duplicate", "count_fp_localisation",
                           "count_fn_missed", "count_fn_localisation", "count_merges", "count_splits",
                           "count_boundary_errors")] == [2, 0, 0, 0, 0, 1, 1, 0, 2]


def test_counts_per_tile_include_the_homeless_prediction(tables):
    t = tables.tiles
    assert len(t) == 1  # 1.8 km of strips: one 10 km tile
    row = t.iloc[0]
    assert (row["count_fp_background"], row["count_fp_duplicate"], row["count_fp_localisation"]) == (1, 1, 1)
    assert (row["count_fn_missed"], row["count_fn_localisation"], row["count_merges"], row["count_splits"]) == (1, 2, 1, 1)
    assert row["count_boundary_errors"] == 2


def test_table_codes_add_up_to_the_counts(tables):
    # Every unmatched prediction has exactly one FP code, every unmatched field one FN code.
    s = tables.summary
    p = tables.predictions["error_code"].value_counts()
    f = tables.fields["error_code"].value_counts()
    assert p.get("M-FP-BACKGROUND", 0) + p.get("M-FP-DUPLICATE", 0) + p.get("M-FP-LOCALISATION", 0) == s["count_fp"]
    assert f.get("M-FN-MISSED", 0) + f.get("M-FN-LOCALISATION", 0) == s["count_fn"]


def test_no_boundary_flag_without_a_tolerance():
    ref = layer(strips(REF), index=REF_LABELS)
    pred = layer(strips(PRED), index=PRED_LABELS)
    t = evaluate_tables(pred, ref)
    assert "boundary_error" not in t.fields.columns and "boundary_error" not in t.predictions.columns
    assert "count_boundary_errors" not in t.summary and "count_boundary_errors" not in t.tiles.columns
    assert t.fields.loc[REF_LABELS, "error_code"].tolist() == REF_CODES


def test_code_functions_directly():
    assert reference_codes(np.array([True, False, False]), np.array([3, 0, 2])).tolist() == [0, 1, 2]
    # Predictions: matched; no pair; reference 7 matched (by another); reference 8 not matched.
    codes = prediction_codes(np.array([True, False, False, False]), np.array([5, -1, 7, 8]), np.array([5, 7]))
    assert codes.tolist() == [0, 1, 2, 3]
    assert prediction_codes(np.array([False]), np.array([3]), np.empty(0, np.int64)).tolist() == [3]
