"""The one detection-rate function (:mod:`evalcore.rates`), by hand."""

from __future__ import annotations

import numpy as np
import pytest

from evalcore.rates import F1_DICE, F1_HARMONIC, F1_HARMONIC_POSITIVE, detection_rates


def _rates(tp, fp, fn, rule):
    return [float(v) for v in detection_rates(tp, fp, fn, f1=rule)]


@pytest.mark.parametrize("rule", [F1_HARMONIC, F1_HARMONIC_POSITIVE, F1_DICE])
def test_defined_counts_agree_in_every_rule(rule: str) -> None:
    # 3 TP, 1 FP, 2 FN: P = 3/4, R = 3/5, F1 = 2 * 3 / (2 * 3 + 1 + 2) = 2/3.
    p, r, f1 = _rates(3, 1, 2, rule)
    assert p == 0.75 and r == 0.6
    assert f1 == pytest.approx(2 / 3, rel=1e-15)


def test_zero_denominators_are_nan() -> None:
    # No prediction: precision undefined; no reference object: recall undefined.
    assert np.isnan(_rates(0, 0, 4, F1_HARMONIC)[0])
    assert np.isnan(_rates(0, 4, 0, F1_HARMONIC)[1])
    for rule in (F1_HARMONIC, F1_HARMONIC_POSITIVE, F1_DICE):
        assert all(np.isnan(v) for v in _rates(0, 0, 0, rule))


def test_f1_when_precision_and_recall_are_zero() -> None:
    # 0 TP, 2 FP, 3 FN: P = R = 0. Section 4 and Dice say 0; tiles and AOIs say undefined.
    assert _rates(0, 2, 3, F1_HARMONIC) == [0.0, 0.0, 0.0]
    assert _rates(0, 2, 3, F1_DICE) == [0.0, 0.0, 0.0]
    p, r, f1 = _rates(0, 2, 3, F1_HARMONIC_POSITIVE)
    assert (p, r) == (0.0, 0.0) and np.isnan(f1)


def test_f1_when_one_rate_is_undefined() -> None:
    # Reference objects only, none found: recall 0, precision undefined. Dice: 0 / 3 = 0.
    for rule in (F1_HARMONIC, F1_HARMONIC_POSITIVE):
        assert np.isnan(_rates(0, 0, 3, rule)[2])
    assert _rates(0, 0, 3, F1_DICE)[2] == 0.0


def test_harmonic_and_dice_are_different_roundings() -> None:
    # Why the rules are kept apart: 2PR/(P+R) and 2TP/(2TP+FP+FN) differ in the last bit.
    tp, fp, fn = np.arange(1.0, 200.0), np.arange(199.0, 0.0, -1.0), np.full(199, 7.0)
    harmonic = detection_rates(tp, fp, fn, f1=F1_HARMONIC)[2]
    dice = detection_rates(tp, fp, fn, f1=F1_DICE)[2]
    np.testing.assert_allclose(harmonic, dice, rtol=1e-14)


def test_broadcasts_over_replicates() -> None:
    tp = np.array([[1.0, 0.0], [2.0, 0.0]])
    precision, recall, f1 = detection_rates(tp, 1.0, np.array([1.0, 0.0]), f1=F1_HARMONIC)
    assert precision.shape == recall.shape == f1.shape == (2, 2)
    assert recall[0, 1] != recall[0, 1]  # 0 TP, 0 FN: undefined


def test_unknown_rule_is_named() -> None:
    with pytest.raises(ValueError, match="'micro'"):
        detection_rates(1, 0, 0, f1="micro")
