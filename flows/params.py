"""The validated parameters of the ``evaluate-layers`` flow."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalcore.api import EvalOptions, check_options
from evalcore.config import BOUNDARY_SAMPLE_SPACING_M, DEFAULT_TILE_SIZE_M

__all__ = ["EvaluateParams"]


class EvaluateParams(BaseModel):
    """Everything one evaluation run needs, validated once when the flow starts.

    Layer locations are local paths (fsspec URLs are staged by the caller). Metric
    options mean what they mean in :func:`evalcore.evaluate`; ``tile_size_m`` is the
    partition tile side in metres; ``cluster`` is a Dask scheduler address, or None for
    an embedded ``LocalCluster`` with ``n_workers`` worker processes.
    """

    model_config = ConfigDict(extra="forbid")

    predicted: str = Field(description="predicted layer: a file pyogrio reads, a GeoParquet file or a directory of parts")
    reference: str = Field(description="reference layer, as for predicted")
    output_dir: str = Field(description="run directory: metrics.json, fields/, report.md, manifest.json")
    pred_layer: str | None = Field(None, description="layer name inside the predicted file")
    ref_layer: str | None = Field(None, description="layer name inside the reference file")
    iou_threshold: float = Field(0.5, gt=0.0, le=1.0)
    matching: Literal["one_to_one", "many_to_one"] = "one_to_one"
    strata_column: str | None = Field(None, description="reference column holding the stratum")
    size_bins: Literal["auto"] | list[float] | None = Field(None, description="'auto' or edges in hectares")
    bootstrap: int = Field(0, ge=0, description="bootstrap resamples (0: no intervals)")
    bootstrap_seed: int = Field(42, ge=0)
    boundary_tolerance_m: float | None = Field(None, gt=0.0, description="boundary tolerance, metres")
    equal_area_crs: str | None = Field(None, description="equal-area CRS (default EPSG:6933)")
    boundary_sample_spacing_m: float | None = Field(BOUNDARY_SAMPLE_SPACING_M, gt=0.0)
    tile_size_m: float = Field(DEFAULT_TILE_SIZE_M, gt=0.0, description="partition tile side, metres")
    cluster: str | None = Field(None, description="Dask scheduler address (tcp://host:port); None: embedded LocalCluster")
    n_workers: int = Field(2, ge=1, description="worker processes of the embedded LocalCluster")
    workdir: str | None = Field(None, description="work directory (default: <output_dir>/work)")
    chunk_rows: int = Field(50_000, ge=1, description="input rows per prepare task")

    @field_validator("size_bins")
    @classmethod
    def _increasing(cls, value: object) -> object:
        if isinstance(value, list) and (len(value) < 2 or any(b <= a for a, b in zip(value, value[1:]))):
            raise ValueError(f"size_bins must be at least two strictly increasing edges in hectares, got {value}")
        return value

    def options(self) -> EvalOptions:
        """The metric options, checked by the engine's own validation too."""
        return check_options(
            iou_threshold=self.iou_threshold,
            matching=self.matching,
            bootstrap=self.bootstrap,
            bootstrap_seed=self.bootstrap_seed,
            boundary_tolerance_m=self.boundary_tolerance_m,
            equal_area_crs=self.equal_area_crs,
            boundary_sample_spacing_m=self.boundary_sample_spacing_m,
            tile_size_m=self.tile_size_m,
        )
