"""Flow ``reevaluate-new-imagery``: evaluate every prediction layer not yet evaluated.

A predictions location (a local directory or an fsspec URL) holds one prediction layer
per imagery acquisition. Each run of the flow

1. stages the reference and every layer that is not on the local file system into
   ``staging_dir`` (reusing a staged copy while the source's size and version stamp are
   unchanged) and hashes them with :func:`evalcore.report.sha256_path`;
2. keeps the layers without a *succeeded* run of the same
   ``(prediction SHA-256, reference SHA-256, metric-parameters hash)`` in the run
   registry (:mod:`flows.registry`), so a new layer, a new reference or new metric
   options are evaluated, and nothing else;
3. runs the ``evaluate-layers`` flow on each, as a subflow, into
   ``<output_root>/<product>/<layer stem>-<pred sha[:12]>-<key[:8]>/``, where ``key``
   hashes the reference SHA-256 and the metric parameters (so a re-evaluation against
   a new reference never overwrites an earlier run's directory);
4. records each run in the registry and writes ``comparison.json`` and
   ``comparison.md`` beside its outputs: the headline metrics against the previous
   succeeded run of the same product, with the difference and whether the 95 %
   intervals overlap. The comparison is also published as the Prefect markdown
   artifact ``evalcore-comparison-<product>``;
5. with bootstrap resamples, compares the new layer with the previous one by the
   paired comparison (:mod:`evalcore.compare`: both on the same resamples), writes
   ``paired.json`` and ``paired.md``, publishes the delta table as a table artifact
   and flags a regression (a headline delta or a unit's with its interval below zero)
   in the log and in ``paired.json``.

Both comparisons are written after the run's evidence is sealed; each is sealed in turn
as an amendment (``evidence-manifest.vN.json``), so ``evalcore verify`` accounts for it.

Each layer is claimed in the registry before it is evaluated (an atomic insert), so two
flow runs started together never evaluate the same layer twice; a failed evaluation
gives its claim back so the next run retries it.

With nothing new, it logs "nothing new" and returns an empty list. Evaluations run one
after another on one Dask cluster: ``params.cluster``, or a ``LocalCluster`` started
once for the batch. A failed evaluation is recorded as failed and the others go on; the
flow then fails, naming the layers that failed.

The module stays whole (about 550 lines) because it is one flow: listing, staging,
claiming, evaluating and comparing are its tasks, each small and used only here.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from evalcore._version import __version__
from evalcore.writers import atomic_path, write_json
from evalcore.metrics.registry import FAMILIES
from evalcore.present import better_of, interval_text, is_worse, number
from evalcore.report import HEADLINE_KEYS, markdown_text, sha256_path
from flows.evaluate import dask_client, evaluate_layers
from flows.params import ReevaluateParams
from flows.registry import compare_summaries, default_registry_url, open_registry, run_summary

__all__ = [
    "reevaluate_new_imagery",
    "list_layers",
    "stage_layer",
    "product_name",
    "artifact_key",
    "expand_braces",
    "render_comparison",
]

_PARQUET_SUFFIXES = (".parquet", ".geoparquet", ".pq")
# fsspec info fields that change when an object's content changes (local, S3, GCS, Azure, memory).
_VERSION_FIELDS = ("ETag", "etag", "md5Hash", "crc32c", "generation", "VersionId", "version_id", "mtime", "LastModified", "last_modified", "created", "updated")


# ----------------------------------------------------------------------------- helpers
def expand_braces(pattern: str) -> list[str]:
    """Expand ``{a,b}`` alternatives in a glob (several groups, not nested).

    Examples
    --------
    >>> expand_braces("*.{parquet,gpkg}")
    ['*.parquet', '*.gpkg']
    >>> expand_braces("*.fgb")
    ['*.fgb']
    """
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [out for alt in match.group(1).split(",") for out in expand_braces(head + alt + tail)]


def _matches(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name.lower(), p.lower()) for p in patterns)


def _is_local(fs: object) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def _url(fs: object, path: str) -> str:
    """A path from ``fs`` as the user would write it: local path, or URL with protocol."""
    return path if _is_local(fs) else fs.unstrip_protocol(path)


def _safe_name(text: str) -> str:
    """File-system and Prefect-name friendly: letters, digits, ``.``, ``_`` and ``-``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "layer"


def product_name(predictions: str) -> str:
    """The default product name: the predictions directory's name.

    Examples
    --------
    >>> product_name("s3://bucket/field-boundaries/v3/")
    'v3'
    >>> product_name("/data/predictions/fields-ml")
    'fields-ml'
    >>> product_name("simplecache::gs://bucket/fields?versionId=1")
    'fields'
    """
    path = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://", "", predictions.split("::")[-1]).split("?")[0]
    return PurePosixPath(path.replace(os.sep, "/").rstrip("/")).name or "predictions"


def artifact_key(product: str) -> str:
    """The comparison artifact's key; Prefect keys allow lowercase letters, digits and dashes.

    Examples
    --------
    >>> artifact_key("Fields_ML v3.1")
    'evalcore-comparison-fields-ml-v3-1'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", product.lower()).strip("-")
    return f"evalcore-comparison-{slug}" if slug else "evalcore-comparison"


def _layer_stem(name: str) -> str:
    base = PurePosixPath(name.rstrip("/")).name
    for suffix in (*_PARQUET_SUFFIXES, ".gpkg", ".fgb", ".geojson", ".json", ".shp", ".gdb"):
        if base.lower().endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)]
    return PurePosixPath(base).stem or base


def list_layers(
    location: str,
    pattern: str,
    dir_pattern: str | None = "*",
    *,
    exclude: tuple[str, ...] = (),
) -> list[dict]:
    """The prediction layers directly under ``location``, sorted by name.

    Parameters
    ----------
    location : str
        A local directory or an fsspec URL of one.
    pattern : str
        Glob on file names (case-insensitive; ``{a,b}`` for alternatives).
    dir_pattern : str or None
        Glob on sub-directory names; a matching sub-directory with ``.parquet`` files
        (at any depth) is one layer of GeoParquet parts. None: no directory layers.
    exclude : tuple of str
        Local paths or URLs to leave out (the reference, the output root).

    Returns
    -------
    list of dict
        ``name`` (the entry's name), ``url`` (local path or URL), ``is_dir``.

    Raises
    ------
    FileNotFoundError
        When ``location`` is not a directory.
    """
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(location)
    if not fs.isdir(root):
        raise FileNotFoundError(f"The predictions location {location!r} is not a directory (or does not exist).")
    patterns = expand_braces(pattern)
    excluded = {_normalise(e) for e in exclude}
    layers = []
    for entry in sorted(fs.ls(root, detail=True), key=lambda e: e["name"]):
        path = entry["name"].rstrip("/")
        name = PurePosixPath(path).name
        url = _url(fs, path)
        if name.startswith((".", "_")) or _normalise(url) in excluded:
            continue
        if entry["type"] == "directory":
            if dir_pattern is not None and _matches(name, [dir_pattern]) and any(f.lower().endswith(".parquet") for f in fs.find(path)):
                layers.append({"name": name, "url": url, "is_dir": True})
        elif entry["type"] == "file" and _matches(name, patterns):
            layers.append({"name": name, "url": url, "is_dir": False})
    return layers


def _normalise(location: str) -> str:
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(str(location))
    return os.path.realpath(path) if _is_local(fs) else fs.unstrip_protocol(path.rstrip("/"))


def _version_key(files: dict[str, dict], root: str) -> str | None:
    """A digest of the files' names, sizes and version stamps; None when a file has no stamp."""
    items = []
    for path, info in sorted(files.items()):
        stamp = {k: str(info[k]) for k in _VERSION_FIELDS if info.get(k) is not None}
        if not stamp:
            return None
        items.append([path[len(root) :].lstrip("/"), info.get("size"), stamp])
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def stage_layer(url: str, staging_dir: str | Path) -> Path:
    """A local path of the layer at ``url``: itself when local, else a copy in ``staging_dir``.

    The copy goes to ``<staging_dir>/<sha256(url)[:16]>/<name>`` through a temporary
    directory renamed when whole. It is reused while every file's size and version stamp
    (ETag, generation, mtime ...) are unchanged, and fetched again otherwise, or when
    the file system gives no version stamp.
    """
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(url)
    if _is_local(fs):
        if not os.path.exists(path):
            raise FileNotFoundError(f"The layer {url!r} does not exist.")
        return Path(path)
    path = path.rstrip("/")
    if not fs.exists(path):
        raise FileNotFoundError(f"The layer {url!r} does not exist.")
    is_dir = fs.isdir(path)
    files = fs.find(path, detail=True)
    version = _version_key(files, path)
    name = PurePosixPath(path).name
    slot = Path(staging_dir) / hashlib.sha256(url.encode()).hexdigest()[:16]
    target, marker = slot / name, slot / "source.json"
    if version is not None and target.exists() and marker.exists():
        with contextlib.suppress(ValueError, OSError):
            if json.loads(marker.read_text(encoding="utf-8")) == {"url": url, "version": version}:
                return target
    tmp = slot.parent / f".{slot.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        tmp.mkdir(parents=True)
        if is_dir:
            for remote in sorted(files):
                local = tmp / name / remote[len(path) :].lstrip("/")
                local.parent.mkdir(parents=True, exist_ok=True)
                fs.get_file(remote, str(local))
        else:
            fs.get_file(path, str(tmp / name))
        (tmp / "source.json").write_text(json.dumps({"url": url, "version": version}), encoding="utf-8")
        shutil.rmtree(slot, ignore_errors=True)
        os.replace(tmp, slot)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _fmt(value: object) -> str:
    return number(value, missing="–")


def _with_interval(value: object, ci: list | None) -> str:
    return _fmt(value) + interval_text(ci, missing="–", defined_only=True)


def render_comparison(comparison: dict) -> str:
    """The comparison as Markdown: a table of previous, current, difference and overlap."""
    labels = dict(HEADLINE_KEYS)
    cur, prev = comparison["current"], comparison["previous"]
    lines = [f"# {markdown_text(comparison['product'])}: run {cur['run_id']} against the previous run", ""]
    lines.append(f"- current: run {cur['run_id']}, {markdown_text(cur['pred_path'])} (sha256 `{cur['pred_sha256'][:12]}…`)")
    if prev is None:
        lines += ["- previous: none (first succeeded run of this product)", ""]
    else:
        lines.append(f"- previous: run {prev['run_id']}, {markdown_text(prev['pred_path'])} (sha256 `{prev['pred_sha256'][:12]}…`)")
        if not comparison["same_reference"]:
            lines.append("- **the reference layer differs between the two runs**")
        if not comparison["same_parameters"]:
            lines.append("- **the metric parameters differ between the two runs**")
        lines.append("")
    lines += ["| metric | previous [95 % interval] | current [95 % interval] | difference | intervals overlap |", "|---|---|---|---:|---|"]
    for key, row in comparison["metrics"].items():
        overlap = {True: "yes", False: "**no**", None: "–"}[row["intervals_overlap"]]
        diff = "–" if row["difference"] is None else f"{row['difference']:+.3f}"
        lines.append(
            f"| {labels.get(key, key)} | {_with_interval(row['previous'], row['previous_ci'])} | "
            f"{_with_interval(row['current'], row['current_ci'])} | {diff} | {overlap} |"
        )
    lines += ["", "Intervals that do not overlap point to a real change; overlapping intervals do not rule one out."]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- tasks
@task(name="stage-and-hash", retries=2, cache_policy=NO_CACHE)
def stage_and_hash(layers: list[dict], staging_dir: str) -> list[dict]:
    """Stage layers that are not local and add each one's ``path`` and content ``sha256``."""
    out = []
    for layer in layers:
        path = stage_layer(layer["url"], staging_dir)
        out.append({**layer, "path": str(path), "sha256": sha256_path(path)})
    return out


@task(name="find-layers", retries=2, cache_policy=NO_CACHE)
def find_layers(params: ReevaluateParams, exclude: tuple[str, ...]) -> list[dict]:
    """The prediction layers in ``params.predictions``."""
    return list_layers(params.predictions, params.pattern, params.dir_pattern, exclude=exclude)


@task(name="select-new", retries=2, cache_policy=NO_CACHE)
def select_new(layers: list[dict], ref_sha256: str, params_hash: str, registry_url: str) -> list[dict]:
    """The layers without a succeeded run against this reference and these metric parameters."""
    logger = get_run_logger()
    new, seen = [], set()
    with open_registry(registry_url) as registry:
        for layer in layers:
            if layer["sha256"] in seen:
                logger.info("skipping %s: same content as a layer listed before it", layer["name"])
            elif registry.has_run(layer["sha256"], ref_sha256, params_hash):
                logger.debug("already evaluated: %s", layer["name"])
            else:
                new.append(layer)
            seen.add(layer["sha256"])
    return new


@task(name="register-run", retries=2, cache_policy=NO_CACHE)
def register_run(registry_url: str, fields: dict) -> int:
    """Insert the run as ``running``; return its id."""
    with open_registry(registry_url) as registry:
        return registry.record(status="running", **fields)


@task(name="publish-comparison", retries=2, cache_policy=NO_CACHE)
def publish_comparison(registry_url: str, run_id: int, metrics: dict, flow_run_id: str | None) -> dict:
    """Mark the run succeeded with its summary; write and publish the comparison with the previous run."""
    with open_registry(registry_url) as registry:
        current = registry.finish(run_id, status="succeeded", summary=run_summary(metrics), flow_run_id=flow_run_id)
        comparison = compare_summaries(current, registry.previous(current.product, current.id))
    out = Path(current.output_dir)
    markdown = render_comparison(comparison)
    write_json(out / "comparison.json", comparison)
    atomic_path(out / "comparison.md", lambda tmp: tmp.write_text(markdown, encoding="utf-8"))
    create_markdown_artifact(markdown, key=artifact_key(current.product), description=f"{current.product}: latest run against the previous one")
    _seal_amendment(out, "comparison with the previous run", ["comparison.json", "comparison.md"])
    return {"summary": current.summary, "comparison": comparison}


def _seal_amendment(run_dir: Path, reason: str, adds: list[str]) -> None:
    """Seal files written beside a sealed run as an amendment, which ``evalcore verify``
    accounts for. Called last by its task, so a retry never meets its own files sealed."""
    from evalcore.evidence import latest_manifest, write_evidence_manifest

    if latest_manifest(run_dir) is not None:
        write_evidence_manifest(run_dir, reason=reason, adds=adds)


@task(name="record-failure", retries=2, cache_policy=NO_CACHE)
def record_failure(registry_url: str, run_id: int, error: str, flow_run_id: str | None) -> None:
    """Mark the run failed."""
    with open_registry(registry_url) as registry:
        registry.finish(run_id, status="failed", error=error, flow_run_id=flow_run_id)


@contextlib.contextmanager
def _cluster_address(params: ReevaluateParams) -> Iterator[str]:
    """``params.cluster``, or the address of a LocalCluster shared by the batch's evaluations."""
    if params.cluster:
        yield params.cluster
        return
    with dask_client(None, params.n_workers, params.dashboard_address) as client:
        yield client.scheduler.address


@task(name="claim-layer", retries=2, cache_policy=NO_CACHE)
def claim_layer(registry_url: str, layer: dict, ref_sha256: str, params_hash: str, owner: str) -> bool:
    """Take the layer for this flow run (atomic): False when another run has it."""
    with open_registry(registry_url) as registry:
        return registry.claim(layer["sha256"], ref_sha256, params_hash, owner)


@task(name="release-layer", retries=2, cache_policy=NO_CACHE)
def release_layer(registry_url: str, layer: dict, ref_sha256: str, params_hash: str, owner: str) -> None:
    with open_registry(registry_url) as registry:
        registry.release(layer["sha256"], ref_sha256, params_hash, owner)


@task(name="paired-comparison", retries=1, cache_policy=NO_CACHE)
def paired_comparison(params: ReevaluateParams, layer: dict, reference: dict, run_id: int, registry_url: str, staging_dir: str, address: str) -> dict | None:
    """The paired comparison of the new layer with the previous succeeded layer of the product (SPEC 6.6).

    Both layers on the same resamples: the deltas' intervals say whether the new layer is
    worse, where two separate intervals would overlap and say nothing. Writes
    ``paired.json`` and ``paired.md`` in the run directory, publishes the delta table
    as a Prefect table artifact and flags a regression (an overall headline delta, or a
    unit's, whose interval lies below zero). None without a previous run or without
    bootstrap resamples.
    """
    from distributed import Client

    from evalcore.compare import compare_on_cluster

    logger = get_run_logger()
    with open_registry(registry_url) as registry:
        current = registry.get(run_id)
        previous = registry.previous(current.product, current.id)
    if previous is None:
        return None
    options = params.evaluate_params(predicted=layer["path"], reference=reference["path"], output_dir=current.output_dir).options()
    if options.bootstrap <= 0:
        logger.info("no paired comparison: bootstrap is 0 (the deltas' intervals need resamples)")
        return None
    previous_path = stage_layer(previous.pred_path, staging_dir)
    values = {k: v for k, v in options.as_dict().items()}
    with Client(address) as client:
        result = compare_on_cluster(
            layer["path"], str(previous_path), reference["path"], client, strata=params.strata_column, size_bins=params.size_bins,
            layers={"reference": params.ref_layer}, workdir=Path(current.output_dir) / "work-paired", **values,
        )
    shutil.rmtree(Path(current.output_dir) / "work-paired", ignore_errors=True)
    headline = ("precision", "recall", "f1")
    worse_overall = [m for m in headline if is_worse(better_of(FAMILIES, m), result["overall"][m].get("ci"))]
    result["previous_run_id"] = previous.id
    result["regression"] = bool(worse_overall or result["worse_units"])
    result["regressed_metrics"] = worse_overall
    out = Path(current.output_dir)
    write_json(out / "paired.json", result)
    rows = [
        {"metric": m, "candidate": e["candidate"], "incumbent": e["incumbent"], "delta": e["delta"],
         "ci_lower": (e.get("ci") or [None, None])[0], "ci_upper": (e.get("ci") or [None, None])[1]}
        for m, e in result["overall"].items()
    ]
    lines = [f"# {markdown_text(current.product)}: run {current.id} against run {previous.id} (paired, {result['bootstrap']['n_resamples']} resamples of {result['bootstrap']['unit']} units)", "",
             "| metric | new | previous | delta [95 % paired interval] |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['metric']} | {_fmt(r['candidate'])} | {_fmt(r['incumbent'])} | {_fmt(r['delta'])} [{_fmt(r['ci_lower'])}, {_fmt(r['ci_upper'])}] |")
    lines += ["", f"Regression: {'yes' if result['regression'] else 'no'} ({len(result['worse_units'])} units significantly worse)."]
    markdown = "\n".join(lines) + "\n"
    atomic_path(out / "paired.md", lambda tmp: tmp.write_text(markdown, encoding="utf-8"))
    from prefect.artifacts import create_table_artifact

    create_table_artifact(rows, key=artifact_key(current.product) + "-paired", description=f"{current.product}: paired deltas against the previous run")
    if result["regression"]:
        logger.warning(
            "REGRESSION: %s is worse than the previous run %d: %s; %d units significantly worse (paired.json)",
            layer["name"], previous.id, ", ".join(worse_overall) or "no headline metric overall", len(result["worse_units"]),
        )
    _seal_amendment(out, "paired comparison", ["paired.json", "paired.md"])
    return result


def _evaluate_one(params: ReevaluateParams, layer: dict, reference: dict, *, product: str, run_dir: Path, workdir: Path, address: str,
                  registry_url: str, owner: str = "", staging_dir: str = "") -> dict:
    """Claim, register, evaluate (subflow ``evaluate-layers``), record the outcome and publish the comparisons."""
    eval_params = params.evaluate_params(
        predicted=layer["path"], reference=reference["path"], output_dir=str(run_dir), cluster=address, workdir=str(workdir)
    )
    if owner and not claim_layer(registry_url, layer, reference["sha256"], params.params_hash(), owner):
        get_run_logger().info("skipping %s: another flow run has claimed it", layer["name"])
        return {"layer": layer["name"], "status": "skipped", "reason": "claimed by another flow run"}
    entry = {
        "product": product,
        "layer": layer["name"],
        "pred_path": layer["url"],
        "pred_sha256": layer["sha256"],
        "ref_sha256": reference["sha256"],
        "params_hash": params.params_hash(),
        "output_dir": str(run_dir),
    }
    run_id = register_run(
        registry_url,
        {
            **{k: entry[k] for k in ("product", "pred_path", "pred_sha256", "ref_sha256", "params_hash", "output_dir")},
            "ref_path": params.reference,
            "parameters": eval_params.model_dump(mode="json"),
            "evalcore_version": __version__,
        },
    )
    state = evaluate_layers.with_options(flow_run_name=f"{_safe_name(product)}-{run_dir.name}")(eval_params, return_state=True)
    flow_run_id = str(state.state_details.flow_run_id) if state.state_details.flow_run_id else None
    entry = {"run_id": run_id, **entry, "flow_run_id": flow_run_id}
    if not state.is_completed():
        error = state.message or state.name
        record_failure(registry_url, run_id, error, flow_run_id)
        if owner:
            release_layer(registry_url, layer, reference["sha256"], params.params_hash(), owner)
        get_run_logger().error("evaluation of %s failed: %s (outputs in %s)", layer["name"], error, run_dir)
        return {**entry, "status": "failed", "error": error, "summary": None, "comparison": None}
    published = publish_comparison(registry_url, run_id, state.result(), flow_run_id)
    published["paired"] = paired_comparison(params, layer, reference, run_id, registry_url, staging_dir, address) if staging_dir else None
    shutil.rmtree(workdir, ignore_errors=True)  # partitioned copies of both layers; kept after a failure, to resume
    with contextlib.suppress(OSError):
        workdir.parent.rmdir()  # only when empty
    return {**entry, "status": "succeeded", **published}


# ----------------------------------------------------------------------------- flow
@flow(name="reevaluate-new-imagery")
def reevaluate_new_imagery(params: ReevaluateParams) -> list[dict]:
    """Evaluate the prediction layers not yet evaluated against the current reference.

    Returns one dict per evaluation it ran (oldest first): ``run_id``, ``product``,
    ``layer``, ``pred_path``, ``pred_sha256``, ``ref_sha256``, ``params_hash``,
    ``output_dir``, ``flow_run_id``, ``status``, ``summary`` and ``comparison``; an
    empty list when there was nothing new. Raises after the batch when an evaluation
    failed (the others are recorded and published).
    """
    logger = get_run_logger()
    output_root = Path(params.output_root).resolve()
    product = params.product or product_name(params.predictions)
    registry_url = params.registry_url or default_registry_url(output_root)
    staging_dir = Path(params.staging_dir).resolve() if params.staging_dir else output_root / ".staging"

    (reference,) = stage_and_hash([{"name": "reference", "url": params.reference, "is_dir": None}], str(staging_dir))
    layers = stage_and_hash(find_layers(params, exclude=(params.reference, str(output_root), str(staging_dir))), str(staging_dir))
    new = select_new(layers, reference["sha256"], params.params_hash(), registry_url)
    if not new:
        logger.info("nothing new: all %d layers in %s are evaluated against reference %s…", len(layers), params.predictions, reference["sha256"][:12])
        return []
    logger.info("%d of %d layers in %s are new: %s", len(new), len(layers), params.predictions, ", ".join(layer["name"] for layer in new))

    # The directory names the layer, its content and (key) the reference and metric parameters.
    key = hashlib.sha256(f"{reference['sha256']}:{params.params_hash()}".encode()).hexdigest()[:8]
    owner = uuid.uuid4().hex  # this flow run, as the owner of its claims
    results = []
    with _cluster_address(params) as address:
        for layer in new:
            name = f"{_safe_name(_layer_stem(layer['name']))}-{layer['sha256'][:12]}-{key}"
            run_dir = output_root / _safe_name(product) / name
            workdir = output_root / ".work" / _safe_name(product) / name
            results.append(
                _evaluate_one(params, layer, reference, product=product, run_dir=run_dir, workdir=workdir, address=address,
                              registry_url=registry_url, owner=owner, staging_dir=str(staging_dir))
            )
    results = [r for r in results if r["status"] != "skipped"]
    failed = [r["layer"] for r in results if r["status"] == "failed"]
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(new)} evaluations failed ({', '.join(failed)}); see the registry {registry_url} and their status.json.")
    return results
