"""The optimal matcher (``matching="max_weight"``, SPEC 6.11) on a real LocalCluster of
processes equals the single-process run.

The seam-heavy layers of the differential test, plus clusters where greedy and optimal
matching disagree, each put across a partition seam (the two reference fields of a
cluster have their centroids on either side of an easting that is a multiple of 2 km),
so that the optimal choice needs pairs of two partitions: the resolve phase, central,
solves it. Every key (sweep, levels, taxonomy, intervals) must match to 1e-9, and the
intervals exactly.
"""

from __future__ import annotations

import geopandas
import pandas as pd
import pytest
from shapely.geometry import box

import evalcore

from .seams import ZONE13, seam_layers
from .test_differential import differences

OPTIONS = dict(strata="stratum", size_bins="auto", bootstrap=40, boundary_tolerance_m=10.0, matching="max_weight")
PARTITIONS = [2_000.0, 10_000_000.0]
UNIT = 20.0  # metres per unit of the hand case of tests/unit/test_max_weight.py
ROW_Y = 4_430_000.0 - 2_000.0


def conflict_clusters(seams: list[float]) -> tuple[list, list]:
    """Per seam: R0 = [4, 10], R1 = [4, 12] units; P0 = [4, 8], P1 = [3, 9] (100 m high).

    Greedy takes R0-P1 (5/7) and R1-P0 (1/2); the optimum R0-P0 (2/3) and R1-P1 (5/9).
    The centroids of R0 (7 units) and R1 (8 units) sit 10 m either side of the seam.
    """
    refs, preds = [], []
    for seam in seams:
        x = seam - 7.5 * UNIT
        refs += [box(x + 4 * UNIT, ROW_Y, x + 10 * UNIT, ROW_Y + 100), box(x + 4 * UNIT, ROW_Y, x + 12 * UNIT, ROW_Y + 100)]
        preds += [box(x + 4 * UNIT, ROW_Y, x + 8 * UNIT, ROW_Y + 100), box(x + 3 * UNIT, ROW_Y, x + 9 * UNIT, ROW_Y + 100)]
    return refs, preds


@pytest.fixture(scope="module")
def layers():
    predicted, reference = seam_layers(seed=3)
    refs, preds = conflict_clusters([244_000.0, 246_000.0, 250_000.0])
    extra_ref = geopandas.GeoDataFrame({"stratum": ["s1", "s2"] * 3}, geometry=refs, crs=ZONE13)
    extra_pred = geopandas.GeoDataFrame({"score": [0.5] * len(preds)}, geometry=preds, crs=ZONE13).to_crs(predicted.crs)
    return (
        pd.concat([predicted, extra_pred], ignore_index=True),
        pd.concat([reference, extra_ref], ignore_index=True),
    )


@pytest.fixture(scope="module")
def expected(layers):
    predicted, reference = layers
    return {size: evalcore.evaluate(predicted, reference, partition_size_m=size, **OPTIONS) for size in PARTITIONS}


def test_the_layers_need_the_optimal_matcher(layers, expected):
    predicted, reference = layers
    greedy = evalcore.evaluate(predicted, reference, iou_sweep_thresholds=None)
    optimal = expected[10_000_000.0]
    assert optimal["matching"] == "max_weight"
    # Per cluster the optimum adds 11/9 where greedy adds 17/14 at most (less if R1-P0,
    # IoU 1/2 before reprojection, falls just below the threshold).
    total = {name: m["count_tp"] * m["iou_mean"] for name, m in (("greedy", greedy), ("optimal", optimal))}
    assert total["optimal"] > total["greedy"] + 3 * (11 / 9 - 17 / 14) * 0.9
    # Each cluster's two reference fields (the last six rows) are in different 2 km partitions.
    from evalcore.prepare import prepare_layer

    prepared = prepare_layer(reference, "reference", partition_size_m=2_000.0)
    keys = list(zip(prepared.utm_epsg[-6:], prepared.partition_x[-6:], prepared.partition_y[-6:]))
    assert all(keys[k] != keys[k + 1] for k in (0, 2, 4)), keys


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize("partition_size_m", PARTITIONS, ids=lambda t: f"tile{int(t)}m")
def test_distributed_equals_single_process(layers, expected, local_clients, workers, partition_size_m, tmp_path):
    predicted, reference = layers
    result = evalcore.evaluate(
        predicted, reference, partition_size_m=partition_size_m, client=local_clients.get(workers), workdir=tmp_path / "work",
        **OPTIONS,
    )
    assert differences(result, expected[partition_size_m]) == []
