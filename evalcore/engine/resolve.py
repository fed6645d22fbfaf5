"""Phase 3 of an evaluation, the resolve: the decisions that need every pair of the run.

:func:`resolve_run` takes every pair of the run (:func:`evalcore.engine.pairing.concat_pair_results`)
and makes the global matching, the families' global per-pair values, each prediction's
outcome, home and error code, what every prediction adds to which reference row, what the
predictions without a home add, the bootstrap's draws and the families' run-level values
(:class:`Resolved`). :func:`route` then says which partition gets which pairs and rows for
the sums phase (:mod:`evalcore.engine.sums`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from evalcore._typing import F64Array, IdArray
from evalcore.arrays import index_of
from evalcore.bootstrap import RunDraws, WeightBlocks, block_draws, field_draws, pool_id, replicate_group_sums
from evalcore.engine.pairing import PairResults
from evalcore.engine.sums import unit_sum_columns
from evalcore.groups import SizeClasses
from evalcore.levels import UnitSums, unit_rows, unit_sums
from evalcore.matching import Resolution, resolve
from evalcore.metrics.base import GlobalContext, PairContext, PredContext
from evalcore.metrics.registry import enabled_families
from evalcore.metrics.taxonomy import prediction_codes, prediction_flags
from evalcore.options import EvalOptions, base_threshold
from evalcore.quantities import Contributions, prediction_contributions, prediction_fields

__all__ = ["Resolved", "resolve_run", "homeless_units", "block_unit_keys", "homeless_sums", "run_draws", "Routing", "route"]


@dataclass(frozen=True, slots=True)
class Resolved:
    """The resolve phase's output: the global decisions every partition's sums need.

    Attributes
    ----------
    resolution : Resolution
        The matching at the main threshold (and the base matching).
    pair_values : dict of str to ndarray
        Per pair of the run (in the order of ``resolution.pairs``): ``is_match``,
        ``is_eligible``, ``base_match`` and every family's global per-pair values.
    preds : pandas.DataFrame
        Every prediction's matching outcome and homes (:class:`PredContext`).
    contributions : Contributions
        What the predictions add to each reference row, summed per field.
    unassigned : dict of str to float
        What the predictions without any candidate pair add (overall only).
    homeless_tiles, homeless_aois : UnitSums or None
        What those predictions add to the tile and the AOI of their own centroid (None
        when resolved on the workers: the merge reads them from a file,
        :attr:`evalcore.distributed.values.ResolvedRun.homeless_units`).
    global_values : dict
        The families' run-level values that are not sums (AP): ``{"keys", "ci",
        "n_undefined", "tables"}``.
    draws : RunDraws or None
        The bootstrap's draws (every partition gets its rows' share, :meth:`RunDraws.rows`).
    columns : tuple of str
        The prediction-side columns (of ``unassigned_replicates``).
    unassigned_replicates : ndarray of float64, shape (n_replicates, len(columns)), optional
        The homeless predictions' sums in each replicate (weighed by their units' draws
        in a block bootstrap; the same in every replicate otherwise).
    homeless_pos : ndarray of int64
        The predictions without any candidate pair, by position.
    homeless_rows : ndarray of float64, shape (len(homeless_pos), len(columns))
        What each of them adds (their sum is ``unassigned``): the resolve on the workers
        hands them to :func:`homeless_sums`, which adds them in position order.
    """

    resolution: Resolution
    pair_values: dict[str, np.ndarray]
    preds: pd.DataFrame
    contributions: Contributions
    unassigned: dict[str, float]
    homeless_tiles: UnitSums | None
    homeless_aois: UnitSums | None
    global_values: dict = field(default_factory=dict)
    draws: RunDraws | None = None
    columns: tuple = ()
    unassigned_replicates: F64Array | None = None
    homeless_pos: IdArray | None = None
    homeless_rows: F64Array | None = None
    run_level_rows: dict = field(default_factory=dict)


def resolve_run(
    results: PairResults, options: EvalOptions, unit_keys: IdArray | None = None, strata_names: list[str] | None = None,
    sizes: SizeClasses | None = None, run_level: bool = True,
) -> Resolved:
    """Phase 3: match every pair of the run and decide what each prediction adds where.

    Parameters
    ----------
    results : PairResults
        Every pair of the run and every prediction (:func:`~evalcore.engine.pairing.concat_pair_results`).
    options : EvalOptions
    unit_keys : ndarray of int64, optional
        The units of a block bootstrap (default: those of this run; a paired comparison
        gives the union of both runs').
    strata_names : list of str, optional
        The run's strata (:attr:`RunPlan.strata_names`): the families' global step gets
        each reference row's stratum (risk-coverage per stratum).
    sizes : SizeClasses, optional
        The run's size classes (:attr:`RunPlan.sizes`): the families' per-pair step gets
        each pair's reference size class (a distinct count per group, SPEC 6.2).
    run_level : bool
        Compute the families' run-level values (:meth:`MetricFamily.global_values`); False
        for a resolve of some components on a worker, which hands on instead what the
        families that compute them on the workers need (:attr:`Resolved.run_level_rows`).
    """
    pairs = results.pairs
    resolution = resolve(pairs, options.iou_threshold, options.matching, base_threshold(options))
    pair_values = {"is_match": resolution.is_match, "is_eligible": resolution.is_eligible, "base_match": resolution.base_match}
    ref_strata_codes = None if strata_names is None else _ref_stratum_codes(results.ref_pool, strata_names)
    pair_ctx = PairContext(pairs, results.ref_area_of_pair, results.pred_area_of_pair, resolution.base_match, options,
                           _pair_ref_groups(results, ref_strata_codes, sizes))
    for family in enabled_families(options):
        pair_values.update(family.pair_values(pair_ctx))

    outcome = prediction_fields(results.pred_pos, resolution)
    n = len(outcome)
    positions = results.pred_pos
    base_home = np.full(n, -1, dtype=np.int64)
    base_iou = np.full(n, np.nan)
    p, r, k = resolution.base_home
    rows = index_of(positions, p)
    base_home[rows], base_iou[rows] = r, pairs.iou[k]
    overlap = np.full(n, -1, dtype=np.int64)
    p, r = resolution.overlap_home
    overlap[index_of(positions, p)] = r
    # Every column is computed from arrays and the frame built once: no phase receives
    # a frame that another one fills in afterwards.
    columns = {name: outcome[name].to_numpy() for name in outcome.columns}
    columns |= {
        "area_m2": results.pred_area_m2,
        "perimeter_m": results.pred_perimeter_m,
        "boundary_within_tolerance_m": results.pred_within_tol_m,
        "base_home_ref_pos": base_home,
        "base_home_iou": base_iou,
        "overlap_ref_pos": overlap,
    }
    columns |= _prediction_sites(columns["home_ref_pos"], results, resolution)
    columns |= _prediction_codes(columns["matched"], overlap, results, resolution, pair_values, options)
    preds = pd.DataFrame(columns, index=outcome.index)
    contributions, unassigned, homeless_rows = prediction_contributions(PredContext(preds, pairs, pair_values, options))
    home = preds["home_ref_pos"].to_numpy(np.int64)
    home_row = np.full(len(home), -1, dtype=np.int64)
    home_row[home >= 0] = index_of(results.ref_pos, home[home >= 0])
    draws, pred_units = run_draws(results, preds, options, unit_keys)
    homeless = np.flatnonzero(home < 0)
    weights = None
    if draws is not None:
        weights = (WeightBlocks.ones(options.bootstrap, len(homeless)) if draws.unit == "field"
                   else WeightBlocks.of_units(draws.counts, pred_units[homeless]))
    tile_keys = np.stack([results.pred_utm_epsg, results.pred_tile_x, results.pred_tile_y], axis=1)[homeless]
    tiles, aois = homeless_units(homeless_rows, contributions.columns, tile_keys, results.pred_aoi[homeless], weights, options)
    unassigned_replicates = None
    if weights is not None:
        # Group 0 of every replicate: the homeless predictions, each weighed by its unit's draws.
        unassigned_replicates = replicate_group_sums(weights, homeless_rows, np.full((len(homeless), 0), -1, np.int64), 1).groups[0]
    ref_strata = None
    if ref_strata_codes is not None:
        ref_strata = np.array(list(strata_names) + [None], dtype=object)[ref_strata_codes]  # the missing stratum: None
    ctx = GlobalContext(
        preds, pairs, results.ref_pos, home_row, options, _pred_weight_stream(draws, home_row, pred_units), ref_strata,
        pair_values, results.ref_area_of_pair, results.ref_class, _pred_weight_stream(draws, home_row, pred_units, with_refs=True),
        tuple(strata_names) if strata_names is not None else None,
    )
    global_values: dict = {"keys": {}, "ci": {}, "n_undefined": {}, "tables": {}, "replicates": {}}
    rows: dict = {}
    for family in enabled_families(options):
        if run_level:
            for part, values in family.global_values(ctx).items():
                global_values[part].update(values)
        elif family.run_level_on_workers(options):
            rows[family.name] = family.run_level_rows(ctx)
    return Resolved(resolution, pair_values, preds, contributions, unassigned, tiles, aois, global_values, draws,
                    contributions.columns, unassigned_replicates, positions[homeless], homeless_rows, rows)


def homeless_units(rows: F64Array, columns: tuple[str, ...], tile_keys: IdArray, aoi: IdArray, weights: F64Array | WeightBlocks | None,
                   options: EvalOptions) -> tuple[UnitSums, UnitSums]:
    """What the predictions without a home add to the tile and the AOI of their own centroid.

    Parameters
    ----------
    rows : ndarray of float64, shape (n, len(columns))
        Each such prediction's row (:attr:`Resolved.homeless_rows`).
    tile_keys : ndarray of int64, shape (n, 3)
        Each one's ``(epsg, tile x, tile y)``.
    aoi : ndarray of int64, shape (n,)
        Each one's AOI (-1: none).
    weights : ndarray of float64, shape (n_replicates, n), or WeightBlocks, optional
        Their draws in each replicate.
    """
    # The homeless predictions' unit rows are the families' own prediction columns.
    ucols, rcols = unit_sum_columns(options)
    unit = unit_rows(ucols, columns, rows, unassigned=True)
    return unit_sums(tile_keys, unit, weights, ucols, rcols), unit_sums(aoi[:, None], unit, weights, ucols, rcols)


def block_unit_keys(options: EvalOptions, utm_epsg: IdArray, tile_x: IdArray, tile_y: IdArray, aoi: IdArray) -> IdArray:
    """The block bootstrap's unit key of some rows (reference fields, or predictions without a
    home, which count in their own centroid's unit), as :func:`run_draws` keys them."""
    if options.bootstrap_unit == "tile":
        return np.stack([utm_epsg, tile_x, tile_y], axis=1).astype(np.int64)
    return np.asarray(aoi, np.int64)[:, None]


def homeless_sums(pos: IdArray, rows: F64Array, columns: tuple[str, ...], tile_keys: IdArray, aoi: IdArray,
                  options: EvalOptions, ref_unit_keys: IdArray | None = None):
    """The run's ``unassigned``, ``homeless_tiles`` and ``homeless_aois`` from the homeless
    predictions' rows gathered from several resolves; with a bootstrap, also the homeless
    predictions' replicates (each taken once in every replicate of a field bootstrap) and,
    with a block bootstrap, the run's units.

    The rows are added in position order, as :func:`~evalcore.quantities.prediction_contributions`
    adds them in one resolve of the whole run (each family's column has one target, so a
    homeless prediction's row is its value and their sum is the same sequence of additions).

    Parameters
    ----------
    pos : ndarray of int64
        Positions of the predictions (any order; distinct).
    rows, tile_keys, aoi
        As :func:`homeless_units`, in the order of ``pos``.
    ref_unit_keys : ndarray of int64, optional
        A block bootstrap: the units of every reference field of the run (any order,
        repeats allowed; :func:`block_unit_keys`).

    Returns
    -------
    unassigned : dict of str to float
    homeless_tiles, homeless_aois : UnitSums
    unassigned_replicates : ndarray of float64, shape (n_replicates, len(columns)), or None
    unit_keys : ndarray of int64, or None
        A block bootstrap: the run's units (sorted, unique): those of the reference fields and of the
        homeless predictions (a prediction with a home is in its home's unit), as
        :func:`run_draws` makes them.
    """
    order = np.argsort(pos, kind="stable")
    rows, tile_keys, aoi = rows[order], tile_keys[order], aoi[order]
    total = np.zeros(len(columns))
    for k in range(len(columns)):
        # bincount adds in input order, as in prediction_contributions.
        total[k] += np.bincount(np.zeros(len(rows), np.int64), weights=rows[:, k], minlength=1)[0]
    unassigned = {c: float(total[k]) for k, c in enumerate(columns)}
    weights = replicates = unit_keys = None
    if options.bootstrap > 0 and options.bootstrap_unit == "field":
        # A field bootstrap leaves the homeless predictions in every replicate once, summed
        # with weight 1 as resolve_run sums them.
        weights = WeightBlocks.ones(options.bootstrap, len(rows))
        replicates = replicate_group_sums(weights, rows, np.full((len(rows), 0), -1, np.int64), 1).groups[0]
    elif options.bootstrap > 0:
        if ref_unit_keys is None:
            raise ValueError("homeless_sums draws a block bootstrap from the reference fields' units")
        own = block_unit_keys(options, tile_keys[:, 0], tile_keys[:, 1], tile_keys[:, 2], aoi)
        unit_keys = np.unique(np.concatenate([np.asarray(ref_unit_keys, np.int64).reshape(-1, own.shape[1]), own]), axis=0)
        draws = block_draws(options.bootstrap_unit, unit_keys, np.empty(0, np.int64), options.bootstrap, options.bootstrap_seed)
        weights = WeightBlocks.of_units(draws.counts, _unit_index(unit_keys, own))
        # Group 0 of every replicate: the homeless predictions, each weighed by its unit's draws.
        replicates = replicate_group_sums(weights, rows, np.full((len(rows), 0), -1, np.int64), 1).groups[0]
    tiles, aois = homeless_units(rows, columns, tile_keys, aoi, weights, options)
    return unassigned, tiles, aois, replicates, unit_keys


def _ref_stratum_codes(ref_pool: IdArray, strata_names: list[str]) -> IdArray:
    """Each reference row's stratum (its index in ``strata_names``; -1: the missing
    stratum) from its bootstrap pool, which names it."""
    code_of_pool = {pool_id(name, True): k for k, name in enumerate(strata_names)}  # the missing pool: -1
    return np.array([code_of_pool.get(p, -1) for p in ref_pool.tolist()], dtype=np.int64)


def _pair_ref_groups(results: PairResults, ref_strata_codes: IdArray | None, sizes: SizeClasses | None) -> dict[str, IdArray]:
    """Each pair's reference code in the run's groupings (-1: in none), as the partitions
    code their rows (:meth:`RunPlan.group_codes`): the stratum of the field
    (:func:`_ref_stratum_codes`), the size class from the same equal-area area."""
    out: dict[str, IdArray] = {}
    pairs = results.pairs
    if ref_strata_codes is not None:
        out["per_stratum"] = ref_strata_codes[index_of(results.ref_pos, pairs.ref_pos)] if len(pairs) else np.empty(0, np.int64)
    if sizes is not None:
        out["per_size_class"] = sizes.codes(results.ref_area_of_pair / 1e4) if len(pairs) else np.empty(0, np.int64)
    return out


def run_draws(results: PairResults, preds: pd.DataFrame, options: EvalOptions, unit_keys: IdArray | None = None):
    """The run's bootstrap draws (None without a bootstrap) and each prediction's unit (block draws).

    Parameters
    ----------
    unit_keys : ndarray of int64, optional
        The units to draw from (block draws; default: every unit holding a reference field
        or a prediction). A paired comparison passes the union of both runs' units.
    """
    if options.bootstrap <= 0:
        return None, None
    B, seed = options.bootstrap, options.bootstrap_seed
    if options.bootstrap_unit == "field":
        tiles = np.stack([results.ref_utm_epsg, results.ref_tile_x, results.ref_tile_y], axis=1)
        return field_draws(results.ref_pos, results.ref_pool, tiles, B, seed), None
    if options.bootstrap_unit == "tile":
        ref_keys = np.stack([results.ref_utm_epsg, results.ref_tile_x, results.ref_tile_y], axis=1)
        pred_keys = preds[["tile_epsg", "tile_x", "tile_y"]].to_numpy(np.int64)
    else:
        ref_keys = results.ref_aoi[:, None]
        pred_keys = preds["aoi"].to_numpy(np.int64)[:, None]
    if unit_keys is None:
        unit_keys = np.unique(np.concatenate([ref_keys, pred_keys]), axis=0)
    ref_units = _unit_index(unit_keys, ref_keys)
    pred_units = _unit_index(unit_keys, pred_keys)
    return block_draws(options.bootstrap_unit, unit_keys, ref_units, B, seed), pred_units


def _unit_index(unit_keys: IdArray, keys: IdArray) -> IdArray:
    """Row of each key in ``unit_keys`` (sorted, unique rows)."""
    if len(keys) == 0:
        return np.empty(0, np.int64)
    both = np.concatenate([unit_keys, keys])
    _, inverse = np.unique(both, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    # unit_keys are unique and sorted, so their own inverse is 0..n-1.
    return inverse[len(unit_keys):].astype(np.int64)


def _pred_weight_stream(draws, home_row: IdArray, pred_units: IdArray | None, with_refs: bool = False):
    """A callable yielding, per replicate, every prediction's weight and the reference count
    (``with_refs``: every reference row's weight instead of their count)."""
    if draws is None:
        return None

    def stream():
        for b, ref_weights in enumerate(draws.ref_weights()):
            if draws.unit == "field":
                pred_weights = np.where(home_row >= 0, ref_weights[np.maximum(home_row, 0)], 1.0)
            else:
                pred_weights = draws.counts[b, pred_units]
            yield pred_weights, (ref_weights if with_refs else float(ref_weights.sum()))

    return stream


def _prediction_sites(home: IdArray, results: PairResults, resolution: Resolution) -> dict[str, np.ndarray]:
    """Each prediction's IoU and boundary IoU of its match, best IoU, own zone, and the tile and AOI it counts in.

    A prediction counts in its home reference's tile and AOI, and one without a home in
    those of its own centroid (SPEC 6.3).

    Parameters
    ----------
    home : ndarray of int64
        Each prediction's home reference position (-1: none), in ``results.pred_pos`` order.

    Returns
    -------
    dict of str to ndarray
        New columns of the prediction rows, in their order in :attr:`Resolved.preds`.
    """
    pairs = results.pairs
    n = len(home)
    row = index_of(results.pred_pos, pairs.pred_pos)
    best = np.zeros(n)
    np.maximum.at(best, row, pairs.iou)
    iou = np.full(n, np.nan)
    iou[row[resolution.is_match]] = pairs.iou[resolution.is_match]
    band_iou = np.full(n, np.nan)
    band_iou[row[resolution.is_match]] = results.boundary_iou[resolution.is_match]
    has = home >= 0
    ref_row = index_of(results.ref_pos, home[has])
    home_label = np.full(n, None, dtype=object)
    home_label[has] = np.asarray(results.ref_label, dtype=object)[ref_row]
    home_class = np.full(n, None, dtype=object)
    home_class[has] = np.asarray(results.ref_class, dtype=object)[ref_row]
    out = {
        "iou": iou,
        "best_iou": best,
        "boundary_iou": band_iou,
        "utm_epsg": results.pred_utm_epsg,
        "annotated_fraction": results.pred_annotated_fraction,
        "score": results.pred_score,
        "class": results.pred_class,
        "label": np.asarray(results.pred_label, dtype=object),
        "home_ref_label": home_label,
        "home_ref_class": home_class,
    }
    for name, own, of_ref in (
        ("tile_epsg", results.pred_utm_epsg, results.ref_utm_epsg),
        ("tile_x", results.pred_tile_x, results.ref_tile_x),
        ("tile_y", results.pred_tile_y, results.ref_tile_y),
        ("aoi", results.pred_aoi, results.ref_aoi),
    ):
        values = own.astype(np.int64).copy()
        values[has] = of_ref[ref_row]
        out[name] = values
    return out


@dataclass(frozen=True, slots=True)
class Routing:
    """Which rows of the run's tables each partition gets (:func:`route`).

    Attributes
    ----------
    ref_rows, pair_rows, contribution_rows : list of ndarray of int64
        Per partition (in the order given to :func:`route`), increasing row indices
        into the reference rows, the pair table and the contributions.
    """

    ref_rows: list[IdArray]
    pair_rows: list[IdArray]
    contribution_rows: list[IdArray]


def _prediction_codes(matched: np.ndarray, overlap_ref_pos: IdArray, results: PairResults, resolution: Resolution,
                      pair_values: dict[str, np.ndarray], options: EvalOptions) -> dict[str, np.ndarray]:
    """Each prediction's primary error code and flags (SPEC 6.8, :mod:`evalcore.metrics.taxonomy`),
    as new columns ``error_code``, ``merge``, ``split`` (and ``boundary_error``)."""
    pairs = results.pairs
    matched_refs = np.unique(pairs.ref_pos[resolution.is_match])
    out = {"error_code": prediction_codes(np.asarray(matched, dtype=bool), overlap_ref_pos, matched_refs)}
    out |= prediction_flags(results.pred_pos, pairs, pair_values, results.pred_area_of_pair, results.mean_distance_m, options)
    return out


def _rows_by_part(part: IdArray, n_parts: int) -> list[IdArray]:
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(n_parts + 1))
    return [order[bounds[k] : bounds[k + 1]] for k in range(n_parts)]


def route(ref_pos: IdArray, ref_part: IdArray, n_parts: int, pair_ref_pos: IdArray, target_ref_pos: IdArray) -> Routing:
    """Send every pair and every prediction contribution to its reference field's partition.

    The one routing of the engine: the single-process run, the distributed runner and
    the tests all call it. A pair belongs to its reference field's partition; a
    prediction's contribution to the partition of the field it is added to.

    Parameters
    ----------
    ref_pos : ndarray of int64, shape (n_ref,)
        Every reference field's position, increasing.
    ref_part : ndarray of int64, shape (n_ref,)
        Its partition, in ``[0, n_parts)``.
    n_parts : int
    pair_ref_pos, target_ref_pos : ndarray of int64
        Reference position of each pair and of each contribution row (all present in ``ref_pos``).
    """
    ref_part = np.asarray(ref_part, dtype=np.int64)
    return Routing(
        ref_rows=_rows_by_part(ref_part, n_parts),
        pair_rows=_rows_by_part(ref_part[index_of(ref_pos, pair_ref_pos)], n_parts),
        contribution_rows=_rows_by_part(ref_part[index_of(ref_pos, target_ref_pos)], n_parts),
    )
