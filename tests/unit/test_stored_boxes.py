"""The candidate boxes stored with a prepared partition, and the pairs phase reading a
partition without its source geometry: the boxes read back are those made from the
geometries, bit for bit, the tolerance lengths measured on partitions read that way are
the in-memory layers' lengths, and a row that must be reprojected from a source geometry
that was not read is refused by position instead of being measured as nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import shapely

from evalcore import boundary
from evalcore.distributed import storage
from evalcore.distributed.tasks import _concat_layers, _reach
from evalcore.prepare import prepare_layer
from evalcore.synth.layers import make_layers

TOLERANCE_M = 10.0
LEAN = ("geom_ea", "geom_utm")


@pytest.fixture(scope="module")
def layers():
    predicted, reference = make_layers(600, seed=2)  # fields in UTM zones 12, 13 and 14
    return prepare_layer(reference, "reference", partition_size_m=20_000.0), prepare_layer(predicted, "predicted", partition_size_m=20_000.0)


def _write_partitions(workdir: Path, layer, grow_m: float = 0.0) -> list[tuple[int, int, int]]:
    """Write ``layer`` as the prepare phase does, one chunk per partition key (its boxes
    grown by ``grow_m``); the keys."""
    boxes = boundary.candidate_boxes(layer) + np.array([-grow_m, -grow_m, grow_m, grow_m])
    reach = _reach(layer, TOLERANCE_M)
    keys = np.stack([layer.utm_epsg, layer.partition_x, layer.partition_y], axis=1)
    out = []
    for key_row in np.unique(keys, axis=0):
        key = tuple(int(v) for v in key_row)
        rows = np.flatnonzero((keys == key_row).all(axis=1))
        storage.write_prepared_chunk(workdir / "prepared" / layer.name / storage.key_name(key), layer, rows, reach, None, boxes)
        out.append(key)
    return out


def _read_all(workdir: Path, layer, keys, zone: int):
    """Every partition of ``layer``: those of ``zone`` without their source geometry."""
    parts = [
        storage.read_partition(workdir, layer.name, key, crs=layer.crs, equal_area_crs=layer.equal_area_crs,
                               partition_size_m=layer.partition_size_m,
                               geometries=LEAN if key[0] == zone else storage.GEOMETRY_COLUMNS)[0]
        for key in keys
    ]
    return _concat_layers(parts)


def test_boxes_read_back_are_the_boxes_made(tmp_path, layers):
    ref, _ = layers
    keys = _write_partitions(tmp_path, ref)
    read = _read_all(tmp_path, ref, keys, zone=32613)
    assert read.positions.tolist() == ref.positions.tolist()
    # Zone 13's source geometry was not decoded, yet its boxes are there.
    assert shapely.is_missing(read.geoms_source[read.utm_epsg == 32613]).all()
    assert boundary.candidate_boxes(read).tobytes() == boundary.candidate_boxes(ref).tobytes()
    assert read.take(np.arange(5, 40)).candidate_box.tobytes() == boundary.candidate_boxes(ref)[5:40].tobytes()


def test_the_stored_boxes_are_the_ones_used(tmp_path, layers):
    ref, _ = layers
    keys = _write_partitions(tmp_path, ref, grow_m=0.5)
    read = _read_all(tmp_path, ref, keys, zone=0)  # every source geometry decoded, and still the stored boxes
    assert boundary.candidate_boxes(read).tobytes() == (boundary.candidate_boxes(ref) + [-0.5, -0.5, 0.5, 0.5]).tobytes()


def test_tolerance_lengths_from_lean_partitions(tmp_path, layers):
    ref, pred = layers
    ref_keys, pred_keys = _write_partitions(tmp_path, ref), _write_partitions(tmp_path, pred)
    for zone in (32612, 32613, 32614):
        mine = ref.take(np.flatnonzero(ref.utm_epsg == zone))
        read_ref = _read_all(tmp_path, ref, [k for k in ref_keys if k[0] == zone], zone)
        read_pred = _read_all(tmp_path, pred, pred_keys, zone)  # the other zones' rows with their source
        expected = boundary.tolerance_lengths(mine, pred, TOLERANCE_M)
        assert boundary.tolerance_lengths(read_ref, read_pred, TOLERANCE_M).tobytes() == expected.tobytes()
        assert (expected > 0).sum() > 50  # the comparison measures something


def test_reprojecting_an_unread_source_geometry_is_refused(tmp_path, layers):
    ref, pred = layers
    pred_keys = _write_partitions(tmp_path, pred)
    # Every partition without its source geometry: zone 13's fields near zones 12 and 14
    # have candidates there that must be reprojected from it.
    lean_pred = _concat_layers([
        storage.read_partition(tmp_path, "predicted", key, crs=pred.crs, equal_area_crs=pred.equal_area_crs,
                               partition_size_m=pred.partition_size_m, geometries=LEAN)[0]
        for key in pred_keys
    ])
    mine = ref.take(np.flatnonzero(ref.utm_epsg == 32613))
    with pytest.raises(ValueError, match=r"predicted layer's row at input position \d+ .*not read with its partition"):
        boundary.tolerance_lengths(mine, lean_pred, TOLERANCE_M)


@pytest.mark.parametrize("reverse", [False, True])
def test_a_partition_comes_back_in_position_order(tmp_path, layers, reverse):
    """Rows come back in position order whether the chunk files hold them in order (the
    reorder is skipped) or not (a file written with its rows reversed)."""
    ref, _ = layers
    key = (32613, 0, 0)
    rows = np.flatnonzero(ref.utm_epsg == 32613)
    boxes, reach = boundary.candidate_boxes(ref), _reach(ref, TOLERANCE_M)
    directory = tmp_path / "prepared" / "reference" / storage.key_name(key)
    first, second = rows[: len(rows) // 2], rows[len(rows) // 2:]
    storage.write_prepared_chunk(directory, ref, second[::-1] if reverse else second, reach, None, boxes)
    storage.write_prepared_chunk(directory, ref, first, reach, None, boxes)
    read, _, read_reach = storage.read_partition(tmp_path, "reference", key, crs=ref.crs, equal_area_crs=ref.equal_area_crs,
                                                 partition_size_m=ref.partition_size_m)
    assert read.positions.tolist() == ref.positions[rows].tolist()
    assert read.candidate_box.tobytes() == boxes[rows].tobytes() and read_reach.tobytes() == reach[rows].tobytes()
    assert shapely.equals_exact(read.geoms_utm, ref.geoms_utm[rows], tolerance=0.0).all()
