"""Bootstrap intervals (SPEC section 5): through evaluate, and the draws themselves.

Exact interval bounds depend on the random draws and cannot be computed by hand;
what is tested is what the spec fixes: reproducibility, the pools (each stratum and
the missing-stratum set at its own size), that a field brings its home predictions,
that unassigned predictions are in every resample, which resamples leave a metric
undefined, and that partition_size_m changes neither the draws nor any number.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalcore import evaluate
from evalcore.bootstrap import (
    ReplicateSums,
    draw_field_counts,
    draw_partition_counts,
    partition_replicate_sums,
    percentile_intervals,
    pool_id,
)
from evalcore.metrics.registry import quantity_columns
from evalcore.options import check_options
from tests.common import INTERVAL_BLOCKS, X0, Y0, assert_metrics_equal, grid_layers, layer, square

N_RESAMPLES = 200
# Metrics with intervals whose values do not come from evalcore/boundary.py.
CHECKED = (
    "precision", "recall", "f1", "iou_mean", "best_iou_mean", "area_weighted_precision",
    "area_weighted_recall", "area_weighted_f1", "over_segmentation", "under_segmentation",
    "area_error_mean_m2", "area_error_signed_mean_m2", "oversegmentation_mean", "undersegmentation_mean",
)


@pytest.fixture(scope="module")
def grid():
    """200 fields; predictions shifted by 0, 15, 30, 45, 60 m (IoU 1, .74, .54, .38, .25),
    so 120 match at 0.5; plus 10 false positives far away."""
    return grid_layers(200, extra_fp=10)


@pytest.fixture(scope="module")
def grid_result(grid):
    pred, ref = grid
    return evaluate(pred, ref, bootstrap=N_RESAMPLES)


def test_block_structure(grid_result):
    block = grid_result["bootstrap"]
    assert block["n_resamples"] == N_RESAMPLES
    assert block["seed"] == 42
    assert block["confidence_level"] == 0.95
    assert block["partition_size_m"] == 50_000.0
    assert block["method"] == "percentile"
    assert block["resampling"] == "reference fields with replacement"
    assert set(block) == {"n_resamples", "seed", "confidence_level", "method", "resampling", "partition_size_m", "ci", "n_undefined", "unit", "n_units", "tile_km"}
    # SPEC 5.1: n_undefined lists only the metrics undefined in some resample.
    assert set(block["n_undefined"]) <= set(block["ci"]) and all(block["n_undefined"].values())
    assert set(CHECKED) <= set(block["ci"])
    # Medians and counts have no interval.
    for key in block["ci"]:
        assert "median" not in key and (not key.startswith("count_") or key == "count_ratio"), key
    for key, (lo, hi) in block["ci"].items():
        if not (math.isnan(lo) and math.isnan(hi)):
            assert lo <= hi, key


def test_point_estimates_are_unchanged_by_the_bootstrap(grid, grid_result):
    pred, ref = grid
    plain = evaluate(pred, ref)
    with_ci = dict(grid_result)
    assert_metrics_equal(with_ci, plain, skip=INTERVAL_BLOCKS)
    assert plain["count_tp"] == 120 and plain["count_fp"] == 90
    assert plain["recall"] == pytest.approx(0.6)
    assert plain["precision"] == pytest.approx(120 / 210)


def test_intervals_contain_the_point_estimate(grid_result):
    ci = grid_result["bootstrap"]["ci"]
    for key in CHECKED:
        lo, hi = ci[key]
        assert lo <= grid_result[key] <= hi, (key, lo, grid_result[key], hi)
    # Well-behaved data: real spread for the headline rates.
    for key in ("precision", "recall", "f1", "iou_mean", "area_weighted_recall"):
        lo, hi = ci[key]
        assert lo < grid_result[key] < hi, key
    # Recall is a proportion of 200 fields around 0.6: the 95 % interval is about ±0.07.
    lo, hi = ci["recall"]
    assert 0.05 < hi - lo < 0.25


def test_nothing_undefined_when_every_resample_has_fields_and_predictions(grid_result):
    n_undefined = grid_result["bootstrap"]["n_undefined"]
    for key in CHECKED:
        assert n_undefined.get(key, 0) == 0, key


def test_same_seed_same_intervals(grid, grid_result):
    pred, ref = grid
    again = evaluate(pred, ref, bootstrap=N_RESAMPLES, bootstrap_seed=42)
    assert_metrics_equal(again["bootstrap"], grid_result["bootstrap"], rel=0.0)


def test_different_seed_different_intervals(grid, grid_result):
    pred, ref = grid
    other = evaluate(pred, ref, bootstrap=N_RESAMPLES, bootstrap_seed=7)
    assert other["bootstrap"]["seed"] == 7
    differ = [k for k in CHECKED if other["bootstrap"]["ci"][k] != grid_result["bootstrap"]["ci"][k]]
    assert differ, "seed 7 drew the same intervals as seed 42"
    assert "recall" in differ or "precision" in differ


def test_partition_size_changes_neither_intervals_nor_point_estimates(grid, grid_result):
    # The draws are keyed by pool and reporting tile (issue 15), not by partition: the
    # same resamples for any partition size (sums in another order: last bits only).
    pred, ref = grid
    small = evaluate(pred, ref, bootstrap=N_RESAMPLES, partition_size_m=1_000)
    assert small["bootstrap"]["partition_size_m"] == 1_000.0
    a, b = dict(small), dict(grid_result)
    a["bootstrap"] = {k: v for k, v in a["bootstrap"].items() if k != "partition_size_m"}
    b["bootstrap"] = {k: v for k, v in b["bootstrap"].items() if k != "partition_size_m"}
    assert_metrics_equal(a, b, rel=1e-12)


def test_tile_size_changes_no_point_estimate_with_groups():
    pred, ref = grid_layers(60)
    strata = np.array(["n", "s", "e"] * 20, dtype=object)
    base = evaluate(pred, ref, 0.3, strata=strata, size_bins="auto")
    for tile in (150.0, 700.0, 5_000.0):
        assert_metrics_equal(
            evaluate(pred, ref, 0.3, strata=strata, size_bins="auto", partition_size_m=tile), base, rel=1e-12
        )


# --------------------------------------------------------------------------------------
# What the resamples contain
# --------------------------------------------------------------------------------------


def _degenerate_layers() -> tuple:
    """10 fields, each with an identical prediction (IoU 1) and a second, unmatched
    prediction whose home it is; plus 5 predictions far away (no home)."""
    refs, preds = [], []
    for i in range(10):
        x = X0 + 300.0 * i
        refs.append(square(x, Y0, 100))
        preds.append(square(x, Y0, 100))
        preds.append(square(x + 90, Y0 + 90, 50))  # overlaps only this field
    for j in range(5):
        preds.append(square(X0 - 10_000 - 300.0 * j, Y0, 100))
    return layer(preds), layer(refs)


@pytest.mark.parametrize("partition_size_m", [50_000.0, 100.0])
def test_a_field_brings_its_home_predictions_and_unassigned_ones_are_always_in(partition_size_m):
    # With 100 m tiles each field and its extra prediction have centroids in different
    # tiles: the prediction must still travel with its home field.
    pred, ref = _degenerate_layers()
    m = evaluate(pred, ref, bootstrap=100, partition_size_m=partition_size_m)
    # Every field contributes TP 1 and FP 1; the 5 unassigned FPs are in every resample,
    # and a resample has 10 fields: precision = 10 / (10 + 10 + 5) = 0.4 in each one.
    assert (m["count_tp"], m["count_fp"], m["count_fp_unassigned"]) == (10, 15, 5)
    assert m["precision"] == pytest.approx(0.4)
    lo, hi = m["bootstrap"]["ci"]["precision"]
    assert lo == pytest.approx(0.4, rel=1e-12) and hi == pytest.approx(0.4, rel=1e-12)
    assert m["bootstrap"]["ci"]["recall"] == [1.0, 1.0]
    assert m["bootstrap"]["ci"]["iou_mean"] == [1.0, 1.0]
    # Field areas differ by ~1e-8 (the UTM scale factor varies with easting): nearly constant.
    lo, hi = m["bootstrap"]["ci"]["area_weighted_precision"]
    assert lo == pytest.approx(m["area_weighted_precision"], rel=1e-6)
    assert hi == pytest.approx(m["area_weighted_precision"], rel=1e-6)


def _one_big_among_small(n_small: int = 39) -> tuple:
    """n_small 1-ha fields and one 4-ha field, every one matched by an identical prediction."""
    refs = [square(X0 + 300.0 * (i % 10), Y0 + 300.0 * (i // 10), 100) for i in range(n_small)]
    refs.append(square(X0 - 1_000, Y0 - 1_000, 200))
    return layer(refs), layer(refs)


def test_size_class_absent_from_some_resamples_is_undefined_there():
    pred, ref = _one_big_among_small()
    m = evaluate(pred, ref, size_bins=[0, 2, 10], bootstrap=N_RESAMPLES)
    big = m["per_size_class"]["2-10"]
    small = m["per_size_class"]["0-2"]
    assert (big["n"], small["n"]) == (1, 39)
    # P(the big field is not drawn in 40 draws) = (39/40)^40 ≈ 0.363: about 73 of 200
    # resamples have no field in "2-10" (binomial s.d. ≈ 6.8).
    n_undef = big.get("ci_n_undefined", {}).get("recall", 0)
    assert 35 <= n_undef <= 115, n_undef
    assert big.get("ci_n_undefined", {}).get("precision", 0) == n_undef  # no TP, no FP either
    assert big.get("ci_n_undefined", {}).get("best_iou_mean", 0) == n_undef
    assert big["ci"]["recall"] == [1.0, 1.0]  # when defined, it is 1
    assert small.get("ci_n_undefined", {}).get("recall", 0) == 0  # P(no small field) ≈ 40^-40
    assert m["bootstrap"]["n_undefined"].get("recall", 0) == 0


def test_a_stratum_is_resampled_at_its_own_size():
    # The big field alone in stratum "b": it is drawn exactly once in every resample, so
    # neither its stratum nor its size class is ever empty.
    pred, ref = _one_big_among_small()
    strata = ["a"] * 39 + ["b"]
    m = evaluate(pred, ref, strata=strata, size_bins=[0, 2, 10], bootstrap=N_RESAMPLES)
    assert m["per_stratum"]["b"].get("ci_n_undefined", {}).get("recall", 0) == 0
    assert m["per_size_class"]["2-10"].get("ci_n_undefined", {}).get("recall", 0) == 0
    assert m["per_stratum"]["b"]["ci"]["recall"] == [1.0, 1.0]


def test_the_missing_stratum_set_is_resampled_at_its_own_size():
    pred, ref = _one_big_among_small()
    strata = ["a"] * 39 + [None]
    m = evaluate(pred, ref, strata=strata, size_bins=[0, 2, 10], bootstrap=N_RESAMPLES)
    assert m["count_reference_no_stratum"] == 1
    assert set(m["per_stratum"]) == {"a"}
    assert m["per_size_class"]["2-10"].get("ci_n_undefined", {}).get("recall", 0) == 0


def _matched_and_missed(n_matched: int = 30, n_missed: int = 10) -> tuple:
    """n_matched fields with an identical prediction, n_missed fields with none."""
    refs, preds = [], []
    for i in range(n_matched + n_missed):
        sq = square(X0 + 300.0 * (i % 10), Y0 + 300.0 * (i // 10), 100)
        refs.append(sq)
        if i < n_matched:
            preds.append(sq)
    return layer(preds), layer(refs)


@pytest.mark.parametrize("partition_size_m", [50_000.0, 250.0])
@pytest.mark.parametrize("missed_label", ["b", None])
def test_stratified_resampling_fixes_the_share_of_each_pool(missed_label, partition_size_m):
    # Stratum "a": 30 matched fields; the other pool: 10 unmatched fields. With each pool
    # resampled at its own size every resample has 30 TP of 40: recall is 0.75 exactly,
    # however the pools are spread over tiles.
    pred, ref = _matched_and_missed()
    strata = ["a"] * 30 + [missed_label] * 10
    m = evaluate(pred, ref, strata=strata, bootstrap=N_RESAMPLES, partition_size_m=partition_size_m)
    assert m["recall"] == 0.75
    assert m["bootstrap"]["ci"]["recall"] == [0.75, 0.75]
    # Without strata the share varies between resamples.
    m = evaluate(pred, ref, bootstrap=N_RESAMPLES)
    lo, hi = m["bootstrap"]["ci"]["recall"]
    assert lo < 0.75 < hi


def test_per_group_intervals_exist(grid):
    pred, ref = grid
    strata = np.array(["a", "b", None, "a"] * 50, dtype=object)
    m = evaluate(pred, ref, strata=strata, size_bins=[0, 0.5, 2], bootstrap=50)
    for name, entry in m["per_stratum"].items():
        assert "bootstrap" not in entry and set(entry.get("ci_n_undefined", {})) <= set(entry["ci"]), name
        assert set(CHECKED) <= set(entry["ci"])
        lo, hi = entry["ci"]["recall"]
        assert lo <= entry["recall"] <= hi
    # The 1-ha fields are all in "0.5-2"; "0-0.5" is empty in every resample.
    empty = m["per_size_class"]["0-0.5"]
    assert empty["n"] == 0
    assert empty.get("ci_n_undefined", {}).get("recall", 0) == 50
    assert all(math.isnan(v) for v in empty["ci"]["recall"])


def test_empty_reference_bootstrap():
    pred, _ = grid_layers(5)
    m = evaluate(pred, layer([]), bootstrap=20)
    assert m["bootstrap"]["n_undefined"]["recall"] == 20
    assert all(math.isnan(v) for v in m["bootstrap"]["ci"]["recall"])
    # precision = 0 / (0 + 5) is defined in every resample (the unassigned are always in).
    assert "precision" not in m["bootstrap"]["n_undefined"]
    assert m["bootstrap"]["ci"]["precision"] == [0.0, 0.0]


def test_no_bootstrap_block_without_resamples(grid):
    pred, ref = grid
    assert "bootstrap" not in evaluate(pred, ref, bootstrap=0)


# --------------------------------------------------------------------------------------
# The draws
# --------------------------------------------------------------------------------------


def test_percentile_intervals_by_hand():
    v = np.arange(101, dtype=float)  # 0..100: linear quantiles at 2.5 % and 97.5 %
    ci, n_undef = percentile_intervals({"m": (v, np.ones(101, bool))})
    assert ci["m"] == pytest.approx([2.5, 97.5], rel=1e-12)
    assert n_undef["m"] == 0
    defined = np.ones(101, bool)
    defined[:50] = False
    values = v.copy()
    values[:50] = np.nan
    ci, n_undef = percentile_intervals({"m": (values, defined)})
    assert n_undef["m"] == 50
    assert ci["m"] == pytest.approx([np.quantile(np.arange(50, 101), 0.025), np.quantile(np.arange(50, 101), 0.975)])
    # NaN counts as undefined even when flagged defined.
    ci, n_undef = percentile_intervals({"m": (np.array([1.0, np.nan, 3.0]), np.ones(3, bool))})
    assert n_undef["m"] == 1 and ci["m"] == pytest.approx([1.05, 2.95], rel=1e-12)
    ci, n_undef = percentile_intervals({"m": (np.full(4, np.nan), np.zeros(4, bool))})
    assert n_undef["m"] == 4 and all(math.isnan(x) for x in ci["m"])
    ci, _ = percentile_intervals({"m": (v, np.ones(101, bool))}, confidence_level=0.5)
    assert ci["m"] == pytest.approx([25.0, 75.0], rel=1e-12)


def test_partition_counts_sum_to_the_pool_size_and_ignore_dict_order():
    pools = {
        pool_id("a", True): {(32613, 10, 88): 7, (32613, 11, 88): 3, (32612, 0, 0): 5},
        pool_id(None, True): {(32613, 10, 88): 4},
    }
    draws = draw_partition_counts(pools, 50, 42)
    a = pool_id("a", True)
    total = sum(draws[(a, k)] for k in pools[a])
    assert total.tolist() == [15] * 50
    assert draws[(pool_id(None, True), (32613, 10, 88))].tolist() == [4] * 50  # one partition
    reordered = {
        pool_id(None, True): {(32613, 10, 88): 4},
        a: {(32612, 0, 0): 5, (32613, 11, 88): 3, (32613, 10, 88): 7},
    }
    again = draw_partition_counts(reordered, 50, 42)
    assert set(again) == set(draws)
    for key in draws:
        np.testing.assert_array_equal(again[key], draws[key])
    other = draw_partition_counts(pools, 50, 43)
    assert any(not np.array_equal(other[k], draws[k]) for k in draws)


def test_partition_counts_look_multinomial():
    # 10 000 replicates of 20 draws over sizes 15 and 5: mean share 0.75.
    draws = draw_partition_counts({1: {(1, 0, 0): 15, (1, 1, 0): 5}}, 10_000, 0)
    first = draws[(1, (1, 0, 0))]
    assert first.mean() == pytest.approx(15.0, abs=0.1)
    assert first.var() == pytest.approx(20 * 0.75 * 0.25, rel=0.1)


def test_field_counts_sum_to_the_draws():
    m = np.array([0, 3, 10, 1])
    counts = draw_field_counts(m, 4, 42, pool_id(None, False), (32613, 10, 88))
    assert counts.shape == (4, 4)
    assert counts.sum(axis=1).tolist() == [0, 3, 10, 1]
    again = draw_field_counts(m, 4, 42, pool_id(None, False), (32613, 10, 88))
    np.testing.assert_array_equal(counts, again)
    # Negative tile indices are fine (tiles west of the zone origin or south of the equator).
    neg = draw_field_counts(m, 4, 42, pool_id(None, False), (32733, -3, -7))
    assert neg.sum(axis=1).tolist() == [0, 3, 10, 1]


def test_replicate_sums_are_the_draw_weighted_sums():
    rng = np.random.default_rng(1)
    columns = quantity_columns(check_options())
    n, c = 12, len(columns)
    values = rng.uniform(0, 5, (n, c))
    values[:, columns.index("n_ref")] = 1.0
    pool_a, pool_b = pool_id("a", True), pool_id("b", True)
    pools = np.array([pool_a] * 8 + [pool_b] * 4)
    strata_codes = np.array([0] * 8 + [1] * 4)
    size_codes = rng.integers(-1, 3, n)
    key = (32613, 10, 88)
    draws = draw_partition_counts({pool_a: {key: 8}, pool_b: {key: 4}}, 30, 5)

    def run(vals: np.ndarray) -> ReplicateSums:
        # Flat group axis: 0 overall, 1-2 the strata, 3-5 the size classes.
        flat = np.stack([strata_codes + 1, np.where(size_codes >= 0, size_codes + 3, -1)], axis=1)
        return partition_replicate_sums(vals, pools, key, draws, n_replicates=30, seed=5, flat_groups=flat, n_groups=6)

    r = run(values)
    # By hand: each pool's field counts, then count-weighted sums of the rows.
    weights = np.zeros((30, n))
    weights[:, :8] = draw_field_counts(draws[(pool_a, key)], 8, 5, pool_a, key)
    weights[:, 8:] = draw_field_counts(draws[(pool_b, key)], 4, 5, pool_b, key)
    np.testing.assert_allclose(r.groups[0], weights @ values, rtol=1e-12)
    for g in range(3):
        rows = size_codes == g
        np.testing.assert_allclose(r.groups[3 + g], weights[:, rows] @ values[rows], rtol=1e-12, atol=1e-12)
    # Each stratum is resampled at its own size, and the strata make up the whole.
    assert r.groups[1][:, columns.index("n_ref")].tolist() == [8.0] * 30
    assert r.groups[2][:, columns.index("n_ref")].tolist() == [4.0] * 30
    np.testing.assert_allclose(r.groups[1] + r.groups[2], r.groups[0], rtol=1e-12)
    # The same bits whatever the memory layout of the input.
    again = run(np.asfortranarray(values))
    assert np.array_equal(again.groups, r.groups)


def test_replicate_sums_merge_adds():
    a = ReplicateSums(np.stack([np.ones((2, 3)), np.ones((2, 3))]))
    b = ReplicateSums(np.stack([np.full((2, 3), 2.0), np.full((2, 3), 3.0)]))
    merged = a.merge(b)
    assert merged.groups[0].tolist() == [[3.0] * 3] * 2
    assert merged.groups[1].tolist() == [[4.0] * 3] * 2


def test_pool_ids_are_stable_and_distinct():
    assert pool_id("a", True) == pool_id("a", True)
    ids = {pool_id(None, False), pool_id(None, True), pool_id("a", True), pool_id("b", True), pool_id("missing", True)}
    assert len(ids) == 5
    assert all(0 <= i < 2**63 for i in ids)


def test_pool_ids_name_each_row_as_pool_id_does():
    from evalcore.bootstrap import pool_ids

    # Repeated names, the missing stratum, a NaN (not equal to itself), and 1 and 1.0 (one
    # dict key, two labels): each row gets pool_id of its own value.
    names = ["wheat", None, "maize", "wheat", float("nan"), 1, 1.0, None, "wheat"]
    for stratified in (True, False):
        got = pool_ids(names, stratified)
        assert got.dtype == np.int64
        assert got.tolist() == [pool_id(n, stratified) for n in names]
    assert pool_ids([1, 1.0], True)[0] != pool_ids([1, 1.0], True)[1]
    assert pool_ids([], True).tolist() == []
