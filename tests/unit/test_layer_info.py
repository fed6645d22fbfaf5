"""What a partition's task is sent of a layer's index: its own partitions' entries and the
layer's CRS, not every partition's (which made a phase's task arguments grow with the
square of the partitions)."""

from __future__ import annotations

import pickle

from pyproj import CRS

from evalcore.distributed.values import LayerInfo


def _info(n: int) -> LayerInfo:
    partitions = {(32612, x, y): {"n": 10 * x + y, "box": (x, y, x + 1.0, y + 1.0), "reach_box": (x - 0.1, y - 0.1, x + 1.1, y + 1.1),
                                  "strata": {"a": x, "b": y}} for x in range(n) for y in range(n)}
    return LayerInfo(CRS.from_epsg(4326), partitions)


def test_only_keeps_the_entries_of_the_keys_the_layer_has_and_its_crs():
    info = _info(3)
    part = info.only([(32612, 1, 2), (32612, 9, 9)])  # the second is not a partition of this layer
    assert part.crs == info.crs
    assert part.partitions == {(32612, 1, 2): info.partitions[(32612, 1, 2)]}
    assert info.only([]).partitions == {}
    assert len(info.partitions) == 9  # the whole info is left as it was


def test_a_tasks_share_does_not_grow_with_the_layer():
    one = {n: len(pickle.dumps(_info(n).only([(32612, 0, 0)]))) for n in (2, 30)}
    whole = {n: len(pickle.dumps(_info(n))) for n in (2, 30)}
    assert one[30] == one[2]
    assert whole[30] > 100 * whole[2] / 4  # 900 partitions against 4
