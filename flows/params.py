"""The validated parameters of the ``evaluate-layers`` and ``reevaluate-new-imagery`` flows."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from evalcore.distributed.cluster import DASHBOARD_ADDRESS, check_dashboard_address
from evalcore.metrics.base import Option
from evalcore.options import EvalOptions, all_options, check_options
from evalcore.outputs import check_not_inputs
from evalcore.remote import check_input_urls, check_local_only, check_url
from evalcore.remote import is_url as remote_is_url

__all__ = ["MetricParams", "EvaluateParams", "ReevaluateParams", "METRIC_PARAMETERS", "DEFAULT_LAYER_PATTERN"]


DashboardAddress = Annotated[str, AfterValidator(check_dashboard_address)]
"""``HOST:PORT`` of the embedded cluster's dashboard (:func:`evalcore.distributed.cluster.check_dashboard_address`)."""

_DASHBOARD_HELP = (
    "where the embedded LocalCluster's Dask dashboard listens (used only when cluster is null); "
    "the default 127.0.0.1:0 is this machine only, a free port; 0.0.0.0:8787 or :8787 open it to other machines (it has no login)"
)


class _InputParams(BaseModel):
    """The parameters about the layers themselves (the metric options are generated below)."""

    model_config = ConfigDict(extra="forbid")

    ref_layer: str | None = Field(None, description="layer name inside the reference file")
    strata_column: str | None = Field(None, description="reference column holding the stratum")
    size_bins: Literal["auto"] | list[float] | None = Field(None, description="'auto' or edges in hectares")

    @field_validator("size_bins")
    @classmethod
    def _increasing(cls, value: object) -> object:
        if isinstance(value, list) and (len(value) < 2 or any(b <= a for a, b in zip(value, value[1:]))):
            raise ValueError(f"size_bins must be at least two strictly increasing edges in hectares, got {value}")
        return value

    @model_validator(mode="after")
    def _engine_checks(self) -> _InputParams:
        self.options()  # the engine's own validation: the message names the option and the value
        return self

    def options(self) -> EvalOptions:
        """The metric options, checked by the engine."""
        return check_options(**{option.name: getattr(self, option.name) for option in all_options()})


def _option_field(option: Option) -> tuple[object, object]:
    default = list(option.default) if isinstance(option.default, tuple) else option.default
    return (option.annotation, Field(default, description=option.help))


MetricParams = create_model(
    "MetricParams",
    __base__=_InputParams,
    __module__=__name__,
    __doc__=(
        "The options that decide the numbers, shared by both flows' parameters: one field per "
        "option of :func:`evalcore.options.all_options` (they mean what they mean in "
        ":func:`evalcore.evaluate`), plus the layer parameters."
    ),
    **{option.name: _option_field(option) for option in all_options()},
)


class EvaluateParams(MetricParams):
    """Everything one evaluation run needs, validated once when the flow starts.

    Layer locations are local paths or store URLs (``s3://``, ``gs://``, ``az://``,
    ``file://``; evalcore.remote), read by the workers with their own credentials; the
    run directory and the work directory are local paths (or a shared mount) for now. Metric
    options mean what they mean in :func:`evalcore.evaluate`; ``partition_size_m`` is the
    partition tile side in metres; ``cluster`` is a Dask scheduler address, or None for
    an embedded ``LocalCluster`` with ``n_workers`` worker processes.
    """

    model_config = ConfigDict(extra="forbid")

    predicted: str = Field(description="predicted layer: a file pyogrio reads, a GeoParquet file or a directory of parts; a local path or a store URL (s3://, gs://, az://, file://)")
    reference: str = Field(description="reference layer, as for predicted")
    output_dir: str = Field(description="run directory: metrics.json, fields/, report.md, manifest.json")
    pred_layer: str | None = Field(None, description="layer name inside the predicted file")
    cluster: str | None = Field(None, description="Dask scheduler address (tcp://host:port); None: embedded LocalCluster")
    n_workers: int = Field(2, ge=1, description="worker processes of the embedded LocalCluster")
    dashboard_address: DashboardAddress = Field(DASHBOARD_ADDRESS, description=_DASHBOARD_HELP)
    workdir: str | None = Field(None, description="work directory (default: <output_dir>/work)")
    chunk_rows: int = Field(50_000, ge=1, description="input rows per prepare task")
    keep_workdir: bool = Field(False, description="keep the work directory after a successful run (it is always kept after a failure, for resume)")
    gates: str | None = Field(None, description="acceptance gates file (YAML, deploy/gates.example.yaml): acceptance-gates.json in the run directory; the run ends Failed unless every gate passes")
    labels: dict[str, str] = Field(default_factory=dict, description="user labels of the run (model hash, imagery source ...), written into evaluation-contract.json")

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key or not key.strip() or "=" in key:
                raise ValueError(f"a label key must be non-empty text without '=', got {key!r}")
        return value

    @model_validator(mode="after")
    def _outputs_are_not_inputs(self) -> EvaluateParams:
        # The run directory and the work directory are replaced and cleaned: neither may be,
        # hold, or sit inside an input (evalcore.outputs.check_not_inputs).
        inputs = {"predicted": self.predicted, "reference": self.reference, "gates": self.gates}
        inputs |= {name: getattr(self, name, None) for name in ("aoi", "annotated_area", "study_area", "training_area")}
        check_input_urls({name: value for name, value in inputs.items() if name != "gates"})
        check_local_only({"gates": self.gates})
        for name in ("output_dir", "workdir"):  # store URLs are checked (no credential in them) and normalised
            value = getattr(self, name)
            if isinstance(value, str) and remote_is_url(value):
                check_url(value, name)
        check_not_inputs(inputs, {"output_dir": self.output_dir, "workdir": self.workdir}, directories={"output_dir", "workdir"})
        return self

    def metric_parameters(self) -> dict:
        """The options that decide the numbers (:data:`METRIC_PARAMETERS`), JSON-ready."""
        return {name: getattr(self, name) for name in METRIC_PARAMETERS}


#: The ``EvaluateParams`` fields that decide the numbers (besides the two input files).
#: Their hash, with the two files' SHA-256, identifies an evaluation in the run registry;
#: ``cluster``, ``n_workers`` and ``chunk_rows`` are left out because the answer does not
#: depend on them.
METRIC_PARAMETERS: tuple[str, ...] = ("ref_layer", "strata_column", "size_bins") + tuple(o.name for o in all_options())

#: File names taken as prediction layers by default (``{a,b}`` lists alternatives).
#: Shapefiles are left out: a layer is several files, and the content hash and the
#: staging copy work on one file or one directory.
DEFAULT_LAYER_PATTERN = "*.{parquet,geoparquet,gpkg,fgb,geojson}"


class ReevaluateParams(MetricParams):
    """Parameters of ``reevaluate-new-imagery``: a reference, a folder of prediction layers.

    ``predictions`` is a local directory or an fsspec URL (``file://``, ``s3://``,
    ``memory://`` ...) holding one prediction layer per imagery acquisition: files whose
    name matches ``pattern``, and sub-directories of GeoParquet parts whose name matches
    ``dir_pattern``. ``reference`` is a local path or an fsspec URL too. Layers that are
    not on the local file system are copied to ``staging_dir`` before they are hashed and
    evaluated. The metric options, ``cluster`` and ``n_workers`` mean what they mean in
    :class:`EvaluateParams` and are passed on to every evaluation.
    """

    model_config = ConfigDict(extra="forbid")

    reference: str = Field(description="reference layer: local path or fsspec URL")
    predictions: str = Field(description="directory (local path or fsspec URL) with one prediction layer per acquisition")
    output_root: str = Field(description="local directory: <output_root>/<product>/<layer>-<sha>-<key>/ per run")
    product: str | None = Field(None, description="product name (default: the predictions directory's name)")
    registry_url: str | None = Field(None, description="SQLAlchemy URL of the run registry (default: sqlite:///<output_root>/registry.sqlite)")
    pattern: str = Field(DEFAULT_LAYER_PATTERN, min_length=1, description="glob on file names; {a,b} for alternatives")
    dir_pattern: str | None = Field("*", description="glob on names of sub-directories of GeoParquet parts; None: no directories")
    staging_dir: str | None = Field(None, description="local copies of remote layers (default: <output_root>/.staging)")
    cluster: str | None = Field(None, description="Dask scheduler address; None: one embedded LocalCluster for the whole batch")
    n_workers: int = Field(2, ge=1, description="worker processes of the embedded LocalCluster")
    dashboard_address: DashboardAddress = Field(DASHBOARD_ADDRESS, description=_DASHBOARD_HELP)

    @model_validator(mode="after")
    def _valid_for_evaluation(self) -> ReevaluateParams:
        # The same rules as a single evaluation (size_bins edges, the engine's own checks),
        # so a bad option fails when the flow starts, not at the first new layer.
        try:
            self.evaluate_params(predicted="<predicted>", reference="<reference>", output_dir="<output_dir>").options()
        except ValidationError as exc:
            raise ValueError("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())) from None
        return self

    def metric_parameters(self) -> dict:
        """The options that decide the numbers (:data:`METRIC_PARAMETERS`), JSON-ready."""
        return {name: getattr(self, name) for name in METRIC_PARAMETERS}

    def params_hash(self) -> str:
        """SHA-256 of :meth:`metric_parameters` as canonical JSON (sorted keys, floats as floats).

        Integral floats are written the same whether they came in as ``10`` or ``10.0``
        because pydantic has already made them floats.
        """
        text = json.dumps(self.metric_parameters(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def evaluate_params(
        self,
        *,
        predicted: str,
        reference: str,
        output_dir: str,
        cluster: str | None = None,
        workdir: str | None = None,
    ) -> EvaluateParams:
        """The :class:`EvaluateParams` of one layer's evaluation.

        Parameters
        ----------
        predicted, reference : str
            Local paths of the (staged) layers.
        output_dir : str
            The run directory.
        cluster : str, optional
            Scheduler address; overrides ``self.cluster`` (the flow passes the address
            of the LocalCluster it shares between evaluations).
        workdir : str, optional
            The evaluation's work directory.
        """
        return EvaluateParams(
            predicted=predicted,
            reference=reference,
            output_dir=output_dir,
            cluster=cluster if cluster is not None else self.cluster,
            n_workers=self.n_workers,
            dashboard_address=self.dashboard_address,
            workdir=workdir,
            **self.metric_parameters(),
        )
