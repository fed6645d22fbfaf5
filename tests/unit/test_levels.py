"""Support and the worst group (SPEC 6.3) in every grouping: hand-built layouts."""

from __future__ import annotations

import pytest

from evalcore import evaluate
from evalcore.summary import worst_group
from tests.common import UTM, X0, Y0, layer, square


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
