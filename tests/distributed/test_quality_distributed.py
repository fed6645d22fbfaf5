"""Geometry quality (SPEC 6.11) on a real LocalCluster of processes equals the single-process run.

Every key of the family (pq, sq, rq, the matched-IoU distribution, Dice, the area biases,
boundary IoU with its mean and median, and their intervals), overall, per stratum and
per size class, on the seam-heavy layers of the differential test: fields cut by
partition lines, so a matched pair's boundary IoU is computed in a partition that reads
the prediction from its halo, and the quantiles and the median are taken from per-field
values gathered from several partitions.
"""

from __future__ import annotations

import pytest

import evalcore

from .seams import seam_layers
from .test_differential import differences

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
