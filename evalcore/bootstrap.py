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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from evalcore._sum_kernels import _weighted_group_sums
from evalcore._typing import F64Array, IdArray
from evalcore.config import BOOTSTRAP_CONFIDENCE_LEVEL

__all__ = [
    "PartitionKey",
    "pool_id",
    "draw_partition_counts",
    "draw_field_counts",
    "partition_replicate_sums",
    "field_weights",
    "replicate_group_sums",
    "ReplicateSums",
    "CentralDraws",
    "percentile_intervals",
]

PartitionKey = tuple[int, int, int]
"""(UTM EPSG code, tile x, tile y)."""

_OFFSET = 2**31  # tile indices can be negative; spawn keys must not be


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
        keys = sorted(k for k, n in pool_sizes[pool].items() if n > 0)
        sizes = np.array([pool_sizes[pool][k] for k in keys], dtype=np.int64)
        total = int(sizes.sum())
        if total == 0:
            continue
        counts = _rng(seed, 0, pool).multinomial(total, sizes / total, size=n_replicates)
        for j, key in enumerate(keys):
            out[(pool, key)] = counts[:, j].astype(np.int64)
    return out


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
    rng = _rng(seed, 1, pool, key[0], key[1] + _OFFSET, key[2] + _OFFSET)
    out = np.zeros((len(m), n_fields))
    for b, draws in enumerate(np.asarray(m).tolist()):
        if draws:
            out[b] = np.bincount(rng.integers(0, n_fields, size=draws), minlength=n_fields)
    return out


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


def replicate_group_sums(weights: F64Array, values: F64Array, flat_groups: IdArray, n_groups: int) -> ReplicateSums:
    """Count-weighted sums of quantity rows per replicate and group (:func:`field_weights`)."""
    out = np.zeros((n_groups, weights.shape[0], values.shape[1]))
    # Fixed-order loops, not BLAS: the bits must not depend on memory alignment.
    _weighted_group_sums(
        weights,
        np.ascontiguousarray(values, dtype=np.float64),
        np.ascontiguousarray(flat_groups, dtype=np.int64).reshape(len(values), -1),
        out,
    )
    return ReplicateSums(out)


@dataclass(frozen=True)
class CentralDraws:
    """The field draws of every partition, regenerated centrally one replicate at a time.

    Gives, replicate after replicate, how often every reference field of the run is drawn:
    exactly the weights :func:`field_weights` draws in each partition (same generators,
    same order), without holding the (replicates x fields) matrix. For the values that
    are not sums (AP), which need every prediction of a replicate at once.

    Attributes
    ----------
    partition_draws : dict
        :func:`draw_partition_counts`'s output.
    keys : list of PartitionKey
        Partition of each code in ``ref_part``.
    ref_part : ndarray of int64
        Partition code of every reference row (rows in position order).
    ref_pools : ndarray of int64
        Pool of every reference row.
    n_replicates, seed : int
    """

    partition_draws: dict
    keys: list
    ref_part: IdArray
    ref_pools: IdArray
    n_replicates: int
    seed: int

    def __call__(self):
        n = len(self.ref_part)
        order = np.argsort(self.ref_part, kind="stable")
        bounds = np.searchsorted(self.ref_part[order], np.arange(len(self.keys) + 1))
        streams = []
        for k, key in enumerate(self.keys):
            rows_k = order[bounds[k] : bounds[k + 1]]
            pools_k = self.ref_pools[rows_k]
            for pool in np.unique(pools_k):
                m = self.partition_draws.get((int(pool), key))
                if m is None:
                    continue
                rows = rows_k[pools_k == pool]
                rng = _rng(self.seed, 1, int(pool), key[0], key[1] + _OFFSET, key[2] + _OFFSET)
                streams.append((rows, rng, np.asarray(m)))
        for b in range(self.n_replicates):
            weights = np.zeros(n)
            for rows, rng, m in streams:
                if m[b]:
                    weights[rows] = np.bincount(rng.integers(0, len(rows), size=int(m[b])), minlength=len(rows))
            yield weights


def percentile_intervals(
    values: dict[str, tuple[F64Array, F64Array]], confidence_level: float = BOOTSTRAP_CONFIDENCE_LEVEL
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Percentile intervals over the replicates in which each metric is defined.

    Parameters
    ----------
    values : dict of str to (value, defined)
        Replicate values of each metric, from :func:`evalcore.metrics.finalize_all`.

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
