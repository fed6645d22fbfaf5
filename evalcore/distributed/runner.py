"""One evaluation as many partitions on a Dask cluster, merged into the single-process answer.

The phases (ARCHITECTURE.md, docs/architecture.md), each a method of
:class:`DistributedRun` so an orchestrator (the Prefect flow) can run them as separate
steps:

1. :meth:`~DistributedRun.prepare`: input chunks are prepared on the workers and
   written to the work directory partitioned by key (UTM zone, tile x, tile y);
   the client keeps only a small index (row counts and boxes per partition).
2. :meth:`~DistributedRun.pairs`: one task per partition reads its own rows and the
   halo rows of its neighbours from storage and computes pairs, IoU, boundary
   distances of eligible pairs and tolerance lengths.
3. :meth:`~DistributedRun.resolve`: the global matching and home references, on the
   client (about one row per reference field).
4. :meth:`~DistributedRun.sums`: one task per partition writes its per-field table part
   and its partial sums (overall, strata, size classes, bootstrap replicates);
   :meth:`~DistributedRun.merge` reads them back, checks that every partition is there
   with the row counts the index expects, and adds them in key order.

Geometries never travel through the scheduler: tasks receive paths, keys and small
arrays, and return small arrays. Task keys name the phase and partition
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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import geopandas
import numpy as np
import pandas as pd
from pyproj import CRS

from evalcore import boundary
from evalcore.api import build_summary
from evalcore.options import EvalOptions, RunPlan, make_run_plan
from evalcore.bootstrap import PartitionKey, ReplicateSums
from evalcore.crs import equal_area_crs_from
from evalcore.config import DEFAULT_EQUAL_AREA_CRS
from evalcore.distributed import storage
from evalcore.distributed.sources import LABEL_COLUMN, Chunk, LayerSource, plan_chunks, read_chunk
from evalcore.engine import (
    PairResults,
    PartitionSummary,
    RefRows,
    compute_pairs,
    field_table,
    merge_partitions,
    prediction_rows,
    summarize_partition,
    unassigned_row,
)
from evalcore.errors import EvalInputError
from evalcore.groups import strata_values
from evalcore.io import write_geoparquet, write_json
from evalcore.matching import resolve
from evalcore.pairs import PairTable
from evalcore.prepare import PreparedLayer, empty_layer, prepare_layer
from evalcore.quantities import QUANTITY_COLUMNS
from evalcore.stats import QuantitySums

__all__ = ["DistributedRun", "PartitionMissingError", "run_distributed", "stage_layer"]

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
    tile_size_m: float,
    tolerance_m: float | None,
    strata_column: str | None,
) -> dict:
    """Read, prepare and write one input chunk, partitioned by key; return its index entry."""
    gdf = read_chunk(source, chunk)
    strata_all = None
    if strata_column is not None and source.role == "reference":
        if strata_column not in gdf.columns:
            columns = ", ".join(repr(c) for c in gdf.columns if c != gdf.geometry.name)
            raise EvalInputError(
                f"The strata column {strata_column!r} is not in the {source.describe()}; its columns are: {columns}."
            )
        strata_all = strata_values(gdf, strata_column, len(gdf))
    layer = prepare_layer(gdf, source.role, equal_area_crs=equal_area_crs, tile_size_m=tile_size_m)
    local = layer.positions
    layer = replace(layer, positions=layer.positions + chunk.start)
    strata = strata_all[local] if strata_all is not None else None
    reach = _reach(layer, tolerance_m)
    boxes = boundary.candidate_boxes(layer)
    keys = np.stack([layer.utm_epsg, layer.tile_x, layer.tile_y], axis=1) if len(layer) else np.empty((0, 3), np.int64)
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
    workdir: str, role: str, key: PartitionKey, info: _LayerInfo, ea_crs: CRS, tile_size_m: float,
    window: Box | None = None, geometries: tuple[str, ...] = storage.GEOMETRY_COLUMNS,
) -> PreparedLayer:
    layer, _, _ = storage.read_partition(
        Path(workdir), role, key, crs=info.crs, equal_area_crs=ea_crs, tile_size_m=tile_size_m,
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
) -> PairResults:
    """The pairs phase of one partition: its own rows plus the halo read from storage.

    The results are also written to ``workdir/pairs`` with a done record, for resume.
    """
    _inject_fault("pairs", storage.key_name(key))
    ea_crs = CRS.from_user_input(ea_crs_text)
    tile = options.tile_size_m
    tol = options.boundary_tolerance_m
    has_ref, has_pred = key in ref_info.partitions, key in pred_info.partitions
    # The source geometry serves only to reproject a row into another zone than its own
    # (and, with a tolerance, to bound its candidates): without a tolerance, only rows of
    # partitions in another zone need it, and decoding it for the others is wasted.
    everything = storage.GEOMETRY_COLUMNS
    lean = ("geom_ea", "geom_utm") if tol is None else everything

    def geometries(j: PartitionKey) -> tuple[str, ...]:
        return lean if j[0] == key[0] else everything

    ref_own = _read(workdir, "reference", key, ref_info, ea_crs, tile, geometries=lean) if has_ref else empty_layer("reference", crs=ref_info.crs, equal_area_crs=ea_crs, tile_size_m=tile)
    pred_own = _read(workdir, "predicted", key, pred_info, ea_crs, tile, geometries=lean) if has_pred else empty_layer("predicted", crs=pred_info.crs, equal_area_crs=ea_crs, tile_size_m=tile)
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
    )
    storage.write_pair_results(Path(workdir) / "pairs", key, results, signature)
    return results


def sums_task(
    workdir: str,
    key: PartitionKey,
    ref_info: _LayerInfo,
    results: PairResults,
    is_match: np.ndarray,
    is_eligible: np.ndarray,
    preds: pd.DataFrame,
    pred_labels: pd.Series,
    plan: RunPlan,
    options: EvalOptions,
    ea_crs_text: str,
    frame_dir: str | None,
    signature: str,
) -> dict:
    """The sums phase of one partition: write its field table part and its partial sums."""
    _inject_fault("sums", storage.key_name(key))
    ea_crs = CRS.from_user_input(ea_crs_text)
    layer, strata, _ = storage.read_partition(
        Path(workdir), "reference", key, crs=ref_info.crs, equal_area_crs=ea_crs, tile_size_m=options.tile_size_m,
        geometries=("geometry",) if frame_dir is not None else (),
    )
    refs = _ref_rows(layer, strata, plan)
    summary, fields = summarize_partition(
        key,
        refs,
        results,
        is_match,
        is_eligible,
        preds,
        options,
        plan,
    )
    written = []
    if frame_dir is not None:
        table = field_table(
            fields,
            layer.labels,
            pred_labels,
            strata_names=plan.strata_names,
            strata_codes=refs.strata_codes,
            size_keys=plan.sizes.keys if plan.sizes is not None else None,
            size_codes=refs.size_codes,
            tolerance_m=options.boundary_tolerance_m,
        )
        frame = geopandas.GeoDataFrame(table, geometry=layer.geoms_source, crs=ref_info.crs)
        written.append(write_geoparquet(Path(frame_dir) / f"part-{storage.key_name(key)}.parquet", frame))
    path = Path(workdir) / "sums" / f"{storage.key_name(key)}.npz"
    written.append(storage.write_summary(path, _summary_arrays(summary)))
    storage.write_done_record(path.with_suffix(".done.json"), signature, written, base=Path("/"))
    return {"key": key, "n_ref": summary.n_ref, "n_pred": summary.n_pred, "path": str(path)}


def _ref_rows(layer: PreparedLayer, strata: np.ndarray, plan: RunPlan) -> RefRows:
    strata_codes, size_codes, pools = plan.group_codes(layer.area_m2, strata)
    return RefRows(layer.positions, layer.area_m2, layer.perimeter_m, layer.utm_epsg, strata_codes, size_codes, pools)


def _summary_arrays(s: PartitionSummary) -> dict[str, np.ndarray]:
    arrays = {
        "key": np.asarray(s.key, dtype=np.int64),
        "n_ref": np.asarray(s.n_ref),
        "n_pred": np.asarray(s.n_pred),
        "overall": s.overall.sums,
        "overall_spacing": np.asarray(s.overall.spacing_max_m),
        "strata": np.array([g.sums for g in s.strata]).reshape(len(s.strata), len(QUANTITY_COLUMNS)),
        "strata_spacing": np.array([g.spacing_max_m for g in s.strata]),
        "sizes": np.array([g.sums for g in s.sizes]).reshape(len(s.sizes), len(QUANTITY_COLUMNS)),
        "sizes_spacing": np.array([g.spacing_max_m for g in s.sizes]),
        "med_pos": s.medians.index.to_numpy(np.int64),
    }
    for column in s.medians.columns:
        arrays[f"med_{column}"] = s.medians[column].to_numpy()
    if s.replicates is not None:
        arrays["rep_overall"] = s.replicates.overall
        arrays["rep_strata"] = s.replicates.strata
        arrays["rep_sizes"] = s.replicates.size_classes
    return arrays


def _summary_from_arrays(a: dict[str, np.ndarray]) -> PartitionSummary:
    def sums(rows: np.ndarray, spacing: np.ndarray) -> list[QuantitySums]:
        return [QuantitySums(QUANTITY_COLUMNS, rows[g], float(spacing[g])) for g in range(len(rows))]

    medians = pd.DataFrame(
        {c[4:]: a[c] for c in a if c.startswith("med_") and c != "med_pos"}, index=pd.Index(a["med_pos"], name="ref_pos")
    )
    replicates = ReplicateSums(a["rep_overall"], a["rep_strata"], a["rep_sizes"]) if "rep_overall" in a else None
    return PartitionSummary(
        key=tuple(int(v) for v in a["key"]),
        n_ref=int(a["n_ref"]),
        n_pred=int(a["n_pred"]),
        overall=QuantitySums(QUANTITY_COLUMNS, a["overall"], float(a["overall_spacing"])),
        strata=sums(a["strata"], a["strata_spacing"]),
        sizes=sums(a["sizes"], a["sizes_spacing"]),
        replicates=replicates,
        medians=medians,
    )


# --------------------------------------------------------------------------- the run


def _boxes_overlap(a: Box, b: Box) -> bool:
    return a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]


ProgressCallback = Callable[[str, int, int], None]


@dataclass
class DistributedRun:
    """The state of one distributed evaluation, phase by phase.

    Parameters
    ----------
    client : distributed.Client
    predicted, reference : LayerSource
    options : EvalOptions
    workdir : Path
    strata_column : str, optional
    size_bins : "auto" or sequence of float, optional
    frame_dir : Path, optional
        Where the per-field GeoParquet parts go.
    chunk_rows : int
    progress : callable(phase, done, total), optional
    log : callable(message), optional
        Receives a line per partition submitted and done (the flow's run logger).
    """

    client: object
    predicted: LayerSource
    reference: LayerSource
    options: EvalOptions
    workdir: Path
    strata_column: str | None = None
    size_bins: object = None
    frame_dir: Path | None = None
    chunk_rows: int = 50_000
    progress: ProgressCallback | None = None
    log: Callable[[str], None] | None = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    timings: dict[str, float] = field(default_factory=dict)
    reused: dict[str, object] = field(default_factory=dict)
    signature: str = ""
    input_sha256: dict[str, str] = field(default_factory=dict)

    # Filled by the phases.
    index: dict = field(default_factory=dict)
    plan: RunPlan | None = None
    results: dict[PartitionKey, PairResults] = field(default_factory=dict)
    sums_info: dict[PartitionKey, dict] = field(default_factory=dict)

    # ---------------------------------------------------------------- helpers
    def _task_key(self, phase: str, *parts: object) -> str:
        return "-".join([phase, *(str(p) for p in parts), self.token])

    def _gather(self, phase: str, futures: dict) -> dict:
        """Wait for futures keyed by partition, reporting progress; re-raise a failure naming it."""
        from distributed import as_completed

        total = len(futures)
        unit = "chunk" if phase == "prepare" else "partition"  # prepare works on input chunks
        by_future = {f: k for k, f in futures.items()}
        out = {}
        done = 0
        if self.progress:
            self.progress(phase, 0, total)
        if self.log:
            names = [_partition_name(k) for k in futures]
            self.log(f"{phase}: {total} {unit}s running: {', '.join(names[:20])}{' …' if total > 20 else ''}")
        for future in as_completed(list(futures.values())):
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
            if self.progress:
                self.progress(phase, done, total)
            logger.info("%s: partition %s done (%d/%d)", phase, k, done, total)
            if self.log:
                self.log(f"{phase}: {unit} {_partition_name(k)} done ({done}/{total})")
        return out

    @property
    def ea_crs(self) -> CRS:
        return equal_area_crs_from(self.options.equal_area_crs or DEFAULT_EQUAL_AREA_CRS)

    def _info(self, role: str) -> _LayerInfo:
        entry = self.index[role]
        return _LayerInfo(CRS.from_wkt(entry["crs"]) if entry["crs"] else None, entry["partitions"])

    def _threads(self) -> int:
        try:
            return max(1, sum(self.client.nthreads().values()))
        except Exception:  # a client without workers yet: plan for one
            return 1

    def _balanced_chunks(self) -> list[tuple[LayerSource, Chunk]]:
        """The prepare chunks: at most ``chunk_rows`` rows each, and small enough that every
        worker thread gets :data:`CHUNKS_PER_THREAD` of them (not below :data:`MIN_CHUNK_ROWS`).

        With 50,000-row chunks a 50,000-field layer would be one task, and one worker
        would prepare it while the others wait.
        """
        sources = (self.reference, self.predicted)
        planned = [(source, chunk) for source in sources for chunk in plan_chunks(source, self.chunk_rows)]
        wanted = -(-sum(c.n_rows for _, c in planned) // (CHUNKS_PER_THREAD * self._threads()))
        rows = int(min(self.chunk_rows, max(MIN_CHUNK_ROWS, wanted)))
        if rows == self.chunk_rows:
            return planned
        return [(source, chunk) for source in sources for chunk in plan_chunks(source, rows)]

    def _partition_rows(self, key: PartitionKey) -> int:
        """Rows of both layers in a partition: the task priority (largest first)."""
        return int(sum(self.index[role]["partitions"].get(key, {}).get("n", 0) for role in LAYERS))

    # ---------------------------------------------------------------- phases
    def _signature_of_run(self) -> str:
        """SHA-256 over the inputs' checksums and every parameter that changes an output."""
        from evalcore import __version__
        from evalcore.report import sha256_path

        self.input_sha256 = {s.role: sha256_path(s.path) for s in (self.reference, self.predicted)}
        payload = {
            "inputs": {
                s.role: {"path": str(Path(s.path).resolve()), "layer": s.layer, "sha256": self.input_sha256[s.role]}
                for s in (self.reference, self.predicted)
            },
            "options": {k: (str(v) if k == "equal_area_crs" and v is not None else v) for k, v in asdict(self.options).items()},
            "strata_column": self.strata_column,
            "size_bins": self.size_bins,
            "chunk_rows": self.chunk_rows,
            "frame_dir": str(self.frame_dir.resolve()) if self.frame_dir is not None else None,
            "evalcore": __version__,
        }
        text = json.dumps(payload, sort_keys=True, default=str)
        import hashlib

        return hashlib.sha256(text.encode()).hexdigest()

    def _start_workdir(self) -> None:
        """Keep the work directory's outputs only if they belong to this very run."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.signature = self._signature_of_run()
        run_file = self.workdir / "run.json"
        previous = None
        if run_file.exists():
            try:
                previous = json.loads(run_file.read_text()).get("signature")
            except ValueError:
                previous = None
        if previous != self.signature:
            for sub in ("prepared", "pairs", "sums"):
                shutil.rmtree(self.workdir / sub, ignore_errors=True)
            if self.frame_dir is not None:
                for stale in self.frame_dir.glob("part-*.parquet"):
                    stale.unlink()
            if previous is not None:
                logger.info("work directory %s held another run (inputs or parameters changed): starting afresh", self.workdir)
            write_json(run_file, {"signature": self.signature})

    def prepare(self) -> dict:
        """Phase 1: prepare both layers in chunks on the workers; build the run index.

        A previous run's prepared partitions are reused when the work directory's record
        names the same signature and every chunk file still has its checksum.
        """
        started = time.perf_counter()
        self._start_workdir()
        index_path = self.workdir / "prepared" / "index.json"
        record = self.workdir / "prepared" / "done.json"
        if storage.done_record_valid(record, self.signature) and index_path.exists():
            self.index = _index_from_json(json.loads(index_path.read_text()))
            self.reused["prepare"] = True
            self.timings["prepare"] = time.perf_counter() - started
            if self.log:
                self.log("prepare: reusing the prepared partitions of the interrupted run (checksums verified)")
            return self.index
        shutil.rmtree(self.workdir / "prepared", ignore_errors=True)
        futures = {}
        planned = self._balanced_chunks()
        # Largest first (and submitted in that order: a free worker takes the first task
        # that arrives), so the phase does not end waiting on one big chunk.
        planned.sort(key=lambda sc: -sc[1].weight)
        for source, chunk in planned:
            futures[(source.role, chunk.index)] = self.client.submit(
                prepare_chunk_task,
                source,
                chunk,
                str(self.workdir),
                self.options.equal_area_crs,
                self.options.tile_size_m,
                self.options.boundary_tolerance_m,
                self.strata_column,
                key=self._task_key("prepare", source.role, chunk.index),
                retries=2,
                priority=chunk.weight,  # largest first, so the last task to finish is a small one
            )
        entries = self._gather("prepare", futures)
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
                "area_min_m2": min(areas_min) if areas_min else None,
                "area_max_m2": max(areas_max) if areas_max else None,
                "utm_epsg": sorted({code for c in chunks for code in c["utm_epsg"]}),
                "partitions": partitions,
            }
        self.index = index
        checksums = {f: sha for entry in entries.values() for f, sha in entry["checksums"].items()}
        files = [Path(f) for f in checksums]
        write_json(index_path, _index_to_json(index))
        storage.write_done_record(record, self.signature, files + [index_path], base=self.workdir / "prepared", checksums=checksums)
        self.timings["prepare"] = time.perf_counter() - started
        return index

    def make_plan(self) -> RunPlan:
        """Strata names, size classes and the central bootstrap draws, from the index."""
        ref = self.index["reference"]
        stratified = self.strata_column is not None
        counts = {key: (p["strata"] if stratified else {None: p["n"]}) for key, p in ref["partitions"].items()}
        area_range = tuple(v for v in (ref["area_min_m2"], ref["area_max_m2"]) if v is not None)
        self.plan = make_run_plan(counts, area_range, stratified=stratified, size_bins=self.size_bins, options=self.options)
        return self.plan

    def _neighbours(self, key: PartitionKey, own_role: str, other_role: str) -> list[PartitionKey]:
        own = self.index[own_role]["partitions"].get(key)
        if own is None:
            return []
        return sorted(
            j
            for j, p in self.index[other_role]["partitions"].items()
            if j != key and _boxes_overlap(own["reach_box"], p["reach_box"])
        )

    def pairs(self) -> dict[PartitionKey, PairResults]:
        """Phase 2: pairs, IoU, distances and tolerance lengths, one task per partition."""
        started = time.perf_counter()
        ref_info, pred_info = self._info("reference"), self._info("predicted")
        keys = sorted(set(ref_info.partitions) | set(pred_info.partitions))
        ea = self.ea_crs.to_wkt()
        reused = {}
        for key in keys:
            cached = storage.read_pair_results(self.workdir / "pairs", key, self.signature)
            if cached is not None:
                reused[key] = cached
        if reused and self.log:
            self.log(f"pairs: reusing {len(reused)} finished partitions (checksums verified)")
        self.reused["pairs"] = len(reused)
        futures = {
            key: self.client.submit(
                pairs_task,
                str(self.workdir),
                key,
                ref_info,
                pred_info,
                self._neighbours(key, "reference", "predicted"),
                self._neighbours(key, "predicted", "reference"),
                self.options,
                ea,
                self.signature,
                key=self._task_key("pairs", *key),
                retries=2,
                priority=self._partition_rows(key),
            )
            for key in sorted(keys, key=lambda k: -self._partition_rows(k))  # largest first
            if key not in reused
        }
        self.results = {**reused, **self._gather("pairs", futures)}
        self.timings["pairs"] = time.perf_counter() - started
        return self.results

    def resolve(self) -> None:
        """Phase 3: the global matching and every prediction's home, on the client."""
        started = time.perf_counter()
        keys = sorted(self.results)
        tables = [self.results[k].pairs for k in keys]
        everything = PairTable.concat(tables)
        self._resolution = resolve(everything, self.options.iou_threshold, self.options.matching)
        # Where each partition's pairs sit in the global (ref_pos, pred_pos) order.
        width = int(max([int(t.pred_pos.max()) for t in tables if len(t)] + [0])) + 1
        global_code = everything.ref_pos * width + everything.pred_pos
        self._pair_index = {k: np.searchsorted(global_code, t.ref_pos * width + t.pred_pos) for k, t in zip(keys, tables)}
        pred_pos = np.concatenate([self.results[k].pred_pos for k in keys]) if keys else np.empty(0, np.int64)
        order = np.argsort(pred_pos, kind="stable")

        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(self.results[k], name) for k in keys])[order] if keys else np.empty(0)

        self._preds = prediction_rows(pred_pos[order], cat("pred_area_m2"), cat("pred_perimeter_m"), cat("pred_within_tol_m"), self._resolution)
        ref_pos = np.concatenate([self.results[k].ref_pos for k in keys]) if keys else np.empty(0, np.int64)
        ref_part = np.concatenate([np.full(len(self.results[k].ref_pos), i) for i, k in enumerate(keys)]) if keys else np.empty(0, np.int64)
        ref_order = np.argsort(ref_pos)
        home = self._preds["home_ref_pos"].to_numpy()
        homed = home >= 0
        part_of_pred = np.full(len(home), -1)
        part_of_pred[homed] = ref_part[ref_order][np.searchsorted(ref_pos[ref_order], home[homed])]
        self._pred_partition = {k: np.flatnonzero(part_of_pred == i) for i, k in enumerate(keys)}
        labels = pd.concat([pd.Series(self.results[k].pred_label_of_pair, index=self.results[k].pairs.pred_pos) for k in keys]) if keys else pd.Series([], dtype=object)
        self._pred_labels = labels[~labels.index.duplicated()].infer_objects()
        self._unassigned = unassigned_row(self._preds, self.options.boundary_tolerance_m)
        self.timings["resolve"] = time.perf_counter() - started

    def sums(self) -> dict[PartitionKey, dict]:
        """Phase 4a: per-partition field tables and partial sums, written to the work directory."""
        started = time.perf_counter()
        ref_info = self._info("reference")
        ea = self.ea_crs.to_wkt()
        futures = {}
        done: dict[PartitionKey, dict] = {}
        for key in sorted(ref_info.partitions, key=lambda k: -self._partition_rows(k)):  # largest first
            npz = self.workdir / "sums" / f"{storage.key_name(key)}.npz"
            if storage.done_record_valid(npz.with_suffix(".done.json"), self.signature):
                part = _summary_from_arrays(storage.read_summary(npz))
                done[key] = {"key": key, "n_ref": part.n_ref, "n_pred": part.n_pred, "path": str(npz)}
                continue
            results = self.results[key]
            idx = self._pair_index[key]
            preds = self._preds.iloc[self._pred_partition[key]]
            labels = self._pred_labels.reindex(np.unique(results.pairs.pred_pos))
            futures[key] = self.client.submit(
                sums_task,
                str(self.workdir),
                key,
                ref_info,
                results,
                self._resolution.is_match[idx],
                self._resolution.is_eligible[idx],
                preds,
                labels,
                self.plan,
                self.options,
                ea,
                str(self.frame_dir) if self.frame_dir is not None else None,
                self.signature,
                key=self._task_key("sums", *key),
                retries=2,
                priority=self._partition_rows(key),
            )
        if done and self.log:
            self.log(f"sums: reusing {len(done)} finished partitions (checksums verified)")
        self.reused["sums"] = len(done)
        self.sums_info = {**done, **self._gather("sums", futures)}
        self.timings["sums"] = time.perf_counter() - started
        return self.sums_info

    def merge(self) -> dict[str, object]:
        """Phase 4b: read every partition's sums, check completeness, add them in key order."""
        started = time.perf_counter()
        ref = self.index["reference"]
        parts = []
        keys = sorted(ref["partitions"])
        paths = {key: self.workdir / "sums" / f"{storage.key_name(key)}.npz" for key in keys}
        # Every missing partition is named, not only the first: after a failure the
        # others may have been cancelled, and the user wants the one that failed.
        missing = [key for key in keys if not paths[key].exists()]
        if missing:
            names = ", ".join(storage.key_name(k) for k in missing[:10]) + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
            raise PartitionMissingError(
                f"{len(missing)} of {len(keys)} partitions have no sums output ({names}) in {self.workdir / 'sums'}; "
                "the run is incomplete."
            )
        for key in keys:
            path = paths[key]
            if not storage.done_record_valid(path.with_suffix(".done.json"), self.signature):
                raise PartitionMissingError(
                    f"partition {storage.key_name(key)}: its outputs do not match their recorded checksums or "
                    "belong to another run; rerun to recompute it."
                )
            part = _summary_from_arrays(storage.read_summary(path))
            expected = ref["partitions"][key]["n"]
            if part.n_ref != expected:
                raise PartitionMissingError(
                    f"partition {storage.key_name(key)} summed {part.n_ref} reference fields but {expected} were prepared."
                )
            parts.append(part)
        plan = self.plan
        merged = merge_partitions(
            parts, self._unassigned, n_strata=plan.n_strata, n_sizes=plan.n_sizes, n_replicates=self.options.bootstrap
        )
        n_ref = int(merged.overall.as_dict()["n_ref"])
        n_pred = int(merged.overall.as_dict()["n_pred"])
        if n_ref != ref["n_kept"] or n_pred != self.index["predicted"]["n_kept"]:
            raise PartitionMissingError(
                f"the partitions add up to {n_ref} reference fields and {n_pred} predictions, but "
                f"{ref['n_kept']} and {self.index['predicted']['n_kept']} were prepared."
            )
        counts = {
            f"count_{name}_{what}": self.index[role][f"n_{what}"]
            for role, name in (("reference", "reference"), ("predicted", "predicted"))
            for what in ("dropped", "repaired")
        }
        codes = sorted(set(ref["utm_epsg"]) | set(self.index["predicted"]["utm_epsg"]))
        result = build_summary(merged, plan, self.options, layer_counts=counts, utm_epsg_codes=codes, equal_area_crs=self.ea_crs.to_string())
        self.timings["merge"] = time.perf_counter() - started
        return result

    def run(self) -> dict[str, object]:
        """All phases in order."""
        self.prepare()
        self.make_plan()
        self.pairs()
        self.resolve()
        self.sums()
        return self.merge()


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


def stage_layer(layer: object, role: str, workdir: Path, strata: object = None, chunk_rows: int = 50_000) -> LayerSource:
    """Write an in-memory layer to the work directory as GeoParquet so workers can read it.

    The index is kept in a column, so labels survive; ``strata`` values (a Series or
    an array) are written as a column named ``__evalcore_stratum__``.
    """
    from evalcore.prepare import layer_geometries

    geoms, index, crs = layer_geometries(layer, role)
    frame = geopandas.GeoDataFrame({LABEL_COLUMN: np.asarray(index)}, geometry=geopandas.GeoSeries(geoms), crs=crs)
    if strata is not None:
        frame["__evalcore_stratum__"] = strata_values(layer, strata, len(frame))
    path = workdir / "input" / f"{role}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    from evalcore.io import atomic_path

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
    """
    import shutil
    import tempfile

    own_tmp = workdir is None
    work = Path(tempfile.mkdtemp(prefix="evalcore-")) if own_tmp else Path(workdir)
    try:
        strata_column = None
        sources = []
        for layer, role, name in ((predicted, "predicted", pred_layer), (reference, "reference", ref_layer)):
            if isinstance(layer, (str, Path)):
                sources.append(LayerSource(str(layer), name, role))
                if role == "reference" and strata is not None:
                    if not isinstance(strata, str):
                        raise TypeError("With a reference file, strata must be a column name.")
                    strata_column = strata
            else:
                values = strata if role == "reference" else None
                sources.append(stage_layer(layer, role, work, values, chunk_rows))
                if role == "reference" and strata is not None:
                    strata_column = "__evalcore_stratum__"
        run = DistributedRun(
            client=client,
            predicted=sources[0],
            reference=sources[1],
            options=options,
            workdir=work,
            strata_column=strata_column,
            size_bins=size_bins,
            frame_dir=Path(frame_dir) if frame_dir is not None else None,
            chunk_rows=chunk_rows,
            progress=progress,
        )
        return run.run()
    finally:
        if own_tmp:
            shutil.rmtree(work, ignore_errors=True)

