"""Run outputs meant for people and auditors: ``report.md`` and ``manifest.json``.

The report is a readable summary (headline metrics with their 95 % intervals, one table
per stratum and per size class); the manifest is the evidence: parameters, input
checksums and row counts, package versions, per-partition row counts and status, and
every output file with its SHA-256.

Every text the report takes from the user's data or arguments (strata, AOI ids, tile
keys, column names, input paths, the title) goes through :func:`markdown_text`, so it
reads as the same text wherever the Markdown is shown (the file, the Prefect UI's
markdown artifact): never as HTML, a link, emphasis or a table cell boundary.
"""

from __future__ import annotations

import hashlib
import platform
from importlib import metadata
from collections.abc import Iterable
from pathlib import Path

from evalcore.metrics.registry import FAMILIES
from evalcore.present import headline, markdown_text, number, row_text, with_interval

__all__ = ["sha256_path", "package_versions", "render_report", "markdown_text", "HEADLINE_KEYS"]

HEADLINE_KEYS: tuple[tuple[str, str], ...] = headline(FAMILIES)
"""``(key, label)`` of the families' headline keys as registered at import (:func:`evalcore.present.headline`);
:func:`render_report` reads the registry when it runs, so a family registered later is in its table."""
_PACKAGES = ("evalcore", "numpy", "pandas", "shapely", "geopandas", "pyproj", "pyogrio", "pyarrow", "numba", "dask", "distributed", "prefect")


def sha256_path(path: str | Path) -> str:
    """SHA-256 of a file, or of a directory (its files' relative paths and hashes, sorted); a URL's too (streamed)."""
    from evalcore import remote

    if remote.is_url(str(path)) and remote.is_url(remote.normalise(str(path))):
        url = remote.normalise(str(path))
        info = remote.stat(url)
        if info is not None and info.get("type") == "directory":
            return sha256_of_parts((rel, remote.object_facts(remote.join(url, rel))["sha256"]) for rel in remote.list_files(url))
        return remote.object_facts(url)["sha256"]
    p = Path(remote.normalise(str(path))) if remote.is_url(str(path)) else Path(path)
    if p.is_dir():
        return sha256_of_parts((str(child.relative_to(p)), sha256_path(child)) for child in sorted(q for q in p.rglob("*") if q.is_file()))
    return remote.file_sha256(p)


def sha256_of_parts(parts: Iterable[tuple[str, str]]) -> str:
    """SHA-256 of a directory from its files' ``(relative path, SHA-256)``, in sorted path
    order: what :func:`sha256_path` returns for the directory, without reading a file again."""
    digest = hashlib.sha256()
    for relative, sha in parts:
        digest.update(relative.encode())
        digest.update(bytes.fromhex(sha))
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages that compute the numbers."""
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _num(value: object, digits: int = 3) -> str:
    return number(value, digits, "–", text=markdown_text)


def _with_ci(group: dict, key: str, digits: int = 3) -> str:
    return with_interval(group, key, digits, "–", defined_only=True, text=markdown_text)


def _group_table(title: str, groups: dict, first_column: str) -> list[str]:
    lines = [f"## {title}", "", f"| {first_column} | reference fields | predictions | precision | recall | F1 | mean IoU |", "|---|---:|---:|---|---|---|---|"]
    for name, g in groups.items():
        lines.append(
            f"| {markdown_text(name)} | {g['count_reference']} | {g['count_predicted']} | {_with_ci(g, 'precision')} | "
            f"{_with_ci(g, 'recall')} | {_with_ci(g, 'f1')} | {_with_ci(g, 'iou_mean') if g['count_tp'] else 'n/a (no matches)'} |"
        )
    return lines + [""]


def _worst_cell(worst: dict | None, metric: str) -> str:
    w = (worst or {}).get(metric)
    if w is None:
        return "none with enough support"
    return f"{markdown_text(w['group'])} ({_num(w['value'])}, {w['support']} fields)"


def _pixel_section(metrics: dict) -> list[str]:
    """Pixel metrics: micro and macro over the tiles, and boundary F1 in pixels."""
    px = metrics.get("pixel")
    if not px:
        return []
    lines = [
        "## Pixel metrics",
        "",
        f"{px['count_pixels']} pixels of {px['gsd_m']:g} m evaluated (TP {px['count_tp']}, FP {px['count_fp']}, FN {px['count_fn']}, "
        f"TN {px['count_tn']}). Boundary F1 within {px['boundary_f1']['tolerance_px']} px: {_num(px['boundary_f1']['f1'])}.",
        "",
        "| | precision | recall | F1 (Dice) | IoU | MCC | Tversky |",
        "|---|---|---|---|---|---|---|",
        "| micro | " + " | ".join(_num(px["micro"][m]) for m in ("precision", "recall", "f1", "iou", "mcc", "tversky")) + " |",
        "| macro (tiles) | " + " | ".join(f"{_num(px['macro'][m]['value'])} ({px['macro'][m]['n_units']})" for m in ("precision", "recall", "f1", "iou", "mcc", "tversky")) + " |",
        "",
    ]
    return lines


def _levels_section(metrics: dict) -> list[str]:
    """Tiles, AOIs and the worst group of every grouping."""
    lines: list[str] = []
    blocks = [("tiles", "Reporting tiles", "tiles"), ("aois", "AOIs", "AOIs")]
    for key, title, units in blocks:
        block = metrics.get(key)
        if not block:
            continue
        lines += [f"## {title}", ""]
        if key == "tiles":
            lines.append(
                f"{block['count_tiles']} tiles of {block['tile_km']:g} km ({block['count_tiles_with_reference']} with reference fields, "
                f"{block['count_tiles_without_reference']} with predictions only: {_num(block['fp_per_km2_reference_free'])} false positives per km²); "
                f"{_num(block['fraction_tiles_with_fn'])} of the tiles with reference fields miss at least one."
            )
        else:
            lines.append(f"{block['count_aois']} AOIs ({block['count_aois_with_reference']} with reference fields), ids from the column {markdown_text(block['id_column'])}.")
        lines += ["", "| | precision | recall | F1 |", "|---|---|---|---|"]
        micro, macro = block["micro"], block["macro"]
        lines.append(f"| micro (pooled counts) | {_num(micro['precision'])} | {_num(micro['recall'])} | {_num(micro['f1'])} |")
        lines.append(
            f"| macro (mean over {units}) | " + " | ".join(f"{_num(macro[m]['value'])} ({macro[m]['n_units']})" for m in ("precision", "recall", "f1")) + " |"
        )
        lines.append("| worst (enough support) | " + " | ".join(_worst_cell(block["worst"], m) for m in ("precision", "recall", "f1")) + " |")
        q = block["quantiles"]
        lines += ["", f"Per-{units[:-1] if units.endswith('s') else units} F1 quantiles (10/25/50/75/90 %): "
                  + ", ".join(_num(q["f1"][f"p{p}"]) for p in (10, 25, 50, 75, 90))
                  + "; count ratio: " + ", ".join(_num(q["count_ratio"][f"p{p}"]) for p in (10, 25, 50, 75, 90)) + ".", ""]
    if metrics.get("worst"):
        lines += ["## Worst groups", "", "| grouping | precision | recall | F1 |", "|---|---|---|---|"]
        for grouping, worst in metrics["worst"].items():
            name = "stratum" if grouping == "per_stratum" else "size class"
            lines.append(f"| {name} | " + " | ".join(_worst_cell(worst, m) for m in ("precision", "recall", "f1")) + " |")
        lines.append("")
    return lines


def render_report(metrics: dict, *, title: str = "Evaluation report", inputs: dict | None = None) -> str:
    """A Markdown summary of a metrics dict: headline table, per stratum, per size class.

    Intervals are shown as ``[lower, upper]`` (95 % percentile bootstrap) when the run
    had a bootstrap.
    """
    lines = [f"# {markdown_text(title)}", ""]
    if inputs:
        for role, info in inputs.items():
            sha = "".join(c for c in str(info.get("sha256", ""))[:12] if c in "0123456789abcdef")
            lines.append(f"- {markdown_text(role)}: {markdown_text(info.get('path'))} ({_num(info.get('rows', '?'))} rows, sha256 `{sha}…`)")
        lines.append("")
    lines += [
        f"{metrics['count_reference']} reference fields, {metrics['count_predicted']} predictions: "
        f"{metrics['count_tp']} matched (IoU ≥ {metrics['iou_threshold']}, {markdown_text(metrics['matching'])}), "
        f"{metrics['count_fp']} false positives ({metrics['count_fp_unassigned']} overlap no reference field), "
        f"{metrics['count_fn']} missed. Dropped rows: reference {metrics['count_reference_dropped']}, "
        f"predicted {metrics['count_predicted_dropped']}; repaired: reference {metrics['count_reference_repaired']}, "
        f"predicted {metrics['count_predicted_repaired']}.",
        "",
        "| metric | value [95 % interval] |",
        "|---|---|",
    ]
    overall = dict(metrics)
    for family in FAMILIES:
        for shown in family.shown:
            if shown.headline and shown.key in metrics:
                lines.append(f"| {shown.label} | {_with_ci(overall, shown.key, shown.digits)} |")
    for family in FAMILIES:
        for row in family.headline_rows(metrics):
            lines.append(f"| {markdown_text(row.label)} | {row_text(row, '–', defined_only=True, text=markdown_text)} |")
    lines.append("")
    if "bootstrap" in metrics:
        b = metrics["bootstrap"]
        lines += [
            f"Intervals: {b['n_resamples']} stratified bootstrap resamples of the reference fields, seed {b['seed']}, "
            f"drawn per partition of {b['partition_size_m'] / 1000:g} km. They assume fields are independent and are too narrow when errors cluster in space.",
            "",
        ]
    if metrics.get("iou_sweep"):
        lines += ["## IoU-threshold sweep", "", "| IoU ≥ | precision | recall | F1 | mean IoU | TP | FP | FN |", "|---:|---|---|---|---|---:|---:|---:|"]
        for e in metrics["iou_sweep"]:
            lines.append(
                f"| {e['iou_threshold']:g} | {_with_ci(e, 'precision')} | {_with_ci(e, 'recall')} | {_with_ci(e, 'f1')} | "
                f"{_num(e['iou_mean'])} | {e['count_tp']} | {e['count_fp']} | {e['count_fn']} |"
            )
        lines.append("")
    if "count_merges" in metrics:
        lines += [
            f"Topology (more than {metrics['majority_fraction']:g} of a polygon): {metrics['count_merges']} predictions merge "
            f"{metrics['count_merged_reference']} reference fields; {metrics['count_splits']} reference fields are split into "
            f"{metrics['count_split_predictions']} predictions; count ratio (predictions per reference field) "
            f"{_with_ci(overall, 'count_ratio')}.",
            "",
        ]
    if "count_fn_missed" in metrics:
        boundary = (f"; {metrics['count_boundary_errors']} matched fields are more than {metrics.get('boundary_tolerance_m'):g} m "
                    "off on average (M-BOUNDARY)") if "count_boundary_errors" in metrics else ""
        lines += [
            f"Errors (docs/evidence.md): {metrics['count_fn_missed']} reference fields missed outright (M-FN-MISSED), "
            f"{metrics['count_fn_localisation']} overlapped but not matched (M-FN-LOCALISATION); false positives: "
            f"{metrics['count_fp_background']} over no reference field (M-FP-BACKGROUND), {metrics['count_fp_duplicate']} "
            f"duplicates of a matched field (M-FP-DUPLICATE), {metrics['count_fp_localisation']} badly placed "
            f"(M-FP-LOCALISATION){boundary}.",
            "",
        ]
    study = metrics.get("study_area")
    if study:
        lines += [
            f"Study area ({markdown_text(study['rule'])}, {_num(study['area_km2'], 1)} km²): {metrics.get('count_reference_outside_study_area')} "
            f"reference fields and {metrics.get('count_predicted_outside_study_area')} predictions left out.",
            "",
        ]
    leak = metrics.get("leakage")
    if leak:
        lines += [
            f"Leakage audit: {leak['count_reference_within_buffer']} reference fields ({_num(leak['fraction'])} of those audited) "
            f"and {leak['count_predicted_within_buffer']} predictions lie within {leak['buffer_m']:g} m of the training area"
            + ("; they were excluded from the evaluation." if leak.get("excluded") else "; they are included in the numbers above."),
            "",
        ]
    n_unassigned = metrics.get("count_fp_unassigned", 0)
    if n_unassigned and (metrics.get("per_stratum") or metrics.get("per_size_class")):
        lines += [
            f"{n_unassigned} false positives overlap no reference field: they belong to no stratum or size class, so they "
            "lower the overall precision but no group's, and a group's precision can be above the overall one.",
            "",
        ]
    if metrics.get("per_stratum"):
        lines += _group_table("Per stratum", metrics["per_stratum"], "stratum")
    if metrics.get("per_size_class"):
        lines += _group_table("Per field-size class (ha)", metrics["per_size_class"], "size class")
    lines += [line for family in FAMILIES for line in family.report_lines(metrics)]
    lines += _pixel_section(metrics)
    lines += _levels_section(metrics)
    lines.append(f"Distances in metres in each field's UTM zone ({', '.join(str(c) for c in metrics['utm_epsg_codes'])}); areas in {markdown_text(metrics['equal_area_crs'])}.")
    return "\n".join(lines) + "\n"
