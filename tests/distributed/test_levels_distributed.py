"""Levels, block bootstrap and pixels on a real LocalCluster of processes equal the single-process run.

The reporting tiles, AOIs, per-unit intervals, the tile bootstrap's draws and the pixel
counts must not depend on the workers or on the partition size: the cluster run with
7 km partitions is compared with the single-process run with 50 km partitions.
"""

from __future__ import annotations

import pytest

import evalcore
from evalcore.synth import make_layers, make_site_layers
from tests.common import assert_metrics_equal, without_partition_size


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("levels")
    pred, ref = make_layers(300, 3)
    aoi, annotated = make_site_layers(ref, pred, seed=3)
    paths = {}
    for name, frame in (("predicted", pred), ("reference", ref), ("aoi", aoi), ("annotated", annotated)):
        paths[name] = str(root / f"{name}.parquet")
        frame.to_parquet(paths[name])
    return paths


@pytest.fixture(scope="module")
def client(local_clients):
    """A real LocalCluster of 2 worker processes (the session's, tests/conftest.py)."""
    return local_clients.get(2)


@pytest.mark.parametrize("unit", ["tile", "aoi"])
def test_block_bootstrap_levels_and_pixels_equal_single_process(files, client, tmp_path, unit):
    options = dict(
        strata="stratum", bootstrap=20, bootstrap_unit=unit, aoi=files["aoi"], aoi_id_column="aoi_id",
        annotated_area=files["annotated"], pixel_gsd_m=20.0, score_column="score",
    )
    single = evalcore.evaluate(files["predicted"], files["reference"], partition_size_m=50_000.0, **options)
    assert single["pixel"]["count_tp"] > 0 and single["aois"]["count_aois"] >= 8
    cluster = evalcore.evaluate(
        files["predicted"], files["reference"], client=client, workdir=tmp_path / "work", partition_size_m=7_000.0, **options
    )
    assert_metrics_equal(without_partition_size(cluster), without_partition_size(single), rel=1e-9)
