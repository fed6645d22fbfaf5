"""precision_touching (SPEC 6.4): precision among the predictions that overlap some reference field."""

from __future__ import annotations

import math

import pytest

from evalcore import evaluate
from tests.common import UTM, X0, Y0, layer, square


def _layout():
    """Reference fields r0 (stratum a), r1 (stratum b). Predictions: p0 = r0 exactly (TP);
    p1 half over r1 (IoU 1/3: FP, home r1); p2 and p3 far from everything (FP, no home)."""
    refs = [square(X0, Y0, 100), square(X0 + 1_000, Y0, 100)]
    preds = [square(X0, Y0, 100), square(X0 + 1_050, Y0, 100), square(X0 + 5_000, Y0, 100), square(X0 + 7_000, Y0, 100)]
    return layer(preds, UTM), layer(refs, UTM, county=["a", "b"])


def test_precision_touching_by_hand():
    pred, ref = _layout()
    m = evaluate(pred, ref, strata="county")
    assert (m["count_tp"], m["count_fp"], m["count_fp_unassigned"]) == (1, 3, 2)
    assert m["precision"] == pytest.approx(1 / 4)
    assert m["precision_touching"] == pytest.approx(1 / 2)  # TP / (TP + FP - unassigned) = 1 / (1 + 3 - 2)
    # In a group every prediction has a home, so it is the group's precision.
    assert m["per_stratum"]["a"]["precision_touching"] == 1.0
    assert m["per_stratum"]["b"]["precision_touching"] == 0.0 == m["per_stratum"]["b"]["precision"]


def test_precision_touching_is_null_when_nothing_touches():
    pred, ref = _layout()
    far = pred.iloc[2:]
    m = evaluate(far, ref)
    assert m["precision"] == 0.0  # agribound's convention for its own key
    assert math.isnan(m["precision_touching"])  # SPEC 6: a new rate is null, never 0, when undefined
    m = evaluate(far, ref.iloc[:0])
    assert math.isnan(m["precision_touching"])


def test_precision_touching_has_an_interval():
    pred, ref = _layout()
    m = evaluate(pred, ref, bootstrap=50)
    lo, hi = m["bootstrap"]["ci"]["precision_touching"]
    assert 0.0 <= lo <= hi <= 1.0
