"""Stratified percentile bootstrap that does not depend on the cluster (SPEC section 5).

Resampling the n reference fields of a pool (a stratum, the missing-stratum set, or
all fields without strata) with replacement is a multinomial draw of how often each
field is taken. The draw is split in two, exactly:

1. centrally, from ``SeedSequence(seed, spawn_key=(0, pool))``, how many of each
   replicate's n draws fall in each partition (multinomial over the partition sizes,
   partitions in key order): :func:`draw_partition_counts`;
2. in each partition, from ``SeedSequence(seed, spawn_key=(1, pool, epsg, partition_x,
   partition_y))``, which of its fields those draws take (uniform integers, replicate
   after replicate): :func:`draw_field_counts`.

A partition then returns, per replicate, the count-weighted sums of its quantity
rows (:func:`partition_replicate_sums`); the centre adds them and the unassigned
predictions' row, which is the same in every replicate. The same seed and the same
partition keys give the same intervals for any number of workers.

A run keys both stages by (pool, reporting tile) instead of partition (:func:`field_draws`),
so nothing depends on the partitioning: the centre needs only each group's size
(:func:`partition_groups_draws`; on a cluster one task per pool, :func:`draw_pool_counts`),
and a partition ranks its fields among the positions of the group's fields in the other
partitions holding some (:func:`partition_field_draws`).

The module stays whole at about 720 lines: the field and block draws and the replicate
sums are the two halves of the one exact split described above.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from evalcore._draw_kernels import _place_draws
from evalcore._sum_kernels import _group_members, _weighted_group_sums, _weighted_member_sums, _weighted_unit_sums
from evalcore._typing import F64Array, IdArray
from evalcore.arrays import rows_by_key
from evalcore.config import BOOTSTRAP_CONFIDENCE_LEVEL

__all__ = [
    "PartitionKey",
    "pool_id",
    "pool_ids",
    "draw_partition_counts",
    "draw_pool_counts",
    "draw_field_counts",
    "partition_replicate_sums",
    "field_weights",
    "replicate_group_sums",
    "replicate_unit_sums",
    "rows_per_block",
    "group_members",
    "small_counts",
    "whole_counts",
    "WeightBlocks",
    "ReplicateSums",
    "BOOTSTRAP_UNITS",
    "RowDraws",
    "HandedWeights",
    "RunDraws",
    "field_draws",
    "field_group_sizes",
    "partition_groups_draws",
    "partition_field_draws",
    "block_draws",
    "block_counts",
    "percentile_intervals",
    "bias_corrected_intervals",
    "point_quantile",
]

PartitionKey = tuple[int, int, int]
"""(UTM EPSG code, tile x, tile y)."""

_OFFSET = 2**31  # tile indices can be negative; spawn keys must not be

WEIGHT_CHUNK_BYTES = 16 * 2**20
"""Memory of the replicates-by-fields weights :meth:`RunDraws.ref_weights` draws at once
(and about twice as much again for the draws themselves). 64 MiB drew 1000 replicates at
1M fields in 13.7 s instead of 15.3 s but raised the client's peak at 250k by 220 MiB
(docs/performance.md)."""


def rows_per_block(n_replicates: int, chunk_bytes: int) -> int:
    """How many rows of ``n_replicates`` float64 weights each fit in ``chunk_bytes`` (at least 1)."""
    return int(max(1, chunk_bytes // (8 * max(n_replicates, 1))))


def replicates_per_chunk(n_rows: int, chunk_bytes: int) -> int:
    """How many replicates of ``n_rows`` float64 weights fit in ``chunk_bytes`` (1 to 64)."""
    return int(max(1, min(64, chunk_bytes // (8 * max(n_rows, 1)))))


def pool_id(name: str | None, stratified: bool) -> int:
    """A stable 63-bit integer naming a bootstrap pool (for seeding).

    Examples
    --------
    >>> pool_id(None, False) == pool_id(None, False)
    True
    >>> pool_id("a", True) != pool_id(None, True)
    True
    """
    label = "all" if not stratified else ("missing" if name is None else f"stratum:{name}")
    return int.from_bytes(hashlib.blake2b(label.encode("utf-8"), digest_size=8).digest(), "little") >> 1


def pool_ids(names: Iterable[str | None], stratified: bool) -> IdArray:
    """:func:`pool_id` of each of many rows' strata, each distinct name hashed once.

    Examples
    --------
    >>> pool_ids(["a", None, "a"], True).tolist() == [pool_id("a", True), pool_id(None, True), pool_id("a", True)]
    True
    """
    known: dict[tuple[type, object], int] = {}
    out = []
    for name in names:
        # By type too: 1 and 1.0 are one dict key but two labels ("stratum:1", "stratum:1.0").
        key = (type(name), name)
        pool = known.get(key)
        if pool is None:  # a new name, or a NaN (never equal to itself: hashed each time)
            pool = known[key] = pool_id(name, stratified)
        out.append(pool)
    return np.array(out, dtype=np.int64)


def _rng(seed: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=tuple(int(k) for k in key))))


def draw_partition_counts(
    pool_sizes: dict[int, dict[PartitionKey, int]], n_replicates: int, seed: int
) -> dict[tuple[int, PartitionKey], IdArray]:
    """How many of each replicate's draws of each pool fall in each partition.

    Parameters
    ----------
    pool_sizes : dict
        ``{pool: {partition_key: n_fields}}`` with ``pool`` from :func:`pool_id`.
    n_replicates : int
    seed : int

    Returns
    -------
    dict
        ``{(pool, partition_key): counts}``, counts int64 of shape (n_replicates,).
    """
    out: dict[tuple[int, PartitionKey], IdArray] = {}
    for pool in sorted(pool_sizes):
        keys, _, counts = draw_pool_counts(pool, pool_sizes[pool], n_replicates, seed)
        for j, key in enumerate(keys):
            out[(pool, key)] = counts[:, j].astype(np.int64)
    return out


def draw_pool_counts(pool: int, sizes: dict[PartitionKey, int], n_replicates: int, seed: int
                     ) -> tuple[list[PartitionKey], IdArray, IdArray]:
    """One pool's split of each replicate's draws over its partitions (or reporting tiles).

    The one multinomial :func:`draw_partition_counts` makes per pool, from
    ``SeedSequence(seed, spawn_key=(0, pool))`` over the keys in sorted order; a
    cluster run's ``group-draws`` task calls it for one pool alone, with the same bits.

    Parameters
    ----------
    pool : int
        From :func:`pool_id`.
    sizes : dict
        ``{key: n_fields}`` of the pool; keys of no field are left out.
    n_replicates, seed : int

    Returns
    -------
    keys : list of PartitionKey
        Sorted, those with fields.
    sizes : ndarray of int64, shape (n_keys,)
    counts : ndarray of int64, shape (n_replicates, n_keys)
        Each replicate's draws per key; a row adds up to ``sizes.sum()``.

    Examples
    --------
    >>> keys, n, counts = draw_pool_counts(5, {(32633, 1, 0): 3, (32633, 0, 0): 2, (32633, 2, 0): 0}, 4, 0)
    >>> keys, n.tolist(), counts.shape, counts.sum(axis=1).tolist()
    ([(32633, 0, 0), (32633, 1, 0)], [2, 3], (4, 2), [5, 5, 5, 5])
    >>> draw_pool_counts(5, {}, 4, 0)[2].shape
    (4, 0)
    """
    keys = sorted(tuple(int(v) for v in k) for k, n in sizes.items() if n > 0)
    lookup = {tuple(int(v) for v in k): int(n) for k, n in sizes.items()}
    n_fields = np.array([lookup[k] for k in keys], dtype=np.int64)
    total = int(n_fields.sum())
    if total == 0:
        return keys, n_fields, np.zeros((n_replicates, 0), dtype=np.int64)
    counts = _rng(seed, 0, pool).multinomial(total, n_fields / total, size=n_replicates)
    return keys, n_fields, counts


def draw_field_counts(m: IdArray, n_fields: int, seed: int, pool: int, key: PartitionKey) -> np.ndarray:
    """How often each of a partition's ``n_fields`` pool fields is taken in each replicate.

    Parameters
    ----------
    m : ndarray of int64, shape (n_replicates,)
        Draws of this pool that fall in this partition, per replicate.
    n_fields : int
        Fields of the pool in the partition, in input-position order.

    Returns
    -------
    ndarray of float64, shape (n_replicates, n_fields)
    """
    m = np.asarray(m, dtype=np.int64)
    out = np.zeros((len(m), n_fields))
    _add_group_draws(out, m, n_fields, seed, pool, key, np.arange(n_fields, dtype=np.int64))
    return out


def _add_group_draws(out: np.ndarray, m: IdArray, size: int, seed: int, pool: int, key: PartitionKey,
                     column_of_rank: IdArray) -> bool:
    """Add one (pool, tile) group's draws to the columns of ``out`` (n_replicates, n) that
    hold its ranks (``column_of_rank``, -1: a rank held elsewhere); whether a count kept in
    an unsigned integer type wrapped round (:func:`evalcore._draw_kernels._place_draws`).

    One generator call per chunk of replicates draws what :func:`field_count_stream`
    draws with one call per replicate (the bounded draws continue the same stream,
    RunDraws.ref_weights relies on the same; tests/unit/test_replicate_kernels.py); the
    draws go straight to their columns, without the group's replicates-by-fields matrix.
    """
    if size == 0:
        return False
    rng = _field_rng(seed, pool, key)
    chunk = replicates_per_chunk(size, WEIGHT_CHUNK_BYTES)
    first = np.zeros(1, dtype=np.int64)
    wrapped = False
    for b0 in range(0, len(m), chunk):
        counts = np.ascontiguousarray(m[b0 : b0 + chunk]).reshape(1, -1)
        total = int(counts.sum())
        if total:
            ranks = rng.integers(0, size, size=total).astype(np.int64, copy=False)
            wrapped |= _place_draws(counts, ranks, column_of_rank, first, out[b0 : b0 + counts.shape[1]])
    return wrapped


def _field_rng(seed: int, pool: int, key: PartitionKey) -> np.random.Generator:
    """The generator of the uniform draws over one (pool, reporting tile)'s fields."""
    return _rng(seed, 1, pool, key[0], key[1] + _OFFSET, key[2] + _OFFSET)


def field_count_stream(m: IdArray, n_fields: int, seed: int, pool: int, key: PartitionKey):
    """:func:`draw_field_counts` one replicate at a time (the same generator, the same order)."""
    rng = _field_rng(seed, pool, key)
    empty = np.zeros(n_fields)
    for draws in np.asarray(m).tolist():
        yield np.bincount(rng.integers(0, n_fields, size=draws), minlength=n_fields) if draws else empty


def _field_groups(pools: IdArray, tiles: IdArray):
    """The (pool, tile key, rows) of every (pool, reporting tile) group of some rows, rows in order."""
    if len(pools) == 0:
        return
    # The groups in np.unique(keys, axis=0)'s order, each group's rows in position order,
    # without its sort of rows as records (several times slower on a partition's fields).
    unique, order, starts = rows_by_key(np.column_stack([pools, tiles]))
    for g, row in enumerate(unique.tolist()):
        yield int(row[0]), (int(row[1]), int(row[2]), int(row[3])), order[starts[g] : starts[g + 1]]


@dataclass(frozen=True, slots=True)
class ReplicateSums:
    """Per-replicate quantity sums of every group of one partition (or of a merge).

    Attributes
    ----------
    groups : ndarray, shape (n_groups, n_replicates, n_columns)
        Group 0 is the overall group, then the groups of each grouping
        (:attr:`evalcore.options.RunPlan.n_groups`).
    """

    groups: F64Array

    def merge(self, other: ReplicateSums) -> ReplicateSums:
        return ReplicateSums(self.groups + other.groups)


def partition_replicate_sums(
    values: F64Array,
    pools: IdArray,
    key: PartitionKey,
    partition_draws: dict[tuple[int, PartitionKey], IdArray],
    *,
    n_replicates: int,
    seed: int,
    flat_groups: IdArray,
    n_groups: int,
) -> ReplicateSums:
    """Count-weighted quantity sums of one partition's fields, for every replicate and group.

    Parameters
    ----------
    values : ndarray, shape (n, n_columns)
        Quantity rows of the partition's reference fields, in input-position order.
    pools : ndarray of int64, shape (n,)
        Pool of each field (:func:`pool_id`).
    key : PartitionKey
    partition_draws : dict
        The output of :func:`draw_partition_counts`.
    flat_groups : ndarray of int64, shape (n, n_groupings)
        Each field's group on the flat group axis in each grouping (-1: in none).
    n_groups : int
        Length of the flat group axis (group 0: overall).
    """
    weights = field_weights(pools, key, partition_draws, n_replicates=n_replicates, seed=seed)
    return replicate_group_sums(weights, values, flat_groups, n_groups)


def field_weights(
    pools: IdArray, key: PartitionKey, partition_draws: dict[tuple[int, PartitionKey], IdArray], *, n_replicates: int, seed: int
) -> F64Array:
    """How often each of a partition's fields is drawn in each replicate, shape (n_replicates, n)."""
    weights = np.zeros((n_replicates, len(pools)))
    for pool in np.unique(pools):
        rows = np.flatnonzero(pools == pool)
        m = partition_draws.get((int(pool), key))
        if m is None:
            continue
        weights[:, rows] = draw_field_counts(m, len(rows), seed, int(pool), key)
    return weights


@dataclass(frozen=True)
class WeightBlocks:
    """How often each of some rows is drawn in every replicate, made a block of rows at a time.

    The replicates-by-rows matrix of the rows of a whole run (the homeless predictions of
    a country: 1000 replicates x 300,000 rows is 2.4 GB) is never held: the sums take
    it a block of rows at a time (:func:`replicate_group_sums`), and each replicate's cell
    still receives the rows in position order, the same additions as from the whole matrix.

    Attributes
    ----------
    n_replicates, n_rows : int
    make : callable
        ``make(start, stop)``: the weights of rows ``start:stop``, float64 of shape
        ``(n_replicates, stop - start)``.
    chunk_bytes : int
        About how many bytes of weights a block holds (at least one row).
    """

    n_replicates: int
    n_rows: int
    make: Callable[[int, int], F64Array]
    chunk_bytes: int = WEIGHT_CHUNK_BYTES

    @classmethod
    def ones(cls, n_replicates: int, n_rows: int, chunk_bytes: int = WEIGHT_CHUNK_BYTES) -> WeightBlocks:
        """Every row once in every replicate (the homeless predictions of a field bootstrap)."""
        return cls(n_replicates, n_rows, lambda start, stop: np.ones((n_replicates, stop - start)), chunk_bytes)

    @classmethod
    def of_units(cls, counts: F64Array, units: IdArray, chunk_bytes: int = WEIGHT_CHUNK_BYTES) -> WeightBlocks:
        """Rows weighed by their unit's draws (``counts``: replicates x units; a unit of -1: weight 0)."""
        units = np.asarray(units, dtype=np.int64)

        def make(start: int, stop: int) -> F64Array:
            out = np.zeros((counts.shape[0], stop - start))
            inside = units[start:stop] >= 0
            out[:, inside] = counts[:, units[start:stop][inside]]
            return out

        return cls(counts.shape[0], len(units), make, chunk_bytes)

    def blocks(self) -> Iterator[tuple[int, int, F64Array]]:
        """``(start, stop, weights)`` of consecutive blocks of about ``chunk_bytes`` of weights."""
        step = rows_per_block(self.n_replicates, self.chunk_bytes)
        for start in range(0, self.n_rows, step):
            stop = min(self.n_rows, start + step)
            yield start, stop, self.make(start, stop)


def _weight_blocks(weights: F64Array | WeightBlocks, n_rows: int) -> tuple[int, Iterable[tuple[int, int, F64Array]]]:
    """``(n_replicates, blocks)`` of a replicates-by-rows matrix or :class:`WeightBlocks`:
    ``(start, stop, weights of those rows)``, the matrix as one block."""
    if isinstance(weights, WeightBlocks):
        if weights.n_rows != n_rows:
            raise ValueError(f"{weights.n_rows} rows of weights for {n_rows} rows of values")
        return weights.n_replicates, weights.blocks()
    return weights.shape[0], [(0, n_rows, weights)]


def group_members(flat_groups: IdArray, n_groups: int) -> tuple[IdArray, IdArray]:
    """Each group's rows in position order: every row in group 0, then the rows of each group
    of the flat group axis.

    Parameters
    ----------
    flat_groups : ndarray of int64, shape (n, n_groupings)
        Each row's group in each grouping, ``1 .. n_groups - 1`` (-1: none).
    n_groups : int

    Returns
    -------
    members, bounds : ndarray of int64
        Group ``k``'s rows are ``members[bounds[k]:bounds[k + 1]]``.

    Examples
    --------
    >>> members, bounds = group_members(np.array([[2], [-1], [2], [1]]), 3)
    >>> members.tolist(), bounds.tolist()
    ([0, 1, 2, 3, 3, 0, 2], [0, 4, 5, 7])
    """
    groups = np.ascontiguousarray(flat_groups, dtype=np.int64)
    _check_flat_groups(groups, n_groups)
    return _group_members(groups, n_groups)


def small_counts(weights: np.ndarray) -> np.ndarray | None:
    """Draw counts in the smallest unsigned integer type that holds them (uint8, uint16 or
    uint32), C-contiguous; None when a weight is not a whole number from 0 to 2**32 - 1
    (negative, fractional, NaN or too large).

    A replicate's weights of 250,000 predictions and 1000 replicates take 250 MB as uint8,
    2 GB as float64; the replicate kernels read counts of any type with the same bits.

    Examples
    --------
    >>> small_counts(np.array([[0.0, 3.0, 255.0]])).dtype, small_counts(np.array([[300.0]])).dtype
    (dtype('uint8'), dtype('uint16'))
    >>> small_counts(np.array([[0.5]])) is None
    True
    """
    top = float(np.max(weights, initial=0))
    if not top <= np.iinfo(np.uint32).max:  # NaN included
        return None
    dtype = np.uint8 if top <= np.iinfo(np.uint8).max else np.uint16 if top <= np.iinfo(np.uint16).max else np.uint32
    with np.errstate(invalid="ignore"):
        counts = np.ascontiguousarray(weights, dtype=dtype)
    # A negative or fractional weight (or a NaN) does not come back from the cast unchanged.
    return counts if np.array_equal(counts, weights) else None


def whole_counts(weights: np.ndarray, what: str) -> np.ndarray:
    """:func:`small_counts` of draw counts, which are always small whole numbers: anything
    else is refused, naming ``what``."""
    counts = small_counts(weights)
    if counts is None:
        raise ValueError(f"{what}: replicate weights are not small whole numbers (largest {float(np.max(weights, initial=0))})")
    return counts


def _check_flat_groups(groups: IdArray, n_groups: int) -> None:
    """The kernels index their output by these numbers, unchecked: one out of range is refused here."""
    if groups.size and not (groups.max() < n_groups and groups.min() >= -1):
        raise ValueError(f"flat groups must be -1 .. {n_groups - 1}, got {groups.min()} .. {groups.max()}")


MEMBER_BLOCK = 128
"""Fields of a group per pass through the replicates when each field's counts are contiguous
(:func:`evalcore._sum_kernels._weighted_member_sums`)."""


def _by_row(weights: np.ndarray) -> bool:
    """Whether replicates-by-rows weights are kept rows by replicates in memory (each row's
    counts contiguous, :meth:`RowDraws.draw_counts`): the kernels then go row by row."""
    return weights.strides[0] < weights.strides[1]


def _member_block(weights: np.ndarray) -> int:
    """A group's fields per pass: :data:`MEMBER_BLOCK` for weights kept rows by replicates,
    all of them for a replicates-by-rows matrix (there the blocks were slower)."""
    return MEMBER_BLOCK if _by_row(weights) else max(1, weights.shape[1])


def replicate_group_sums(weights: F64Array | WeightBlocks, values: F64Array, flat_groups: IdArray, n_groups: int) -> ReplicateSums:
    """Count-weighted sums of quantity rows per replicate and group (:func:`field_weights`).

    ``weights`` is the replicates-by-rows matrix (float64, or draw counts in an unsigned
    integer type, :meth:`RowDraws.draw_counts`, in either memory layout), or
    :class:`WeightBlocks` making it a block of rows at a time (the same bits: every cell
    adds its rows in order either way).
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    groups = np.ascontiguousarray(np.asarray(flat_groups, dtype=np.int64).reshape(len(values), np.shape(flat_groups)[-1] if np.ndim(flat_groups) == 2 else -1))
    _check_flat_groups(groups, n_groups)
    n_replicates, blocks = _weight_blocks(weights, len(values))
    out = np.zeros((n_groups, n_replicates, values.shape[1]))
    # A NaN or infinite value needs the kernel that skips a weight of 0 (0 x inf is NaN).
    finite = bool(np.isfinite(values).all())
    # Fixed-order loops, not BLAS: the bits must not depend on memory alignment.
    for start, stop, block in blocks:
        if finite:
            members, bounds = _group_members(groups[start:stop], n_groups)
            _weighted_member_sums(block, values[start:stop], members, bounds, out, _member_block(block))
        else:
            _weighted_group_sums(block, values[start:stop], groups[start:stop], out)
    return ReplicateSums(out)


def replicate_unit_sums(weights: F64Array | WeightBlocks, values: F64Array, units: IdArray, n_units: int) -> F64Array:
    """Count-weighted sums of some rows per replicate and unit (reporting tile or AOI).

    The same bits as :func:`replicate_group_sums` with the units as the groups of one
    grouping, without its overall group (every row), which the units do not use.

    Parameters
    ----------
    weights : ndarray of float64 or of unsigned int counts, shape (n_replicates, n), or WeightBlocks
    values : ndarray of float64, shape (n, n_columns)
    units : ndarray of int64, shape (n,)
        Each row's unit, ``0 .. n_units - 1`` (-1: none).
    n_units : int

    Returns
    -------
    ndarray of float64, shape (n_units, n_replicates, n_columns)
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    units = np.asarray(units, dtype=np.int64)
    if not np.isfinite(values).all():
        # A weight of 0 must leave out a NaN or infinite value: the kernel that skips it.
        return replicate_group_sums(weights, values, (units + 1)[:, None], n_units + 1).groups[1:]
    cells = np.where(units >= 0, units, n_units)  # rows of no unit add into a spare last cell
    n_replicates, blocks = _weight_blocks(weights, len(values))
    out = np.zeros((n_units + 1, n_replicates, values.shape[1]))
    for start, stop, block in blocks:
        _weighted_unit_sums(block, values[start:stop], cells[start:stop], out, _by_row(block))
    return out[:n_units]


BOOTSTRAP_UNITS: tuple[str, ...] = ("field", "tile", "aoi")
"""What a bootstrap resample draws: reference fields (SPEC 5), or reporting tiles or AOIs (SPEC 6.6)."""

_BLOCK_STREAM = {"tile": 1, "aoi": 2}  # spawn keys of the block draws, apart from the field draws (0, 1)


def block_counts(n_units: int, n_replicates: int, seed: int, unit: str) -> np.ndarray:
    """How often each of ``n_units`` units (in sorted key order) is drawn in each replicate.

    Each replicate draws ``n_units`` units uniformly with replacement, from
    ``SeedSequence(seed, spawn_key=(2, stream))``: it depends on the seed and the number of
    units only, never on workers or partitions.

    Returns
    -------
    ndarray of float64, shape (n_replicates, n_units)
    """
    rng = _rng(seed, 2, _BLOCK_STREAM[unit])
    out = np.zeros((n_replicates, n_units))
    for b in range(n_replicates):
        out[b] = np.bincount(rng.integers(0, n_units, size=n_units), minlength=n_units)
    return out


@dataclass(frozen=True)
class HandedWeights:
    """Some rows' draw counts as another task made them (:meth:`RowDraws.draw_counts`), in a
    small unsigned integer type; used where the draws would be made again.

    Attributes
    ----------
    counts : ndarray of unsigned int, shape (n_replicates, n)
    """

    counts: np.ndarray

    def weights_rows(self) -> IdArray:
        """One entry per row, as :meth:`RowDraws.weights_rows`."""
        return np.arange(self.counts.shape[1], dtype=np.int64)

    def draw_counts(self) -> np.ndarray:
        """:meth:`RowDraws.draw_counts` of the rows (as they were handed)."""
        return self.counts


@dataclass(frozen=True)
class RowDraws:
    """How some reference rows are weighed in every replicate; small, shipped to a partition.

    Field draws: each row's pool, reporting tile and rank among the pool's fields of
    that tile (position order), with the size and the per-replicate draw counts of each
    (pool, tile) group it touches. Block draws: each row's unit and the draw counts of
    those units.

    Attributes
    ----------
    unit : str
    n_replicates, seed : int
    pools, ranks : ndarray of int64, shape (n,)
        Field draws only.
    tiles : ndarray of int64, shape (n, 3)
        Field draws only.
    groups : dict
        Field draws: ``{(pool, tile key): (size, counts)}``.
    units : ndarray of int64, shape (n,)
        Block draws: the row's index among the run's units.
    unit_counts : dict
        Block draws: ``{unit index: counts (n_replicates,)}``.
    """

    unit: str
    n_replicates: int
    seed: int
    pools: IdArray | None = None
    ranks: IdArray | None = None
    tiles: IdArray | None = None
    groups: dict | None = None
    units: IdArray | None = None
    unit_counts: dict | None = None

    def weights_rows(self) -> IdArray:
        """One entry per row (to check the draws belong to the rows they are used for)."""
        return self.units if self.unit != "field" else self.pools

    def weights(self) -> F64Array:
        """How often each row is drawn in each replicate, shape (n_replicates, n)."""
        if self.unit != "field":
            n = len(self.units)
            out = np.zeros((self.n_replicates, n))
            for u in np.unique(self.units):
                out[:, self.units == u] = self.unit_counts[int(u)][:, None]
            return out
        return self._field_counts(np.zeros((self.n_replicates, len(self.pools))))

    def draw_counts(self) -> np.ndarray:
        """:meth:`weights` as small unsigned integers, rows by replicates in memory.

        The same whole numbers, read with the same bits by the replicate kernels (a count
        times a value is the same float64 product whatever the count's type). Field draws
        are placed straight into bytes, each row's replicates side by side: the array is
        an eighth of the float64 matrix, and a row's counts are one contiguous run, which
        the bootstrap's sums read a block of rows at a time
        (:func:`evalcore._sum_kernels._weighted_member_sums`) and the score ranges gather
        row by row. A count past 255 (a field drawn that often in one replicate) takes the
        smallest wider type (:func:`small_counts`).

        Returns
        -------
        ndarray of uint8 (or uint16, uint32), shape (n_replicates, n)
            A transposed view of a C-contiguous (n, n_replicates) array for field draws.
        """
        if self.unit != "field":
            return whole_counts(self.weights(), "bootstrap draw counts")
        rows_by_replicate = np.zeros((len(self.pools), self.n_replicates), dtype=np.uint8)
        try:
            return self._field_counts(rows_by_replicate.T)
        except OverflowError:
            return whole_counts(self.weights(), "bootstrap draw counts")

    def _field_counts(self, out: np.ndarray) -> np.ndarray:
        """Place the field draws of every (pool, tile) group of the rows on ``out``
        (n_replicates, n), zeroed; OverflowError when a count of an integer ``out`` wrapped."""
        for pool, tile, mine in _field_groups(self.pools, self.tiles):
            size, counts = self.groups[(pool, tile)]
            # The whole group's draws, regenerated here: the same wherever its fields are.
            column_of_rank = np.full(size, -1, dtype=np.int64)
            column_of_rank[self.ranks[mine]] = mine
            if _add_group_draws(out, np.asarray(counts, dtype=np.int64), size, self.seed, pool, tile, column_of_rank):
                raise OverflowError(f"a count of pool {pool}, tile {tile} does not fit {out.dtype}")
        return out


@dataclass(frozen=True)
class RunDraws:
    """Every bootstrap draw of a run, made centrally from the seed and fixed keys (SPEC 5, 6.6).

    Field draws: per pool, a multinomial over the pool's reporting tiles (tile keys in
    order) of how many of each replicate's draws fall in each tile
    (:func:`draw_partition_counts` with tile keys), then, per (pool, tile), uniform draws
    over its fields in position order (:func:`draw_field_counts`). Nothing depends on
    how the work is partitioned. Block draws: units drawn with replacement
    (:func:`block_counts`).

    Attributes
    ----------
    unit : str
    n_replicates, seed : int
    n_units : int
        Reference fields (field draws) or units (block draws).
    ref_pools, ref_tiles, ref_ranks : ndarray
        Per reference row of the run (field draws).
    groups : dict
        ``{(pool, tile key): (size, counts)}`` (field draws).
    ref_units : ndarray of int64
        Per reference row, its unit's index (block draws).
    unit_keys : ndarray of int64, shape (n_units, width)
        The units, sorted (block draws).
    counts : ndarray of float64, shape (n_replicates, n_units)
        Block draws.
    """

    unit: str
    n_replicates: int
    seed: int
    n_units: int
    ref_pools: IdArray | None = None
    ref_tiles: IdArray | None = None
    ref_ranks: IdArray | None = None
    groups: dict | None = None
    ref_units: IdArray | None = None
    unit_keys: IdArray | None = None
    counts: F64Array | None = None

    def rows(self, rows: IdArray) -> RowDraws:
        """The draws of some reference rows (a partition's), with what they need and no more."""
        if self.unit != "field":
            units = self.ref_units[rows]
            return RowDraws(self.unit, self.n_replicates, self.seed, units=units,
                            unit_counts={int(u): self.counts[:, u] for u in np.unique(units)})
        pools, tiles = self.ref_pools[rows], self.ref_tiles[rows]
        needed = [(pool, tile) for pool, tile, _ in _field_groups(pools, tiles)]
        return RowDraws(self.unit, self.n_replicates, self.seed, pools=pools, ranks=self.ref_ranks[rows], tiles=tiles,
                        groups={k: self.groups[k] for k in needed})

    def ref_weights(self, chunk_bytes: int = WEIGHT_CHUNK_BYTES):
        """Every reference row's weight, one replicate at a time (without the replicates-by-fields matrix).

        Field draws are made for a chunk of replicates at once (about ``chunk_bytes`` of
        weights): one call of each (pool, tile)'s generator per chunk draws what its
        replicates draw one call each (numpy's bounded integers continue the same stream
        across calls; ``tests/unit/test_bootstrap.py`` checks the equality with
        :func:`field_count_stream`), which takes the Python overhead per group and
        replicate out of the resolve phase.
        """
        if self.unit != "field":
            for b in range(self.n_replicates):
                yield self.counts[b, self.ref_units]
            return
        n = len(self.ref_pools)
        chunk = replicates_per_chunk(n, chunk_bytes)
        rngs, sizes, counts, rank_rows = [], [], [], []
        for pool, tile, members in _field_groups(self.ref_pools, self.ref_tiles):
            size, group_counts = self.groups[(pool, tile)]
            row_of_rank = np.empty(size, dtype=np.int64)
            row_of_rank[self.ref_ranks[members]] = members  # a draw picks a rank: the row that has it
            rank_rows.append(row_of_rank)
            sizes.append(int(size))
            counts.append(np.asarray(group_counts, np.int64))
            rngs.append(_field_rng(self.seed, pool, tile))
        if not rngs:
            for _ in range(self.n_replicates):
                yield np.zeros(n)
            return
        n_groups = len(rngs)
        counts_by_group = np.stack(counts)  # (groups, replicates)
        row_of_rank = np.concatenate(rank_rows)  # group by group
        first_rank = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        for b0 in range(0, self.n_replicates, chunk):
            c = min(chunk, self.n_replicates - b0)
            m = np.ascontiguousarray(counts_by_group[:, b0 : b0 + c])  # (groups, c)
            totals = m.sum(axis=1)
            # Only the generator calls stay in Python (one per group and chunk, none for a
            # group this chunk does not draw from, as one call per replicate skipped it);
            # where each draw lands is worked out for the whole chunk at once.
            drawn = [rngs[g].integers(0, sizes[g], size=t) for g, t in enumerate(totals.tolist()) if t]
            ranks = np.concatenate(drawn).astype(np.int64, copy=False) if drawn else np.empty(0, np.int64)
            # Counts are whole numbers: exact in float64 however they are added.
            hits = np.zeros((c, n))
            _place_draws(m, ranks, row_of_rank, first_rank, hits)
            yield from hits


def field_draws(ref_pos: IdArray, ref_pools: IdArray, ref_tiles: IdArray, n_replicates: int, seed: int) -> RunDraws:
    """The field bootstrap's draws of a run, keyed by pool and reporting tile (SPEC 5).

    Parameters
    ----------
    ref_pos : ndarray of int64, shape (n,)
        Every reference field's position, increasing.
    ref_pools : ndarray of int64, shape (n,)
    ref_tiles : ndarray of int64, shape (n, 3)
        Each field's reporting tile (EPSG, tile x, tile y).
    """
    n = len(ref_pos)
    ranks = np.zeros(n, dtype=np.int64)
    sizes: dict = {}
    if n:
        keys = np.column_stack([ref_pools, ref_tiles])
        order = np.lexsort((ref_pos, ref_tiles[:, 2], ref_tiles[:, 1], ref_tiles[:, 0], ref_pools))
        k = keys[order]
        new = np.ones(n, dtype=bool)
        new[1:] = np.any(k[1:] != k[:-1], axis=1)
        starts = np.flatnonzero(new)
        group = np.cumsum(new) - 1
        ranks[order] = np.arange(n) - starts[group]
        ends = np.append(starts[1:], n)
        for s0, e0 in zip(starts.tolist(), ends.tolist()):
            pool, tile = int(k[s0, 0]), (int(k[s0, 1]), int(k[s0, 2]), int(k[s0, 3]))
            sizes[(pool, tile)] = e0 - s0
    groups = partition_groups_draws(sizes, n_replicates, seed)
    return RunDraws("field", n_replicates, seed, n, ref_pools=np.asarray(ref_pools, np.int64),
                    ref_tiles=np.asarray(ref_tiles, np.int64).reshape(n, 3), ref_ranks=ranks, groups=groups)


def field_group_sizes(pools: IdArray, tiles: IdArray) -> dict[tuple[int, PartitionKey], int]:
    """How many of some reference rows each (pool, reporting tile) group holds.

    Parameters
    ----------
    pools : ndarray of int64, shape (n,)
    tiles : ndarray of int64, shape (n, 3)
        Each row's reporting tile (EPSG, tile x, tile y).

    Returns
    -------
    dict
        ``{(pool, tile key): n_rows}`` of the groups present.
    """
    return {(pool, tile): len(rows) for pool, tile, rows in _field_groups(np.asarray(pools, np.int64),
                                                                          np.asarray(tiles, np.int64).reshape(-1, 3))}


def partition_groups_draws(sizes: dict[tuple[int, PartitionKey], int], n_replicates: int, seed: int) -> dict:
    """The field bootstrap's central draws from the (pool, reporting tile) groups' sizes alone.

    The same multinomial split of each pool's draws over its tiles as :func:`field_draws`
    makes (:func:`draw_partition_counts` with tile keys): the sizes may be added up from
    any partitioning of the run, the counts do not depend on it.

    Parameters
    ----------
    sizes : dict
        ``{(pool, tile key): n_fields}`` of every group of the run.
    n_replicates, seed : int

    Returns
    -------
    dict
        ``{(pool, tile key): (size, counts)}``, counts int64 of shape (n_replicates,):
        what :attr:`RowDraws.groups` holds.
    """
    pool_sizes: dict[int, dict[PartitionKey, int]] = {}
    for (pool, tile), n in sizes.items():
        pool_sizes.setdefault(int(pool), {})[tuple(int(v) for v in tile)] = int(n)
    counts = draw_partition_counts(pool_sizes, n_replicates, seed)
    return {key: (int(n), counts[key]) for key, n in sizes.items() if n > 0}


def partition_field_draws(
    ref_pos: IdArray,
    ref_pools: IdArray,
    ref_tiles: IdArray,
    groups: dict,
    others: list[tuple[IdArray, IdArray, IdArray]],
    n_replicates: int,
    seed: int,
) -> RowDraws:
    """The field draws of one partition's reference fields, made where the fields are.

    A field's rank in its (pool, reporting tile) group counts the group's fields at a
    smaller position, in this partition and in the others holding fields of the group
    (``others``); with the group's counts (:func:`partition_groups_draws`) and its own
    generator, every partition holding the group regenerates the same draws, so the
    weights equal those of :meth:`RunDraws.rows` for the same fields to the bit.

    Parameters
    ----------
    ref_pos : ndarray of int64, shape (n,)
        The partition's reference fields' positions.
    ref_pools : ndarray of int64, shape (n,)
    ref_tiles : ndarray of int64, shape (n, 3)
    groups : dict
        ``{(pool, tile key): (size, counts)}`` of (at least) the groups of these fields.
    others : list of (positions, pools, tiles)
        Reference fields of other partitions (any groups: those of no group here are
        ignored); no field may be listed twice.
    n_replicates, seed : int

    Returns
    -------
    RowDraws
        Rows in the order given.

    Raises
    ------
    ValueError
        When a group's fields found here and in ``others`` are not the group's size
        (a partition's positions are missing or stale).
    """
    n = len(ref_pos)
    pools = np.asarray(ref_pools, np.int64)
    tiles = np.asarray(ref_tiles, np.int64).reshape(n, 3)
    pos = [np.asarray(ref_pos, np.int64)] + [np.asarray(o[0], np.int64) for o in others]
    keys = np.concatenate([np.column_stack([pools, tiles])] + [np.column_stack([np.asarray(o[1], np.int64),
                                                                                np.asarray(o[2], np.int64).reshape(-1, 3)])
                                                               for o in others]).reshape(-1, 4)
    pos = np.concatenate(pos)
    ranks = np.zeros(n, dtype=np.int64)
    if n:
        # Group ids over this partition's groups; other partitions' fields of other groups drop out.
        own_keys = np.unique(keys[:n], axis=0)
        both, inverse = np.unique(np.concatenate([own_keys, keys]), axis=0, return_inverse=True)
        inverse = np.asarray(inverse).ravel()
        group_of_unique = np.full(len(both), -1, dtype=np.int64)
        group_of_unique[inverse[: len(own_keys)]] = np.arange(len(own_keys))
        group = group_of_unique[inverse[len(own_keys):]]
        mine = np.flatnonzero(group >= 0)
        # Rank inside the group by position, as field_draws ranks them over the whole run.
        order = mine[np.lexsort((pos[mine], group[mine]))]
        g = group[order]
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        found = np.diff(np.r_[starts, len(order)])
        rank_sorted = np.arange(len(order)) - np.repeat(starts, found)
        own = order < n
        ranks[order[own]] = rank_sorted[own]
        for k, row in enumerate(own_keys.tolist()):
            key = (int(row[0]), (int(row[1]), int(row[2]), int(row[3])))
            size = int(groups[key][0]) if key in groups else -1
            if size != int(found[k]):
                raise ValueError(f"pool {key[0]}, reporting tile {key[1]}: {int(found[k])} fields found but the run has {size}")
    needed = {(pool, tile): groups[(pool, tile)] for pool, tile, _ in _field_groups(pools, tiles)}
    return RowDraws("field", n_replicates, seed, pools=pools, ranks=ranks, tiles=tiles, groups=needed)


def block_draws(unit: str, unit_keys: IdArray, ref_units: IdArray, n_replicates: int, seed: int) -> RunDraws:
    """The block bootstrap's draws: ``unit_keys`` (sorted, unique) drawn with replacement (SPEC 6.6)."""
    counts = block_counts(len(unit_keys), n_replicates, seed, unit)
    return RunDraws(unit, n_replicates, seed, len(unit_keys), ref_units=np.asarray(ref_units, np.int64),
                    unit_keys=unit_keys, counts=counts)


def percentile_intervals(
    values: dict[str, tuple[F64Array, F64Array]], confidence_level: float = BOOTSTRAP_CONFIDENCE_LEVEL
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Percentile intervals over the replicates in which each metric is defined.

    Parameters
    ----------
    values : dict of str to (value, defined)
        Replicate values of each metric, from :func:`evalcore.metrics.registry.finalize_all`.

    Returns
    -------
    ci : dict of str to [lower, upper]
        NaN bounds when no replicate defines the metric. Quantiles use numpy's
        default (linear) interpolation.
    n_undefined : dict of str to int
    """
    alpha = (1.0 - confidence_level) / 2.0
    ci: dict[str, list[float]] = {}
    n_undefined: dict[str, int] = {}
    for key, (v, defined) in values.items():
        ok = np.asarray(defined, dtype=bool) & ~np.isnan(v)
        n_undefined[key] = int(len(ok) - ok.sum())
        if ok.any():
            lo, hi = np.quantile(np.asarray(v)[ok], [alpha, 1.0 - alpha])
            ci[key] = [float(lo), float(hi)]
        else:
            ci[key] = [float("nan"), float("nan")]
    return ci, n_undefined


def point_quantile(replicates: F64Array, point: float) -> float:
    """Where the point estimate lies in its bootstrap distribution: the mid-rank share of replicates below it.

    ``(#{replicate < point} + #{replicate == point} / 2) / n`` over the finite replicates
    (NaN when there are none, or the point is undefined). Ties count half: a step
    function such as AP on its 101-point recall grid puts many replicates exactly on the
    point. 0.5 means the distribution is centred on the point; near 0 or 1, the
    percentile interval lies almost wholly on one side of it.
    """
    v = np.asarray(replicates, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0 or not np.isfinite(point):
        return float("nan")
    return float((np.count_nonzero(v < point) + 0.5 * np.count_nonzero(v == point)) / len(v))


def bias_corrected_intervals(
    values: dict[str, tuple[F64Array, F64Array]], points: dict[str, float], confidence_level: float = BOOTSTRAP_CONFIDENCE_LEVEL
) -> tuple[dict[str, list[float]], dict[str, int], dict[str, float]]:
    """Bias-corrected (BC) percentile intervals: Efron's BCa with the acceleration set to 0.

    With ``q`` the point's mid-rank share among the replicates (:func:`point_quantile`),
    ``z0 = Φ⁻¹(q)`` and ``z = Φ⁻¹(1 − α/2)``, the interval is the replicates' quantiles
    at ``Φ(2 z0 − z)`` and ``Φ(2 z0 + z)`` (numpy's linear interpolation, as
    :func:`percentile_intervals`). When the distribution is centred on the point
    (``q = 0.5``) this is the percentile interval; when the point sits low in its own
    distribution, as AP's does (a step function of the 101-point recall grid whose
    resamples mostly land on the steps above), both ends move down by the same shift in
    z. ``q`` is held within ``[1/(2n), 1 − 1/(2n)]`` so that ``z0`` stays finite.

    The acceleration of the full BCa would need a jackknife, one AP per left-out unit
    (10⁵ fields: 10⁵ AP computations); the median bias is what makes AP's interval
    lopsided, and this corrects it.

    Parameters
    ----------
    values : dict of str to (value, defined)
        Replicate values of each metric, as :func:`percentile_intervals` takes them.
    points : dict of str to float
        Each metric's point estimate on the data (NaN when undefined).

    Returns
    -------
    ci : dict of str to [lower, upper]
        NaN bounds when no replicate defines the metric or the point is undefined.
    n_undefined : dict of str to int
    quantile : dict of str to float
        :func:`point_quantile` of each metric (before the clamping).
    """
    from statistics import NormalDist

    normal = NormalDist()
    z = normal.inv_cdf(1.0 - (1.0 - confidence_level) / 2.0)
    ci: dict[str, list[float]] = {}
    n_undefined: dict[str, int] = {}
    quantile: dict[str, float] = {}
    for key, (v, defined) in values.items():
        ok = np.asarray(defined, dtype=bool) & ~np.isnan(v)
        n_undefined[key] = int(len(ok) - ok.sum())
        reps = np.asarray(v, dtype=np.float64)[ok]
        point = float(points.get(key, np.nan)) if points.get(key) is not None else float("nan")
        quantile[key] = point_quantile(reps, point)
        if len(reps) == 0 or not np.isfinite(quantile[key]):
            ci[key] = [float("nan"), float("nan")]
            continue
        half = 0.5 / len(reps)
        z0 = normal.inv_cdf(min(max(quantile[key], half), 1.0 - half))
        levels = [normal.cdf(2.0 * z0 - z), normal.cdf(2.0 * z0 + z)]
        lo, hi = np.quantile(reps, levels)
        ci[key] = [float(lo), float(hi)]
    return ci, n_undefined, quantile
