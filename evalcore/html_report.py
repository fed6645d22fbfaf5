"""``report.html``: one self-contained page per run directory, built from its files alone.

:func:`build_report` reads a run directory (``metrics.json`` and, when present,
``manifest.json``, ``acceptance-gates.json``, ``evaluation-contract.json``,
``error-taxonomy.json``, ``paired.json``, ``tiles.parquet``, ``fields/`` and
``predictions/``), draws the figures with matplotlib and geopandas, saves each as a PNG
in ``RUN_DIR/figures/`` and writes ``RUN_DIR/report.html`` with the same PNGs inlined as
``data:`` URIs, inline CSS and no script: the page opens offline and makes no network
request. It never recomputes a metric; every number on the page is read from the run's
files. What the page shows and how it samples for large runs: ``docs/report.md``.

Large runs stay fast because no figure draws every polygon: the tile maps draw one
square per reporting tile; the overlays read, from the per-field and per-prediction
parts, only the columns needed to choose their samples (a fixed number per error code,
drawn with a fixed seed), then only the rows of the reporting tiles around the chosen
windows (the parts' row-group statistics let pyarrow skip the other parts), and draw
only the polygons that intersect each small window.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalcore.errors import EvalInputError
from evalcore.io import atomic_path
from evalcore.metrics.registry import FAMILIES
from evalcore.present import interval_of, number

__all__ = [
    "build_report",
    "load_run",
    "RunFiles",
    "FIGURES",
    "group_rows",
    "worst_tile_rows",
    "REFERENCE_COLOUR",
    "PREDICTION_COLOUR",
]

_log = logging.getLogger(__name__)

REFERENCE_COLOUR = "#7b2cbf"
"""Reference boundaries in every overlay (purple, as in seed 003)."""
PREDICTION_COLOUR = "#f28e00"
"""Predicted boundaries in every overlay (orange, as in seed 003)."""

N_WORST_TILES = 5
"""Worst tiles labelled on the map and listed in the table (by F1, sufficient support)."""
N_WORST_TILE_OVERLAYS = 4
"""Worst tiles that get an overlay."""
SAMPLES_PER_CODE = 2
"""Overlays per error code; the objects are drawn with :data:`SAMPLE_SEED`."""
SAMPLE_SEED = 0
TILE_WINDOW_M = 2000.0
"""Side of a worst tile's overlay window, centred on the tile's errors (at most the tile's side)."""
OBJECT_WINDOW_MIN_M = 300.0
"""Smallest side of an error sample's window (otherwise three times the object's extent)."""
MAX_OVERLAY_POLYGONS = 2000
"""Per layer and window: beyond this, the polygons nearest the window's centre are drawn."""
MAX_BARS = 30
"""Groups drawn in a bar chart (the lowest F1 first); every group is in the table up to :data:`MAX_TABLE_ROWS`."""
MAX_TABLE_ROWS = 200
MAX_MAP_PANELS = 6
"""Panels of the tile maps: regions of neighbouring tiles, each in its UTM zone (those with a worst tile first, then the largest)."""
MAP_REGION_GAP = 2
"""Tiles at most this many empty tiles apart are drawn in one panel."""
DPI = 110

# Error codes of the taxonomy (SPEC 6.8) sampled for overlays: (code, table, flag column or None, what it means).
ERROR_SAMPLES: tuple[tuple[str, str, str | None, str], ...] = (
    ("M-FN-MISSED", "fields", None, "reference field that no prediction overlaps"),
    ("M-FN-LOCALISATION", "fields", None, "reference field overlapped but not matched"),
    ("M-FP-LOCALISATION", "predictions", None, "prediction overlapping a reference field below the IoU threshold"),
    ("M-FP-DUPLICATE", "predictions", None, "prediction whose largest-overlap reference is matched by another"),
    ("M-FP-BACKGROUND", "predictions", None, "prediction overlapping no reference field"),
    ("merge", "predictions", "merge", "prediction covering two or more reference fields"),
    ("split", "fields", "split", "reference field holding two or more predictions"),
)

FIGURES: tuple[tuple[str, str], ...] = (
    ("iou_curve", "F1, precision and recall against the IoU threshold"),
    ("per_stratum", "F1 per stratum"),
    ("per_size_class", "F1 per size class"),
    ("tile_f1_map", "F1 per reporting tile"),
    ("tile_count_ratio_map", "Count ratio (predicted / reference) per reporting tile"),
    ("pr_curve", "Precision-recall curves"),
    ("reliability", "Reliability diagram"),
    ("overlay_worst_tiles", "Overlays of the worst tiles"),
    ("overlay_errors", "Overlays of a sample of each error code"),
    ("paired", "Paired comparison: deltas with their paired intervals"),
)
"""Every figure the report can draw, as (name, title); the PNG is ``figures/<name>.png``."""
_TITLES = dict(FIGURES)


@dataclass(frozen=True)
class RunFiles:
    """The parsed JSON files of a run directory (None where a file is absent)."""

    run_dir: Path
    metrics: dict
    manifest: dict | None = None
    gates: dict | None = None
    contract: dict | None = None
    taxonomy: dict | None = None
    paired: dict | None = None
    status: dict | None = None


@dataclass
class _Figure:
    name: str
    png: bytes
    caption: str


@dataclass
class _Page:
    """What the sections add: the HTML parts and the figures drawn."""

    parts: list[str] = field(default_factory=list)
    figures: list[_Figure] = field(default_factory=list)


# ----------------------------------------------------------------------------- reading


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EvalInputError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise EvalInputError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from exc


def _optional_json(path: Path) -> dict | None:
    if not path.is_file():
        return None
    value = _read_json(path)
    if not isinstance(value, dict):
        raise EvalInputError(f"{path}: expected a JSON object, found {type(value).__name__}")
    return value


def load_run(run_dir: str | Path) -> RunFiles:
    """Read the JSON files of a run directory.

    Raises
    ------
    EvalInputError
        ``run_dir`` has no ``metrics.json`` (not a run directory), or a file is not valid
        JSON, or ``metrics.json`` is not an evalcore summary; the message names the file.
    """
    root = Path(run_dir)
    metrics_path = root / "metrics.json"
    if not metrics_path.is_file():
        raise EvalInputError(f"{root}: not a run directory (no metrics.json); give the output directory of `evalcore run`")
    metrics = _read_json(metrics_path)
    if not isinstance(metrics, dict) or "count_reference" not in metrics or "f1" not in metrics:
        raise EvalInputError(f"{metrics_path}: not an evalcore summary (no 'count_reference' and 'f1' keys)")
    return RunFiles(
        run_dir=root,
        metrics=metrics,
        manifest=_optional_json(root / "manifest.json"),
        gates=_optional_json(root / "acceptance-gates.json"),
        contract=_optional_json(root / "evaluation-contract.json"),
        taxonomy=_optional_json(root / "error-taxonomy.json"),
        paired=_optional_json(root / "paired.json"),
        status=_optional_json(root / "status.json"),
    )


def _read_parquet(path: Path, **kwargs: Any) -> Any:
    """A GeoParquet file or directory of parts as a GeoDataFrame; EvalInputError naming it when unreadable."""
    import geopandas

    try:
        return geopandas.read_parquet(path, **kwargs)
    except Exception as exc:  # pyarrow and geopandas raise many kinds; the message names the file
        raise EvalInputError(f"{path}: cannot be read as GeoParquet ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc


def _read_columns(path: Path, wanted: tuple[str, ...]) -> Any:
    """The columns of ``wanted`` that a parquet file or directory holds, as a pandas DataFrame (no geometry)."""
    import pyarrow.dataset as ds

    try:
        dataset = ds.dataset(path, format="parquet")
        names = [c for c in wanted if c in dataset.schema.names]
        return dataset.to_table(columns=names).to_pandas()
    except Exception as exc:
        raise EvalInputError(f"{path}: cannot be read as parquet ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc


# ----------------------------------------------------------------------------- formatting


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _fmt(value: object, digits: int = 3) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return number(value, digits, "–", thousands=True)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _nan(value: object) -> float:
    """A finite number as float, anything else as NaN (for arrays to plot)."""
    v = _finite(value)
    return np.nan if v is None else v


def _raw(value: object) -> str:
    """The exact value for ``data-value``: ``repr`` of a float round-trips, ``null`` when undefined."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    v = _finite(value)
    return "null" if v is None else repr(v)


def _value(key: str, value: object, digits: int = 3) -> str:
    """A number as shown, with its exact value in ``data-value`` (the tests parse it back)."""
    return f'<span class="v" data-key="{_esc(key)}" data-value="{_esc(_raw(value))}">{_esc(_fmt(value, digits))}</span>'


def _ci_text(ci: object) -> str:
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or _finite(ci[0]) is None or _finite(ci[1]) is None:
        return ""
    return f" [{_fmt(float(ci[0]))}, {_fmt(float(ci[1]))}]"


def _with_ci(key: str, value: object, ci: object) -> str:
    text = _value(key, value)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and _finite(ci[0]) is not None and _finite(ci[1]) is not None:
        text += f' <span class="ci">[{_value(key + ".ci_lower", ci[0])}, {_value(key + ".ci_upper", ci[1])}]</span>'
    return text


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _note(text: str) -> str:
    return f'<p class="absent">{_esc(text)}</p>'


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _figure_html(fig: _Figure) -> str:
    data = base64.b64encode(fig.png).decode("ascii")
    title = _TITLES.get(fig.name, fig.name)
    return (
        f'<figure data-figure="{_esc(fig.name)}"><img src="data:image/png;base64,{data}" alt="{_esc(title)}">'
        f"<figcaption>{_esc(fig.caption)}</figcaption></figure>"
    )


def _new_figure(width_in: float, height_in: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


# ----------------------------------------------------------------------------- sections


def _headline(run: RunFiles) -> str:
    m = run.metrics
    boot = m.get("bootstrap") or {}
    rows = [
        ["Precision", _with_ci("precision", m.get("precision"), interval_of(m, "precision"))],
        ["Recall", _with_ci("recall", m.get("recall"), interval_of(m, "recall"))],
        ["F1", _with_ci("f1", m.get("f1"), interval_of(m, "f1"))],
        ["Mean IoU of matches", _with_ci("iou_mean", m.get("iou_mean"), interval_of(m, "iou_mean"))],
    ]
    for key, label in (("ap50", "AP at IoU 0.5"), ("ap75", "AP at IoU 0.75"), ("ap50_95", "AP 0.5:0.95")):
        if key in m:
            rows.append([label, _with_ci(key, m.get(key), interval_of(m, key))])
    for key, label in (("boundary_f1", "Boundary F1 (tolerance %s m)" % _fmt(m.get("boundary_tolerance_m"), 1)), ("count_ratio", "Count ratio (predicted / reference)")):
        if key in m:
            rows.append([label, _with_ci(key, m.get(key), interval_of(m, key))])
    counts = [
        ["Reference fields", _value("count_reference", m.get("count_reference"))],
        ["Predictions", _value("count_predicted", m.get("count_predicted"))],
        ["True positives", _value("count_tp", m.get("count_tp"))],
        ["False positives", _value("count_fp", m.get("count_fp"))],
        ["False negatives", _value("count_fn", m.get("count_fn"))],
    ]
    for key, label in (("count_merges", "Merging predictions"), ("count_splits", "Split reference fields"),
                       ("count_reference_dropped", "Reference rows dropped"), ("count_predicted_dropped", "Predicted rows dropped")):
        if key in m:
            counts.append([label, _value(key, m.get(key))])
    if boot:
        interval = (
            f"95 % percentile intervals from {_value('bootstrap.n_resamples', boot.get('n_resamples'))} bootstrap resamples; "
            f'unit <span class="v" data-key="bootstrap.unit" data-value="{_esc(boot.get("unit", "field"))}">{_esc(boot.get("unit", "field"))}</span>'
            f" ({_esc(boot.get('resampling', ''))}; {_fmt(boot.get('n_units'))} units, seed {_fmt(boot.get('seed'))})"
        )
    else:
        interval = "No intervals: the run had no bootstrap resamples (--bootstrap 0)."
    out = [
        '<section id="headline"><h2>Headline</h2>',
        f'<p class="threshold">Matching: {_esc(m.get("matching", "one_to_one"))} at IoU ≥ {_value("iou_threshold", m.get("iou_threshold"), 2)}.</p>',
        '<div class="cols">',
        _table(["metric", "value [95 % interval]"], rows, "headline"),
        _table(["count", "n"], counts, "counts"),
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
        return "<h3>Acceptance gates</h3>" + _note(f"No acceptance gates ran for this run ({why}; give a gates file with `evalcore run --gates FILE`, or check later with `evalcore gate RUN_DIR FILE`).")
    decision = str(g.get("decision", "unknown"))
    counts = g.get("counts") or {}
    rules = g.get("rules") or []
    if not counts and rules:
        for r in rules:
            counts[r.get("state")] = counts.get(r.get("state"), 0) + 1
    summary = ", ".join(f"{_fmt(v)} {_esc(k)}" for k, v in counts.items())
    text = (f'<h3>Acceptance gates</h3><p class="gate gate-{_esc(decision)}">Decision: '
            f'<span class="v" data-key="gates.decision" data-value="{_esc(decision)}">{_esc(decision)}</span> ({summary})</p>')
    shown = [r for r in rules if r.get("state") != "pass"][:MAX_TABLE_ROWS]
    if shown:
        text += _table(
            ["rule", "metric", "group", "observed", "expected", "support", "state", "reason"],
            [[_esc(r.get("id")), _esc(r.get("metric")), _esc(r.get("group") or "–"), _fmt(r.get("observed")),
              f"{_esc(r.get('op', ''))} {_fmt(r.get('expected'))}", _fmt(r.get("support")), _esc(r.get("state")), _esc(r.get("reason") or "")]
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
        return "<h3>Errors by kind</h3>" + _note("No error taxonomy: the run directory has neither error-taxonomy.json nor the count_fp_*/count_fn_* keys.")
    codes = [c for c in _TAXONOMY_ORDER if c in counts] + [c for c in counts if c not in _TAXONOMY_ORDER]
    rows = [[_esc(c), _value(f"taxonomy.{c}", counts[c])] for c in codes if not isinstance(counts[c], (dict, list))]
    return f"<h3>Errors by kind</h3><p>From {_esc(source)}.</p>" + _table(["code", "count"], rows, "taxonomy")


def _identity_html(run: RunFiles) -> str:
    rows: list[list[str]] = []
    man = run.manifest or {}
    for role, entry in (man.get("inputs") or {}).items():
        if isinstance(entry, dict):
            rows.append([f"{_esc(role)} input", f"<code>{_esc(entry.get('path'))}</code>" + (f" (layer {_esc(entry.get('layer'))})" if entry.get("layer") else "")
                         + f"<br>sha256 <code>{_esc(entry.get('sha256'))}</code>, {_fmt(entry.get('rows'))} rows, {_fmt(entry.get('kept'))} kept"])
    contract = run.contract or {}
    for key, value in contract.items():
        if isinstance(value, (str, int, float, bool)) or value is None:
            rows.append([_esc(key.replace("_", " ")), f"<code>{_esc(value)}</code>"])
        elif isinstance(value, dict) and key in ("labels", "evaluator") and all(isinstance(v, (str, int, float, bool)) or v is None for v in value.values()):
            rows.append([_esc(key), ", ".join(f"{_esc(k)}: <code>{_esc(v)}</code>" for k, v in value.items())])
    versions = man.get("versions") or {}
    if versions and not any(r[0] == "evaluator version" for r in rows):
        rows.append(["evaluator", f"evalcore {_esc(versions.get('evalcore', '?'))} (Python {_esc(versions.get('python', '?'))}, prefect {_esc(versions.get('prefect', '?'))})"])
    for key in ("started", "finished", "status"):
        if key in man:
            rows.append([key, _esc(man[key])])
    if man.get("dask_dashboard"):
        rows.append(["Dask dashboard (live during the run only)", f"<code>{_esc(man['dask_dashboard'])}</code>"])
    params = man.get("parameters") or {}
    shown = {k: v for k, v in params.items() if v not in (None, "", [], {}) and k not in ("predicted", "reference", "output_dir", "iou_sweep_thresholds")}
    if shown:
        rows.append(["parameters", "; ".join(f"{_esc(k)} = <code>{_esc(v)}</code>" for k, v in shown.items())])
    rows.append(["run directory", f"<code>{_esc(run.run_dir.resolve())}</code>"])
    if run.contract is None:
        rows.append(["evaluation contract", "absent (no evaluation-contract.json in this run directory)"])
    return "<h3>Input and run identity</h3>" + _table(["", ""], rows, "identity")


def _iou_section(run: RunFiles, page: _Page) -> None:
    sweep = run.metrics.get("iou_sweep")
    page.parts.append('<section id="iou-curve"><h2>IoU-threshold curve</h2>')
    if not sweep:
        page.parts.append(_note("No IoU sweep: the run was made with --iou-sweep-thresholds none."))
        page.parts.append("</section>")
        return
    t = np.array([_nan(e.get("iou_threshold")) for e in sweep])
    fig = _new_figure(6.4, 3.4)
    ax = fig.add_subplot()
    colours = {"f1": "#1b1b1b", "precision": "#1f77b4", "recall": "#d62728"}
    has_ci = False
    for key, colour in colours.items():
        y = np.array([_nan(e.get(key)) for e in sweep])
        ax.plot(t, y, marker="o", ms=3.5, color=colour, lw=2.0 if key == "f1" else 1.3, label=key if key != "f1" else "F1")
        lo = np.array([_nan((interval_of(e, key) or [None, None])[0]) for e in sweep])
        hi = np.array([_nan((interval_of(e, key) or [None, None])[1]) for e in sweep])
        if np.isfinite(lo).any():
            has_ci = True
            ax.fill_between(t, lo, hi, color=colour, alpha=0.15, lw=0)
    ax.set_xlabel("IoU threshold")
    ax.set_ylabel("value")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(t)
    ax.set_xticklabels([f"{v:.2f}" for v in t], fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", frameon=False)
    caption = "Object F1, precision and recall when a match needs IoU ≥ t" + (" (bands: 95 % bootstrap intervals)." if has_ci else " (no intervals: no bootstrap).")
    fig_ = _Figure("iou_curve", _png(fig), caption)
    page.figures.append(fig_)
    page.parts.append(_figure_html(fig_))
    rows = [[f"{_fmt(e.get('iou_threshold'), 2)}", _fmt(e.get("precision")) + _ci_text(interval_of(e, "precision")),
             _fmt(e.get("recall")) + _ci_text(interval_of(e, "recall")), _fmt(e.get("f1")) + _ci_text(interval_of(e, "f1")),
             _fmt(e.get("count_tp")), _fmt(e.get("count_fp")), _fmt(e.get("count_fn"))] for e in sweep]
    page.parts.append("<details><summary>Values</summary>" + _table(["IoU ≥", "precision", "recall", "F1", "TP", "FP", "FN"], rows) + "</details>")
    f50, f75 = (_finite(e.get("f1")) for e in (sweep[0], sweep[min(5, len(sweep) - 1)]))
    if f50 is not None and f75 is not None:
        page.parts.append(f"<p>F1 falls from {_fmt(f50)} at IoU {_fmt(sweep[0].get('iou_threshold'), 2)} to {_fmt(f75)} at "
                          f"{_fmt(sweep[min(5, len(sweep) - 1)].get('iou_threshold'), 2)}: a steep fall means fields are found but delineated loosely.</p>")
    page.parts.append("</section>")


def group_rows(metrics: dict, grouping: str) -> list[dict]:
    """One row per group of ``per_stratum`` or ``per_size_class``: the group, its support, P/R/F1 with intervals.

    Rows come in the summary's order; values are ``None`` where undefined.
    """
    out = []
    for key, g in (metrics.get(grouping) or {}).items():
        ci = g.get("ci") or {}
        row = {"group": key, "support": g.get("support", g.get("n")), "insufficient_support": bool(g.get("insufficient_support", False))}
        for m in ("precision", "recall", "f1"):
            row[m] = _finite(g.get(m))
            lo_hi = ci.get(m) if isinstance(ci.get(m), (list, tuple)) else [None, None]
            row[f"{m}_ci_lower"], row[f"{m}_ci_upper"] = _finite(lo_hi[0]), _finite(lo_hi[1])
        row["count_ratio"] = _finite(g.get("count_ratio"))
        out.append(row)
    return out


def _group_section(run: RunFiles, page: _Page, grouping: str, title: str, name: str, absent: str) -> None:
    rows = group_rows(run.metrics, grouping)
    page.parts.append(f'<section id="{name.replace("_", "-")}"><h2>{_esc(title)}</h2>')
    if not rows:
        page.parts.append(_note(absent))
        page.parts.append("</section>")
        return
    worst = ((run.metrics.get("worst") or {}).get(grouping) or {}).get("f1")
    if grouping == "per_stratum":
        shown = sorted(rows, key=lambda r: (r["f1"] is None, r["f1"] if r["f1"] is not None else 0.0, str(r["group"])))[:MAX_BARS]
    else:
        shown = rows[:MAX_BARS]
    fig = _new_figure(6.4, 0.9 + 0.28 * len(shown))
    ax = fig.add_subplot()
    y = np.arange(len(shown))[::-1]
    f1 = np.array([_nan(r["f1"]) for r in shown])
    colours = ["#bdbdbd" if r["insufficient_support"] else "#4a7ab7" for r in shown]
    bars = ax.barh(y, np.nan_to_num(f1), color=colours, height=0.7)
    for bar, r in zip(bars, shown):
        if r["insufficient_support"]:
            bar.set_hatch("///")
            bar.set_edgecolor("#7f7f7f")
        if worst and str(r["group"]) == str(worst.get("group")):
            bar.set_edgecolor("#c00000")
            bar.set_linewidth(2.0)
    lo = np.array([_nan(r["f1_ci_lower"]) for r in shown])
    hi = np.array([_nan(r["f1_ci_upper"]) for r in shown])
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(f1)
    if ok.any():
        ax.errorbar(f1[ok], y[ok], xerr=[f1[ok] - lo[ok], hi[ok] - f1[ok]], fmt="none", ecolor="#1b1b1b", elinewidth=1, capsize=2.5)
    for yi, r, v in zip(y, shown, f1):
        label = f"n={_fmt(r['support'])}" + (" (insufficient support)" if r["insufficient_support"] else "")
        ax.text(1.01, yi, label, va="center", fontsize=7.5, transform=ax.get_yaxis_transform())
        if not np.isfinite(v):
            ax.text(0.01, yi, "F1 undefined", va="center", fontsize=7.5)
    ax.set_yticks(y)
    ax.set_yticklabels([str(r["group"]) for r in shown], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("F1 (whiskers: 95 % bootstrap interval)")
    ax.grid(axis="x", alpha=0.3)
    caption = f"F1 {title.lower().replace('metrics ', '')}: grey hatched bars have fewer reference fields than min_support"
    if worst:
        caption += f"; the worst group (red outline) is {worst.get('group')} (F1 {_fmt(worst.get('value'))}, {_fmt(worst.get('support'))} fields)"
    if len(rows) > len(shown):
        caption += f"; the {len(shown)} of {len(rows)} groups with the lowest F1 are drawn, all are in the table"
    fig_ = _Figure(name, _png(fig), caption + ".")
    page.figures.append(fig_)
    page.parts.append(_figure_html(fig_))
    if worst:
        page.parts.append(f'<p class="worst">Worst by F1 among groups with enough support: <b>{_esc(worst.get("group"))}</b> '
                          f'(F1 {_value(f"worst.{grouping}.f1", worst.get("value"))}, {_fmt(worst.get("support"))} fields).</p>')
    else:
        page.parts.append(_note("No worst group: no group has enough support (min_support)."))
    table_rows = [[_esc(r["group"]), _fmt(r["support"]), _fmt(r["precision"]) + _ci_text([r["precision_ci_lower"], r["precision_ci_upper"]]),
                   _fmt(r["recall"]) + _ci_text([r["recall_ci_lower"], r["recall_ci_upper"]]),
                   _fmt(r["f1"]) + _ci_text([r["f1_ci_lower"], r["f1_ci_upper"]]), _fmt(r["count_ratio"]),
                   "insufficient support" if r["insufficient_support"] else ""] for r in rows[:MAX_TABLE_ROWS]]
    page.parts.append(_table(["group", "support", "precision", "recall", "F1", "count ratio", ""], table_rows))
    if len(rows) > MAX_TABLE_ROWS:
        page.parts.append(_note(f"The first {MAX_TABLE_ROWS} of {len(rows)} groups are listed; metrics.json has them all."))
    page.parts.append("</section>")


def worst_tile_rows(tiles: Any, n: int = N_WORST_TILES) -> list[dict]:
    """The ``n`` tiles with the lowest F1 among those with sufficient support (ties by key), as dicts.

    ``tiles`` is the tile table (``tiles.parquet``); each row has ``tile`` (``epsg_x_y``,
    the key of ``metrics.json``'s ``tiles.worst``) and the tile's counts and rates.
    """
    if tiles is None or len(tiles) == 0 or "f1" not in tiles:
        return []
    ok = tiles[~tiles["insufficient_support"].astype(bool) & tiles["f1"].notna()] if "insufficient_support" in tiles else tiles[tiles["f1"].notna()]
    ok = ok.sort_values(["f1", "epsg", "tile_x", "tile_y"], kind="mergesort").head(n)
    rows = []
    for _, t in ok.iterrows():
        row = {"tile": f"{int(t['epsg'])}_{int(t['tile_x'])}_{int(t['tile_y'])}"}
        for c in ("count_reference", "count_predicted", "count_tp", "count_fp", "count_fn", "support"):
            if c in t:
                row[c] = int(t[c])
        for c in ("precision", "recall", "f1", "count_ratio", "f1_ci_lower", "f1_ci_upper"):
            if c in t:
                row[c] = _finite(t[c])
        rows.append(row)
    return rows


def _tile_map(tiles: Any, metrics: dict, column: str, name: str, worst: list[dict]) -> _Figure | None:
    import geopandas
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize, TwoSlopeNorm
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    values = tiles[column].to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    if column == "f1":
        cmap = colormaps["RdYlGn"]
        lo = math.floor(float(np.quantile(finite, 0.02)) * 20) / 20 if len(finite) else 0.0
        norm = Normalize(vmin=min(lo, 0.95), vmax=1.0)
    else:
        cmap = colormaps["PuOr"]
        spread = max(0.1, float(np.nanmax(np.abs(np.log2(finite[finite > 0])))) if (finite > 0).any() else 0.1)
        spread = min(spread, 2.0)
        norm = TwoSlopeNorm(vmin=2 ** -spread, vcenter=1.0, vmax=2 ** spread)
    regions, n_regions = _tile_regions(tiles, {w["tile"] for w in worst})
    n_cols = min(3, len(regions))
    n_rows = math.ceil(len(regions) / n_cols)
    fig = _new_figure(3.3 * n_cols + 0.8, 3.1 * n_rows + 0.4)
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    worst_keys = {w["tile"]: i + 1 for i, w in enumerate(worst)}
    keys = _tile_keys(tiles)
    tile_m = _tile_side_m(metrics)
    for ax, (zone, rows) in zip(axes, regions):
        part = geopandas.GeoDataFrame(tiles.iloc[rows], geometry=tiles.geometry.iloc[rows]).to_crs(f"EPSG:{zone}")
        vals = values[rows]
        colours = [cmap(norm(v)) if np.isfinite(v) else (0.85, 0.85, 0.85, 1.0) for v in vals]
        part.plot(ax=ax, color=colours, edgecolor="white", linewidth=0.3)
        thin = part["insufficient_support"].astype(bool).to_numpy() if "insufficient_support" in part else np.zeros(len(part), bool)
        if thin.any():
            part[thin].plot(ax=ax, facecolor="none", edgecolor="#5a5a5a", hatch="////", linewidth=0.0)
        inside = part.geometry.representative_point()  # the square is clipped to the zone's band: a point inside what is drawn
        cx, cy = inside.x.to_numpy(), inside.y.to_numpy()
        free = ((part["count_reference"] == 0) & (part["count_fp"] > 0)).to_numpy()
        if free.any():
            ax.scatter(cx[free], cy[free], marker="x", color="black", s=16, linewidths=1.1, zorder=3)
        for key, x, y in zip(keys[rows], cx, cy):
            if key in worst_keys:
                ax.annotate(str(worst_keys[key]), (x, y), fontsize=7.5, fontweight="bold", ha="center", va="center", zorder=4,
                            bbox={"boxstyle": "circle,pad=0.15", "fc": "white", "ec": "black", "lw": 0.8})
        x0, y0 = part["tile_x"].min() * tile_m, part["tile_y"].min() * tile_m
        x1, y1 = (part["tile_x"].max() + 1) * tile_m, (part["tile_y"].max() + 1) * tile_m
        pad = max(x1 - x0, y1 - y0) * 0.06 + tile_m * 0.3
        ax.set_xlim(x0 - pad, x1 + pad)
        ax.set_ylim(y0 - pad, y1 + pad)
        lon, lat = tiles.geometry.iloc[rows].union_all().centroid.coords[0]
        ax.set_title(f"UTM {zone % 100}{'N' if zone < 32700 else 'S'} · {abs(lat):.1f}°{'N' if lat >= 0 else 'S'} {abs(lon):.1f}°{'E' if lon >= 0 else 'W'} · {len(rows)} tile{'s' if len(rows) != 1 else ''}", fontsize=8)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("")
        ax.set_ylabel("")
        _scale_bar(ax)
    for ax in axes[len(regions):]:
        ax.set_axis_off()
    label = "F1" if column == "f1" else "count ratio (predicted / reference)"
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes[: len(regions)]), shrink=0.8, label=label)
    handles = [Patch(facecolor="#d9d9d9", label="undefined"), Patch(facecolor="white", edgecolor="#5a5a5a", hatch="////", label="insufficient support"),
               Line2D([], [], marker="x", color="black", ls="none", label="no reference, false positives"),
               Line2D([], [], marker="o", mfc="white", mec="black", ls="none", label="worst tiles by F1 (1 = worst)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=7.5, frameon=False)
    caption = (f"{label} of each {_fmt(tile_m / 1000, 0)} km reporting tile, one panel per region of neighbouring tiles, each in its UTM zone"
               + (f" (the {len(regions)} of {n_regions} regions with the most tiles or a worst tile are drawn)" if n_regions > len(regions) else "")
               + "; × marks tiles without reference fields that hold false positives; numbers label the worst tiles (1 = worst).")
    return _Figure(name, _png(fig), caption)


def _tile_keys(tiles: Any) -> np.ndarray:
    """``epsg_x_y`` per row of the tile table, the keys of ``metrics.json``."""
    return (tiles["epsg"].astype(int).astype(str) + "_" + tiles["tile_x"].astype(int).astype(str) + "_" + tiles["tile_y"].astype(int).astype(str)).to_numpy()


def _tile_regions(tiles: Any, must: set[str]) -> tuple[list[tuple[int, np.ndarray]], int]:
    """Regions of neighbouring tiles (at most ``MAP_REGION_GAP`` empty tiles apart, within one zone) as (zone, row positions).

    The regions holding a worst tile come first, then the largest, up to ``MAX_MAP_PANELS``;
    the second value is the number of regions there are.
    """
    from scipy import ndimage

    keys = _tile_keys(tiles)
    found: list[tuple[int, np.ndarray]] = []
    epsg = tiles["epsg"].to_numpy(dtype=np.int64)
    tx, ty = tiles["tile_x"].to_numpy(dtype=np.int64), tiles["tile_y"].to_numpy(dtype=np.int64)
    for zone in np.unique(epsg):
        rows = np.flatnonzero(epsg == zone)
        x, y = tx[rows] - tx[rows].min(), ty[rows] - ty[rows].min()
        grid = np.zeros((int(x.max()) + 1, int(y.max()) + 1), dtype=bool)
        grid[x, y] = True
        grown = ndimage.binary_dilation(grid, structure=np.ones((3, 3), bool), iterations=MAP_REGION_GAP) if MAP_REGION_GAP else grid
        labels, _ = ndimage.label(grown, structure=np.ones((3, 3), bool))
        of_tile = labels[x, y]
        for lab in np.unique(of_tile):
            found.append((int(zone), rows[of_tile == lab]))
    ranked = sorted(found, key=lambda zr: (not any(k in must for k in keys[zr[1]]), -len(zr[1]), zr[0], int(tx[zr[1]].min())))
    chosen = sorted(ranked[:MAX_MAP_PANELS], key=lambda zr: (zr[0], int(tx[zr[1]].min()), int(ty[zr[1]].min())))
    return chosen, len(found)


def _tiles_section(run: RunFiles, page: _Page) -> tuple[Any, list[dict]]:
    path = run.run_dir / "tiles.parquet"
    page.parts.append('<section id="tiles"><h2>Where it fails: reporting tiles and AOIs</h2>')
    tiles = None
    worst: list[dict] = []
    block = run.metrics.get("tiles") or {}
    if path.is_file():
        tiles = _read_parquet(path)
        needed = {"epsg", "tile_x", "tile_y", "f1", "count_reference", "count_fp"}
        if not needed <= set(tiles.columns):
            raise EvalInputError(f"{path}: not a tile table (missing columns {sorted(needed - set(tiles.columns))})")
    if block:
        page.parts.append(
            f"<p>{_fmt(block.get('count_tiles'))} tiles of {_fmt(block.get('tile_km'), 0)} km, {_fmt(block.get('count_tiles_without_reference'))} without reference fields "
            f"({_fmt(block.get('fp_per_km2_reference_free'))} false positives per km² there); micro F1 {_fmt((block.get('micro') or {}).get('f1'))}, "
            f"macro F1 {_fmt(((block.get('macro') or {}).get('f1') or {}).get('value'))}; {_fmt(100 * (block.get('fraction_tiles_with_fn') or 0), 0)} % of tiles with "
            f"reference fields have a false negative.</p>")
    if tiles is None or len(tiles) == 0:
        page.parts.append(_note("No tile map: the run directory has no tiles.parquet (or it is empty)."))
    else:
        worst = worst_tile_rows(tiles)
        for column, name in (("f1", "tile_f1_map"), ("count_ratio", "tile_count_ratio_map")):
            if column in tiles and np.isfinite(tiles[column].to_numpy(dtype=float)).any():
                fig_ = _tile_map(tiles, run.metrics, column, name, worst)
                page.figures.append(fig_)
                page.parts.append(_figure_html(fig_))
        if worst:
            page.parts.append("<h3>Worst tiles</h3>" + _table(
                ["#", "tile (EPSG_x_y)", "support", "precision", "recall", "F1", "count ratio", "FP", "FN"],
                [[str(i + 1), f"<code>{_esc(w['tile'])}</code>", _fmt(w.get("support")), _fmt(w.get("precision")), _fmt(w.get("recall")),
                  _fmt(w.get("f1")) + _ci_text([w.get("f1_ci_lower"), w.get("f1_ci_upper")]), _fmt(w.get("count_ratio")), _fmt(w.get("count_fp")), _fmt(w.get("count_fn"))]
                 for i, w in enumerate(worst)], "worst-tiles"))
        else:
            page.parts.append(_note("No worst tile: no tile has enough support (min_support)."))
    aois = run.metrics.get("aois")
    page.parts.append("<h3>Per AOI</h3>")
    if not aois:
        page.parts.append(_note("No AOI table: the run was made without an AOI layer (--aoi)."))
    else:
        per = aois.get("per_aoi") or {}
        order = sorted(per.items(), key=lambda kv: (_finite(kv[1].get("f1")) is None, _finite(kv[1].get("f1")) or 0.0, kv[0]))
        worst_aoi = (aois.get("worst") or {}).get("f1")
        if worst_aoi:
            page.parts.append(f'<p class="worst">Worst AOI by F1: <b>{_esc(worst_aoi.get("group"))}</b> (F1 {_fmt(worst_aoi.get("value"))}, {_fmt(worst_aoi.get("support"))} fields).</p>')
        rows = [[_esc(k), _fmt(g.get("support")), _fmt(g.get("precision")) + _ci_text(interval_of(g, "precision")),
                 _fmt(g.get("recall")) + _ci_text(interval_of(g, "recall")), _fmt(g.get("f1")) + _ci_text(interval_of(g, "f1")),
                 _fmt(g.get("count_ratio")), _fmt(g.get("count_fp")), _fmt(g.get("count_fn")), "insufficient support" if g.get("insufficient_support") else ""]
                for k, g in order[:MAX_TABLE_ROWS]]
        page.parts.append(_table(["AOI", "support", "precision", "recall", "F1", "count ratio", "FP", "FN", ""], rows, "aois"))
    page.parts.append("</section>")
    return tiles, worst


def _scores_section(run: RunFiles, page: _Page) -> None:
    m = run.metrics
    page.parts.append('<section id="scores"><h2>Confidence scores: precision-recall and calibration</h2>')
    if "pr_curve" not in m and "calibration" not in m:
        page.parts.append(_note("No score figures: the predictions had no confidence score (the run was made without --score-column)."))
        page.parts.append("</section>")
        return
    curves = m.get("pr_curve") or {}
    if curves:
        fig = _new_figure(4.6, 3.6)
        ax = fig.add_subplot()
        best = m.get("best_f1") or {}
        for (key, curve), colour in zip(curves.items(), ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")):
            ap = m.get("ap50") if key == "0.5" else m.get("ap75") if key == "0.75" else None
            ax.plot(curve.get("recall") or [], curve.get("precision") or [], color=colour, lw=1.5,
                    label=f"IoU {key}" + (f" (AP {_fmt(ap)})" if ap is not None else ""))
            b = best.get(key) or {}
            if _finite(b.get("recall")) is not None:
                ax.plot([b["recall"]], [b["precision"]], "o", color=colour, ms=6, mec="black")
                ax.annotate(f"best F1 {_fmt(b.get('f1'))} at score {_fmt(b.get('score'))}", (b["recall"], b["precision"]), fontsize=7,
                            xytext=(-8, -14 if key == "0.5" else -26), textcoords="offset points", ha="right")
        ax.set_xlabel("recall")
        ax.set_ylabel("precision")
        ax.set_xlim(0, 1.01)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left", frameon=False, fontsize=8)
        fig_ = _Figure("pr_curve", _png(fig), "Precision against recall as the score threshold falls, at IoU 0.5 and 0.75; dots: the score that maximises F1.")
        page.figures.append(fig_)
        page.parts.append(_figure_html(fig_))
    cal = m.get("calibration") or {}
    bins = cal.get("bins") or []
    if bins:
        fig = _new_figure(4.6, 4.2)
        ax, axn = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
        centre = np.array([((_finite(b.get("lower")) or 0) + (_finite(b.get("upper")) or 0)) / 2 for b in bins])
        width = np.array([(_finite(b.get("upper")) or 0) - (_finite(b.get("lower")) or 0) for b in bins])
        ms = np.array([_nan(b.get("mean_score")) for b in bins])
        acc = np.array([_nan(b.get("accuracy")) for b in bins])
        ax.bar(centre, np.nan_to_num(acc), width=width * 0.9, color="#4a7ab7", alpha=0.8, label="share matched")
        ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfect calibration")
        ax.plot(ms, acc, "o-", color="#1b1b1b", ms=3, lw=1, label="mean score → share matched")
        ax.set_ylabel("share matched")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="upper left", frameon=False, fontsize=7.5)
        ax.set_title(f"ECE {_fmt(cal.get('ece'))}, Brier {_fmt(cal.get('brier'))}, {_fmt(cal.get('n'))} predictions", fontsize=9)
        axn.bar(centre, [b.get("n") or 0 for b in bins], width=width * 0.9, color="#9e9e9e")
        axn.set_ylabel("n", fontsize=8)
        axn.set_xlabel("score")
        axn.set_xlim(0, 1)
        fig_ = _Figure("reliability", _png(fig), "Reliability diagram: in each score bin, the share of predictions matched at the main IoU threshold against the bin's mean score (bottom: predictions per bin).")
        page.figures.append(fig_)
        page.parts.append(_figure_html(fig_))
    page.parts.append("</section>")


# ----------------------------------------------------------------------------- overlays


def _scale_bar(ax: Any) -> None:
    """A scale bar of a 1-2-5 length about a quarter of the axis width (axis units are metres)."""
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    x0, x1 = ax.get_xlim()
    span = abs(x1 - x0)
    if not span > 0:
        return
    target = span / 4
    step = 10 ** math.floor(math.log10(target))
    size = max(s * step for s in (1, 2, 5) if s * step <= target)
    label = f"{size / 1000:g} km" if size >= 1000 else f"{size:g} m"
    ax.add_artist(AnchoredSizeBar(ax.transData, size, label, "lower left", pad=0.3, borderpad=0.4, sep=2, frameon=True, size_vertical=span / 150,
                                  fontproperties={"size": 7}))


@dataclass
class _Window:
    """One overlay: a square in a UTM zone and what it shows."""

    zone: int
    cx: float
    cy: float
    side_m: float
    title: str
    focus_table: str | None = None
    focus_index: object = None
    tile: tuple[int, int] | None = None  # a worst tile's (tile_x, tile_y): the window moves onto its errors


def _tile_side_m(metrics: dict) -> float:
    return float((metrics.get("tiles") or {}).get("tile_km") or (metrics.get("bootstrap") or {}).get("tile_km") or 10.0) * 1000.0


def _neighbourhood(windows: list[_Window], tile_m: float) -> dict[int, tuple[set[int], set[int]]]:
    """Per zone, the tile columns and rows within reach of the windows (a superset for the read filter)."""
    out: dict[int, tuple[set[int], set[int]]] = {}
    for w in windows:
        half = w.side_m / 2 + tile_m  # a polygon's tile is that of its centroid: one tile of margin
        xs, ys = out.setdefault(w.zone, (set(), set()))
        xs.update(range(math.floor((w.cx - half) / tile_m), math.floor((w.cx + half) / tile_m) + 1))
        ys.update(range(math.floor((w.cy - half) / tile_m), math.floor((w.cy + half) / tile_m) + 1))
    return out


def _tile_filter(zone_col: str, reach: dict[int, tuple[set[int], set[int]]]) -> Any:
    import pyarrow.dataset as ds

    expr = None
    for zone, (xs, ys) in reach.items():
        term = (ds.field(zone_col) == zone) & ds.field("tile_x").isin(sorted(xs)) & ds.field("tile_y").isin(sorted(ys))
        expr = term if expr is None else expr | term
    return expr


def _parts(path: Path) -> list[Path]:
    return sorted(path.glob("*.parquet")) if path.is_dir() else ([path] if path.is_file() else [])


def _read_near(path: Path, zone_col: str, reach: dict, columns: tuple[str, ...]) -> Any:
    """The rows of a parts directory whose tile is within ``reach``, with their geometry."""
    import pyarrow.dataset as ds

    if not reach:
        return None
    try:
        names = ds.dataset(path, format="parquet").schema.names
    except Exception as exc:
        raise EvalInputError(f"{path}: cannot be read as parquet ({type(exc).__name__})") from exc
    cols = [c for c in columns if c in names] + ["geometry"]
    return _read_parquet(path, columns=cols, filters=_tile_filter(zone_col, reach))


def _in_window(frame: Any, window: _Window, zone_col: str) -> Any:
    """The rows of ``frame`` (any CRS) that intersect the window, reprojected into the window's zone."""
    import geopandas
    import shapely

    if frame is None or len(frame) == 0:
        return frame
    half = window.side_m / 2
    square = shapely.box(window.cx - half, window.cy - half, window.cx + half, window.cy + half)
    near = frame[frame[zone_col].to_numpy() == window.zone] if zone_col in frame else frame
    if len(near) == 0:
        return near
    in_src = geopandas.GeoSeries([shapely.segmentize(square, half / 8)], crs=f"EPSG:{window.zone}").to_crs(frame.crs).iloc[0]
    near = near[near.intersects(in_src.envelope)]
    near = near.to_crs(f"EPSG:{window.zone}")
    near = near[near.intersects(square)]
    if len(near) > MAX_OVERLAY_POLYGONS:
        d = near.geometry.centroid.distance(shapely.Point(window.cx, window.cy)).to_numpy()
        near = near.iloc[np.argsort(d, kind="stable")[:MAX_OVERLAY_POLYGONS]]
    return near


def _polygon_paths(geoms: Any) -> list:
    """Matplotlib paths of polygons (holes as further closed rings, drawn even-odd)."""
    import shapely
    from matplotlib.path import Path as MplPath

    paths = []
    for polygon in shapely.get_parts(np.asarray(geoms, dtype=object)):
        if polygon is None or polygon.is_empty or polygon.geom_type != "Polygon":
            continue
        vertices, codes = [], []
        for ring in (polygon.exterior, *polygon.interiors):
            xy = np.asarray(ring.coords)
            code = np.full(len(xy), MplPath.LINETO, dtype=np.uint8)
            code[0], code[-1] = MplPath.MOVETO, MplPath.CLOSEPOLY
            vertices.append(xy)
            codes.append(code)
        paths.append(MplPath(np.concatenate(vertices), np.concatenate(codes)))
    return paths


def _add_polygons(ax: Any, frame: Any, **style: Any) -> None:
    """Draw a frame's polygons as one collection (geopandas' plot costs ~20 ms a call, and a
    report makes a hundred such calls)."""
    from matplotlib.collections import PathCollection

    paths = _polygon_paths(frame.geometry.to_numpy())
    if paths:
        # sizes=None with offsets at the data transform: the paths are drawn in data coordinates.
        ax.add_collection(PathCollection(paths, transform=ax.transData, **style))


def _draw_overlay(ax: Any, window: _Window, refs: Any, preds: Any, focus: Any) -> None:
    half = window.side_m / 2
    if refs is not None and len(refs):
        missed = ~refs["matched"].fillna(False).astype(bool).to_numpy() if "matched" in refs else np.zeros(len(refs), bool)
        _add_polygons(ax, refs, facecolor=REFERENCE_COLOUR, alpha=0.08, edgecolor="none")
        if missed.any():
            _add_polygons(ax, refs[missed], facecolor=REFERENCE_COLOUR, alpha=0.30, edgecolor="none")
        _add_polygons(ax, refs, facecolor="none", edgecolor=REFERENCE_COLOUR, linewidth=1.3)
    if preds is not None and len(preds):
        false = ~preds["matched"].fillna(False).astype(bool).to_numpy() if "matched" in preds else np.zeros(len(preds), bool)
        if false.any():
            _add_polygons(ax, preds[false], facecolor=PREDICTION_COLOUR, alpha=0.30, edgecolor="none")
        _add_polygons(ax, preds, facecolor="none", edgecolor=PREDICTION_COLOUR, linewidth=1.1)
    if focus is not None and len(focus):
        colour = REFERENCE_COLOUR if window.focus_table == "fields" else PREDICTION_COLOUR
        _add_polygons(ax, focus, facecolor="none", edgecolor=colour, linewidth=2.8)
        _add_polygons(ax, focus, facecolor="none", edgecolor="black", linewidth=0.6, linestyle=(0, (2, 2)))
    ax.set_xlim(window.cx - half, window.cx + half)
    ax.set_ylim(window.cy - half, window.cy + half)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_title(window.title, fontsize=7.5)
    _scale_bar(ax)


def _overlay_figure(name: str, panels: list[tuple[_Window, Any, Any, Any]], n_cols: int, caption: str) -> _Figure:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n_rows = math.ceil(len(panels) / n_cols)
    fig = _new_figure(2.35 * n_cols, 2.45 * n_rows + 0.35)
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for ax, (window, refs, preds, focus) in zip(axes, panels):
        _draw_overlay(ax, window, refs, preds, focus)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    handles = [Line2D([], [], color=REFERENCE_COLOUR, lw=1.5, label="reference"),
               Line2D([], [], color=PREDICTION_COLOUR, lw=1.5, label="prediction"),
               Patch(facecolor=REFERENCE_COLOUR, alpha=0.4, label="reference not matched"),
               Patch(facecolor=PREDICTION_COLOUR, alpha=0.4, label="prediction not matched"),
               Line2D([], [], color="black", lw=2.5, label="the sampled object")]
    fig.legend(handles=handles, loc="outside lower center", ncols=5, fontsize=7, frameon=False)
    return _Figure(name, _png(fig), caption)


def _sample_error_windows(run: RunFiles, fields_dir: Path, preds_dir: Path, rng: np.random.Generator) -> tuple[list[_Window], list[str], dict[str, int]]:
    """The chosen objects of each error code (their tile only: the window is placed once their geometry is read)."""
    light = {
        "fields": _read_columns(fields_dir, ("ref_index", "utm_epsg", "tile_x", "tile_y", "error_code", "split")) if _parts(fields_dir) else None,
        "predictions": _read_columns(preds_dir, ("pred_index", "tile_epsg", "tile_x", "tile_y", "error_code", "merge")) if _parts(preds_dir) else None,
    }
    chosen: list[_Window] = []
    missing: list[str] = []
    counts: dict[str, int] = {}
    for code, table, flag, meaning in ERROR_SAMPLES:
        frame = light[table]
        column = flag or "error_code"
        if frame is None or column not in frame:
            missing.append(f"{code} (no {column} column in {table}/)")
            continue
        sel = frame[column].fillna(False).astype(bool).to_numpy() if flag else (frame[column].astype("string") == code).fillna(False).to_numpy()
        idx = np.flatnonzero(sel)
        counts[code] = len(idx)
        if len(idx) == 0:
            missing.append(f"{code} (none in this run)")
            continue
        pick = np.sort(rng.choice(idx, size=min(SAMPLES_PER_CODE, len(idx)), replace=False))
        zone_col = "utm_epsg" if table == "fields" else "tile_epsg"
        id_col = "ref_index" if table == "fields" else "pred_index"
        for i in pick:
            row = frame.iloc[int(i)]
            label = "ref" if table == "fields" else "pred"
            chosen.append(_Window(int(row[zone_col]), float(row["tile_x"]), float(row["tile_y"]), 0.0, f"{code} ({label} {row[id_col]})",
                                  focus_table=table, focus_index=row[id_col]))
    return chosen, missing, counts


def _overlays_section(run: RunFiles, page: _Page, tiles: Any, worst: list[dict]) -> None:
    page.parts.append('<section id="overlays"><h2>Overlays: reference (purple) and predictions (orange)</h2>')
    fields_dir, preds_dir = run.run_dir / "fields", run.run_dir / "predictions"
    if not _parts(fields_dir):
        page.parts.append(_note("No overlays: the run directory has no per-field table (fields/)."))
        page.parts.append("</section>")
        return
    tile_m = _tile_side_m(run.metrics)
    rng = np.random.default_rng(SAMPLE_SEED)
    samples, missing, counts = _sample_error_windows(run, fields_dir, preds_dir, rng)
    # Windows of the samples: first their tiles (centre of the tile), replaced by the object once read.
    for w in samples:
        w.cx, w.cy, w.side_m = (w.cx + 0.5) * tile_m, (w.cy + 0.5) * tile_m, tile_m
    tile_windows = []
    for i, t in enumerate(worst[:N_WORST_TILE_OVERLAYS]):
        zone, tx, ty = (int(v) for v in t["tile"].split("_"))
        tile_windows.append(_Window(zone, (tx + 0.5) * tile_m, (ty + 0.5) * tile_m, tile_m,
                                    f"#{i + 1} tile {t['tile']}: F1 {_fmt(t.get('f1'))}, {_fmt(t.get('support'))} fields", tile=(tx, ty)))
    reach_f = _neighbourhood(samples + tile_windows, tile_m)
    field_cols = ("ref_index", "utm_epsg", "tile_x", "tile_y", "error_code", "matched", "split")
    pred_cols = ("pred_index", "tile_epsg", "tile_x", "tile_y", "error_code", "matched", "merge")
    fields = _read_near(fields_dir, "utm_epsg", reach_f, field_cols)
    preds = _read_near(preds_dir, "tile_epsg", reach_f, pred_cols) if _parts(preds_dir) else None
    panels_tiles = []
    for w in tile_windows:
        _centre_on_errors(w, fields, preds, *w.tile, min(TILE_WINDOW_M, tile_m))
        panels_tiles.append((w, _in_window(fields, w, "utm_epsg"), _in_window(preds, w, "tile_epsg"), None))
    panels_errors = []
    for w in samples:
        source = fields if w.focus_table == "fields" else preds
        id_col = "ref_index" if w.focus_table == "fields" else "pred_index"
        zone_col = "utm_epsg" if w.focus_table == "fields" else "tile_epsg"
        focus = source[(source[id_col] == w.focus_index).fillna(False).to_numpy() & (source[zone_col].to_numpy() == w.zone)] if source is not None else None
        if focus is None or len(focus) == 0:
            continue
        focus = focus.iloc[:1].to_crs(f"EPSG:{w.zone}")
        x0, y0, x1, y1 = focus.total_bounds
        w.cx, w.cy = (x0 + x1) / 2, (y0 + y1) / 2
        w.side_m = max(OBJECT_WINDOW_MIN_M, 3 * max(x1 - x0, y1 - y0))
        panels_errors.append((w, _in_window(fields, w, "utm_epsg"), _in_window(preds, w, "tile_epsg"), focus))
    if panels_tiles:
        fig_ = _overlay_figure("overlay_worst_tiles", panels_tiles, min(4, len(panels_tiles)),
                               f"The worst tiles by F1 (numbers as on the map): a {_fmt(min(TILE_WINDOW_M, tile_m) / 1000, 1)} km window of each, centred on its errors, in the tile's UTM zone.")
        page.figures.append(fig_)
        page.parts.append(_figure_html(fig_))
    else:
        page.parts.append(_note("No worst-tile overlays: no tile has enough support, or the run has no tile table."))
    if panels_errors:
        fig_ = _overlay_figure("overlay_errors", panels_errors, 4,
                               f"Up to {SAMPLES_PER_CODE} objects of each error code, drawn at random (seed {SAMPLE_SEED}) from all objects with that code; "
                               "each window is three times the object's extent (at least "
                               f"{OBJECT_WINDOW_MIN_M:g} m), in the object's UTM zone.")
        page.figures.append(fig_)
        page.parts.append(_figure_html(fig_))
        page.parts.append(_table(["code", "what it is", "objects"], [[_esc(c), _esc(meaning), _fmt(counts[c])] for c, _, _, meaning in ERROR_SAMPLES if c in counts], "codes"))
    if missing:
        page.parts.append(_note("No sample for: " + "; ".join(missing) + "."))
    page.parts.append("</section>")


def _centre_on_errors(w: _Window, fields: Any, preds: Any, tx: int, ty: int, side: float) -> None:
    """Move a worst tile's window onto its errors: the error nearest the median of the tile's error centroids."""
    points = []
    for frame, zone_col, bad in ((fields, "utm_epsg", "matched"), (preds, "tile_epsg", "matched")):
        if frame is None or len(frame) == 0:
            continue
        sel = (frame[zone_col].to_numpy() == w.zone) & (frame["tile_x"].to_numpy() == tx) & (frame["tile_y"].to_numpy() == ty)
        if bad in frame:
            sel &= ~frame[bad].fillna(False).astype(bool).to_numpy()
        if sel.any():
            c = frame[sel].to_crs(f"EPSG:{w.zone}").geometry.centroid
            points.append(np.column_stack([c.x.to_numpy(), c.y.to_numpy()]))
    w.side_m = side
    if points:
        xy = np.concatenate(points)
        med = np.median(xy, axis=0)
        cx, cy = xy[int(np.argmin(((xy - med) ** 2).sum(axis=1)))]
        w.cx, w.cy = float(cx), float(cy)


def _pixel_paired_section(run: RunFiles, page: _Page) -> None:
    page.parts.append('<section id="pixel-paired"><h2>Pixel metrics and paired comparison</h2>')
    px = run.metrics.get("pixel")
    page.parts.append("<h3>Pixel metrics</h3>")
    if not px:
        page.parts.append(_note("No pixel metrics: the run was made without --pixel-gsd-m."))
    else:
        micro, macro = px.get("micro") or {}, px.get("macro") or {}
        rows = [[k, _value(f"pixel.micro.{k}", micro.get(k)), _fmt((macro.get(k) or {}).get("value")) + f" over {_fmt((macro.get(k) or {}).get('n_units'))} tiles"]
                for k in ("precision", "recall", "f1", "iou", "mcc", "tversky")]
        bf = px.get("boundary_f1") or {}
        page.parts.append(f"<p>{_fmt(px.get('count_pixels'))} evaluated pixels of {_fmt(px.get('gsd_m'), 1)} m (TP {_fmt(px.get('count_tp'))}, FP {_fmt(px.get('count_fp'))}, "
                          f"FN {_fmt(px.get('count_fn'))}, TN {_fmt(px.get('count_tn'))}); boundary F1 in pixels {_fmt(bf.get('f1'))} at {_fmt(bf.get('tolerance_px'))} px.</p>")
        page.parts.append(_table(["metric", "micro (pooled)", "macro (mean over tiles)"], rows, "pixel"))
    page.parts.append("<h3>Paired comparison</h3>")
    paired = run.paired
    if not paired:
        page.parts.append(_note("No paired comparison: this run directory has no paired.json (the reevaluate flow writes one when a previous run of the product exists)."))
    else:
        overall = paired.get("overall") or {}
        names = [k for k, e in overall.items() if isinstance(e, dict)]
        if names:
            fig = _new_figure(5.0, 0.8 + 0.35 * len(names))
            ax = fig.add_subplot()
            y = np.arange(len(names))[::-1]
            d = np.array([_nan(overall[k].get("delta")) for k in names])
            ci = [overall[k].get("ci") or [None, None] for k in names]
            lo = np.array([_nan(c[0]) for c in ci])
            hi = np.array([_nan(c[1]) for c in ci])
            colours = ["#c00000" if np.isfinite(h) and h < 0 else "#2e7d32" if np.isfinite(lw) and lw > 0 else "#4a4a4a" for lw, h in zip(lo, hi)]
            ax.scatter(d, y, color=colours, zorder=3)
            ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(d)
            if ok.any():
                ax.errorbar(d[ok], y[ok], xerr=[d[ok] - lo[ok], hi[ok] - d[ok]], fmt="none", ecolor="#4a4a4a", capsize=3)
            ax.axvline(0, color="grey", lw=1)
            ax.set_yticks(y)
            ax.set_yticklabels(names, fontsize=8)
            ax.set_xlabel("candidate − incumbent (95 % paired interval)")
            ax.grid(axis="x", alpha=0.3)
            fig_ = _Figure("paired", _png(fig), f"{paired.get('candidate', 'candidate')} against {paired.get('incumbent', 'incumbent')}: red, worse with the interval below zero; green, better.")
            page.figures.append(fig_)
            page.parts.append(_figure_html(fig_))
            page.parts.append(_table(["metric", "candidate", "incumbent", "delta [95 % paired interval]"],
                                     [[_esc(k), _fmt(overall[k].get("candidate")), _fmt(overall[k].get("incumbent")),
                                       _fmt(overall[k].get("delta")) + _ci_text(overall[k].get("ci"))] for k in names]))
        worse = paired.get("worse_units") or []
        page.parts.append(f"<p>{len(worse)} units where the candidate is significantly worse"
                          + (f"; regression: {'yes' if paired.get('regression') else 'no'}" if "regression" in paired else "") + ".</p>")
        if worse:
            page.parts.append(_table(["level", "unit", "metric", "delta [interval]", "support"],
                                     [[_esc(w.get("level")), _esc(w.get("unit")), _esc(w.get("metric")), _fmt(w.get("delta")) + _ci_text(w.get("ci")), _fmt(w.get("support"))]
                                      for w in worse[:MAX_TABLE_ROWS]]))
    page.parts.append("</section>")


# ----------------------------------------------------------------------------- page

_CSS = """
:root { --ref: %(ref)s; --pred: %(pred)s; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: #1b1b1b;
       max-width: 1120px; margin: 0 auto; padding: 1rem 1.5rem 3rem; line-height: 1.45; font-size: 15px; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; } h2 { font-size: 1.25rem; border-bottom: 2px solid #e0e0e0; padding-bottom: 0.2rem; margin-top: 2rem; }
h3 { font-size: 1.05rem; margin: 1.2rem 0 0.4rem; }
nav { font-size: 0.9rem; margin: 0.4rem 0 1rem; } nav a { margin-right: 0.9rem; color: #2b5797; }
table { border-collapse: collapse; margin: 0.4rem 0 0.8rem; font-size: 0.86rem; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 0.22rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f5f5f5; } table.identity td:first-child { white-space: nowrap; color: #555; }
.cols { display: flex; flex-wrap: wrap; gap: 1.5rem; } .headline td:nth-child(2) .v:first-child { font-weight: 600; font-size: 1.05rem; }
.ci { color: #555; } .absent { color: #6b6b6b; font-style: italic; background: #fafafa; border-left: 3px solid #d0d0d0; padding: 0.3rem 0.6rem; }
.gate { font-weight: 600; } .gate-pass { color: #1b5e20; } .gate-fail { color: #b71c1c; } .gate-not_evaluable { color: #8d6e00; }
figure { margin: 0.6rem 0 1rem; break-inside: avoid; page-break-inside: avoid; } figure img { max-width: 100%%; height: auto; display: block; }
figcaption { font-size: 0.85rem; color: #444; max-width: 60rem; } code { font-size: 0.82rem; word-break: break-all; }
.worst b { color: #b71c1c; } footer { margin-top: 2.5rem; font-size: 0.8rem; color: #777; }
@media print { body { max-width: none; font-size: 11pt; padding: 0; } nav { display: none; } h2 { break-after: avoid; }
               section { break-inside: auto; } details > * { display: block; } a { color: inherit; text-decoration: none; } }
""" % {"ref": REFERENCE_COLOUR, "pred": PREDICTION_COLOUR}


def _title(run: RunFiles) -> str:
    man = run.manifest or {}
    pred = ((man.get("inputs") or {}).get("predicted") or {}).get("path")
    run_id = (run.contract or {}).get("run_id")
    parts = ["evalcore evaluation"]
    if pred:
        parts.append(Path(str(pred)).name)
    if run_id:
        parts.append(f"run {run_id}")
    return " · ".join(parts)


def _family_sections(run: RunFiles, page: _Page) -> list[tuple[str, str]]:
    """A section per registered family that declares one (``MetricFamily.section``): a table of its
    :attr:`shown` keys in ``metrics.json`` with their intervals. Returns the (anchor, title) of each."""
    m = run.metrics
    drawn = []
    for family in FAMILIES:
        if not family.section:
            continue
        rows = [[_esc(s.label), _with_ci(s.key, m.get(s.key), interval_of(m, s.key))
                 + ("" if s.better is None else f' <span class="better">({_esc(s.better)} is better)</span>')]
                for s in family.shown if s.key in m]
        if not rows:
            continue
        anchor = f"family-{family.name}"
        page.parts.append(f'<section id="{_esc(anchor)}" data-family="{_esc(family.name)}"><h2>{_esc(family.section)}</h2>'
                          + _table(["metric", "value [95 % interval]"], rows, "family") + "</section>")
        drawn.append((anchor, family.section))
    return drawn


def _render(run: RunFiles) -> tuple[str, list[_Figure]]:
    page = _Page()
    page.parts.append(_headline(run))
    _iou_section(run, page)
    _group_section(run, page, "per_stratum", "Per stratum", "per_stratum", "No strata: the run was made without --strata-column.")
    _group_section(run, page, "per_size_class", "Per size class", "per_size_class", "No size classes: the run was made without --size-bins.")
    tiles, worst = _tiles_section(run, page)
    _scores_section(run, page)
    families = _family_sections(run, page)
    _overlays_section(run, page, tiles, worst)
    _pixel_paired_section(run, page)
    title = _title(run)
    status = (run.status or {}).get("status")
    nav = "".join(f'<a href="#{a}">{_esc(t)}</a>' for a, t in (("headline", "Headline"), ("iou-curve", "IoU curve"), ("per-stratum", "Strata"),
                                                               ("per-size-class", "Size classes"), ("tiles", "Tiles and AOIs"), ("scores", "Scores"),
                                                               *families, ("overlays", "Overlays"), ("pixel-paired", "Pixels, paired")))
    doc = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        # No request of any kind: images are data: URIs, and the policy forbids every other source.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_esc(title)}</h1><p>{_esc(run.run_dir.resolve().name)}"
        + (f" · status {_esc(status)}" if status else "")
        + (f" · finished {_esc((run.manifest or {}).get('finished'))}" if (run.manifest or {}).get("finished") else "")
        + f"</p><nav>{nav}</nav></header>\n"
        + "\n".join(page.parts)
        + "\n<footer>Built by evalcore.html_report from the files of this run directory alone; figures are also in figures/ as PNG. "
        "Every number is read from metrics.json and the run's tables (definitions: docs/metrics.md).</footer></body></html>\n"
    )
    return doc, page.figures


def build_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` (and ``figures/*.png``) into a run directory from its files alone.

    Parameters
    ----------
    run_dir : str or Path
        The output directory of ``evalcore run`` (it must hold ``metrics.json``).

    Returns
    -------
    Path
        ``run_dir / "report.html"``, written under a temporary name and renamed when whole.

    Raises
    ------
    EvalInputError
        ``run_dir`` is not a run directory, or one of its files is malformed; the message
        names the file.
    """
    started = time.perf_counter()
    run = load_run(run_dir)
    doc, figures = _render(run)
    fig_dir = run.run_dir / "figures"
    fig_dir.mkdir(exist_ok=True)
    drawn = {f.name for f in figures}
    for f in figures:
        atomic_path(fig_dir / f"{f.name}.png", lambda tmp, png=f.png: tmp.write_bytes(png))
    for name, _ in FIGURES:  # a figure of an earlier build that this build did not draw
        if name not in drawn:
            (fig_dir / f"{name}.png").unlink(missing_ok=True)
    out = run.run_dir / "report.html"
    atomic_path(out, lambda tmp: tmp.write_bytes(doc.encode("utf-8")))
    _log.info("wrote %s (%d figures, %.0f KB) in %.1f s", out, len(figures), out.stat().st_size / 1024, time.perf_counter() - started)
    return out
