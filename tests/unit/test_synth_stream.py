"""Tests of the streamed synth (evalcore.synth.stream, ``evalcore synth --part-rows``).

The layers are blocks from spawned seeds, so any part size must give the same rows;
small layers must stay exactly what write_layers gives; a directory of parts must be a
layer evaluate reads. Peak memory is measured, not tested (docs/performance.md).
"""

from __future__ import annotations

from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import pytest
import shapely
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evalcore
from evalcore.cli import run as cli_run
from evalcore.synth import BAD_ROW_KINDS, LAYER_NAMES, write_layers
from evalcore.synth.stream import PartWriter, block_sites, block_sizes, concat_sites, iter_blocks

SEED = 5
N_REF = 1_500
BLOCK = 400  # 4 blocks of 375 fields


def assert_same(a: geopandas.GeoDataFrame, b: geopandas.GeoDataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns="geometry").reset_index(drop=True), b.drop(columns="geometry").reset_index(drop=True))
    assert a.crs == b.crs
    assert list(shapely.to_wkb(a.geometry.values)) == list(shapely.to_wkb(b.geometry.values))


def read_parts(directory: Path) -> geopandas.GeoDataFrame:
    parts = sorted(directory.glob("part-*.parquet"))
    return pd.concat([geopandas.read_parquet(p) for p in parts], ignore_index=True)


@pytest.fixture(scope="module")
def blocks() -> list[tuple[geopandas.GeoDataFrame, geopandas.GeoDataFrame]]:
    return list(iter_blocks(N_REF, SEED, block_fields=BLOCK, stream_above=0))


def test_block_sizes_by_hand() -> None:
    # ceil(200,001 / 50,000) = 5 blocks; 200,001 = 5 * 40,000 + 1, the extra field in block 0.
    assert block_sizes(200_001) == [40_001, 40_000, 40_000, 40_000, 40_000]
    assert block_sizes(200_000) == [200_000]  # up to STREAM_ABOVE: one block, make_layers whole
    assert block_sizes(10_000_000) == [50_000] * 200
    assert block_sizes(N_REF, BLOCK, 0) == [375] * 4
    assert sum(block_sizes(1_234_567)) == 1_234_567


def test_blocks_are_deterministic_and_make_one_layer(blocks) -> None:
    again = list(iter_blocks(N_REF, SEED, block_fields=BLOCK, stream_above=0))
    for (pred_a, ref_a), (pred_b, ref_b) in zip(blocks, again, strict=True):
        assert_same(pred_a, pred_b)
        assert_same(ref_a, ref_b)
    ref = pd.concat([r for _, r in blocks], ignore_index=True)
    pred = pd.concat([p for p, _ in blocks], ignore_index=True)
    # Every field once, the bad rows once (in block 0), ids unique over the whole layer.
    assert len(ref) == N_REF + len(BAD_ROW_KINDS)
    assert sorted(ref["field_id"]) == list(range(len(ref)))
    assert sorted(pred["pred_id"]) == list(range(len(pred)))
    assert len(blocks[0][1]) == 375 + len(BAD_ROW_KINDS) and all(len(r) == 375 for _, r in blocks[1:])
    # Each block is one cluster on a slot of its own: their lon/lat boxes are far apart.
    boxes = np.array([r.geometry.values[~shapely.is_empty(r.geometry.values)].total_bounds for _, r in blocks])
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            apart = (boxes[i, 2] < boxes[j, 0]) | (boxes[j, 2] < boxes[i, 0]) | (boxes[i, 3] < boxes[j, 1]) | (boxes[j, 3] < boxes[i, 1])
            assert apart, (i, j)


def test_a_seed_changes_the_blocks(blocks) -> None:
    other = next(iter_blocks(N_REF, SEED + 1, block_fields=BLOCK, stream_above=0))
    assert not blocks[0][1].geometry.geom_equals(other[1].geometry).all()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part_rows=st.integers(min_value=40, max_value=2_000))
def test_any_part_size_gives_the_same_layer(blocks, tmp_path_factory, part_rows: int) -> None:
    out = tmp_path_factory.mktemp("parts")
    for k, name in enumerate(("predicted", "reference")):
        (out / name).mkdir()
        writer = PartWriter(out / name, part_rows)
        for block in blocks:
            writer.add(block[k])
        n_parts = writer.close()
        whole = pd.concat([b[k] for b in blocks], ignore_index=True)
        assert n_parts == -(-len(whole) // part_rows)  # ceil
        sizes = [len(geopandas.read_parquet(p)) for p in sorted((out / name).glob("part-*.parquet"))]
        assert sizes[:-1] == [part_rows] * (n_parts - 1) and 0 < sizes[-1] <= part_rows
        assert_same(read_parts(out / name), whole)


def test_site_layers_are_laid_over_every_block(blocks) -> None:
    from evalcore.synth.layers import _site_layers

    sites = concat_sites([block_sites(p, r) for p, r in blocks])
    assert sites.n >= len(blocks) and sites.n_ref.sum() == N_REF + len(BAD_ROW_KINDS) - 2  # null, empty: no box
    aoi, annotated = _site_layers(sites, SEED)
    assert 8 <= len(aoi) <= 20 and len(annotated) >= 1
    assert shapely.is_valid(aoi.geometry.values).all()


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """``evalcore synth`` (in process) of 3,000 fields: whole files, and parts of 1,000 and 3,500 rows."""
    root = tmp_path_factory.mktemp("synth")
    write_layers(root / "files", 3_000, SEED)
    for part_rows in (1_000, 3_500):
        status, reason = cli_run(["synth", "--n-ref", "3000", "--seed", str(SEED), "--part-rows", str(part_rows), "--out", str(root / f"p{part_rows}")])
        assert status == 0, reason
    return root


def test_small_layers_in_parts_are_write_layers_output(written: Path) -> None:
    for name in ("predicted", "reference"):
        whole = geopandas.read_parquet(written / "files" / f"{name}.parquet")
        assert_same(read_parts(written / "p1000" / f"{name}.parquet"), whole)
        assert_same(read_parts(written / "p3500" / f"{name}.parquet"), whole)
        assert len(list((written / "p1000" / f"{name}.parquet").glob("part-*.parquet"))) == -(-len(whole) // 1_000)
    for name in ("aoi", "annotated"):
        assert_same(geopandas.read_parquet(written / "p1000" / f"{name}.parquet"), geopandas.read_parquet(written / "files" / f"{name}.parquet"))
    assert sorted(p.name for p in (written / "p1000").iterdir()) == sorted(f"{n}.parquet" for n in LAYER_NAMES)  # nothing staged left


def test_evaluate_reads_a_directory_of_parts_as_the_layer(written: Path) -> None:
    files = evalcore.evaluate(str(written / "files" / "predicted.parquet"), str(written / "files" / "reference.parquet"))
    parts = evalcore.evaluate(str(written / "p1000" / "predicted.parquet"), str(written / "p1000" / "reference.parquet"))
    assert files["count_reference"] == 3_000 + len(BAD_ROW_KINDS) - files["count_reference_dropped"]
    for key in ("count_reference", "count_predicted", "count_tp", "precision", "recall", "f1", "iou_mean", "iou_sweep", "tiles"):
        assert parts[key] == files[key], key


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--part-rows", "0"], "--part-rows"),
        (["--part-rows", "999"], "--part-rows"),
        (["--part-rows", "1000", "--format", "gpkg"], "--format"),
        (["--seed", "-1"], "--seed"),
    ],
)
def test_bad_options_exit_2_naming_the_flag_and_write_nothing(tmp_path: Path, capsys, argv: list[str], flag: str) -> None:
    status, reason = cli_run(["synth", "--n-ref", "100", "--out", str(tmp_path / "out"), *argv])
    assert status == 2 and flag in reason
    assert not (tmp_path / "out").exists()
