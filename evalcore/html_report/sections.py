"""The sections of the page, each from the run's files: what it shows, or a note saying why not.

:func:`headline` (the headline numbers with their intervals, the acceptance gates, the
errors by kind and the input and run identity), :func:`iou_section` (the IoU sweep),
:func:`group_section` (strata, size classes), :func:`tiles_section` (reporting tiles and
AOIs), :func:`scores_section` (precision-recall and calibration),
:func:`family_sections` (a section per registered family that declares one) and
:func:`pixel_paired_section`. Each appends its HTML and its figures to a
:class:`~evalcore.html_report.markup.Page`; the figures are drawn by
:mod:`evalcore.html_report.figures`, the overlays are :mod:`evalcore.html_report.overlays`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evalcore.html_report.figures import figure_html, group_bars, iou_curve, paired_deltas, pr_curves, reliability_diagram, tile_map
from evalcore.html_report.loading import RunFiles, finite, group_rows, load_tiles, worst_tile_rows
from evalcore.html_report.markup import Page, ci_text, esc, fmt, note, table, value_span, with_ci
from evalcore.metrics.registry import FAMILIES
from evalcore.present import interval_of

__all__ = [
    "headline",
    "iou_section",
    "group_section",
    "tiles_section",
    "scores_section",
    "family_sections",
    "pixel_paired_section",
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
    for key, label in (("ap50", "AP at IoU 0.5"), ("ap75", "AP at IoU 0.75"), ("ap50_95", "AP 0.5:0.95")):
        if key in m:
            rows.append([label, with_ci(key, m.get(key), interval_of(m, key))])
    for key, label in (("boundary_f1", "Boundary F1 (tolerance %s m)" % fmt(m.get("boundary_tolerance_m"), 1)), ("count_ratio", "Count ratio (predicted / reference)")):
        if key in m:
            rows.append([label, with_ci(key, m.get(key), interval_of(m, key))])
    # Values nested in blocks (the --score-threshold operating point, the precision
    # targets, precision inside the annotated area), as each family declares them.
    for family in FAMILIES:
        for row in family.headline_rows(m):
            value = esc(row.value) if isinstance(row.value, str) else with_ci(row.key, row.value, row.ci)
            rows.append([esc(row.label), value])
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
        _gates_html(run),
        _taxonomy_html(run),
        _identity_html(run),
        "</section>",
    ]
    return "\n".join(out)


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
    rows: list[list[str]] = []
    man = run.manifest or {}
    for role, entry in (man.get("inputs") or {}).items():
        if isinstance(entry, dict):
            rows.append([f"{esc(role)} input", f"<code>{esc(entry.get('path'))}</code>" + (f" (layer {esc(entry.get('layer'))})" if entry.get("layer") else "")
                         + f"<br>sha256 <code>{esc(entry.get('sha256'))}</code>, {fmt(entry.get('rows'))} rows, {fmt(entry.get('kept'))} kept"])
    contract = run.contract or {}
    for key, value in contract.items():
        if isinstance(value, (str, int, float, bool)) or value is None:
            rows.append([esc(key.replace("_", " ")), f"<code>{esc(value)}</code>"])
        elif isinstance(value, dict) and key in ("labels", "evaluator") and all(isinstance(v, (str, int, float, bool)) or v is None for v in value.values()):
            rows.append([esc(key), ", ".join(f"{esc(k)}: <code>{esc(v)}</code>" for k, v in value.items())])
    versions = man.get("versions") or {}
    if versions and not any(r[0] == "evaluator version" for r in rows):
        rows.append(["evaluator", f"evalcore {esc(versions.get('evalcore', '?'))} (Python {esc(versions.get('python', '?'))}, prefect {esc(versions.get('prefect', '?'))})"])
    for key in ("started", "finished", "status"):
        if key in man:
            rows.append([key, esc(man[key])])
    if man.get("dask_dashboard"):
        rows.append(["Dask dashboard (live during the run only)", f"<code>{esc(man['dask_dashboard'])}</code>"])
    params = man.get("parameters") or {}
    shown = {k: v for k, v in params.items() if v not in (None, "", [], {}) and k not in ("predicted", "reference", "output_dir", "iou_sweep_thresholds")}
    if shown:
        rows.append(["parameters", "; ".join(f"{esc(k)} = <code>{esc(v)}</code>" for k, v in shown.items())])
    rows.append(["run directory", f"<code>{esc(run.run_dir.resolve())}</code>"])
    if run.contract is None:
        rows.append(["evaluation contract", "absent (no evaluation-contract.json in this run directory)"])
    return "<h3>Input and run identity</h3>" + table(["", ""], rows, "identity")


def iou_section(run: RunFiles, page: Page) -> None:
    """F1, precision and recall against the IoU threshold: the curve and its values."""
    sweep = run.metrics.get("iou_sweep")
    page.parts.append('<section id="iou-curve"><h2>IoU-threshold curve</h2>')
    if not sweep:
        page.parts.append(note("No IoU sweep: the run was made with --iou-sweep-thresholds none."))
        page.parts.append("</section>")
        return
    fig_ = iou_curve(sweep)
    page.figures.append(fig_)
    page.parts.append(figure_html(fig_))
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
    fig_ = group_bars(rows, grouping, worst, title, name)
    page.figures.append(fig_)
    page.parts.append(figure_html(fig_))
    if worst:
        page.parts.append(f'<p class="worst">Worst by F1 among groups with enough support: <b>{esc(worst.get("group"))}</b> '
                          f'(F1 {value_span(f"worst.{grouping}.f1", worst.get("value"))}, {fmt(worst.get("support"))} fields).</p>')
    else:
        page.parts.append(note("No worst group: no group has enough support (min_support)."))
    table_rows = [[esc(r["group"]), fmt(r["support"]), fmt(r["precision"]) + ci_text([r["precision_ci_lower"], r["precision_ci_upper"]]),
                   fmt(r["recall"]) + ci_text([r["recall_ci_lower"], r["recall_ci_upper"]]),
                   fmt(r["f1"]) + ci_text([r["f1_ci_lower"], r["f1_ci_upper"]]), fmt(r["count_ratio"]),
                   "insufficient support" if r["insufficient_support"] else ""] for r in rows[:MAX_TABLE_ROWS]]
    page.parts.append(table(["group", "support", "precision", "recall", "F1", "count ratio", ""], table_rows))
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
                fig_ = tile_map(tiles, run.metrics, column, name, worst)
                page.figures.append(fig_)
                page.parts.append(figure_html(fig_))
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
        fig_ = pr_curves(m)
        page.figures.append(fig_)
        page.parts.append(figure_html(fig_))
    cal = m.get("calibration") or {}
    if cal.get("bins"):
        fig_ = reliability_diagram(cal)
        page.figures.append(fig_)
        page.parts.append(figure_html(fig_))
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
    page.parts.append("<h3>Paired comparison</h3>")
    paired = run.paired
    if not paired:
        page.parts.append(note("No paired comparison: this run directory has no paired.json (the reevaluate flow writes one when a previous run of the product exists)."))
    else:
        overall = paired.get("overall") or {}
        names = [k for k, e in overall.items() if isinstance(e, dict)]
        if names:
            fig_ = paired_deltas(paired, names)
            page.figures.append(fig_)
            page.parts.append(figure_html(fig_))
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
        rows = [[esc(s.label), with_ci(s.key, m.get(s.key), interval_of(m, s.key))
                 + ("" if s.better is None else f' <span class="better">({esc(s.better)} is better)</span>')]
                for s in family.shown if s.key in m]
        if not rows:
            continue
        anchor = f"family-{family.name}"
        page.parts.append(f'<section id="{esc(anchor)}" data-family="{esc(family.name)}"><h2>{esc(family.section)}</h2>'
                          + table(["metric", "value [95 % interval]"], rows, "family") + "</section>")
        drawn.append((anchor, family.section))
    return drawn
