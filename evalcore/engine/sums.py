"""Phase 4 of an evaluation, the sums: one partition's sums and their merge by addition.

:func:`summarize_partition` turns the pairs and contributions routed to one partition
(:func:`evalcore.engine.resolve.route`) into its per-field columns and a small
:class:`PartitionSummary` (group sums, bootstrap replicates, tile and AOI sums, and its gathered per-field values
sorted per group for the order statistics); :func:`merge_partitions` adds the
partitions' summaries in partition-key order, with the predictions without a home,
into :class:`MergedSums`, and selects the medians and quantiles from the partitions'
sorted values (:func:`evalcore.selection.select`) without concatenating them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from evalcore._typing import F64Array, IdArray
from evalcore.arrays import index_of
from evalcore.bootstrap import PartitionKey, ReplicateSums, RowDraws, replicate_group_sums
from evalcore.engine.pairing import PairResults
from evalcore.layer import PreparedLayer
from evalcore.levels import UNASSIGNED_COLUMN, BlockedReplicates, UnitSums, UnitSumsAdder, unit_rows, unit_sums
from evalcore.matching import Resolution
from evalcore.metrics.base import RefContext
from evalcore.metrics.registry import (
    enabled_families, max_columns, order_statistics, quantity_columns, replicate_columns, unit_columns,
    unit_replicate_columns,
)
from evalcore.metrics.taxonomy import reference_codes, reference_flags
from evalcore.options import EvalOptions, RunPlan
from evalcore.quantities import Contributions, quantity_table, reference_fields
from evalcore.selection import SortedValues, Statistic, select_local
from evalcore.stats import GroupSums, group_sums

__all__ = [
    "RefRows",
    "PartitionSummary",
    "summarize_partition",
    "MergedSums",
    "merge_partitions",
    "unit_sum_columns",
    "wanted_series",
    "order_by_group",
]


def unit_sum_columns(options: EvalOptions) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The sums reporting tiles and AOIs carry (the families' unit columns and the homeless
    count), and those their bootstrap replicates carry."""
    return unit_columns(options) + (UNASSIGNED_COLUMN,), unit_replicate_columns(options)


@dataclass(frozen=True, slots=True)
class RefRows:
    """The reference fields of one partition, in position order.

    Attributes
    ----------
    positions : ndarray of int64
    area_m2, perimeter_m : ndarray of float64
    utm_epsg : ndarray of int64
    strata_codes, size_codes : ndarray of int64
        Group codes (-1: none).
    pools : ndarray of int64
        Bootstrap pool of each field.
    tile_x, tile_y, aoi : ndarray of int64
        Reporting tile (in zone ``utm_epsg``) and AOI (-1: none) of each field.
    """

    positions: IdArray
    area_m2: F64Array
    perimeter_m: F64Array
    utm_epsg: IdArray
    strata_codes: IdArray
    size_codes: IdArray
    pools: IdArray
    tile_x: IdArray
    tile_y: IdArray
    aoi: IdArray

    def take(self, rows: IdArray) -> RefRows:
        return RefRows(*(getattr(self, name)[rows] for name in self.__slots__))

    @staticmethod
    def of_layer(layer: PreparedLayer, strata: np.ndarray | None, plan: RunPlan) -> RefRows:
        """The rows of a prepared reference layer, with the run plan's group codes and pools."""
        strata_codes, size_codes, pools = plan.group_codes(layer.area_m2, strata)
        return RefRows(layer.positions, layer.area_m2, layer.perimeter_m, layer.utm_epsg, strata_codes, size_codes, pools,
                       layer.tile_x, layer.tile_y, layer.aoi)


@dataclass(frozen=True, slots=True)
class PartitionSummary:
    """The sums phase output of one partition: small, merges by addition.

    Attributes
    ----------
    key : PartitionKey
    n_ref, n_pred : int
        Reference fields of the partition and predictions homed in them.
    sums : GroupSums
        Per group of the flat group axis (overall, strata, size classes).
    replicates : ReplicateSums or None
    values : SortedValues or None
        The families' gathered per-field values (their medians' and quantiles'), sorted
        per group and column; None when they stay in the partition's own file (a
        cluster's sums output, read by the selection's rounds).
    n_ungrouped : ndarray of int64
        Per grouping, the fields in none of its groups (no stratum, outside the size classes).
    tiles, aois : UnitSums
        Sums per reporting tile and per AOI of the partition's fields (with their home
        predictions); the AOIs' with bootstrap replicates when drawn.
    """

    key: PartitionKey
    n_ref: int
    n_pred: int
    sums: GroupSums
    replicates: ReplicateSums | None
    values: SortedValues | None = field(repr=False)
    n_ungrouped: IdArray = field(default_factory=lambda: np.zeros(0, np.int64))
    tiles: UnitSums = field(default_factory=lambda: UnitSums.empty(3), repr=False)
    aois: UnitSums = field(default_factory=lambda: UnitSums.empty(1), repr=False)


def summarize_partition(
    key: PartitionKey,
    refs: RefRows,
    results: PairResults,
    pair_values: dict[str, np.ndarray],
    contributions: Contributions,
    options: EvalOptions,
    plan: RunPlan,
    draws: RowDraws | None = None,
) -> tuple[PartitionSummary, pd.DataFrame]:
    """Phase 4 of one partition.

    Parameters
    ----------
    key : PartitionKey
    refs : RefRows
        The partition's reference fields.
    results : PairResults
        Pairs phase output holding exactly the pairs of these fields, in (reference,
        prediction) order, and their tolerance lengths.
    pair_values : dict of str to ndarray
        The resolve phase's per-pair values for those pairs.
    contributions : Contributions
        What the predictions homed in these fields add.
    options : EvalOptions
    plan : RunPlan
        The run's groupings.
    draws : RowDraws, optional
        The bootstrap draws of these fields (:meth:`RunDraws.rows`); required with a bootstrap.

    Returns
    -------
    summary : PartitionSummary
    fields : pandas.DataFrame
        The per-field columns of the partition's reference fields, indexed by position.
    """
    pairs = results.pairs
    row_of_pair = index_of(refs.positions, pairs.ref_pos)  # KeyError for a pair of another partition's field
    for name, values in pair_values.items():
        if len(values) != len(pairs):
            raise ValueError(f"partition {key}: {len(values)} values of {name!r} for {len(pairs)} pairs")
    is_match = pair_values["is_match"]
    resolution = Resolution(
        pairs=pairs,
        is_eligible=pair_values["is_eligible"],
        is_match=is_match,
        home_pred_pos=np.empty(0, np.int64),
        home_ref_pos=np.empty(0, np.int64),
        matching=options.matching,
        iou_threshold=options.iou_threshold,
    )
    base = reference_fields(refs.positions, refs.area_m2, resolution, results.pred_area_of_pair)
    # The columns are collected first and made into one frame: inserting them one by one
    # into a DataFrame costs pandas a block insertion each (about 0.1 s a run at 50k fields).
    columns = {name: base[name].to_numpy() for name in base.columns}
    columns["area_m2"] = refs.area_m2
    columns["perimeter_m"] = refs.perimeter_m
    columns["utm_epsg"] = refs.utm_epsg
    # Distances of the matched pair: the pair the field matched.
    n = len(refs.positions)
    hausdorff = np.full(n, np.nan)
    mean = np.full(n, np.nan)
    spacing = np.full(n, np.nan)
    matched_pairs = np.flatnonzero(is_match)
    rows = row_of_pair[matched_pairs]
    hausdorff[rows] = results.hausdorff_m[matched_pairs]
    mean[rows] = results.mean_distance_m[matched_pairs]
    spacing[rows] = results.spacing_m[matched_pairs]
    columns["hausdorff_m"] = hausdorff
    columns["boundary_mean_distance_m"] = mean
    columns["boundary_sample_spacing_m"] = spacing
    band_iou = np.full(n, np.nan)
    band_iou[rows] = results.boundary_iou[matched_pairs]
    columns["boundary_iou"] = band_iou
    within = np.full(n, np.nan)
    own = np.isin(results.ref_pos, refs.positions)
    within[np.searchsorted(refs.positions, results.ref_pos[own])] = results.ref_within_tol_m[own]
    columns["boundary_within_tolerance_m"] = within
    fields = pd.DataFrame(columns, index=base.index)

    ctx = RefContext(
        fields=fields,
        pairs=pairs,
        row_of_pair=row_of_pair,
        ref_area_m2=results.ref_area_of_pair,
        pred_area_m2=results.pred_area_of_pair,
        pair_values=pair_values,
        options=options,
    )
    table = quantity_table(ctx, contributions)
    matched = fields["matched"].to_numpy(bool)
    fields["error_code"] = reference_codes(matched, fields["n_overlapping_pred"].to_numpy(np.int64))
    present = set(table.columns)
    flags = reference_flags(
        table.column("merged_reference") if "merged_reference" in present else None,
        table.column("splits") if "splits" in present else None,
        matched, mean, options.boundary_tolerance_m,
    )
    for name, values in flags.items():
        fields[name] = values
    flat_groups = plan.flat_groups(refs.strata_codes, refs.size_codes)
    replicates = weights = None
    if options.bootstrap > 0:
        if draws is None or len(draws.weights_rows()) != n:
            raise ValueError(f"partition {key}: the bootstrap draws of its {n} reference fields are missing")
        weights = draws.draw_counts()  # small whole numbers: the same sums as their float64 values
        replicates = replicate_group_sums(weights, table.values[:, _replicated(table.columns, options)], flat_groups, plan.n_groups)
    ucols, rcols = unit_sum_columns(options)
    units = unit_rows(ucols, table.columns, table.values)
    tiles = unit_sums(np.stack([refs.utm_epsg, refs.tile_x, refs.tile_y], axis=1), units, weights, ucols, rcols)
    aois = unit_sums(refs.aoi[:, None], units, weights, ucols, rcols)
    gathered: dict[str, F64Array] = {}
    for family in enabled_families(options):
        gathered.update(family.gathered(ctx))
    declared = order_statistics(options)
    if set(gathered) != set(declared):
        raise ValueError(f"the families gather {sorted(gathered)} but declare order statistics of {sorted(declared)}")
    values = SortedValues.of_columns({name: gathered[name] for name in declared}, flat_groups, plan.n_groups)
    n_pred = int(table.column("n_pred").sum()) if n else 0
    summary = PartitionSummary(
        key=key,
        n_ref=n,
        n_pred=n_pred,
        sums=group_sums(table.values, table.maxima, flat_groups, plan.n_groups, table.columns, table.max_columns),
        replicates=replicates,
        values=values,
        n_ungrouped=(flat_groups < 0).sum(axis=0).astype(np.int64),
        tiles=tiles,
        aois=aois,
    )
    fields["tile_x"] = refs.tile_x
    fields["tile_y"] = refs.tile_y
    fields["aoi"] = refs.aoi
    return summary, fields


@dataclass(frozen=True, slots=True)
class MergedSums:
    """Every partition's sums added in key order, plus the unassigned predictions.

    Attributes
    ----------
    sums : GroupSums
        Group 0 (overall) includes the unassigned predictions' row.
    replicates : ReplicateSums or None
        The overall group includes the unassigned row in every replicate.
    order : dict of int to dict
        Per group of the flat group axis, the order statistics of each gathered column:
        ``{group: {column: {statistic: value}}}`` (:func:`order_by_group`).
    unassigned : dict of str to float
    tiles, aois : UnitSums
        Per reporting tile and per AOI, the homeless predictions included (in every
        replicate of the AOIs' intervals).
    """

    sums: GroupSums
    replicates: ReplicateSums | None
    order: dict[int, dict[str, dict[Statistic, float]]]
    unassigned: dict[str, float]
    tiles: UnitSums = field(default_factory=lambda: UnitSums.empty(3))
    aois: UnitSums = field(default_factory=lambda: UnitSums.empty(1))
    global_values: dict = field(default_factory=dict)
    n_units: int | None = None
    pixels: dict | None = None
    n_ungrouped: tuple[int, ...] = ()


def wanted_series(options: EvalOptions, plan: RunPlan) -> dict[int, tuple[Statistic, ...]]:
    """The series of :class:`~evalcore.selection.SortedValues` to select from and their
    statistics: every declared column in every group."""
    declared = order_statistics(options)
    return {c * plan.n_groups + g: stats for c, stats in enumerate(declared.values()) for g in range(plan.n_groups)}


def order_by_group(selected: Mapping[int, Mapping[Statistic, float]], options: EvalOptions, plan: RunPlan) -> dict[int, dict[str, dict[Statistic, float]]]:
    """:func:`~evalcore.selection.select`'s answer per series as ``{group: {column: {statistic: value}}}``."""
    columns = tuple(order_statistics(options))
    out: dict[int, dict[str, dict[Statistic, float]]] = {g: {} for g in range(plan.n_groups)}
    for s, stats in selected.items():
        c, g = divmod(int(s), plan.n_groups)
        out[g][columns[c]] = dict(stats)
    return out


def _replicated(columns: Sequence[str], options: EvalOptions) -> list[int]:
    """Where the columns summed per replicate (:func:`~evalcore.metrics.registry.replicate_columns`)
    are among ``columns`` (a quantity table's, in :func:`quantity_columns` order)."""
    where = {name: j for j, name in enumerate(columns)}
    return [where[name] for name in replicate_columns(options)]


def merge_partitions(
    parts: list[PartitionSummary] | Iterator[PartitionSummary],
    unassigned: dict[str, float],
    options: EvalOptions,
    plan: RunPlan,
    homeless_tiles: UnitSums | None = None,
    homeless_aois: UnitSums | None = None,
    global_values: dict | None = None,
    unassigned_replicates: F64Array | None = None,
    unassigned_columns: tuple[str, ...] = (),
    n_units: int | None = None,
    select: Callable[[dict[int, tuple[Statistic, ...]]], Mapping[int, Mapping[Statistic, float]]] | None = None,
    unit_keys: tuple[IdArray, IdArray] | None = None,
    homeless_units: Callable[[], tuple[Iterable[UnitSums], Iterable[UnitSums]]] | None = None,
    tile_replicates: Callable[[tuple], F64Array] | None = None,
) -> MergedSums:
    """Add the partitions' sums in partition-key order (so the bits never depend on arrival order).

    ``parts`` is a list in any order, or an iterator yielding them in key order: then
    each partition is added and let go before the next is read, so the bootstrap's
    replicate sums (groups x replicates x columns per partition) are held for one
    partition at a time, whatever the number of partitions.

    The order statistics are selected after the sums, by ``select`` (given the wanted
    series, :func:`wanted_series`; a cluster's rounds over the partitions' files) or,
    without it, by :func:`evalcore.selection.select_local` over the partitions' own
    :attr:`PartitionSummary.values`: the same exact elements either way.

    ``unit_keys`` are the tile keys and the AOI keys of every partition (read ahead from
    their files; taken from ``parts`` when they are a list): the tiles' and AOIs' sums are
    made in place, one row per unit (:class:`~evalcore.levels.UnitSumsAdder`).
    ``homeless_units``, given instead of ``homeless_tiles`` and ``homeless_aois``, reads
    them when they are added (after the partitions, as they would be), as the tiles' and
    the AOIs' sums in blocks of units (each unit in one block); its units must be among
    ``unit_keys``.

    ``tile_replicates(key)`` (with a bootstrap) reads again the tiles' replicates of the
    partition ``key``: the tiles' replicates are then not added here but made a block of
    tiles at a time when their intervals are (:class:`~evalcore.levels.BlockedReplicates`,
    the same bits), so a country's tiles are never all held; the parts' own tile
    replicates, if they carry them, are not used.
    """
    if homeless_units is not None and (homeless_tiles is not None or homeless_aois is not None):
        raise ValueError("give the homeless predictions' unit sums, or a function reading them, not both")
    if unit_keys is None:
        if not isinstance(parts, list) or homeless_units is not None:
            raise ValueError("partitions read one at a time, or homeless sums read later, need their unit keys (unit_keys)")
        unit_keys = (np.concatenate([np.empty((0, 3), np.int64)] + [p.tiles.keys for p in parts]),
                     np.concatenate([np.empty((0, 1), np.int64)] + [p.aois.keys for p in parts]))
    if isinstance(parts, list):
        parts = iter(sorted(parts, key=lambda p: p.key))
    columns, max_cols = quantity_columns(options), max_columns(options)
    sums = GroupSums.empty(columns, max_cols, plan.n_groups)
    replicates = None
    if options.bootstrap > 0:
        replicated = _replicated(columns, options)
        replicates = ReplicateSums(np.zeros((plan.n_groups, options.bootstrap, len(replicated))))
    previous = None
    value_parts = []
    n_rep = options.bootstrap if options.bootstrap > 0 else None
    ucols, rcols = unit_sum_columns(options)
    # Tiles and AOIs are added as the partitions arrive: their replicates are held once per unit, not once per partition.
    tile_keys, aoi_keys = (np.concatenate([np.asarray(k, np.int64).reshape(-1, width)] + ([h.keys] if h is not None else []))
                           for k, h, width in zip(unit_keys, (homeless_tiles, homeless_aois), (3, 1)))
    blocked = tile_replicates is not None and n_rep is not None
    tiles = UnitSumsAdder(UnitSums.empty(3, None if blocked else n_rep, ucols, rcols), tile_keys)
    tile_parts: list[tuple[tuple, IdArray]] = []  # with blocked: each partition's tile keys, in key order

    def tile_values(units: UnitSums) -> UnitSums:
        return replace(units, replicates=None) if blocked else units

    aois = UnitSumsAdder(UnitSums.empty(1, n_rep, ucols, rcols), aoi_keys)
    n_ungrouped = np.zeros(len(plan.groupings), dtype=np.int64)
    for part in parts:
        if previous is not None and part.key <= previous:
            raise ValueError("a partition was summed twice" if part.key == previous else "partitions arrived out of key order")
        previous = part.key
        sums = sums.merge(part.sums)
        if replicates is not None:
            replicates = replicates.merge(part.replicates)
        if select is None:
            if part.values is None:
                raise ValueError(f"partition {part.key}: its sorted values are not in memory; merge with the selection's rounds")
            value_parts.append(part.values)
        if len(part.n_ungrouped):
            n_ungrouped += part.n_ungrouped
        tiles.add(tile_values(part.tiles))
        if blocked:
            tile_parts.append((part.key, part.tiles.keys))
        aois.add(part.aois)
    row = np.array([unassigned.get(c, 0.0) for c in columns])
    sums = sums.add_to_group(0, row)
    if replicates is not None:
        groups = replicates.groups.copy()
        if unassigned_replicates is None:
            groups[0] = groups[0] + row[replicated]  # the same homeless predictions in every replicate
        else:
            col = {columns[j]: k for k, j in enumerate(replicated)}
            for j, name in enumerate(unassigned_columns):
                if name in col:
                    groups[0][:, col[name]] += unassigned_replicates[:, j]
        replicates = ReplicateSums(groups)
    wanted = wanted_series(options, plan)
    selected = select(wanted) if select is not None else select_local(wanted, value_parts)
    order = order_by_group(selected, options, plan)
    homeless = ((tiles, [homeless_tiles] if homeless_tiles is not None else []), (aois, [homeless_aois] if homeless_aois is not None else []))
    if homeless_units is not None:
        homeless = tuple(zip((tiles, aois), homeless_units(), strict=True))
    for adder, blocks in homeless:
        for block in blocks:  # each unit is in one block: its homeless sums are added once, last
            adder.add(tile_values(block) if adder is tiles else block)
    tile_sums = tiles.total()
    if blocked:
        def last() -> Iterable[UnitSums]:
            if homeless_units is not None:
                return homeless_units()[0]
            return [homeless_tiles] if homeless_tiles is not None else []
        tile_sums = replace(tile_sums, replicates=BlockedReplicates(
            tile_sums.keys, n_rep, rcols, tuple(tile_parts), tile_replicates, last))
    return MergedSums(sums, replicates, order, dict(unassigned), tile_sums, aois.total(), dict(global_values or {}), n_units,
                      n_ungrouped=tuple(int(n) for n in n_ungrouped))
