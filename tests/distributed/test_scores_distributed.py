"""Scores (SPEC 6.5) on a real LocalCluster of processes equal the single-process run.

Every key (AP, its intervals, the PR curves, best F1, the operating point, calibration
overall, per stratum and per size class with their intervals) must equal what
``evalcore.evaluate`` returns in one process with the same ``partition_size_m`` (the
bootstrap draws depend on the partition size, never on the workers). Scores are
rounded to two decimals so that many predictions tie: AP breaks ties by input position
over the whole layer, wherever the partitions fall; and some scores sit exactly on
calibration bin edges.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import evalcore
from evalcore.synth import make_layers
from tests.common import assert_metrics_equal

from .per_workers import PARTITION_FOR_WORKERS, WORKERS, cluster_run, single_process_runs

OPTIONS = {
    "score_column": "score", "score_threshold": 0.55, "calibration_bins": 8, "bootstrap": 20, "precision_targets": [0.8, 0.9],
    "strata": "stratum", "size_bins": "auto",
}
SCORE_KEYS = (
    "ap50", "ap75", "ap50_95", "ap_per_threshold", "ap_iou_thresholds", "pr_curve", "best_f1", "operating_point", "calibration",
    "aurc", "risk_coverage",
)


@pytest.fixture(scope="module")
def layers():
    predicted, reference = make_layers(300, seed=5)
    predicted = predicted.assign(score=np.round(predicted["score"].to_numpy(), 2))
    return predicted, reference


@pytest.fixture(scope="module")
def expected(layers):
    predicted, reference = layers
    return single_process_runs(predicted, reference, OPTIONS)


@pytest.fixture(scope="module", params=WORKERS, ids=lambda n: f"{n}workers")
def client(request, local_clients):
    """A real LocalCluster of 1, 2 or 3 worker processes (the session's, tests/conftest.py)."""
    return local_clients.get(request.param)


def test_the_data_exercises_the_score_keys(layers, expected):
    predicted, _ = layers
    scores = predicted["score"].to_numpy()
    assert len(np.unique(scores)) < len(scores) / 2  # many ties
    assert np.isin([0.25, 0.5, 0.75], scores).any()  # a score on an edge b / 8 of the calibration bins
    for r in expected.values():
        assert 0.0 < r["ap50"] < 1.0 and 0.0 < r["ap50_95"] < r["ap50"]
        ci = r["bootstrap"]["ci"]
        for key in ("ap50", "ap75", "ap50_95"):
            assert ci[key][0] < ci[key][1], (key, ci[key])
        assert set(r["calibration"]["ci"]) == {"ece", "brier"}
        assert len(r["per_stratum"]) >= 3 and len(r["per_size_class"]) >= 2
        for group in ("per_stratum", "per_size_class"):
            populated = [e for e in r[group].values() if e["calibration"]["n"] > 0]
            assert populated and all("ci" in e["calibration"] for e in populated)
    # the draws do not depend on the partition size (keyed by reporting tile, issue 15)
    small, large = expected[5_000.0], expected[50_000.0]
    assert small["ap50"] == large["ap50"] and small["calibration"]["ece"] == pytest.approx(large["calibration"]["ece"], rel=1e-12)
    assert small["bootstrap"]["ci"]["ap50"] == large["bootstrap"]["ci"]["ap50"]


def test_distributed_scores_equal_single_process(layers, expected, client, tmp_path):
    predicted, reference = layers
    result, partition = cluster_run(client, predicted, reference, OPTIONS, tmp_path / "work")
    single = expected[partition]
    for key in SCORE_KEYS:
        assert key in result, key
    assert_metrics_equal(result, single)
    # AP is computed centrally from the same pairs and draws: identical intervals
    for key in ("ap50", "ap75", "ap50_95"):
        assert result["bootstrap"]["ci"][key] == single["bootstrap"]["ci"][key], key
    assert result["ap_per_threshold"] == single["ap_per_threshold"]
    assert result["pr_curve"] == single["pr_curve"]
    assert result["best_f1"] == single["best_f1"] and result["operating_point"] == single["operating_point"]
    # risk-coverage too: computed centrally, identical to the bit
    assert result["risk_coverage"] == single["risk_coverage"]
    assert result["bootstrap"]["ci"]["aurc"] == single["bootstrap"]["ci"]["aurc"]
    # calibration intervals, overall and in every group, to 1e-9 (sums merged across partitions)
    assert_metrics_equal(result["calibration"], single["calibration"])
    for group in ("per_stratum", "per_size_class"):
        assert set(result[group]) == set(single[group])
        for name in single[group]:
            assert_metrics_equal(result[group][name]["calibration"], single[group][name]["calibration"])


@pytest.mark.parametrize("client", [2], indirect=True, ids=["2workers"])
def test_distributed_from_files_writes_the_same_exact_curve(layers, client, tmp_path):
    """Layer files read in chunks on the workers (another reader) and the exact PR curve."""
    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    predicted, reference = layers
    pred_path, ref_path = tmp_path / "pred.parquet", tmp_path / "ref.parquet"
    predicted.to_parquet(pred_path)
    reference.to_parquet(ref_path)
    partition = 20_000.0
    options = {k: v for k, v in OPTIONS.items() if k not in ("strata", "size_bins")}
    curve_path = tmp_path / "pr.parquet"
    result = run_distributed(
        str(pred_path), str(ref_path), client, check_options(partition_size_m=partition, **options),
        strata="stratum", size_bins="auto", workdir=tmp_path / "work", chunk_rows=64, pr_curve_out=curve_path,
    )
    tables = evalcore.evaluate_tables(pred_path, ref_path, partition_size_m=partition, **OPTIONS)
    single = tables.summary
    for key in SCORE_KEYS:
        assert key in result, key
    assert_metrics_equal(
        {k: result[k] for k in (*SCORE_KEYS, "bootstrap", "per_stratum", "per_size_class")},
        {k: single[k] for k in (*SCORE_KEYS, "bootstrap", "per_stratum", "per_size_class")},
    )
    curve = pd.read_parquet(curve_path)
    pd.testing.assert_frame_equal(curve.reset_index(drop=True), tables.pr_curve.reset_index(drop=True), check_exact=True)


@pytest.mark.parametrize("client", [2], indirect=True, ids=["2workers"])
def test_distributed_bias_corrected_ap_intervals_equal_single_process(layers, client, tmp_path):
    """``ap_interval="bc"`` (issue 33 item 12): the BC bounds, the kept percentile bounds and the point's quantile, to the bit."""
    predicted, reference = layers
    options = {**OPTIONS, "ap_interval": "bc", "partition_size_m": PARTITION_FOR_WORKERS[2]}
    single = evalcore.evaluate(predicted, reference, **options)
    result = evalcore.evaluate(predicted, reference, client=client, workdir=tmp_path / "work", **options)
    assert result["ap_interval"] == single["ap_interval"] and single["ap_interval"]["method"] == "bc"
    for key in ("ap50", "ap75", "ap50_95"):
        assert result["bootstrap"]["ci"][key] == single["bootstrap"]["ci"][key], key
    assert_metrics_equal(result, single)


@pytest.mark.parametrize("client", [2], indirect=True, ids=["2workers"])
def test_distributed_paired_bias_corrected_ap_deltas_equal_single_process(layers, client, tmp_path):
    """``compare_on_cluster(..., ap_interval="bc")``: the AP deltas' BC interval, ``ci_percentile`` and ``point_quantile``, to the bit."""
    from evalcore.compare import compare, compare_on_cluster

    predicted, reference = layers
    rng = np.random.default_rng(4)
    scrambled = predicted.assign(score=np.round(np.clip(predicted["score"].to_numpy() + rng.normal(0, 0.2, len(predicted)), 0, 1), 2))
    paths = {}
    for name, frame in (("cand", scrambled), ("inc", predicted), ("ref", reference)):
        paths[name] = tmp_path / f"{name}.parquet"
        frame.to_parquet(paths[name])
    options = {"score_column": "score", "bootstrap": 20, "ap_interval": "bc", "partition_size_m": PARTITION_FOR_WORKERS[2]}
    single = compare(paths["cand"], paths["inc"], paths["ref"], **options)["overall"]
    result = compare_on_cluster(str(paths["cand"]), str(paths["inc"]), str(paths["ref"]), client, workdir=tmp_path / "work", **options)["overall"]
    for key in ("ap50", "ap75", "ap50_95"):
        assert "point_quantile" in single[key] and result[key] == single[key], key
