"""Issue 31 on a real LocalCluster: ``count_split_predictions`` (SPEC 6.2) and the zone band (6.3, 6.7).

A prediction held by two overlapping split reference fields in different partitions
counts once overall and once in each group holding one of them: the credit is decided in
the central step, so the cluster's sums must equal the single process's, key for key.
"""

from __future__ import annotations

import evalcore
from tests.common import EA, assert_metrics_equal, layer, strips

# Overlapping R0 = [0, 4] and R1 = [2, 7] (100 m units) share P1 = [2.5, 3.5]; R2 = [20, 22]
# is split in two; a second copy of the layout 5 km east.
REF = [(0, 4), (2, 7), (20, 22), (50, 54), (52, 57), (70, 72)]
PRED = [(0, 1), (2.5, 3.5), (6, 7), (20, 21), (21, 22), (50, 51), (52.5, 53.5), (56, 57), (70, 71), (71, 72)]
STRATA = ["a", "b", "b", "a", "a", None]


def test_split_predictions_on_a_cluster_equal_single_process(local_clients, tmp_path):
    pred = layer(strips(PRED, EA), EA)
    ref = layer(strips(REF, EA), EA, county=STRATA)
    options = dict(strata="county", size_bins=[0, 4.5, 50], bootstrap=10)
    single = evalcore.evaluate(pred, ref, partition_size_m=1e7, **options)
    # Hand values: overall 3 + 2 + 3 + 2 = 10 distinct (a sum over the splits gives 12).
    # "a": R0 (P0, P1), R3 and R4 sharing P1' (P0', P1', P2'): 5; "b": R1 (P1, P2), R2: 4.
    assert single["count_split_predictions"] == 10
    assert {k: e["count_split_predictions"] for k, e in single["per_stratum"].items()} == {"a": 5, "b": 4}
    # 0-4.5: R0 (P0, P1), R2, R3 (P0', P1'), R5: 8; 4.5-50: R1 (P1, P2), R4 (P1', P2'): 4.
    assert {k: e["count_split_predictions"] for k, e in single["per_size_class"].items()} == {"0-4.5": 8, "4.5-50": 4}
    # 150 m partitions put the overlapping fields of a shared prediction apart.
    small = evalcore.evaluate(pred, ref, partition_size_m=150.0, **options)
    for key in ("count_splits", "count_split_predictions"):
        assert small[key] == single[key]
        for grouping in ("per_stratum", "per_size_class"):
            assert {k: e[key] for k, e in small[grouping].items()} == {k: e[key] for k, e in single[grouping].items()}
    cluster = evalcore.evaluate(pred, ref, client=local_clients.get(2), workdir=tmp_path / "work", partition_size_m=150.0, **options)
    assert_metrics_equal(cluster, small, rel=0.0)


def test_zone_edge_pixels_and_tile_areas_on_a_cluster_equal_single_process(local_clients, tmp_path):
    """Fields across the zone 12/13 line (tests/distributed/seams.py): the tiles on both
    sides of it count the pixels by their centres' longitude and have exact band areas;
    the cluster's values equal the single process's."""
    from .seams import seam_layers

    predicted, reference = seam_layers(seed=5, n_x=16, n_y=6)
    options = dict(pixel_gsd_m=10.0, tile_km=2.0, partition_size_m=2_000.0)
    single = evalcore.evaluate(predicted, reference, **options)
    assert single["pixel"]["count_tp"] > 0 and set(single["utm_epsg_codes"]) == {32612, 32613}
    cluster = evalcore.evaluate(predicted, reference, client=local_clients.get(2), workdir=tmp_path / "work", **options)
    assert_metrics_equal(cluster, single, rel=0.0)
