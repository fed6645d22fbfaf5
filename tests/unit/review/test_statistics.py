"""Review statistics (SPEC 6.12) against hand-worked values and independent implementations
(scikit-learn's Cohen's kappa, statsmodels' Fleiss' kappa and Wilson interval)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import aggregate_raters
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa
from statsmodels.stats.proportion import proportion_confint

from evalcore.review.sample import REVIEW_CODES
from evalcore.review.statistics import cohen_kappa, fleiss_kappa, review_statistics, weighted_share, wilson_interval


def test_wilson_hand_value_and_statsmodels():
    # p = 0.5, n = 4: centre (0.5 + z²/8) / (1 + z²/4) = 0.5; half = z / (1 + z²/4) · sqrt(1/16 + z²/64) = 0.34997.
    lo, hi = wilson_interval(0.5, 4)
    assert (lo, hi) == pytest.approx((0.15003, 0.84997), abs=1e-5)
    for k, n in ((0, 7), (3, 7), (7, 7), (18, 40)):
        assert wilson_interval(k / n, n) == pytest.approx(proportion_confint(k, n, alpha=0.05, method="wilson"), abs=1e-12)
    assert all(math.isnan(v) for v in wilson_interval(math.nan, 0))


def test_weighted_share_hand_value():
    got = weighted_share(np.array([1, 0, 1, 1]), np.array([1.0, 1.0, 2.0, 4.0]))
    assert got["value"] == 7 / 8 and got["numerator"] == 7 and got["denominator"] == 8
    assert got["effective_n"] == pytest.approx(64 / 22)
    assert got["ci"] == pytest.approx(list(wilson_interval(7 / 8, 64 / 22)))
    empty = weighted_share(np.array([]), np.array([]))
    assert math.isnan(empty["value"]) and empty["support"] == 0


@pytest.mark.parametrize("seed", range(6))
def test_cohen_kappa_equals_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 80))
    a = rng.choice(REVIEW_CODES[: int(rng.integers(2, 7))], n)
    b = np.where(rng.random(n) < 0.6, a, rng.choice(REVIEW_CODES, n))
    assert cohen_kappa(list(a), list(b)) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)


def test_cohen_kappa_undefined_cases():
    assert math.isnan(cohen_kappa([], []))
    assert math.isnan(cohen_kappa(["TP", "TP"], ["TP", "TP"]))  # chance agreement 1


@pytest.mark.parametrize("seed", range(6))
def test_fleiss_kappa_equals_statsmodels(seed):
    rng = np.random.default_rng(seed)
    n_items, n_raters = int(rng.integers(4, 60)), int(rng.integers(3, 6))
    truth = rng.choice(REVIEW_CODES, n_items)
    codes = np.array([[t if rng.random() < 0.7 else rng.choice(REVIEW_CODES) for _ in range(n_raters)] for t in truth])
    labels = sorted(set(codes.ravel()))
    table = np.array([[list(row).count(k) for k in labels] for row in codes])
    index = np.vectorize(labels.index)(codes)
    expected = sm_fleiss_kappa(aggregate_raters(index)[0], method="fleiss")
    assert fleiss_kappa(table) == pytest.approx(expected, abs=1e-12)


def _decisions(rows):
    return pd.DataFrame(rows, columns=["item_id", "reviewer", "code", "severity", "comment"])


def test_review_statistics_hand_worked():
    sample = pd.DataFrame({"item_id": ["i1", "i2", "i3", "i4"], "cell": ["A", "A", "B", "B"],
                           "code": ["TP", "TP", "M-FN-MISSED", "M-FN-MISSED"], "inclusion_probability": [0.5, 0.5, 1.0, 1.0]})
    decisions = _decisions([
        ("i1", "bob", "TP", "", ""), ("i1", "alice", "TP", "", ""),
        ("i2", "alice", "M-FN-MISSED", "major", "no field"),
        ("i3", "alice", "M-FN-MISSED", "", ""), ("i3", "bob", "L-REFERENCE-WRONG", "critical", "not a field"),
    ])
    got = review_statistics(sample, decisions)
    assert got["state"] == "reviewed" and got["n_decisions"] == 5 and got["reviewers"] == ["alice", "bob"]
    assert (got["reviewed"], got["drawn"], got["completion"]) == (3, 4, 0.75)
    # First reviewer by name (alice) on i1, i2, i3; weights 2, 2, 1; confirmed 1, 0, 1.
    assert got["confirmed_share"] == pytest.approx(3 / 5)
    assert got["ci"]["confirmed_share"] == pytest.approx(list(wilson_interval(3 / 5, 25 / 9)))
    assert got["critical_share"] == 0.0  # bob's critical is not the first reviewer's
    assert got["major_or_worse_share"] == pytest.approx(2 / 5)
    assert got["per_cell"]["A"]["completion"] == 1.0 and got["per_cell"]["B"]["completion"] == 0.5
    assert got["per_cell"]["A"]["confirmed_share"] == 0.5 and got["per_cell"]["B"]["confirmed_share"] == 1.0
    # Two reviewers on i1 (TP, TP) and i3 (M-FN-MISSED vs L-REFERENCE-WRONG): raw 1/2;
    # kappa: p_o = 1/2, p_e = P(TP)·P(TP) = 1/4, (1/2 - 1/4) / (3/4) = 1/3.
    assert got["agreement"]["raw_agreement"] == 0.5
    assert got["agreement"]["kappa"] == pytest.approx(1 / 3)
    assert [(d["item_id"], d["kind"]) for d in got["disagreements"]] == [("i2", "automatic"), ("i3", "reviewers")]
    adjudicated = review_statistics(sample, decisions, pd.DataFrame({"item_id": ["i2"], "final_code": ["TP"], "adjudicator": ["c"], "comment": [""]}))
    assert adjudicated["confirmed_share_final"] == 1.0
    assert adjudicated["disagreements"][0]["final_code"] == "TP"


def test_no_decisions_is_unreviewed_and_null():
    sample = pd.DataFrame({"item_id": ["i1"], "cell": ["A"], "code": ["TP"], "inclusion_probability": [1.0]})
    got = review_statistics(sample, _decisions([]))
    assert got["state"] == "unreviewed" and got["completion"] == 0.0
    assert math.isnan(got["confirmed_share"]) and math.isnan(got["agreement"]["kappa"])


def test_more_than_two_reviewers_use_fleiss():
    sample = pd.DataFrame({"item_id": ["i1", "i2", "i3"], "cell": ["A"] * 3, "code": ["TP"] * 3, "inclusion_probability": [1.0] * 3})
    rows = [(i, r, "TP" if (i, r) != ("i3", "c") else "M-FN-MISSED", "", "") for i in ("i1", "i2", "i3") for r in ("a", "b", "c")]
    got = review_statistics(sample, _decisions(rows))
    table = np.array([[0, 3], [0, 3], [1, 2]])
    assert got["agreement"]["kappa_method"] == "fleiss"
    assert got["agreement"]["kappa"] == pytest.approx(sm_fleiss_kappa(table, method="fleiss"))
    assert got["agreement"]["raw_agreement"] == pytest.approx(2 / 3)


@settings(max_examples=200, deadline=None)
@given(hits=st.lists(st.booleans(), min_size=1, max_size=40), data=st.data())
def test_weighted_share_properties(hits, data):
    probabilities = data.draw(st.lists(st.floats(0.01, 1.0), min_size=len(hits), max_size=len(hits)))
    w = 1.0 / np.array(probabilities)
    got = weighted_share(np.array(hits), w)
    lo, hi = got["ci"]
    assert 0.0 <= lo <= got["value"] + 1e-12 and got["value"] - 1e-12 <= hi <= 1.0
    assert 1.0 - 1e-9 <= got["effective_n"] <= len(hits) + 1e-9  # (Σw)²/Σw² lies between 1 and n
    equal = weighted_share(np.array(hits), np.full(len(hits), 3.0))
    assert equal["value"] == pytest.approx(np.mean(hits)) and equal["effective_n"] == pytest.approx(len(hits))
