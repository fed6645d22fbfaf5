"""The sections of the page, each from the run's files: what it shows, or a note saying why not.

:func:`headline` (the headline numbers with their intervals, the acceptance gates, the
errors by kind and the input and run identity), :func:`iou_section` (the IoU sweep),
:func:`group_section` (strata, size classes), :func:`tiles_section` (reporting tiles and
AOIs), :func:`scores_section` (precision-recall and calibration), :func:`classes_section`
(the confusion heatmap and per-class bars),
:func:`family_sections` (a section per registered family that declares one) and
:func:`pixel_paired_section` and :func:`review_section` (once review decisions exist). Each appends its HTML and its figures to a
:class:`~evalcore.html_report.markup.Page`; the figures are drawn by
:mod:`evalcore.html_report.figures`, the overlays are :mod:`evalcore.html_report.overlays`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evalcore.html_report.figures import (
    IOU_BINS, class_bars, confusion_heatmap, figure_html, group_bars, iou_curve, iou_distribution, paired_deltas, place, pr_curves,
    reliability_diagram, tile_map,
)
from evalcore.html_report.loading import (
    RunFiles, finite, group_rows, load_tiles, parquet_dataset, read_part, unreadable, worst_tile_rows,
)
from evalcore.html_report.markup import Page, ci_text, esc, fmt, group_label, note, plain, prose, table, value_span, with_ci
from evalcore.metrics.registry import FAMILIES
from evalcore.present import interval_of

__all__ = [
    "headline",
    "iou_section",
    "group_section",
    "tiles_section",
    "scores_section",
    "classes_section",
    "family_sections",
    "matched_histograms",
    "pixel_paired_section",
    "review_section",
    "MAX_TABLE_ROWS",
]

MAX_TABLE_ROWS = 200
"""Rows listed in a table of groups, AOIs, failed gates or worse units; ``metrics.json`` has them all."""


def headline(run: RunFiles) -> str:
    """The headline section: main numbers with intervals, counts, gates, errors by kind, identity."""
    m = run.metrics
    boot = m.get("bootstrap") or {}
    rows = [
        ["Precision", with_ci("precision", m.get("precision"), interval_of(m, "precision"))],
        ["Recall", with_ci("recall", m.get("recall"), interval_of(m, "recall"))],
        ["F1", with_ci("f1", m.get("f1"), interval_of(m, "f1"))],
        ["Mean IoU of matches", with_ci("iou_mean", m.get("iou_mean"), interval_of(m, "iou_mean"))],
    ]
    if "boundary_iou_mean" in m:
        # beside IoU: the same pairs' boundary IoU (SPEC 6.11)
        rows.append([f"Mean boundary IoU of matches (band {fmt(m.get('boundary_iou_width_m'), 1)} m)",
                     with_ci("boundary_iou_mean", m.get("boundary_iou_mean"), interval_of(m, "boundary_iou_mean"))])
    bc = m.get("ap_interval") or {}
    for key, label in (("ap50", "AP at IoU 0.5"), ("ap75", "AP at IoU 0.75"), ("ap50_95", "AP 0.5:0.95")):
        if key in m:
            text = with_ci(key, m.get(key), interval_of(m, key))
            where = (bc.get("point_quantile") or {}).get(key)
            if where is not None:
                text += (f' <span class="ap-bc">bias-corrected; the point is at the {value_span(f"ap_interval.point_quantile.{key}", 100 * where, 0)} % '
                         f"quantile of its resamples; percentile interval{ci_text((bc.get('percentile') or {}).get(key))}</span>")
            rows.append([label + ("*" if boot and key in (boot.get("ci") or {}) else ""), text])
    for key, label in (("boundary_f1", "Boundary F1 (tolerance %s m)" % fmt(m.get("boundary_tolerance_m"), 1)), ("count_ratio", "Count ratio (predicted / reference)")):
        if key in m:
            rows.append([label, with_ci(key, m.get(key), interval_of(m, key))])
    # Values nested in blocks (the --score-threshold operating point, the precision
    # targets, precision inside the annotated area), as each family declares them.
    for family in FAMILIES:
        for row in family.headline_rows(m):
            value = prose(row.value) if isinstance(row.value, str) else with_ci(row.key, row.value, row.ci)
            rows.append([prose(row.label), value])
    counts = [
        ["Reference fields", value_span("count_reference", m.get("count_reference"))],
        ["Predictions", value_span("count_predicted", m.get("count_predicted"))],
        ["True positives", value_span("count_tp", m.get("count_tp"))],
        ["False positives", value_span("count_fp", m.get("count_fp"))],
        ["False negatives", value_span("count_fn", m.get("count_fn"))],
    ]
    for key, label in (("count_merges", "Merging predictions"), ("count_splits", "Split reference fields"),
                       ("count_reference_dropped", "Reference rows dropped"), ("count_predicted_dropped", "Predicted rows dropped")):
        if key in m:
            counts.append([label, value_span(key, m.get(key))])
    if boot:
        interval = (
            f"95 % percentile intervals from {value_span('bootstrap.n_resamples', boot.get('n_resamples'))} bootstrap resamples; "
            f'unit <span class="v" data-key="bootstrap.unit" data-value="{esc(boot.get("unit", "field"))}">{esc(boot.get("unit", "field"))}</span>'
            f" ({esc(boot.get('resampling', ''))}; {fmt(boot.get('n_units'))} units, seed {fmt(boot.get('seed'))})"
            + ("; AP's intervals bias-corrected (--ap-interval bc)" if (m.get("ap_interval") or {}).get("method") == "bc" else "")
        )
    else:
        interval = "No intervals: the run had no bootstrap resamples (--bootstrap 0)."
    out = [
        '<section id="headline"><h2>Headline</h2>',
        f'<p class="threshold">Matching: {esc(m.get("matching", "one_to_one"))} at IoU ≥ {value_span("iou_threshold", m.get("iou_threshold"), 2)}.</p>',
        '<div class="cols">',
        table(["metric", "value [95 % interval]"], rows, "headline"),
        table(["count", "n"], counts, "counts"),
        "</div>",
        f'<p class="interval">{interval}</p>',
        _ap_interval_note(m),
        _gates_html(run),
        _taxonomy_html(run),
        _identity_html(run),
        "</section>",
    ]
    return "\n".join(out)


def _ap_interval_note(m: dict) -> str:
    """Why an AP interval can sit lopsided around its point (item 12 of issue 33), under the headline; empty without AP intervals."""
    if "ap50" not in m or "ap50" not in ((m.get("bootstrap") or {}).get("ci") or {}):
        return ""
    bc = (m.get("ap_interval") or {}).get("method") == "bc"
    return ('<p class="ap-note">* AP intervals may sit lopsided around their point, the point near one end: this is not an error. '
            "AP reads precision at 101 fixed recall levels (0, 0.01, …, 1), so it moves in steps as a resample adds or drops a field, "
            "and its bootstrap distribution is skewed and lumpy rather than centred on the point. "
            + ("These AP intervals are bias-corrected (BC: the percentile interval shifted by where the point lies among its resamples); "
               "the percentile interval and the point's quantile are shown beside them. "
               if bc else
               "The percentile interval is kept as every other rate's; <code>--ap-interval bc</code> gives the bias-corrected interval "
               "and the point's quantile among its resamples. ")
            + "Details and the measured coverage: docs/intervals.md, \"AP intervals\".</p>")


def _gates_html(run: RunFiles) -> str:
    g = run.gates
    if g is None or "decision" not in g:
        why = "acceptance-gates.json says not_configured" if g is not None and g.get("state") == "not_configured" else "no acceptance-gates.json"
        return "<h3>Acceptance gates</h3>" + note(f"No acceptance gates ran for this run ({why}; give a gates file with `evalcore run --gates FILE`, or check later with `evalcore gate RUN_DIR FILE`).")
    decision = str(g.get("decision", "unknown"))
    counts = g.get("counts") or {}
    rules = g.get("rules") or []
    if not counts and rules:
        for r in rules:
            counts[r.get("state")] = counts.get(r.get("state"), 0) + 1
    summary = ", ".join(f"{fmt(v)} {esc(k)}" for k, v in counts.items())
    text = (f'<h3>Acceptance gates</h3><p class="gate gate-{esc(decision)}">Decision: '
            f'<span class="v" data-key="gates.decision" data-value="{esc(decision)}">{esc(decision)}</span> ({summary})</p>')
    shown = [r for r in rules if r.get("state") != "pass"][:MAX_TABLE_ROWS]
    if shown:
        text += table(
            ["rule", "metric", "group", "observed", "expected", "support", "state", "reason"],
            [[esc(r.get("id")), esc(r.get("metric")), esc(r.get("group") or "–"), fmt(r.get("observed")),
              f"{esc(r.get('op', ''))} {fmt(r.get('expected'))}", fmt(r.get("support")),
              esc(r.get("state") if r.get("blocks", True) else "reported (not blocking)"), esc(r.get("reason") or "")]
             for r in shown],
        )
    return text


_TAXONOMY_ORDER = ("TP", "M-FN-MISSED", "M-FN-LOCALISATION", "M-FP-BACKGROUND", "M-FP-DUPLICATE", "M-FP-LOCALISATION", "merge", "split", "M-BOUNDARY")
_TAXONOMY_FROM_METRICS = {"M-FN-MISSED": "count_fn_missed", "M-FN-LOCALISATION": "count_fn_localisation", "M-FP-BACKGROUND": "count_fp_background",
                          "M-FP-DUPLICATE": "count_fp_duplicate", "M-FP-LOCALISATION": "count_fp_localisation", "merge": "count_merges", "split": "count_splits"}


def _taxonomy_counts(run: RunFiles) -> tuple[dict[str, Any], str]:
    overall = (run.taxonomy or {}).get("overall") if (run.taxonomy or {}).get("state", "computed") != "not_configured" else None
    if isinstance(overall, dict) and overall:
        return overall, "error-taxonomy.json"
    m = run.metrics
    found = {code: m[key] for code, key in _TAXONOMY_FROM_METRICS.items() if key in m}
    return found, "metrics.json"


def _taxonomy_html(run: RunFiles) -> str:
    counts, source = _taxonomy_counts(run)
    if not counts:
        return "<h3>Errors by kind</h3>" + note("No error taxonomy: the run directory has neither error-taxonomy.json nor the count_fp_*/count_fn_* keys.")
    codes = [c for c in _TAXONOMY_ORDER if c in counts] + [c for c in counts if c not in _TAXONOMY_ORDER]
    rows = [[esc(c), value_span(f"taxonomy.{c}", counts[c])] for c in codes if not isinstance(counts[c], (dict, list))]
    return f"<h3>Errors by kind</h3><p>From {esc(source)}.</p>" + table(["code", "count"], rows, "taxonomy")


def _identity_html(run: RunFiles) -> str:
    """Input and run identity: each fact once, values as a reader wants them (:func:`plain`: yes/no, "—", "∞")."""
    rows: list[list[str]] = []
    man = run.manifest or {}
    for role, entry in (man.get("inputs") or {}).items():
        if isinstance(entry, dict):
            rows.append([f"{esc(role)} input", f"<code>{esc(entry.get('path'))}</code>" + (f" (layer {esc(entry.get('layer'))})" if entry.get("layer") else "")
                         + f"<br>sha256 <code>{esc(entry.get('sha256'))}</code>, {fmt(entry.get('rows'))} rows, {fmt(entry.get('kept'))} kept"])
    contract = run.contract or {}
    shown_keys: set[str] = set()
    for key, value in contract.items():
        if key == "evaluator" and isinstance(value, dict):
            rows.append(["evaluator", _evaluator_text(value, man.get("versions") or {})])
        elif isinstance(value, (str, int, float, bool)) or value is None or (key == "labels" and isinstance(value, dict)):
            text = plain(value, key) or "—"
            rows.append([esc(key.replace("_", " ")), text if isinstance(value, (bool, dict)) or value is None else f"<code>{text}</code>"])
        else:
            continue
        shown_keys.add(key)
    versions = man.get("versions") or {}
    if versions and "evaluator" not in shown_keys:
        rows.append(["evaluator", _evaluator_text({}, versions)])
    for key in ("started", "finished", "status"):
        if key in man and not (key in shown_keys and contract.get(key) == man[key]):  # the contract's start is the manifest's: once
            rows.append([key, esc(man[key])])
    if man.get("dask_dashboard"):
        rows.append(["Dask dashboard (live during the run only)", f"<code>{esc(man['dask_dashboard'])}</code>"])
    params = man.get("parameters") or {}
    shown = {k: v for k, v in params.items() if v not in (None, "", [], {}) and k not in ("predicted", "reference", "output_dir", "iou_sweep_thresholds")}
    if shown:
        rows.append(["parameters", "; ".join(f"{esc(k)} = <code>{plain(v, k)}</code>" for k, v in shown.items())])
    rows.append(["run directory", f"<code>{esc(run.run_dir.resolve())}</code>"])
    if run.contract is None:
        rows.append(["evaluation contract", "absent (no evaluation-contract.json in this run directory)"])
    return "<h3>Input and run identity</h3>" + table(["", ""], rows, "identity")


def _evaluator_text(evaluator: dict, versions: dict) -> str:
    """The one "evaluator" row: the contract's name, version and commit, with the manifest's Python and Prefect versions."""
    name = evaluator.get("name", "evalcore")
    version = evaluator.get("version", versions.get("evalcore", "?"))
    text = f"{esc(name)} {esc(version)}"
    if evaluator.get("git_commit"):
        text += f", commit <code>{esc(evaluator['git_commit'])}</code>"
        if "git_dirty" in evaluator:
            text += " with uncommitted changes" if evaluator["git_dirty"] else " (clean checkout)"
    if versions:
        text += f" (Python {esc(versions.get('python', '?'))}, prefect {esc(versions.get('prefect', '?'))})"
    return text


def iou_section(run: RunFiles, page: Page) -> None:
    """F1, precision and recall against the IoU threshold: the curve and its values."""
    sweep = run.metrics.get("iou_sweep")
    page.parts.append('<section id="iou-curve"><h2>IoU-threshold curve</h2>')
    if not sweep:
        page.parts.append(note("No IoU sweep: the run was made with --iou-sweep-thresholds none."))
        page.parts.append("</section>")
        return
    place(page, iou_curve(sweep))
    rows = [[f"{fmt(e.get('iou_threshold'), 2)}", fmt(e.get("precision")) + ci_text(interval_of(e, "precision")),
             fmt(e.get("recall")) + ci_text(interval_of(e, "recall")), fmt(e.get("f1")) + ci_text(interval_of(e, "f1")),
             fmt(e.get("count_tp")), fmt(e.get("count_fp")), fmt(e.get("count_fn"))] for e in sweep]
    page.parts.append("<details><summary>Values</summary>" + table(["IoU ≥", "precision", "recall", "F1", "TP", "FP", "FN"], rows) + "</details>")
    f50, f75 = (finite(e.get("f1")) for e in (sweep[0], sweep[min(5, len(sweep) - 1)]))
    if f50 is not None and f75 is not None:
        page.parts.append(f"<p>F1 falls from {fmt(f50)} at IoU {fmt(sweep[0].get('iou_threshold'), 2)} to {fmt(f75)} at "
                          f"{fmt(sweep[min(5, len(sweep) - 1)].get('iou_threshold'), 2)}: a steep fall means fields are found but delineated loosely.</p>")
    page.parts.append("</section>")


def group_section(run: RunFiles, page: Page, grouping: str, title: str, name: str, absent: str) -> None:
    """A grouping of ``metrics.json`` (``per_stratum`` or ``per_size_class``): bars, the worst group and the table; ``absent`` is the note when there is none."""
    rows = group_rows(run.metrics, grouping)
    page.parts.append(f'<section id="{name.replace("_", "-")}"><h2>{esc(title)}</h2>')
    if not rows:
        page.parts.append(note(absent))
        page.parts.append("</section>")
        return
    worst = ((run.metrics.get("worst") or {}).get(grouping) or {}).get("f1")
    place(page, group_bars(rows, grouping, worst, title, name))
    if worst:
        page.parts.append(f'<p class="worst">Worst by F1 among groups with enough support: <b>{esc(group_label(worst.get("group"), grouping))}</b> '
                          f'(F1 {value_span(f"worst.{grouping}.f1", worst.get("value"))}, {fmt(worst.get("support"))} fields).</p>')
    else:
        page.parts.append(note("No worst group: no group has enough support (min_support)."))
    table_rows = [[esc(group_label(r["group"], grouping)), fmt(r["support"]), fmt(r["precision"]) + ci_text([r["precision_ci_lower"], r["precision_ci_upper"]]),
                   fmt(r["recall"]) + ci_text([r["recall_ci_lower"], r["recall_ci_upper"]]),
                   fmt(r["f1"]) + ci_text([r["f1_ci_lower"], r["f1_ci_upper"]]), fmt(r["count_ratio"]),
                   "insufficient support" if r["insufficient_support"] else ""] for r in rows[:MAX_TABLE_ROWS]]
    if grouping == "per_size_class" and "size_class_edges_ha" in run.metrics:
        page.parts.append(f'<p class="edges">Size classes by reference field area, edges {plain(run.metrics["size_class_edges_ha"], "size_class_edges_ha")} '
                          "(a class holds its lower edge, not its upper; the last holds both).</p>")
    first = "size class" if grouping == "per_size_class" else "stratum" if grouping == "per_stratum" else "group"
    page.parts.append(table([first, "support", "precision", "recall", "F1", "count ratio", ""], table_rows))
    if len(rows) > MAX_TABLE_ROWS:
        page.parts.append(note(f"The first {MAX_TABLE_ROWS} of {len(rows)} groups are listed; metrics.json has them all."))
    page.parts.append("</section>")


def tiles_section(run: RunFiles, page: Page) -> tuple[Any, list[dict]]:
    """Reporting tiles (maps, worst tiles) and AOIs; returns the tile table (None when absent) and the worst tiles for the overlays."""
    page.parts.append('<section id="tiles"><h2>Where it fails: reporting tiles and AOIs</h2>')
    tiles = load_tiles(run)
    worst: list[dict] = []
    block = run.metrics.get("tiles") or {}
    if block:
        page.parts.append(
            f"<p>{fmt(block.get('count_tiles'))} tiles of {fmt(block.get('tile_km'), 0)} km, {fmt(block.get('count_tiles_without_reference'))} without reference fields "
            f"({fmt(block.get('fp_per_km2_reference_free'))} false positives per km² there); micro F1 {fmt((block.get('micro') or {}).get('f1'))}, "
            f"macro F1 {fmt(((block.get('macro') or {}).get('f1') or {}).get('value'))}; {fmt(100 * (block.get('fraction_tiles_with_fn') or 0), 0)} % of tiles with "
            f"reference fields have a false negative.</p>")
    if tiles is None or len(tiles) == 0:
        page.parts.append(note("No tile map: the run directory has no tiles.parquet (or it is empty)."))
    else:
        worst = worst_tile_rows(tiles)
        for column, name in (("f1", "tile_f1_map"), ("count_ratio", "tile_count_ratio_map")):
            if column in tiles and np.isfinite(tiles[column].to_numpy(dtype=float)).any():
                place(page, tile_map(tiles, run.metrics, column, name, worst))
        if worst:
            page.parts.append("<h3>Worst tiles</h3>" + table(
                ["#", "tile (EPSG_x_y)", "support", "precision", "recall", "F1", "count ratio", "FP", "FN"],
                [[str(i + 1), f"<code>{esc(w['tile'])}</code>", fmt(w.get("support")), fmt(w.get("precision")), fmt(w.get("recall")),
                  fmt(w.get("f1")) + ci_text([w.get("f1_ci_lower"), w.get("f1_ci_upper")]), fmt(w.get("count_ratio")), fmt(w.get("count_fp")), fmt(w.get("count_fn"))]
                 for i, w in enumerate(worst)], "worst-tiles"))
        else:
            page.parts.append(note("No worst tile: no tile has enough support (min_support)."))
    aois = run.metrics.get("aois")
    page.parts.append("<h3>Per AOI</h3>")
    if not aois:
        page.parts.append(note("No AOI table: the run was made without an AOI layer (--aoi)."))
    else:
        per = aois.get("per_aoi") or {}
        order = sorted(per.items(), key=lambda kv: (finite(kv[1].get("f1")) is None, finite(kv[1].get("f1")) or 0.0, kv[0]))
        worst_aoi = (aois.get("worst") or {}).get("f1")
        if worst_aoi:
            page.parts.append(f'<p class="worst">Worst AOI by F1: <b>{esc(worst_aoi.get("group"))}</b> (F1 {fmt(worst_aoi.get("value"))}, {fmt(worst_aoi.get("support"))} fields).</p>')
        rows = [[esc(k), fmt(g.get("support")), fmt(g.get("precision")) + ci_text(interval_of(g, "precision")),
                 fmt(g.get("recall")) + ci_text(interval_of(g, "recall")), fmt(g.get("f1")) + ci_text(interval_of(g, "f1")),
                 fmt(g.get("count_ratio")), fmt(g.get("count_fp")), fmt(g.get("count_fn")), "insufficient support" if g.get("insufficient_support") else ""]
                for k, g in order[:MAX_TABLE_ROWS]]
        page.parts.append(table(["AOI", "support", "precision", "recall", "F1", "count ratio", "FP", "FN", ""], rows, "aois"))
    page.parts.append("</section>")
    return tiles, worst


def scores_section(run: RunFiles, page: Page) -> None:
    """Precision-recall curves and the reliability diagram, when the predictions had a score."""
    m = run.metrics
    page.parts.append('<section id="scores"><h2>Confidence scores: precision-recall and calibration</h2>')
    if "pr_curve" not in m and "calibration" not in m:
        page.parts.append(note("No score figures: the predictions had no confidence score (the run was made without --score-column)."))
        page.parts.append("</section>")
        return
    if m.get("pr_curve"):
        place(page, pr_curves(m))
    cal = m.get("calibration") or {}
    if cal.get("bins"):
        place(page, reliability_diagram(cal))
    page.parts.append("</section>")


def classes_section(run: RunFiles, page: Page) -> None:
    """The classes (``--class-column``): the confusion heatmap, per-class PQ and F1 bars, and the per-class table."""
    block = run.metrics.get("classes")
    page.parts.append('<section id="classes"><h2>Classes: confusion and per-class quality</h2>')
    if not block:
        page.parts.append(note("No classes: the run was made without --class-column."))
        page.parts.append("</section>")
        return
    for draw in (confusion_heatmap, class_bars):
        place(page, draw(block))
    macro = block.get("macro") or {}
    page.parts.append(
        f"<p>{fmt(macro.get('n_classes'))} classes: mPQ {with_ci('classes.macro.pq', macro.get('pq'), interval_of(macro, 'pq'))}, "
        f"macro F1 {with_ci('classes.macro.f1', macro.get('f1'), interval_of(macro, 'f1'))}"
        + (f", mAP50:95 {with_ci('classes.macro.ap50_95', macro.get('ap50_95'), interval_of(macro, 'ap50_95'))}" if "ap50_95" in macro else "")
        + f"; {fmt(block.get('count_reference_unclassified'))} reference fields and {fmt(block.get('count_predicted_unclassified'))} "
        "predictions without a class.</p>")
    worst = block.get("worst_class")
    if worst:
        page.parts.append(f'<p class="worst">Worst class by F1 among classes with enough support: <b>{esc(worst.get("class"))}</b> '
                          f'(F1 {fmt(worst.get("f1"))}, {fmt(worst.get("count_reference"))} fields).</p>')
    per = block.get("per_class") or {}
    rows = [[esc(name), fmt(e.get("count_reference")), fmt(e.get("count_predicted")),
             *(fmt(e.get(k)) + ci_text(interval_of(e, k)) for k in ("precision", "recall", "f1", "pq")),
             fmt(e.get("producers_accuracy")), fmt(e.get("users_accuracy"))] + ([fmt(e.get("ap50_95"))] if "ap50_95" in e else [])
            for name, e in list(per.items())[:MAX_TABLE_ROWS]]
    header = ["class", "reference", "predicted", "precision", "recall", "F1", "PQ", "producer's acc.", "user's acc."]
    page.parts.append(table(header + (["AP50:95"] if any("ap50_95" in e for e in per.values()) else []), rows, "classes"))
    page.parts.append("</section>")


def pixel_paired_section(run: RunFiles, page: Page) -> None:
    """The pixel metrics and the paired comparison with a previous run (``paired.json``)."""
    page.parts.append('<section id="pixel-paired"><h2>Pixel metrics and paired comparison</h2>')
    px = run.metrics.get("pixel")
    page.parts.append("<h3>Pixel metrics</h3>")
    if not px:
        page.parts.append(note("No pixel metrics: the run was made without --pixel-gsd-m."))
    else:
        micro, macro = px.get("micro") or {}, px.get("macro") or {}
        rows = [[k, value_span(f"pixel.micro.{k}", micro.get(k)), fmt((macro.get(k) or {}).get("value")) + f" over {fmt((macro.get(k) or {}).get('n_units'))} tiles"]
                for k in ("precision", "recall", "f1", "iou", "mcc", "tversky")]
        bf = px.get("boundary_f1") or {}
        page.parts.append(f"<p>{fmt(px.get('count_pixels'))} evaluated pixels of {fmt(px.get('gsd_m'), 1)} m (TP {fmt(px.get('count_tp'))}, FP {fmt(px.get('count_fp'))}, "
                          f"FN {fmt(px.get('count_fn'))}, TN {fmt(px.get('count_tn'))}); boundary F1 in pixels {fmt(bf.get('f1'))} at {fmt(bf.get('tolerance_px'))} px.</p>")
        page.parts.append(table(["metric", "micro (pooled)", "macro (mean over tiles)"], rows, "pixel"))
        n_units = {k: (macro.get(k) or {}).get("n_units") for k in ("precision", "recall", "f1", "mcc")}
        page.parts.append(
            f'<p class="macro-units">Each macro mean is over the tiles where that rate is defined, so the means cover different tiles: '
            f'precision over the {fmt(n_units["precision"])} tiles with predicted pixels (TP + FP &gt; 0), recall over the {fmt(n_units["recall"])} '
            f'with reference pixels (TP + FN &gt; 0), F1, IoU and Tversky over the {fmt(n_units["f1"])} with either, MCC over the {fmt(n_units["mcc"])} '
            "where none of its four sums is 0. A tile with predictions and no reference field has precision 0 and no recall, "
            "which is why macro precision can average more tiles than macro recall (definitions: docs/metrics.md, pixel metrics).</p>")
    page.parts.append("<h3>Paired comparison</h3>")
    paired = run.paired
    if not paired:
        page.parts.append(note("No paired comparison: this run directory has no paired.json (the reevaluate flow writes one when a previous run of the product exists)."))
    else:
        overall = paired.get("overall") or {}
        names = [k for k, e in overall.items() if isinstance(e, dict)]
        if names:
            place(page, paired_deltas(paired, names))
            page.parts.append(table(["metric", "candidate", "incumbent", "delta [95 % paired interval]"],
                                    [[esc(k), fmt(overall[k].get("candidate")), fmt(overall[k].get("incumbent")),
                                      fmt(overall[k].get("delta")) + ci_text(overall[k].get("ci"))] for k in names]))
        worse = paired.get("worse_units") or []
        page.parts.append(f"<p>{len(worse)} units where the candidate is significantly worse"
                          + (f"; regression: {'yes' if paired.get('regression') else 'no'}" if "regression" in paired else "") + ".</p>")
        if worse:
            page.parts.append(table(["level", "unit", "metric", "delta [interval]", "support"],
                                    [[esc(w.get("level")), esc(w.get("unit")), esc(w.get("metric")), fmt(w.get("delta")) + ci_text(w.get("ci")), fmt(w.get("support"))]
                                     for w in worse[:MAX_TABLE_ROWS]]))
    page.parts.append("</section>")


def family_sections(run: RunFiles, page: Page) -> list[tuple[str, str]]:
    """A section per registered family that declares one (``MetricFamily.section``): a table of its
    :attr:`shown` keys in ``metrics.json`` with their intervals. Returns the (anchor, title) of each."""
    m = run.metrics
    drawn = []
    for family in FAMILIES:
        if not family.section:
            continue
        rows = [[prose(s.label), with_ci(s.key, m.get(s.key), interval_of(m, s.key))
                 + ("" if s.better is None else f' <span class="better">({esc(s.better)} is better)</span>')]
                for s in family.shown if s.key in m]
        if not rows:
            continue
        anchor = f"family-{family.name}"
        extra = _FAMILY_EXTRAS.get(family.name)
        page.parts.append(f'<section id="{esc(anchor)}" data-family="{esc(family.name)}"><h2>{esc(family.section)}</h2>'
                          + table(["metric", "value [95 % interval]"], rows, "family")
                          + (extra(run, page) if extra is not None else "") + "</section>")
        drawn.append((anchor, family.section))
    return drawn


MAX_REVIEW_DISAGREEMENTS = 10
"""Disagreements listed in the report's review section (review.json lists them all)."""


def review_section(run: RunFiles, page: Page) -> bool:
    """The human review (SPEC 6.12), once decisions are imported: completion, the weighted
    confirmed share and severe-error prevalence with their Wilson intervals, kappa, the
    top disagreements. Nothing (and False) before: the page says nothing about a review
    that has not happened."""
    from evalcore.review.layout import current_review

    review = current_review(run.run_dir)
    if review is None or review.get("state") != "reviewed":
        return False
    ci = review.get("ci") or {}
    agreement = review.get("agreement") or {}
    sample = review.get("sample") or {}
    rows = [
        ["completion", value_span("review.completion", review.get("completion")) + f" ({fmt(review.get('reviewed'))} of {fmt(review.get('drawn'))} items)"],
        ["confirmed share (weighted)", with_ci("review.confirmed_share", review.get("confirmed_share"), ci.get("confirmed_share"))],
        ["critical errors (weighted)", with_ci("review.critical_share", review.get("critical_share"), ci.get("critical_share"))],
        ["major or worse (weighted)", with_ci("review.major_or_worse_share", review.get("major_or_worse_share"), ci.get("major_or_worse_share"))],
        [f"{esc(agreement.get('kappa_method', 'cohen'))} kappa", value_span("review.agreement.kappa", agreement.get("kappa"))
         + f" (raw agreement {value_span('review.agreement.raw_agreement', agreement.get('raw_agreement'))})"],
    ]
    if "confirmed_share_final" in review:
        rows.append(["confirmed share after adjudication", with_ci("review.confirmed_share_final", review["confirmed_share_final"], ci.get("confirmed_share_final"))])
    text = (
        '<section id="review"><h2>Human review</h2>'
        f"<p>{fmt(sample.get('n_items'))} items drawn (seed {fmt(sample.get('seed'))}) from {esc(sample.get('file'))}; "
        f"{fmt(review.get('n_decisions'))} decisions by {esc(', '.join(review.get('reviewers') or []))}. Shares weight each item by "
        "1 / its inclusion probability, with Wilson 95 % intervals at the effective size.</p>"
        + table(["", "value"], rows, "headline")
    )
    listed = (review.get("disagreements") or [])[:MAX_REVIEW_DISAGREEMENTS]
    if listed:
        text += f"<h3>Top disagreements ({fmt(review.get('n_disagreements'))} in all)</h3>" + table(
            ["item", "cell", "automatic", "reviewers", "final"],
            [[esc(d["item_id"]), esc(d["cell"]), esc(d["automatic_code"]),
              esc("; ".join(f"{x['reviewer']}: {x['code']}" + (f" ({x['severity']})" if x.get("severity") else "") for x in d["decisions"])),
              esc(d.get("final_code") or "–")] for d in listed],
        )
    page.parts.append(text + "</section>")
    return True
def _quality_extra(run: RunFiles, page: Page) -> str:
    """The geometry-quality section's figure and table: the matched-IoU histogram with the
    quantiles of ``iou_distribution`` marked, boundary IoU beside it (SPEC 6.11)."""
    m = run.metrics
    dist = m.get("iou_distribution")
    if not isinstance(dist, dict):
        return ""
    keys = ["count", "min", "q05", "q10", "q25", "median", "q75", "q90", "max"]
    header = ["", *keys]
    rows = [["IoU", *(value_span(f"iou_distribution.{k}", dist.get(k)) for k in keys)]]
    if "boundary_iou_mean" in m:
        rows.append([esc(f"boundary IoU ({fmt(m.get('boundary_iou_width_m'), 1)} m)"), "", "", "", "", "",
                     value_span("boundary_iou_median", m.get("boundary_iou_median")), "", "", ""])
    parts = ["<h3>Matched-IoU distribution</h3>", table(header, rows, "iou-distribution")]
    fields_dir = run.run_dir / "fields"
    if not (fields_dir.is_dir() and any(fields_dir.glob("*.parquet"))):
        parts.append(note("No histogram: the run directory has no per-field table (fields/)."))
        return "".join(parts)
    iou_counts, band_counts = matched_histograms(fields_dir, with_band="boundary_iou_mean" in m)
    boundary = None
    if band_counts is not None:
        boundary = {"mean": m.get("boundary_iou_mean"), "median": m.get("boundary_iou_median"), "width_m": m.get("boundary_iou_width_m")}
    fig_ = iou_distribution(iou_counts, dist, band_counts, boundary)
    page.figures.append(fig_)
    parts.append(figure_html(fig_))
    return "".join(parts)


def matched_histograms(fields_dir: Path, with_band: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The matched fields' IoU, and with ``with_band`` their boundary IoU, counted in the bins
    of :data:`~evalcore.html_report.figures.IOU_BINS` one part of ``fields/`` at a time.

    The report held the three columns of every field before (17 bytes a field, and pandas'
    copies), which grows with the country; this holds one part's. On a 250k-field run
    both ways raised the process's peak by about 80 MiB (Arrow's reading, not the data).
    Returns ``(iou counts, boundary IoU counts or None)``; the boundary counts are None when
    the table has no ``boundary_iou`` column or ``with_band`` is False.
    """
    dataset = parquet_dataset(fields_dir)
    names = dataset.schema.names
    columns = [c for c in ("matched", "iou", "boundary_iou") if c in names]
    iou_counts = np.zeros(len(IOU_BINS) - 1, dtype=np.int64)
    band_counts = np.zeros(len(IOU_BINS) - 1, dtype=np.int64) if with_band and "boundary_iou" in names else None
    try:
        for file in dataset.files:
            part = read_part(file, columns).to_pandas()
            matched = part["matched"].to_numpy(bool) if "matched" in part else np.zeros(len(part), bool)
            for counts, name in ((iou_counts, "iou"), (band_counts, "boundary_iou")):
                if counts is None or name not in part:
                    continue
                values = part[name].to_numpy(np.float64)[matched]
                counts += np.histogram(values[np.isfinite(values)], bins=IOU_BINS)[0]
    except Exception as exc:
        raise unreadable(fields_dir, "parquet", exc) from exc
    return iou_counts, band_counts


_FAMILY_EXTRAS = {"quality": _quality_extra}
"""What a family's section shows beyond the table of its ``shown`` keys (figures read from the run directory)."""
