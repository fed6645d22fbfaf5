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


def _site_layers_spanning(reference):
    """An AOI layer whose first AOI (with a hole) spans every partition, a multipolygon AOI
    overlapping it and a star; an annotated area over most of the extent, with a hole."""
    import geopandas
    import numpy as np
    from shapely.geometry import MultiPolygon, Polygon, box

    x0, y0, x1, y1 = reference.total_bounds
    w, h = x1 - x0, y1 - y0
    big = box(x0 - 0.05 * w, y0 - 0.05 * h, x1 + 0.05 * w, y1 + 0.05 * h).difference(box(x0 + 0.4 * w, y0 + 0.3 * h, x0 + 0.55 * w, y0 + 0.7 * h))
    multi = MultiPolygon([box(x0 + 0.1 * w, y0, x0 + 0.3 * w, y1), box(x0 + 0.7 * w, y0 + 0.2 * h, x0 + 0.9 * w, y0 + 0.5 * h)])
    angles = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    radius = np.where(np.arange(40) % 2 == 0, 0.45 * h, 0.2 * h)
    star = Polygon(np.column_stack([x0 + 0.6 * w + radius * np.cos(angles), y0 + 0.5 * h + radius * np.sin(angles)]))
    aoi = geopandas.GeoDataFrame({"aoi_id": ["whole", "multi", "star"]}, geometry=[big, multi, star], crs=reference.crs)
    annotated_geom = box(x0 + 0.05 * w, y0 - 0.02 * h, x1 - 0.05 * w, y1 + 0.02 * h).difference(star)
    annotated = geopandas.GeoDataFrame(geometry=[annotated_geom], crs=reference.crs)
    return aoi, annotated


def test_site_polygons_spanning_many_partitions_equal_single_process_to_the_bit(client, tmp_path):
    """Each prepare chunk (64 rows of a layer sorted west to east) reads only the pieces of its
    own extent from the work directory; every key equals the single-process run's, to the bit."""
    from evalcore.api import check_options
    from evalcore.distributed.runner import run_distributed

    from .seams import seam_layers
    from .test_differential import differences

    predicted, reference = seam_layers(seed=3)  # UTM metres, about 6.5 x 3 km: 1 km partitions, 2 km cells
    predicted = predicted.iloc[predicted.geometry.bounds["minx"].argsort()].reset_index(drop=True)
    reference = reference.iloc[reference.geometry.bounds["minx"].argsort()].reset_index(drop=True)
    aoi, annotated = _site_layers_spanning(reference)
    paths = {}
    for name, frame in (("pred", predicted), ("ref", reference), ("aoi", aoi), ("annotated", annotated)):
        paths[name] = str(tmp_path / f"{name}.parquet")
        frame.to_parquet(paths[name])
    options = dict(
        partition_size_m=1_000.0, bootstrap=20, bootstrap_unit="aoi", aoi=paths["aoi"], aoi_id_column="aoi_id",
        annotated_area=paths["annotated"], score_column=None,
    )
    single = evalcore.evaluate(paths["pred"], paths["ref"], strata="stratum", **options)
    assert single["aois"]["count_aois"] == 3
    cluster = run_distributed(
        paths["pred"], paths["ref"], client, check_options(**options), strata="stratum", workdir=tmp_path / "work", chunk_rows=64,
    )
    assert differences(cluster, single, rtol=0.0) == []
    # The boundary pieces were read from the work directory, in blocks.
    assert sorted(p.name for p in (tmp_path / "work" / "sites").iterdir()) == ["annotated", "aoi"]
    assert list((tmp_path / "work" / "sites" / "aoi").glob("block_*.npz"))


def test_every_tiles_interval_equals_single_process_to_the_bit(client, tmp_path, monkeypatch):
    """The cluster's merge does not hold the tiles' replicates: each block of tiles has them
    added from the partitions' sums files when its intervals are made (levels.BlockedReplicates).
    Blocks of 3 tiles here (the client makes the intervals, so the patch reaches it), tiles of
    500 m over 1 km partitions: every tile's interval equals the single process's, to the bit."""
    import numpy as np
    import pandas as pd

    from evalcore import levels
    from evalcore.api import check_options, evaluate_tables
    from evalcore.distributed.runner import run_distributed

    from .seams import seam_layers

    monkeypatch.setattr(levels, "UNITS_PER_BLOCK", 3)
    predicted, reference = seam_layers(seed=5)
    options = dict(partition_size_m=1_000.0, bootstrap=30, tile_km=0.5)
    single = evaluate_tables(predicted, reference, strata="stratum", **options).tiles
    out = tmp_path / "tiles.parquet"
    run_distributed(predicted, reference, client, check_options(**options), strata="stratum", workdir=tmp_path / "work", tiles_out=out)
    cluster = pd.read_parquet(out).drop(columns="geometry")
    single = pd.DataFrame(single.drop(columns="geometry"))
    intervals = [c for c in single.columns if "_ci_" in c]
    assert len(single) > 10 * levels.UNITS_PER_BLOCK and {"f1_ci_lower", "f1_ci_upper"} <= set(intervals)
    assert np.isfinite(single["f1_ci_lower"].to_numpy(float)).sum() > len(single) // 2
    pd.testing.assert_frame_equal(cluster, single, check_exact=True, check_dtype=False)
