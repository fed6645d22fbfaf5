"""Coverage study of the bootstrap intervals: do the 95 % intervals cover the process's true value?

Run ``.venv/bin/python -m benchmarks.coverage`` (or ``make coverage``); ``--quick`` for a
smoke run of about a minute. docs/intervals.md explains the design and the results.

For each error structure (independent errors, and errors clustered by a smooth random
field with each correlation length of ``--correlation-km``; see "Clustered errors" in
:mod:`evalcore.synth`) and each of ``--datasets`` seeds, a dataset is drawn with
:func:`evalcore.synth.make_layers` (``--n-ref`` reference fields in ``--n-clusters``
separate sites, at least ~140 km apart) and evaluated with ``--bootstrap`` resamples
for each bootstrap unit: ``field`` (SPEC 5), ``tile`` at each side of ``--tile-km``, and
``aoi`` with one AOI per site (the convex hull of the site's fields, 1 km wider). The
same seeds are used for every structure, so the reference layers are the same and only
the errors differ.

The true value of a headline metric (precision, recall, F1) is the value of the
process, the limit of the metric on an ever larger draw of the same process: the ratio
of the expected counts, e.g. recall = E[TP] / E[TP + FN]. It is estimated for dataset
``i`` from the pooled counts of every *other* dataset of the same structure
(leave-one-out, so the truth is independent of the interval it is compared with);
its standard error is in the output (delta method over datasets).

For each structure x unit x metric the output gives the coverage (share of datasets
whose interval contains the truth) with its binomial standard error sqrt(p (1 - p) / n),
how many intervals missed low and high, the mean interval width, the standard deviation
of the point estimate across datasets (the real sampling spread) and the ratio of the
bootstrap's implied standard deviation (width / 3.92) to it.

AP (``AP_METRICS``, issue 33 item 12): with the field unit each dataset is also evaluated
with its ``score`` column and ``ap_interval="bc"``, which gives both AP intervals, the
percentile one (``ap_interval.percentile``) and the bias-corrected one (``bootstrap.ci``).
AP is not a ratio of counts, so its true value is estimated as the AP of the pooled
precision-recall steps of every *other* dataset of the structure (leave-one-out again):
their (score, new TP, new FP) steps merged by score, with the pooled reference count,
and COCO's 101-point arithmetic written out here (:func:`ap_of_steps`). The scores are
continuous, so steps are single predictions and this is pycocotools' AP; each record
keeps the difference between :func:`ap_of_steps` on its own steps and the evaluator's
AP as a check (``ap_check``).

Outputs: JSON (``--out``, default docs/intervals_coverage.json; with ``--quick`` a
temporary directory), a Markdown table next to it (``.md``) and a plot (``.png``,
needs matplotlib; skipped with a note when it is missing). Nothing here is part of the
library.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

METRICS: tuple[str, ...] = ("precision", "recall", "f1")
AP_METRICS: tuple[str, ...] = ("ap50", "ap75")
AP_METHODS: tuple[str, ...] = ("percentile", "bc")
_AP_IOU = {"ap50": 0.5, "ap75": 0.75}
DEFAULTS = dict(
    datasets=200, n_ref=2000, n_clusters=25, bootstrap=250, tile_km=(2.0, 5.0), correlation_km=(2.0, 10.0), workers=2
)
QUICK = dict(datasets=8, n_ref=600, n_clusters=10, bootstrap=100)
Z95 = 1.959963984540054
# Options that change neither a headline metric nor an interval, only the run time: no
# IoU sweep, boundary samples at perimeter / 1000, and partitions of 3,000 km (one per
# UTM zone, not one per site; the bootstrap draws do not depend on the partitioning).
_FAST = dict(iou_sweep_thresholds=None, boundary_sample_spacing_m=None, partition_size_m=3_000_000.0)
_AOI_SITE_GAP_M = 1_500.0  # fields closer than twice this belong to one site
_AOI_MARGIN_M = 1_000.0  # an AOI is its site's convex hull, this much wider


# ---------------------------------------------------------------------------
# One dataset
# ---------------------------------------------------------------------------


def structure_name(correlation_km: float | None) -> str:
    return "independent" if correlation_km is None else f"clustered_{correlation_km:g}km"


def unit_name(unit: str, tile_km: float | None = None) -> str:
    return f"tile_{tile_km:g}km" if unit == "tile" else unit


def site_aois(reference):
    """One AOI per site, EPSG:5070: the site's field centroids buffered by ``_AOI_SITE_GAP_M``, convex hull, ``_AOI_MARGIN_M`` wider.

    Sites are the connected groups of fields whose centroids lie within
    ``2 * _AOI_SITE_GAP_M`` of each other (the clusters of
    :func:`evalcore.synth.make_layers`, which are > 100 km apart). An AOI reaches
    ~2.5 km beyond the outermost centroids, so every field and nearly every
    prediction (false positives lie up to 1.5 km outside their cluster) falls in
    one; in the default study a single prediction of one dataset (seed 193) lies
    outside and forms the engine's extra "in no AOI" unit.
    """
    import geopandas
    import shapely

    centroids = shapely.centroid(reference.geometry.to_crs(5070).values)
    parts = shapely.get_parts(shapely.union_all(shapely.buffer(centroids, _AOI_SITE_GAP_M, quad_segs=2)))
    hulls = shapely.buffer(shapely.convex_hull(parts), _AOI_MARGIN_M, quad_segs=4)
    return geopandas.GeoDataFrame({"aoi_id": [f"S{k:03d}" for k in range(len(hulls))]}, geometry=hulls, crs=5070)


def units_of(tile_kms: tuple[float, ...], only: list[str] | None = None) -> list[tuple[str, float | None]]:
    """The bootstrap units of the study, as (unit, tile side); ``only``: those of these names (:func:`unit_name`)."""
    units = [("field", None), *(("tile", float(t)) for t in tile_kms), ("aoi", None)]
    return [u for u in units if only is None or unit_name(*u) in only]


def run_dataset(task: dict) -> dict:
    """Draw one dataset and evaluate it with every bootstrap unit; counts, estimates and intervals."""
    import evalcore
    from evalcore.synth import make_layers

    started, cpu_started = time.perf_counter(), time.process_time()
    pred, ref = make_layers(
        task["n_ref"], task["seed"], n_clusters=task["n_clusters"], bad_rows=False,
        error_correlation_km=task["correlation_km"],
    )  # fmt: skip
    aoi = site_aois(ref)
    record: dict = {"structure": task["structure"], "seed": task["seed"], "units": {}}
    for unit, tile_km in units_of(tuple(task["tile_km"]), task.get("units")):
        options = dict(_FAST, bootstrap=task["bootstrap"], bootstrap_seed=task["seed"], bootstrap_unit=unit)
        if unit == "tile":
            options["tile_km"] = tile_km
        if unit == "aoi":
            options.update(aoi=aoi, aoi_id_column="aoi_id")
        if unit == "field":
            tables = evalcore.evaluate_tables(pred, ref, score_column="score", ap_interval="bc", **options)
            summary = tables.summary
            record["ap"] = ap_record(summary, tables.pr_curve, len(ref))
        else:
            summary = evalcore.evaluate(pred, ref, **options)
        if "counts" not in record:
            record["counts"] = {k: int(summary[f"count_{k}"]) for k in ("tp", "fp", "fn")}
            record["estimate"] = {m: float(summary[m]) for m in METRICS}
        boot = summary["bootstrap"]
        record["units"][unit_name(unit, tile_km)] = {
            "n_units": int(boot["n_units"]) if boot.get("n_units") is not None else len(ref),
            "ci": {m: [_float(v) for v in boot["ci"][m]] for m in METRICS},
            "n_undefined": {m: int(boot.get("n_undefined", {}).get(m, 0)) for m in METRICS},
        }
    record["seconds"] = time.perf_counter() - started
    record["cpu_seconds"] = time.process_time() - cpu_started
    return record


def ap_record(summary: dict, pr_curve, n_ref: int) -> dict:
    """A dataset's AP estimates, both intervals, the point's quantile, and its PR steps for the pooled truth.

    ``steps`` (score, new TP, new FP per distinct score, by IoU threshold) are used by
    the main process and dropped before the JSON is written.
    """
    block = summary["ap_interval"]
    steps = {}
    for m, t in _AP_IOU.items():
        c = pr_curve[pr_curve["iou_threshold"] == t]
        tp, fp = c["tp"].to_numpy(np.int64), c["fp"].to_numpy(np.int64)
        steps[m] = (c["score"].to_numpy(float), np.diff(tp, prepend=0), np.diff(fp, prepend=0))
    return {
        "n_ref": int(n_ref),
        "estimate": {m: _float(summary[m]) for m in AP_METRICS},
        "ci": {"percentile": {m: [_float(v) for v in block["percentile"][m]] for m in AP_METRICS},
               "bc": {m: [_float(v) for v in summary["bootstrap"]["ci"][m]] for m in AP_METRICS}},
        "point_quantile": {m: _float(block["point_quantile"][m]) for m in AP_METRICS},
        "ap_check": {m: float(ap_of_steps(*steps[m], n_ref) - _float(summary[m])) for m in AP_METRICS},
        "steps": steps,
    }


def ap_of_steps(score: np.ndarray, new_tp: np.ndarray, new_fp: np.ndarray, n_ref: float) -> float:
    """COCO AP from precision-recall steps: precision after each distinct score (descending),
    its right-to-left envelope, read at the first step reaching each of the 101 recall levels (0 past the last)."""
    order = np.argsort(-np.asarray(score, dtype=float), kind="stable")
    s, tp, fp = np.asarray(score, dtype=float)[order], np.asarray(new_tp, dtype=float)[order], np.asarray(new_fp, dtype=float)[order]
    last = np.append(s[1:] != s[:-1], True)  # equal scores of different datasets enter together
    ctp, cfp = np.cumsum(tp)[last], np.cumsum(fp)[last]
    if n_ref <= 0 or len(ctp) == 0:
        return float("nan") if n_ref <= 0 else 0.0
    precision = ctp / np.maximum(ctp + cfp, 1e-300)
    recall = ctp / n_ref
    envelope = np.maximum.accumulate(precision[::-1])[::-1]
    idx = np.searchsorted(recall, np.linspace(0.0, 1.0, 101), side="left")
    return float(np.mean(np.where(idx < len(envelope), envelope[np.minimum(idx, len(envelope) - 1)], 0.0)))


def ap_truth(records: list[dict], metric: str) -> np.ndarray:
    """Leave-one-out AP of the process for each record: :func:`ap_of_steps` on the other records' pooled steps."""
    out = np.full(len(records), np.nan)
    for i in range(len(records)):
        others = [r["ap"] for j, r in enumerate(records) if j != i]
        if not others:
            continue
        parts = [o["steps"][metric] for o in others]
        out[i] = ap_of_steps(*(np.concatenate([p[k] for p in parts]) for k in range(3)), sum(o["n_ref"] for o in others))
    return out


def summarize_ap(records: list[dict]) -> dict:
    """Coverage of the percentile and BC AP intervals (field unit) against the leave-one-out truth."""
    out: dict = {}
    for m in AP_METRICS:
        t = ap_truth(records, m)
        est = np.array([r["ap"]["estimate"][m] for r in records])
        block: dict = {"truth_mean": float(np.nanmean(t)) if np.isfinite(t).any() else float("nan"),
                       "estimate_mean": float(est.mean()), "estimate_sd": float(est.std(ddof=1)) if len(est) > 1 else float("nan"),
                       "point_quantile_mean": float(np.mean([r["ap"]["point_quantile"][m] for r in records])),
                       "ap_check_max_abs": float(max(abs(r["ap"]["ap_check"][m]) for r in records)), "methods": {}}
        for method in AP_METHODS:
            lo = np.array([r["ap"]["ci"][method][m][0] for r in records])
            hi = np.array([r["ap"]["ci"][method][m][1] for r in records])
            ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(t)
            n = int(ok.sum())
            covered = (lo[ok] <= t[ok]) & (t[ok] <= hi[ok])
            p = float(covered.mean()) if n else float("nan")
            block["methods"][method] = {
                "coverage": p, "se": math.sqrt(p * (1 - p) / n) if n else float("nan"), "n": n,
                "missed_low": int((t[ok] < lo[ok]).sum()), "missed_high": int((t[ok] > hi[ok]).sum()),
                "width_mean": float((hi[ok] - lo[ok]).mean()) if n else float("nan"),
            }
        out[m] = block
    return out


def _float(value: object) -> float:
    return float("nan") if value is None else float(value)


def _worker_init() -> None:
    warnings.simplefilter("ignore")
    import evalcore
    from evalcore.synth import make_layers

    pred, ref = make_layers(200, 0, bad_rows=False)
    evalcore.evaluate(pred, ref, bootstrap=10)  # load (or compile) the kernels once per process


# ---------------------------------------------------------------------------
# Truth and coverage
# ---------------------------------------------------------------------------


def metric_of_counts(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray, metric: str) -> np.ndarray:
    """Precision, recall or F1 from (pooled) counts."""
    tp, fp, fn = (np.asarray(a, dtype=float) for a in (tp, fp, fn))
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "precision":
            return tp / (tp + fp)
        if metric == "recall":
            return tp / (tp + fn)
        return 2 * tp / (2 * tp + fp + fn)


def truth_values(records: list[dict]) -> dict:
    """The process's value of each metric: pooled counts of all datasets, and leave-one-out per dataset.

    Returns ``{"pooled": {metric: value}, "se": {metric: standard error of the pooled
    value}, "loo": {metric: array (one per record)}}``. The standard error is the delta
    method's for a ratio of sums over independent datasets.
    """
    counts = {k: np.array([r["counts"][k] for r in records], dtype=float) for k in ("tp", "fp", "fn")}
    total = {k: v.sum() for k, v in counts.items()}
    n = len(records)
    out: dict = {"pooled": {}, "se": {}, "loo": {}}
    for m in METRICS:
        out["pooled"][m] = float(metric_of_counts(total["tp"], total["fp"], total["fn"], m))
        out["loo"][m] = metric_of_counts(total["tp"] - counts["tp"], total["fp"] - counts["fp"], total["fn"] - counts["fn"], m)
        # Ratio R = sum(a) / sum(b): se(R) = sd(a_i - R b_i) / (sqrt(n) mean(b)).
        a = {"precision": counts["tp"], "recall": counts["tp"], "f1": 2 * counts["tp"]}[m]
        b = {
            "precision": counts["tp"] + counts["fp"],
            "recall": counts["tp"] + counts["fn"],
            "f1": 2 * counts["tp"] + counts["fp"] + counts["fn"],
        }[m]
        r = out["pooled"][m]
        out["se"][m] = float(np.std(a - r * b, ddof=1) / (math.sqrt(n) * b.mean())) if n > 1 else float("nan")
    return out


def summarize(records: list[dict], structures: list[str], units: list[str]) -> dict:
    """Coverage, its standard error, misses, widths and spreads per structure x unit x metric."""
    out: dict = {}
    for s in structures:
        recs = [r for r in records if r["structure"] == s]
        if not recs:
            continue
        truth = truth_values(recs)
        estimates = {m: np.array([r["estimate"][m] for r in recs]) for m in METRICS}
        block: dict = {
            "n_datasets": len(recs),
            "truth": truth["pooled"],
            "truth_se": truth["se"],
            "estimate_mean": {m: float(estimates[m].mean()) for m in METRICS},
            "estimate_sd": {m: float(estimates[m].std(ddof=1)) if len(recs) > 1 else float("nan") for m in METRICS},
            "units": {},
        }
        if all("ap" in r for r in recs):
            block["ap"] = summarize_ap(recs)
        for u in units:
            per_metric: dict = {}
            for m in METRICS:
                lo = np.array([r["units"][u]["ci"][m][0] for r in recs])
                hi = np.array([r["units"][u]["ci"][m][1] for r in recs])
                t = truth["loo"][m]
                defined = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(t)
                n = int(defined.sum())
                covered = (lo[defined] <= t[defined]) & (t[defined] <= hi[defined])
                p = float(covered.mean()) if n else float("nan")
                width = hi[defined] - lo[defined]
                sd = block["estimate_sd"][m]
                per_metric[m] = {
                    "coverage": p,
                    "se": math.sqrt(p * (1 - p) / n) if n else float("nan"),
                    "n": n,
                    "n_undefined_intervals": int((~defined).sum()),
                    "missed_low": int((t[defined] < lo[defined]).sum()),  # the whole interval above the truth
                    "missed_high": int((t[defined] > hi[defined]).sum()),
                    "width_mean": float(width.mean()) if n else float("nan"),
                    "width_median": float(np.median(width)) if n else float("nan"),
                    "implied_sd_over_actual_sd": float(width.mean() / (2 * Z95) / sd) if n and sd > 0 else float("nan"),
                }
            block["units"][u] = {
                "n_units_mean": float(np.mean([r["units"][u]["n_units"] for r in recs])),
                "n_units_min": int(min(r["units"][u]["n_units"] for r in recs)),
                "metrics": per_metric,
            }
        out[s] = block
    return out


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------


def markdown(summary: dict, settings: dict) -> str:
    """The coverage tables (units x error structures), one per metric, and the widths."""
    structures = list(summary)
    units = list(next(iter(summary.values()))["units"]) if summary else []
    lines = [
        f"Coverage of the 95 % percentile intervals ({settings['datasets']} datasets per structure, "
        f"{settings['n_ref']} reference fields in {settings['n_clusters']} sites each, "
        f"{settings['bootstrap']} resamples); cell: coverage % ± binomial SE (mean width).",
        "",
    ]
    for m in METRICS:
        lines += [f"**{m}**", "", "| unit | " + " | ".join(structures) + " |", "|---|" + "---|" * len(structures)]
        for u in units:
            cells = []
            for s in structures:
                c = summary[s]["units"][u]["metrics"][m]
                cells.append(f"{100 * c['coverage']:.1f} ± {100 * c['se']:.1f} ({c['width_mean']:.3f})")
            lines.append(f"| {u} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["Truth (pooled over the datasets, ± its SE), spread of the estimate across datasets, and units drawn:", ""]
    lines += ["| structure | " + " | ".join(f"{m} truth" for m in METRICS) + " | " + " | ".join(f"sd({m})" for m in METRICS)
              + " | " + " | ".join(f"n {u}" for u in units) + " |"]
    lines += ["|---|" + "---|" * (2 * len(METRICS) + len(units))]
    for s in structures:
        b = summary[s]
        lines.append(
            f"| {s} | " + " | ".join(f"{b['truth'][m]:.4f} ± {b['truth_se'][m]:.4f}" for m in METRICS)
            + " | " + " | ".join(f"{b['estimate_sd'][m]:.4f}" for m in METRICS)
            + " | " + " | ".join(f"{b['units'][u]['n_units_mean']:.0f}" for u in units) + " |"
        )
    if all("ap" in summary[s] for s in structures):
        lines += ["", "AP intervals, field unit: coverage % ± binomial SE (mean width) of the percentile and the bias-corrected (BC) "
                  "interval against the leave-one-out pooled AP; misses low/high; the point's mean quantile among its resamples:", ""]
        lines += ["| structure | metric | percentile | BC | missed low/high (percentile) | missed low/high (BC) | point quantile |",
                  "|---|---|---|---|---|---|---|"]
        for s in structures:
            for m, b in summary[s]["ap"].items():
                cell = {k: b["methods"][k] for k in AP_METHODS}
                lines.append(f"| {s} | {m} | " + " | ".join(f"{100 * c['coverage']:.1f} ± {100 * c['se']:.1f} ({c['width_mean']:.3f})" for c in cell.values())
                             + " | " + " | ".join(f"{c['missed_low']}/{c['missed_high']}" for c in cell.values())
                             + f" | {b['point_quantile_mean']:.2f} |")
    lines += ["", "Bootstrap spread over the real spread (mean width / 3.92 / sd of the estimate; 1 is right):", ""]
    lines += ["| unit | " + " | ".join(f"{s} {m}" for s in structures for m in ("P", "R", "F1")) + " |"]
    lines += ["|---|" + "---|" * (3 * len(structures))]
    for u in units:
        lines.append(f"| {u} | " + " | ".join(
            f"{summary[s]['units'][u]['metrics'][m]['implied_sd_over_actual_sd']:.2f}" for s in structures for m in METRICS
        ) + " |")
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path) -> bool:
    """Coverage (± 1.96 SE) and mean widths per unit, one column per metric; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    structures = list(summary)
    units = list(next(iter(summary.values()))["units"])
    x = np.arange(len(units))
    offsets = np.linspace(-0.25, 0.25, len(structures)) if len(structures) > 1 else np.zeros(1)
    fig, axes = plt.subplots(2, len(METRICS), figsize=(4.2 * len(METRICS), 7.2), sharex=True)
    for j, m in enumerate(METRICS):
        top, bottom = axes[0, j], axes[1, j]
        lowest = 80.0
        for k, s in enumerate(structures):
            cells = [summary[s]["units"][u]["metrics"][m] for u in units]
            cov = np.array([100 * c["coverage"] for c in cells])
            err = np.array([100 * Z95 * c["se"] for c in cells])
            lowest = min(lowest, float(np.nanmin(cov - err)) - 3)
            top.errorbar(x + offsets[k], cov, yerr=err, fmt="o", capsize=3, label=s)
            bottom.bar(x + offsets[k], [c["width_mean"] for c in cells], width=0.5 / max(len(structures), 1), label=s)
            needed = 2 * Z95 * summary[s]["estimate_sd"][m]
            bottom.plot(x + offsets[k], np.full(len(units), needed), "_", ms=14, mew=2, color="black",
                        label="width needed: 3.92 x sd of the estimate" if k == 0 else None)
        top.set_ylim(lowest, 101)
        bottom.set_ylim(0, 1.5 * bottom.get_ylim()[1])
        top.axhline(95, color="black", lw=0.8, ls="--")
        top.set_title(m)
        top.set_ylabel("coverage of the true value, % (± 1.96 SE)" if j == 0 else "")
        bottom.set_ylabel("mean width of the 95 % interval" if j == 0 else "")
        bottom.set_xticks(x, units, rotation=20)
    axes[0, 0].legend(loc="lower left", fontsize=8)
    axes[1, 0].legend(loc="upper left", fontsize=8)
    fig.suptitle("Bootstrap intervals: coverage and width by resampling unit and error structure")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def write_json(result: dict, path: Path) -> None:
    """The result as JSON: everything indented except the records, one line each, floats to 1e-9 (a smaller file)."""
    head = json.dumps({k: v for k, v in result.items() if k != "records"}, indent=1)
    records = ",\n".join(json.dumps(_rounded(r), separators=(",", ":")) for r in result.get("records", []))
    path.write_text(head[:-2] + ',\n "records": [\n' + records + "\n ]\n}\n")


def _rounded(value: object) -> object:
    if isinstance(value, float):
        return round(value, 9) if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(v) for v in text.split(",") if v.strip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.coverage", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK}, output in a temporary directory")
    parser.add_argument("--datasets", type=int, help=f"datasets per error structure (default {DEFAULTS['datasets']})")
    parser.add_argument("--n-ref", type=int, help=f"reference fields per dataset (default {DEFAULTS['n_ref']})")
    parser.add_argument("--n-clusters", type=int, help=f"sites per dataset (default {DEFAULTS['n_clusters']})")
    parser.add_argument("--bootstrap", type=int, help=f"resamples per interval (default {DEFAULTS['bootstrap']})")
    parser.add_argument("--tile-km", type=_floats, help="tile sides of the tile bootstrap, comma-separated (default 2,5)")
    parser.add_argument("--correlation-km", type=_floats, help="correlation lengths of the clustered errors (default 2,10)")
    parser.add_argument("--workers", type=int, help="processes (default 2)")
    parser.add_argument("--units", type=lambda t: [u.strip() for u in t.split(",") if u.strip()],
                        help="only these units, comma-separated names of the output (field, tile_2km, ..., aoi); default all. "
                             "The AP intervals are measured with the field unit")
    parser.add_argument("--first-seed", type=int, default=1, help="seed of the first dataset (default 1)")
    parser.add_argument("--out", type=Path, help="JSON output; .md and .png beside it (default docs/intervals_coverage.json)")
    args = parser.parse_args(argv)

    settings = dict(DEFAULTS, **(QUICK if args.quick else {}))
    for key in ("datasets", "n_ref", "n_clusters", "bootstrap", "tile_km", "correlation_km", "workers"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    settings["tile_km"] = list(settings["tile_km"])
    settings["correlation_km"] = list(settings["correlation_km"])
    settings["first_seed"] = args.first_seed
    if args.out is not None:
        out = args.out
    elif args.quick:
        out = Path(tempfile.gettempdir()) / "evalcore-coverage-quick" / "intervals_coverage.json"
    else:
        out = Path(__file__).resolve().parent.parent / "docs" / "intervals_coverage.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    correlations: list[float | None] = [None, *settings["correlation_km"]]
    structures = [structure_name(c) for c in correlations]
    settings["units"] = args.units
    units = [unit_name(u, t) for u, t in units_of(tuple(settings["tile_km"]), args.units)]
    if not units:
        parser.error(f"--units: none of {args.units} is a unit of this study (field, tile_<km>km, aoi)")
    seeds = range(args.first_seed, args.first_seed + settings["datasets"])
    # Interleave the structures, so that a partial run is balanced.
    tasks = [
        dict(structure=structure_name(c), correlation_km=c, seed=seed, n_ref=settings["n_ref"],
             n_clusters=settings["n_clusters"], bootstrap=settings["bootstrap"], tile_km=settings["tile_km"], units=args.units)
        for seed in seeds for c in correlations
    ]  # fmt: skip
    print(
        f"coverage study: {len(structures)} error structures x {settings['datasets']} datasets x {len(units)} units "
        f"({', '.join(units)}), {settings['n_ref']} fields in {settings['n_clusters']} sites, "
        f"{settings['bootstrap']} resamples, {settings['workers']} processes",
        file=sys.stderr, flush=True,
    )  # fmt: skip
    started = time.perf_counter()
    records: list[dict] = []
    context = multiprocessing.get_context("spawn")
    with context.Pool(settings["workers"], initializer=_worker_init) as pool:
        step = max(1, len(tasks) // 20)
        for k, record in enumerate(pool.imap_unordered(run_dataset, tasks), start=1):
            records.append(record)
            if k % step == 0 or k == len(tasks):
                elapsed = time.perf_counter() - started
                print(f"  {k}/{len(tasks)} datasets, {elapsed:.0f} s, about {elapsed / k * (len(tasks) - k):.0f} s to go",
                      file=sys.stderr, flush=True)
    wall = time.perf_counter() - started
    records.sort(key=lambda r: (structures.index(r["structure"]), r["seed"]))
    summary = summarize(records, structures, units)
    for r in records:
        r.get("ap", {}).pop("steps", None)  # arrays for the pooled AP truth, not for the JSON
    result = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "settings": settings,
        "wall_s": wall,
        "dataset_s_mean": float(np.mean([r["seconds"] for r in records])),
        "dataset_cpu_s_mean": float(np.mean([r.get("cpu_seconds", np.nan) for r in records])),
        "summary": summary,
        "records": records,
    }
    write_json(result, out)
    table = markdown(summary, settings)
    out.with_suffix(".md").write_text(table)
    drew = plot(summary, out.with_suffix(".png"))
    print(table)
    cpu = sum(r.get("cpu_seconds", 0.0) for r in records)
    print(f"wall time {wall:.0f} s ({wall / 60:.1f} min) on {settings['workers']} processes; "
          f"{cpu:.0f} CPU s in the datasets ({cpu / settings['workers'] / 60:.1f} min on {settings['workers']} free cores)")
    print(f"results written to {out} and {out.with_suffix('.md')}")
    print(f"plot written to {out.with_suffix('.png')}" if drew else "matplotlib is not installed: no plot (pip install matplotlib)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
