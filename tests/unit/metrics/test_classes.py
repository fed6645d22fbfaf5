"""Classes (SPEC 6.10): the classification of the matched fields and the class-aware matching.

* a three-class toy whose confusion matrix, accuracies, kappa and per-class counts are
  worked out by hand below (kappa also by scikit-learn's ``cohen_kappa_score``);
* per-class keys equal ``evaluate`` on the class's subsets (a hypothesis property, both
  matchers);
* per-class AP equals pycocotools with one category per class on axis-aligned
  rectangles, and macro AP its mAP over the categories with ground truth;
* intervals from the resamples, and the bad inputs (library and command line).
"""

from __future__ import annotations

import contextlib
import io
import json
import math

import geopandas
import pandas as pd
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shapely.geometry import box

import evalcore
from evalcore.cli import main
from evalcore.errors import EvalInputError
from evalcore.metrics.classes import class_values, cohen_kappa
from evalcore.rates import panoptic_quality
from tests.common import EA
from tests.unit.metrics.test_scores import random_boxes

X0, Y0 = 1_000_000.0, 1_000_000.0


def cell(k: int, height: float = 100.0):
    """A 1 ha square (100 m side in EPSG:6933) at slot k of a row, 300 m apart."""
    return box(X0 + 300.0 * k, Y0, X0 + 300.0 * k + 100.0, Y0 + height)


# --------------------------------------------------------------------------------------
# The three-class toy
# --------------------------------------------------------------------------------------
# Reference R0..R9 and predictions P0..P10. P_k is a copy of R_k for k <= 8 (P6 is 90 m
# tall: IoU 0.9), so the main matching pairs R_k with P_k (k <= 8); R9 has no
# prediction (FN); P9 and P10 lie apart (FP). R8 has no class, P10 has none.
REF_CLASSES = ["a", "a", "a", "b", "b", "b", "c", "c", None, "a"]
PRED_CLASSES = ["a", "a", "b", "b", "b", "c", "c", "a", "c", "b", None]


def toy_layers():
    ref = geopandas.GeoDataFrame({"crop": REF_CLASSES}, geometry=[cell(k) for k in range(10)], crs=EA)
    preds = [cell(k, 90.0 if k == 6 else 100.0) for k in range(9)] + [cell(20), cell(21)]
    pred = geopandas.GeoDataFrame({"crop": PRED_CLASSES}, geometry=preds, crs=EA)
    return pred, ref


@pytest.fixture(scope="module")
def toy():
    pred, ref = toy_layers()
    return evalcore.evaluate(pred, ref, class_column="crop", iou_sweep_thresholds=None)


def test_toy_confusion_matrix_by_hand(toy):
    c = toy["classes"]
    assert c["classes"] == ["a", "b", "c"]
    # Matched pairs with both classes (R8-P8 has no reference class):
    # (a,a) R0 R1, (a,b) R2, (b,b) R3 R4, (b,c) R5, (c,c) R6, (c,a) R7.
    assert c["confusion"]["counts"] == [[2, 1, 0], [0, 2, 1], [1, 0, 1]]
    np.testing.assert_allclose(c["confusion"]["reference_area_ha"], [[2, 1, 0], [0, 2, 1], [1, 0, 1]], rtol=1e-12)
    assert c["count_matched_classified"] == 8
    assert (c["count_reference_unclassified"], c["count_predicted_unclassified"]) == (1, 1)
    assert c["overall_accuracy"] == 5 / 8
    # p_o = 5/8, p_e = (3*3 + 3*3 + 2*2) / 64 = 22/64: kappa = (40/64 - 22/64) / (42/64) = 3/7
    assert c["kappa"] == pytest.approx(3 / 7, rel=1e-12)
    pc = c["per_class"]
    expected = {  # producers = diag/row, users = diag/column, recall/precision_correct_class = diag / fields, predictions
        "a": (2 / 3, 2 / 3, 2 / 4, 2 / 3),
        "b": (2 / 3, 2 / 3, 2 / 3, 2 / 4),
        "c": (1 / 2, 1 / 2, 1 / 2, 1 / 3),
    }
    for name, (producers, users, recall_cc, precision_cc) in expected.items():
        e = pc[name]
        assert e["producers_accuracy"] == pytest.approx(producers, rel=1e-12)
        assert e["users_accuracy"] == pytest.approx(users, rel=1e-12)
        assert e["recall_correct_class"] == pytest.approx(recall_cc, rel=1e-12)
        assert e["precision_correct_class"] == pytest.approx(precision_cc, rel=1e-12)


def test_toy_kappa_equals_scikit_learn(toy):
    from sklearn.metrics import cohen_kappa_score

    pairs = [(r, p) for r, p in zip(REF_CLASSES[:9], PRED_CLASSES[:9]) if r is not None and p is not None]
    theirs = cohen_kappa_score([r for r, _ in pairs], [p for _, p in pairs])
    assert toy["classes"]["kappa"] == pytest.approx(theirs, abs=1e-12)


def test_toy_class_aware_matching_by_hand(toy):
    pc = toy["classes"]["per_class"]
    # Same-class pairs: R0-P0, R1-P1 (a), R3-P3, R4-P4 (b), R6-P6 (c, IoU 0.9).
    # a: 4 fields, 3 predictions, 2 TP; b: 3 fields, 4 predictions, 2 TP; c: 2 fields, 3 predictions, 1 TP.
    counts = {"a": (2, 1, 2, 3, 4), "b": (2, 2, 1, 4, 3), "c": (1, 2, 1, 3, 2)}
    for name, (tp, fp, fn, n_pred, n_ref) in counts.items():
        e = pc[name]
        assert (e["count_tp"], e["count_fp"], e["count_fn"], e["count_predicted"], e["count_reference"]) == (tp, fp, fn, n_pred, n_ref)
    assert pc["a"]["precision"] == pytest.approx(2 / 3) and pc["a"]["recall"] == pytest.approx(1 / 2)
    assert pc["a"]["f1"] == pytest.approx(4 / 7) and pc["b"]["f1"] == pytest.approx(4 / 7)
    assert pc["c"]["precision"] == pytest.approx(1 / 3) and pc["c"]["f1"] == pytest.approx(2 / 5)
    assert pc["c"]["iou_mean"] == pytest.approx(0.9, rel=1e-9)
    # PQ = ΣIoU / (TP + FP/2 + FN/2): a 2 / 3.5, c 0.9 / 2.5
    assert pc["a"]["pq"] == pytest.approx(4 / 7) and pc["a"]["sq"] == pytest.approx(1.0)
    assert pc["c"]["pq"] == pytest.approx(0.36, rel=1e-9) and pc["c"]["sq"] == pytest.approx(0.9, rel=1e-9)
    assert pc["c"]["rq"] == pytest.approx(0.4)
    macro = toy["classes"]["macro"]
    assert macro["n_classes"] == 3
    assert macro["precision"] == pytest.approx((2 / 3 + 1 / 2 + 1 / 3) / 3)
    assert macro["recall"] == pytest.approx((1 / 2 + 2 / 3 + 1 / 2) / 3)
    assert macro["f1"] == pytest.approx((4 / 7 + 4 / 7 + 2 / 5) / 3)
    assert macro["pq"] == pytest.approx((4 / 7 + 4 / 7 + 0.36) / 3, rel=1e-9)
    assert macro["iou_mean"] == pytest.approx((1 + 1 + 0.9) / 3, rel=1e-9)
    assert "ap50" not in macro  # no score column


def test_class_free_keys_do_not_change(toy):
    pred, ref = toy_layers()
    plain = evalcore.evaluate(pred, ref, iou_sweep_thresholds=None)
    assert {k: v for k, v in toy.items() if k not in ("classes", "class_column", "pred_class_column")} == plain
    assert (toy["class_column"], toy["pred_class_column"]) == ("crop", "crop")


def test_classes_are_compared_as_strings():
    assert class_values(geopandas.GeoDataFrame({"c": [3, "3", None, 3.0, np.nan]}), "c", "layer").tolist() == ["3", "3", None, "3", None]
    ref = geopandas.GeoDataFrame({"k": [1, 2]}, geometry=[cell(0), cell(1)], crs=EA)
    pred = geopandas.GeoDataFrame({"kind": ["1", "2"]}, geometry=[cell(0), cell(1)], crs=EA)
    r = evalcore.evaluate(pred, ref, class_column="k", pred_class_column="kind")
    assert r["classes"]["classes"] == ["1", "2"] and r["classes"]["overall_accuracy"] == 1.0
    assert r["classes"]["kappa"] == 1.0 and r["pred_class_column"] == "kind"


def test_kappa_undefined_with_one_class_and_without_entries():
    value, defined = cohen_kappa(np.array([[[5.0]], [[0.0]]]))
    assert not defined.any() and np.isnan(value).all()
    ref = geopandas.GeoDataFrame({"c": ["a"]}, geometry=[cell(0)], crs=EA)
    pred = geopandas.GeoDataFrame({"c": ["a"]}, geometry=[cell(5)], crs=EA)
    c = evalcore.evaluate(pred, ref, class_column="c")["classes"]
    assert c["kappa"] is None or math.isnan(c["kappa"])
    assert c["overall_accuracy"] is None or math.isnan(c["overall_accuracy"])
    assert c["per_class"]["a"]["producers_accuracy"] is None
    assert c["per_class"]["a"]["f1"] == 0.0 and c["per_class"]["a"]["pq"] == 0.0  # evaluate's 0.0, panopticapi's 0


# --------------------------------------------------------------------------------------
# Per-class keys equal evaluate on the class subsets
# --------------------------------------------------------------------------------------

EVALUATE_KEYS = ("precision", "recall", "f1", "iou_mean", "count_tp", "count_fp", "count_fn", "count_predicted", "count_reference")
CLASSES = ["a", "b", "c", None]


def _layers(seed: int, n: int, m: int, ref_choice: list, pred_choice: list):
    gts, dts, _ = random_boxes(seed, n=n, m=m, extent=600.0)
    ref = geopandas.GeoDataFrame({"crop": ref_choice}, geometry=[box(*b) for b in gts], crs=EA)
    pred = geopandas.GeoDataFrame({"crop": pred_choice}, geometry=[box(*b) for b in dts], crs=EA)
    return pred, ref


@st.composite
def class_layers(draw):
    seed = draw(st.integers(0, 10_000))
    n, m = draw(st.integers(1, 14)), draw(st.integers(0, 18))
    ref_choice = draw(st.lists(st.sampled_from(CLASSES), min_size=n, max_size=n))
    pred_choice = draw(st.lists(st.sampled_from(CLASSES), min_size=m, max_size=m))
    if all(c is None for c in ref_choice):
        ref_choice[0] = "a"
    if m and all(c is None for c in pred_choice):
        pred_choice[0] = "b"
    return _layers(seed, n, m, ref_choice, pred_choice)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=class_layers(), matching=st.sampled_from(["one_to_one", "many_to_one", "max_weight"]), threshold=st.sampled_from([0.3, 0.5, 0.7]))
def test_per_class_keys_equal_evaluate_on_the_subsets(layers, matching, threshold):
    pred, ref = layers
    if len(pred) == 0:
        return  # a class column needs a predicted layer with rows to hold it
    options = {"iou_threshold": threshold, "matching": matching, "iou_sweep_thresholds": None}
    r = evalcore.evaluate(pred, ref, class_column="crop", **options)["classes"]
    names = sorted({c for c in list(ref["crop"]) + list(pred["crop"]) if isinstance(c, str)})
    assert r["classes"] == names
    for name in names:
        sub = evalcore.evaluate(pred[pred["crop"] == name], ref[ref["crop"] == name], **options)
        e = r["per_class"][name]
        for key in EVALUATE_KEYS:
            assert e[key] == sub[key], (name, key, e[key], sub[key])
        pq, sq, rq = (float(v) for v in panoptic_quality(sub["iou_mean"] * sub["count_tp"], sub["count_tp"], sub["count_fp"], sub["count_fn"]))
        assert e["pq"] == pytest.approx(pq, rel=1e-12) and e["sq"] == pytest.approx(sq, rel=1e-12) and e["rq"] == pytest.approx(rq, rel=1e-12)
    assert r["macro"]["n_classes"] == len(names)
    assert r["macro"]["f1"] == pytest.approx(np.mean([r["per_class"][n]["f1"] for n in names]), rel=1e-12)


# --------------------------------------------------------------------------------------
# Per-class AP equals pycocotools with categories
# --------------------------------------------------------------------------------------


def pycoco_category_ap(gts, gt_cat, dts, dt_cat, scores, n_categories: int) -> np.ndarray:
    """pycocotools' AP per (IoU threshold, category) of boxes (x0, y0, x1, y1); -1 without ground truth."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    def xywh(b):
        x0, y0, x1, y1 = (float(v) for v in b)
        return [x0, y0, x1 - x0, y1 - y0]

    ds = {
        "images": [{"id": 1, "width": 10**7, "height": 10**7}],
        "categories": [{"id": k + 1, "name": f"c{k}"} for k in range(n_categories)],
        "annotations": [
            {"id": i + 1, "image_id": 1, "category_id": int(c) + 1, "bbox": xywh(b), "area": xywh(b)[2] * xywh(b)[3], "iscrowd": 0}
            for i, (b, c) in enumerate(zip(gts, gt_cat))
        ],
    }
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = ds
        gt.createIndex()
        res = [{"image_id": 1, "category_id": int(c) + 1, "bbox": xywh(b), "score": float(s)} for b, c, s in zip(dts, dt_cat, scores)]
        dt = gt.loadRes(res)
        E = COCOeval(gt, dt, "bbox")
        E.params.maxDets = [len(dts) + 1] * 3
        E.params.areaRng = [[0, 1e12]]
        E.params.areaRngLbl = ["all"]
        E.evaluate()
        E.accumulate()
    p = E.eval["precision"][:, :, :, 0, -1]  # T x R x K
    return np.array([[np.mean(p[t, :, k][p[t, :, k] > -1]) if (p[t, :, k] > -1).any() else -1.0 for k in range(n_categories)]
                     for t in range(p.shape[0])]), p


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_class_ap_equals_pycocotools_categories(seed):
    gts, dts, scores = random_boxes(seed, n=40, m=50, extent=800.0)
    rng = np.random.default_rng(100 + seed)
    gt_cat = rng.integers(0, 3, len(gts))
    dt_cat = np.where(rng.uniform(size=len(dts)) < 0.7, gt_cat[rng.integers(0, len(gts), len(dts))], rng.integers(0, 4, len(dts)))
    names = ["c0", "c1", "c2", "c3"]  # c3: predictions only (no ground truth)
    ref = geopandas.GeoDataFrame({"crop": [names[c] for c in gt_cat]}, geometry=[box(*b) for b in gts], crs=EA)
    pred = geopandas.GeoDataFrame({"crop": [names[c] for c in dt_cat], "score": scores}, geometry=[box(*b) for b in dts], crs=EA)
    r = evalcore.evaluate(pred, ref, class_column="crop", score_column="score", iou_sweep_thresholds=None)["classes"]
    theirs, p = pycoco_category_ap(gts, gt_cat, dts, dt_cat, scores, 4)
    for k, name in enumerate(names):
        e = r["per_class"].get(name)
        if e is None:
            assert (theirs[:, k] == -1).all()
            continue
        if (theirs[:, k] == -1).all():
            assert e["ap50"] is None and e["ap50_95"] is None
            continue
        assert e["ap50"] == pytest.approx(theirs[0, k], abs=1e-9)
        assert e["ap75"] == pytest.approx(theirs[5, k], abs=1e-9)
        assert e["ap50_95"] == pytest.approx(float(np.mean(theirs[:, k])), abs=1e-9)
    # COCO's mAP over categories: the mean over every (threshold, recall, category) with ground truth
    valid = p[p > -1]
    assert r["macro"]["ap50_95"] == pytest.approx(float(np.mean(valid)), abs=1e-9)
    assert r["macro"]["n_classes_ap"] == len(set(gt_cat.tolist()))


# --------------------------------------------------------------------------------------
# Intervals
# --------------------------------------------------------------------------------------


def test_intervals_for_every_per_class_and_macro_rate():
    pred, ref = _layers(7, 40, 45, list(np.random.default_rng(1).choice(["a", "b", "c"], 40)),
                        list(np.random.default_rng(2).choice(["a", "b", "c"], 45)))
    pred = pred.assign(score=np.random.default_rng(3).uniform(size=len(pred)))
    r = evalcore.evaluate(pred, ref, class_column="crop", score_column="score", bootstrap=30, iou_sweep_thresholds=None)
    c = r["classes"]
    for name, e in c["per_class"].items():
        for key in ("precision", "recall", "f1", "iou_mean", "pq", "sq", "rq", "producers_accuracy", "users_accuracy",
                    "recall_correct_class", "precision_correct_class", "ap50", "ap75", "ap50_95"):
            assert key in e["ci"], (name, key)
            lo, hi = e["ci"][key]
            assert lo is None or 0.0 <= lo <= hi <= 1.0, (name, key)
    for key in ("precision", "recall", "f1", "iou_mean", "pq", "sq", "rq", "ap50", "ap75", "ap50_95"):
        lo, hi = c["macro"]["ci"][key]
        # on these data every macro interval has width and holds its point (the former
        # "lo <= point or hi >= point" could not fail once lo <= hi)
        assert 0.0 <= lo < hi <= 1.0, key
        assert lo - 1e-12 <= c["macro"][key] <= hi + 1e-12, key
    assert set(c["ci"]) == {"overall_accuracy", "kappa"}
    # the same seed gives the same intervals
    again = evalcore.evaluate(pred, ref, class_column="crop", score_column="score", bootstrap=30, iou_sweep_thresholds=None)
    assert again["classes"] == c


def test_a_perfect_layer_has_degenerate_intervals():
    ref = geopandas.GeoDataFrame({"crop": ["a", "b", "a", "b"]}, geometry=[cell(k) for k in range(4)], crs=EA)
    r = evalcore.evaluate(ref.copy(), ref, class_column="crop", bootstrap=20)["classes"]
    assert r["macro"]["ci"]["f1"] == [1.0, 1.0] and r["ci"]["overall_accuracy"] == [1.0, 1.0]


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


def test_library_refuses_bad_class_input():
    pred, ref = toy_layers()
    with pytest.raises(EvalInputError, match="'nope'"):
        evalcore.evaluate(pred, ref, class_column="nope")
    with pytest.raises(EvalInputError, match="'kind'.*predicted"):
        evalcore.evaluate(pred, ref, class_column="crop", pred_class_column="kind")
    with pytest.raises(ValueError, match="pred_class_column"):
        evalcore.evaluate(pred, ref, pred_class_column="crop")
    with pytest.raises(EvalInputError, match="only nulls"):
        evalcore.evaluate(pred, ref.assign(crop=None), class_column="crop")


@pytest.fixture()
def toy_files(tmp_path):
    pred, ref = toy_layers()
    pred = pred.assign(empty=None, kind=pred["crop"])
    pred_path, ref_path = tmp_path / "pred.parquet", tmp_path / "ref.gpkg"
    pred.to_parquet(pred_path)
    ref.to_file(ref_path)
    return pred_path, ref_path


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--class-column", "nope"), "--class-column 'nope'"),
        (("--class-column", "crop", "--pred-class-column", "missing"), "--pred-class-column 'missing'"),
        (("--class-column", "crop", "--pred-class-column", "empty"), "only nulls"),
        (("--pred-class-column", "kind"), "--pred-class-column"),
    ],
)
def test_cli_refuses_bad_class_input_with_one_line(toy_files, tmp_path, capsys, args, needle):
    pred, ref = toy_files
    out = tmp_path / "out.json"
    status = main(["evaluate", "-p", str(pred), "-r", str(ref), "-o", str(out), *args])
    _, err = capsys.readouterr()
    assert status == 2, err
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err
    assert not out.exists()


def test_cli_writes_the_classes_block_and_prints_the_macro_line(toy_files, tmp_path, capsys):
    pred, ref = toy_files
    out = tmp_path / "out.json"
    status = main(["evaluate", "-p", str(pred), "-r", str(ref), "-o", str(out), "--class-column", "crop", "--pred-class-column", "kind", "--min-support", "1"])
    stdout, err = capsys.readouterr()
    assert status == 0, err
    metrics = json.loads(out.read_text())
    assert metrics["classes"]["confusion"]["counts"] == [[2, 1, 0], [0, 2, 1], [1, 0, 1]]
    assert "mPQ" in stdout and "worst class" in stdout


def test_tables_get_the_class_columns():
    pred, ref = toy_layers()
    tables = evalcore.evaluate_tables(pred, ref, class_column="crop", iou_sweep_thresholds=None)
    assert list(tables.fields["class"].astype(object).where(tables.fields["class"].notna(), None)) == REF_CLASSES
    preds = tables.predictions
    assert list(preds["class"].astype(object).where(preds["class"].notna(), None)) == PRED_CLASSES
    # the home reference's class: P_k's home is R_k (k <= 8); P9 and P10 have none
    assert list(preds["home_ref_class"].astype(object).where(preds["home_ref_class"].notna(), None)) == REF_CLASSES[:9] + [None, None]
    plain = evalcore.evaluate_tables(pred, ref, iou_sweep_thresholds=None)
    assert "class" not in plain.fields.columns and "class" not in plain.predictions.columns


def test_compare_pairs_the_macro_keys_on_the_same_resamples():
    pred, ref = toy_layers()
    worse = pred.assign(crop=["a"] * len(pred))  # every prediction says "a"
    from evalcore.compare import compare

    out = compare(pred, worse, ref, class_column="crop", bootstrap=20, iou_sweep_thresholds=None)
    for key in ("classes.macro.pq", "classes.macro.f1", "classes.macro.precision", "classes.macro.recall"):
        assert key in out["overall"], key
        e = out["overall"][key]
        c = out["candidate_summary"]["classes"]["macro"][key.rsplit(".", 1)[1]]
        i = out["incumbent_summary"]["classes"]["macro"][key.rsplit(".", 1)[1]]
        assert e["candidate"] == c and e["incumbent"] == i and e["delta"] == pytest.approx(c - i)
        assert e["ci"] is not None and e["ci"][0] <= e["ci"][1]
    # by hand: the incumbent has only "a" predictions; b and c find nothing
    assert out["overall"]["classes.macro.f1"]["candidate"] == pytest.approx((4 / 7 + 4 / 7 + 2 / 5) / 3)
    assert "classes.macro.ap50" not in out["overall"]  # no score column


def test_report_html_draws_the_confusion_heatmap_and_the_class_bars(tmp_path):
    from evalcore.html_report import build_report
    from evalcore.writers import write_json

    pred, ref = toy_layers()
    metrics = evalcore.evaluate(pred, ref, class_column="crop", bootstrap=20, min_support=1, iou_sweep_thresholds=None)
    write_json(tmp_path / "metrics.json", metrics)
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert '<section id="classes">' in page and 'href="#classes"' in page
    assert 'data-figure="class_confusion"' in page and 'data-figure="class_bars"' in page
    assert {p.stem for p in (tmp_path / "figures").glob("class_*.png")} == {"class_confusion", "class_bars"}
    assert f'data-key="classes.macro.pq" data-value="{metrics["classes"]["macro"]["pq"]!r}"' in page
    assert "Worst class by F1" in page and "<b>c</b>" in page  # c: F1 2/5, the lowest
    # the report.md section and the terminal lines come from the family's declarations
    from evalcore.metrics.classes import Classes

    lines = Classes().summary_lines(metrics)
    assert lines[0].startswith("classes (3): mPQ ") and lines[1].startswith("worst class: c F1 0.400")
    assert any(line.startswith("| reference \\ predicted | a | b | c |") for line in Classes().report_lines(metrics))


def test_gates_on_per_class_f1_with_min_support():
    from evalcore.gates import check_metric_paths, evaluate_gates, parse_gates

    pred, ref = toy_layers()
    metrics = evalcore.evaluate(pred, ref, class_column="crop", bootstrap=20, iou_sweep_thresholds=None)
    gates = parse_gates({"gates": [
        {"id": "G-CLASS-F1", "metric": "classes.per_class.*.f1", "op": ">=", "threshold": 0.5, "min_support": 3},
        {"id": "G-MPQ", "metric": "classes.macro.pq", "op": ">=", "threshold": 0.5, "use": "ci_lower"},
    ]})
    check_metric_paths(gates)  # known paths: no typo refused
    rows = {(r["id"], r["group"]): r for r in evaluate_gates(metrics, gates)["rules"]}
    # a: F1 4/7 >= 0.5 with 4 fields; b: 4/7 with 3 fields; c: 2 fields, below the minimum support
    assert rows[("G-CLASS-F1", "a")]["state"] == "pass" and rows[("G-CLASS-F1", "a")]["support"] == 4
    assert rows[("G-CLASS-F1", "b")]["state"] == "pass"
    assert rows[("G-CLASS-F1", "c")]["state"] == "not_evaluable"
    assert rows[("G-CLASS-F1", "c")]["reason"] == "support 2 below the minimum 3"
    mpq = rows[("G-MPQ", None)]
    assert mpq["observed"] == metrics["classes"]["macro"]["ci"]["pq"][0]


@pytest.mark.parametrize(
    ("class_column", "pred_class_column", "needle"),
    [("nope", None, "--class-column 'nope' is not a column of the reference"),
     ("crop", "missing", "--pred-class-column 'missing' is not a column of the predicted"),
     ("crop", "empty", "--pred-class-column 'empty' of the predicted"),
     ("crop", None, None)],
)
def test_class_columns_are_checked_up_front_for_runs_on_workers(toy_files, class_column, pred_class_column, needle):
    """``--cluster`` and ``evalcore run`` read the layers on the workers: the headers and class columns are checked first."""
    import argparse

    from evalcore.cli.checks import check_columns_up_front

    pred, ref = toy_files
    args = argparse.Namespace(reference=str(ref), ref_layer=None, predicted=str(pred), pred_layer=None, strata_column=None,
                              score_column=None, class_column=class_column, pred_class_column=pred_class_column)
    if needle is None:
        check_columns_up_front(args)
        return
    with pytest.raises(EvalInputError) as info:
        check_columns_up_front(args)
    assert needle in str(info.value) and "\n" not in str(info.value)
