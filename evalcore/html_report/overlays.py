"""The map overlays: reference and predicted polygons drawn over small windows.

Two figures: the worst tiles by F1 (a window of each, moved onto its errors) and a sample
of each error code of the taxonomy (:data:`SAMPLES_PER_CODE` objects drawn with
:data:`SAMPLE_SEED`, a window around each). Large runs stay fast because no overlay
reads or draws every polygon: the per-field and per-prediction parts are first read for
the few columns that choose the samples, then, one window at a time, only the rows of the
reporting tiles around it (the parts' row-group statistics of zones and tiles choose the
row groups read, one at a time), and only the polygons that intersect the window are drawn. This windowed reading
lives here rather than in :mod:`evalcore.html_report.loading` because the windows decide
what it reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalcore.html_report.figures import new_figure, place, png, scale_bar
from evalcore.html_report.loading import RunFiles, label_column, parquet_dataset, read_part, tile_side_m, unreadable
from evalcore.html_report.markup import Figure, Page, esc, fmt, note, table

__all__ = [
    "overlays_section",
    "REFERENCE_COLOUR",
    "PREDICTION_COLOUR",
    "ERROR_SAMPLES",
    "SAMPLES_PER_CODE",
    "SAMPLE_SEED",
]

REFERENCE_COLOUR = "#7b2cbf"
"""Reference boundaries in every overlay (purple, as in seed 003)."""
PREDICTION_COLOUR = "#f28e00"
"""Predicted boundaries in every overlay (orange, as in seed 003)."""

N_WORST_TILE_OVERLAYS = 4
"""Worst tiles that get an overlay."""
SAMPLES_PER_CODE = 2
"""Overlays per error code; the objects are drawn with :data:`SAMPLE_SEED`."""
SAMPLE_SEED = 0
TILE_WINDOW_M = 2000.0
"""Side of a worst tile's overlay window, centred on the tile's errors (at most the tile's side)."""
OBJECT_WINDOW_MIN_M = 300.0
"""Smallest side of an error sample's window (otherwise three times the object's extent)."""
NEAR_BATCH_ROWS = 4096
"""Rows decoded at a time when a window's neighbourhood is read (each batch is filtered to the neighbourhood's tiles)."""
MAX_OVERLAY_POLYGONS = 2000
"""Per layer and window: beyond this, the polygons nearest the window's centre are drawn."""

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

def _neighbourhood(window: _Window, tile_m: float) -> tuple[int, int, int, int]:
    """The tiles within reach of ``window`` in its zone, ``(x0, x1, y0, y1)`` inclusive.

    A polygon's tile is that of its centroid, so one tile of margin around the window holds
    every polygon that can reach into it.
    """
    half = window.side_m / 2 + tile_m
    return (math.floor((window.cx - half) / tile_m), math.floor((window.cx + half) / tile_m),
            math.floor((window.cy - half) / tile_m), math.floor((window.cy + half) / tile_m))


def _parts(path: Path) -> list[Path]:
    return sorted(path.glob("*.parquet")) if path.is_dir() else ([path] if path.is_file() else [])


@dataclass(frozen=True)
class _NearTable:
    """A per-field or per-prediction parts directory, read one window's neighbourhood at a
    time: the report then holds one window's polygons, not every window's (all windows'
    neighbourhoods at once were 313k rows, 0.5 GiB, of a 500k-field run's report).

    ``groups`` are the parts' row groups in the directory's order, and ``boxes`` each one's
    range of zones and tiles from its statistics (``zone_min, zone_max, x_min, x_max,
    y_min, y_max``; the whole int64 range where a statistic is missing): a window reads
    only the row groups whose box meets its neighbourhood, one at a time, in batches
    filtered as they are decoded. (A pyarrow dataset scan with the same filter read parts
    on its threads and kept their buffers: with it, and the other reads of the report done
    the same way, ``build_report`` of a 2M-field run peaked at 738 MiB; 514 MiB this way.)
    """

    path: Path
    zone_col: str
    columns: list[str]
    groups: list[tuple[str, int]]
    boxes: np.ndarray
    schema: Any  # the first part's Arrow schema, with its GeoParquet metadata (the geometry's CRS)


_NO_STATISTIC = (np.iinfo(np.int64).min, np.iinfo(np.int64).max)


def _near_table(path: Path, zone_col: str, columns: tuple[str, ...]) -> _NearTable | None:
    """``path``'s parts opened for :func:`_read_near` (the ``columns`` it holds and the geometry); None without parts."""
    import pyarrow.parquet as pq

    if not _parts(path):
        return None
    dataset = parquet_dataset(path)
    groups, boxes = [], []
    try:
        for file in dataset.files:
            meta = pq.ParquetFile(file).metadata
            names = [meta.schema.column(i).path for i in range(meta.num_columns)]
            for g in range(meta.num_row_groups):
                box = []
                for name in (zone_col, "tile_x", "tile_y"):
                    stats = meta.row_group(g).column(names.index(name)).statistics if name in names else None
                    ok = stats is not None and stats.has_min_max
                    box += [int(stats.min), int(stats.max)] if ok else list(_NO_STATISTIC)
                groups.append((file, g))
                boxes.append(box)
    except Exception as exc:
        raise unreadable(path, "GeoParquet", exc) from exc
    return _NearTable(path, zone_col, [c for c in columns if c in dataset.schema.names] + ["geometry"], groups,
                      np.array(boxes, dtype=np.int64).reshape(-1, 6), pq.read_schema(dataset.files[0]))


def _read_near(table: _NearTable | None, window: _Window, tile_m: float) -> Any:
    """The rows of ``table`` whose tile is within reach of ``window`` (:func:`_neighbourhood`), with their geometry,
    in the parts' order."""
    import geopandas
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if table is None:
        return None
    x0, x1, y0, y1 = _neighbourhood(window, tile_m)
    b = table.boxes
    meets = ((b[:, 0] <= window.zone) & (b[:, 1] >= window.zone) & (b[:, 2] <= x1) & (b[:, 3] >= x0)
             & (b[:, 4] <= y1) & (b[:, 5] >= y0))
    try:
        pieces = []
        for k in np.flatnonzero(meets):
            file, g = table.groups[k]
            # In batches, each filtered as it is decoded: the rows kept, not the row group's.
            for rows in pq.ParquetFile(file).iter_batches(batch_size=NEAR_BATCH_ROWS, row_groups=[g], columns=table.columns,
                                                          use_threads=False):
                keep = pc.and_(pc.and_(pc.equal(rows[table.zone_col], window.zone),
                                       pc.and_(pc.greater_equal(rows["tile_x"], x0), pc.less_equal(rows["tile_x"], x1))),
                               pc.and_(pc.greater_equal(rows["tile_y"], y0), pc.less_equal(rows["tile_y"], y1)))
                # Each part's own metadata (pandas' index range differs from part to part) is
                # dropped; the first part's, with its GeoParquet CRS, is the frame's.
                pieces.append(pa.Table.from_batches([rows.filter(keep)]).replace_schema_metadata(None))
        frame = geopandas.GeoDataFrame.from_arrow(pa.concat_tables(pieces).replace_schema_metadata(table.schema.metadata) if pieces
                                                  else table.schema.empty_table().select(table.columns))
    except Exception as exc:
        raise unreadable(table.path, "GeoParquet", exc) from exc
    # Arrow's allocator keeps the buffers it freed for reuse: each window's reads left the
    # process some MiB larger (its resident set grew window after window on a 2M-field run).
    pa.default_memory_pool().release_unused()
    return frame


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


def _over(*layers: tuple[str, float]) -> str:
    """The colour seen where translucent fills (``#rrggbb``, alpha) lie on white, in drawing order ("over" compositing).

    Plain arithmetic rather than matplotlib's colour functions: the module is imported
    before any figure is drawn, and matplotlib only when one is.
    """
    seen = np.ones(3)
    for colour, alpha in layers:
        rgb = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255.0
        seen = alpha * rgb + (1 - alpha) * seen
    return "#" + "".join(f"{int(round(v * 255)):02x}" for v in seen)


REFERENCE_TINT, UNMATCHED_ALPHA = 0.08, 0.30
"""Fill opacity of every reference field, and the extra fill of an unmatched reference or prediction."""
BOTH_UNMATCHED_COLOUR = _over((REFERENCE_COLOUR, REFERENCE_TINT), (REFERENCE_COLOUR, UNMATCHED_ALPHA), (PREDICTION_COLOUR, UNMATCHED_ALPHA))
"""The brownish mix where an unmatched prediction lies over an unmatched reference field (the legend shows it)."""


def _draw_overlay(ax: Any, window: _Window, refs: Any, preds: Any, focus: Any) -> None:
    half = window.side_m / 2
    if refs is not None and len(refs):
        missed = ~refs["matched"].fillna(False).astype(bool).to_numpy() if "matched" in refs else np.zeros(len(refs), bool)
        _add_polygons(ax, refs, facecolor=REFERENCE_COLOUR, alpha=REFERENCE_TINT, edgecolor="none")
        if missed.any():
            _add_polygons(ax, refs[missed], facecolor=REFERENCE_COLOUR, alpha=UNMATCHED_ALPHA, edgecolor="none")
        _add_polygons(ax, refs, facecolor="none", edgecolor=REFERENCE_COLOUR, linewidth=1.3)
    if preds is not None and len(preds):
        false = ~preds["matched"].fillna(False).astype(bool).to_numpy() if "matched" in preds else np.zeros(len(preds), bool)
        if false.any():
            _add_polygons(ax, preds[false], facecolor=PREDICTION_COLOUR, alpha=UNMATCHED_ALPHA, edgecolor="none")
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
    scale_bar(ax)


def _overlay_figure(name: str, panels: list[tuple[_Window, Any, Any, Any]], n_cols: int, caption: str) -> Figure:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n_rows = math.ceil(len(panels) / n_cols)
    fig = new_figure(2.35 * n_cols, 2.45 * n_rows + 0.35)
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for ax, (window, refs, preds, focus) in zip(axes, panels):
        _draw_overlay(ax, window, refs, preds, focus)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    handles = [Line2D([], [], color=REFERENCE_COLOUR, lw=1.5, label="reference"),
               Line2D([], [], color=PREDICTION_COLOUR, lw=1.5, label="prediction"),
               Patch(facecolor=_over((REFERENCE_COLOUR, REFERENCE_TINT), (REFERENCE_COLOUR, UNMATCHED_ALPHA)), label="reference not matched"),
               Patch(facecolor=_over((PREDICTION_COLOUR, UNMATCHED_ALPHA)), label="prediction not matched"),
               Patch(facecolor=BOTH_UNMATCHED_COLOUR, label="both unmatched, overlapping"),
               Line2D([], [], color="black", lw=2.5, label="the sampled object")]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    return Figure(name, png(fig), caption)


def _label_columns(fields_dir: Path, preds_dir: Path) -> dict[str, str]:
    """The label column of each table (the id column's name when the run was given one)."""
    return {
        "fields": label_column(fields_dir, "ref_index") if _parts(fields_dir) else "ref_index",
        "predictions": label_column(preds_dir, "pred_index") if _parts(preds_dir) else "pred_index",
    }


@dataclass(frozen=True)
class _ErrorScan:
    """A per-field or per-prediction table read for the error samples: its column names, its
    parts' files and their row counts (in ``pyarrow.dataset``'s order), and per ``(code, flag)``
    the positions of the rows that carry the code or whose flag is true (None: no such column)."""

    names: list[str]
    files: list[str]
    sizes: list[int]
    positions: dict[tuple[str, str | None], np.ndarray | None]


def _scan_errors(path: Path, wanted: list[tuple[str, str | None]]) -> _ErrorScan:
    """Read one part at a time, only the code and flag columns of ``wanted``: a few numbers
    per error, not the run's rows (whole columns took 0.2 GiB of a 500k-field run's report
    and grew with the run)."""
    import pyarrow.compute as pc

    dataset = parquet_dataset(path)
    names = dataset.schema.names
    found: dict = {(code, flag): ([] if (flag or "error_code") in names else None) for code, flag in wanted}
    columns = sorted({flag or "error_code" for code, flag in found if found[(code, flag)] is not None})
    files, sizes = list(dataset.files), []
    offset = 0
    for file in files:
        part = read_part(file, columns)
        for (code, flag), hits in found.items():
            if hits is None:
                continue
            values = part.column(flag or "error_code")
            hit = pc.fill_null(pc.cast(values, "bool") if flag else pc.equal(pc.cast(values, "string"), code), False)
            hits.append(np.flatnonzero(hit.to_numpy(zero_copy_only=False)) + offset)
        sizes.append(part.num_rows)
        offset += part.num_rows
    positions = {k: None if v is None else (np.concatenate(v) if v else np.empty(0, np.int64)) for k, v in found.items()}
    return _ErrorScan(names, files, sizes, positions)


def _rows_at(scan: _ErrorScan, positions: np.ndarray, columns: list[str]) -> Any:
    """The rows at ``positions`` (sorted, in the parts' order) of some columns, as a pandas DataFrame."""
    import pyarrow as pa

    pieces, offset = [], 0
    for file, n in zip(scan.files, scan.sizes, strict=True):
        local = positions[(positions >= offset) & (positions < offset + n)] - offset
        if len(local):
            pieces.append(read_part(file, columns).take(pa.array(local)))
        offset += n
    return pa.concat_tables(pieces).to_pandas()


def _sample_error_windows(run: RunFiles, fields_dir: Path, preds_dir: Path, ids: dict[str, str],
                          rng: np.random.Generator) -> tuple[list[_Window], list[str], dict[str, int]]:
    """The chosen objects of each error code (their tile only: the window is placed once their geometry is read);
    ``ids``: each table's label column (:func:`_label_columns`). The draws are those of
    ``rng.choice`` over each code's row positions, in :data:`ERROR_SAMPLES`' order."""
    dirs = {"fields": fields_dir, "predictions": preds_dir}
    zone_cols = {"fields": "utm_epsg", "predictions": "tile_epsg"}
    scans = {table: _scan_errors(path, [(code, flag) for code, t, flag, _ in ERROR_SAMPLES if t == table]) if _parts(path) else None
             for table, path in dirs.items()}
    chosen: list[_Window] = []
    missing: list[str] = []
    counts: dict[str, int] = {}
    for code, table, flag, meaning in ERROR_SAMPLES:
        scan = scans[table]
        idx = None if scan is None else scan.positions[(code, flag)]
        if idx is None:
            missing.append(f"{code} (no {flag or 'error_code'} column in {table}/)")
            continue
        counts[code] = len(idx)
        if len(idx) == 0:
            missing.append(f"{code} (none in this run)")
            continue
        pick = np.sort(rng.choice(idx, size=min(SAMPLES_PER_CODE, len(idx)), replace=False))
        zone_col, id_col = zone_cols[table], ids[table]
        rows = _rows_at(scan, pick, [c for c in (id_col, zone_col, "tile_x", "tile_y") if c in scan.names])
        for _, row in rows.iterrows():
            label = "ref" if table == "fields" else "pred"
            chosen.append(_Window(int(row[zone_col]), float(row["tile_x"]), float(row["tile_y"]), 0.0, f"{code} ({label} {row[id_col]})",
                                  focus_table=table, focus_index=row[id_col]))
    return chosen, missing, counts


def overlays_section(run: RunFiles, page: Page, tiles: Any, worst: list[dict]) -> None:
    """The overlays section: the worst tiles (``worst``, from :func:`~evalcore.html_report.sections.tiles_section`) and the error samples."""
    page.parts.append('<section id="overlays"><h2>Overlays: reference (purple) and predictions (orange)</h2>'
                      '<p class="legend-note">Outlines: purple, reference fields; orange, predictions. Fills: light purple, a reference field no '
                      'prediction matched; light orange, a prediction that matched no reference field; '
                      f'<span class="swatch" style="background:{BOTH_UNMATCHED_COLOUR}"></span> brownish, an unmatched prediction lying over an '
                      'unmatched reference field (the two fills mixed: most often a detection that overlaps a field with an IoU '
                      'below the matching threshold).</p>')
    fields_dir, preds_dir = run.run_dir / "fields", run.run_dir / "predictions"
    if not _parts(fields_dir):
        page.parts.append(note("No overlays: the run directory has no per-field table (fields/)."))
        page.parts.append("</section>")
        return
    tile_m = tile_side_m(run.metrics)
    rng = np.random.default_rng(SAMPLE_SEED)
    ids = _label_columns(fields_dir, preds_dir)
    samples, missing, counts = _sample_error_windows(run, fields_dir, preds_dir, ids, rng)
    # Windows of the samples: first their tiles (centre of the tile), replaced by the object once read.
    for w in samples:
        w.cx, w.cy, w.side_m = (w.cx + 0.5) * tile_m, (w.cy + 0.5) * tile_m, tile_m
    tile_windows = []
    for i, t in enumerate(worst[:N_WORST_TILE_OVERLAYS]):
        zone, tx, ty = (int(v) for v in t["tile"].split("_"))
        tile_windows.append(_Window(zone, (tx + 0.5) * tile_m, (ty + 0.5) * tile_m, tile_m,
                                    f"#{i + 1} tile {t['tile']}: F1 {fmt(t.get('f1'))}, {fmt(t.get('support'))} fields", tile=(tx, ty)))
    field_table = _near_table(fields_dir, "utm_epsg", (ids["fields"], "utm_epsg", "tile_x", "tile_y", "error_code", "matched", "split"))
    pred_table = _near_table(preds_dir, "tile_epsg", (ids["predictions"], "tile_epsg", "tile_x", "tile_y", "error_code", "matched", "merge"))
    panels_tiles = []
    for w in tile_windows:
        fields, preds = _read_near(field_table, w, tile_m), _read_near(pred_table, w, tile_m)
        _centre_on_errors(w, fields, preds, *w.tile, min(TILE_WINDOW_M, tile_m))
        panels_tiles.append((w, _in_window(fields, w, "utm_epsg"), _in_window(preds, w, "tile_epsg"), None))
    panels_errors = []
    for w in samples:
        fields, preds = _read_near(field_table, w, tile_m), _read_near(pred_table, w, tile_m)
        source = fields if w.focus_table == "fields" else preds
        id_col = ids[w.focus_table]
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
        place(page, _overlay_figure("overlay_worst_tiles", panels_tiles, min(4, len(panels_tiles)),
                                    f"The worst tiles by F1 (numbers as on the map): a {fmt(min(TILE_WINDOW_M, tile_m) / 1000, 1)} km window of each, centred on its errors, in the tile's UTM zone."))
    else:
        page.parts.append(note("No worst-tile overlays: no tile has enough support, or the run has no tile table."))
    if panels_errors:
        place(page, _overlay_figure("overlay_errors", panels_errors, 4,
                                    f"Up to {SAMPLES_PER_CODE} objects of each error code, drawn at random (seed {SAMPLE_SEED}) from all objects with that code; "
                                    "each window is three times the object's extent (at least "
                                    f"{OBJECT_WINDOW_MIN_M:g} m), in the object's UTM zone."))
        page.parts.append(table(["code", "what it is", "objects"], [[esc(c), esc(meaning), fmt(counts[c])] for c, _, _, meaning in ERROR_SAMPLES if c in counts], "codes"))
    if missing:
        page.parts.append(note("No sample for: " + "; ".join(missing) + "."))
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
