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
from evalcore.html_report.markup import Figure, Page, esc, fmt, group_label
from evalcore.present import interval_of

__all__ = [
    "FIGURES",
    "DPI",
    "new_figure",
    "png",
    "figure_html",
    "place",
    "fitted_range",
    "colour_scale",
    "scale_length",
    "scale_bar",
    "iou_curve",
    "group_bars",
    "tile_map",
    "pr_curves",
    "reliability_diagram",
    "paired_deltas",
    "iou_distribution",
    "IOU_BINS",
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
    ("iou_distribution", "Matched-IoU distribution, with boundary IoU beside it"),
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
    attrs = "".join(f' data-{esc(k)}="{esc(_attr(v))}"' for k, v in fig.attrs.items())
    return (
        f'<figure data-figure="{esc(fig.name)}"{attrs}><img src="data:image/png;base64,{data}" alt="{esc(title)}">'
        f"<figcaption>{esc(fig.caption)}</figcaption></figure>"
    )


def place(page: Page, fig: Figure) -> None:
    """Put a drawn figure on the page: its ``<figure>`` element among the parts, the figure among those written to ``figures/``."""
    page.figures.append(fig)
    page.parts.append(figure_html(fig))


def _attr(value: object) -> str:
    """A figure's fact as an attribute value: a float as its ``repr`` (it round-trips), anything else as text."""
    return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)


def fitted_range(values: np.ndarray, floor: float = 0.0, ceiling: float = 1.0, min_span: float = 0.1, pad: float = 0.08) -> tuple[float, float]:
    """An axis range that holds every finite value of ``values`` with a margin, within [floor, ceiling].

    Rates that all lie within a few hundredths of each other are told apart only on an
    axis fitted to them, not on 0-1. The margin is ``pad`` of the span (at least
    ``min_span`` wide in all); the limits are rounded outward to 0.01.
    """
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return floor, ceiling
    lo, hi = float(v.min()), float(v.max())
    margin = max((hi - lo) * pad, (min_span - (hi - lo)) / 2, 0.0)
    lo, hi = math.floor((lo - margin) * 100) / 100, math.ceil((hi + margin) * 100) / 100
    return max(floor, lo), min(ceiling, hi)


def new_figure(width_in: float, height_in: float) -> Any:
    """A matplotlib figure of that size in inches, laid out by matplotlib (no pyplot state)."""
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=(width_in, height_in), layout="constrained")


def scale_length(span_m: float) -> float:
    """A 1-2-5 length about a quarter of ``span_m``: the length of a scale bar.

    Examples
    --------
    >>> scale_length(300.0), scale_length(4000.0)
    (50.0, 1000.0)
    """
    target = span_m / 4
    step = 10 ** math.floor(math.log10(target))
    return float(max(s * step for s in (1, 2, 5) if s * step <= target))


def scale_bar(ax: Any) -> None:
    """A scale bar of a 1-2-5 length about a quarter of the axis width (axis units are metres)."""
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    x0, x1 = ax.get_xlim()
    span = abs(x1 - x0)
    if not span > 0:
        return
    size = scale_length(span)
    label = f"{size / 1000:g} km" if size >= 1000 else f"{size:g} m"
    ax.add_artist(AnchoredSizeBar(ax.transData, size, label, "lower left", pad=0.3, borderpad=0.4, sep=2, frameon=True, size_vertical=span / 150,
                                  fontproperties={"size": 7}))


def iou_curve(sweep: list[dict]) -> Figure:
    """F1, precision and recall against the IoU threshold of the sweep, with their bootstrap bands when there are any.

    The bands are drawn first, then precision and recall, then F1 on top of them all (the
    three often coincide); the y-axis is fitted to the values and their bands
    (:func:`fitted_range`), so the curves and bands are not squeezed into a 0-1 axis.
    """
    t = np.array([float_or_nan(e.get("iou_threshold")) for e in sweep])
    fig = new_figure(6.4, 3.4)
    ax = fig.add_subplot()
    colours = {"precision": "#1f77b4", "recall": "#d62728", "f1": "#1b1b1b"}  # drawing order: F1 last
    has_ci = False
    shown = []
    for z, (key, colour) in enumerate(colours.items()):
        y = np.array([float_or_nan(e.get(key)) for e in sweep])
        lo = np.array([float_or_nan((interval_of(e, key) or [None, None])[0]) for e in sweep])
        hi = np.array([float_or_nan((interval_of(e, key) or [None, None])[1]) for e in sweep])
        shown += [y, lo, hi]
        if np.isfinite(lo).any():
            has_ci = True
            ax.fill_between(t, lo, hi, color=colour, alpha=0.18, lw=0, zorder=1, label=f"{'F1' if key == 'f1' else key} 95 % band")
        ax.plot(t, y, marker="o", ms=3.5, color=colour, lw=2.2 if key == "f1" else 1.3, label=key if key != "f1" else "F1", zorder=3 + z)
    y0, y1 = fitted_range(np.concatenate(shown), ceiling=1.02)
    ax.set_ylim(y0, y1)
    ax.set_xlabel("IoU threshold")
    ax.set_ylabel("value")
    ax.set_xticks(t)
    ax.set_xticklabels([f"{v:.2f}" for v in t], fontsize=8)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    lines = [i for i, h in enumerate(handles) if not labels[i].endswith("band")][::-1]  # F1 first, as it is drawn on top
    ax.legend([handles[i] for i in lines], [labels[i] for i in lines], loc="lower left", frameon=False)
    caption = ("Object F1, precision and recall when a match needs IoU ≥ t" + (" (shaded bands: 95 % bootstrap intervals)" if has_ci else " (no intervals: no bootstrap)")
               + f"; the y-axis runs from {y0:.2f} to {y1:.2f}, fitted to the values.")
    return Figure("iou_curve", png(fig), caption, {"ylim": f"{y0:.2f},{y1:.2f}", "bands": "yes" if has_ci else "no"})


def group_bars(rows: list[dict], grouping: str, worst: dict | None, title: str, name: str) -> Figure:
    """F1 per group as dots with their interval whiskers (:func:`~evalcore.html_report.loading.group_rows`).

    Strata are drawn lowest F1 first, size classes in their order, at most :data:`MAX_BARS`;
    groups without enough support are hollow grey, the worst group red. Dots, not bars:
    the F1 axis is fitted to the values and intervals of the groups with enough support
    (:func:`fitted_range`; all groups when none has) so that groups a few hundredths
    apart are told apart, and a bar from a baseline other than 0 would misstate its
    length. A thin group whose F1 is off that axis is an arrow at the edge with its value.
    """
    if grouping == "per_stratum":
        shown = sorted(rows, key=lambda r: (r["f1"] is None, r["f1"] if r["f1"] is not None else 0.0, str(r["group"])))[:MAX_BARS]
    else:
        shown = rows[:MAX_BARS]
    fig = new_figure(6.4, 0.9 + 0.28 * len(shown))
    ax = fig.add_subplot()
    y = np.arange(len(shown))[::-1]
    f1 = np.array([float_or_nan(r["f1"]) for r in shown])
    lo = np.array([float_or_nan(r["f1_ci_lower"]) for r in shown])
    hi = np.array([float_or_nan(r["f1_ci_upper"]) for r in shown])
    # The axis fits the groups with enough support: a group of three fields has an
    # interval of most of 0-1 and would squeeze the others together again.
    basis = np.array([not r["insufficient_support"] for r in shown]) if any(not r["insufficient_support"] for r in shown) else np.ones(len(shown), bool)
    x0, x1 = fitted_range(np.concatenate([f1[basis], lo[basis], hi[basis]]), ceiling=1.0)
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(f1)
    if ok.any():
        ax.errorbar(f1[ok], y[ok], xerr=[f1[ok] - lo[ok], hi[ok] - f1[ok]], fmt="none", ecolor="#1b1b1b", elinewidth=1, capsize=2.5, zorder=2)
    beyond = 0
    for yi, r, v in zip(y, shown, f1):
        is_worst = bool(worst) and str(r["group"]) == str(worst.get("group"))
        if np.isfinite(v) and not x0 <= v <= x1:  # a thin group off the axis: an arrow at the edge, with its value
            beyond += 1
            edge, marker, ha = (x0, "<", "left") if v < x0 else (x1, ">", "right")
            ax.plot([edge], [yi], marker, ms=6, mfc="white", mec="#7f7f7f", zorder=3, clip_on=False)
            ax.text(edge + (0.015 if v < x0 else -0.015) * (x1 - x0), yi + 0.28, f"F1 {fmt(v)}", ha=ha, va="center", fontsize=7, color="#555555")
        elif np.isfinite(v):
            thin = r["insufficient_support"]
            ax.plot([v], [yi], "o", ms=6, zorder=3, mfc="white" if thin else ("#c00000" if is_worst else "#4a7ab7"),
                    mec="#7f7f7f" if thin else ("#c00000" if is_worst else "#4a7ab7"), clip_on=False)
        else:
            ax.text(x0 + 0.01 * (x1 - x0), yi, "F1 undefined", va="center", fontsize=7.5)
        label = f"n={fmt(r['support'])}" + (" (insufficient support)" if r["insufficient_support"] else "")
        ax.text(1.025, yi, label, va="center", fontsize=7.5, transform=ax.get_yaxis_transform())
    ax.set_yticks(y)
    ax.set_yticklabels([group_label(r["group"], grouping) for r in shown], fontsize=8)
    ax.set_xlim(x0, x1)
    ax.set_ylim(-0.6, len(shown) - 0.4)
    ax.set_xlabel("F1 (whiskers: 95 % bootstrap interval)")
    ax.grid(axis="x", alpha=0.3)
    caption = (f"F1 {title.lower().replace('metrics ', '')}" + (" (field area in hectares)" if grouping == "per_size_class" else "")
               + f", on an axis from {x0:.2f} to {x1:.2f} fitted to the values and intervals of the groups with enough support: hollow grey dots have fewer reference fields than min_support"
               + (" (an arrow at the edge: off the axis, its value beside it)" if beyond else ""))
    if worst:
        caption += f"; the worst group (red) is {group_label(worst.get('group'), grouping)} (F1 {fmt(worst.get('value'))}, {fmt(worst.get('support'))} fields)"
    if len(rows) > len(shown):
        caption += f"; the {len(shown)} of {len(rows)} groups with the lowest F1 are drawn, all are in the table"
    return Figure(name, png(fig), caption + ".", {"xlim": f"{x0:.2f},{x1:.2f}"})


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
    vmin, vmax, scale_text = colour_scale(tiles, column)
    if column == "f1":
        cmap = colormaps["RdYlGn"]
        norm = Normalize(vmin=vmin, vmax=vmax)
    else:
        cmap = colormaps["PuOr"]
        norm = TwoSlopeNorm(vmin=vmin, vcenter=1.0, vmax=vmax)
    shown_values = values[np.isfinite(values)]
    extend = {(False, False): "neither", (True, False): "min", (False, True): "max", (True, True): "both"}[
        (bool((shown_values < vmin).any()), bool((shown_values > vmax).any()))]
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
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes[: len(regions)]), shrink=0.8, extend=extend,
                 label=f"{label}\n(scale: 2-98 % of the supported tiles)" if "sufficient support" in scale_text and "none has" not in scale_text else label)
    handles = [Patch(facecolor="#d9d9d9", label="undefined"), Patch(facecolor="white", edgecolor="#5a5a5a", hatch="////", label="insufficient support"),
               Line2D([], [], marker="x", color="black", ls="none", label="no reference, false positives"),
               Line2D([], [], marker="o", mfc="white", mec="black", ls="none", label="worst tiles by F1 (1 = worst)")]
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=7.5, frameon=False)
    caption = (f"{label} of each {fmt(tile_m / 1000, 0)} km reporting tile, one panel per region of neighbouring tiles, each in its UTM zone"
               + (f" (the {len(regions)} of {n_regions} regions with the most tiles or a worst tile are drawn)" if n_regions > len(regions) else "")
               + f"; the colour scale runs from {fmt(vmin)} to {fmt(vmax)}, {scale_text}"
               + (" (tiles beyond it take the end colours, arrows on the colour bar)" if extend != "neither" else "")
               + "; × marks tiles without reference fields that hold false positives; numbers label the worst tiles (1 = worst).")
    return Figure(name, png(fig), caption, {"vmin": vmin, "vmax": vmax})


SCALE_QUANTILES = (0.02, 0.98)
"""The robust range of a tile map's colour scale: these quantiles of the tiles with sufficient support."""


def colour_scale(tiles: Any, column: str) -> tuple[float, float, str]:
    """The range of a tile map's colour scale and the words that say where it comes from.

    The range is the 2nd to 98th percentile (:data:`SCALE_QUANTILES`, numpy's linear
    interpolation) of the column over the tiles with sufficient support: a tile with a
    handful of fields has extreme rates by chance and would otherwise wash out every
    supported tile. Only when no tile has enough support are all tiles used (and the
    words say so). F1's range is at most 0-1 and need not end at 1; at least 0.05 wide.
    The count ratio's range is symmetric about 1 on a log scale (1/r to r, r ≥ 2^0.1),
    so that too many and too few predictions look equally strong; ratios of 0 (no
    prediction) are left out of the range and take the lowest colour.

    Returns
    -------
    vmin, vmax : float
        The ends of the colour bar (F1, or predicted / reference count ratio).
    text : str
        E.g. "2nd-98th percentile of the 12 tiles with sufficient support".
    """
    values = tiles[column].to_numpy(dtype=float)
    supported = ~tiles["insufficient_support"].astype(bool).to_numpy() if "insufficient_support" in tiles else np.ones(len(values), bool)
    usable = np.isfinite(values) & (values > 0 if column != "f1" else True)
    basis = usable & supported
    if basis.any():
        text = f"2nd-98th percentile of the {int(basis.sum())} tile{'s' if basis.sum() != 1 else ''} with sufficient support"
    else:
        basis = usable
        text = f"2nd-98th percentile of all {int(basis.sum())} tiles (none has sufficient support)"
    if not basis.any():
        return (0.0, 1.0, "0 to 1 (no tile has a value)") if column == "f1" else (0.5, 2.0, "1/2 to 2 (no tile has a value)")
    q_lo, q_hi = (float(q) for q in np.quantile(values[basis], SCALE_QUANTILES))
    if column == "f1":
        if q_hi - q_lo < 0.05:  # one value, or nearly: a scale of some width, centred on it
            mid = (q_lo + q_hi) / 2
            q_lo, q_hi = max(0.0, mid - 0.025), min(1.0, mid + 0.025)
            q_lo, q_hi = (q_lo, q_lo + 0.05) if q_hi - q_lo < 0.05 and q_lo == 0.0 else (q_hi - 0.05, q_hi) if q_hi - q_lo < 0.05 else (q_lo, q_hi)
        return q_lo, q_hi, text
    spread = max(0.1, abs(math.log2(q_lo)), abs(math.log2(q_hi)))
    return 2.0 ** -spread, 2.0 ** spread, text + ", symmetric about 1 on a log scale"


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
    """Precision against recall at IoU 0.5 and 0.75 (``pr_curve`` of ``metrics.json``), each curve's best F1 marked.

    Each "best F1" label is written in its curve's colour and joined to its dot by a
    short line of that colour, to the left of the dot (the curves run along the top and
    the right); the dot with the higher precision is labelled above, the next below, and
    so on further out. The axes are zoomed to the curves (:func:`fitted_range`).
    """
    curves = m.get("pr_curve") or {}
    fig = new_figure(4.6, 3.6)
    ax = fig.add_subplot()
    best = m.get("best_f1") or {}
    recalls, precisions = [], []
    dots = sorted((-(finite((best.get(k) or {}).get("precision")) or 0.0), i) for i, k in enumerate(curves))
    rank = {i: r for r, (_, i) in enumerate(dots)}  # 0: the highest dot
    for (key, curve), colour in zip(curves.items(), ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")):
        ap = m.get("ap50") if key == "0.5" else m.get("ap75") if key == "0.75" else None
        r = np.array([float_or_nan(v) for v in curve.get("recall") or []])
        p = np.array([float_or_nan(v) for v in curve.get("precision") or []])
        recalls.append(r)
        precisions.append(p)
        ax.plot(r, p, color=colour, lw=1.5, label=f"IoU {key}" + (f" (AP {fmt(ap)})" if ap is not None else ""), zorder=2)
        b = best.get(key) or {}
        if finite(b.get("recall")) is not None and finite(b.get("precision")) is not None:
            ax.plot([b["recall"]], [b["precision"]], "o", color=colour, ms=6, mec="black", zorder=4, gid=f"best-{key}")
            r_ = rank[list(curves).index(key)]
            above = r_ % 2 == 0
            rise = (12 + 12 * (r_ // 2)) * (1 if above else -1)
            ax.annotate(f"IoU {key}: best F1 {fmt(b.get('f1'))} at score {fmt(b.get('score'))}", (b["recall"], b["precision"]),
                        xytext=(-14, rise), textcoords="offset points", fontsize=7, color=colour, ha="right", va="bottom" if above else "top",
                        arrowprops={"arrowstyle": "-", "color": colour, "lw": 0.8, "shrinkA": 0, "shrinkB": 3}, zorder=5, gid=f"label-{key}",
                        bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
            recalls.append(np.array([float(b["recall"])]))
            precisions.append(np.array([float(b["precision"])]))
    x0, x1 = fitted_range(np.concatenate(recalls) if recalls else np.array([]), ceiling=1.01, pad=0.04)
    y0, y1 = fitted_range(np.concatenate(precisions) if precisions else np.array([]), ceiling=1.02, pad=0.04)
    ax.set_xlabel("recall")
    ax.set_ylabel("precision")
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    return Figure("pr_curve", png(fig), "Precision against recall as the score threshold falls, at IoU 0.5 and 0.75; dots: the score that maximises F1, "
                  f"labelled in the colour of their curve; axes zoomed to the curves (recall {x0:.2f}-{x1:.2f}, precision {y0:.2f}-{y1:.2f}).",
                  {"xlim": f"{x0:.2f},{x1:.2f}", "ylim": f"{y0:.2f},{y1:.2f}"})


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


_QUANTILE_MARKS = (("min", ":"), ("q05", "--"), ("q10", "--"), ("q25", "-."), ("median", "-"), ("q75", "-."), ("q90", "--"), ("max", ":"))
"""The ``iou_distribution`` keys marked on the histogram, with their line styles (symmetric about the median)."""


def _mark_values(ax: Any, values: dict, marks: tuple[tuple[str, str], ...]) -> None:
    """A labelled vertical line at each finite ``values[key]`` of ``marks`` ((key, line style) pairs)."""
    for key, style in marks:
        v = finite(values.get(key))
        if v is not None:
            ax.axvline(v, color="#1b1b1b", ls=style, lw=1.0)
            ax.annotate(key, (v, 1.0), xycoords=("data", "axes fraction"), fontsize=6, rotation=90, ha="right", va="top")


IOU_BINS = np.linspace(0.0, 1.0, 41)
"""The bins of the matched IoU histograms: 40 of 0.025 (``numpy.histogram``'s: the last one closed)."""


def iou_distribution(iou_counts: np.ndarray, dist: dict, boundary_counts: np.ndarray | None = None,
                     boundary: dict | None = None) -> Figure:
    """Histogram of the matched pairs' IoU with the quantiles of ``iou_distribution`` marked; beside it,
    with ``boundary_counts``, the histogram of the pairs' boundary IoU with its mean and median.

    Parameters
    ----------
    iou_counts : ndarray of int64, shape (40,)
        Matched pairs per bin of :data:`IOU_BINS` (``numpy.histogram`` of their finite IoU):
        counted part by part from the per-field table, so the report holds 40 numbers
        whatever the size of the run.
    dist : dict
        ``iou_distribution`` of ``metrics.json`` (the marked values are read from it, not recomputed).
    boundary_counts : ndarray of int64, shape (40,), optional
        The same of the pairs' finite boundary IoU.
    boundary : dict, optional
        ``{"mean", "median", "width_m"}`` of ``metrics.json``.
    """
    panels = 2 if boundary_counts is not None else 1
    fig = new_figure(4.2 * panels + 0.6, 3.2)
    axes = [fig.add_subplot(1, panels, k + 1) for k in range(panels)]
    bins = IOU_BINS
    ax = axes[0]
    # One weighted value per bin draws the bars a histogram of the values themselves draws.
    ax.hist(bins[:-1], bins=bins, weights=np.asarray(iou_counts, dtype=np.float64), color="#1f77b4", alpha=0.75)
    _mark_values(ax, dist, _QUANTILE_MARKS)
    ax.set_xlabel("IoU of the matched pair")
    ax.set_ylabel("matched pairs")
    ax.set_xlim(0, 1.0)
    ax.grid(alpha=0.3)
    caption = f"IoU of the {fmt(dist.get('count'))} matched pairs (40 bins of 0.025), min, quantiles and max of iou_distribution marked"
    if boundary_counts is not None:
        ax = axes[1]
        ax.hist(bins[:-1], bins=bins, weights=np.asarray(boundary_counts, dtype=np.float64), color="#ff7f0e", alpha=0.75)
        info = boundary or {}
        _mark_values(ax, info, (("mean", "--"), ("median", "-")))
        ax.set_xlabel(f"boundary IoU (band {fmt(info.get('width_m'), 1)} m)")
        ax.set_xlim(0, 1.0)
        ax.grid(alpha=0.3)
        caption += "; right: the same pairs' boundary IoU, mean and median marked"
    return Figure("iou_distribution", png(fig), caption + ".")
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
