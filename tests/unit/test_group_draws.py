"""The field bootstrap's per-group counts go from the pools' tasks to the sums tasks through files.

The client adds the components tasks' group sizes (:func:`_field_groups_of`); a
``group-draws-<pool>`` task per pool writes its groups' counts
(:func:`group_draws_task`) and each sums task reads its groups' columns
(:func:`_group_counts`). The counts read equal :func:`partition_groups_draws`' to the
bit however the groups are split over partitions, and what the client sends does not
grow with the number of replicates. The tasks are plain functions, called here in
process; tests/reliability/test_faults.py runs them on a cluster.
"""

from __future__ import annotations

import pickle
import re
import shutil

import numpy as np
import pytest

from evalcore.bootstrap import draw_partition_counts, draw_pool_counts, partition_groups_draws, pool_id
from evalcore.distributed import storage
from evalcore.distributed.reliability import PartitionMissingError
from evalcore.distributed.runner import _field_groups_of
from evalcore.distributed.tasks import _group_counts, group_draws_task
from evalcore.options import check_options

B, SEED, SIGNATURE = 25, 17, "run-signature"
A, C = pool_id("a", True), pool_id(None, True)  # a stratum and the missing-stratum pool
T1, T2, T3, T4 = (32633, 4, 51), (32633, 5, 51), (32633, -1, 50), (32634, 0, 0)

# The run's groups, hand-split over 1 to 4 partitions (each a key -> {(pool, tile): n}):
# groups held whole, split in two, and one (A, T1) over every partition.
SPLITS = {
    1: {(32633, 0, 0): {(A, T1): 40, (A, T2): 7, (A, T3): 1, (C, T1): 12, (C, T4): 3}},
    2: {(32633, 0, 0): {(A, T1): 25, (A, T2): 7, (C, T1): 2},
        (32633, 1, 0): {(A, T1): 15, (A, T3): 1, (C, T1): 10, (C, T4): 3}},
    3: {(32633, 0, 0): {(A, T1): 5, (C, T1): 12},
        (32633, 1, 0): {(A, T1): 30, (A, T2): 7},
        (32634, 0, 0): {(A, T1): 5, (A, T3): 1, (C, T4): 3}},
    4: {(32633, 0, 0): {(A, T1): 10, (A, T2): 3},
        (32633, 1, 0): {(A, T1): 10, (A, T2): 4, (C, T1): 12},
        (32633, 0, -1): {(A, T1): 10, (A, T3): 1},
        (32634, 0, 0): {(A, T1): 10, (C, T4): 3}},
}


def _options(n_replicates: int = B):
    return check_options(bootstrap=n_replicates, bootstrap_seed=SEED)


def _write_pools(workdir, pools: dict, n_replicates: int = B, signature: str = SIGNATURE) -> None:
    for pool, (tiles, sizes) in pools.items():
        group_draws_task(str(workdir), pool, tiles, sizes, n_replicates, SEED, signature)


@pytest.mark.parametrize("n_parts", sorted(SPLITS))
def test_the_pools_files_give_each_partition_the_runs_counts(tmp_path, n_parts):
    split = SPLITS[n_parts]
    totals: dict = {}
    for groups in split.values():
        for group, n in groups.items():
            totals[group] = totals.get(group, 0) + n
    assert totals == SPLITS[1][(32633, 0, 0)]  # the same run however it is split
    pools, partitions = _field_groups_of(_options(), split)
    _write_pools(tmp_path, pools)
    expected = partition_groups_draws(totals, B, SEED)
    for key, (sizes, holders) in partitions.items():
        got = _group_counts(str(tmp_path), key, sizes, B, SIGNATURE)
        assert got.keys() == split[key].keys()
        for group, (size, counts) in got.items():
            assert size == expected[group][0] == totals[group]
            assert counts.dtype == np.int64 and np.array_equal(counts, expected[group][1])
        # The other holders: the partitions sharing one of its groups, and only those.
        assert holders == sorted(k for k in split if k != key and split[k].keys() & split[key].keys())
    # Each pool's files, read whole: tiles sorted, counts int32 (replicates x tiles), each
    # replicate drawing the pool's size.
    for pool in (A, C):
        pool_tiles = sorted(t for p, t in totals if p == pool)
        tiles, sizes, counts = storage.read_group_draws(tmp_path, pool, SIGNATURE, pool_tiles)
        assert counts.dtype == np.int32 and counts.shape == (B, len(tiles))
        assert [tuple(t) for t in tiles.tolist()] == pool_tiles
        assert np.all(counts.sum(axis=1) == sizes.sum())


TILES = [(32633, x, y) for x in range(-2, 3) for y in range(3)]  # 15 tiles, sorted


@pytest.mark.parametrize("shard_tiles", [1, 2, 4, 15, 1024])
def test_a_partition_reads_only_the_files_holding_its_tiles(tmp_path, monkeypatch, shard_tiles):
    """A pool's counts in files of a few tiles: a partition's groups read from the files that
    hold them equal the counts of the pool drawn whole, whatever the files' size, and the other
    files are not read (deleting them changes nothing)."""
    monkeypatch.setattr(storage, "GROUP_SHARD_TILES", shard_tiles)
    sizes = np.arange(1, len(TILES) + 1) * 3
    group_draws_task(str(tmp_path), A, np.array(TILES), sizes, B, SEED, SIGNATURE)
    whole = draw_pool_counts(A, dict(zip(TILES, sizes.tolist())), B, SEED)[2]
    directory = storage.group_draws_path(tmp_path, A)
    assert len(list(directory.glob("tiles-*.arrays"))) == -(-len(TILES) // shard_tiles)
    mine = {TILES[0]: 3, TILES[7]: 24, TILES[8]: 27}  # the first tile and two in the middle
    holding = sorted({TILES.index(t) // shard_tiles for t in mine})
    for path in directory.glob("tiles-*.arrays"):
        if int(path.stem.split("-")[1]) not in holding:
            path.unlink()
    got = _group_counts(str(tmp_path), (32633, 0, 0), {(A, t): n for t, n in mine.items()}, B, SIGNATURE)
    assert sorted(got) == sorted((A, t) for t in mine)
    for (_, tile), (size, counts) in got.items():
        assert size == mine[tile] and np.array_equal(counts, whole[:, TILES.index(tile)])


def test_one_pools_draw_is_draw_partition_counts_for_that_pool():
    sizes = {A: {T2: 7, T1: 40, T3: 1, (32633, 9, 9): 0}, C: {T1: 12, T4: 3}}
    whole = draw_partition_counts(sizes, B, SEED)
    for pool, groups in sizes.items():
        keys, n, counts = draw_pool_counts(pool, groups, B, SEED)
        assert keys == sorted(k for k, v in groups.items() if v)
        assert n.tolist() == [groups[k] for k in keys]
        for j, key in enumerate(keys):
            assert np.array_equal(counts[:, j], whole[(pool, key)])
    keys, n, counts = draw_pool_counts(A, {T1: 0}, B, SEED)
    assert keys == [] and counts.shape == (B, 0)


def test_counts_are_int64_when_a_pool_could_exceed_int32():
    assert storage.count_dtype(2**31 - 1) == np.int32
    assert storage.count_dtype(2**31) == np.int64


def _partition_two(tmp_path):
    pools, partitions = _field_groups_of(_options(), SPLITS[2])
    _write_pools(tmp_path, pools)
    key = (32633, 1, 0)
    return key, partitions[key][0]


def test_a_missing_pool_file_names_the_file_and_the_partition(tmp_path):
    key, sizes = _partition_two(tmp_path)
    path = storage.group_draws_path(tmp_path, C)
    (path / "index.arrays").unlink()
    with pytest.raises(PartitionMissingError, match=rf"partition 32633_1_0: .* pool {C} \({re.escape(str(path))}\) are missing"):
        _group_counts(str(tmp_path), key, sizes, B, SIGNATURE)
    # Of another run (its done record names another signature): the same.
    _write_pools(tmp_path, _field_groups_of(_options(), SPLITS[2])[0], signature="another run")
    with pytest.raises(PartitionMissingError, match=rf"pool {min(A, C)} .* are missing or do not match"):  # pools in order
        _group_counts(str(tmp_path), key, sizes, B, SIGNATURE)


def test_a_stale_or_short_pool_file_names_the_file_and_the_partition(tmp_path):
    key, sizes = _partition_two(tmp_path)
    path = storage.group_draws_path(tmp_path, A)
    # Stale: the pool's file of a run where one of the partition's tiles held other fields.
    group_draws_task(str(tmp_path), A, np.array([T1, T3]), np.array([39, 1]), B, SEED, SIGNATURE)
    with pytest.raises(PartitionMissingError, match=rf"partition 32633_1_0: .* pool {A} \({re.escape(str(path))}\) are stale: "
                                                    r"reporting tile \(32633, 4, 51\) holds 39 fields there but 40"):
        _group_counts(str(tmp_path), key, sizes, B, SIGNATURE)
    # Short: drawn for fewer replicates than the run's.
    tiles, n = _field_groups_of(_options(), SPLITS[2])[0][A]
    group_draws_task(str(tmp_path), A, tiles, n, B - 1, SEED, SIGNATURE)
    with pytest.raises(PartitionMissingError, match=rf"partition 32633_1_0: .* pool {A} .* hold \({B - 1}, 3\) counts for 3 tiles "
                                                    rf"and {B} replicates"):
        _group_counts(str(tmp_path), key, sizes, B, SIGNATURE)
    # A file changed after its done record: its checksum no longer matches.
    group_draws_task(str(tmp_path), A, tiles, n, B, SEED, SIGNATURE)
    shutil.copyfile(storage.group_draws_path(tmp_path, C) / "tiles-0.arrays", path / "tiles-0.arrays")
    with pytest.raises(PartitionMissingError, match="are missing or do not match their checksums"):
        _group_counts(str(tmp_path), key, sizes, B, SIGNATURE)
    # A file the partition needs removed, its index still there: the same.
    group_draws_task(str(tmp_path), A, tiles, n, B, SEED, SIGNATURE)
    (path / "tiles-0.arrays").unlink()
    with pytest.raises(PartitionMissingError, match=rf"pool {A} \({re.escape(str(path))}\) are missing"):
        _group_counts(str(tmp_path), key, sizes, B, SIGNATURE)


def test_what_the_client_sends_does_not_grow_with_the_replicates():
    """The pools' tasks' arguments and the sums tasks' field arguments, for B = 10 and B = 1000:
    the same bytes (sizes and keys only; the counts are made and read on the workers)."""
    few, many = (_field_groups_of(_options(n), SPLITS[4]) for n in (10, 1000))
    assert pickle.dumps(few) == pickle.dumps(many)
    assert len(pickle.dumps(many)) < 4096
    pools, partitions = many
    for sizes, holders in partitions.values():
        assert all(isinstance(n, int) for n in sizes.values()) and all(len(k) == 3 for k in holders)
    for tiles, n in pools.values():
        assert tiles.shape == (len(n), 3)
    assert _field_groups_of(check_options(bootstrap=0), SPLITS[4]) is None
    assert _field_groups_of(check_options(bootstrap=10, bootstrap_unit="tile"), SPLITS[4]) is None
