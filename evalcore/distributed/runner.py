"""One evaluation as many partitions on a Dask cluster, merged into the single-process answer.

The client phases. Each is a function from frozen values to frozen values
(:mod:`evalcore.distributed.values`), so none can run before its input exists and an
orchestrator (the Prefect flow) passes the values along:

* :func:`evalcore.distributed.staging.start_run` -> :class:`RunSetup` (signature, work
  directory);
* :func:`prepare_phase` -> :class:`RunIndex`: input chunks are prepared on the workers
  and written to the work directory partitioned by key (UTM zone, tile x, tile y); the
  client keeps only a small index (row counts and boxes per partition);
* :func:`plan_phase` -> :class:`~evalcore.options.RunPlan` (groupings, bootstrap draws);
* :func:`pairs_phase` -> :class:`PairsDone`: one task per partition reads its own rows
  and the halo rows of its neighbours from storage and writes its pairs, IoU, boundary
  distances of eligible pairs and tolerance lengths back;
* :func:`resolve_phase` -> :class:`ResolvedRun`: the matching and homes, the families'
  per-pair values, the contributions and the routing (:func:`evalcore.engine.resolve.route`).
  Where :func:`resolves_on_workers` allows (no run-level family but the scores; a paired
  comparison's units too), on the workers by connected components
  (:func:`_resolve_on_workers`: ``components-<key>`` tasks return seam connectors, the
  client unions them into seam components with one owner each, ``resolve-<key>`` tasks
  resolve what each partition owns and write every partition's share, a ``homeless``
  task adds the homeless predictions in position order; the scores' AP, PR curves and
  risk-coverage, and their bootstrap replicates, by score ranges, :func:`_scores_on_workers`); otherwise on the client
  from every partition's pairs;
* :func:`sums_phase` -> :class:`SumsDone`: one task per partition reads its share(s) of
  the resolve and writes its per-field table part and its partial sums;
* :func:`merge_phase` -> the summary dict: checks that every partition is there with the
  row counts the index expects, and adds them in key order; the medians and quantiles
  are selected by rounds of tasks over the partitions' sorted values
  (:mod:`evalcore.distributed.order`).

The functions submitted to the workers are in :mod:`evalcore.distributed.tasks`.
Geometries never travel through the scheduler: tasks receive paths, keys and small
arrays, and return small dicts. Task keys name the phase and partition
(``pairs-32613-7-41-<run>``) so the dashboard's task stream is readable.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from evalcore.bootstrap import PartitionKey, RunDraws
from evalcore.distributed import storage
from evalcore.distributed import workdir as wd
from evalcore.distributed.order import select_on_partitions
from evalcore.distributed.reliability import PartitionMissingError
from evalcore.distributed.sources import Chunk, LayerSource, plan_chunks
from evalcore.distributed.staging import STAGED_STRATA_COLUMN, check_workers_see, stage_layer, start_run
from evalcore.distributed.tasks import (
    HANDED_WEIGHTS_DIR,
    components_task,
    group_draws_task,
    homeless_task,
    pairs_task,
    pixels_task,
    predictions_task,
    prepare_chunk_task,
    resolve_done,
    resolve_task,
    score_range_task,
    score_replicates_task,
    score_split_task,
    score_values_task,
    score_weights_task,
    seam_labels_task,
    sums_task,
    without_draws,
)
from evalcore.distributed.values import (
    LAYERS,
    Box,
    PairsDone,
    PredictionsPending,
    ProgressCallback,
    ResolvedRun,
    RunIndex,
    RunOutcome,
    RunSetup,
    SumsDone,
)
from evalcore.engine.pairing import concat_pair_results
from evalcore.engine.components import seam_plan
from evalcore.engine.resolve import Resolved, resolve_run, route
from evalcore.engine.sums import MergedSums, merge_partitions
from evalcore.errors import EvalInputError
from evalcore.options import EvalOptions, RunPlan, make_run_plan
from evalcore.metrics.base import MetricFamily
from evalcore.metrics.classes import class_layer_columns
from evalcore.metrics.registry import enabled_families
from evalcore.levels import Sites, aois_frame, prepare_sites, tiles_frame
from evalcore.study import prepare_study
from evalcore.sites import ANNOTATED_AREA, AOI, SITE_LAYERS
from evalcore.arrays import index_of
from evalcore.layer_warnings import extent_of
from evalcore.summary import LayerTally, level_tables, run_summary
from evalcore.threads import map_each
from evalcore.writers import atomic_path, write_json, write_table

__all__ = [
    "prepare_phase",
    "plan_phase",
    "pairs_phase",
    "resolves_on_workers",
    "resolve_phase",
    "sums_phase",
    "merge_sums",
    "merge_phase",
    "pixels_phase",
    "summary_of",
    "run_phases",
    "finish_predictions",
    "phase_timings",
    "run_distributed",
]

logger = logging.getLogger(__name__)


CHUNKS_PER_THREAD = 3
"""Prepare chunks per worker thread when the layers are small enough to need cutting."""


MIN_CHUNK_ROWS = 5_000
"""Smallest prepare chunk: below this the per-chunk cost (one file per partition) dominates."""


def _gather(setup: RunSetup, phase: str, futures: dict, show: bool = True) -> dict:
    """Wait for futures keyed by partition, reporting progress (unless not ``show``); re-raise a failure naming it."""
    from distributed import as_completed

    total = len(futures)
    # prepare works on input chunks, the scores' range and values tasks on score ranges
    unit = {"prepare": "chunk", "score-range": "score range", "score-values": "score range", "group-draws": "pool"}.get(phase, "partition")
    by_future = {f: k for k, f in futures.items()}
    out = {}
    done = 0
    progress = setup.progress if show else None
    if progress:
        progress(phase, 0, total)
    # The keys (up to 20, ~300 characters) only on this module's logger: the run's log
    # file keeps them and -v shows them; the terminal's line per phase is ``progress``.
    names = [_partition_name(k) for k in futures]
    logger.info("%s: %d %ss running: %s%s", phase, total, unit, ", ".join(names[:20]), " …" if total > 20 else "")
    pending = list(futures.values())
    # The futures' own client's loop: as_completed would otherwise look for a default
    # client, and a caller's Client(..., set_as_default=False) is not one.
    waiting = as_completed(pending, loop=pending[0].client.loop) if pending else ()
    for future in waiting:
        k = by_future[future]
        try:
            out[k] = future.result()
        except Exception as exc:
            for other in futures.values():
                other.cancel()
            if isinstance(exc, EvalInputError):
                raise  # already names the file, layer, row or column
            name = _partition_name(k)
            # A missing or broken work file stays a PartitionMissingError (still a RuntimeError).
            error = PartitionMissingError if isinstance(exc, PartitionMissingError) else RuntimeError
            raise error(f"{phase} failed for {unit} {name}: {type(exc).__name__}: {exc}") from exc
        done += 1
        if progress:
            progress(phase, done, total)
        # A line per partition (thousands on a national run) only on this module's logger:
        # the log file keeps it and -v shows it; ``setup.log`` gets a line per phase.
        logger.info("%s: %s %s done (%d/%d)", phase, unit, _partition_name(k), done, total)
    return out


def _threads(client: object) -> int:
    try:
        return max(1, sum(client.nthreads().values()))
    except Exception:  # a client without workers yet: plan for one
        return 1


def _balanced_chunks(client: object, setup: RunSetup) -> list[tuple[LayerSource, Chunk]]:
    """The prepare chunks: at most ``chunk_rows`` rows each, and small enough that every
    worker thread gets :data:`CHUNKS_PER_THREAD` of them (not below :data:`MIN_CHUNK_ROWS`).

    With 50,000-row chunks a 50,000-field layer would be one task, and one worker
    would prepare it while the others wait.
    """
    sources = (setup.reference, setup.predicted)
    planned = [(source, chunk) for source in sources for chunk in plan_chunks(source, setup.chunk_rows)]
    wanted = -(-sum(c.n_rows for _, c in planned) // (CHUNKS_PER_THREAD * _threads(client)))
    rows = int(min(setup.chunk_rows, max(MIN_CHUNK_ROWS, wanted)))
    if rows == setup.chunk_rows:
        return planned
    return [(source, chunk) for source in sources for chunk in plan_chunks(source, rows)]


def prepare_phase(client: object, setup: RunSetup) -> RunIndex:
    """Phase 1: prepare both layers in chunks on the workers; build the run index.

    A previous run's prepared partitions are reused when the work directory's record
    names the same signature and every chunk file still has its checksum.
    """
    started = time.perf_counter()
    site_layers = {kind.what: getattr(setup.options, kind.option) for kind in SITE_LAYERS
                   if isinstance(getattr(setup.options, kind.option), str)}
    check_workers_see(
        client,
        {"predicted layer": setup.predicted.path, "reference layer": setup.reference.path,
         "work directory": wd.url_of(setup.workdir) or setup.workdir} | site_layers,
    )
    index_path = setup.workdir / "prepared" / "index.json"
    record = setup.workdir / "prepared" / "done.json"
    # The site layers, study area and training area are prepared once, on the workers: their
    # grid pieces are a cell index and boundary pieces (and the study area's union, by block)
    # written to the work directory, read by extent (evalcore.site_cells). Cutting a country's
    # annotated area was the client's largest step (1.6 GiB at 10M fields' extent); the
    # prepare tasks take the layers from the worker that made them, and the client keeps a
    # copy without the equal-area polygons (Sites.kept_on_client).
    options, store = setup.options, setup.workdir / "sites"
    # The AOIs and the annotated area side by side, on two tasks (each cuts its own
    # union; 3.6 and 4.5 s at the 2M benchmark's extent, 8.4 s in one task).
    aois_future, annotated_future = (
        client.submit(prepare_sites, options, options.equal_area_crs, store, (kind.option,),
                      key=setup.task_key("site-layers", kind.option), retries=2) for kind in (AOI, ANNOTATED_AREA)
    )
    sites_future = client.submit(Sites.joined, aois_future, annotated_future, key=setup.task_key("site-layers", "sites"), retries=2)
    study_future = client.submit(prepare_study, options, options.equal_area_crs, store, key=setup.task_key("site-layers", "study"),
                                 retries=2)
    sites = client.submit(Sites.kept_on_client, sites_future, key=setup.task_key("site-layers", "client")).result()
    study = study_future.result()
    if storage.done_record_valid(record, setup.signature) and wd.exists(index_path):
        if setup.log:
            setup.log("prepare: reusing the prepared partitions of the interrupted run (checksums verified)")
        return RunIndex(storage.index_from_json(json.loads(wd.fetch(index_path).read_text())), True, time.perf_counter() - started, sites, study)
    wd.remove_tree(setup.workdir / "prepared")
    futures = {}
    planned = _balanced_chunks(client, setup)
    # Largest first (and submitted in that order: a free worker takes the first task
    # that arrives), so the phase does not end waiting on one big chunk.
    planned.sort(key=lambda sc: -sc[1].weight)
    for source, chunk in planned:
        futures[(source.role, chunk.index)] = client.submit(
            prepare_chunk_task,
            source,
            chunk,
            str(setup.workdir),
            options.equal_area_crs,
            options.partition_size_m,
            options.boundary_tolerance_m,
            setup.strata_column,
            # The reference's rows are located in the AOIs only (the annotated fraction is the
            # predictions'): its chunks start when the AOIs are cut, not when both are.
            sites_future if source.role == "predicted" else aois_future,
            options.score_column,
            study_future,
            class_layer_columns(options),
            key=setup.task_key("prepare", source.role, chunk.index),
            retries=2,
            priority=chunk.weight,  # largest first, so the last task to finish is a small one
        )
    entries = _gather(setup, "prepare", futures)
    index: dict = {}
    for role in LAYERS:
        chunks = [entries[k] for k in sorted(k for k in entries if k[0] == role)]
        crs_texts = {c["crs"] for c in chunks if c["crs"] is not None}
        if len(crs_texts) > 1:
            raise EvalInputError(f"The {role} layer's chunks disagree on their CRS.")
        partitions: dict[PartitionKey, dict] = {}
        for c in chunks:
            for key, p in c["partitions"].items():
                merged = partitions.setdefault(key, {"n": 0, "box": p["box"], "reach_box": p["reach_box"], "strata": {}})
                merged["n"] += p["n"]
                merged["box"] = _union(merged["box"], p["box"])
                merged["reach_box"] = _union(merged["reach_box"], p["reach_box"])
                for name, n in p["strata"].items():
                    merged["strata"][name] = merged["strata"].get(name, 0) + n
        areas_min = [c["area_min_m2"] for c in chunks if c["area_min_m2"] is not None]
        areas_max = [c["area_max_m2"] for c in chunks if c["area_max_m2"] is not None]
        index[role] = {
            "crs": crs_texts.pop() if crs_texts else None,
            "n_input": sum(c["n_input"] for c in chunks),
            "n_kept": sum(c["n_kept"] for c in chunks),
            "n_dropped": sum(c["n_dropped"] for c in chunks),
            "n_repaired": sum(c["n_repaired"] for c in chunks),
            "n_outside_study_area": sum(c["n_outside_study_area"] for c in chunks),
            "n_within_training_buffer": sum(c["n_within_training_buffer"] for c in chunks),
            "area_min_m2": min(areas_min) if areas_min else None,
            "area_max_m2": max(areas_max) if areas_max else None,
            "utm_epsg": sorted({code for c in chunks for code in c["utm_epsg"]}),
            "partitions": partitions,
        }
    checksums = {f: sha for entry in entries.values() for f, sha in entry["checksums"].items()}
    files = [Path(f) for f in checksums]
    write_json(index_path, storage.index_to_json(index))
    wd.publish(index_path)
    storage.write_done_record(record, setup.signature, files + [index_path], base=setup.workdir / "prepared", checksums=checksums)
    return RunIndex(index, False, time.perf_counter() - started, sites, study)


def plan_phase(setup: RunSetup, index: RunIndex) -> RunPlan:
    """Strata names, size classes and the central bootstrap draws, from the index alone."""
    ref = index.layers["reference"]
    stratified = setup.strata_column is not None
    counts = {key: (p["strata"] if stratified else {None: p["n"]}) for key, p in ref["partitions"].items()}
    area_range = tuple(v for v in (ref["area_min_m2"], ref["area_max_m2"]) if v is not None)
    return make_run_plan(counts, area_range, stratified=stratified, size_bins=setup.size_bins, options=setup.options)


def pairs_phase(client: object, setup: RunSetup, index: RunIndex) -> PairsDone:
    """Phase 2: pairs, IoU, distances and tolerance lengths, one task per partition."""
    started = time.perf_counter()
    ref_info, pred_info = index.info("reference"), index.info("predicted")
    keys = index.keys()
    ea = setup.ea_crs.to_wkt()
    pairs_dir = setup.workdir / "pairs"
    reused = [key for key in keys if storage.done_record_valid(pairs_dir / f"{storage.key_name(key)}.done.json", setup.signature)]
    if reused and setup.log:
        setup.log(f"pairs: reusing {len(reused)} finished partitions (checksums verified)")
    futures = {
        key: client.submit(
            pairs_task,
            str(setup.workdir),
            key,
            ref_info.only([key]),
            pred_info.only([key]),
            index.neighbours(key, "reference", "predicted"),
            index.neighbours(key, "predicted", "reference"),
            setup.options,
            ea,
            setup.signature,
            setup.strata_column is not None,
            key=setup.task_key("pairs", *key),
            retries=2,
            priority=index.rows(key),
        )
        for key in sorted(keys, key=lambda k: -index.rows(k))  # largest first
        if key not in set(reused)
    }
    done = _gather(setup, "pairs", futures)
    return PairsDone(tuple(keys), sum(d["n_pairs"] for d in done.values()), len(reused), time.perf_counter() - started)


def resolves_on_workers(options: EvalOptions, predictions_dir: Path | None = None, unit_keys: np.ndarray | None = None) -> bool:
    """Whether the resolve runs on the workers, by connected components (the one routing).

    Any bootstrap unit: a block bootstrap's draws need only the run's units; a field
    bootstrap's only the sizes of the (pool, reporting tile) groups on the client, each
    partition ranking its fields among the positions of the partitions sharing its groups
    (:func:`_field_groups_of`, :func:`evalcore.bootstrap.partition_field_draws`). A paired
    comparison's ``unit_keys`` (the union of its runs' units) too: the ``homeless`` task
    draws over them (:func:`_homeless_on_workers`), the sums tasks make their block draws
    from them, and the scores' resamples weigh each prediction by its unit's count in them.
    Not with a family whose run-level values need every prediction at once (it overrides
    ``global_values`` and not :meth:`MetricFamily.run_level_on_workers`: the classes'
    rates): those resolve on the client, from every partition's pairs, with or without
    ``unit_keys``. The scores (AP, PR curves, risk-coverage, and with a bootstrap every
    resample's AP and aurc, each prediction weighed by its home's or its unit's draws) are
    computed on the workers by score ranges (:func:`_scores_on_workers`).
    ``predictions_dir`` and ``unit_keys`` do not matter: the resolves write the
    per-prediction frame's parts too, and no resolve task depends on the units.
    """
    run_level = [f for f in enabled_families(options)
                 if type(f).global_values is not MetricFamily.global_values and not f.run_level_on_workers(options)]
    return not run_level


def resolve_phase(
    setup: RunSetup, index: RunIndex, pairs: PairsDone, plan: RunPlan | None = None, unit_keys: np.ndarray | None = None,
    client: object = None, previous: ResolvedRun | None = None,
) -> ResolvedRun:
    """Phase 3: the matching and homes, and where every pair and row goes.

    With a ``client`` and options :func:`resolves_on_workers` accepts, on the workers
    (:func:`_resolve_on_workers`); otherwise on the client, which reads every partition's
    pairs output from the work directory.

    ``unit_keys`` (sorted, unique): the units a block bootstrap draws from, holding every
    unit of this run (a paired comparison passes the union of its runs' units).
    ``previous``: this run's resolve made on the workers without them; with ``unit_keys``
    only its ``homeless`` task is made again, over those units (the matching, homes,
    shares and components do not depend on the units, so they are kept, not redone).
    """
    if client is not None and resolves_on_workers(setup.options, setup.predictions_dir, unit_keys):
        if previous is not None and previous.homeless is not None and unit_keys is not None and not _scores_resampled(setup.options):
            return _redrawn_on_workers(client, setup, previous, unit_keys)
        return _resolve_on_workers(client, setup, index, pairs, plan, unit_keys)
    started = time.perf_counter()
    parts = []
    for key in pairs.keys:
        results = storage.read_pair_results(setup.workdir / "pairs", key, setup.signature)
        if results is None:
            raise PartitionMissingError(
                f"partition {storage.key_name(key)} has no valid pairs output in {setup.workdir / 'pairs'}; rerun to recompute it."
            )
        parts.append(results)
    everything, ref_part = concat_pair_results(parts)
    resolved = resolve_run(everything, setup.options, unit_keys, plan.strata_names if plan is not None else None,
                           plan.sizes if plan is not None else None)
    # Partitions with reference fields, numbered 0.. in key order as route() wants them
    # (pairs.keys is sorted, so np.unique keeps that order).
    held, renumbered = np.unique(ref_part, return_inverse=True)
    holders = tuple(pairs.keys[k] for k in held.tolist())
    routing = route(everything.ref_pos, renumbered.ravel(), len(holders), everything.pairs.ref_pos, resolved.contributions.ref_pos)
    pred_positions = resolved.preds.index.to_numpy(np.int64)
    pred_rows = {key: index_of(pred_positions, part.pred_pos) for key, part in zip(pairs.keys, parts) if len(part.pred_pos)}
    return ResolvedRun(resolved, holders, routing, time.perf_counter() - started, pred_rows)


def _resolve_on_workers(client: object, setup: RunSetup, index: RunIndex, pairs: PairsDone, plan: RunPlan | None,
                        unit_keys: np.ndarray | None = None) -> ResolvedRun:
    """Phase 3 on the workers, by connected components of the candidate-pair graph.

    1. ``components-<key>``: every partition labels its components and returns its halo
       predictions' labels (:func:`evalcore.distributed.tasks.components_task`);
       ``seams-<key>``: every partition whose predictions a neighbour read into its halo
       says which of those neighbours' halo predictions are its own, and their labels
       (:func:`evalcore.distributed.tasks.seam_labels_task`);
    2. the client unions them into seam components and names each one's owner
       (:func:`evalcore.engine.components.seam_plan`; a few numbers per seam prediction);
    3. ``resolve-<key>``: every partition resolves the components it owns and writes each
       partition's share for the sums phase (:func:`evalcore.distributed.tasks.resolve_task`);
       a finished resolve whose done record is valid is reused;
    4. ``homeless``: one task adds the homeless predictions' rows in position order
       (:func:`_homeless_on_workers`); with a block bootstrap it also returns the run's
       units, or checks that ``unit_keys`` (a paired comparison's) hold them and draws
       over those.

    With a field bootstrap the components tasks also return their (pool, reporting tile)
    groups' sizes and write their fields' positions; the client adds the sizes
    (:func:`_field_groups_of`) and a ``group-draws-<pool>`` task per pool writes each of
    its groups' counts for the sums tasks (:func:`evalcore.distributed.tasks.group_draws_task`).

    Nothing per pair or per field reaches the client: it receives the connectors, the
    share paths, the group sizes (a few numbers per group, never its per-replicate counts)
    and the run's unassigned, tile and AOI sums of the homeless predictions.
    """
    started = time.perf_counter()
    ref_parts = index.layers["reference"]["partitions"]
    futures = {
        key: client.submit(
            components_task, str(setup.workdir), key, setup.signature, setup.options,
            key=setup.task_key("components", *key), retries=2, priority=index.rows(key),
        )
        for key in sorted(pairs.keys, key=lambda k: -index.rows(k))
    }
    # The terminal keeps its line per phase of the user's view (prepare, pairs, sums): the
    # resolve's steps, like the client's resolve before them, go to the run's log only.
    labelled = _gather(setup, "components", futures, show=False)
    field_groups = _field_groups_of(setup.options, {key: done["groups"] for key, done in labelled.items()})
    # The pools' counts are drawn while the seams are asked (they need only the groups' sizes).
    group_futures = _submit_group_draws(client, setup, field_groups[0]) if field_groups is not None else {}
    # The own side: each partition is asked about the halo predictions of the partitions
    # that read its predictions into their halo (index.neighbours, as the pairs phase read them).
    futures = {}
    for key in sorted(pairs.keys, key=lambda k: -index.rows(k)):
        readers = [q for q in index.neighbours(key, "predicted", "reference") if q in labelled]
        asked = np.unique(np.concatenate([labelled[q]["connectors"][0] for q in readers] or [np.empty(0, np.int64)]))
        if len(asked):
            futures[key] = client.submit(seam_labels_task, str(setup.workdir), key, asked, setup.signature,
                                         key=setup.task_key("seams", *key), retries=2, priority=len(asked))
    own = _gather(setup, "seams", futures, show=False)
    connectors = {}
    for key, done in labelled.items():
        parts = [done["connectors"]] + ([own[key]] if key in own else [])
        connectors[key] = tuple(np.concatenate([c[i] for c in parts]) for i in range(3))
    seams = seam_plan(connectors)
    logger.info("resolve: %d seam connectors, %d components cross partition seams",
                sum(len(c[0]) for c in connectors.values()), seams.n_seam_components)
    del connectors, own
    units = [done["units"] for done in labelled.values() if done["units"] is not None]
    ref_units = np.unique(np.concatenate(units), axis=0) if units else None  # a block bootstrap: a few per partition
    del labelled
    if field_groups is not None:
        _gather(setup, "group-draws", group_futures, show=False)
        field_groups = field_groups[1]
    resolve_dir = setup.workdir / "resolve"
    with_preds = setup.predictions_dir is not None
    done: dict = {}
    futures = {}
    # The families whose run-level rows the resolves hand on (a finished resolve without them is redone).
    rows_wanted = {f.name for f in enabled_families(setup.options) if f.run_level_on_workers(setup.options)}
    for key in sorted(pairs.keys, key=lambda k: -index.rows(k)):
        out = resolve_dir / f"by-{storage.key_name(key)}"
        if storage.done_record_valid(out.with_suffix(".done.json"), setup.signature):
            finished = resolve_done(out, json.loads(wd.fetch(out / "listing.json").read_text()))
            if (finished["with_preds"] or not with_preds) and rows_wanted <= set(finished["run_level"]):
                done[key] = finished
                continue
        futures[key] = client.submit(
            resolve_task, str(setup.workdir), key, seams.given_away.get(key, np.empty(0, np.int64)), seams.sources(key), setup.options,
            plan.strata_names if plan is not None else None, plan.sizes if plan is not None else None, setup.signature, with_preds,
            key=setup.task_key("resolve", *key), retries=2, priority=index.rows(key),
        )
    if done and setup.log:
        setup.log(f"resolve: reusing {len(done)} finished partitions (checksums verified)")
    done |= _gather(setup, "resolve", futures, show=False)
    shares: dict = {}
    pred_shares: dict = {}
    for key in sorted(done):  # each partition's shares in resolver key order
        for target, path in done[key]["shares"].items():
            shares.setdefault(target, []).append(path)
        for target, path in done[key]["preds"].items():
            pred_shares.setdefault(target, []).append(path)
    homeless = tuple(done[key]["homeless"] for key in sorted(done))
    options = setup.options
    if options.bootstrap > 0 and options.bootstrap_unit != "field" and ref_units is None:  # no reference field anywhere: no unit of a field
        ref_units = np.empty((0, 3 if options.bootstrap_unit == "tile" else 1), np.int64)
    homeless_outcome = _homeless_on_workers(client, setup, homeless, ref_units, unit_keys)
    # Block draws are made over the units the homeless task returns, which the scores'
    # resamples need; a field bootstrap's scores do not wait for it (a single task of 1.4 s
    # at 2M fields, during which the other worker had nothing to do).
    scores_need_units = options.bootstrap > 0 and options.bootstrap_unit != "field"
    if scores_need_units:
        unassigned, units_path, replicates, draws = homeless_outcome()
    empty = resolve_run(concat_pair_results([])[0], without_draws(options), None,
                        plan.strata_names if plan is not None else None, plan.sizes if plan is not None else None, run_level=False)
    global_values = empty.global_values
    handed_weights = None
    if "scores" in rows_wanted:
        global_values, handed_weights = _scores_on_workers(client, setup, index, plan, [done[key] for key in sorted(done)],
                                                           field_groups, draws.unit_keys if scores_need_units and draws is not None else None)
    if not scores_need_units:
        unassigned, units_path, replicates, draws = homeless_outcome()
    # Field draws as the merge and the sums tasks need them: their count (the sums tasks make
    # them from their groups' sizes and the pools' files).
    if field_groups is not None:
        draws = RunDraws("field", options.bootstrap, options.bootstrap_seed, index.layers["reference"]["n_kept"])
    run_level = Resolved(None, {}, empty.preds, empty.contributions, unassigned, None, None, global_values, draws,
                         empty.columns, replicates)
    return ResolvedRun(run_level, tuple(sorted(ref_parts)), None, time.perf_counter() - started, pred_shares, shares, field_groups,
                       homeless, units_path, handed_weights)


PRIORITY_SPAN = 2**40
"""More than any partition's rows (the tasks' usual priority): a task given it goes before all
of them (the homeless task), one given it subtracted after all of them (the predictions)."""


def _homeless_on_workers(client: object, setup: RunSetup, homeless: tuple[str, ...], ref_units: np.ndarray | None,
                         unit_keys: np.ndarray | None = None, phase: str = "homeless") -> Callable[[], tuple]:
    """The ``homeless`` task (:func:`evalcore.distributed.tasks.homeless_task`): the run's
    unassigned sums and the homeless predictions' tile and AOI sums, added in position order.

    With a block bootstrap also their replicates and the run's draws: the units (block draws
    are made from them and the seed where they are used, here and in the sums tasks) are
    those of ``ref_units`` (the reference fields', from the components tasks) and of the
    homeless predictions, or ``unit_keys`` when given (a paired comparison's union), which
    must hold every unit of the run: a unit of the union absent from the run is drawn and
    weighs nothing in it, as :func:`evalcore.engine.resolve.run_draws` weighs it on the client.

    The task is submitted first in priority; the call returned waits for it (one task:
    the other workers go on with what follows meanwhile).

    Returns
    -------
    callable
        Returning ``(unassigned, units_path, unassigned_replicates, draws)``:
    unassigned, unassigned_replicates
        As :func:`evalcore.engine.resolve.homeless_sums`.
    units_path : str
        Where the task wrote the homeless predictions' tile and AOI sums
        (:func:`storage.write_unit_sums`; ``resolve/<phase>-units.arrays``).
    draws : RunDraws or None
        Block draws (their units only); None otherwise.

    Raises
    ------
    ValueError
        ``unit_keys`` lack a unit of the run.
    """
    options = setup.options
    if unit_keys is not None:
        unit_keys = np.asarray(unit_keys, np.int64)
        own = np.empty((0, unit_keys.shape[1]), np.int64) if ref_units is None else np.asarray(ref_units, np.int64)
        ref_units = np.concatenate([unit_keys, own.reshape(-1, unit_keys.shape[1])])
    units_path = str(setup.workdir / "resolve" / f"{phase}-units.arrays")
    future = client.submit(homeless_task, list(homeless), options, ref_units, units_path, key=setup.task_key(phase), retries=2,
                           priority=PRIORITY_SPAN)

    def outcome() -> tuple:
        unassigned, replicates, keys = future.result()
        if unit_keys is not None and keys is not None and len(keys) != len(unit_keys):
            raise ValueError(f"the {len(unit_keys)} units given to draw from lack {len(keys) - len(unit_keys)} of the units of the "
                             f"run in {setup.workdir}; give the union of the compared runs' units.")
        draws = None if keys is None else RunDraws(options.bootstrap_unit, options.bootstrap, options.bootstrap_seed, len(keys),
                                                   unit_keys=keys)
        return unassigned, units_path, replicates, draws

    return outcome


def _scores_resampled(options: EvalOptions) -> bool:
    """Whether the run-level values depend on the bootstrap's units: the scores' resamples
    weigh each prediction by its unit's count (a paired comparison's union redraws them:
    the whole resolve on the workers is made again, its finished resolve tasks reused)."""
    return options.bootstrap > 0 and any(f.name == "scores" and f.run_level_on_workers(options) for f in enabled_families(options))


def _redrawn_on_workers(client: object, setup: RunSetup, previous: ResolvedRun, unit_keys: np.ndarray) -> ResolvedRun:
    """A resolve made on the workers, its block draws made over ``unit_keys`` (a paired
    comparison's union of its runs' units): only the ``homeless-paired`` task is made again
    (:func:`_homeless_on_workers`); the resolves' shares, the components and the run-level
    values do not depend on the units and are kept (not with the scores' resamples,
    :func:`_scores_resampled`)."""
    if setup.options.bootstrap <= 0 or setup.options.bootstrap_unit == "field":
        return previous  # no block draws: the units change nothing
    started = time.perf_counter()
    r = previous.resolved
    own = r.draws.unit_keys if r.draws is not None and r.draws.unit_keys is not None else None
    unassigned, units_path, replicates, draws = _homeless_on_workers(client, setup, previous.homeless, own, unit_keys,
                                                                     phase="homeless-paired")()
    logger.info("resolve: the homeless predictions' sums drawn again over the %d units of the comparison (%d of the run's own)",
                len(unit_keys), 0 if own is None else len(own))
    resolved = replace(r, unassigned=unassigned, draws=draws, unassigned_replicates=replicates)
    return replace(previous, resolved=resolved, homeless_units=units_path, seconds=previous.seconds + time.perf_counter() - started)


def _field_groups_of(options: EvalOptions, sizes: dict) -> tuple[dict, dict] | None:
    """The field bootstrap's groups from the components tasks' group sizes
    (``{key: {(pool, tile): n}}``); None without a field bootstrap.

    Returns
    -------
    pools : dict
        ``{pool: (tiles (n, 3), sizes (n,))}``, the run's size of each group of the pool,
        for its ``group-draws`` task (:func:`evalcore.distributed.tasks.group_draws_task`).
    partitions : dict
        ``{key: (sizes, holders)}``: the run's size of each of the partition's groups
        (``{(pool, tile): n}``) and the other partitions holding fields of them, for its
        sums task.

    The client receives and sends a few numbers per group (its sizes, a holder's key),
    never a number per field or per replicate: each group's counts are made by its pool's
    task and read by the sums tasks from the pool's file.
    """
    if options.bootstrap <= 0 or options.bootstrap_unit != "field":
        return None
    totals: dict = {}
    holders: dict = {}
    for key in sorted(sizes):
        for group, n in (sizes[key] or {}).items():
            totals[group] = totals.get(group, 0) + n
            holders.setdefault(group, []).append(key)
    by_pool: dict = {}
    for (pool, tile), n in sorted(totals.items()):
        if n > 0:
            by_pool.setdefault(int(pool), []).append((*tile, n))
    pools = {pool: (np.asarray([r[:3] for r in rows], np.int64).reshape(-1, 3), np.asarray([r[3] for r in rows], np.int64))
             for pool, rows in by_pool.items()}
    partitions = {}
    for key in sorted(sizes):
        mine = sizes[key] or {}
        # Only the partitions sharing a group: a partition sharing none reads no positions.
        others = sorted({other for group in mine for other in holders[group] if other != key})
        partitions[key] = ({group: totals[group] for group in mine}, others)
    shared = sum(len(h) > 1 for h in holders.values())
    logger.info("resolve: %d field bootstrap groups in %d pools, %d held by more than one partition", len(totals), len(pools),
                shared)
    return pools, partitions


def _submit_group_draws(client: object, setup: RunSetup, pools: dict) -> dict:
    """One ``group-draws-<pool>`` task per field bootstrap pool (largest first), its counts
    written to the work directory (:func:`evalcore.distributed.tasks.group_draws_task`)."""
    options = setup.options
    return {
        (pool,): client.submit(group_draws_task, str(setup.workdir), pool, tiles, sizes, options.bootstrap,
                               options.bootstrap_seed, setup.signature, key=setup.task_key("group-draws", pool), retries=2,
                               priority=len(tiles))
        for pool, (tiles, sizes) in sorted(pools.items(), key=lambda kv: -len(kv[1][0]))
    }


SCORE_RANGE_ROWS = 250_000
"""Predictions per score range aimed at (at least two ranges per worker thread)."""


def _scores_on_workers(client: object, setup: RunSetup, index: RunIndex, plan: RunPlan | None, resolves: list[dict],
                       field_groups: dict | None = None, unit_keys: np.ndarray | None = None) -> tuple[dict, dict | None]:
    """The scores' run-level values (AP, PR curves, best F1, operating point, risk-coverage,
    and with a bootstrap the replicates' AP and aurc) by score ranges on the workers
    (:mod:`evalcore.metrics.score_ranges`), and ``{partition key: path}`` of the field
    draws' weights the score weights tasks handed to the sums tasks (None: none).

    1. the client cuts score space at the resolves' sampled scores (a few per resolve);
    2. ``score-split-<key>``: each resolve's score rows go to their ranges' files (with a
       field bootstrap, the rows with a home also to their home partition's file);
    3. with a bootstrap, ``score-weights-<key>``: every reference partition makes its
       fields' draws (as its sums task does) and writes, per range, the weights of the
       predictions homed there; it returns its fields' weight per replicate (the
       replicates' reference counts add up on the client, a number per replicate);
    4. ``score-range-<k>``: each range sorts its rows (and their replicate weights) and
       returns its counts (and its weighted counts per replicate); the client adds them up
       into the counts ahead of each range;
    5. ``score-values-<k>``: each range computes its share of the curves and writes its
       rows of the exact PR curve (and its share of the replicates' AP and aurc); the
       client merges the shares in score order;
    6. with a bootstrap, ``score-replicates``: one task merges the ranges' replicate shares
       into every replicate's AP and aurc, which the client turns into intervals as the
       single process does (:func:`evalcore.metrics.scores.replicate_keys`).

    ``field_groups`` (a field bootstrap, :func:`_field_groups_of`) and ``unit_keys`` (a
    block bootstrap: the run's units) are how the draws are made on the workers.

    Returns the ``global_values`` dict of the run (its PR curve table as
    :class:`~evalcore.distributed.storage.TableParts`).
    """
    from evalcore.metrics.score_ranges import PR_THRESHOLDS, ReplicateCounts, prefix_counts, run_keys, splitters
    from evalcore.metrics.scores import replicate_keys

    options = setup.options
    bootstrap = options.bootstrap > 0
    out = setup.workdir / "resolve" / "scores"
    wd.remove_tree(out)
    wd.remove_tree(setup.workdir / HANDED_WEIGHTS_DIR)
    strata = list(plan.strata_names) if plan is not None and plan.strata_names is not None else None
    n_groups = 1 + len(strata or ())
    n_pred, n_ref = index.layers["predicted"]["n_kept"], index.layers["reference"]["n_kept"]
    parts = {r["key"]: r["run_level"]["scores"] for r in resolves if "scores" in r["run_level"]}
    samples = np.asarray([v for r in resolves for v in r["score_sample"]], dtype=np.float64)
    cuts = splitters(samples, max(2 * _threads(client), -(-n_pred // SCORE_RANGE_ROWS)))
    futures = {key: client.submit(score_split_task, path, cuts, str(out), storage.key_name(key), bootstrap,
                                  key=setup.task_key("score-split", *key), retries=2) for key, path in parts.items()}
    split = _gather(setup, "score-split", futures, show=False)
    homed: dict = {}
    if bootstrap:
        split, homed = {key: v[0] for key, v in split.items()}, {key: v[1] for key, v in split.items()}
    n_ranges = len(cuts) + 1
    weights: dict = {}
    handed = None
    n_refs = np.zeros(options.bootstrap)
    if bootstrap:
        block_units = unit_keys if options.bootstrap_unit != "field" else None
        futures = {}
        for key in sorted(index.layers["reference"]["partitions"]):
            files = [(storage.key_name(r), str(out / f"homed-{storage.key_name(r)}-{storage.key_name(key)}.arrays"), homed[r][key])
                     for r in sorted(homed) if key in homed[r]]
            futures[key] = client.submit(score_weights_task, str(setup.workdir), key, files, str(out), options, setup.signature,
                                         field_groups.get(key) if field_groups is not None else None, block_units,
                                         key=setup.task_key("score-weights", *key), retries=2, priority=index.rows(key))
        weighed = _gather(setup, "score-weights", futures, show=False)
        handed = {key: w["weights"] for key, w in weighed.items() if w.get("weights") is not None} or None
        for key in sorted(weighed):  # whole numbers: exact in any order
            n_refs = n_refs + weighed[key]["n_ref"]
        for k in range(n_ranges):
            weights[k] = [(storage.key_name(key), str(out / f"weights-{storage.key_name(key)}-{k}.arrays"), weighed[key]["ranges"][k])
                          for key in sorted(weighed) if k in weighed[key]["ranges"]]
        if sum(n for r in homed.values() for n in r.values()) != sum(n for files in weights.values() for _, _, n in files):
            raise PartitionMissingError("the reference partitions weighed other predictions than the resolves homed in them")
    futures = {}
    for k in range(n_ranges):
        # Each split file with the rows its task reported: the range task checks it holds them.
        splits = [(storage.key_name(key), str(out / f"split-{storage.key_name(key)}-{k}.arrays"), split[key][k])
                  for key in sorted(split) if split[key][k] > 0]
        extra = (weights.get(k, []), options, unit_keys if options.bootstrap_unit != "field" else None) if bootstrap else ()
        futures[(k,)] = client.submit(score_range_task, splits, str(out / f"range-{k}.arrays"), n_groups, k, *extra,
                                      key=setup.task_key("score-range", k), retries=2)
    counts = _gather(setup, "score-range", futures, show=False)
    replicate_counts: list = []
    if bootstrap:
        replicate_counts = [counts[(k,)][1] for k in range(n_ranges)]
        counts = {k: c[0] for k, c in counts.items()}
    before, total = prefix_counts([counts[(k,)] for k in range(n_ranges)], n_groups)
    if total.n != n_pred:
        raise PartitionMissingError(f"the score ranges hold {total.n} predictions but {n_pred} were prepared")
    before_b, total_b = [], ReplicateCounts.zero(options.bootstrap, n_groups)
    for c in replicate_counts:  # whole numbers: exact
        before_b.append(total_b)
        total_b = total_b + c
    futures = {
        (k,): client.submit(score_values_task, str(out / f"range-{k}.arrays"), counts[(k,)].n, before[k], total, n_ref,
                            options.score_threshold, options.precision_targets, str(out), k,
                            (before_b[k], n_refs) if bootstrap else None,
                            key=setup.task_key("score-values", k), retries=2)
        for k in range(n_ranges)
    }
    # Each range now holds its rows and their replicate weights: nothing reads the split,
    # homed and weight files again (a rerun makes them afresh), and with the range files they
    # were 21 GiB of a 10M-field run's work directory, kept until its end. Removed while the
    # value tasks run (0.85 s of the 2M client's, between two steps of tasks, before).
    wd.remove_files(out, "split-*.arrays", "homed-*.arrays", "weights-*.arrays")
    shares = _gather(setup, "score-values", futures, show=False)
    merged = shares[(0,)][0]
    for k in range(1, n_ranges):
        merged = merged + shares[(k,)][0]
    keys, blocks = run_keys(merged, total, n_ref, options.score_threshold, options.precision_targets, strata)
    ci, n_undefined, replicates = {}, {}, {}
    if bootstrap:
        ap, aurc = client.submit(score_replicates_task, [shares[(k,)][2] for k in range(n_ranges)], total_b, n_refs,
                                 key=setup.task_key("score-replicates"), retries=2).result()
        # As the single process: no AP replicates without a reference field (AP undefined in every resample).
        ap_values = ap if n_ref > 0 else np.empty((0, ap.shape[1]))
        ci, n_undefined, replicates = replicate_keys(keys, blocks, ap_values, aurc, options, n_ref, True)
    # The exact curve's parts: every range's rows at the first threshold, then at the second.
    table = storage.TableParts(
        [shares[(k,)][1][i] for i in range(len(PR_THRESHOLDS)) for k in range(n_ranges)],
        [f"PR curve of score range {k} at IoU {t}" for t in PR_THRESHOLDS for k in range(n_ranges)],
    )
    wd.remove_files(out, "range-*.arrays", "replicates-*.arrays")  # the PR curve's parts stay: the publication reads them
    logger.info("scores: %d predictions in %d score ranges", total.n, n_ranges)
    return {"keys": keys, "ci": ci, "n_undefined": n_undefined, "tables": {"pr_curve": table}, "replicates": replicates}, handed


def sums_phase(client: object, setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun) -> SumsDone:
    """Phase 4a: per-partition field tables and partial sums, written to the work directory.

    With a per-prediction table, its tasks are submitted here too, below the sums in
    priority, and left running: :func:`merge_phase` waits for them after its merge
    (:attr:`SumsDone.predictions`, :func:`finish_predictions`).

    The run's PR curve file is copied from its parts meanwhile, on a thread of the client
    (:func:`write_pr_curve`, 172 MB and 3.5 s of the client's merge at 2M fields when it
    came after the phase); the phase ends when both have.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="evalcore-pr-curve") as pool:
        curve = pool.submit(write_pr_curve, setup, resolved)
        done = _sums_phase(client, setup, index, plan, resolved)
        curve.result()  # its error, if any, is the run's (a failed phase waits for the copy on leaving the pool)
    return done


def _sums_phase(client: object, setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun) -> SumsDone:
    """:func:`sums_phase`'s tasks."""
    started = time.perf_counter()
    ref_info = index.info("reference")
    ea = setup.ea_crs.to_wkt()
    futures = {}
    done: dict[PartitionKey, dict] = {}
    r = resolved.resolved
    slot = {key: i for i, key in enumerate(resolved.ref_keys)}
    for key in sorted(ref_info.partitions, key=lambda k: -index.rows(k)):  # largest first
        path = setup.workdir / "sums" / f"{storage.key_name(key)}.arrays"
        if storage.done_record_valid(path.with_suffix(".done.json"), setup.signature):
            part = storage.summary_from_arrays(storage.read_summary(path))
            done[key] = {"key": key, "n_ref": part.n_ref, "n_pred": part.n_pred, "path": str(path)}
            continue
        if resolved.shares is not None:  # resolved on the workers: the shares they wrote for it
            handed = resolved.shares.get(key, [])
        else:
            if key not in slot:
                raise PartitionMissingError(f"partition {storage.key_name(key)} has reference fields but no pairs output")
            i = slot[key]
            pair_rows = resolved.routing.pair_rows[i]
            handed = str(storage.write_sums_input(
                setup.workdir / "resolved" / f"{storage.key_name(key)}.arrays",
                {name: values[pair_rows] for name, values in r.pair_values.items()},
                r.contributions.take(resolved.routing.contribution_rows[i]),
                r.draws.rows(resolved.routing.ref_rows[i]) if r.draws is not None else None,
            ))
        futures[key] = client.submit(
            sums_task,
            str(setup.workdir),
            key,
            ref_info.only([key]),
            handed,
            plan,
            setup.options,
            ea,
            str(setup.frame_dir) if setup.frame_dir is not None else None,
            setup.signature,
            setup.reference.id_column,
            _aoi_keys(index),
            setup.predicted.id_column,
            r.draws.unit_keys if resolved.shares is not None and r.draws is not None else None,
            resolved.field_groups.get(key) if resolved.field_groups is not None else None,
            resolved.handed_weights.get(key) if resolved.handed_weights is not None else None,
            key=setup.task_key("sums", *key),
            retries=2,
            priority=index.rows(key),
        )
    if done and setup.log:
        setup.log(f"sums: reusing {len(done)} finished partitions (checksums verified)")
    # The per-prediction table's tasks queue behind the sums' (they need none of them): the
    # workers take them up as the sums run out, and they run on while the client merges
    # (finish_predictions). They were a phase of their own after the sums, 15 s of the
    # 2M benchmark's 396 s during which the client waited, then merged alone for 9 s.
    # A failed sums task fails the phase with them still queued: a retry of the phase
    # submits the same keys again and takes them up where they are.
    pending = _submit_predictions(client, setup, index, resolved) if setup.predictions_dir is not None else None
    info = {**done, **_gather(setup, "sums", futures)}
    wd.remove_tree(setup.workdir / HANDED_WEIGHTS_DIR)  # those of partitions whose sums were reused
    return SumsDone(info, len(done), time.perf_counter() - started, pending)


def _aoi_keys(index: RunIndex) -> list[str] | None:
    sites = index.sites
    return sites.aois.keys if sites is not None and sites.aois is not None else None


PREDICTIONS_PRIORITY = -PRIORITY_SPAN
"""Added to the per-prediction tasks' priorities (their partitions' rows): below every sums
task's (its rows) and the merge's selection tasks' (0), which the workers take first."""


def _submit_predictions(client: object, setup: RunSetup, index: RunIndex, resolved: ResolvedRun) -> PredictionsPending:
    """The per-prediction table's tasks, one GeoParquet part per partition holding predictions,
    submitted (:func:`finish_predictions` gathers them)."""
    out = setup.predictions_dir
    out.mkdir(parents=True, exist_ok=True)
    wd.remove_files(out, "part-*.parquet")
    pred_info = index.info("predicted")
    preds = resolved.resolved.preds
    annotated = index.sites is not None and index.sites.annotated is not None
    if resolved.shares is not None:  # resolved on the workers: pred_rows holds the paths of their frames
        parts = {key: resolved.pred_rows.get(key, []) for key in pred_info.partitions}
        expected = index.layers["predicted"]["n_kept"]
    else:
        parts = {key: preds.iloc[rows] for key, rows in resolved.pred_rows.items()}
        expected = len(preds)
    futures = {
        key: client.submit(
            predictions_task,
            str(setup.workdir),
            key,
            pred_info.only([key]),
            rows,
            str(out),
            _aoi_keys(index),
            annotated,
            setup.predicted.id_column,
            setup.options.score_column is not None,
            setup.options.boundary_iou_width_m is not None,
            setup.options.class_column is not None,
            setup.reference.id_column,
            key=setup.task_key("predictions", *key),
            retries=2,
            priority=PREDICTIONS_PRIORITY + index.rows(key),
        )
        for key, rows in sorted(parts.items(), key=lambda kv: -index.rows(kv[0]))
    }
    return PredictionsPending(futures, expected)


def finish_predictions(setup: RunSetup, sums: SumsDone) -> None:
    """Wait for the per-prediction table's tasks submitted with the sums (none: nothing to
    do), and check that their parts hold every prediction the resolve kept."""
    pending = sums.predictions
    if pending is None:
        return
    written = _gather(setup, "predictions", pending.futures)
    n = sum(w["n_pred"] for w in written.values())
    if n != pending.expected:
        raise PartitionMissingError(f"the per-prediction parts hold {n} predictions but {pending.expected} were resolved")


def merge_sums(setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun, sums: SumsDone,
               client: object = None) -> MergedSums:
    """Phase 4b's sums: read every partition's sums, check completeness, add them in key order;
    then the order statistics by the selection's rounds over the partitions' sorted values
    (tasks on ``client``, or in this process without one)."""
    ref = index.layers["reference"]
    keys = sorted(ref["partitions"])
    paths = {key: setup.workdir / "sums" / f"{storage.key_name(key)}.arrays" for key in keys}
    # Every missing partition is named, not only the first: after a failure the
    # others may have been cancelled, and the user wants the one that failed.
    missing = [key for key in keys if not wd.exists(paths[key])]
    if missing:
        names = ", ".join(storage.key_name(k) for k in missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise PartitionMissingError(
            f"{len(missing)} of {len(keys)} partitions have no sums output ({names}) in {setup.workdir / 'sums'}; "
            "the run is incomplete."
        )

    # First every partition's record checked and its tile and AOI keys read (a few numbers
    # each), and the homeless predictions' (their sums are read when added, last): the
    # units' sums are then made in place, one row per unit.
    held = []
    homeless_units = None
    if resolved.homeless_units is not None:
        units_path = Path(resolved.homeless_units)
        if not wd.exists(units_path):
            raise PartitionMissingError(f"the homeless predictions' tile and AOI sums ({units_path}) are missing; the run is incomplete.")
        held.append(units_path)
        def homeless_units() -> tuple:
            # Read a block of units at a time as they are added: every tile of a country
            # may hold homeless predictions, and their replicates are as large as the total's.
            return storage.iter_unit_sums(units_path, "tiles"), storage.iter_unit_sums(units_path, "aois")

    # The records checked on this process's threads (hashing a file releases the GIL, and the
    # workers are idle during the merge): at 2M fields the fields table's parts alone are 535 MiB,
    # and the hashing took 2.8 s on one thread (py-spy of the client, 2026-12-06).
    valid = map_each(lambda key: storage.done_record_valid(paths[key].with_suffix(".done.json"), setup.signature), keys)
    for key, ok in zip(keys, valid, strict=True):
        if not ok:
            raise PartitionMissingError(
                f"partition {storage.key_name(key)}: its outputs do not match their recorded checksums or "
                "belong to another run; rerun to recompute it."
            )
        held.append(paths[key])
    read = [storage.read_summary(path, ("tiles_keys", "aois_keys")) for path in held]
    unit_keys = (np.concatenate([np.empty((0, 3), np.int64)] + [u["tiles_keys"].reshape(-1, 3) for u in read]),
                 np.concatenate([np.empty((0, 1), np.int64)] + [u["aois_keys"].reshape(-1, 1) for u in read]))

    def parts():
        # One partition at a time, in key order: merge_partitions adds each and lets it go.
        for key in keys:
            path = paths[key]
            # The tiles' replicates are read again, a block of tiles at a time, for their intervals (tile_replicates).
            part = storage.summary_from_arrays(storage.read_summary(path, skip=(storage.TILE_REPLICATES,)))
            expected = ref["partitions"][key]["n"]
            if part.n_ref != expected:
                raise PartitionMissingError(
                    f"partition {storage.key_name(key)} summed {part.n_ref} reference fields but {expected} were prepared."
                )
            yield part

    r = resolved.resolved
    merged = merge_partitions(
        parts(), r.unassigned, setup.options, plan, r.homeless_tiles, r.homeless_aois, r.global_values, r.unassigned_replicates, r.columns,
        r.draws.n_units if r.draws is not None else None, select_on_partitions(setup, keys, plan, client),
        unit_keys, homeless_units,
        tile_replicates=lambda key: storage.read_summary(paths[key], (storage.TILE_REPLICATES,))[storage.TILE_REPLICATES],
    )
    n_ref = int(merged.sums.as_dict(0)["n_ref"])
    n_pred = int(merged.sums.as_dict(0)["n_pred"])
    if n_ref != ref["n_kept"] or n_pred != index.layers["predicted"]["n_kept"]:
        raise PartitionMissingError(
            f"the partitions add up to {n_ref} reference fields and {n_pred} predictions, but "
            f"{ref['n_kept']} and {index.layers['predicted']['n_kept']} were prepared."
        )
    return merged


def merge_phase(setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun, sums: SumsDone,
                client: object = None) -> dict[str, object]:
    """Phase 4b: read every partition's sums, check completeness, add them in key order; the
    pixel counts of the tiles (on the workers, with a pixel GSD); the summary. Then the
    wait for the per-prediction table's tasks, which ran meanwhile (:func:`finish_predictions`):
    the phase ends with every part written and counted."""
    merged = merge_sums(setup, index, plan, resolved, sums, client)
    if setup.options.pixel_gsd_m is not None:
        if client is None:
            raise ValueError("pixel metrics need the Dask client to count the tiles on the workers")
        merged = replace(merged, pixels=pixels_phase(client, setup, index, merged))
    summary = summary_of(setup, index, plan, resolved, merged)
    finish_predictions(setup, sums)
    return summary


def pixels_phase(client: object, setup: RunSetup, index: RunIndex, merged: MergedSums) -> dict:
    """The pixel counts of every reporting tile holding a reference field or a prediction, on the workers.

    Tiles are sent in groups of neighbours (the partition-grid cell of the tile's
    corner), so a task reads the polygons around its tiles once.
    """
    keys = merged.tiles.keys
    if len(keys) == 0:
        return {}
    side = float(setup.options.tile_km) * 1000.0
    cell = np.column_stack([keys[:, 0], np.floor(keys[:, 1] * side / setup.options.partition_size_m),
                            np.floor(keys[:, 2] * side / setup.options.partition_size_m)]).astype(np.int64)
    groups, inverse = np.unique(cell, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    ea = setup.ea_crs.to_wkt()
    annotated = index.sites.annotated if index.sites is not None else None
    futures = {
        tuple(int(v) for v in group): client.submit(
            pixels_task, str(setup.workdir), keys[inverse == g], index.info("reference"), index.info("predicted"), setup.options, ea,
            annotated, key=setup.task_key("pixels", *group.tolist()), retries=2, priority=int((inverse == g).sum()),
        )
        for g, group in enumerate(groups)
    }
    done = _gather(setup, "pixels", futures)
    out: dict = {}
    for part in done.values():
        out.update(part)
    missing = [tuple(int(v) for v in k) for k in keys.tolist() if tuple(int(v) for v in k) not in out]
    if missing:
        raise PartitionMissingError(f"{len(missing)} reporting tiles have no pixel counts (e.g. {missing[0]})")
    return out


def summary_of(setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun, merged: MergedSums) -> dict[str, object]:
    """The summary dict of merged sums, and the run's level tables written where asked."""

    def tally(role: str) -> LayerTally:
        entry = index.layers[role]
        boxes = [p["box"] for p in entry["partitions"].values()]
        return LayerTally(
            entry["n_input"], entry["n_kept"], entry["n_dropped"], entry["n_repaired"], entry.get("n_outside_study_area", 0),
            entry.get("n_within_training_buffer", 0), tuple(entry["utm_epsg"]), extent_of(boxes) if boxes else None,
        )

    # The tiles' and AOIs' tables (every unit's intervals) are made once, for the summary and the files.
    tiles, aois = level_tables(merged, setup.options, index.sites)
    metrics = run_summary(
        merged, plan, setup.options, reference=tally("reference"), predicted=tally("predicted"),
        equal_area_crs=setup.ea_crs.to_string(), strata_column=setup.strata_label, sites=index.sites, study=index.study,
        tables=(tiles, aois),
    )
    if setup.tiles_out is not None:
        write_table(setup.tiles_out, tiles_frame(tiles, float(setup.options.tile_km) * 1000.0), "tiles output")
    if setup.aois_out is not None and aois is not None:
        write_table(setup.aois_out, aois_frame(aois, index.sites.aois), "AOIs output")
    return metrics


def write_pr_curve(setup: RunSetup, resolved: ResolvedRun) -> None:
    """The run's exact PR curve, copied from its parts into ``setup.pr_curve_out`` (when asked
    for and scored). During the sums phase (:func:`sums_phase`): the copy's buffers are not
    added to the merged tiles' replicates, the client's largest holding."""
    curve = resolved.resolved.global_values.get("tables", {}).get("pr_curve")
    if setup.pr_curve_out is not None and curve is not None:
        atomic_path(setup.pr_curve_out, lambda tmp: curve.to_parquet(tmp, index=False))


def phase_timings(**outputs: object) -> dict[str, float]:
    """Wall seconds of each phase output given (``prepare=index, pairs=..., ...``); None ones are left out."""
    return {name: out.seconds for name, out in outputs.items() if out is not None}


def run_phases(client: object, setup: RunSetup) -> RunOutcome:
    """Every phase in order."""
    index = prepare_phase(client, setup)
    plan = plan_phase(setup, index)
    pairs = pairs_phase(client, setup, index)
    resolved = resolve_phase(setup, index, pairs, plan, client=client)
    sums = sums_phase(client, setup, index, plan, resolved)
    started = time.perf_counter()
    metrics = merge_phase(setup, index, plan, resolved, sums, client)
    timings = {**phase_timings(prepare=index, pairs=pairs, resolve=resolved, sums=sums), "merge": time.perf_counter() - started}
    return RunOutcome(metrics, index, pairs, resolved, sums, timings)


def _partition_name(key: tuple) -> str:
    """``32613_7_41`` for a partition key, ``reference-0`` for a prepare chunk."""
    if len(key) == 3 and all(isinstance(v, int) for v in key):
        return storage.key_name(key)
    return "-".join(map(str, key))


def _union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def run_distributed(
    predicted: object,
    reference: object,
    client: object,
    options: EvalOptions,
    *,
    strata: object = None,
    size_bins: object = None,
    workdir: str | Path | None = None,
    frame_dir: str | Path | None = None,
    pred_layer: str | None = None,
    ref_layer: str | None = None,
    progress: ProgressCallback | None = None,
    chunk_rows: int = 50_000,
    ref_id_column: str | None = None,
    pred_id_column: str | None = None,
    tiles_out: str | Path | None = None,
    aois_out: str | Path | None = None,
    predictions_dir: str | Path | None = None,
    pr_curve_out: str | Path | None = None,
) -> dict[str, object]:
    """Evaluate on a Dask cluster; the result equals :func:`evalcore.evaluate` in one process.

    Parameters
    ----------
    predicted, reference : path or GeoDataFrame/GeoSeries
    client : distributed.Client
    options : EvalOptions
    strata : str, Series or array, optional
        A column name (files) or values (in-memory layers).
    workdir : path, optional
        The work directory (a temporary one when None, removed afterwards).
    frame_dir : path, optional
        Directory for the per-field GeoParquet parts.
    ref_id_column, pred_id_column : str, optional
        Columns of unique row ids of layer files, used as labels in the per-field table.
    """
    import tempfile

    own_tmp = workdir is None
    # A store URL is used through this process's mirror of it (evalcore.distributed.workdir).
    work = Path(tempfile.mkdtemp(prefix="evalcore-")) if own_tmp else wd.root(workdir)
    try:
        strata_column = None
        strata_label = strata if isinstance(strata, str) else None
        sources = []
        ids = {"predicted": pred_id_column, "reference": ref_id_column}
        for layer, role, name in ((predicted, "predicted", pred_layer), (reference, "reference", ref_layer)):
            if isinstance(layer, (str, Path)):
                sources.append(LayerSource(str(layer), name, role, ids[role]))
                if role == "reference" and strata is not None:
                    if not isinstance(strata, str):
                        raise TypeError("With a reference file, strata must be a column name.")
                    strata_column = strata
            else:
                values = strata if role == "reference" else None
                scores = (options.score_column,) if role == "predicted" and options.score_column is not None else ()
                klass = class_layer_columns(options)[role == "predicted"]
                scores += (klass,) if klass is not None and klass not in scores else ()
                sources.append(stage_layer(layer, role, work, values, chunk_rows, scores))
                if role == "reference" and strata is not None:
                    strata_column = STAGED_STRATA_COLUMN
        setup = start_run(
            sources[0],
            sources[1],
            options,
            work,
            strata_column=strata_column,
            strata_label=strata_label,
            size_bins=size_bins,
            frame_dir=Path(frame_dir) if frame_dir is not None else None,
            chunk_rows=chunk_rows,
            progress=progress,
            tiles_out=tiles_out,
            aois_out=aois_out,
            predictions_dir=predictions_dir,
            pr_curve_out=pr_curve_out,
        )
        return run_phases(client, setup).metrics
    finally:
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)
        wd.discard(work)  # this client's copy of a store work directory
        release_mirrors(client, work)


def release_mirrors(client: object, workdir: str | Path) -> None:
    """Ask every worker to remove its copy of a store work directory (a worker outlives the run; the store keeps everything)."""
    if not wd.is_remote(workdir):
        return
    url = wd.url_of(workdir)
    try:
        client.run(wd.discard, url)
    except Exception:  # noqa: BLE001  (a worker gone or a cluster closing: its copy goes with it)
        logger.debug("workers' copies of %s not removed", url, exc_info=True)
