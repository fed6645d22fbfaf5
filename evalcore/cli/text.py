"""What the commands print: the run's summary and a comparison's table and deltas.

Each registered family's lines come from its own declaration (:mod:`evalcore.present`,
:meth:`MetricFamily.summary_lines`), and whether a delta is better lower comes from
the family too; this module adds only the run's own lines (dropped rows, groups,
pixels, tiles and AOIs, the study area) and lays the text out. Numbers are formatted
by :func:`evalcore.present.number`, the formatter every output shares.
"""

from __future__ import annotations

from evalcore.metrics.registry import FAMILIES
from evalcore.present import LOWER, better_of, interval_text, number

__all__ = ["SUPPORT_LEGEND", "fmt", "format_comparison", "format_summary", "gate_lines", "level_lines", "study_lines", "unassigned_note"]


SUPPORT_LEGEND = "* fewer reference fields than --min-support: the group's numbers are shown but too uncertain to rank it"
"""The legend under the group tables when a group is marked ``*``."""


def fmt(value: object, digits: int = 3) -> str:
    """A number as every command prints it (three decimals unless told)."""
    return number(value, digits)


def _gate_number(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return str(int(value))
    return fmt(value)


def gate_lines(result: dict, *, not_passed_only: bool = False) -> list[str]:
    """The gates' table, one line per rule and group: state, rule, what was compared.

    A rule on a bound of the interval (``use: ci_lower``/``ci_upper``) shows the bound
    and the metric's value beside it (``recall ci_lower 0.810 (value 0.816) >= 0.75``),
    so the bound is never read as the value. A row below its rule's ``min_support``
    that does not block the decision (``below_support: report``) shows the state
    ``reported``.

    Parameters
    ----------
    result : dict
        The content of ``acceptance-gates.json`` (:func:`evalcore.gates.evaluate_gates`).
    not_passed_only : bool, default False
        Only the rules that failed or were not evaluable (reported rows included).
    """
    lines = []
    for rule in result["rules"]:
        if not_passed_only and rule["state"] == "pass":
            continue
        group = f"[{rule['group']}]" if rule.get("group") is not None else ""
        compared = _gate_number(rule["observed"])
        if rule.get("use", "value") != "value":
            compared = f"{rule['use']} {compared} (value {_gate_number(rule.get('value'))})"
        state = rule["state"] if rule.get("blocks", True) else "reported"
        lines.append(f"{state:<14} {rule['id']}{group}: {rule['metric']} {compared} {rule['op']} {rule['expected']}"
                     + (f" ({rule['reason']})" if rule.get("reason") else ""))
    return lines


def format_summary(metrics: dict[str, object]) -> str:
    """A short readable summary of a metrics dict (a few lines of text).

    Every registered family's lines come first (:meth:`MetricFamily.summary_lines`, in
    registry order), then the run's own lines: dropped rows, groups, pixels, levels.
    """
    lines = [line for family in FAMILIES for line in family.summary_lines(metrics)]
    lines.append(
        f"dropped: reference {metrics['count_reference_dropped']}, predicted {metrics['count_predicted_dropped']};  "
        f"repaired: reference {metrics['count_reference_repaired']}, predicted {metrics['count_predicted_repaired']};  "
        f"UTM zones {', '.join(str(c) for c in metrics['utm_epsg_codes'])}"
    )
    thin = False
    for group_key, title in (("per_stratum", "stratum"), ("per_size_class", "size class (ha)")):
        groups = metrics.get(group_key)
        if not groups:
            continue
        width = max(len(title), *(len(str(k)) for k in groups))
        lines.append(f"{title:<{width}}  {'n':>7}  {'precision':>9}  {'recall':>7}  {'F1':>6}  {'mean IoU':>8}")
        for name, g in groups.items():
            iou = fmt(g["iou_mean"]) if g["count_tp"] else "n/a"
            mark = "  *" if g.get("insufficient_support") else ""
            thin = thin or bool(mark)
            lines.append(
                f"{name:<{width}}  {g['count_reference']:>7}  {fmt(g['precision']):>9}  {fmt(g['recall']):>7}  "
                f"{fmt(g['f1']):>6}  {iou:>8}{mark}"
            )
    if thin:
        lines.append(SUPPORT_LEGEND)
    px = metrics.get("pixel")
    if px:
        micro, bf = px["micro"], px["boundary_f1"]
        lines.append(
            f"pixels at {px['gsd_m']:g} m: {px['count_pixels']} evaluated;  F1 (Dice) {fmt(micro['f1'])}  IoU {fmt(micro['iou'])}  "
            f"MCC {fmt(micro['mcc'])};  boundary F1 within {bf['tolerance_px']} px {fmt(bf['f1'])}"
        )
    lines.extend(level_lines(metrics))
    lines.extend(study_lines(metrics))
    note = unassigned_note(metrics)
    if note:
        lines.append(note)
    lines.extend(f"warning: {w['message']}" for w in metrics.get("warnings") or ())
    return "\n".join(lines)


def study_lines(metrics: dict[str, object]) -> list[str]:
    """The study area's and the leakage audit's line, when they were asked for."""
    lines = []
    study = metrics.get("study_area")
    if study:
        lines.append(
            f"study area ({study['rule']}, {fmt(study['area_km2'], 1)} km²): left out {metrics.get('count_reference_outside_study_area')} "
            f"reference fields and {metrics.get('count_predicted_outside_study_area')} predictions"
        )
    leak = metrics.get("leakage")
    if leak:
        lines.append(
            f"training area within {leak['buffer_m']:g} m: {leak['count_reference_within_buffer']} reference fields "
            f"({fmt(leak['fraction'])} of those audited) and {leak['count_predicted_within_buffer']} predictions"
            + ("; excluded from the evaluation" if leak.get("excluded") else "")
        )
    return lines


def _worst_text(worst: dict | None) -> str:
    if not worst or worst.get("f1") is None:
        return "none with enough support"
    w = worst["f1"]
    return f"{w['group']} (F1 {fmt(w['value'])}, {w['support']} fields)"


def level_lines(metrics: dict[str, object]) -> list[str]:
    """The tile and AOI summary and the worst groups, a line each."""
    lines = []
    tiles = metrics.get("tiles")
    if tiles:
        macro = tiles["macro"]["f1"]
        lines.append(
            f"tiles of {tiles['tile_km']:g} km: {tiles['count_tiles']} ({tiles['count_tiles_without_reference']} without reference fields);  "
            f"F1 micro {fmt(tiles['micro']['f1'])}, macro {fmt(macro['value'])} over {macro['n_units']} tiles, "
            f"p10 {fmt(tiles['quantiles']['f1']['p10'])};  worst tile {_worst_text(tiles['worst'])}"
        )
    aois = metrics.get("aois")
    if aois:
        macro = aois["macro"]["f1"]
        lines.append(
            f"AOIs: {aois['count_aois']} ({aois['count_aois_with_reference']} with reference fields);  F1 micro {fmt(aois['micro']['f1'])}, "
            f"macro {fmt(macro['value'])} over {macro['n_units']};  worst AOI {_worst_text(aois['worst'])}"
        )
    for grouping, worst in (metrics.get("worst") or {}).items():
        name = "stratum" if grouping == "per_stratum" else "size class"
        lines.append(f"worst {name}: {_worst_text(worst)}")
    return lines


def unassigned_note(metrics: dict[str, object]) -> str | None:
    """The sentence that explains a group precision above the overall one, where it can happen."""
    n = metrics.get("count_fp_unassigned", 0)
    if not n or not (metrics.get("per_stratum") or metrics.get("per_size_class")):
        return None
    return (
        f"note: {n} false positives overlap no reference field, so they belong to no stratum or size class: they lower "
        "the overall precision but no group's, and a group's precision can be above the overall one."
    )



def format_comparison(result: dict) -> str:
    """A few lines: the overall deltas with their paired intervals and the units where a model is worse."""
    if "table" in result:
        return _format_models(result)
    b = result["bootstrap"]
    lines = [f"{result['candidate']} against {result['incumbent']}: {b['n_resamples']} paired resamples of {b['n_units']} {b['unit']} units"]
    for metric, e in result["overall"].items():
        lines.append(f"  {metric:<10} {fmt(e['candidate'])} vs {fmt(e['incumbent'])}: delta {_delta_text(metric, e['delta'], e)}")
    lines.append(_worse_line(result["worse_units"], "the candidate"))
    return "\n".join(lines)


def _delta_text(metric: str, value: object, entry: dict) -> str:
    """``value [lower, upper]`` of a paired entry, marked where the family declares lower better."""
    text = fmt(value) + interval_text(entry.get("ci") or [None, None])
    return text + " (lower is better)" if better_of(FAMILIES, metric) == LOWER else text


def _worse_line(worse: list[dict], who: str) -> str:
    if not worse:
        return f"no stratum, size class, tile or AOI where {who} is significantly worse"
    shown = ", ".join(f"{w['level'][4:]} {w['unit']} ({w['metric']} {fmt(w['delta'])})" for w in worse[:8])
    return f"worse with the interval below zero: {len(worse)} (unit, metric) pairs: {shown}{' …' if len(worse) > 8 else ''}"


def _format_models(result: dict) -> str:
    """The table (a row per model, the metrics with their intervals) and each model's deltas against the baseline."""
    b = result["bootstrap"]
    metrics = result["metrics"]
    lines = [f"{len(result['table'])} models against one reference, baseline {result['baseline']}: "
             f"{b['n_resamples']} paired resamples of {b['n_units']} {b['unit']} units"]
    width = max(len(name) for name in result["table"])
    for name, row in result["table"].items():
        cells = []
        for m in metrics:
            e = row[m]
            cells.append(f"{m} {fmt(e['value'])}{interval_text(e.get('ci') or [None, None])}")
        worst = (row.get("worst_f1") or {}).get("per_stratum")
        if worst:
            cells.append(f"worst stratum {worst['group']} (F1 {fmt(worst['value'])})")
        lines.append(f"  {name:<{width}}  " + "  ".join(cells))
    for name, deltas in result["deltas"].items():
        parts = []
        for m in metrics:
            e = deltas["overall"].get(m)
            if e is not None:
                parts.append(f"{m} {_delta_text(m, e['delta'], e)}")
        lines.append(f"{name} − {result['baseline']}: " + "  ".join(parts))
        lines.append("  " + _worse_line(deltas["worse_units"], name))
    return "\n".join(lines)
