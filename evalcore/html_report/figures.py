"""The report's figures: which there are, how each is drawn with matplotlib, how it is embedded.

Each drawing function takes values read from the run directory and returns a
:class:`~evalcore.html_report.markup.Figure` (PNG bytes at :data:`DPI` and the caption);
the sections place it on the page with :func:`figure_html`, as a ``data:`` URI so the
page needs no other file. The tile maps draw one square per reporting tile, never the
fields; the overlays of reference and predicted polygons are
:mod:`evalcore.html_report.overlays`.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

import numpy as np

from evalcore.html_report.loading import finite, float_or_nan, tile_side_m
from evalcore.html_report.markup import Figure, esc, fmt
from evalcore.present import interval_of

__all__ = [
    "FIGURES",
    "DPI",
    "new_figure",
    "png",
    "figure_html",
    "scale_bar",
    "iou_curve",
    "group_bars",
    "tile_map",
    "pr_curves",
    "reliability_diagram",
    "paired_deltas",
    "confusion_heatmap",
    "class_bars",
]

MAX_BARS = 30
"""Groups drawn in a bar chart (the lowest F1 first); every group is in the table up to :data:`~evalcore.html_report.sections.MAX_TABLE_ROWS`."""
MAX_MAP_PANELS = 6
"""Panels of the tile maps: regions of neighbouring tiles, each in its UTM zone (those with a worst tile first, then the largest)."""
MAP_REGION_GAP = 2
"""Tiles at most this many empty tiles apart are drawn in one panel."""
DPI = 110

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
    ("class_confusion", "Confusion matrix of the matched fields' classes"),
    ("class_bars", "PQ and F1 per class"),
)
"""Every figure the report can draw, as (name, title); the PNG is ``figures/<name>.png``."""
_TITLES = dict(FIGURES)


def png(fig: Any) -> bytes:
    """A matplotlib figure as PNG bytes, without the software stamp (the same figure gives the same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def figure_html(fig: Figure) -> str:
    """The ``<figure>`` element of a drawn figure, its PNG inlined as a ``data:`` URI."""
    data = base64.b64encode(fig.png).decode("ascii")
    title = _TITLES.get(fig.name, fig.name)
    return (
        f'<figure data-figure="{esc(fig.name)}"><img src="data:image/png;base64,{data}" alt="{esc(title)}">'
        f"<figcaption>{esc(fig.caption)}</figcaption></figure>"
    )


def new_figure(width_in: float, height_in: float) -> Any:
    """A matplotlib figure of that size in inches, laid out by matplotlib (no pyplot state)."""
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(width_in, height_in), layout="constrained")


def scale_bar(ax: Any) -> None:
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


def iou_curve(sweep: list[dict]) -> Figure:
    """F1, precision and recall against the IoU threshold of the sweep, with their bootstrap bands when there are any."""
    t = np.array([float_or_nan(e.get("iou_threshold")) for e in sweep])
    fig = new_figure(6.4, 3.4)
    ax = fig.add_subplot()
    colours = {"f1": "#1b1b1b", "precision": "#1f77b4", "recall": "#d62728"}
    has_ci = False
    for key, colour in colours.items():
        y = np.array([float_or_nan(e.get(key)) for e in sweep])
        ax.plot(t, y, marker="o", ms=3.5, color=colour, lw=2.0 if key == "f1" else 1.3, label=key if key != "f1" else "F1")
        lo = np.array([float_or_nan((interval_of(e, key) or [None, None])[0]) for e in sweep])
        hi = np.array([float_or_nan((interval_of(e, key) or [None, None])[1]) for e in sweep])
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
    return Figure("iou_curve", png(fig), caption)


def group_bars(rows: list[dict], grouping: str, worst: dict | None, title: str, name: str) -> Figure:
    """F1 per group as bars with their intervals (:func:`~evalcore.html_report.loading.group_rows`).

    Strata are drawn lowest F1 first, size classes in their order, at most :data:`MAX_BARS`;
    groups without enough support are hatched grey, the worst group has a red outline.
    """
    if grouping == "per_stratum":
        shown = sorted(rows, key=lambda r: (r["f1"] is None, r["f1"] if r["f1"] is not None else 0.0, str(r["group"])))[:MAX_BARS]
    else:
        shown = rows[:MAX_BARS]
    fig = new_figure(6.4, 0.9 + 0.28 * len(shown))
    ax = fig.add_subplot()
    y = np.arange(len(shown))[::-1]
    f1 = np.array([float_or_nan(r["f1"]) for r in shown])
    colours = ["#bdbdbd" if r["insufficient_support"] else "#4a7ab7" for r in shown]
    bars = ax.barh(y, np.nan_to_num(f1), color=colours, height=0.7)
    for bar, r in zip(bars, shown):
        if r["insufficient_support"]:
            bar.set_hatch("///")
            bar.set_edgecolor("#7f7f7f")
        if worst and str(r["group"]) == str(worst.get("group")):
            bar.set_edgecolor("#c00000")
            bar.set_linewidth(2.0)
    lo = np.array([float_or_nan(r["f1_ci_lower"]) for r in shown])
    hi = np.array([float_or_nan(r["f1_ci_upper"]) for r in shown])
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(f1)
    if ok.any():
        ax.errorbar(f1[ok], y[ok], xerr=[f1[ok] - lo[ok], hi[ok] - f1[ok]], fmt="none", ecolor="#1b1b1b", elinewidth=1, capsize=2.5)
    for yi, r, v in zip(y, shown, f1):
        label = f"n={fmt(r['support'])}" + (" (insufficient support)" if r["insufficient_support"] else "")
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
        caption += f"; the worst group (red outline) is {worst.get('group')} (F1 {fmt(worst.get('value'))}, {fmt(worst.get('support'))} fields)"
    if len(rows) > len(shown):
        caption += f"; the {len(shown)} of {len(rows)} groups with the lowest F1 are drawn, all are in the table"
    return Figure(name, png(fig), caption + ".")


def tile_map(tiles: Any, metrics: dict, column: str, name: str, worst: list[dict]) -> Figure:
    """One column of the tile table (``f1`` or ``count_ratio``) as coloured tile squares, a panel per region.

    The worst tiles (``worst``, :func:`~evalcore.html_report.loading.worst_tile_rows`) are
    numbered, tiles without enough support hatched, tiles with false positives and no
    reference field crossed; each panel is drawn in its UTM zone with a scale bar.
    """
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
    fig = new_figure(3.3 * n_cols + 0.8, 3.1 * n_rows + 0.4)
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    worst_keys = {w["tile"]: i + 1 for i, w in enumerate(worst)}
    keys = _tile_keys(tiles)
    tile_m = tile_side_m(metrics)
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
        scale_bar(ax)
    for ax in axes[len(regions):]:
        ax.set_axis_off()
    label = "F1" if column == "f1" else "count ratio (predicted / reference)"
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes[: len(regions)]), shrink=0.8, label=label)
    handles = [Patch(facecolor="#d9d9d9", label="undefined"), Patch(facecolor="white", edgecolor="#5a5a5a", hatch="////", label="insufficient support"),
               Line2D([], [], marker="x", color="black", ls="none", label="no reference, false positives"),
               Line2D([], [], marker="o", mfc="white", mec="black", ls="none", label="worst tiles by F1 (1 = worst)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=7.5, frameon=False)
    caption = (f"{label} of each {fmt(tile_m / 1000, 0)} km reporting tile, one panel per region of neighbouring tiles, each in its UTM zone"
               + (f" (the {len(regions)} of {n_regions} regions with the most tiles or a worst tile are drawn)" if n_regions > len(regions) else "")
               + "; × marks tiles without reference fields that hold false positives; numbers label the worst tiles (1 = worst).")
    return Figure(name, png(fig), caption)


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


def pr_curves(m: dict) -> Figure:
    """Precision against recall at IoU 0.5 and 0.75 (``pr_curve`` of ``metrics.json``), each curve's best F1 marked."""
    curves = m.get("pr_curve") or {}
    fig = new_figure(4.6, 3.6)
    ax = fig.add_subplot()
    best = m.get("best_f1") or {}
    for (key, curve), colour in zip(curves.items(), ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")):
        ap = m.get("ap50") if key == "0.5" else m.get("ap75") if key == "0.75" else None
        ax.plot(curve.get("recall") or [], curve.get("precision") or [], color=colour, lw=1.5,
                label=f"IoU {key}" + (f" (AP {fmt(ap)})" if ap is not None else ""))
        b = best.get(key) or {}
        if finite(b.get("recall")) is not None:
            ax.plot([b["recall"]], [b["precision"]], "o", color=colour, ms=6, mec="black")
            ax.annotate(f"best F1 {fmt(b.get('f1'))} at score {fmt(b.get('score'))}", (b["recall"], b["precision"]), fontsize=7,
                        xytext=(-8, -14 if key == "0.5" else -26), textcoords="offset points", ha="right")
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(0, 1.01)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", frameon=False, fontsize=8)
    return Figure("pr_curve", png(fig), "Precision against recall as the score threshold falls, at IoU 0.5 and 0.75; dots: the score that maximises F1.")


def reliability_diagram(cal: dict) -> Figure:
    """Share matched against mean score per score bin (``calibration`` of ``metrics.json``), predictions per bin below."""
    bins = cal.get("bins") or []
    fig = new_figure(4.6, 4.2)
    ax, axn = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    centre = np.array([((finite(b.get("lower")) or 0) + (finite(b.get("upper")) or 0)) / 2 for b in bins])
    width = np.array([(finite(b.get("upper")) or 0) - (finite(b.get("lower")) or 0) for b in bins])
    ms = np.array([float_or_nan(b.get("mean_score")) for b in bins])
    acc = np.array([float_or_nan(b.get("accuracy")) for b in bins])
    ax.bar(centre, np.nan_to_num(acc), width=width * 0.9, color="#4a7ab7", alpha=0.8, label="share matched")
    ax.plot([0, 1], [0, 1], ls="--", color="grey", lw=1, label="perfect calibration")
    ax.plot(ms, acc, "o-", color="#1b1b1b", ms=3, lw=1, label="mean score → share matched")
    ax.set_ylabel("share matched")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="upper left", frameon=False, fontsize=7.5)
    ax.set_title(f"ECE {fmt(cal.get('ece'))}, Brier {fmt(cal.get('brier'))}, {fmt(cal.get('n'))} predictions", fontsize=9)
    axn.bar(centre, [b.get("n") or 0 for b in bins], width=width * 0.9, color="#9e9e9e")
    axn.set_ylabel("n", fontsize=8)
    axn.set_xlabel("score")
    axn.set_xlim(0, 1)
    return Figure("reliability", png(fig), "Reliability diagram: in each score bin, the share of predictions matched at the main IoU threshold against the bin's mean score (bottom: predictions per bin).")


def paired_deltas(paired: dict, names: list[str]) -> Figure:
    """The candidate − incumbent delta of each metric of ``paired.json``'s ``overall`` with its paired interval."""
    overall = paired.get("overall") or {}
    fig = new_figure(5.0, 0.8 + 0.35 * len(names))
    ax = fig.add_subplot()
    y = np.arange(len(names))[::-1]
    d = np.array([float_or_nan(overall[k].get("delta")) for k in names])
    ci = [overall[k].get("ci") or [None, None] for k in names]
    lo = np.array([float_or_nan(c[0]) for c in ci])
    hi = np.array([float_or_nan(c[1]) for c in ci])
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
    return Figure("paired", png(fig), f"{paired.get('candidate', 'candidate')} against {paired.get('incumbent', 'incumbent')}: red, worse with the interval below zero; green, better.")


def confusion_heatmap(block: dict) -> Figure:
    """The confusion matrix of ``classes`` in ``metrics.json``: counts, and the same normalised by row (reference class)."""
    names = list(block.get("classes") or [])
    counts = np.asarray((block.get("confusion") or {}).get("counts") or np.zeros((0, 0)), dtype=np.float64).reshape(len(names), len(names))
    rows = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(rows > 0, counts / np.where(rows > 0, rows, 1.0), np.nan)
    side = 1.6 + 0.45 * max(len(names), 2)
    fig = new_figure(2 * side + 0.6, side + 0.4)
    label_size = 8 if len(names) <= 10 else 6
    for ax, values, title, text in ((fig.add_subplot(1, 2, 1), counts, "matched pairs", lambda v: f"{v:.0f}"),
                                     (fig.add_subplot(1, 2, 2), share, "share of the reference class", lambda v: f"{v:.2f}")):
        shown = np.nan_to_num(values / values.max() if title == "matched pairs" and values.size and values.max() > 0 else values)
        ax.imshow(shown, cmap="Blues", vmin=0.0, vmax=1.0)
        if len(names) <= 15:  # numbers in the cells while they stay legible
            for i in range(len(names)):
                for j in range(len(names)):
                    if np.isfinite(values[i, j]):
                        ax.text(j, i, text(values[i, j]), ha="center", va="center", fontsize=label_size - 1,
                                color="white" if shown[i, j] > 0.6 else "black")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right", fontsize=label_size)
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=label_size)
        ax.set_xlabel("predicted class")
        ax.set_ylabel("reference class")
        ax.set_title(title, fontsize=9)
    caption = (f"The main matching's {fmt(block.get('count_matched_classified'))} matched pairs with a class on both sides, by reference class "
               f"(rows) and predicted class (columns); right: each row divided by its total (producer's accuracy on the diagonal). "
               f"Overall accuracy {fmt(block.get('overall_accuracy'))}, kappa {fmt(block.get('kappa'))}.")
    return Figure("class_confusion", png(fig), caption)


def class_bars(block: dict) -> Figure:
    """PQ and F1 of the class-aware matching per class (``classes.per_class``), with their intervals when there are any."""
    per = block.get("per_class") or {}
    names = list(per)
    fig = new_figure(6.4, 1.0 + 0.32 * max(len(names), 1))
    ax = fig.add_subplot()
    y = np.arange(len(names))[::-1].astype(np.float64)
    has_ci = False
    for offset, key, colour in ((0.18, "pq", "#4a7ab7"), (-0.18, "f1", "#1b1b1b")):
        v = np.array([float_or_nan(per[n].get(key)) for n in names])
        ax.barh(y + offset, np.nan_to_num(v), height=0.34, color=colour, alpha=0.8, label="PQ" if key == "pq" else "F1")
        ci = [interval_of(per[n], key) or [None, None] for n in names]
        lo, hi = (np.array([float_or_nan(c[k]) for c in ci]) for k in (0, 1))
        ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(v)
        if ok.any():
            has_ci = True
            ax.errorbar(v[ok], (y + offset)[ok], xerr=[np.maximum(v[ok] - lo[ok], 0), np.maximum(hi[ok] - v[ok], 0)], fmt="none",
                        ecolor="#7a7a7a", capsize=2, lw=1)
    macro = block.get("macro") or {}
    if finite(macro.get("pq")) is not None:
        ax.axvline(macro["pq"], color="#4a7ab7", ls="--", lw=1, label=f"mPQ {fmt(macro['pq'])}")
    ax.set_yticks(y)
    ax.set_yticklabels([f"{n} ({per[n].get('count_reference')})" for n in names], fontsize=8)
    ax.set_xlim(0, 1.02)
    ax.set_xlabel("value (class-aware matching)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=7.5)
    caption = ("Per class, matching only predictions and fields of that class: panoptic quality and F1; in brackets the class's reference fields"
               + (" (bars: 95 % bootstrap intervals)." if has_ci else " (no intervals: no bootstrap)."))
    return Figure("class_bars", png(fig), caption)
