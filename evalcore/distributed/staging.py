"""Setting up a distributed run: its signature, its work directory, what the workers read.

:func:`start_run` makes every local path absolute, writes in-memory site layers to the
work directory, hashes the inputs and parameters into the run's signature and clears
what another run left there; :func:`stage_layer` writes an in-memory layer for the
workers to read; :func:`check_workers_see` fails early when a worker cannot see a path.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import geopandas
import numpy as np

from evalcore._version import __version__
from evalcore.distributed import workdir as wd
from evalcore.distributed.sources import LABEL_COLUMN, LayerSource
from evalcore.distributed.values import ProgressCallback, RunSetup
from evalcore.errors import EvalInputError
from evalcore.groups import strata_values
from evalcore.options import EvalOptions
from evalcore.outputs import WORKDIR_PHASE_ENTRIES
from evalcore.sites import SITE_LAYERS, LayerInput
from evalcore.threads import map_each
from evalcore.writers import write_json

__all__ = ["STAGED_STRATA_COLUMN", "SITE_OPTIONS", "start_run", "stage_layer", "check_workers_see"]

logger = logging.getLogger(__name__)


STAGED_STRATA_COLUMN = "__evalcore_stratum__"
"""Column of an in-memory layer's strata values once staged to the work directory."""


SITE_OPTIONS: tuple[str, ...] = tuple(kind.option for kind in SITE_LAYERS)
"""Options naming a site layer (read on the client, hashed into the run's signature)."""


def _signature_of_run(
    predicted: LayerSource, reference: LayerSource, options: EvalOptions, strata_column: str | None,
    size_bins: object, chunk_rows: int, frame_dir: Path | None, table_outputs: tuple = (),
) -> tuple[str, dict]:
    """SHA-256 over the inputs' checksums and every parameter that changes an output."""
    import hashlib

    from evalcore.report import sha256_path

    # The two layers side by side: hashing releases the GIL, and a national layer is
    # gigabytes (the 2M-field benchmark's 1.1 GB and 392 MB, page-cached: 1.01-1.18 s one after the
    # other, 0.70-0.73 s side by side, in four runs of each).
    input_sha256 = dict(zip((reference.role, predicted.role), map_each(sha256_path, [reference.path, predicted.path]), strict=True))
    for name in SITE_OPTIONS:
        value = getattr(options, name)
        if value is not None:
            input_sha256[name] = sha256_path(value)
    payload = {
        "inputs": {
            s.role: {"path": s.path if "://" in s.path else str(Path(s.path).resolve()), "layer": s.layer, "id_column": s.id_column, "sha256": input_sha256[s.role]}
            for s in (reference, predicted)
        },
        "options": {k: (str(v) if k == "equal_area_crs" and v is not None else v) for k, v in options.as_dict().items()},
        "strata_column": strata_column,
        "size_bins": size_bins,
        "chunk_rows": chunk_rows,
        # A store work directory's parts are named by their URL (the mirror's path is this process's).
        "frame_dir": (wd.url_of(frame_dir) or str(frame_dir.resolve())) if frame_dir is not None else None,
        "sites": {name: input_sha256.get(name) for name in SITE_OPTIONS},
        "table_outputs": [(wd.url_of(p) or str(p)) if p is not None else None for p in table_outputs],
        "evalcore": __version__,
        # Partition summaries hold exact digit sums (evalcore.exact) and replicate sums of the
        # interval columns only (registry.replicate_columns); an older work directory's
        # summaries are not reused.
        "sums_format": "exact-digits-24x6+replicate-columns",
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest(), input_sha256


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
            wd.publish(path)
            values[name] = wd.url_of(path) or str(path)
        elif isinstance(value, str) and "://" not in value:
            values[name] = str(Path(value).resolve())
    return EvalOptions(values)


def _absolute_source(source: LayerSource) -> LayerSource:
    if "://" in source.path:
        return source
    return replace(source, path=str(Path(source.path).resolve()))


def check_workers_see(client: object, paths: dict[str, Path | str]) -> None:
    """Fail early, and clearly, when a worker cannot see the inputs or the work directory.

    A local path must exist on every worker (a shared file system mounted at the same
    path); a URL must be readable by every worker with the worker's own credentials
    (its environment, config files or identity: nothing is sent from this client).

    Parameters
    ----------
    client : distributed.Client
    paths : dict
        ``{what: absolute local path or URL}``.

    Raises
    ------
    EvalInputError
        Naming the path and the first worker that cannot see it, and what the workers need.
    """
    from evalcore import remote

    local = {what: str(p) for what, p in paths.items() if not remote.is_url(str(p))}
    urls = {what: str(p) for what, p in paths.items() if remote.is_url(str(p))}
    if local:
        seen = client.run(_paths_exist, list(local.values()))
        for worker, exists in sorted(seen.items()):
            for (what, path), ok in zip(local.items(), exists):
                if not ok:
                    raise EvalInputError(
                        f"the Dask worker {worker} cannot see the {what} {path!r}: the workers need the local inputs and the work "
                        "directory on a file system they share with this client, mounted at the same path (docs/national-run.md)."
                    )
    if urls:
        problems = client.run(_urls_readable, list(urls.values()))
        for worker, found in sorted(problems.items()):
            for (what, url), problem in zip(urls.items(), found):
                if problem is not None:
                    raise EvalInputError(
                        f"the Dask worker {worker} cannot read the {what}: {problem} (a worker reads the store with its own "
                        "credentials, from its environment, config files or identity)."
                    )


def _paths_exist(paths: list[str]) -> list[bool]:
    return [os.path.exists(p) for p in paths]


def _urls_readable(urls: list[str]) -> list[str | None]:
    """On a worker: None for each URL it can read, else the one-line reason (never a secret)."""
    from evalcore import remote

    out: list[str | None] = []
    for url in urls:
        try:
            found = remote.stat(url)
            out.append(None if found is not None else f"{url!r} does not exist")
        except EvalInputError as exc:
            out.append(str(exc))
    return out


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
    table_outputs = (tiles_out, aois_out, predictions_dir, pr_curve_out)
    if wd.is_remote(workdir):
        # A store run's tables are written in a local staging directory made anew by each
        # client process: what they are, not where, is part of the run's identity.
        table_outputs = tuple(p if p is None or wd.is_remote(p) else Path(p.name) for p in table_outputs)
    signature, input_sha256 = _signature_of_run(
        predicted, reference, options, strata_column, size_bins, chunk_rows, frame_dir, table_outputs
    )
    workdir.mkdir(parents=True, exist_ok=True)
    run_file = workdir / "run.json"
    previous = None
    if wd.exists(run_file):
        try:
            previous = json.loads(wd.fetch(run_file, fresh=True).read_text()).get("signature")
        except ValueError:
            previous = None
    if previous != signature:
        for sub in WORKDIR_PHASE_ENTRIES:
            wd.remove_tree(workdir / sub)
        if frame_dir is not None:
            wd.remove_files(frame_dir, "part-*.parquet")
        if previous is not None:
            logger.info("work directory %s held another run (inputs or parameters changed): starting afresh", workdir)
        write_json(run_file, {"signature": signature})
        wd.publish(run_file)
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
    wd.publish(path)
    return LayerSource(wd.url_of(path) or str(path), None, role)  # the workers read a store's copy by its URL
