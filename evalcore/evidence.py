"""The evidence bundle of a run directory (SPEC 6.8, seed 004 §3, §15, §17).

A run directory that is to be signed off holds, beside ``metrics.json`` and the tables:

* ``evaluation-contract.json``: what was asked and who answered (task, matching policy,
  thresholds, parameters and their hash, CRS decisions, evaluator version and git
  commit, run id, seed, platform and library versions, the user's labels, and the
  SHA-256 of ``input-manifest.json``);
* ``input-manifest.json``: every input file or GeoParquet part as read: SHA-256, bytes,
  rows, CRS, layer;
* ``object-metrics.json``, ``stratified-metrics.json``, ``tile-metrics.json``,
  ``aoi-metrics.json``, ``calibration-metrics.json``: the metrics, regrouped by family
  (``"state": "not_configured"`` for a family that was not asked for);
* ``latency-and-reliability.json``: per phase, wall time, Dask tasks, attempts and
  retries, and the run's lost workers and peak memory;
* ``error-taxonomy.json``: the counts of the error codes (:mod:`evalcore.metrics.taxonomy`)
  overall, per stratum, per size class, per tile and per AOI;
* ``acceptance-gates.json``: the gates' outcome (:mod:`evalcore.gates`), or
  ``not_configured``;
* ``evidence-manifest.json``: the SHA-256 of every other file of the run directory
  (the run log ``logs/run.log`` excepted: it is appended to after), written last.

Nothing is overwritten once written: an amendment (``evalcore gate`` on a finished run)
adds ``acceptance-gates.vN.json`` and ``evidence-manifest.vN.json``, which names and
hashes its predecessor and hashes the files it adds, and only those. :func:`verify`
walks the chain from the first manifest, checks every sealed file against the manifest
that sealed it, counts any other file of the run directory as an error, and rechecks
the inputs where they can still be read.

Undefined values are ``null`` (the files are written with NaN as null and checked to
hold no NaN).

The module stays whole at about 780 lines: writing the bundle and verifying it are two
sides of one file format (the file names, the manifest chain and its hashes), and
keeping them together keeps the writer and the checker from drifting apart.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import re
import subprocess
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd

from evalcore._version import __version__
from evalcore.errors import EvalInputError
from evalcore.writers import to_jsonable, write_json
from evalcore.metrics.taxonomy import TAXONOMY_KEYS, taxonomy_counts
from evalcore.review.layout import AMENDABLE_REVIEW, current_review
from evalcore.report import package_versions, sha256_of_parts, sha256_path

__all__ = [
    "BUNDLE_FILES",
    "EVIDENCE_MANIFEST",
    "InputLayer",
    "describe_input",
    "input_manifest",
    "evaluation_contract",
    "family_files",
    "error_taxonomy",
    "unit_rows",
    "write_bundle",
    "write_evidence_manifest",
    "check_amendment",
    "latest_manifest",
    "EXEMPT",
    "AMENDABLE",
    "gate_metrics",
    "verify",
    "Verification",
    "evaluator_commit",
    "parameters_sha256",
    "NOT_CONFIGURED",
]

EVIDENCE_MANIFEST = "evidence-manifest.json"

BUNDLE_FILES: tuple[str, ...] = (
    "evaluation-contract.json",
    "input-manifest.json",
    "object-metrics.json",
    "tile-metrics.json",
    "aoi-metrics.json",
    "stratified-metrics.json",
    "calibration-metrics.json",
    "latency-and-reliability.json",
    "error-taxonomy.json",
    "acceptance-gates.json",
    EVIDENCE_MANIFEST,
)
"""The files of SPEC 6.8, the evidence manifest last (it hashes the others)."""

NOT_CONFIGURED = {"state": "not_configured"}

SCHEMA_VERSION = 1

#: Evidence manifests say how they are read: version 2 has the first manifest hash every
#: file and an amendment hash only the files it adds (``changes``).
MANIFEST_SCHEMA_VERSION = 2

#: The files of a run directory that may change after it is sealed, and only these: the
#: flow logs its last lines after ``seal_evidence`` (and a rerun appends to the log);
#: ``status.json`` is the run's state, written last (after the seal, so "succeeded" is
#: never seen before the bundle is whole); ``.evalcore-run.lock`` claims the directory for
#: one run at a time (:mod:`evalcore.outputs`). The work directory is removed before the
#: seal (or, kept, sealed with the rest): every other file is accounted for.
EXEMPT: tuple[str, ...] = ("logs/run.log", "status.json", ".evalcore-run.lock")

#: What an amendment may add (full-match patterns of paths relative to the run
#: directory): a later gates outcome (``evalcore gate``), and the reevaluate flow's
#: comparisons with the product's previous run (written after the run is sealed). It
#: never changes a sealed file.
AMENDABLE: tuple[str, ...] = (
    r"acceptance-gates\.v(?:[2-9]|[1-9]\d+)\.json",
    r"comparison\.(?:json|md)",
    r"paired\.(?:json|md)",
    AMENDABLE_REVIEW,  # the review sample, decisions and statistics (SPEC 6.12), each file written once
)
AMENDABLE_TEXT = "acceptance-gates.vN.json, comparison.json/.md, paired.json/.md and the review's files (review/)"

#: Top-level keys of ``metrics.json`` that other bundle files carry.
_GROUPED_KEYS = ("per_stratum", "per_size_class", "worst", "tiles", "aois")

#: Top-level keys of the scores family (AP, calibration, score-ordered curves' summaries).
_SCORE_KEY_PREFIXES = ("score_column", "ap", "calibration", "best_f1", "operating_point", "risk_coverage", "aurc", "precision_target")

TASK = "object-level evaluation of predicted polygons against reference polygons (docs/contract.md, agribound 1.0.1 keys)"

_TIE_BREAKS: dict[str | None, str] = {
    None: "input position (reference, then prediction)",
    "max_weight": "largest exact total IoU, then most pairs, then the smallest sorted list of (reference, prediction) positions",
}
"""How the matching decides between equals, by matcher (the greedy ones: input position)."""


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class InputLayer:
    """One input of a run: a role (``reference``, ``predicted``, ``aoi`` ...), its path
    (a file or a directory of GeoParquet parts) and the layer name inside it."""

    role: str
    path: str
    layer: str | None = None


def _parquet_facts(path: Path) -> tuple[int | None, str | None]:
    """Rows and CRS (as ``EPSG:n`` where it has one, else its name) of a (Geo)Parquet file."""
    from evalcore import remote

    meta = remote.parquet_file(path).metadata
    rows = int(meta.num_rows)
    crs = None
    geo = (meta.metadata or {}).get(b"geo")
    if geo:
        info = json.loads(geo)
        column = info.get("columns", {}).get(info.get("primary_column", ""), {})
        crs = _crs_text(column.get("crs", "OGC:CRS84"))  # GeoParquet: no crs key means OGC:CRS84
    return rows, crs


def _crs_text(crs: object) -> str | None:
    if crs is None:
        return None
    from pyproj import CRS

    try:
        value = CRS.from_user_input(crs)
    except Exception:  # an unreadable CRS is reported as it is written
        return json.dumps(crs) if not isinstance(crs, str) else crs
    code = value.to_authority()
    return f"{code[0]}:{code[1]}" if code else value.name


def _ogr_facts(path: Path, layer: str | None) -> tuple[int | None, str | None]:
    import pyogrio

    try:
        info = pyogrio.read_info(path, layer=layer)
    except Exception:  # not a layer GDAL reads (a sidecar file of a part directory)
        return None, None
    return int(info["features"]), _crs_text(info.get("crs"))


def describe_input(layer: InputLayer) -> dict[str, object]:
    """The manifest entry of one input: each file (each part of a directory) with its
    SHA-256, bytes, rows and CRS, and the SHA-256 of the whole (:func:`sha256_path`).
    A remote object's SHA-256 is streamed from the store, and its ETag (or generation)
    is recorded beside it."""
    from evalcore import remote

    if remote.is_url(layer.path) and remote.is_url(remote.normalise(layer.path)):
        return _describe_remote_input(layer, remote.normalise(layer.path))
    path = Path(remote.normalise(layer.path)) if remote.is_url(layer.path) else Path(layer.path)
    if not path.exists():
        raise EvalInputError(f"input {layer.role} {layer.path!r} does not exist (it was read by the run).")
    files = sorted(q for q in path.rglob("*") if q.is_file()) if path.is_dir() else [path]
    parts = []
    for f in files:
        if f.suffix.lower() in (".parquet", ".geoparquet"):
            rows, crs = _parquet_facts(f)
        else:
            rows, crs = _ogr_facts(f, layer.layer)
        parts.append({
            "path": str(f.relative_to(path)) if path.is_dir() else f.name,
            "sha256": sha256_path(f),
            "bytes": f.stat().st_size,
            "rows": rows,
            "crs": crs,
        })
    crs_values = sorted({p["crs"] for p in parts if p["crs"] is not None})
    return {
        "role": layer.role,
        "path": str(path.resolve()),
        "layer": layer.layer,
        "kind": "directory of parts" if path.is_dir() else "file",
        # The whole from its parts' hashes (sha256_path's rule), not by reading every file again.
        "sha256": sha256_of_parts((p["path"], p["sha256"]) for p in parts) if path.is_dir() else parts[0]["sha256"],
        "rows": sum(p["rows"] for p in parts if p["rows"] is not None) if any(p["rows"] is not None for p in parts) else None,
        "crs": crs_values[0] if len(crs_values) == 1 else (crs_values or None),
        "parts": parts,
    }


def _describe_remote_input(layer: InputLayer, url: str) -> dict[str, object]:
    """:func:`describe_input` of an object (or a prefix of GeoParquet parts) in a store."""
    from evalcore import remote

    info = remote.stat(url, f"input {layer.role}")
    if info is None:
        raise EvalInputError(f"input {layer.role} {url!r} does not exist (it was read by the run).")
    is_dir = info.get("type") == "directory"
    relative = remote.list_files(url) if is_dir else [remote.name(url)]
    parts = []
    for rel in relative:
        part_url = remote.join(url, rel) if is_dir else url
        facts = remote.object_facts(part_url)
        if rel.lower().endswith((".parquet", ".geoparquet")):
            rows, crs = _parquet_facts(part_url)
        else:
            rows, crs = _ogr_facts(remote.gdal_path(part_url), layer.layer)
        tags = {k: v for k, v in facts.items() if k not in ("sha256", "bytes")}
        parts.append({"path": rel, "sha256": facts["sha256"], "bytes": facts["bytes"], "rows": rows, "crs": crs, **tags})
    crs_values = sorted({p["crs"] for p in parts if p["crs"] is not None})
    return {
        "role": layer.role,
        "path": url,
        "layer": layer.layer,
        "kind": "directory of parts" if is_dir else "file",
        "sha256": sha256_of_parts((p["path"], p["sha256"]) for p in parts) if is_dir else parts[0]["sha256"],
        "rows": sum(p["rows"] for p in parts if p["rows"] is not None) if any(p["rows"] is not None for p in parts) else None,
        "crs": crs_values[0] if len(crs_values) == 1 else (crs_values or None),
        "parts": parts,
    }


def input_manifest(layers: list[InputLayer], expected_sha256: dict[str, str] | None = None) -> dict[str, object]:
    """``input-manifest.json``: every input as read.

    Parameters
    ----------
    layers : list of InputLayer
    expected_sha256 : dict of str to str, optional
        SHA-256 of some inputs (by role) taken when the run started; an input whose bytes
        differ now changed while the run read it, and is refused.
    """
    entries = [describe_input(layer) for layer in layers]
    for entry in entries:
        expected = (expected_sha256 or {}).get(entry["role"])
        if expected is not None and expected != entry["sha256"]:
            raise EvalInputError(
                f"input {entry['role']} {entry['path']!r} changed while the run read it "
                f"(SHA-256 {expected[:12]}... at the start, {entry['sha256'][:12]}... now): no evidence is written."
            )
    return {"schema_version": SCHEMA_VERSION, "inputs": entries}


# --------------------------------------------------------------------------- identity


def evaluator_commit() -> dict[str, object]:
    """The git commit of the evaluator's source when it runs from a checkout (else nulls)."""
    root = Path(__file__).resolve().parents[1]
    out: dict[str, object] = {"git_commit": None, "git_dirty": None}
    if not (root / ".git").exists():
        return out
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return out
    if commit.returncode == 0:
        out["git_commit"] = commit.stdout.strip()
        out["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    return out


def parameters_sha256(parameters: dict) -> str:
    """SHA-256 of the parameters as canonical JSON (sorted keys, no spaces; an infinite
    size-class edge as ``Infinity``, as :meth:`flows.params.ReevaluateParams.params_hash`)."""
    text = json.dumps(parameters, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _spelled(value: object) -> object:
    """Parameters for a JSON file: infinite numbers as the text ``"inf"`` (JSON has none)."""
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _spelled(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_spelled(v) for v in value]
    return value


def evaluation_contract(metrics: dict, *, parameters: dict, metric_parameters: dict, input_manifest_sha256: str,
                        inputs: dict, labels: dict[str, str], run_id: str, started: str | None = None) -> dict[str, object]:
    """``evaluation-contract.json``: the run's identity (seed 004 §3) as far as it applies.

    Parameters
    ----------
    metrics : dict
        The summary (for the settings it reports: matching, thresholds, CRS decisions).
    parameters : dict
        Every parameter of the run (JSON-ready).
    metric_parameters : dict
        The parameters that decide the numbers (their hash identifies the evaluation).
    input_manifest_sha256 : str
        SHA-256 of ``input-manifest.json``.
    inputs : dict
        ``input-manifest.json`` itself (to say whether every input has a checksum).
    labels : dict of str to str
        The user's labels (``--label KEY=VALUE``: model hash, imagery source ...).
    run_id : str
    """
    missing = [e["role"] for e in inputs["inputs"] if not e.get("sha256")]
    sweep = metrics.get("iou_sweep") or []
    return {
        "schema_version": SCHEMA_VERSION,
        "task": TASK,
        "run_id": run_id,
        "started": started,
        "evaluator": {"name": "evalcore", "version": __version__, **evaluator_commit()},
        "matching_policy": {
            "matching": metrics.get("matching"),
            "iou_threshold": metrics.get("iou_threshold"),
            "iou_thresholds_swept": [entry["iou_threshold"] for entry in sweep] or None,
            "majority_fraction": metrics.get("majority_fraction"),
            "tie_break": _TIE_BREAKS.get(metrics.get("matching"), _TIE_BREAKS[None]),
        },
        "crs": {
            "equal_area_crs": metrics.get("equal_area_crs"),
            "distance_crs": metrics.get("distance_crs"),
            "utm_epsg_codes": metrics.get("utm_epsg_codes"),
        },
        "seed": parameters.get("bootstrap_seed"),
        "bootstrap": {k: parameters.get(k) for k in ("bootstrap", "bootstrap_unit", "bootstrap_seed") if k in parameters},
        "parameters": _spelled(parameters),
        "parameters_sha256": parameters_sha256(metric_parameters),
        "input_manifest_sha256": input_manifest_sha256,
        "labels": dict(sorted(labels.items())),
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "python": sys.version.split()[0],
        },
        "versions": package_versions(),
        "publishable": not missing,
        "not_publishable_because": None if not missing else f"no checksum for input(s) {', '.join(missing)}",
    }


# --------------------------------------------------------------------------- metrics files


def unit_rows(table: pd.DataFrame | None, kind: str) -> dict[str, dict] | None:
    """Every row of a tile or AOI table without its geometry, keyed like the outputs (a
    tile's ``EPSG_x_y``, an AOI's id: the table's first column), JSON-ready."""
    if table is None:
        return None
    key_columns = ("epsg", "tile_x", "tile_y") if kind == "tiles" else (str(table.columns[0]),)
    frame = pd.DataFrame(table.drop(columns=[c for c in ("geometry",) if c in table.columns]))
    return {"_".join(str(row[c]) for c in key_columns): {k: to_jsonable(v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")}


def family_files(metrics: dict, tile_rows: dict | None, aoi_rows: dict | None) -> dict[str, dict]:
    """The per-family metrics files of the bundle, from the summary and the unit tables' rows
    (:func:`unit_rows`; None where the run has no such table)."""
    object_metrics = {"state": "computed", "source": "metrics.json",
                      **{k: v for k, v in metrics.items() if k not in _GROUPED_KEYS}}
    grouped = {k: metrics[k] for k in ("per_stratum", "per_size_class") if k in metrics}
    stratified = ({"state": "computed", "source": "metrics.json", **grouped, "worst": metrics.get("worst")}
                  if grouped else dict(NOT_CONFIGURED))
    tile_file = dict(NOT_CONFIGURED)
    if "tiles" in metrics:
        tile_file = {"state": "computed", "source": "tiles.parquet", "summary": metrics["tiles"],
                     "per_tile": tile_rows}
    aoi_file = dict(NOT_CONFIGURED)
    if "aois" in metrics:
        summary = {k: v for k, v in metrics["aois"].items() if k != "per_aoi"}
        aoi_file = {"state": "computed", "source": "aois.parquet", "summary": summary,
                    "per_aoi": aoi_rows if aoi_rows is not None else metrics["aois"].get("per_aoi")}
    calibration = dict(NOT_CONFIGURED)
    if metrics.get("score_column") is not None:
        calibration = {"state": "computed", "source": "metrics.json",
                       **{k: v for k, v in metrics.items() if k.startswith(_SCORE_KEY_PREFIXES)}}
    return {
        "object-metrics.json": object_metrics,
        "stratified-metrics.json": stratified,
        "tile-metrics.json": tile_file,
        "aoi-metrics.json": aoi_file,
        "calibration-metrics.json": calibration,
    }


def error_taxonomy(metrics: dict, tile_rows: dict | None, aoi_rows: dict | None) -> dict[str, object]:
    """``error-taxonomy.json``: the counts of every code, overall and per group.

    ``M-BOUNDARY`` is null without a boundary tolerance.
    """
    out: dict[str, object] = {
        "state": "computed",
        "codes": {code: key for code, key in TAXONOMY_KEYS.items()},
        "overall": taxonomy_counts(metrics),
    }
    for name in ("per_stratum", "per_size_class"):
        if name in metrics:
            out[name] = {key: taxonomy_counts(entry) for key, entry in metrics[name].items()}
    for name, rows in (("per_tile", tile_rows), ("per_aoi", aoi_rows)):
        if rows is not None:
            out[name] = {key: taxonomy_counts(row) for key, row in rows.items()}
    return out


# --------------------------------------------------------------------------- writing


def _run_files(run_dir: Path) -> list[str]:
    """Every file of a run directory (relative POSIX paths, sorted), temporary names
    included, the exempt ones (:data:`EXEMPT`) left out."""
    out = []
    for p in run_dir.rglob("*"):
        rel = p.relative_to(run_dir).as_posix()
        if p.is_file() and rel not in EXEMPT:
            out.append(rel)
    return sorted(out)


def _manifest_name(version: int) -> str:
    return EVIDENCE_MANIFEST if version == 1 else f"evidence-manifest.v{version}.json"


def _manifest_version(name: str) -> int:
    """1 for ``evidence-manifest.json``, N for ``evidence-manifest.vN.json`` (N >= 2, no
    leading zero: one name per version), 0 for any other name."""
    found = re.fullmatch(r"evidence-manifest(?:\.v([2-9]|[1-9]\d+))?\.json", name)
    return 0 if found is None else (int(found.group(1)) if found.group(1) else 1)


def _manifests(run_dir: Path) -> dict[int, Path]:
    """The evidence manifests of a run directory by version."""
    return {v: p for p in run_dir.glob("evidence-manifest*.json") if p.is_file() and (v := _manifest_version(p.name)) > 0}


def latest_manifest(run_dir: str | Path) -> Path | None:
    """The newest ``evidence-manifest[.vN].json`` of a run directory (None: none)."""
    found = _manifests(Path(run_dir))
    return found[max(found)] if found else None


def _safe_relative(path: object) -> bool:
    """A manifest entry's path names a file inside the run directory (no absolute path, no ``..``)."""
    if not isinstance(path, str) or not path or "\\" in path:
        return False
    parts = PurePosixPath(path).parts
    return not PurePosixPath(path).is_absolute() and ".." not in parts and str(PurePosixPath(path)) == path


@dataclass(frozen=True)
class _Chain:
    """The manifests of a run directory read in version order, without following any link
    (so a link that points back cannot loop): what they account for and what is wrong."""

    names: list[str]
    sealed: dict[str, tuple[str, str]]  # path -> (SHA-256, the manifest that sealed it)
    problems: list[str]


def _read_chain(run_dir: Path) -> _Chain:
    found = _manifests(run_dir)
    names: list[str] = []
    sealed: dict[str, tuple[str, str]] = {}
    problems: list[str] = []
    expected = 1
    # Over the versions present, not up to the highest: a name like v999999999 must not
    # make verify count that far.
    for version, path in sorted(found.items()):
        name = _manifest_name(version)
        if version != expected:
            gone = _manifest_name(expected) + ("" if version - 1 == expected else f" to {_manifest_name(version - 1)}")
            problems.append(f"{gone} gone ({name} exists: every version from the first must be there)")
        expected = version + 1
        names.append(name)
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            problems.append(f"{name} is not a manifest (not valid JSON: {exc})")
            continue
        if not isinstance(content, dict):
            problems.append(f"{name} is not a manifest (not a JSON object)")
            continue
        if content.get("version") != version:
            problems.append(f"{name} says it is version {content.get('version')!r}, not {version}")
        link = content.get("amends")
        if version == 1:
            if link is not None:
                problems.append(f"{name} (the first manifest) amends {link!r}: the first amends nothing")
            key = "files"
        else:
            previous = _manifest_name(version - 1)
            target = link.get("file") if isinstance(link, dict) else None
            if target == name:
                problems.append(f"{name} amends itself: it must amend {previous}")
            elif target != previous:
                problems.append(f"{name} amends {target!r}: it must amend its predecessor {previous}")
            elif (version - 1) in found and sha256_path(found[version - 1]) != link.get("sha256"):
                problems.append(f"{name} amends {previous} with SHA-256 {str(link.get('sha256'))[:12]}..., "
                                f"but {previous} now hashes to {sha256_path(found[version - 1])[:12]}... ({previous} changed)")
            key = "changes"
        entries = content.get(key)
        if not isinstance(entries, list) or (version > 1 and not entries):
            problems.append(f"{name} has no list of {key}" + ("" if version == 1 else ": an amendment declares the files it adds"))
            continue
        for entry in entries:
            path_text = entry.get("path") if isinstance(entry, dict) else None
            sha = entry.get("sha256") if isinstance(entry, dict) else None
            if not _safe_relative(path_text) or not isinstance(sha, str):
                problems.append(f"{name} has an entry that is not a file of the run directory with its SHA-256: {entry!r}")
            elif path_text in sealed:
                problems.append(f"{name} declares {path_text}, already sealed by {sealed[path_text][1]}: "
                                "an amendment only adds files, it never changes one")
            elif version > 1 and not _amendable(path_text):
                problems.append(f"{name} adds {path_text}: an amendment adds only {AMENDABLE_TEXT}")
                sealed[path_text] = (sha, name)
            else:
                sealed[path_text] = (sha, name)
    return _Chain(names, sealed, problems)


def _amendable(path: str) -> bool:
    return any(re.fullmatch(pattern, path) for pattern in AMENDABLE)


def check_amendment(run_dir: str | Path, adds: Sequence[str]) -> None:
    """Refuse an amendment of a run directory before its files are written: the chain of
    manifests must be whole and each added file a new file of an amendable kind.

    Raises
    ------
    EvalInputError
        The run directory has no manifest, its chain is broken (named), or a file may not
        be added (named).
    """
    run_dir = Path(run_dir)
    if latest_manifest(run_dir) is None:
        raise EvalInputError(f"{str(run_dir)!r} holds no {EVIDENCE_MANIFEST}: there is no evidence to amend.")
    chain = _read_chain(run_dir)
    if chain.problems:
        raise EvalInputError(f"the evidence of {str(run_dir)!r} cannot be amended: {chain.problems[0]} (see evalcore verify).")
    if not adds:
        raise EvalInputError("an amendment must add at least one file.")
    for path in adds:
        if path in chain.sealed:
            raise EvalInputError(f"{path} is sealed by {chain.sealed[path][1]}: an amendment only adds new files.")
        if not _amendable(path):
            raise EvalInputError(f"{path} cannot be added by an amendment: only {AMENDABLE_TEXT}.")


def write_evidence_manifest(run_dir: str | Path, *, reason: str = "run", adds: Sequence[str] = ()) -> Path:
    """Seal a run directory: write the next ``evidence-manifest[.vN].json``.

    The first, ``evidence-manifest.json``, hashes every file of the run directory but the
    exempt ones (:data:`EXEMPT`). An amendment (``.v2``, ``.v3`` ...) names and hashes its
    predecessor and hashes only the files it adds (``changes``): it can add a gates outcome
    (:data:`AMENDABLE`), never change a sealed file.

    Parameters
    ----------
    run_dir : str or Path
    reason : str
        Why the manifest is written (``run``, ``gates amendment: acceptance-gates.v2.json``).
    adds : sequence of str
        For an amendment, the files it adds (paths relative to the run directory); empty
        for the first manifest.

    Raises
    ------
    EvalInputError
        An amendment that :func:`check_amendment` refuses, or an added file that does not exist.
    """
    run_dir = Path(run_dir)
    previous = latest_manifest(run_dir)
    version = 1 if previous is None else _manifest_version(previous.name) + 1
    target = run_dir / _manifest_name(version)
    manifest: dict[str, object] = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "version": version,
        "reason": reason,
        "written": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "amends": None if previous is None else {"file": previous.name, "sha256": sha256_path(previous)},
        "exempt": list(EXEMPT),
    }

    def entry(rel: str) -> dict[str, object]:
        path = run_dir / rel
        return {"path": rel, "sha256": sha256_path(path), "bytes": path.stat().st_size}

    if previous is None:
        if adds:
            raise ValueError("the first evidence manifest seals every file; `adds` is for amendments.")
        manifest["files"] = [entry(rel) for rel in _run_files(run_dir) if rel != target.name]
    else:
        check_amendment(run_dir, adds)
        gone = [rel for rel in adds if not (run_dir / rel).is_file()]
        if gone:
            raise EvalInputError(f"{run_dir / gone[0]} does not exist: an amendment hashes the files it adds.")
        manifest["changes"] = [entry(rel) for rel in adds]
    return write_json(target, manifest)


@dataclass(frozen=True)
class BundleInputs:
    """What :func:`write_bundle` needs besides the run directory's own files."""

    inputs: list[InputLayer]
    parameters: dict
    metric_parameters: dict
    labels: dict[str, str] = field(default_factory=dict)
    reliability: dict = field(default_factory=dict)
    run_id: str | None = None
    started: str | None = None
    expected_sha256: dict[str, str] = field(default_factory=dict)


def _read_table(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return table.drop([c for c in ("geometry",) if c in table.column_names]).to_pandas()


def write_bundle(run_dir: str | Path, metrics: dict, given: BundleInputs, *, seal: bool = True) -> Path | None:
    """Write every file of SPEC 6.8 into a run directory (``acceptance-gates.json`` only
    when no gates wrote it), then the evidence manifest; return the manifest's path.

    With ``seal=False`` the manifest is left for :func:`write_evidence_manifest` to write
    after the files that read the bundle (the HTML report); None is returned.
    """
    run_dir = Path(run_dir)
    manifest = input_manifest(given.inputs, given.expected_sha256)
    manifest_path = write_json(run_dir / "input-manifest.json", manifest)
    contract = evaluation_contract(
        metrics, parameters=given.parameters, metric_parameters=given.metric_parameters,
        input_manifest_sha256=sha256_path(manifest_path), inputs=manifest, labels=given.labels,
        run_id=given.run_id or str(uuid.uuid4()), started=given.started,
    )
    write_json(run_dir / "evaluation-contract.json", contract)
    tile_rows = unit_rows(_read_table(run_dir / "tiles.parquet"), "tiles")
    aoi_rows = unit_rows(_read_table(run_dir / "aois.parquet"), "aois")
    for name, content in family_files(metrics, tile_rows, aoi_rows).items():
        write_json(run_dir / name, content)
    write_json(run_dir / "latency-and-reliability.json", {"state": "computed", **given.reliability} if given.reliability else dict(NOT_CONFIGURED))
    write_json(run_dir / "error-taxonomy.json", error_taxonomy(metrics, tile_rows, aoi_rows))
    if not (run_dir / "acceptance-gates.json").exists():
        write_json(run_dir / "acceptance-gates.json", dict(NOT_CONFIGURED))
    return write_evidence_manifest(run_dir) if seal else None


def gate_metrics(run_dir: str | Path, metrics: dict) -> dict:
    """The metrics the gates see: ``metrics.json`` plus ``tiles.per_tile`` from the run's
    ``tiles.parquet`` (so ``tiles.*.f1`` gates every tile, with each tile's support) and
    ``review`` from the current review sample's ``review.json`` (SPEC 6.12; absent while
    no decisions are imported, which the gates answer as ``unreviewed``)."""
    from evalcore.summary import unit_entries

    review = current_review(run_dir)
    if review is not None:
        metrics = {**metrics, "review": review}
    tiles = _read_table(Path(run_dir) / "tiles.parquet")
    if tiles is None or "tiles" not in metrics:
        return metrics
    return {**metrics, "tiles": {**metrics["tiles"], "per_tile": unit_entries(tiles, "tiles")}}


# --------------------------------------------------------------------------- verifying


@dataclass(frozen=True)
class Verification:
    """What :func:`verify` found. ``ok`` when every file of the run directory is accounted
    for by an intact chain of manifests and matches it (and the first manifest has the
    expected SHA-256, when one is given).

    Attributes
    ----------
    manifest : str
        The newest manifest of the chain.
    first_sha256 : str or None
        SHA-256 of ``evidence-manifest.json`` (None: it is gone). Stored by the user, it
        pins every file the run sealed (``--expect-sha256``).
    expected_sha256 : str or None
        The SHA-256 the first manifest must have (None: not asked).
    checked : int
        Files whose hash was rechecked.
    changed, missing : list of str
        Sealed files whose SHA-256 differs from their manifest's, or that are gone.
    unlisted : list of str
        Files of the run directory that no manifest of the chain accounts for (an error:
        temporary names included; only :data:`EXEMPT` may be there unaccounted).
    chain : list of str
        What is wrong with the manifests themselves: a gap, a link that does not name its
        predecessor and its SHA-256, an amendment that changes a sealed file or adds a file
        it may not add.
    inputs_changed, inputs_missing : list of str
        Inputs (and their parts) that differ from ``input-manifest.json``, or are gone
        (gone is not a failure: inputs move).
    """

    manifest: str
    first_sha256: str | None
    expected_sha256: str | None
    checked: int
    changed: list[str]
    missing: list[str]
    unlisted: list[str]
    chain: list[str]
    inputs_changed: list[str]
    inputs_missing: list[str]

    @property
    def expected_differs(self) -> bool:
        """A SHA-256 was expected of the first manifest, and it has another (or is gone)."""
        return self.expected_sha256 is not None and self.first_sha256 != self.expected_sha256

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.unlisted or self.chain or self.inputs_changed or self.expected_differs)


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalInputError(f"{str(path)!r} is not valid JSON: {exc}") from None


def verify(run_dir: str | Path, *, check_inputs: bool = True, expect_sha256: str | None = None) -> Verification:
    """Account for every file of a run directory with its chain of evidence manifests.

    The manifests are read in version order from ``evidence-manifest.json``: each
    amendment must name and hash its predecessor. Every file the first manifest lists is
    checked against it, every file an amendment adds against that amendment (an amendment
    cannot change a sealed file, so ``metrics.json`` is always checked against the first
    manifest), and any other file of the run directory, but :data:`EXEMPT`, is an error.

    Parameters
    ----------
    run_dir : str or Path
    check_inputs : bool
        Also rehash the inputs still at their path against ``input-manifest.json``.
    expect_sha256 : str, optional
        The SHA-256 of ``evidence-manifest.json`` stored when the run was sealed (hex);
        another one is a failure.

    Raises
    ------
    EvalInputError
        ``run_dir`` is not a run directory with an evidence manifest, or ``expect_sha256``
        is not a SHA-256.
    """
    run_dir = Path(run_dir)
    if expect_sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", expect_sha256):
        raise EvalInputError(f"--expect-sha256 must be a SHA-256 (64 hexadecimal digits), but got {expect_sha256!r}.")
    if not run_dir.is_dir():
        raise EvalInputError(f"{str(run_dir)!r} is not a run directory.")
    newest = latest_manifest(run_dir)
    if newest is None:
        raise EvalInputError(f"{str(run_dir)!r} is not a run directory with evidence: it holds no {EVIDENCE_MANIFEST}.")
    chain = _read_chain(run_dir)
    changed, missing = [], []
    for rel, (sha, _) in sorted(chain.sealed.items()):
        path = run_dir / rel
        if not path.is_file():
            missing.append(rel)
        elif sha256_path(path) != sha:
            changed.append(rel)
    accounted = set(chain.sealed) | set(chain.names)
    unlisted = [rel for rel in _run_files(run_dir) if rel not in accounted]
    first = run_dir / EVIDENCE_MANIFEST
    first_sha256 = sha256_path(first) if first.is_file() else None
    inputs_changed, inputs_missing = [], []
    inputs_path = run_dir / "input-manifest.json"
    if check_inputs and inputs_path.is_file() and "input-manifest.json" not in changed:
        for entry in _load(inputs_path).get("inputs", []):
            from evalcore import remote

            is_url = remote.is_url(entry["path"])
            root = entry["path"] if is_url else Path(entry["path"])
            for part in entry.get("parts", []):
                directory = entry.get("kind") == "directory of parts"
                if is_url:  # an object in a store: streamed and hashed again
                    url = remote.join(root, part["path"]) if directory else root
                    where = f"{entry['role']} {url}"
                    try:
                        info = remote.stat(url)
                    except EvalInputError:
                        info = None
                    if info is None:
                        inputs_missing.append(where)
                    elif remote.object_facts(url)["sha256"] != part["sha256"]:
                        inputs_changed.append(where)
                    continue
                path = root / part["path"] if directory else root
                where = f"{entry['role']} {path}"
                if not path.is_file():
                    inputs_missing.append(where)
                elif sha256_path(path) != part["sha256"]:
                    inputs_changed.append(where)
    return Verification(newest.name, first_sha256, None if expect_sha256 is None else expect_sha256.lower(),
                        len(chain.sealed), changed, missing, unlisted, chain.problems, inputs_changed, inputs_missing)
