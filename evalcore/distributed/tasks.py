"""The functions a distributed run submits to the Dask workers, one per phase and partition.

Plain functions run on the workers. They take paths, keys and small values, read their
rows from the work directory (:mod:`evalcore.distributed.storage`), write their outputs
there and return small dicts; geometries never travel through the scheduler. The client
phases that submit them are in :mod:`evalcore.distributed.runner`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from evalcore import boundary
from evalcore.arrays import index_of, rows_by_key
from evalcore.bootstrap import (
    HandedWeights,
    PartitionKey,
    RowDraws,
    WeightBlocks,
    block_draws,
    draw_pool_counts,
    field_group_sizes,
    partition_field_draws,
    pool_ids,
    whole_counts,
)
from evalcore.distributed import storage
from evalcore.distributed import workdir as wd
from evalcore.distributed.reliability import PartitionMissingError, inject_fault
from evalcore.distributed.sources import Chunk, LayerSource, read_chunk
from evalcore.distributed.values import Box, LayerInfo, boxes_overlap
from evalcore.engine.components import component_results, label_partition, own_connectors
from evalcore.engine.pairing import compute_pairs
from evalcore.engine.resolve import _unit_index, block_unit_keys, homeless_sums, resolve_run, route
from evalcore.engine.sums import RefRows, summarize_partition
from evalcore.engine.tables import field_table, output_table, prediction_table
from evalcore.errors import EvalInputError
from evalcore.groups import strata_values
from evalcore.layer import PreparedLayer, empty_layer, utm_rings
from evalcore.metrics.score_ranges import (
    RangeCounts, RangeValues, ReplicateCounts, ReplicateShares, ScoreRows, range_counts, range_of, range_values, replicate_counts,
    replicate_shares, replicate_values,
)
from evalcore.levels import Sites
from evalcore.options import EvalOptions, RunPlan
from evalcore.prepare import prepare_layer
from evalcore.rings import Rings
from evalcore.selection import Answers, answer
from evalcore.study import Study
from evalcore.writers import atomic_path, write_geoparquet_wkb

__all__ = ["prepare_chunk_task", "pairs_task", "components_task", "seam_labels_task", "group_draws_task", "resolve_task",
           "homeless_task", "sums_task", "select_task", "predictions_task", "pixels_task", "score_split_task", "score_weights_task",
           "score_range_task", "score_values_task", "score_replicates_task"]

SCORE_SAMPLE = 64
"""Scores at evenly spaced ranks a resolve reports of its predictions: the client cuts score space at them."""


def _concat_layers(layers: list[PreparedLayer]) -> PreparedLayer:
    """Concatenate prepared rows of one layer and put them in position order."""
    first = layers[0]
    if len(layers) == 1:
        return first
    fields = {}
    for name in first.__slots__:
        values = [getattr(layer, name) for layer in layers]
        if name == "candidate_box" and any(v is not None for v in values):
            # Each part's own boxes, made from its geometries where it carries none.
            fields[name] = np.concatenate([boundary.candidate_boxes(layer) for layer in layers])
        elif name in ("rings_utm", "rings_ea"):
            # Each part's rings, flattened from its geometries where it carries none.
            fields[name] = Rings.concat([_rings_of(layer, name) for layer in layers]) if any(v is not None for v in values) else None
        elif isinstance(values[0], np.ndarray):
            fields[name] = np.concatenate(values)
        elif isinstance(values[0], pd.Index):
            fields[name] = values[0].append(values[1:])
        else:
            fields[name] = values[0]
    joined = PreparedLayer(**fields)
    return joined.take(np.argsort(joined.positions, kind="stable"))


def _rings_of(layer: PreparedLayer, name: str) -> Rings:
    """The layer's ``rings_utm`` or ``rings_ea``, flattened from its geometries when it carries none."""
    rings = getattr(layer, name)
    if rings is not None:
        return rings
    return utm_rings(layer, np.arange(len(layer))) if name == "rings_utm" else Rings.of(layer.geoms_ea)


def _reach(layer: PreparedLayer, tolerance_m: float | None) -> np.ndarray:
    """How far each row's equal-area box grows to meet every polygon within the tolerance.

    The same growth :func:`evalcore.boundary.tolerance_lengths` uses to select its
    candidates, so a halo read with it holds every candidate the partition needs.
    """
    if tolerance_m is None or len(layer) == 0:
        return np.zeros(len(layer))
    return boundary.tolerance_reach(layer, tolerance_m)


def prepare_chunk_task(
    source: LayerSource,
    chunk: Chunk,
    workdir: str,
    equal_area_crs: str | None,
    partition_size_m: float,
    tolerance_m: float | None,
    strata_column: str | None,
    sites: Sites | None = None,
    score_column: str | None = None,
    study: Study | None = None,
    class_columns: tuple[str | None, str | None] = (None, None),
) -> dict:
    """Read, prepare and write one input chunk, partitioned by key; return its index entry.

    ``class_columns`` are the reference's and the predictions' class columns (SPEC 6.10).
    """
    gdf = read_chunk(source, chunk)
    strata_all = None
    if strata_column is not None and source.role == "reference":
        if strata_column not in gdf.columns:
            columns = ", ".join(repr(c) for c in gdf.columns if c != gdf.geometry.name)
            raise EvalInputError(
                f"The strata column {strata_column!r} is not in the {source.describe()}; its columns are: {columns}."
            )
        strata_all = strata_values(gdf, strata_column, len(gdf))
    layer = prepare_layer(
        gdf, source.role, equal_area_crs=equal_area_crs, partition_size_m=partition_size_m, sites=sites,
        score_column=score_column if source.role == "predicted" else None, study=study,
        class_column=class_columns[source.role == "predicted"], utm_as_rings=True,
    )
    local = layer.positions
    layer = replace(layer, positions=layer.positions + chunk.start)
    strata = strata_all[local] if strata_all is not None else None
    boxes = boundary.candidate_boxes(layer)
    layer = replace(layer, candidate_box=boxes)  # made once, for the reach and the stored boxes
    reach = _reach(layer, tolerance_m)
    keys = np.stack([layer.utm_epsg, layer.partition_x, layer.partition_y], axis=1) if len(layer) else np.empty((0, 3), np.int64)
    inject_fault("prepare", f"{source.role}-{chunk.index}")
    partitions = {}
    files = []
    unique_keys, key_rows, starts = rows_by_key(keys)  # each key's rows together, in row order
    for k, key_row in enumerate(unique_keys):
        key = tuple(int(v) for v in key_row)
        rows = key_rows[starts[k] : starts[k + 1]]
        files.append(str(storage.write_prepared_chunk(Path(workdir) / "prepared" / source.role / storage.key_name(key), layer, rows, reach, strata, boxes)))
        b = boxes[rows]
        r = reach[rows]
        pools: dict[str | None, int] = {}
        if strata is not None:
            for value in strata[rows].tolist():
                pools[value] = pools.get(value, 0) + 1
        partitions[key] = {
            "n": len(rows),
            "box": (float(b[:, 0].min()), float(b[:, 1].min()), float(b[:, 2].max()), float(b[:, 3].max())),
            "reach_box": (
                float((b[:, 0] - r).min()),
                float((b[:, 1] - r).min()),
                float((b[:, 2] + r).max()),
                float((b[:, 3] + r).max()),
            ),
            "strata": pools,
        }
    return {
        "role": source.role,
        "chunk": chunk.index,
        "n_input": layer.n_input,
        "n_kept": len(layer),
        "n_dropped": layer.n_dropped,
        "n_repaired": layer.n_repaired,
        "n_outside_study_area": layer.n_outside_study_area,
        "n_within_training_buffer": layer.n_within_training_buffer,
        "crs": layer.crs.to_wkt() if layer.crs is not None else None,
        "area_min_m2": float(layer.area_m2.min()) if len(layer) else None,
        "area_max_m2": float(layer.area_m2.max()) if len(layer) else None,
        "utm_epsg": sorted({int(c) for c in layer.utm_epsg}),
        "partitions": partitions,
        "checksums": {f: storage.file_sha256(Path(f)) for f in files},  # the files written, hashed here in parallel
    }


def _read(
    workdir: str, role: str, key: PartitionKey, info: LayerInfo, ea_crs: CRS, partition_size_m: float,
    window: Box | None = None, geometries: tuple[str, ...] = storage.GEOMETRY_COLUMNS, utm_as_rings: bool = False,
    ea_rings: bool = False,
) -> PreparedLayer:
    layer, _, _ = storage.read_partition(
        Path(workdir), role, key, crs=info.crs, equal_area_crs=ea_crs, partition_size_m=partition_size_m,
        window=window, grow_by_reach=window is not None, geometries=geometries, utm_as_rings=utm_as_rings, ea_rings=ea_rings,
    )
    return layer


def pairs_task(
    workdir: str,
    key: PartitionKey,
    ref_info: LayerInfo,
    pred_info: LayerInfo,
    pred_neighbours: list[PartitionKey],
    ref_neighbours: list[PartitionKey],
    options: EvalOptions,
    ea_crs_text: str,
    signature: str,
    stratified: bool = False,
) -> dict:
    """The pairs phase of one partition: its own rows plus the halo read from storage.

    The results are written to ``workdir/pairs`` with a done record (the resolve phase
    reads them from there, and a rerun reuses them); the task returns their row counts.
    """
    inject_fault("pairs", storage.key_name(key))
    ea_crs = CRS.from_user_input(ea_crs_text)
    tile = options.partition_size_m
    tol = options.boundary_tolerance_m
    has_ref, has_pred = key in ref_info.partitions, key in pred_info.partitions
    # The source geometry serves only to reproject a row into another zone than its own
    # (the tolerance candidates are selected by the boxes stored with the partition):
    # only rows of partitions in another zone need it, and decoding it for the others
    # is wasted.
    everything = storage.GEOMETRY_COLUMNS
    lean = ("geom_ea", "geom_utm")
    # The home-zone boundaries feed numba kernels only (distances, tolerance), unless
    # the boundary IoU's bands are asked for (GEOS buffers): read them as flat rings then.
    # The equal-area geometry serves GEOS's covers and the area kernel: read both ways
    # (where candidate pairs are made: the own rows and the predictions' halo).
    flat = options.boundary_iou_width_m is None

    def geometries(j: PartitionKey) -> tuple[str, ...]:
        return lean if j[0] == key[0] else everything

    ref_pools = None
    if has_ref:
        ref_own, ref_strata, _ = storage.read_partition(
            Path(workdir), "reference", key, crs=ref_info.crs, equal_area_crs=ea_crs, partition_size_m=tile, geometries=lean,
            utm_as_rings=flat, ea_rings=True,
        )
        ref_pools = pool_ids(ref_strata.tolist(), stratified)
    else:
        ref_own = empty_layer("reference", crs=ref_info.crs, equal_area_crs=ea_crs, partition_size_m=tile)
    pred_own = _read(workdir, "predicted", key, pred_info, ea_crs, tile, geometries=lean, utm_as_rings=flat, ea_rings=True) if has_pred else empty_layer("predicted", crs=pred_info.crs, equal_area_crs=ea_crs, partition_size_m=tile)
    # The halo: rows of neighbouring partitions whose grown boxes reach this partition's
    # grown boxes (their union, the partition's reach box, was recorded when preparing).
    pred_near = [pred_own]
    if has_ref:
        ref_window = ref_info.partitions[key]["reach_box"]
        pred_near += [_read(workdir, "predicted", j, pred_info, ea_crs, tile, ref_window, geometries(j), flat, True) for j in pred_neighbours]
    ref_near = [ref_own]
    if has_pred and tol is not None:
        pred_window = pred_info.partitions[key]["reach_box"]
        ref_near += [_read(workdir, "reference", j, ref_info, ea_crs, tile, pred_window, geometries(j), flat) for j in ref_neighbours]
    results = compute_pairs(
        ref_own,
        _concat_layers(pred_near),
        pred_own=pred_own,
        ref_near=_concat_layers(ref_near),
        iou_threshold=options.iou_threshold,
        boundary_tolerance_m=tol,
        boundary_sample_spacing_m=options.boundary_sample_spacing_m,
        boundary_iou_width_m=options.boundary_iou_width_m,
        ref_pools=ref_pools,
    )
    storage.write_pair_results(Path(workdir) / "pairs", key, results, signature)
    return {"key": key, "n_pairs": len(results.pairs), "n_ref": len(results.ref_pos), "n_pred": len(results.pred_pos)}


def components_task(workdir: str, key: PartitionKey, signature: str, options: EvalOptions | None = None) -> dict:
    """The resolve's first step for one partition: label its connected components, name its halo connectors.

    Returns
    -------
    dict
        ``{"key", "n_labels", "connectors": (pos, label, min_ref), "units", "groups"}``: its
        halo predictions in its pairs only (:func:`evalcore.engine.components.label_partition`),
        with a block bootstrap in ``options`` its reference fields' units (unique), and with a
        field bootstrap the sizes of its fields' (pool, reporting tile) groups
        (:func:`evalcore.bootstrap.field_group_sizes`; their positions are written to
        :func:`storage.ref_positions_path` for the partitions sharing a group).
    """
    inject_fault("components", storage.key_name(key))
    results = _pair_results(workdir, key, signature)
    labels = label_partition(results)
    storage.write_labels(Path(workdir) / "resolve" / "labels", key, labels, results.pred_pos, signature)
    connectors = (labels.connector_pos, labels.connector_label, labels.connector_min_ref)
    units = None
    if options is not None and options.bootstrap > 0 and options.bootstrap_unit != "field":
        r = results
        units = np.unique(block_unit_keys(options, r.ref_utm_epsg, r.ref_tile_x, r.ref_tile_y, r.ref_aoi), axis=0)
    groups = None
    if options is not None and options.bootstrap > 0 and options.bootstrap_unit == "field":
        tiles = _ref_tiles(results)
        storage.write_ref_positions(Path(workdir), key, results.ref_pos, results.ref_pool, tiles, signature)
        groups = field_group_sizes(results.ref_pool, tiles)
    return {"key": key, "n_labels": labels.n_labels, "connectors": connectors, "units": units, "groups": groups}


def _ref_tiles(results: object) -> np.ndarray:
    """The reporting tile (EPSG, tile x, tile y) of each reference field of some pair results."""
    return np.stack([results.ref_utm_epsg, results.ref_tile_x, results.ref_tile_y], axis=1).astype(np.int64).reshape(-1, 3)


def group_draws_task(workdir: str, pool: int, tiles: np.ndarray, sizes: np.ndarray, n_replicates: int, seed: int,
                     signature: str) -> dict:
    """A field bootstrap pool's split of each replicate's draws over its reporting tiles,
    written to :func:`storage.group_draws_path` for the sums tasks.

    The multinomial of :func:`evalcore.bootstrap.draw_pool_counts` (the same generator,
    tiles in sorted order: the bits of :func:`evalcore.bootstrap.partition_groups_draws`),
    made on a worker so that no group's counts pass through the client.

    Parameters
    ----------
    pool : int
        The pool (:func:`evalcore.bootstrap.pool_id`).
    tiles : ndarray of int64, shape (n, 3)
        The pool's reporting tiles (EPSG, tile x, tile y).
    sizes : ndarray of int64, shape (n,)
        The run's reference fields of the pool in each tile (added up over the partitions).

    Returns
    -------
    dict
        ``{"pool", "n_tiles", "path"}``.
    """
    inject_fault("group-draws", str(int(pool)))
    tiles = np.asarray(tiles, np.int64).reshape(-1, 3)
    keys, n_fields, counts = draw_pool_counts(int(pool), dict(zip(map(tuple, tiles.tolist()), np.asarray(sizes).tolist())),
                                              n_replicates, seed)
    path = storage.write_group_draws(Path(workdir), int(pool), np.asarray(keys, np.int64).reshape(-1, 3), n_fields, counts,
                                     signature)
    return {"pool": int(pool), "n_tiles": len(keys), "path": str(path)}


def _group_counts(workdir: str, key: PartitionKey, sizes: dict, n_replicates: int, signature: str) -> dict:
    """``{(pool, tile): (size, counts)}`` of a partition's field bootstrap groups, the counts
    (int64, shape (n_replicates,)) read from the files of their pools holding their tiles
    (:func:`group_draws_task`, :func:`storage.read_group_draws`).

    ``sizes`` is ``{(pool, tile): n}``, the run's size of each group (the client's sum).
    A pool's index or file missing, changed, of another run, without one of the groups, with another
    size for one (stale) or with fewer or more replicates (short) is a
    :class:`PartitionMissingError` naming the file and the partition.
    """
    out: dict = {}
    by_pool: dict = {}
    for (pool, tile), n in sizes.items():
        by_pool.setdefault(int(pool), []).append((tuple(int(v) for v in tile), int(n)))
    for pool in sorted(by_pool):
        path = storage.group_draws_path(Path(workdir), pool)
        found = storage.read_group_draws(Path(workdir), pool, signature, [tile for tile, _ in by_pool[pool]])
        where = f"partition {storage.key_name(key)}: the field bootstrap counts of pool {pool} ({path})"
        if found is None:
            raise PartitionMissingError(f"{where} are missing or do not match their checksums; rerun to recompute them.")
        tiles, tile_sizes, counts = found
        if counts.ndim != 2 or counts.shape != (n_replicates, len(tiles)) or len(tile_sizes) != len(tiles):
            raise PartitionMissingError(f"{where} hold {counts.shape} counts for {len(tiles)} tiles and {n_replicates} "
                                        "replicates; rerun to recompute them.")
        column = {tuple(t): j for j, t in enumerate(tiles.tolist())}
        for tile, n in sorted(by_pool[pool]):
            j = column.get(tile)
            if j is None or int(tile_sizes[j]) != n:
                held = "none" if j is None else int(tile_sizes[j])
                raise PartitionMissingError(f"{where} are stale: reporting tile {tile} holds {held} fields there but "
                                            f"{n} in this run; rerun to recompute them.")
            out[(pool, tile)] = (n, counts[:, j].astype(np.int64))
    return out


def _field_draws(workdir: str, key: PartitionKey, results: object, field_groups: tuple | None, options: EvalOptions,
                 signature: str) -> RowDraws:
    """A partition's field bootstrap draws, made here (:func:`evalcore.bootstrap.partition_field_draws`)
    from its groups' counts (read from their pools' files, :func:`_group_counts`) and the
    positions of the other partitions holding fields of its groups.

    ``field_groups`` is ``({(pool, tile): size}, [partition keys])``: the run's size of each
    of its groups and the partitions sharing them (none: no positions are read).
    """
    if field_groups is None:
        raise ValueError("a field bootstrap resolved on the workers needs its groups' sizes")
    sizes, holders = field_groups
    groups = _group_counts(workdir, key, sizes, options.bootstrap, signature)
    others = [storage.read_ref_positions(Path(workdir), tuple(k), signature) for k in holders]
    try:
        return partition_field_draws(results.ref_pos, results.ref_pool, _ref_tiles(results), groups, others,
                                     options.bootstrap, options.bootstrap_seed)
    except ValueError as exc:
        names = ", ".join(storage.key_name(tuple(k)) for k in holders) or "none"
        raise PartitionMissingError(
            f"partition {storage.key_name(key)}: its field bootstrap groups do not add up with the positions of "
            f"partitions {names}: {exc}"
        ) from exc


def _partition_draws(workdir: str, key: PartitionKey, results: object, options: EvalOptions, signature: str,
                     field_groups: tuple | None, block_units: np.ndarray | None) -> RowDraws | None:
    """The bootstrap draws of a partition's reference fields resolved on the workers (None
    without a bootstrap): field draws from its groups' counts (:func:`_field_draws`), block
    draws from the run's units and the seed (as :func:`evalcore.bootstrap.block_draws` makes them)."""
    if options.bootstrap <= 0:
        return None
    if options.bootstrap_unit == "field":
        return _field_draws(workdir, key, results, field_groups, options, signature)
    if block_units is None:
        raise ValueError("a bootstrap resolved on the workers needs the run's units (block draws)")
    r = results
    own = block_unit_keys(options, r.ref_utm_epsg, r.ref_tile_x, r.ref_tile_y, r.ref_aoi)
    return block_draws(options.bootstrap_unit, block_units, _unit_index(block_units, own), options.bootstrap,
                       options.bootstrap_seed).rows(np.arange(len(own)))


def seam_labels_task(workdir: str, key: PartitionKey, asked: np.ndarray, signature: str) -> tuple:
    """The own side of one partition's seam connectors: which of the halo predictions of the
    partitions that read its predictions (``asked``) are its own, and their components
    (:func:`evalcore.engine.components.own_connectors`)."""
    inject_fault("seams", storage.key_name(key))
    labels = storage.read_labels(Path(workdir) / "resolve" / "labels", key, signature, own=True)
    if labels is None:
        raise PartitionMissingError(f"partition {storage.key_name(key)}: its component labels are missing or do not match their checksums")
    return own_connectors(*labels, asked)


def without_draws(options: EvalOptions) -> EvalOptions:
    """The options of a resolve of some components: the same, without a bootstrap (the run's
    draws are made from the run's units, not from the components', and nothing a resolve
    hands on depends on them)."""
    return EvalOptions({**options.as_dict(), "bootstrap": 0})


def _pair_results(workdir: str, key: PartitionKey, signature: str) -> object:
    results = storage.read_pair_results(Path(workdir) / "pairs", key, signature)
    if results is None:
        raise PartitionMissingError(f"partition {storage.key_name(key)}: its pairs output is missing or does not match its checksums")
    return results


def _labels(workdir: str, key: PartitionKey, signature: str) -> tuple[np.ndarray, np.ndarray]:
    labels = storage.read_labels(Path(workdir) / "resolve" / "labels", key, signature)
    if labels is None:
        raise PartitionMissingError(f"partition {storage.key_name(key)}: its component labels are missing or do not match their checksums")
    return labels


def resolve_task(
    workdir: str,
    key: PartitionKey,
    given_away: np.ndarray,
    borrowed: dict,
    options: EvalOptions,
    strata_names: list[str] | None,
    sizes: object,
    signature: str,
    with_preds: bool = False,
) -> dict:
    """The resolve of the components one partition owns, on a worker.

    Its own components but those another partition resolves (``given_away``), and the
    seam components it owns, from the pairs of every partition they span (``borrowed``:
    ``{partition: labels}``), are resolved as one run (:func:`evalcore.engine.resolve.resolve_run`;
    components do not interact, so each gets the values a resolve of the whole run gives
    it). Writes, per partition holding reference fields of these pairs, its share
    (per-pair values and contributions, :func:`storage.write_share`), and the homeless
    predictions' rows, to ``workdir/resolve/by-<key>/``, with a done record; with
    ``with_preds``, also each partition's predictions' rows of the per-prediction frame
    (:func:`storage.write_frame`), for the per-prediction table.

    Returns
    -------
    dict
        ``{"key", "n_pairs", "n_homeless", "shares": {partition: path}, "homeless": path}``.
    """
    name = storage.key_name(key)
    inject_fault("resolve", name)
    own = _pair_results(workdir, key, signature)
    pair_label, pred_label = _labels(workdir, key, signature)
    kept = np.setdiff1d(np.union1d(pair_label, pred_label), np.asarray(given_away, np.int64))
    sources = [key, *sorted(borrowed)]
    parts = [(own, pair_label, pred_label, kept)]
    for source in sources[1:]:
        parts.append((_pair_results(workdir, source, signature), *_labels(workdir, source, signature), np.asarray(borrowed[source], np.int64)))
    results, ref_part, pred_part = component_results(parts)
    del parts, own
    # The draws are the run's, not these components' (a block bootstrap's are made from the
    # run's units by the homeless and sums tasks): none here, and nothing here depends on them.
    resolved = resolve_run(results, without_draws(options), None, strata_names, sizes, run_level=False)
    # Each pair and contribution goes to its reference field's partition (route()).
    held, renumbered = np.unique(ref_part, return_inverse=True)
    routing = route(results.ref_pos, np.asarray(renumbered).ravel(), len(held), results.pairs.ref_pos, resolved.contributions.ref_pos)
    out = wd.local(Path(workdir) / "resolve" / f"by-{name}")
    out.mkdir(parents=True, exist_ok=True)
    shares: dict = {}
    for i, source in enumerate(held.tolist()):
        rows = routing.pair_rows[i]
        shares[sources[source]] = str(storage.write_share(
            out / f"to-{storage.key_name(sources[source])}.arrays", results.pairs.ref_pos[rows], results.pairs.pred_pos[rows],
            {n: v[rows] for n, v in resolved.pair_values.items()}, resolved.contributions.take(routing.contribution_rows[i]),
        ))
    at = np.searchsorted(results.pred_pos, resolved.homeless_pos)
    tiles = np.stack([results.pred_utm_epsg, results.pred_tile_x, results.pred_tile_y], axis=1)[at]
    homeless = storage.write_homeless(out / "homeless.arrays", resolved.homeless_pos, resolved.homeless_rows, resolved.columns, tiles,
                                      results.pred_aoi[at])
    preds: dict = {}
    if with_preds:
        for source in np.unique(pred_part).tolist():
            rows = np.flatnonzero(pred_part == source)
            preds[sources[source]] = storage.write_frame(out / f"preds-{storage.key_name(sources[source])}.parquet",
                                                         resolved.preds.iloc[rows])
    # The families' run-level rows (the scores': score, COCO true positives, error, stratum
    # of every prediction resolved here) and, for the score ranges, a sample of the scores.
    run_level_rows = dict(resolved.run_level_rows)
    if "scores" in run_level_rows and options.bootstrap > 0:
        scores = run_level_rows["scores"]
        run_level_rows["scores"] = {**scores, **_score_draw_keys(scores["pos"], resolved.preds, results, ref_part, sources, options)}
    run_level = {name: storage.write_summary(out / f"run-level-{name}.arrays", rows) for name, rows in run_level_rows.items()}
    sample: list[float] = []
    if "scores" in resolved.run_level_rows:
        score = np.sort(resolved.run_level_rows["scores"]["score"])
        sample = score[np.round(np.linspace(0, len(score) - 1, min(len(score), SCORE_SAMPLE))).astype(np.int64)].tolist()
    listing = {"shares": {storage.key_name(k): Path(v).name for k, v in shares.items()}, "n_pairs": len(results.pairs),
               "n_homeless": len(resolved.homeless_pos), "with_preds": with_preds,
               "preds": {storage.key_name(k): v.name for k, v in preds.items()},
               "run_level": {name: path.name for name, path in run_level.items()}, "score_sample": sample}
    meta = out / "listing.json"
    atomic_path(meta, lambda tmp: tmp.write_text(json.dumps(listing)))
    wd.publish(meta)
    storage.write_done_record(out.with_suffix(".done.json"), signature,
                              [*map(Path, shares.values()), *preds.values(), *run_level.values(), homeless, meta], base=out)
    return resolve_done(out, listing)


def _score_draw_keys(pos: np.ndarray, preds: pd.DataFrame, results: object, ref_part: np.ndarray, sources: list,
                     options: EvalOptions) -> dict[str, np.ndarray]:
    """What weighs the score rows ``pos`` in the bootstrap's replicates: each one's home
    reference position (-1: none), the partition holding it (``home_key``, zeros without
    a home), and with a block bootstrap the unit it counts in (``unit``: its home's, or its
    own centroid's without a home, as :func:`evalcore.engine.resolve.run_draws` keys it)."""
    at = index_of(preds.index.to_numpy(np.int64), np.asarray(pos, np.int64))
    home = preds["home_ref_pos"].to_numpy(np.int64)[at]
    has = home >= 0
    home_key = np.zeros((len(pos), 3), np.int64)
    if has.any():
        held = np.asarray(ref_part).ravel()[index_of(results.ref_pos, home[has])]
        home_key[has] = np.asarray([tuple(k) for k in sources], np.int64).reshape(-1, 3)[held]
    if options.bootstrap_unit == "field":
        unit = np.zeros((len(pos), 0), np.int64)
    else:
        unit = block_unit_keys(options, *(preds[c].to_numpy(np.int64)[at] for c in ("tile_epsg", "tile_x", "tile_y", "aoi")))
    # Already (n, width): a reshape with -1 cannot infer the width of no rows.
    return {"home": home, "home_key": home_key, "unit": np.asarray(unit, np.int64)}


def resolve_done(out: Path, listing: dict) -> dict:
    """What :func:`resolve_task` returns, from its listing (also read back when a finished resolve is reused)."""
    return {
        "key": storage.parse_key_name(out.name[len("by-"):]),
        "n_pairs": listing["n_pairs"],
        "n_homeless": listing["n_homeless"],
        "shares": {storage.parse_key_name(k): str(out / v) for k, v in listing["shares"].items()},
        "homeless": str(out / "homeless.arrays"),
        "with_preds": bool(listing.get("with_preds")),
        "preds": {storage.parse_key_name(k): str(out / v) for k, v in listing.get("preds", {}).items()},
        "run_level": {name: str(out / v) for name, v in listing.get("run_level", {}).items()},
        "score_sample": listing.get("score_sample", []),
    }


def _score_rows(path: Path, what: str, n: int | None = None) -> ScoreRows:
    return _score_arrays(path, what, n)[0]


DRAW_KEYS = ("home", "home_key", "unit")
"""The score rows' arrays that weigh them in the bootstrap's replicates (:func:`_score_draw_keys`)."""


def _score_arrays(path: Path, what: str, n: int | None = None, keys: tuple[str, ...] = ()) -> tuple[ScoreRows, dict]:
    """Score rows a score task reads from the work directory (:meth:`ScoreRows.from_arrays`).

    A file that is missing, cannot be read, or does not hold the ``n`` predictions
    written there is a :class:`PartitionMissingError` naming ``what`` (the partition or
    score range it belongs to) and the file: the run stops rather than compute curves
    from part of the predictions.
    """
    try:
        a = storage.read_summary(path)
        rows = ScoreRows.from_arrays(a)
        lengths = {len(rows.pos), len(rows.score), rows.tp.shape[1], len(rows.error), len(rows.group), *(len(a[k]) for k in keys)}
    except FileNotFoundError:
        raise PartitionMissingError(f"{what} ({path}) is missing") from None
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise PartitionMissingError(f"{what} ({path}) cannot be read ({type(exc).__name__}: {exc})") from None
    if len(lengths) != 1:
        raise PartitionMissingError(f"{what} ({path}) is not whole (its columns have {sorted(lengths)} rows)")
    if n is not None and len(rows) != n:
        raise PartitionMissingError(f"{what} ({path}) holds {len(rows)} predictions but {n} were written there")
    return rows, {k: a[k] for k in keys}


def _range_name(k: int) -> str:
    """``range-3``: how a score range is named in its tasks' faults and errors."""
    return f"range-{k}"


def score_split_task(path: str, cuts: np.ndarray, out_dir: str, name: str, with_draws: bool = False) -> list[int] | tuple:
    """One resolve's score rows cut into the score ranges (``cuts``, decreasing;
    :func:`evalcore.metrics.score_ranges.range_of`): a file per non-empty range,
    ``<out_dir>/split-<name>-<range>.arrays``. Returns the rows per range.

    ``with_draws`` (a bootstrap): the rows keep what weighs them (:data:`DRAW_KEYS`), and
    the rows with a home go, with their home and range, to a file per partition holding
    their homes (``<out_dir>/homed-<name>-<partition>.arrays``, read by
    :func:`score_weights_task`); returns ``(rows per range, {partition key: rows})``.

    ``name`` is the resolving partition's; its resolve's score rows missing or unreadable
    are a :class:`PartitionMissingError` naming it and the file.
    """
    inject_fault("score-split", name)
    rows, extra = _score_arrays(Path(path), f"partition {name}: the score file of its resolve", keys=DRAW_KEYS if with_draws else ())
    which = range_of(rows.score, cuts)
    counts = np.bincount(which, minlength=len(cuts) + 1)
    for k in np.flatnonzero(counts).tolist():
        mine = np.flatnonzero(which == k)
        storage.write_summary(Path(out_dir) / f"split-{name}-{k}.arrays",
                              {**rows.take(mine).as_arrays(), **{c: v[mine] for c, v in extra.items()}})
    if not with_draws:
        return counts.tolist()
    homed: dict = {}
    home, home_key = extra["home"], extra["home_key"]
    # Field draws weigh a prediction by its home's draws, made by the home's partition; block
    # draws by its unit's, made from the run's units wherever they are needed.
    has = np.flatnonzero(home >= 0) if extra["unit"].shape[1] == 0 else np.empty(0, np.int64)
    keys, inverse = np.unique(home_key[has], axis=0, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    for i, key in enumerate(map(tuple, keys.tolist())):
        mine = has[inverse == i]
        storage.write_summary(Path(out_dir) / f"homed-{name}-{storage.key_name(key)}.arrays",
                              {"pos": rows.pos[mine], "home": home[mine], "range": which[mine]})
        homed[key] = len(mine)
    return counts.tolist(), homed


def _read_work_file(path: str | Path, what: str) -> dict:
    """The arrays of a work file another task wrote; one that cannot be read is a
    :class:`PartitionMissingError` naming ``what`` and the file."""
    try:
        return storage.read_summary(Path(path))
    except (OSError, ValueError, KeyError, EOFError) as exc:
        raise PartitionMissingError(f"{what} ({path}) cannot be read ({type(exc).__name__}: {exc})") from None


def score_weights_task(
    workdir: str, key: PartitionKey, homed: list[tuple[str, str, int]], out_dir: str, options: EvalOptions, signature: str,
    field_groups: tuple | None = None, block_units: np.ndarray | None = None,
) -> dict:
    """A reference partition's part of the bootstrap's replicate weights for the score ranges.

    Makes its fields' draws as its sums task makes them (:func:`_partition_draws`); each
    prediction homed in one of them weighs that field's draw count in every replicate.
    ``homed`` are ``(resolving partition, path, rows)``: the split tasks' files of the
    predictions homed here. Writes, per score range, their positions and weights
    (``<out_dir>/weights-<partition>-<range>.arrays``, replicates as columns, the smallest
    unsigned integer type holding them).

    Returns
    -------
    dict
        ``{"key", "n_ref": its fields' weight in each replicate (float64, n_replicates),
        "ranges": {range: rows written}}``.
    """
    name = storage.key_name(key)
    inject_fault("score-weights", name)
    results = _pair_results(workdir, key, signature)
    draws = _partition_draws(workdir, key, results, options, signature, field_groups, block_units)
    # (replicates, fields), small whole numbers, each field's replicates side by side: each
    # range's rows are then gathered as contiguous runs of bytes.
    weights = draws.draw_counts()
    n_ref = weights.sum(axis=1, dtype=np.float64)  # whole numbers: exact in any order
    handed = _hand_weights(workdir, name, results.ref_pos, weights) if options.bootstrap_unit == "field" else None
    parts = []
    for resolver, path, n in homed:
        a = _read_work_file(path, f"partition {name}: the homed score rows of partition {resolver}")
        if len(a["pos"]) != n:
            raise PartitionMissingError(f"partition {name}: {path} holds {len(a['pos'])} homed score rows but {n} were written there")
        parts.append(a)
    pos = np.concatenate([a["pos"] for a in parts]) if parts else np.empty(0, np.int64)
    home = np.concatenate([a["home"] for a in parts]) if parts else np.empty(0, np.int64)
    which = np.concatenate([a["range"] for a in parts]) if parts else np.empty(0, np.int64)
    try:
        columns = index_of(results.ref_pos, home)
    except KeyError:
        raise PartitionMissingError(f"partition {name}: some score rows are homed at reference fields it does not hold") from None
    written = {}
    for k in np.unique(which).tolist():
        mine = np.flatnonzero(which == k)
        w = np.ascontiguousarray(weights.T[columns[mine]])
        storage.write_summary(Path(out_dir) / f"weights-{name}-{k}.arrays", {"pos": pos[mine], "weights": w})
        written[int(k)] = len(mine)
    return {"key": key, "n_ref": n_ref, "ranges": written, "weights": handed}


HANDED_WEIGHTS_DIR = "handed-weights"
"""The work directory's folder of the field draws' weights a score weights task hands to its
partition's sums task (:func:`_hand_weights`)."""


def _hand_weights(workdir: str, name: str, positions: np.ndarray, counts: np.ndarray) -> str | None:
    """Write a partition's draw counts (:meth:`evalcore.bootstrap.RowDraws.draw_counts`) for
    its sums task, which would otherwise make the same field draws again (about a sixth of
    its time); the path,
    or None when the work directory is on a store (fetching them would cost more than
    drawing them) or a weight does not fit a byte."""
    if wd.is_remote(workdir) or counts.dtype != np.uint8:
        return None
    path = Path(workdir) / HANDED_WEIGHTS_DIR / f"{name}.arrays"
    path.parent.mkdir(parents=True, exist_ok=True)
    storage.write_summary(path, {"pos": np.asarray(positions, np.int64), "weights": counts})
    return str(path)


def _handed_weights(path: str, positions: np.ndarray, n_replicates: int) -> HandedWeights | None:
    """The weights :func:`_hand_weights` wrote for these reference positions, then removed;
    None when the file is gone, unreadable or of other rows (the caller draws them again:
    the same numbers)."""
    try:
        a = storage.read_summary(Path(path))
    except (OSError, ValueError, KeyError, EOFError):
        return None
    finally:
        Path(path).unlink(missing_ok=True)
    weights = a.get("weights")
    if (weights is None or weights.dtype != np.uint8 or weights.shape != (n_replicates, len(positions))
            or not np.array_equal(a.get("pos"), positions)):
        return None
    return HandedWeights(weights)


def score_range_task(
    splits: list[tuple[str, str, int]], out: str, n_groups: int, k: int, weights: list[tuple[str, str, int]] | None = None,
    options: EvalOptions | None = None, block_units: np.ndarray | None = None,
) -> RangeCounts | tuple[RangeCounts, ReplicateCounts]:
    """Score range ``k``: its rows from every resolve in score order, written to ``out``;
    returns its counts (:func:`evalcore.metrics.score_ranges.range_counts`).

    ``splits`` are ``(partition, path, rows)``: each resolve's split file for this range
    and the rows its split task reported. One missing, unreadable or holding other rows
    is a :class:`PartitionMissingError` naming the range, the partition and the file.

    With a bootstrap (``weights`` not None) the rows' replicate weights are written beside
    them (``weights``, rows x replicates) and their counts in every replicate returned too
    (:func:`evalcore.metrics.score_ranges.replicate_counts`): field draws from ``weights``,
    ``(partition, path, rows)`` of the :func:`score_weights_task` files for this range (a
    prediction without a home weighs 1); block draws from ``block_units``, the run's units.
    """
    inject_fault("score-range", _range_name(k))
    keys = DRAW_KEYS if weights is not None else ()
    parts = [_score_arrays(Path(path), f"score range {k}: the split file of partition {name}", n, keys) for name, path, n in splits]
    rows = ScoreRows.concat([p[0] for p in parts])
    order = np.lexsort((rows.pos, -rows.score))
    rows = rows.take(order)
    if weights is None:
        storage.write_summary(Path(out), rows.as_arrays())
        return range_counts(rows, n_groups)
    extra = {c: (np.concatenate([p[1][c] for p in parts]) if parts else np.empty((0,) if c == "home" else (0, 3), np.int64))[order]
             for c in DRAW_KEYS}
    w = _range_weights(rows, extra, weights, options, block_units, k)
    storage.write_summary(Path(out), {**rows.as_arrays(), "weights": w})
    return range_counts(rows, n_groups), replicate_counts(rows, w.T, n_groups)


def _range_weights(rows: ScoreRows, extra: dict, weights: list[tuple[str, str, int]], options: EvalOptions,
                   block_units: np.ndarray | None, k: int) -> np.ndarray:
    """Score range ``k``'s rows' weights in every replicate, rows x replicates (as
    :func:`evalcore.engine.resolve._pred_weight_stream` weighs every prediction).

    The matrix is made in its small integer type from the start, a file (field draws) or a
    block of rows (block draws) at a time: 250,000 rows x 1000 replicates is 250 MB as
    uint8 (a worker of the 10M run went above 2 GiB while it ran score ranges that made
    float64, concatenated and reordered copies of it).
    """
    B = options.bootstrap
    if len(rows) == 0:
        return np.zeros((0, B), np.uint8)
    if options.bootstrap_unit != "field":
        if block_units is None:
            raise ValueError("a block bootstrap of the score ranges needs the run's units")
        unit = extra["unit"].reshape(len(rows), -1)
        at = _unit_index(block_units, unit)
        if len(at) and (at.max() >= len(block_units) or not np.array_equal(block_units[at], unit)):
            raise PartitionMissingError(f"score range {k}: some predictions count in units the run does not hold")
        counts = whole_counts(block_draws(options.bootstrap_unit, block_units, np.empty(0, np.int64), B, options.bootstrap_seed).counts,
                               f"score range {k}")
        out = np.empty((len(rows), B), counts.dtype)
        for start, stop, block in WeightBlocks.of_units(counts, at).blocks():
            out[start:stop] = block.T
        return out
    out = np.ones((len(rows), B), np.uint8)  # a prediction without a home weighs 1 in every replicate
    homed = extra["home"] >= 0
    given = sum(n for _, _, n in weights)
    if given != int(homed.sum()):
        raise PartitionMissingError(f"score range {k}: {int(homed.sum())} predictions with a home but {given} weighed by their homes' partitions")
    by_pos = np.argsort(rows.pos, kind="stable")
    filled = np.zeros(len(rows), dtype=bool)
    for name, path, n in weights:
        a = _read_work_file(path, f"score range {k}: the weights file of partition {name}")
        if len(a["pos"]) != n or a["weights"].shape != (n, B):
            raise PartitionMissingError(f"score range {k}: the weights file of partition {name} ({path}) does not hold its {n} rows")
        try:
            at = by_pos[index_of(rows.pos[by_pos], a["pos"])]
        except KeyError:
            at = None
        if at is None or not homed[at].all() or filled[at].any():
            raise PartitionMissingError(f"score range {k}: the weights file of partition {name} ({path}) weighs predictions "
                                        "that are not this range's with a home, or that another file weighs")
        if a["weights"].dtype.itemsize > out.dtype.itemsize:
            out = out.astype(a["weights"].dtype)
        out[at] = a["weights"]
        filled[at] = True
    # The files' rows add up to the homed rows, each weighs only homed rows and none twice:
    # every homed row is filled.
    return out


def score_values_task(
    path: str, n: int, before: RangeCounts, total: RangeCounts, n_ref: int, score_threshold: float | None,
    precision_targets: tuple[float, ...] | None, out_dir: str, k: int, replicates: tuple | None = None,
) -> tuple[RangeValues, list[str]] | tuple[RangeValues, list[str], str]:
    """Score range ``k``'s share of the run-level score values, from the counts of the
    ranges ahead of it (:func:`evalcore.metrics.score_ranges.range_values`); writes its rows
    of the exact PR curve at each threshold (``<out_dir>/pr-<i>-<k>.parquet``) and returns
    them with the values.

    With a bootstrap, ``replicates`` is ``(counts ahead in every replicate, each replicate's
    reference count)``: the range's share of the replicates' AP and aurc
    (:func:`evalcore.metrics.score_ranges.replicate_shares`) goes to
    ``<out_dir>/replicates-<k>.arrays``, whose path is returned third.

    ``path`` is the range's rows as its range task wrote them, ``n`` how many it counted:
    a file missing, unreadable or holding another number is a
    :class:`PartitionMissingError` naming the range and the file.
    """
    inject_fault("score-values", _range_name(k))
    rows, extra = _score_arrays(Path(path), f"score range {k}: its rows file", n, ("weights",) if replicates is not None else ())
    values, pr_parts, _ = range_values(rows, before, total, n_ref, score_threshold, precision_targets)
    paths = [str(storage.write_table_part(Path(out_dir) / f"pr-{i}-{k}.parquet", part)) for i, part in enumerate(pr_parts)]
    if replicates is None:
        return values, paths
    before_b, n_refs = replicates
    shares = replicate_shares(rows, extra["weights"].T, before_b, n_refs)
    shared = storage.write_summary(Path(out_dir) / f"replicates-{k}.arrays",
                                   {"envelope": shares.envelope, "aurc_digits": shares.aurc_digits})
    return values, paths, str(shared)


def score_replicates_task(paths: list[str], total: ReplicateCounts, n_refs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every replicate's AP per threshold and aurc per risk group from every score range's
    share (:func:`evalcore.metrics.score_ranges.replicate_values`): a few numbers per
    replicate go back to the client, not the ranges' envelopes."""
    inject_fault("score-replicates", "all")
    merged = None
    for k, path in enumerate(paths):
        a = _read_work_file(path, f"score range {k}: its replicates file")
        if "envelope" not in a or "aurc_digits" not in a:
            raise PartitionMissingError(f"score range {k}: its replicates file ({path}) cannot be read (KeyError: no envelope)")
        share = ReplicateShares(a["envelope"], a["aurc_digits"])
        merged = share if merged is None else merged + share
    return replicate_values(merged, total, n_refs)


def homeless_task(paths: list[str], options: EvalOptions, ref_unit_keys: np.ndarray | None, units_path: str) -> tuple:
    """The run's unassigned sums and the homeless predictions' tile and AOI sums, from every
    resolve's homeless rows, added in position order (:func:`evalcore.engine.resolve.homeless_sums`);
    with a block bootstrap also their replicates and the run's units.

    The tile and AOI sums (units x replicates: they grow with the country) are written to
    ``units_path`` (:func:`storage.write_unit_sums`), not returned: the merge reads them.

    Returns
    -------
    unassigned, unassigned_replicates, unit_keys
        As :func:`evalcore.engine.resolve.homeless_sums`.
    """
    parts = [storage.read_homeless(Path(p)) for p in paths]
    columns = {c for _, _, c, _, _ in parts}
    if len(columns) != 1:
        raise PartitionMissingError(f"the resolves' homeless rows have different columns: {sorted(columns)}")
    unassigned, tiles, aois, replicates, keys = homeless_sums(
        np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), columns.pop(),
        np.concatenate([p[3] for p in parts]), np.concatenate([p[4] for p in parts]), options, ref_unit_keys,
    )
    storage.write_unit_sums(Path(units_path), tiles, aois)
    return unassigned, replicates, keys


def sums_task(
    workdir: str,
    key: PartitionKey,
    ref_info: LayerInfo,
    resolved_path: str | list[str],
    plan: RunPlan,
    options: EvalOptions,
    ea_crs_text: str,
    frame_dir: str | None,
    signature: str,
    id_column: str | None = None,
    aoi_keys: list[str] | None = None,
    pred_id_column: str | None = None,
    block_units: np.ndarray | None = None,
    field_groups: tuple | None = None,
    handed_weights: str | None = None,
) -> dict:
    """The sums phase of one partition: write its field table part and its partial sums.

    Resolved on the workers, ``resolved_path`` is the list of the shares the resolves
    wrote for it, and with a block bootstrap ``block_units`` the run's units (the draws
    are made here from them and the seed, as :func:`evalcore.bootstrap.block_draws` makes them);
    with a field bootstrap ``field_groups`` is ``(sizes, holders)``: the run's sizes of its
    fields' (pool, tile) groups, whose counts it reads from the pools' files, and the other
    partitions holding fields of them, whose positions rank its fields (:func:`_field_draws`).
    ``handed_weights`` is the file of those draws' weights its score weights task wrote
    (:func:`_hand_weights`): read instead of drawing again when it is there and of these
    fields, then removed.

    Reads the partition's own pairs phase output and what the resolve phase decided for
    it (per-pair values in the same (reference, prediction) order, the predictions'
    contributions and the bootstrap draws, :func:`storage.write_sums_input`) from the
    work directory.
    """
    inject_fault("sums", storage.key_name(key))
    ea_crs = CRS.from_user_input(ea_crs_text)
    results = _pair_results(workdir, key, signature)
    if isinstance(resolved_path, str):
        pair_values, contributions, draws = storage.read_sums_input(Path(resolved_path))
    else:
        # The resolve on the workers: the shares the resolves wrote for this partition.
        pair_values, contributions = _read_shares(key, resolved_path, results.pairs, options, plan, signature)
        draws = None
        if handed_weights is not None and options.bootstrap > 0:
            draws = _handed_weights(handed_weights, results.ref_pos, options.bootstrap)
        if draws is None:
            draws = _partition_draws(workdir, key, results, options, signature, field_groups, block_units)
    layer, strata, _, wkb = storage.read_partition(
        Path(workdir), "reference", key, crs=ref_info.crs, equal_area_crs=ea_crs, partition_size_m=options.partition_size_m,
        geometries=(), return_wkb=True,
    )
    refs = RefRows.of_layer(layer, strata, plan)
    summary, fields = summarize_partition(key, refs, results, pair_values, contributions, options, plan, draws)
    written = []
    if frame_dir is not None:
        table = field_table(
            fields,
            layer.labels,
            results.pred_labels(),
            strata_names=plan.strata_names,
            strata_codes=refs.strata_codes,
            size_keys=plan.sizes.keys if plan.sizes is not None else None,
            size_codes=refs.size_codes,
            tolerance_m=options.boundary_tolerance_m,
            aoi_keys=aoi_keys,
            boundary_iou=options.boundary_iou_width_m is not None,
            ref_class=layer.class_value if options.class_column is not None else None,
        )
        table = output_table(table, "fields", ref_id_column=id_column, pred_id_column=pred_id_column)
        written.append(wd.publish(write_geoparquet_wkb(wd.local(Path(frame_dir) / f"part-{storage.key_name(key)}.parquet"), table, wkb, ref_info.crs)))
    path = Path(workdir) / "sums" / f"{storage.key_name(key)}.arrays"
    written.append(storage.write_summary(path, storage.summary_to_arrays(summary)))
    # The gathered values stay here, sorted; the merge's selection rounds read them (select_task).
    written.append(storage.write_sorted_values(storage.values_path(path), summary.values))
    storage.write_done_record(path.with_suffix(".done.json"), signature, written, base=Path("/"))
    return {"key": key, "n_ref": summary.n_ref, "n_pred": summary.n_pred, "path": str(path)}


def select_task(sums_path: str, queries_path: str, columns: tuple[str, ...], n_groups: int) -> Answers:
    """One round of the order statistics' selection for one partition: its answers to the
    round's queries (:func:`storage.write_queries`) from its sorted values beside its sums
    output (:func:`evalcore.selection.answer`).

    ``columns`` and ``n_groups`` are what the client numbers its series by; sorted values
    made with other families or groupings are refused rather than misread.
    """
    name = Path(sums_path).name.split(".")[0]
    inject_fault("select", name)
    values = storage.read_sorted_values(storage.values_path(Path(sums_path)))
    if values.columns != tuple(columns) or values.n_groups != n_groups:
        raise PartitionMissingError(
            f"partition {name}: its sorted values hold columns {list(values.columns)} in {values.n_groups} groups, "
            f"but the merge wants {list(columns)} in {n_groups}; rerun to recompute it."
        )
    return answer(values, storage.read_queries(Path(queries_path)))


class SelectFailed(RuntimeError):
    """A partition's select task failed: the message names the partition."""


def select_tasks(sums_paths: list[str], queries_path: str, columns: tuple[str, ...], n_groups: int) -> list[Answers]:
    """:func:`select_task` for several partitions in turn: their answers in order.

    A round asks every partition a few small questions; one task a partition spent more
    of a round on the scheduler than on the answers (241 tasks a round at 2M fields).
    A failure names its partition (:class:`SelectFailed`), a missing or foreign file
    as :func:`select_task` does.
    """
    answers = []
    for path in sums_paths:
        try:
            answers.append(select_task(path, queries_path, columns, n_groups))
        except (EvalInputError, PartitionMissingError):
            raise
        except Exception as exc:
            raise SelectFailed(f"select failed for partition {Path(path).name.split('.')[0]}: {type(exc).__name__}: {exc}") from exc
    return answers


def _read_shares(key: PartitionKey, paths: list[str], pairs: object, options: EvalOptions, plan: RunPlan, signature: str):
    """The partition's per-pair values and contributions from the resolves' shares; a resolve
    whose output is missing or changed is named."""
    for path in paths:
        record = Path(path).parent.with_suffix(".done.json")
        if not storage.done_record_valid(record, signature):
            resolver = Path(path).parent.name[len("by-"):]
            raise PartitionMissingError(
                f"partition {resolver}: its resolve output is missing or does not match its checksums; rerun to recompute it."
            )
    # The names and dtypes of every per-pair value and contribution column: an empty resolve's.
    empty = resolve_run(component_results([])[0], without_draws(options), None, plan.strata_names, plan.sizes)
    try:
        return storage.read_shares([Path(p) for p in paths], pairs, (empty.pair_values, empty.contributions))
    except PartitionMissingError as exc:
        raise PartitionMissingError(f"partition {storage.key_name(key)}: {exc}") from exc


def predictions_task(
    workdir: str,
    key: PartitionKey,
    pred_info: LayerInfo,
    preds: pd.DataFrame | list[str],
    out_dir: str,
    aoi_keys: list[str] | None,
    annotated: bool,
    id_column: str | None = None,
    scored: bool = False,
    boundary_iou: bool = False,
    classed: bool = False,
    ref_id_column: str | None = None,
) -> dict:
    """Write the per-prediction table part of one partition's predictions (with their geometry).

    ``preds`` is their rows of the per-prediction frame, or (resolved on the workers) the
    paths of the frames the resolves wrote for this partition.
    """
    inject_fault("predictions", storage.key_name(key))
    if isinstance(preds, list):
        frames = [storage.read_frame(Path(p)) for p in preds]
        preds = pd.concat(frames).sort_index() if frames else pd.DataFrame()
    positions, wkb = storage.read_source_wkb(Path(workdir), "predicted", key)
    if not np.array_equal(positions, preds.index.to_numpy(np.int64)):
        raise PartitionMissingError(f"partition {storage.key_name(key)}: its prepared predictions differ from those resolved")
    table = prediction_table(preds, aoi_keys=aoi_keys, annotated=annotated, scored=scored, boundary_iou=boundary_iou,
                             classed=classed)
    table = output_table(table, "predictions", ref_id_column=ref_id_column, pred_id_column=id_column)
    path = wd.publish(write_geoparquet_wkb(wd.local(Path(out_dir) / f"part-{storage.key_name(key)}.parquet"), table, wkb, pred_info.crs))
    return {"key": key, "n_pred": len(table), "path": str(path)}


def pixels_task(
    workdir: str, tiles: np.ndarray, ref_info: LayerInfo, pred_info: LayerInfo, options: EvalOptions, ea_crs_text: str,
    annotated: object = None,
) -> dict:
    """Pixel counts of some nearby reporting tiles: the polygons that reach them, read by window from every partition."""
    from evalcore.crs import transform_xy, utm_crs
    from evalcore.pixels import count_tiles, tile_region

    inject_fault("pixels", "_".join(map(str, tiles[0].tolist())) if len(tiles) else "none")
    ea_crs = CRS.from_user_input(ea_crs_text)
    side = float(options.tile_km) * 1000.0
    xs, ys = [], []
    for epsg, x, y in tiles.tolist():
        region = shapely.segmentize(tile_region(epsg, x, y, side, options.pixel_gsd_m, options.pixel_tolerance_px), side / 8)
        coords = shapely.get_coordinates(region)
        ex, ey = transform_xy(coords[:, 0], coords[:, 1], utm_crs(epsg), ea_crs)
        xs += [ex.min(), ex.max()]
        ys += [ey.min(), ey.max()]
    margin = side / 8  # the region's edges were sampled every side / 8: their bulge in the equal-area CRS is far smaller
    window = (min(xs) - margin, min(ys) - margin, max(xs) + margin, max(ys) + margin)
    geoms = {}
    for role, info in (("reference", ref_info), ("predicted", pred_info)):
        parts = []
        for key, p in info.partitions.items():
            if boxes_overlap(p["box"], window):
                layer, _, _ = storage.read_partition(
                    Path(workdir), role, key, crs=info.crs, equal_area_crs=ea_crs, partition_size_m=options.partition_size_m,
                    window=window, geometries=("geometry",),
                )
                parts.append(layer.geoms_source)
        geoms[role] = np.concatenate(parts) if parts else np.empty(0, dtype=object)
    counts = count_tiles(tiles, geoms["reference"], ref_info.crs, geoms["predicted"], pred_info.crs, options, annotated)
    return {key: value for key, value in counts.items()}
