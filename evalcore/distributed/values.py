"""The values passed between the phases of a distributed run (:mod:`evalcore.distributed.runner`).

Frozen dataclasses: a phase returns one and the next reads it, so none can run before
its input exists and an orchestrator (the Prefect flow) passes them along. Also the
layer's partition index as a worker task receives it (:class:`LayerInfo`) and the box
test the halo and the pixel tiles are selected with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pyproj import CRS

from evalcore.bootstrap import PartitionKey
from evalcore.config import DEFAULT_EQUAL_AREA_CRS
from evalcore.crs import equal_area_crs_from
from evalcore.distributed.sources import LayerSource
from evalcore.engine.resolve import Resolved, Routing
from evalcore.levels import Sites
from evalcore.options import EvalOptions
from evalcore.study import Study

__all__ = [
    "LAYERS",
    "Box",
    "ProgressCallback",
    "boxes_overlap",
    "LayerInfo",
    "RunSetup",
    "RunIndex",
    "PairsDone",
    "ResolvedRun",
    "SumsDone",
    "PredictionsPending",
    "RunOutcome",
]


LAYERS = ("reference", "predicted")


Box = tuple[float, float, float, float]


ProgressCallback = Callable[[str, int, int], None]


def boxes_overlap(a: Box, b: Box) -> bool:
    return a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]


@dataclass(frozen=True, slots=True)
class LayerInfo:
    """One layer's prepared partitions: its CRS and, per partition key, its row count
    (``n``), boxes (``box``, ``reach_box``) and strata counts."""

    crs: CRS | None
    partitions: dict[PartitionKey, dict]

    def only(self, keys: Iterable[PartitionKey]) -> LayerInfo:
        """The info of the partitions of ``keys`` that the layer has, with its CRS: what a
        task of those partitions reads. Sent whole to each task, the info of every partition
        made a phase's task arguments grow with the square of the partitions (280 KiB per
        pairs task at 10M fields' 1,258 partitions: 344 MiB for the phase)."""
        return LayerInfo(self.crs, {k: self.partitions[k] for k in keys if k in self.partitions})


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

    def info(self, role: str) -> LayerInfo:
        entry = self.layers[role]
        return LayerInfo(CRS.from_wkt(entry["crs"]) if entry["crs"] else None, entry["partitions"])

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
            j for j, p in self.layers[other_role]["partitions"].items() if j != key and boxes_overlap(own["reach_box"], p["reach_box"])
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
        ``{partition key: rows of resolved.preds}`` of the predictions each partition owns
        (resolved on the workers: ``{partition key: [paths]}`` of their frames' parts).
    shares : dict, optional
        Resolved on the workers: ``{partition key: [paths]}`` of the shares the resolves
        wrote for each partition's sums task (``resolved`` then holds only the run-level
        values: the homeless predictions' sums, the column names; ``routing`` is None).
    field_groups : dict, optional
        Resolved on the workers with a field bootstrap: ``{partition key: (sizes, holders)}``,
        the run's sizes of the (pool, reporting tile) groups of its reference fields
        (``{(pool, tile): n}``; their counts are in the pools' files the ``group-draws``
        tasks wrote) and the other partitions holding fields of them, for its sums task.
    homeless : tuple of str, optional
        Resolved on the workers: the paths of the resolves' homeless rows, in partition key
        order; a paired comparison draws the run's homeless sums again from them over the
        union of its runs' units (:func:`evalcore.distributed.runner.resolve_phase`).
    homeless_units : str, optional
        Resolved on the workers: the file of the homeless predictions' tile and AOI sums
        (``resolved.homeless_tiles`` and ``homeless_aois`` are then None): they hold a
        row of replicates per unit, so the merge reads them when it adds them.
    handed_weights : dict, optional
        Resolved on the workers with scores and a field bootstrap: ``{partition key: path}``
        of the replicate weights each score weights task wrote for its partition's sums task
        (:func:`evalcore.distributed.tasks.sums_task`).
    """

    resolved: Resolved
    ref_keys: tuple
    routing: Routing | None
    seconds: float = 0.0
    pred_rows: dict = field(default_factory=dict, repr=False)
    shares: dict | None = field(default=None, repr=False)
    field_groups: dict | None = field(default=None, repr=False)
    homeless: tuple | None = field(default=None, repr=False)
    homeless_units: str | None = None
    handed_weights: dict | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SumsDone:
    """The sums phase's output: per partition, its row counts and the path of its sums.

    Attributes
    ----------
    partitions : dict
        ``{key: {"key", "n_ref", "n_pred", "path"}}``.
    reused : int
    seconds : float
    predictions : PredictionsPending, optional
        The per-prediction table's tasks, submitted with the sums' and still running
        (:func:`evalcore.distributed.runner.finish_predictions` waits for them).
    """

    partitions: dict
    reused: int = 0
    seconds: float = 0.0
    predictions: PredictionsPending | None = None


@dataclass(frozen=True)
class PredictionsPending:
    """The per-prediction table's tasks of a run, submitted and not yet gathered.

    Attributes
    ----------
    futures : dict
        ``{partition key: future}`` of :func:`evalcore.distributed.tasks.predictions_task`.
    expected : int
        Predictions the resolve kept: the parts must hold that many.
    """

    futures: dict
    expected: int


@dataclass(frozen=True)
class RunOutcome:
    """Every phase's output of a whole run, and its wall time per phase (seconds)."""

    metrics: dict
    index: RunIndex
    pairs: PairsDone
    resolved: ResolvedRun
    sums: SumsDone
    timings: dict
