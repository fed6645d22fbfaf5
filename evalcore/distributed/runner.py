"""One evaluation as many partitions on a Dask cluster, merged into the single-process answer.

The phases (ARCHITECTURE.md, docs/architecture.md) are functions from frozen values
to frozen values, so none can run before its input exists and an orchestrator (the
Prefect flow) passes the values along:

* :func:`start_run` -> :class:`RunSetup` (signature, work directory);
* :func:`prepare_phase` -> :class:`RunIndex`: input chunks are prepared on the workers
  and written to the work directory partitioned by key (UTM zone, tile x, tile y); the
  client keeps only a small index (row counts and boxes per partition);
* :func:`plan_phase` -> :class:`~evalcore.options.RunPlan` (groupings, bootstrap draws);
* :func:`pairs_phase` -> :class:`PairsDone`: one task per partition reads its own rows
  and the halo rows of its neighbours from storage and writes its pairs, IoU, boundary
  distances of eligible pairs and tolerance lengths back;
* :func:`resolve_phase` -> :class:`ResolvedRun`: the global matching and homes, the
  families' global per-pair values and the routing (:func:`evalcore.engine.resolve.route`),
  on the client;
* :func:`sums_phase` -> :class:`SumsDone`: one task per partition writes its per-field
  table part and its partial sums;
* :func:`merge_phase` -> the summary dict: checks that every partition is there with the
  row counts the index expects, and adds them in key order.

Geometries never travel through the scheduler: tasks receive paths, keys and small
arrays, and return small dicts. Task keys name the phase and partition
(``pairs-32613-7-41-<run>``) so the dashboard's task stream is readable.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
import shapely
from pyproj import CRS

from evalcore import boundary
from evalcore._version import __version__
from evalcore.bootstrap import PartitionKey, pool_id
from evalcore.config import DEFAULT_EQUAL_AREA_CRS
from evalcore.crs import equal_area_crs_from
from evalcore.distributed import storage
from evalcore.distributed.sources import LABEL_COLUMN, Chunk, LayerSource, plan_chunks, read_chunk
from evalcore.engine.pairing import compute_pairs, concat_pair_results
from evalcore.engine.resolve import Resolved, Routing, resolve_run, route
from evalcore.engine.sums import MergedSums, RefRows, merge_partitions, summarize_partition
from evalcore.engine.tables import field_table, output_table, prediction_table
from evalcore.errors import EvalInputError
from evalcore.groups import strata_values
from evalcore.writers import atomic_path, write_geoparquet, write_json, write_table
from evalcore.options import EvalOptions, RunPlan, make_run_plan
from evalcore.layer import PreparedLayer, empty_layer
from evalcore.metrics.classes import class_layer_columns
from evalcore.prepare import prepare_layer
from evalcore.levels import Sites, aois_frame, prepare_sites, tiles_frame
from evalcore.sites import SITE_LAYERS, LayerInput
from evalcore.study import Study, prepare_study
from evalcore.arrays import index_of
from evalcore.layer_warnings import extent_of
from evalcore.summary import LayerTally, level_tables, run_summary

__all__ = [
    "RunSetup",
    "RunIndex",
    "PairsDone",
    "ResolvedRun",
    "SumsDone",
    "start_run",
    "check_workers_see",
    "prepare_phase",
    "plan_phase",
    "pairs_phase",
    "resolve_phase",
    "sums_phase",
    "merge_phase",
    "run_phases",
    "RunOutcome",
    "phase_timings",
    "PartitionMissingError",
    "run_distributed",
    "stage_layer",
    "STAGED_STRATA_COLUMN",
]

STAGED_STRATA_COLUMN = "__evalcore_stratum__"
"""Column of an in-memory layer's strata values once staged to the work directory."""

logger = logging.getLogger(__name__)

LAYERS = ("reference", "predicted")
Box = tuple[float, float, float, float]


CHUNKS_PER_THREAD = 3
"""Prepare chunks per worker thread when the layers are small enough to need cutting."""
MIN_CHUNK_ROWS = 5_000
"""Smallest prepare chunk: below this the per-chunk cost (one file per partition) dominates."""


class PartitionMissingError(RuntimeError):
    """A partition's output is missing or incomplete at the merge."""


# --------------------------------------------------------------------------- tasks
# Plain functions run on the workers. They take paths, keys and small values.

FAULT_ENV = "EVALCORE_INJECT_FAULT"
"""Test hook: JSON ``{"phase", "partition", "mode": "once"|"always", "marker"}``.

When set in a worker's environment, the named phase raises in the named partition:
once (the marker file records that it did) or every time. docs/reliability.md."""


class InjectedFault(RuntimeError):
    """The failure a test asked for through :data:`FAULT_ENV`."""


def _inject_fault(phase: str, partition: str) -> None:
    spec_text = os.environ.get(FAULT_ENV)
    if not spec_text:
        return
    spec = json.loads(spec_text)
    if spec.get("phase") != phase or spec.get("partition") != partition:
        return
    if spec.get("mode") == "once":
        marker = Path(spec["marker"])
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            return
    raise InjectedFault(f"injected {spec.get('mode')} fault in {phase} of partition {partition}")


def _concat_layers(layers: list[PreparedLayer]) -> PreparedLayer:
    """Concatenate prepared rows of one layer and put them in position order."""
    first = layers[0]
    if len(layers) == 1:
        return first
    fields = {}
    for name in first.__slots__:
        values = [getattr(layer, name) for layer in layers]
        if isinstance(values[0], np.ndarray):
            fields[name] = np.concatenate(values)
        elif isinstance(values[0], pd.Index):
            fields[name] = values[0].append(values[1:])
        else:
            fields[name] = values[0]
    joined = PreparedLayer(**fields)
    return joined.take(np.argsort(joined.positions, kind="stable"))


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
        class_column=class_columns[source.role == "predicted"],
    )
    local = layer.positions
    layer = replace(layer, positions=layer.positions + chunk.start)
    strata = strata_all[local] if strata_all is not None else None
    reach = _reach(layer, tolerance_m)
    boxes = boundary.candidate_boxes(layer)
    keys = np.stack([layer.utm_epsg, layer.partition_x, layer.partition_y], axis=1) if len(layer) else np.empty((0, 3), np.int64)
    _inject_fault("prepare", f"{source.role}-{chunk.index}")
    partitions = {}
    files = []
    unique_keys, key_of_row = np.unique(keys, axis=0, return_inverse=True)
    rows_by_key = np.argsort(key_of_row.ravel(), kind="stable")  # each key's rows together, in row order
    starts = np.searchsorted(key_of_row.ravel()[rows_by_key], np.arange(len(unique_keys) + 1))
    for k, key_row in enumerate(unique_keys):
        key = tuple(int(v) for v in key_row)
        rows = rows_by_key[starts[k] : starts[k + 1]]
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


@dataclass(frozen=True, slots=True)
class _LayerInfo:
    crs: CRS | None
    partitions: dict[PartitionKey, dict]


def _read(
    workdir: str, role: str, key: PartitionKey, info: _LayerInfo, ea_crs: CRS, partition_size_m: float,
    window: Box | None = None, geometries: tuple[str, ...] = storage.GEOMETRY_COLUMNS,
) -> PreparedLayer:
    layer, _, _ = storage.read_partition(
        Path(workdir), role, key, crs=info.crs, equal_area_crs=ea_crs, partition_size_m=partition_size_m,
        window=window, grow_by_reach=window is not None, geometries=geometries,
    )
    return layer


def pairs_task(
    workdir: str,
    key: PartitionKey,
    ref_info: _LayerInfo,
    pred_info: _LayerInfo,
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
    _inject_fault("pairs", storage.key_name(key))
    ea_crs = CRS.from_user_input(ea_crs_text)
    tile = options.partition_size_m
    tol = options.boundary_tolerance_m
    has_ref, has_pred = key in ref_info.partitions, key in pred_info.partitions
    # The source geometry serves only to reproject a row into another zone than its own
    # (and, with a tolerance, to bound its candidates): without a tolerance, only rows of
    # partitions in another zone need it, and decoding it for the others is wasted.
    everything = storage.GEOMETRY_COLUMNS
    lean = ("geom_ea", "geom_utm") if tol is None else everything

    def geometries(j: PartitionKey) -> tuple[str, ...]:
        return lean if j[0] == key[0] else everything

    ref_pools = None
    if has_ref:
        ref_own, ref_strata, _ = storage.read_partition(
            Path(workdir), "reference", key, crs=ref_info.crs, equal_area_crs=ea_crs, partition_size_m=tile, geometries=lean,
        )
        ref_pools = np.array([pool_id(name, stratified) for name in ref_strata.tolist()], dtype=np.int64)
    else:
        ref_own = empty_layer("reference", crs=ref_info.crs, equal_area_crs=ea_crs, partition_size_m=tile)
    pred_own = _read(workdir, "predicted", key, pred_info, ea_crs, tile, geometries=lean) if has_pred else empty_layer("predicted", crs=pred_info.crs, equal_area_crs=ea_crs, partition_size_m=tile)
    # The halo: rows of neighbouring partitions whose grown boxes reach this partition's
    # grown boxes (their union, the partition's reach box, was recorded when preparing).
    pred_near = [pred_own]
    if has_ref:
        ref_window = ref_info.partitions[key]["reach_box"]
        pred_near += [_read(workdir, "predicted", j, pred_info, ea_crs, tile, ref_window, geometries(j)) for j in pred_neighbours]
    ref_near = [ref_own]
    if has_pred and tol is not None:
        pred_window = pred_info.partitions[key]["reach_box"]
        ref_near += [_read(workdir, "reference", j, ref_info, ea_crs, tile, pred_window, geometries(j)) for j in ref_neighbours]
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


def sums_task(
    workdir: str,
    key: PartitionKey,
    ref_info: _LayerInfo,
    resolved_path: str,
    plan: RunPlan,
    options: EvalOptions,
    ea_crs_text: str,
    frame_dir: str | None,
    signature: str,
    id_column: str | None = None,
    aoi_keys: list[str] | None = None,
    pred_id_column: str | None = None,
) -> dict:
    """The sums phase of one partition: write its field table part and its partial sums.

    Reads the partition's own pairs phase output and what the resolve phase decided for
    it (per-pair values in the same (reference, prediction) order, the predictions'
    contributions and the bootstrap draws, :func:`storage.write_sums_input`) from the
    work directory.
    """
    _inject_fault("sums", storage.key_name(key))
    ea_crs = CRS.from_user_input(ea_crs_text)
    pair_values, contributions, draws = storage.read_sums_input(Path(resolved_path))
    results = storage.read_pair_results(Path(workdir) / "pairs", key, signature)
    if results is None:
        raise PartitionMissingError(f"partition {storage.key_name(key)}: its pairs output is missing or does not match its checksums")
    layer, strata, _ = storage.read_partition(
        Path(workdir), "reference", key, crs=ref_info.crs, equal_area_crs=ea_crs, partition_size_m=options.partition_size_m,
        geometries=("geometry",) if frame_dir is not None else (),
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
        frame = geopandas.GeoDataFrame(table, geometry=layer.geoms_source, crs=ref_info.crs)
        written.append(write_geoparquet(Path(frame_dir) / f"part-{storage.key_name(key)}.parquet", frame))
    path = Path(workdir) / "sums" / f"{storage.key_name(key)}.npz"
    written.append(storage.write_summary(path, storage.summary_to_arrays(summary)))
    storage.write_done_record(path.with_suffix(".done.json"), signature, written, base=Path("/"))
    return {"key": key, "n_ref": summary.n_ref, "n_pred": summary.n_pred, "path": str(path)}


def predictions_task(
    workdir: str,
    key: PartitionKey,
    pred_info: _LayerInfo,
    preds: pd.DataFrame,
    out_dir: str,
    ea_crs_text: str,
    aoi_keys: list[str] | None,
    annotated: bool,
    id_column: str | None = None,
    scored: bool = False,
    boundary_iou: bool = False,
    classed: bool = False,
    ref_id_column: str | None = None,
) -> dict:
    """Write the per-prediction table part of one partition's predictions (with their geometry)."""
    _inject_fault("predictions", storage.key_name(key))
    layer, _, _ = storage.read_partition(
        Path(workdir), "predicted", key, crs=pred_info.crs, equal_area_crs=CRS.from_user_input(ea_crs_text),
        partition_size_m=1.0, geometries=("geometry",),
    )
    if not np.array_equal(layer.positions, preds.index.to_numpy(np.int64)):
        raise PartitionMissingError(f"partition {storage.key_name(key)}: its prepared predictions differ from those resolved")
    table = prediction_table(preds, aoi_keys=aoi_keys, annotated=annotated, scored=scored, boundary_iou=boundary_iou,
                             classed=classed)
    table = output_table(table, "predictions", ref_id_column=ref_id_column, pred_id_column=id_column)
    frame = geopandas.GeoDataFrame(table, geometry=layer.geoms_source, crs=pred_info.crs)
    path = write_geoparquet(Path(out_dir) / f"part-{storage.key_name(key)}.parquet", frame)
    return {"key": key, "n_pred": len(frame), "path": str(path)}


# --------------------------------------------------------------------------- the phases
# Each phase is a function from frozen values to a frozen value: it cannot run before
# its inputs exist, and an orchestrator (the Prefect flow) passes the values along.


def _boxes_overlap(a: Box, b: Box) -> bool:
    return a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]


ProgressCallback = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RunSetup:
    """What every phase of one distributed evaluation reads (:func:`start_run`).

    Attributes
    ----------
    predicted, reference : LayerSource
    options : EvalOptions
    workdir : Path
    strata_column : str, optional
        Reference column of the strata (``__evalcore_stratum__`` for staged values).
    strata_label : str, optional
        What the summary reports as ``strata_column`` (None for given values).
    size_bins : "auto" or sequence of float, optional
    frame_dir : Path, optional
        Where the per-field GeoParquet parts go.
    tiles_out, aois_out : Path, optional
        GeoParquet files of the per-tile and per-AOI tables.
    predictions_dir : Path, optional
        Where the per-prediction GeoParquet parts go.
    pr_curve_out : Path, optional
        Parquet file of the exact precision-recall curves (with a score column).
    chunk_rows : int
    token : str
        Suffix of this run's Dask task keys.
    signature : str
        SHA-256 over the inputs' checksums and every parameter that changes an output.
    input_sha256 : dict
        Per role.
    progress : callable(phase, done, total), optional
    log : callable(message), optional
        Receives a line per reuse of finished work (the flow's logger); the line per
        phase submitted (with its partition keys) and per partition done go to this
        module's logger only.
    """

    predicted: LayerSource
    reference: LayerSource
    options: EvalOptions
    workdir: Path
    strata_column: str | None
    strata_label: str | None
    size_bins: object
    frame_dir: Path | None
    chunk_rows: int
    token: str
    signature: str
    input_sha256: dict
    tiles_out: Path | None = None
    aois_out: Path | None = None
    predictions_dir: Path | None = None
    pr_curve_out: Path | None = None
    progress: ProgressCallback | None = field(default=None, compare=False)
    log: Callable[[str], None] | None = field(default=None, compare=False)

    @property
    def ea_crs(self) -> CRS:
        return equal_area_crs_from(self.options.equal_area_crs or DEFAULT_EQUAL_AREA_CRS)

    def task_key(self, phase: str, *parts: object) -> str:
        return "-".join([phase, *(str(p) for p in parts), self.token])


@dataclass(frozen=True)
class RunIndex:
    """The prepare phase's output: per layer, row counts and boxes per partition.

    Attributes
    ----------
    layers : dict
        ``{role: {"crs", "n_input", "n_kept", "n_dropped", "n_repaired", "n_outside_study_area",
        "n_within_training_buffer", "area_min_m2", "area_max_m2", "utm_epsg",
        "partitions": {key: {"n", "box", "reach_box", "strata"}}}}``.
    reused : bool
        The prepared partitions of an interrupted run were reused.
    seconds : float
    sites : Sites, optional
        The reporting tiles, AOIs and annotated area every row was located in.
    study : Study, optional
        The study area and training area every row was selected by.
    """

    layers: dict
    reused: bool = False
    seconds: float = 0.0
    sites: Sites | None = field(default=None, compare=False, repr=False)
    study: Study | None = field(default=None, compare=False, repr=False)

    def info(self, role: str) -> _LayerInfo:
        entry = self.layers[role]
        return _LayerInfo(CRS.from_wkt(entry["crs"]) if entry["crs"] else None, entry["partitions"])

    def rows(self, key: PartitionKey) -> int:
        """Rows of both layers in a partition: the task priority (largest first)."""
        return int(sum(self.layers[role]["partitions"].get(key, {}).get("n", 0) for role in LAYERS))

    def keys(self) -> list[PartitionKey]:
        """Every partition holding a row of either layer, sorted."""
        return sorted(set(self.layers["reference"]["partitions"]) | set(self.layers["predicted"]["partitions"]))

    def neighbours(self, key: PartitionKey, own_role: str, other_role: str) -> list[PartitionKey]:
        own = self.layers[own_role]["partitions"].get(key)
        if own is None:
            return []
        return sorted(
            j for j, p in self.layers[other_role]["partitions"].items() if j != key and _boxes_overlap(own["reach_box"], p["reach_box"])
        )


@dataclass(frozen=True)
class PairsDone:
    """The pairs phase's output: which partitions' results are in ``workdir/pairs``.

    Attributes
    ----------
    keys : tuple of PartitionKey
    n_pairs : int
    reused : int
        Partitions whose results a previous run had written.
    seconds : float
    """

    keys: tuple
    n_pairs: int
    reused: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class ResolvedRun:
    """The resolve phase's output: the global decisions and where they go.

    Attributes
    ----------
    resolved : Resolved
    ref_keys : tuple of PartitionKey
        Partitions with reference fields, in the order of ``routing``.
    routing : Routing
    seconds : float
    pred_rows : dict, optional
        ``{partition key: rows of resolved.preds}`` of the predictions each partition owns.
    """

    resolved: Resolved
    ref_keys: tuple
    routing: Routing
    seconds: float = 0.0
    pred_rows: dict = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class SumsDone:
    """The sums phase's output: per partition, its row counts and the path of its sums.

    Attributes
    ----------
    partitions : dict
        ``{key: {"key", "n_ref", "n_pred", "path"}}``.
    reused : int
    seconds : float
    """

    partitions: dict
    reused: int = 0
    seconds: float = 0.0


def _gather(setup: RunSetup, phase: str, futures: dict) -> dict:
    """Wait for futures keyed by partition, reporting progress; re-raise a failure naming it."""
    from distributed import as_completed

    total = len(futures)
    unit = "chunk" if phase == "prepare" else "partition"  # prepare works on input chunks
    by_future = {f: k for k, f in futures.items()}
    out = {}
    done = 0
    if setup.progress:
        setup.progress(phase, 0, total)
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
            raise RuntimeError(f"{phase} failed for {unit} {name}: {type(exc).__name__}: {exc}") from exc
        done += 1
        if setup.progress:
            setup.progress(phase, done, total)
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


def _signature_of_run(
    predicted: LayerSource, reference: LayerSource, options: EvalOptions, strata_column: str | None,
    size_bins: object, chunk_rows: int, frame_dir: Path | None, table_outputs: tuple = (),
) -> tuple[str, dict]:
    """SHA-256 over the inputs' checksums and every parameter that changes an output."""
    import hashlib

    from evalcore.report import sha256_path

    input_sha256 = {s.role: sha256_path(s.path) for s in (reference, predicted)}
    for name in SITE_OPTIONS:
        value = getattr(options, name)
        if value is not None:
            input_sha256[name] = sha256_path(value)
    payload = {
        "inputs": {
            s.role: {"path": str(Path(s.path).resolve()), "layer": s.layer, "id_column": s.id_column, "sha256": input_sha256[s.role]}
            for s in (reference, predicted)
        },
        "options": {k: (str(v) if k == "equal_area_crs" and v is not None else v) for k, v in options.as_dict().items()},
        "strata_column": strata_column,
        "size_bins": size_bins,
        "chunk_rows": chunk_rows,
        "frame_dir": str(frame_dir.resolve()) if frame_dir is not None else None,
        "sites": {name: input_sha256.get(name) for name in SITE_OPTIONS},
        "table_outputs": [str(p) if p is not None else None for p in table_outputs],
        "evalcore": __version__,
        # Partition summaries hold exact digit sums (evalcore.exact); an older work
        # directory's summaries are not reused.
        "sums_format": "exact-digits-24x6",
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest(), input_sha256


SITE_OPTIONS: tuple[str, ...] = tuple(kind.option for kind in SITE_LAYERS)
"""Options naming a site layer (read on the client, hashed into the run's signature)."""


def _stage_site_layers(options: EvalOptions, workdir: Path) -> EvalOptions:
    """The options with in-memory site layers written to the work directory, paths made absolute."""
    values = options.as_dict()
    for name in SITE_OPTIONS:
        value = values[name]
        if isinstance(value, LayerInput):
            path = workdir / "input" / f"{name}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            frame = value.frame if isinstance(value.frame, geopandas.GeoDataFrame) else geopandas.GeoDataFrame(geometry=value.frame)
            from evalcore.writers import atomic_path

            atomic_path(path, lambda tmp, f=frame: f.to_parquet(tmp, index=False))
            values[name] = str(path)
        elif isinstance(value, str) and "://" not in value:
            values[name] = str(Path(value).resolve())
    return EvalOptions(values)


def _absolute_source(source: LayerSource) -> LayerSource:
    if "://" in source.path:
        return source
    return replace(source, path=str(Path(source.path).resolve()))


def check_workers_see(client: object, paths: dict[str, Path]) -> None:
    """Fail early, and clearly, when a worker cannot see the inputs or the work directory.

    Parameters
    ----------
    client : distributed.Client
    paths : dict
        ``{what: absolute local path}``; URLs are not checked.

    Raises
    ------
    EvalInputError
        Naming the path and the first worker that cannot see it, and what the workers need.
    """
    local = {what: str(p) for what, p in paths.items() if "://" not in str(p)}
    if not local:
        return
    seen = client.run(_paths_exist, list(local.values()))
    for worker, exists in sorted(seen.items()):
        for (what, path), ok in zip(local.items(), exists):
            if not ok:
                raise EvalInputError(
                    f"the Dask worker {worker} cannot see the {what} {path!r}: the workers need the inputs and the work "
                    "directory on a file system they share with this client, mounted at the same path (docs/national-run.md)."
                )


def _paths_exist(paths: list[str]) -> list[bool]:
    return [os.path.exists(p) for p in paths]


def start_run(
    predicted: LayerSource,
    reference: LayerSource,
    options: EvalOptions,
    workdir: Path,
    *,
    strata_column: str | None = None,
    strata_label: str | None = None,
    size_bins: object = None,
    frame_dir: Path | None = None,
    chunk_rows: int = 50_000,
    progress: ProgressCallback | None = None,
    log: Callable[[str], None] | None = None,
    tiles_out: Path | None = None,
    aois_out: Path | None = None,
    predictions_dir: Path | None = None,
    pr_curve_out: Path | None = None,
) -> RunSetup:
    """Set up a run: its signature, and a work directory holding nothing of another run.

    A previous run's outputs in ``workdir`` are kept only when they belong to this very
    run (same inputs' checksums and parameters), so an interrupted run resumes.
    """
    # Workers have their own working directory: every local path is made absolute here,
    # on the client, before anything is submitted (URLs are left as they are).
    predicted, reference = _absolute_source(predicted), _absolute_source(reference)
    workdir = Path(workdir).resolve()
    frame_dir = Path(frame_dir).resolve() if frame_dir is not None else None
    options = _stage_site_layers(options, workdir)
    tiles_out, aois_out, predictions_dir, pr_curve_out = (
        Path(p).resolve() if p is not None else None for p in (tiles_out, aois_out, predictions_dir, pr_curve_out)
    )
    signature, input_sha256 = _signature_of_run(
        predicted, reference, options, strata_column, size_bins, chunk_rows, frame_dir, (tiles_out, aois_out, predictions_dir, pr_curve_out)
    )
    workdir.mkdir(parents=True, exist_ok=True)
    run_file = workdir / "run.json"
    previous = None
    if run_file.exists():
        try:
            previous = json.loads(run_file.read_text()).get("signature")
        except ValueError:
            previous = None
    if previous != signature:
        for sub in ("prepared", "pairs", "resolved", "sums"):
            shutil.rmtree(workdir / sub, ignore_errors=True)
        if frame_dir is not None:
            for stale in Path(frame_dir).glob("part-*.parquet"):
                stale.unlink()
        if previous is not None:
            logger.info("work directory %s held another run (inputs or parameters changed): starting afresh", workdir)
        write_json(run_file, {"signature": signature})
    label = strata_label if strata_label is not None else (strata_column if strata_column != STAGED_STRATA_COLUMN else None)
    return RunSetup(
        predicted=predicted,
        reference=reference,
        options=options,
        workdir=workdir,
        strata_column=strata_column,
        strata_label=label,
        size_bins=size_bins,
        frame_dir=Path(frame_dir) if frame_dir is not None else None,
        chunk_rows=chunk_rows,
        token=uuid.uuid4().hex[:8],
        signature=signature,
        input_sha256=input_sha256,
        tiles_out=tiles_out,
        aois_out=aois_out,
        predictions_dir=predictions_dir,
        pr_curve_out=pr_curve_out,
        progress=progress,
        log=log,
    )


def prepare_phase(client: object, setup: RunSetup) -> RunIndex:
    """Phase 1: prepare both layers in chunks on the workers; build the run index.

    A previous run's prepared partitions are reused when the work directory's record
    names the same signature and every chunk file still has its checksum.
    """
    started = time.perf_counter()
    check_workers_see(
        client,
        {"predicted layer": Path(setup.predicted.path), "reference layer": Path(setup.reference.path), "work directory": setup.workdir},
    )
    index_path = setup.workdir / "prepared" / "index.json"
    record = setup.workdir / "prepared" / "done.json"
    # The site layers are prepared here once; their grid pieces are a cell index sent to every
    # worker and boundary pieces written to the work directory, read by extent (evalcore.site_cells).
    sites = prepare_sites(setup.options, setup.options.equal_area_crs, setup.workdir / "sites")
    study = prepare_study(setup.options, setup.options.equal_area_crs)
    if storage.done_record_valid(record, setup.signature) and index_path.exists():
        if setup.log:
            setup.log("prepare: reusing the prepared partitions of the interrupted run (checksums verified)")
        return RunIndex(_index_from_json(json.loads(index_path.read_text())), True, time.perf_counter() - started, sites, study)
    sites_future = client.scatter(sites, broadcast=True, hash=False) if sites.aois is not None or sites.annotated is not None else sites
    study_future = client.scatter(study, broadcast=True, hash=False) if study.active else None
    shutil.rmtree(setup.workdir / "prepared", ignore_errors=True)
    options = setup.options
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
            sites_future,
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
    write_json(index_path, _index_to_json(index))
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
            ref_info,
            pred_info,
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


def resolve_phase(
    setup: RunSetup, index: RunIndex, pairs: PairsDone, plan: RunPlan | None = None, unit_keys: np.ndarray | None = None
) -> ResolvedRun:
    """Phase 3, on the client: the global matching and where every pair and row goes.

    Reads every partition's pairs output from the work directory.
    """
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


def sums_phase(client: object, setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun) -> SumsDone:
    """Phase 4a: per-partition field tables and partial sums, written to the work directory."""
    started = time.perf_counter()
    ref_info = index.info("reference")
    ea = setup.ea_crs.to_wkt()
    futures = {}
    done: dict[PartitionKey, dict] = {}
    r = resolved.resolved
    slot = {key: i for i, key in enumerate(resolved.ref_keys)}
    for key in sorted(ref_info.partitions, key=lambda k: -index.rows(k)):  # largest first
        npz = setup.workdir / "sums" / f"{storage.key_name(key)}.npz"
        if storage.done_record_valid(npz.with_suffix(".done.json"), setup.signature):
            part = storage.summary_from_arrays(storage.read_summary(npz))
            done[key] = {"key": key, "n_ref": part.n_ref, "n_pred": part.n_pred, "path": str(npz)}
            continue
        if key not in slot:
            raise PartitionMissingError(f"partition {storage.key_name(key)} has reference fields but no pairs output")
        i = slot[key]
        pair_rows = resolved.routing.pair_rows[i]
        handed = storage.write_sums_input(
            setup.workdir / "resolved" / f"{storage.key_name(key)}.npz",
            {name: values[pair_rows] for name, values in r.pair_values.items()},
            r.contributions.take(resolved.routing.contribution_rows[i]),
            r.draws.rows(resolved.routing.ref_rows[i]) if r.draws is not None else None,
        )
        futures[key] = client.submit(
            sums_task,
            str(setup.workdir),
            key,
            ref_info,
            str(handed),
            plan,
            setup.options,
            ea,
            str(setup.frame_dir) if setup.frame_dir is not None else None,
            setup.signature,
            setup.reference.id_column,
            _aoi_keys(index),
            setup.predicted.id_column,
            key=setup.task_key("sums", *key),
            retries=2,
            priority=index.rows(key),
        )
    if done and setup.log:
        setup.log(f"sums: reusing {len(done)} finished partitions (checksums verified)")
    info = {**done, **_gather(setup, "sums", futures)}
    if setup.predictions_dir is not None:
        _write_predictions(client, setup, index, resolved)
    return SumsDone(info, len(done), time.perf_counter() - started)


def _aoi_keys(index: RunIndex) -> list[str] | None:
    sites = index.sites
    return sites.aois.keys if sites is not None and sites.aois is not None else None


def _write_predictions(client: object, setup: RunSetup, index: RunIndex, resolved: ResolvedRun) -> None:
    """The per-prediction table, one GeoParquet part per partition holding predictions."""
    out = setup.predictions_dir
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("part-*.parquet"):
        stale.unlink()
    pred_info = index.info("predicted")
    ea = setup.ea_crs.to_wkt()
    preds = resolved.resolved.preds
    annotated = index.sites is not None and index.sites.annotated is not None
    futures = {
        key: client.submit(
            predictions_task,
            str(setup.workdir),
            key,
            pred_info,
            preds.iloc[rows],
            str(out),
            ea,
            _aoi_keys(index),
            annotated,
            setup.predicted.id_column,
            setup.options.score_column is not None,
            setup.options.boundary_iou_width_m is not None,
            setup.options.class_column is not None,
            setup.reference.id_column,
            key=setup.task_key("predictions", *key),
            retries=2,
            priority=len(rows),
        )
        for key, rows in sorted(resolved.pred_rows.items(), key=lambda kv: -len(kv[1]))
    }
    written = _gather(setup, "predictions", futures)
    n = sum(w["n_pred"] for w in written.values())
    if n != len(preds):
        raise PartitionMissingError(f"the per-prediction parts hold {n} predictions but {len(preds)} were resolved")


def merge_sums(setup: RunSetup, index: RunIndex, plan: RunPlan, resolved: ResolvedRun, sums: SumsDone) -> MergedSums:
    """Phase 4b's sums: read every partition's sums, check completeness, add them in key order."""
    ref = index.layers["reference"]
    keys = sorted(ref["partitions"])
    paths = {key: setup.workdir / "sums" / f"{storage.key_name(key)}.npz" for key in keys}
    # Every missing partition is named, not only the first: after a failure the
    # others may have been cancelled, and the user wants the one that failed.
    missing = [key for key in keys if not paths[key].exists()]
    if missing:
        names = ", ".join(storage.key_name(k) for k in missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
        raise PartitionMissingError(
            f"{len(missing)} of {len(keys)} partitions have no sums output ({names}) in {setup.workdir / 'sums'}; "
            "the run is incomplete."
        )

    def parts():
        # One partition at a time, in key order: merge_partitions adds each and lets it go.
        for key in keys:
            path = paths[key]
            if not storage.done_record_valid(path.with_suffix(".done.json"), setup.signature):
                raise PartitionMissingError(
                    f"partition {storage.key_name(key)}: its outputs do not match their recorded checksums or "
                    "belong to another run; rerun to recompute it."
                )
            part = storage.summary_from_arrays(storage.read_summary(path))
            expected = ref["partitions"][key]["n"]
            if part.n_ref != expected:
                raise PartitionMissingError(
                    f"partition {storage.key_name(key)} summed {part.n_ref} reference fields but {expected} were prepared."
                )
            yield part

    r = resolved.resolved
    merged = merge_partitions(
        parts(), r.unassigned, setup.options, plan, r.homeless_tiles, r.homeless_aois, r.global_values, r.unassigned_replicates, r.columns,
        r.draws.n_units if r.draws is not None else None,
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
    pixel counts of the tiles (on the workers, with a pixel GSD); the summary."""
    merged = merge_sums(setup, index, plan, resolved, sums)
    if setup.options.pixel_gsd_m is not None:
        if client is None:
            raise ValueError("pixel metrics need the Dask client to count the tiles on the workers")
        merged = replace(merged, pixels=pixels_phase(client, setup, index, merged))
    return summary_of(setup, index, plan, resolved, merged)


def pixels_task(
    workdir: str, tiles: np.ndarray, ref_info: _LayerInfo, pred_info: _LayerInfo, options: EvalOptions, ea_crs_text: str,
    annotated: object = None,
) -> dict:
    """Pixel counts of some nearby reporting tiles: the polygons that reach them, read by window from every partition."""
    from evalcore.crs import transform_xy, utm_crs
    from evalcore.pixels import count_tiles, tile_region

    _inject_fault("pixels", "_".join(map(str, tiles[0].tolist())) if len(tiles) else "none")
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
            if _boxes_overlap(p["box"], window):
                layer, _, _ = storage.read_partition(
                    Path(workdir), role, key, crs=info.crs, equal_area_crs=ea_crs, partition_size_m=options.partition_size_m,
                    window=window, geometries=("geometry",),
                )
                parts.append(layer.geoms_source)
        geoms[role] = np.concatenate(parts) if parts else np.empty(0, dtype=object)
    counts = count_tiles(tiles, geoms["reference"], ref_info.crs, geoms["predicted"], pred_info.crs, options, annotated)
    return {key: value for key, value in counts.items()}


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
    """The summary dict of merged sums, and the run's level tables and PR curve written where asked."""
    r = resolved.resolved

    def tally(role: str) -> LayerTally:
        entry = index.layers[role]
        boxes = [p["box"] for p in entry["partitions"].values()]
        return LayerTally(
            entry["n_input"], entry["n_kept"], entry["n_dropped"], entry["n_repaired"], entry.get("n_outside_study_area", 0),
            entry.get("n_within_training_buffer", 0), tuple(entry["utm_epsg"]), extent_of(boxes) if boxes else None,
        )

    metrics = run_summary(
        merged, plan, setup.options, reference=tally("reference"), predicted=tally("predicted"),
        equal_area_crs=setup.ea_crs.to_string(), strata_column=setup.strata_label, sites=index.sites, study=index.study,
    )
    if setup.tiles_out is not None or setup.aois_out is not None:
        tiles, aois = level_tables(merged, setup.options, index.sites)
        if setup.tiles_out is not None:
            write_table(setup.tiles_out, tiles_frame(tiles, float(setup.options.tile_km) * 1000.0), "tiles output")
        if setup.aois_out is not None and aois is not None:
            write_table(setup.aois_out, aois_frame(aois, index.sites.aois), "AOIs output")
    curve = r.global_values.get("tables", {}).get("pr_curve")
    if setup.pr_curve_out is not None and curve is not None:
        atomic_path(setup.pr_curve_out, lambda tmp: curve.to_parquet(tmp, index=False))
    return metrics


@dataclass(frozen=True)
class RunOutcome:
    """Every phase's output of a whole run, and its wall time per phase (seconds)."""

    metrics: dict
    index: RunIndex
    pairs: PairsDone
    resolved: ResolvedRun
    sums: SumsDone
    timings: dict


def phase_timings(**outputs: object) -> dict[str, float]:
    """Wall seconds of each phase output given (``prepare=index, pairs=..., ...``); None ones are left out."""
    return {name: out.seconds for name, out in outputs.items() if out is not None}


def run_phases(client: object, setup: RunSetup) -> RunOutcome:
    """Every phase in order."""
    index = prepare_phase(client, setup)
    plan = plan_phase(setup, index)
    pairs = pairs_phase(client, setup, index)
    resolved = resolve_phase(setup, index, pairs, plan)
    sums = sums_phase(client, setup, index, plan, resolved)
    started = time.perf_counter()
    metrics = merge_phase(setup, index, plan, resolved, sums, client)
    timings = {**phase_timings(prepare=index, pairs=pairs, resolve=resolved, sums=sums), "merge": time.perf_counter() - started}
    return RunOutcome(metrics, index, pairs, resolved, sums, timings)


def _index_to_json(index: dict) -> dict:
    out = {}
    for role, entry in index.items():
        e = dict(entry)
        e["partitions"] = {
            storage.key_name(k): {**p, "strata": [[name, n] for name, n in p["strata"].items()]}
            for k, p in entry["partitions"].items()
        }
        out[role] = e
    return out


def _index_from_json(data: dict) -> dict:
    out = {}
    for role, entry in data.items():
        e = dict(entry)
        e["partitions"] = {
            storage.parse_key_name(k): {
                **p,
                "box": tuple(p["box"]),
                "reach_box": tuple(p["reach_box"]),
                "strata": {name: n for name, n in p["strata"]},
            }
            for k, p in entry["partitions"].items()
        }
        out[role] = e
    return out


def _partition_name(key: tuple) -> str:
    """``32613_7_41`` for a partition key, ``reference-0`` for a prepare chunk."""
    if len(key) == 3 and all(isinstance(v, int) for v in key):
        return storage.key_name(key)
    return "-".join(map(str, key))


def _union(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def stage_layer(
    layer: object, role: str, workdir: Path, strata: object = None, chunk_rows: int = 50_000, columns: tuple[str, ...] = ()
) -> LayerSource:
    """Write an in-memory layer to the work directory as GeoParquet so workers can read it.

    The index is kept in a column, so labels survive; ``strata`` values (a Series or
    an array) are written as a column named ``__evalcore_stratum__``; ``columns`` of the
    layer (the score column) are copied as they are.
    """
    from evalcore.prepare import layer_geometries

    geoms, index, crs = layer_geometries(layer, role)
    frame = geopandas.GeoDataFrame({LABEL_COLUMN: np.asarray(index)}, geometry=geopandas.GeoSeries(geoms), crs=crs)
    if strata is not None:
        frame[STAGED_STRATA_COLUMN] = strata_values(layer, strata, len(frame))
    for column in columns:
        if column in getattr(layer, "columns", []):
            frame[column] = np.asarray(layer[column])
    path = workdir / "input" / f"{role}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    from evalcore.writers import atomic_path

    atomic_path(path, lambda tmp: frame.to_parquet(tmp, index=False, row_group_size=chunk_rows))
    return LayerSource(str(path), None, role)


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
    work = Path(tempfile.mkdtemp(prefix="evalcore-")) if own_tmp else Path(workdir)
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
