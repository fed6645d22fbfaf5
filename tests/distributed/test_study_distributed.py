"""The study area and the leakage audit on a real LocalCluster of processes equal the single-process run.

Both are per-row predicates of the prepare phase: the rows a study area leaves out, and
those within the training buffer, must be the same whatever chunk or partition a row is
prepared in. The cluster run (7 km partitions, input chunks of 100 rows) is compared with
the single-process run (50 km partitions), with bootstrap intervals, so the resamples
drawn after the selection must be the same too. On the cluster the layers are a cell index
with their pieces (and the study area's union by block) in the work directory
(:mod:`evalcore.site_cells`), in the single process in memory; one case takes a study
area over half the extent and a training area inside it, so that most rows are answered
by whole or empty cells.
"""

from __future__ import annotations

import geopandas
import pytest
from shapely.geometry import box

import evalcore
from evalcore.distributed.runner import run_distributed
from evalcore.options import check_options
from evalcore.synth import make_layers, make_site_layers
from tests.common import assert_metrics_equal, without_partition_size


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    pred, ref = make_layers(300, 3)
    aoi, _ = make_site_layers(ref, pred, seed=3)
    paths = {}
    for name, frame in (("predicted", pred), ("reference", ref), ("study", aoi.iloc[:8]), ("training", aoi.iloc[[0, 9]])):
        paths[name] = str(root / f"{name}.parquet")
        frame.to_parquet(paths[name])
    paths["training_frame"] = aoi.iloc[[0, 9]]
    # Half the fields' extent (about 550 x 670 km): tens of thousands of whole 2 km cells,
    # answered by the cell index, and an outline through the fields, answered by pieces.
    # A training area inside it (about 220 x 440 km), whole cells too.
    for name, shape in (("study_half", box(-110.5, 34.5, -104.0, 41.5)), ("training_box", box(-109.0, 36.0, -106.5, 40.0))):
        paths[name] = str(root / f"{name}.parquet")
        geopandas.GeoDataFrame(geometry=[shape], crs="EPSG:4326").to_parquet(paths[name])
    return paths


@pytest.fixture(scope="module")
def client(local_clients):
    """A real LocalCluster of 2 worker processes (the session's, tests/conftest.py)."""
    return local_clients.get(2)


CASES = {
    # name: (study-area rule, leakage buffer in metres, exclude, training area given in memory, study and training layers)
    "within_excluded_500m": ("within", 500.0, True, False, ("study", "training")),
    "centroid_counted_0m_in_memory": ("centroid", 0.0, False, True, ("study", "training")),
    "intersects_half_the_extent_2km": ("intersects", 2_000.0, True, False, ("study_half", "training_box")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_study_area_and_leakage_equal_single_process(files, client, tmp_path, case):
    rule, buffer_m, exclude, in_memory, (study, training) = CASES[case]
    training = files["training_frame"] if in_memory else files[training]
    options = dict(
        bootstrap=20, study_area=files[study], study_area_rule=rule, training_area=training,
        leakage_buffer_m=buffer_m, exclude_training_area=exclude, boundary_sample_spacing_m=None,
    )
    single = evalcore.evaluate(files["predicted"], files["reference"], strata="stratum", partition_size_m=50_000.0, **options)
    # The layout exercises what it should: rows left out on both sides, rows within the buffer.
    assert single["count_reference_outside_study_area"] > 0 and single["count_predicted_outside_study_area"] > 0
    assert single["leakage"]["count_reference_within_buffer"] > 0 and single["leakage"]["count_predicted_within_buffer"] > 0
    assert single["leakage"]["excluded"] is exclude
    checked = check_options(partition_size_m=7_000.0, **options)
    cluster = run_distributed(files["predicted"], files["reference"], client, checked, strata="stratum",
                              workdir=tmp_path / "work", chunk_rows=100)
    assert_metrics_equal(without_partition_size(cluster), without_partition_size(single), rel=1e-9)
