"""Geometry quality (SPEC 6.11) on a real LocalCluster of processes equals the single-process run.

Every key of the family (pq, sq, rq, the matched-IoU distribution, Dice, the area biases,
boundary IoU with its mean and median, and their intervals), overall, per stratum and
per size class, on the seam-heavy layers of the differential test: fields cut by
partition lines, so a matched pair's boundary IoU is computed in a partition that reads
the prediction from its halo, and the quantiles and the median are selected from
per-field values sorted in several partitions (equal to the last bit).
"""

from __future__ import annotations

import pytest

import evalcore

from .seams import seam_layers
from .test_differential import differences, order_statistics

OPTIONS = dict(strata="stratum", size_bins="auto", bootstrap=20, boundary_iou_width_m=5.0)
PARTITION_M = 2_000.0
QUALITY_KEYS = ("pq", "sq", "rq", "iou_distribution", "dice_mean", "area_bias", "matched_area_bias",
                "boundary_iou_mean", "boundary_iou_median")
INTERVAL_KEYS = ("pq", "sq", "rq", "dice_mean", "area_bias", "matched_area_bias", "boundary_iou_mean")


@pytest.fixture(scope="module")
def layers():
    return seam_layers(seed=3)


@pytest.fixture(scope="module")
def expected(layers):
    predicted, reference = layers
    return evalcore.evaluate(predicted, reference, partition_size_m=PARTITION_M, **OPTIONS)


def test_the_single_process_run_has_every_quality_key(expected):
    assert expected["boundary_iou_width_m"] == 5.0
    assert expected["iou_distribution"]["count"] == expected["count_tp"] > 0
    assert set(INTERVAL_KEYS) <= set(expected["bootstrap"]["ci"])
    for group in ("per_stratum", "per_size_class"):
        assert expected[group]
        for entry in expected[group].values():
            assert set(QUALITY_KEYS) <= set(entry)
            if entry["n"] > 0:
                assert set(INTERVAL_KEYS) <= set(entry["ci"])


@pytest.mark.parametrize("n_workers", [2, 3])
def test_distributed_quality_equals_single_process(layers, expected, local_clients, n_workers, tmp_path):
    predicted, reference = layers
    client = local_clients.get(n_workers)
    result = evalcore.evaluate(
        predicted, reference, partition_size_m=PARTITION_M, client=client, workdir=tmp_path / "work", **OPTIONS
    )
    # floats to 1e-9 relative, intervals (the same draws summed in the same order) to the bit
    assert differences(result, expected) == []
    assert all(key in result for key in QUALITY_KEYS)
    # The quantiles and the boundary IoU median are selected exactly: equal to the bit.
    assert differences(order_statistics(result), order_statistics(expected), rtol=0.0) == []
    assert "boundary_iou_median" in order_statistics(result)["overall"]


def test_distributed_tables_carry_each_pairs_boundary_iou(layers, local_clients, tmp_path):
    """The per-field and per-prediction tables written by the workers hold the same boundary IoU."""
    import geopandas
    import numpy as np
    import pandas as pd

    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    predicted, reference = layers
    pred_path, ref_path = tmp_path / "pred.parquet", tmp_path / "ref.parquet"
    predicted.to_parquet(pred_path)
    reference.to_parquet(ref_path)
    options = {k: v for k, v in OPTIONS.items() if k not in ("strata", "size_bins", "bootstrap")}
    run_distributed(
        str(pred_path), str(ref_path), local_clients.get(2), check_options(partition_size_m=PARTITION_M, **options),
        workdir=tmp_path / "work", frame_dir=tmp_path / "fields", predictions_dir=tmp_path / "preds",
    )
    single = evalcore.evaluate_tables(pred_path, ref_path, partition_size_m=PARTITION_M, **options)
    def parts(directory):  # one part per partition; a part's all-null column has no type, so read them one by one
        return pd.concat([pd.DataFrame(geopandas.read_parquet(p)) for p in sorted(directory.glob("*.parquet"))])

    fields = parts(tmp_path / "fields").set_index("ref_index").sort_index()
    preds = parts(tmp_path / "preds").set_index("pred_index").sort_index()
    expected_fields = single.fields.sort_index()
    expected_preds = single.predictions.sort_index()
    assert fields.index.tolist() == expected_fields.index.tolist()
    np.testing.assert_allclose(fields["boundary_iou"], expected_fields["boundary_iou"], rtol=1e-12)
    np.testing.assert_allclose(preds["boundary_iou"], expected_preds["boundary_iou"], rtol=1e-12)
    matched = fields["matched"].to_numpy(bool)
    assert np.isfinite(fields["boundary_iou"].to_numpy()[matched]).all()
    assert np.isnan(fields["boundary_iou"].to_numpy()[~matched]).all()
