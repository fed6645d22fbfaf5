"""The optimal matcher, ``matching="max_weight"`` (SPEC 6.11).

Among the one-to-one sets of eligible pairs: the largest total IoU, then the most
pairs, then the lexicographically smallest sorted list of (reference position,
prediction position). The reference here is a brute force over every one-to-one
subset of the eligible pairs, with the totals added as exact fractions
(``fractions.Fraction`` of each double), so neither rounding nor the matcher's own
weight encoding can hide in it.

Geometries for evaluate are strips in EPSG:6933 (tests.common.strip: one unit = 100 m,
rows 100 m high), so the IoU of two strips of one row is the ratio of their interval
lengths and can be worked out by hand.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment
from shapely.geometry import box

from evalcore import evaluate
from evalcore.matching import match_max_weight, match_one_to_one, resolve
from evalcore.pairtable import PairTable
from tests.common import EA, EA_X0, EA_Y0, assert_metrics_equal, layer, strips


def table(rows: list[tuple[int, int, float]]) -> PairTable:
    """PairTable from (ref_pos, pred_pos, iou) rows, sorted as the contract says (intersection 1 m²)."""
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    return PairTable(
        np.array([r[0] for r in rows], dtype=np.int64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.ones(len(rows)),
        np.array([r[2] for r in rows], dtype=np.float64),
    )


def chosen(t: PairTable, mask: np.ndarray) -> list[tuple[int, int]]:
    return sorted((int(r), int(p)) for r, p in zip(t.ref_pos[mask], t.pred_pos[mask]))


def naive_max_weight(t: PairTable, threshold: float) -> list[tuple[int, int]]:
    """The SPEC 6.11 choice by enumerating every subset of the eligible pairs."""
    floor = threshold * (1 - 1e-9)
    eligible = [(int(r), int(p), Fraction(float(iou))) for r, p, iou in zip(t.ref_pos, t.pred_pos, t.iou) if iou >= floor]
    best_key, best = None, []
    for size in range(len(eligible) + 1):
        for subset in itertools.combinations(eligible, size):
            if len({r for r, _, _ in subset}) < size or len({p for _, p, _ in subset}) < size:
                continue  # not one-to-one
            pairs = sorted((r, p) for r, p, _ in subset)
            total = sum((iou for _, _, iou in subset), Fraction(0))
            # Larger total, then more pairs, then the smaller sorted list.
            key = (total, size)
            if best_key is None or key > best_key or (key == best_key and pairs < best):
                best_key, best = key, pairs
    return best


# --------------------------------------------------------------------------------------
# Hand-worked cases
# --------------------------------------------------------------------------------------
#
# Strips R0 = [4, 10], R1 = [4, 12]; P0 = [4, 8], P1 = [3, 9]. IoU = overlap / union:
#   R0-P0 4/6 = 2/3    R0-P1 5/7    R1-P0 4/8 = 1/2    R1-P1 5/9
# The one-to-one sets with two pairs: {R0-P0, R1-P1} = 2/3 + 5/9 = 11/9 = 1.2222
#                                      {R0-P1, R1-P0} = 5/7 + 1/2 = 17/14 = 1.2143
# and every single pair is at most 5/7. Greedy takes R0-P1 (the largest IoU) first and
# ends with 17/14; the optimum is 11/9.
STRIP_REF = [(4.0, 10.0), (4.0, 12.0)]
STRIP_PRED = [(4.0, 8.0), (3.0, 9.0)]
STRIP_PAIRS = [(0, 0, 2 / 3), (0, 1, 5 / 7), (1, 0, 1 / 2), (1, 1, 5 / 9)]


def test_greedy_and_optimal_differ_on_the_hand_case():
    t = table(STRIP_PAIRS)
    assert chosen(t, match_one_to_one(t, 0.5)) == [(0, 1), (1, 0)]
    assert chosen(t, match_max_weight(t, 0.5)) == [(0, 0), (1, 1)] == naive_max_weight(t, 0.5)
    # At 0.55 R1-P0 (1/2) is out: the optimum is unchanged, greedy keeps only R0-P1.
    assert chosen(t, match_max_weight(t, 0.55)) == [(0, 0), (1, 1)]
    assert chosen(t, match_one_to_one(t, 0.55)) == [(0, 1)]
    # At 0.6 only R0-P0 (2/3) and R0-P1 (5/7) are left, sharing R0: the optimum is R0-P1,
    # which is not the optimum at 0.5 restricted to IoU >= 0.6 (that would be R0-P0).
    assert chosen(t, match_max_weight(t, 0.6)) == [(0, 1)] == naive_max_weight(t, 0.6)
    # At 0.75 nothing is eligible.
    assert chosen(t, match_max_weight(t, 0.75)) == []


def test_greedy_blocks_two_lighter_pairs():
    # (0, 0) 0.9 blocks (0, 1) 0.85 and (1, 0) 0.8, whose total 1.65 is larger.
    t = table([(0, 0, 0.9), (0, 1, 0.85), (1, 0, 0.8)])
    assert chosen(t, match_max_weight(t, 0.5)) == [(0, 1), (1, 0)] == naive_max_weight(t, 0.5)


def test_equal_totals_take_the_most_pairs():
    # {(0, 0)} totals 1.0 and {(0, 1), (1, 0)} totals 0.5 + 0.5 = 1.0 exactly: two pairs win.
    t = table([(0, 0, 1.0), (0, 1, 0.5), (1, 0, 0.5)])
    assert chosen(t, match_max_weight(t, 0.5)) == [(0, 1), (1, 0)] == naive_max_weight(t, 0.5)


def test_equal_totals_and_counts_take_the_smallest_sorted_list():
    # All four pairs 0.75: {(0, 0), (1, 1)} and {(0, 1), (1, 0)} tie on total and count;
    # [(0, 0), (1, 1)] < [(0, 1), (1, 0)].
    t = table([(0, 0, 0.75), (0, 1, 0.75), (1, 0, 0.75), (1, 1, 0.75)])
    assert chosen(t, match_max_weight(t, 0.5)) == [(0, 0), (1, 1)]
    # References 5 and 7 against predictions 2 and 9, all 0.6: the sorted lists are
    # [(5, 2), (7, 9)] and [(5, 9), (7, 2)]; the first is smaller.
    t = table([(5, 2, 0.6), (5, 9, 0.6), (7, 2, 0.6), (7, 9, 0.6)])
    assert chosen(t, match_max_weight(t, 0.5)) == [(5, 2), (7, 9)] == naive_max_weight(t, 0.5)
    # One reference, three predictions at 0.8: the first prediction.
    t = table([(3, 4, 0.8), (3, 1, 0.8), (3, 6, 0.8)])
    assert chosen(t, match_max_weight(t, 0.5)) == [(3, 1)]


def test_totals_are_exact_not_rounded():
    # a = fl(0.1 + 0.2) = 0.3000000000000000444..., while the exact sum of the doubles
    # 0.1 and 0.2 is 0.3000000000000000166...: a float sum calls {(0, 1), (1, 0)} a tie
    # with {(0, 0)} and the count rule would take the two pairs; exactly, a is larger.
    a = 0.1 + 0.2
    assert Fraction(a) > Fraction(0.1) + Fraction(0.2) and 0.1 + 0.2 == a
    t = table([(0, 0, a), (0, 1, 0.1), (1, 0, 0.2)])
    assert chosen(t, match_max_weight(t, 0.05)) == [(0, 0)] == naive_max_weight(t, 0.05)
    # And the other way: 0.3 is below the exact sum 0.1 + 0.2, so the two pairs win.
    t = table([(0, 0, 0.3), (0, 1, 0.1), (1, 0, 0.2)])
    assert chosen(t, match_max_weight(t, 0.05)) == [(0, 1), (1, 0)] == naive_max_weight(t, 0.05)


def test_threshold_rule_is_section_3s():
    t = table([(0, 0, 0.5 * (1 - 0.5e-9)), (1, 1, 0.5 * (1 - 2e-9))])
    assert chosen(t, match_max_weight(t, 0.5)) == [(0, 0)]


def test_empty_and_trivial():
    t = table([])
    assert match_max_weight(t, 0.5).tolist() == []
    t = table([(0, 0, 0.9), (1, 1, 0.4), (2, 2, 0.7)])
    assert chosen(t, match_max_weight(t, 0.5)) == [(0, 0), (2, 2)]


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

# Values that make exact and rounded ties: halves and quarters, 0.1 + 0.2 against 0.3.
IOU_POOL = [0.1, 0.2, 0.3, 0.1 + 0.2, 0.25, 0.5, 0.75, 1.0, 0.6, 0.4, 0.55, 2 / 3, 1 / 3]


@st.composite
def small_tables(draw):
    n_ref, n_pred = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    cells = [(r, p) for r in range(n_ref) for p in range(n_pred)]
    present = draw(st.lists(st.booleans(), min_size=len(cells), max_size=len(cells)))
    rows = [(r * 3 + 1, p * 2, draw(st.sampled_from(IOU_POOL))) for (r, p), keep in zip(cells, present) if keep]
    return table(rows[:10])


@settings(max_examples=300, deadline=None)
@given(t=small_tables(), threshold=st.sampled_from([0.05, 0.3, 0.5, 0.6]))
def test_matcher_equals_brute_force(t, threshold):
    assert chosen(t, match_max_weight(t, threshold)) == naive_max_weight(t, threshold)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 25), density=st.floats(0.2, 1.0))
def test_total_equals_scipy_assignment_on_larger_components(seed, n, density):
    """scipy's linear_sum_assignment as an independent optimum of the total IoU."""
    rng = np.random.default_rng(seed)
    iou = np.where(rng.random((n, n + 2)) < density, rng.uniform(0.3, 1.0, (n, n + 2)), 0.0)
    rows = [(r, p, float(iou[r, p])) for r in range(n) for p in range(n + 2) if iou[r, p] > 0]
    t = table(rows)
    mask = match_max_weight(t, 0.3)
    got = chosen(t, mask)
    assert len({r for r, _ in got}) == len(got) == len({p for _, p in got})  # one-to-one
    assert np.all(t.iou[mask] >= 0.3 * (1 - 1e-9))
    weight = np.where(iou >= 0.3 * (1 - 1e-9), iou, 0.0)
    r, c = linear_sum_assignment(weight, maximize=True)
    assert t.iou[mask].sum() == pytest.approx(weight[r, c].sum(), rel=1e-12, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(a=small_tables(), b=small_tables(), threshold=st.sampled_from([0.05, 0.5]))
def test_a_component_is_decided_alone(a, b, threshold):
    """Two tables on disjoint positions: the union's matching is the union of the matchings."""
    shifted = PairTable(b.ref_pos + 100, b.pred_pos + 100, b.inter_m2, b.iou)
    both = PairTable(*(np.concatenate([x, y]) for x, y in zip(
        (a.ref_pos, a.pred_pos, a.inter_m2, a.iou), (shifted.ref_pos, shifted.pred_pos, shifted.inter_m2, shifted.iou))))
    expected = chosen(a, match_max_weight(a, threshold)) + chosen(shifted, match_max_weight(shifted, threshold))
    assert chosen(both, match_max_weight(both, threshold)) == expected


def test_resolve_under_max_weight_ignores_the_base_threshold():
    t = table(STRIP_PAIRS)
    r = resolve(t, 0.6, "max_weight", base_threshold=0.5)
    assert r.base_threshold == 0.6 and r.matching == "max_weight"
    assert chosen(t, r.is_match) == [(0, 1)]
    # Home of P0 (unmatched at 0.6): its largest overlap; the table's intersections are
    # all 1 m², so the first reference.
    assert dict(zip(r.home_pred_pos.tolist(), r.home_ref_pos.tolist())) == {0: 0, 1: 0}


# --------------------------------------------------------------------------------------
# Through evaluate
# --------------------------------------------------------------------------------------


def strip_layers():
    return layer(strips(STRIP_PRED, EA), EA), layer(strips(STRIP_REF, EA), EA, county=["a", "b"])


def test_evaluate_hand_case():
    pred, ref = strip_layers()
    m = evaluate(pred, ref, matching="max_weight", iou_sweep_thresholds=[0.5, 0.6, 0.75])
    assert m["matching"] == "max_weight"
    assert (m["count_tp"], m["count_fp"], m["count_fn"]) == (2, 0, 0)
    assert m["iou_mean"] == pytest.approx((2 / 3 + 5 / 9) / 2, rel=1e-12)  # 11/18
    greedy = evaluate(pred, ref, iou_sweep_thresholds=None)
    assert greedy["matching"] == "one_to_one"
    assert greedy["iou_mean"] == pytest.approx((5 / 7 + 1 / 2) / 2, rel=1e-12)  # 17/28
    at = {e["iou_threshold"]: e for e in m["iou_sweep"]}
    assert (at[0.5]["count_tp"], at[0.5]["count_fp"], at[0.5]["count_fn"]) == (2, 0, 0)
    # 0.6: R0-P1 alone (5/7); P0 unmatched, R1 unmatched.
    assert (at[0.6]["count_tp"], at[0.6]["count_fp"], at[0.6]["count_fn"]) == (1, 1, 1)
    assert at[0.6]["iou_mean"] == pytest.approx(5 / 7, rel=1e-12)
    assert (at[0.6]["precision"], at[0.6]["recall"], at[0.6]["f1"]) == (0.5, 0.5, 0.5)
    assert (at[0.75]["count_tp"], at[0.75]["count_fp"], at[0.75]["count_fn"]) == (0, 2, 2)


def test_sweep_entries_equal_separate_runs_per_stratum():
    # R0 is in stratum a, R1 in b. At 0.6 P1 is matched to R0 (a) and P0, unmatched, is
    # homed at its largest overlap: 4 units with each reference, the tie to R0 (a).
    pred, ref = strip_layers()
    m = evaluate(pred, ref, matching="max_weight", strata="county", iou_sweep_thresholds=[0.5, 0.55, 0.6, 0.7])
    for i, t in enumerate([0.5, 0.55, 0.6, 0.7]):
        one = evaluate(pred, ref, t, matching="max_weight", strata="county", iou_sweep_thresholds=None)
        for key in ("count_tp", "count_fp", "count_fn", "precision", "recall", "f1", "iou_mean"):
            assert m["iou_sweep"][i][key] == pytest.approx(one[key], rel=1e-12), (t, key)
            for s in ("a", "b"):
                assert m["per_stratum"][s]["iou_sweep"][i][key] == pytest.approx(one["per_stratum"][s][key], rel=1e-12), (t, s, key)
    a = m["per_stratum"]["a"]["iou_sweep"][2]
    assert (a["count_tp"], a["count_fp"], a["count_fn"]) == (1, 1, 0)


def test_tables_under_max_weight_hand_case():
    """Per-field and per-prediction tables, homes and error codes at 0.6 (hand case above).

    R0-P1 (5/7) is the only match. P0 is unmatched; it overlaps R0 and R1 by 4 units
    each, the tie goes to R0 (first reference), which P1 holds: a duplicate. R1 is
    overlapped and unmatched: a localisation miss.
    """
    from evalcore import evaluate_tables

    pred, ref = strip_layers()
    pred.index, ref.index = ["P0", "P1"], ["R0", "R1"]
    t = evaluate_tables(pred, ref, iou_threshold=0.6, matching="max_weight", iou_sweep_thresholds=None)
    assert t.summary["matching"] == "max_weight"
    assert t.fields.loc[["R0", "R1"], "error_code"].tolist() == ["TP", "M-FN-LOCALISATION"]
    assert t.predictions.loc[["P0", "P1"], "error_code"].tolist() == ["M-FP-DUPLICATE", "TP"]
    assert t.predictions.loc[["P0", "P1"], "home_ref_index"].tolist() == ["R0", "R0"]
    assert t.fields.loc["R0", "iou"] == pytest.approx(5 / 7, rel=1e-12)
    # At 0.5 both fields are matched, each to the prediction the optimum gives it.
    t = evaluate_tables(pred, ref, matching="max_weight", iou_sweep_thresholds=None)
    assert t.predictions.loc[["P0", "P1"], "home_ref_index"].tolist() == ["R0", "R1"]
    assert t.fields.loc[["R0", "R1"], "iou"].tolist() == pytest.approx([2 / 3, 5 / 9], rel=1e-12)


@st.composite
def disjoint_layouts(draw):
    """Non-overlapping reference boxes and non-overlapping prediction boxes, one per grid
    cell each (a cell is 200 m; boxes stay inside their cell, so boxes of one layer never
    overlap), predictions in the neighbourhood of the references."""
    n = draw(st.integers(2, 12))
    refs, preds = [], []
    for k in range(n):
        cx, cy = (k % 4) * 200, (k // 4) * 200
        a, b = draw(st.integers(0, 60)), draw(st.integers(0, 60))
        refs.append(box(EA_X0 + cx + a, EA_Y0 + cy + b, EA_X0 + cx + a + draw(st.integers(40, 140)), EA_Y0 + cy + b + draw(st.integers(40, 140))))
    for k in range(draw(st.integers(1, 14))):
        cx, cy = (k % 4) * 200 + draw(st.sampled_from([0, 100])), (k // 4) * 200
        a, b = draw(st.integers(0, 30)), draw(st.integers(0, 60))
        preds.append(box(EA_X0 + cx + a, EA_Y0 + cy + b, EA_X0 + cx + a + draw(st.integers(30, 70)), EA_Y0 + cy + b + draw(st.integers(40, 140))))
    # Predictions shifted by half a cell in x may sit side by side: drop those that overlap.
    kept = []
    for g in preds:
        if all(g.intersection(h).area == 0 for h in kept):
            kept.append(g)
    return layer(kept, EA), layer(refs, EA)


@settings(max_examples=12, deadline=None)
@given(layout=disjoint_layouts(), threshold=st.sampled_from([0.51, 0.6, 0.75]))
def test_non_overlapping_layers_above_one_half_match_as_greedy(layout, threshold):
    """SPEC 6.11: each side then has at most one eligible partner, so both matchers take every eligible pair."""
    pred, ref = layout
    options = dict(iou_sweep_thresholds=[0.55, 0.7, 0.9], size_bins="auto")
    greedy = evaluate(pred, ref, threshold, **options)
    optimal = evaluate(pred, ref, threshold, matching="max_weight", **options)
    assert optimal["matching"] == "max_weight"
    assert_metrics_equal(greedy, optimal, rel=0.0, skip={"matching"})


# --------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.cli
def test_cli_matching_max_weight(tmp_path):
    pred, ref = strip_layers()
    pred.to_file(tmp_path / "pred.gpkg")
    ref.to_file(tmp_path / "ref.gpkg")
    out = tmp_path / "metrics.json"
    run = [sys.executable, "-m", "evalcore.cli", "evaluate", "-q",
           "-p", str(tmp_path / "pred.gpkg"), "-r", str(tmp_path / "ref.gpkg")]
    proc = subprocess.run([*run, "--matching", "max_weight", "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    m = json.loads(out.read_text())
    assert m["matching"] == "max_weight" and m["count_tp"] == 2
    bad = tmp_path / "bad.json"
    proc = subprocess.run([*run, "--matching", "optimal", "-o", str(bad)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and not bad.exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--matching" in lines[0] and "max_weight" in lines[0], proc.stderr


def test_evidence_contract_names_the_tie_rule():
    from evalcore.evidence import evaluation_contract

    def policy(matching: str) -> dict:
        contract = evaluation_contract({"matching": matching, "iou_threshold": 0.5}, parameters={}, metric_parameters={},
                                       input_manifest_sha256="0" * 64, inputs={"inputs": []}, labels={}, run_id="r")
        return contract["matching_policy"]

    assert policy("one_to_one")["tie_break"] == "input position (reference, then prediction)"
    optimal = policy("max_weight")
    assert optimal["matching"] == "max_weight" and "largest exact total IoU" in optimal["tie_break"]


@st.composite
def trees(draw):
    """A random bipartite tree: each new node hangs from an earlier node of the other layer."""
    n = draw(st.integers(2, 120))
    kinds, rows = [0], []  # 0: reference, 1: prediction; rows of (ref node, pred node, iou)
    counts = [1, 0]
    ids = [0]
    for _ in range(n - 1):
        kind = draw(st.integers(0, 1)) if counts[1] else 1  # node 0 is a reference: the first child a prediction
        others = [v for v, k in enumerate(kinds) if k != kind]
        parent = draw(st.sampled_from(others))
        ids.append(counts[kind])
        counts[kind] += 1
        kinds.append(kind)
        child = len(kinds) - 1
        ref, pred = (child, parent) if kind == 0 else (parent, child)
        rows.append((ids[ref] * 2, ids[pred] * 3 + 1, draw(st.sampled_from(IOU_POOL))))
    return table(rows)


@settings(max_examples=80, deadline=None)
@given(t=trees())
def test_tree_solver_equals_the_assignment_solver(t):
    """Tree components (the dynamic programme) against the dense exact solver on the same weights."""
    from evalcore.matching import _component_weights, _dense_best, _tree_best

    row, col, n_refs, n_preds, weight = _component_weights(t.ref_pos, t.pred_pos, t.iou)
    assert len(weight) == n_refs + n_preds - 1
    assert _tree_best(row, col, n_refs, weight).tolist() == _dense_best(row, col, n_refs, n_preds, weight).tolist()
    if len(t) <= 10:
        assert chosen(t, match_max_weight(t, 0.05)) == naive_max_weight(t, 0.05)


def chain(n: int, own: float, next_even: float, next_odd: float) -> PairTable:
    """Prediction k overlaps reference k (``own``) and reference k + 1 (by parity of k)."""
    r = np.concatenate([np.arange(n), np.arange(1, n + 1)])
    p = np.concatenate([np.arange(n), np.arange(n)])
    iou = np.concatenate([np.full(n, own), np.where(np.arange(n) % 2 == 0, next_even, next_odd)])
    o = np.lexsort((p, r))
    return PairTable(r[o], p[o], np.ones(len(r)), iou[o])


@pytest.mark.parametrize("next_odd, expected", [(0.25, "own"), (0.3125, "next")])
def test_a_long_chain_hand_worked(next_odd, expected):
    """A chain of 2 000 predictions and 2 001 fields (one tree component of 4 000 pairs).

    A matching of every prediction has predictions 0 .. j - 1 on their own field and
    j .. n - 1 on the next one (two neighbours cannot both take field k + 1); taking
    the next field gains 0.5 - 0.375 = 1/8 for an even k and next_odd - 0.375 for an
    odd one. With next_odd = 0.25 (-1/8) every even j gives the same total 0.375 n
    exactly (the binary fractions are exact), all with n pairs: the smallest sorted
    list, every prediction on its own field (j = n), wins. With next_odd = 0.3125
    (-1/16) each even-odd couple from j on gains 1/16: j = 0, every prediction on the
    next field. A matching that leaves a prediction out frees one field for a neighbour
    that already has one, and loses the pair's IoU; scipy's float optimum confirms the total.
    """
    n = 2_000
    t = chain(n, 0.375, 0.5, next_odd)
    got = chosen(t, match_max_weight(t, 0.2))
    want = [(k, k) for k in range(n)] if expected == "own" else [(k + 1, k) for k in range(n)]
    assert got == want
    # scipy's float optimum agrees on the total.
    weight = np.zeros((n + 1, n))
    weight[t.ref_pos, t.pred_pos] = t.iou
    rr, cc = linear_sum_assignment(weight, maximize=True)
    assert sum(t.iou[match_max_weight(t, 0.2)]) == pytest.approx(weight[rr, cc].sum(), rel=1e-12)
