"""Site layers: the AOI and annotated-area layers laid over the generated fields.

:func:`evalcore.synth.make_site_layers` calls these. The clusters of fields are found
from the data, hubs are chosen among them, and around each hub a fan of sector AOIs
and an annotated area are drawn ("AOI layer" and "Annotated-area layer" in
:mod:`evalcore.synth`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import geopandas
import numpy as np
import pyproj
import shapely

from evalcore._typing import F64Array, GeomArray, IdArray
from evalcore.synth.constants import _SLOT_ANCHORS, REF_CRS


_AOI_SECTORS = (8, 14)  # AOIs around the clusters (inclusive range)
_AOI_EMPTY = (2, 3)  # AOIs away from every cluster (inclusive range)
_AOI_NAMES = (
    "Arkansas Valley", "Beaver Creek", "Big Sandy", "Canadian Breaks", "Cimarron Plains",
    "Comanche Grassland", "High Plains North", "High Plains South", "Kiowa Flats", "Llano Estacado",
    "Mesa de Maya", "Ogallala Rim", "Pawnee Buttes", "Purgatoire Mesa", "Raton Basin",
    "Republican Basin", "Rita Blanca", "Sand Hills", "Smoky Hill", "Wildhorse Draw",
)  # fmt: skip
_SITE_CELL_DEG = 0.03  # grid cell that links geometries into clusters (< 3.4 km)
_SITE_MERGE_KM = 5.0  # clusters closer than this are one
_HUB_MIN_RADIUS_M = (30_000.0, 45_000.0)  # the AOIs around a cluster reach at least this far
_FAN_GAP_DEG = (50.0, 100.0)  # the wedge around a cluster that no AOI covers
_MIN_SECTOR_DEG = 15.0
_ARC_STEP_DEG = 25.0  # outer edges of a sector AOI span at most about this angle
_EMPTY_RADIUS_M = (18_000.0, 35_000.0)
_EMPTY_CLEARANCE_DEG = 0.05  # AOIs away from the data keep this far from every cluster's bbox
_EMPTY_TRIES = 400
_KM_PER_DEG_LAT = 110.57
_KM_PER_DEG_LON = 111.32  # at the equator


@dataclass(frozen=True, slots=True)
class _Sites:
    """Clusters of geometries found in the layers, lon/lat degrees.

    ``extent`` (n, 4) is the bbox (lon_min, lat_min, lon_max, lat_max) of all
    geometries of a cluster, ``core`` that of its reference geometries (the extent
    when it has none), ``n_ref`` the number of its reference geometries and
    ``pred_beyond`` (n, 4) the number of its predictions wholly west, east, south
    and north of ``core`` (false positives outside the cluster).
    """

    extent: F64Array
    core: F64Array
    n_ref: IdArray
    pred_beyond: IdArray

    @property
    def n(self) -> int:
        return int(self.extent.shape[0])


@dataclass(frozen=True, slots=True)
class _Hubs:
    """Clusters that AOIs and annotated polygons are built around.

    ``site`` is the cluster of each hub; ``group`` the hub of each cluster (the
    nearest one). With few clusters every cluster is its own hub.
    """

    site: IdArray
    group: IdArray


@functools.lru_cache(maxsize=64)
def _utm_transformers(epsg: int) -> tuple[pyproj.Transformer, pyproj.Transformer]:
    """Transformers lon/lat -> UTM zone ``epsg`` and back."""
    return (
        pyproj.Transformer.from_crs(4326, epsg, always_xy=True),
        pyproj.Transformer.from_crs(epsg, 4326, always_xy=True),
    )


class _Frame:
    """The UTM zone (metres) of a lon/lat point, and the way back to lon/lat.

    Geometries go back vertex by vertex, without densifying, so their edges are
    straight lines in lon/lat.
    """

    def __init__(self, lon: float, lat: float) -> None:
        zone = min(60, max(1, math.floor((lon + 180.0) / 6.0) + 1))
        self.epsg = (32600 if lat >= 0 else 32700) + zone
        self._fwd, self._inv = _utm_transformers(self.epsg)

    def xy(self, lon: F64Array | float, lat: F64Array | float) -> tuple[F64Array, F64Array]:
        x, y = self._fwd.transform(np.asarray(lon, dtype=float), np.asarray(lat, dtype=float))
        return np.asarray(x, dtype=float), np.asarray(y, dtype=float)

    def to_lonlat(self, geom: shapely.Geometry) -> shapely.Geometry:
        return shapely.transform(geom, lambda xy: np.column_stack(self._inv.transform(xy[:, 0], xy[:, 1])))


def _box_points(bbox: F64Array) -> tuple[F64Array, F64Array]:
    """Corners, edge midpoints and centre of each lon/lat bbox in ``bbox`` (n, 4)."""
    bbox = np.atleast_2d(bbox)
    lon = np.stack([bbox[:, 0], (bbox[:, 0] + bbox[:, 2]) / 2, bbox[:, 2]], axis=1)
    lat = np.stack([bbox[:, 1], (bbox[:, 1] + bbox[:, 3]) / 2, bbox[:, 3]], axis=1)
    return np.repeat(lon, 3, axis=1).ravel(), np.tile(lat, (1, 3)).ravel()


def _centre(bbox: F64Array) -> tuple[float, float]:
    return float((bbox[0] + bbox[2]) / 2), float((bbox[1] + bbox[3]) / 2)


def _layer_boxes(layer: geopandas.GeoDataFrame) -> F64Array:
    """``(n, 4)`` lon/lat bboxes of the non-empty geometries of ``layer`` (of their bbox corners)."""
    bounds = layer.geometry.bounds.to_numpy(dtype=float)
    bounds = bounds[np.isfinite(bounds).all(axis=1)]
    if layer.crs is None or pyproj.CRS.from_user_input(layer.crs).equals(REF_CRS) or bounds.size == 0:
        return bounds.reshape(-1, 4)
    x = np.column_stack([bounds[:, 0], bounds[:, 0], bounds[:, 2], bounds[:, 2]])
    y = np.column_stack([bounds[:, 1], bounds[:, 3], bounds[:, 1], bounds[:, 3]])
    x, y = pyproj.Transformer.from_crs(layer.crs, REF_CRS, always_xy=True).transform(x, y)
    boxes = np.column_stack([x.min(axis=1), y.min(axis=1), x.max(axis=1), y.max(axis=1)])
    return boxes[np.isfinite(boxes).all(axis=1)]


def _components(pairs_a: IdArray, pairs_b: IdArray, n: int) -> IdArray:
    """Connected component of each of ``n`` nodes (dense labels), edges given both ways."""
    label = np.arange(n)
    while pairs_a.size:
        new = label.copy()
        np.minimum.at(new, pairs_a, label[pairs_b])
        new = new[new]
        if np.array_equal(new, label):
            break
        label = new
    return np.unique(label, return_inverse=True)[1].astype(np.int64)


def _group_boxes(boxes: F64Array, site: IdArray, n: int) -> F64Array:
    """``(n, 4)`` bbox of the ``boxes`` of each site (inf where a site has none)."""
    out = np.column_stack([np.full(n, np.inf), np.full(n, np.inf), np.full(n, -np.inf), np.full(n, -np.inf)])
    for k in range(4):
        (np.minimum if k < 2 else np.maximum).at(out[:, k], site, boxes[:, k])
    return out


def _find_sites(reference: geopandas.GeoDataFrame, predicted: geopandas.GeoDataFrame) -> _Sites:
    """Group the geometries of both layers into clusters (see :class:`_Sites`)."""
    ref_boxes, pred_boxes = _layer_boxes(reference), _layer_boxes(predicted)
    boxes = np.concatenate([ref_boxes, pred_boxes])
    n_boxes = boxes.shape[0]
    if n_boxes == 0:  # nothing to lay sites over: pretend there are small clusters at the anchors
        anchors = np.array(_SLOT_ANCHORS)
        box = np.column_stack([anchors - 0.01, anchors + 0.01])
        return _Sites(box, box.copy(), np.zeros(len(anchors), dtype=np.int64), np.zeros((len(anchors), 4), dtype=np.int64))
    # Link geometries whose bbox corners fall in neighbouring grid cells.
    x = np.concatenate([boxes[:, 0], boxes[:, 0], boxes[:, 2], boxes[:, 2]])
    y = np.concatenate([boxes[:, 1], boxes[:, 3], boxes[:, 1], boxes[:, 3]])
    ix = np.floor((x - x.min()) / _SITE_CELL_DEG).astype(np.int64)
    iy = np.floor((y - y.min()) / _SITE_CELL_DEG).astype(np.int64)
    stride = int(iy.max()) + 3  # keys of (ix, iy +- 1) never alias another column
    cells, corner_cell = np.unique(ix * stride + iy, return_inverse=True)
    a, b = [], []
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            if dx or dy:
                target = cells + dx * stride + dy
                pos = np.minimum(np.searchsorted(cells, target), cells.size - 1)
                hit = cells[pos] == target
                a.append(np.flatnonzero(hit))
                b.append(pos[hit])
    corner_site = _components(np.concatenate(a), np.concatenate(b), cells.size)[corner_cell.ravel()]
    # Each box goes with its first corner; boxes whose corners fell apart overlap, so
    # the merge below joins their clusters.
    site = np.unique(corner_site[:n_boxes], return_inverse=True)[1].astype(np.int64)
    # Merge clusters whose bboxes are less than _SITE_MERGE_KM apart.
    while True:
        n = int(site.max()) + 1
        extent = _group_boxes(boxes, site, n)
        gap_lon = np.maximum(0.0, np.maximum.outer(extent[:, 0], extent[:, 0]) - np.minimum.outer(extent[:, 2], extent[:, 2]))
        gap_lat = np.maximum(0.0, np.maximum.outer(extent[:, 1], extent[:, 1]) - np.minimum.outer(extent[:, 3], extent[:, 3]))
        mid_lat = np.deg2rad(np.add.outer(extent[:, 1] + extent[:, 3], extent[:, 1] + extent[:, 3]) / 4)
        gap_km = np.hypot(gap_lon * _KM_PER_DEG_LON * np.cos(mid_lat), gap_lat * _KM_PER_DEG_LAT)
        close_a, close_b = np.nonzero((gap_km < _SITE_MERGE_KM) & ~np.eye(n, dtype=bool))
        if close_a.size == 0:
            break
        site = _components(close_a, close_b, n)[site]
    ref_site, pred_site = site[: ref_boxes.shape[0]], site[ref_boxes.shape[0] :]
    n_ref = np.bincount(ref_site, minlength=n).astype(np.int64)
    core = np.where((n_ref > 0)[:, None], _group_boxes(ref_boxes, ref_site, n), extent)
    # Predictions wholly west, east, south or north of their cluster's reference bbox.
    c = core[pred_site]
    beyond = np.column_stack(
        [pred_boxes[:, 2] < c[:, 0], pred_boxes[:, 0] > c[:, 2], pred_boxes[:, 3] < c[:, 1], pred_boxes[:, 1] > c[:, 3]]
    )
    pred_beyond = np.stack([np.bincount(pred_site, weights=beyond[:, k], minlength=n) for k in range(4)], axis=1)
    return _Sites(extent, core, n_ref, pred_beyond.astype(np.int64))


def _make_hubs(sites: _Sites, n_main: int) -> _Hubs:
    """Every cluster when there are few; else spread-out clusters (farthest first) and their neighbours."""
    n_hubs = min(sites.n, max(1, n_main // 2))
    if n_hubs == sites.n:
        return _Hubs(np.arange(sites.n), np.arange(sites.n))
    lon = (sites.core[:, 0] + sites.core[:, 2]) / 2
    lat = (sites.core[:, 1] + sites.core[:, 3]) / 2

    def km_from(k: int) -> F64Array:
        return np.hypot((lon - lon[k]) * _KM_PER_DEG_LON * np.cos(np.deg2rad((lat + lat[k]) / 2)), (lat - lat[k]) * _KM_PER_DEG_LAT)

    chosen = [int(np.argmax(sites.n_ref))]
    nearest = km_from(chosen[0])
    distance = [nearest]
    while len(chosen) < n_hubs:
        chosen.append(int(np.argmax(nearest)))
        distance.append(km_from(chosen[-1]))
        nearest = np.minimum(nearest, distance[-1])
    return _Hubs(np.array(chosen, dtype=np.int64), np.argmin(np.stack(distance), axis=0).astype(np.int64))


def _polygon_only(geom: shapely.Geometry) -> shapely.Geometry:
    """The polygons of ``geom`` (a Polygon, MultiPolygon or empty Polygon)."""
    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    polys = [p for p in shapely.get_parts(geom) if p.geom_type == "Polygon" and not p.is_empty]
    if not polys:
        return shapely.Polygon()
    return polys[0] if len(polys) == 1 else shapely.MultiPolygon(polys)


def _core_frame(sites: _Sites, site: int) -> tuple[_Frame, float, float, float, float]:
    """UTM frame of a cluster's core, its centre there and its half width and height (>= 50 m)."""
    lon, lat = _centre(sites.core[site])
    frame = _Frame(lon, lat)
    cx, cy = frame.xy(lon, lat)
    px, py = frame.xy(*_box_points(sites.core[site]))
    return frame, float(cx), float(cy), max(float(np.abs(px - cx).max()), 50.0), max(float(np.abs(py - cy).max()), 50.0)


def _sector_aois(rng: np.random.Generator, sites: _Sites, hubs: _Hubs, n_main: int) -> GeomArray:
    """``n_main`` AOIs: a fan of sectors around each hub, lon/lat."""
    n_hubs = hubs.site.size
    weights = np.bincount(hubs.group, weights=sites.n_ref, minlength=n_hubs) + 1.0
    counts = 2 + rng.multinomial(n_main - 2 * n_hubs, weights / weights.sum())
    out = []
    for h, site in enumerate(hubs.site):
        frame, cx, cy, a, b = _core_frame(sites, int(site))
        apex = (cx + rng.uniform(-0.15, 0.15) * a, cy + rng.uniform(-0.15, 0.15) * b)
        ex, ey = frame.xy(*_box_points(sites.extent[hubs.group == h]))
        reach = float(np.hypot(ex - apex[0], ey - apex[1]).max())
        radius = max(1.15 * reach, rng.uniform(*_HUB_MIN_RADIUS_M))
        # Directions (and angular half widths) of the hub's other clusters, which the open wedge avoids.
        others = np.flatnonzero((hubs.group == h) & (np.arange(sites.n) != site))
        ox, oy = frame.xy(*_box_points(sites.extent[others]))
        ox, oy = ox.reshape(-1, 9) - apex[0], oy.reshape(-1, 9) - apex[1]
        dist = np.hypot(ox[:, 4], oy[:, 4])
        half = np.arcsin(np.minimum(1.0, np.hypot(ox - ox[:, 4:5], oy - oy[:, 4:5]).max(axis=1) / np.maximum(dist, 1.0)))
        avoid = np.column_stack([np.arctan2(oy[:, 4], ox[:, 4]), half + math.radians(5.0)])
        out.extend(frame.to_lonlat(g) for g in _fan(rng, apex, radius, math.hypot(a, b), int(counts[h]), avoid))
    geoms = np.array(out, dtype=object)
    if n_hubs >= 2:
        geoms = _clip_to_hub_cells(geoms, np.repeat(np.arange(n_hubs), counts), sites, hubs)
    return geoms


def _fan(
    rng: np.random.Generator, apex: tuple[float, float], radius: float, r_core: float, n: int, avoid: F64Array
) -> list[shapely.Polygon]:
    """``n`` sectors around ``apex`` (metres) that leave a wedge open.

    The open wedge misses the directions ``avoid[:, 0]`` (radians) by at least
    ``avoid[:, 1]`` when one of 16 random orientations allows it, so whole
    clusters of a hub's group are not left out.

    Neighbouring sectors share a boundary: a long straight edge from the apex out
    past the cluster, a bend, and a second edge out to the rim; the rim has a vertex
    every ~25 degrees. One shared boundary in each fan (and about half the others)
    is moved on one side, from a few band widths away from the apex out to the rim,
    by a band of 3-8 % of the cluster's radius into the neighbour, so the two
    sectors overlap there; about a fifth of the others are moved back by 1-3 %,
    which leaves a thin gap. Polygons are built from their vertices (no overlay),
    so they stay simple after a vertex-wise reprojection.
    """
    gap = math.radians(rng.uniform(*_FAN_GAP_DEG))
    min_width = math.radians(_MIN_SECTOR_DEG)
    widths = min_width + (2 * math.pi - gap - n * min_width) * rng.dirichlet(np.full(n, 4.0))
    fan = 2 * math.pi - gap
    starts = rng.uniform(0.0, 2 * math.pi, 16)
    # Angle of each direction to avoid past the start of the open wedge, in [0, 2 pi).
    past_gap_start = np.mod(avoid[None, :, 0] - (starts[:, None] + fan), 2 * math.pi)
    clear = ((past_gap_start > gap + avoid[None, :, 1]) & (past_gap_start < 2 * math.pi - avoid[None, :, 1])).all(axis=1)
    theta = starts[int(np.argmax(clear))] + np.r_[0.0, np.cumsum(widths)]
    kink_r = np.minimum(np.maximum(1.3 * r_core, rng.uniform(0.4, 0.6, n + 1) * radius), 0.75 * radius)
    outer_theta = theta + np.deg2rad(rng.uniform(-5.0, 5.0, n + 1))
    outer_r = radius * rng.uniform(0.95, 1.2, n + 1)
    apex_xy = np.asarray(apex, dtype=float)
    kink = apex_xy + kink_r[:, None] * np.column_stack([np.cos(theta), np.sin(theta)])
    outer = apex_xy + outer_r[:, None] * np.column_stack([np.cos(outer_theta), np.sin(outer_theta)])
    base = [np.stack([kink[j], outer[j]]) for j in range(n + 1)]  # each boundary from the apex outwards
    # Inner boundaries 1 .. n-1: 0 shared, 1 overlap, 2 gap; the sector on one side
    # ("mover") gets the moved copy, the other keeps the base line.
    seen_by = [[b, b] for b in base]  # [as the end of sector j - 1, as the start of sector j]
    if n >= 2:
        mode = rng.choice(3, n - 1, p=[0.3, 0.5, 0.2])
        mode[rng.integers(0, n - 1)] = 1
        band = np.where(
            mode == 1,
            np.clip(rng.uniform(0.03, 0.08, n - 1) * r_core, 30.0, 1_500.0),
            np.clip(rng.uniform(0.01, 0.03, n - 1) * r_core, 15.0, 500.0),
        )
        lower_moves = rng.random(n - 1) < 0.5
        for k in np.flatnonzero(mode):
            j = k + 1  # boundary between sectors j - 1 (lower angles) and j
            start = 3.0 * band[k] / math.sin(min(widths[j - 1], widths[j], math.pi / 2))
            if start >= 0.9 * kink_r[j]:
                continue
            # +1: towards sector j (larger angles). An overlap moves the boundary
            # into the other sector, a gap into the mover's own.
            towards_upper = lower_moves[k] == (mode[k] == 1)
            moved = _offset_line(np.vstack([apex_xy, base[j]]), start, float(band[k]) * (1.0 if towards_upper else -1.0))
            seen_by[j][0 if lower_moves[k] else 1] = moved
    sectors = []
    for i in range(n):
        first, last = seen_by[i][1], seen_by[i + 1][0]
        a0, a1 = outer_theta[i], outer_theta[i + 1]
        m = max(0, math.ceil((a1 - a0) / math.radians(_ARC_STEP_DEG)) - 1)
        t = (np.arange(1, m + 1) + rng.uniform(-0.25, 0.25, m)) / (m + 1)
        r = radius * rng.uniform(0.95, 1.2, m)
        arc = apex_xy + r[:, None] * np.column_stack([np.cos(a0 + t * (a1 - a0)), np.sin(a0 + t * (a1 - a0))])
        sectors.append(shapely.Polygon(np.vstack([apex_xy[None], first, arc, last[::-1]])))
    return sectors


def _offset_line(line: F64Array, start: float, offset: float) -> F64Array:
    """``line`` (apex, kink, outer) without the apex, moved sideways by ``offset`` from ``start`` metres on.

    Positive offsets go to the left of the line (towards larger angles around the
    apex). Returns the vertices after the apex: the point at ``start``, its moved
    copy, the moved kink (mitred) and the moved outer end.
    """
    d1 = (line[1] - line[0]) / np.linalg.norm(line[1] - line[0])
    d2 = (line[2] - line[1]) / np.linalg.norm(line[2] - line[1])
    n1, n2 = np.array([-d1[1], d1[0]]), np.array([-d2[1], d2[0]])
    at = line[0] + start * d1
    mitre = (n1 + n2) / (1.0 + float(n1 @ n2))
    return np.stack([at, at + offset * n1, line[1] + offset * mitre, line[2] + offset * n2])


def _clip_to_hub_cells(geoms: GeomArray, hub_of: IdArray, sites: _Sites, hubs: _Hubs) -> GeomArray:
    """Cut each hub's AOIs to the hub's Voronoi cell (lon scaled by cos(lat)), where they stick out."""
    centres = np.array([_centre(sites.core[s]) for s in hubs.site])
    scale = math.cos(math.radians(float(centres[:, 1].mean())))
    factor = np.array([scale, 1.0])
    points = centres * factor
    lo, hi = points.min(axis=0) - 1_000.0, points.max(axis=0) + 1_000.0
    cells = shapely.get_parts(shapely.voronoi_polygons(shapely.multipoints(points), extend_to=shapely.box(*lo, *hi)))
    cell_of_hub = [cells[np.flatnonzero(shapely.contains_xy(cells, *p))[0]] for p in points]
    out = geoms.copy()
    for k, geom in enumerate(geoms):
        scaled = shapely.transform(geom, lambda xy: xy * factor)
        cell = cell_of_hub[hub_of[k]]
        if not shapely.contains(cell, scaled):
            clipped = _polygon_only(shapely.intersection(scaled, cell))
            out[k] = shapely.transform(clipped, lambda xy: xy / factor)
    return out[~shapely.is_empty(out)]


def _star(
    rng: np.random.Generator,
    centre: tuple[float, float],
    radius: float,
    n_vertices: int,
    *,
    angle_jitter: float,
    radius_jitter: tuple[float, float],
) -> shapely.Polygon:
    """A star-shaped polygon: vertex j at angle ``phase + 2 pi (j + da) / n`` and radius ``radius (1 + dr)``."""
    j = np.arange(n_vertices)
    angle = rng.uniform(0, 2 * math.pi) + 2 * math.pi * (j + rng.uniform(-angle_jitter, angle_jitter, n_vertices)) / n_vertices
    r = radius * (1.0 + rng.uniform(*radius_jitter, n_vertices))
    return shapely.Polygon(np.column_stack([centre[0] + r * np.cos(angle), centre[1] + r * np.sin(angle)]))


def _empty_aois(rng: np.random.Generator, sites: _Sites, taken: GeomArray, n_empty: int) -> GeomArray:
    """``n_empty`` star-shaped AOIs of 18-35 km radius that touch no cluster, lon/lat.

    Centres are drawn within 1 degree of the data; first those that also overlap
    no other AOI are taken, then those that overlap none of each other; if that is
    not enough, the rest go in a row south of the data.
    """
    ext = sites.extent
    c = _EMPTY_CLEARANCE_DEG
    keep_out = shapely.union_all(shapely.box(ext[:, 0] - c, ext[:, 1] - c, ext[:, 2] + c, ext[:, 3] + c))
    lon = rng.uniform(ext[:, 0].min() - 1.0, ext[:, 2].max() + 1.0, _EMPTY_TRIES)
    lat = np.clip(rng.uniform(ext[:, 1].min() - 1.0, ext[:, 3].max() + 1.0, _EMPTY_TRIES), -80.0, 80.0)
    radius = rng.uniform(*_EMPTY_RADIUS_M, _EMPTY_TRIES)
    n_vertices = rng.integers(8, 13, _EMPTY_TRIES)
    shape_seeds = rng.integers(0, 2**63, _EMPTY_TRIES)

    def star_at(k: int, lon_k: float, lat_k: float) -> shapely.Geometry:
        frame = _Frame(lon_k, lat_k)
        x, y = frame.xy(lon_k, lat_k)
        star = _star(np.random.default_rng(int(shape_seeds[k])), (float(x), float(y)), float(radius[k]),
                     int(n_vertices[k]), angle_jitter=0.3, radius_jitter=(-0.2, 0.2))  # fmt: skip
        return frame.to_lonlat(star)

    chosen: list[shapely.Geometry] = []
    used: set[int] = set()
    for avoid_aois in (True, False):
        for k in range(_EMPTY_TRIES):
            if len(chosen) == n_empty:
                break
            if k in used:
                continue
            star = star_at(k, float(lon[k]), float(lat[k]))
            blocked = [keep_out, *chosen, *(taken if avoid_aois else ())]
            if not shapely.intersects(star, np.array(blocked, dtype=object)).any():
                chosen.append(star)
                used.add(k)
    k = 0
    while len(chosen) < n_empty:  # only when the data fill their whole region
        chosen.append(star_at(k, float(ext[:, 0].min()) + 1.0 * len(chosen), float(ext[:, 1].min()) - 1.5))
        k += 1
    return np.array(chosen, dtype=object)


def _annotated_areas(rng: np.random.Generator, sites: _Sites, hubs: _Hubs) -> GeomArray:
    """Annotated Polygons: a star around each hub's clusters (some cut in two overlapping halves), minus bites.

    Each cluster loses the area beyond one side of its reference bbox (from up to
    12 % of its half size inside the bbox) -- the side with the most predictions
    beyond it, so those false positives lie outside -- and 1-2 round bites
    centred on the edge of its reference bbox, of 35-60 % of its smaller half
    side, so the fields and predictions there lie outside the annotated area.
    """
    n_hubs = hubs.site.size
    split = rng.random(n_hubs) < 0.5
    split[rng.integers(0, n_hubs)] = True
    parts = []
    for h, site in enumerate(hubs.site):
        frame, cx, cy, _, _ = _core_frame(sites, int(site))
        qx, qy = frame.xy(*_box_points(sites.core[hubs.group == h]))
        reach = max(float(np.hypot(qx - cx, qy - cy).max()), 200.0)
        radius = reach * rng.uniform(1.15, 1.4)
        star = _star(rng, (cx, cy), radius, int(rng.integers(12, 17)), angle_jitter=0.25, radius_jitter=(0.0, 0.15))
        if split[h]:
            phi = rng.uniform(0.0, math.pi)
            overlap = rng.uniform(0.03, 0.08) * reach
            big = 4.0 * radius
            for side in (1.0, -1.0):
                base = np.array([cx, cy]) - side * overlap * np.array([math.cos(phi), math.sin(phi)])
                along = big * np.array([-math.sin(phi), math.cos(phi)])
                across = side * big * np.array([math.cos(phi), math.sin(phi)])
                half = shapely.Polygon([base - along, base + along, base + along + across, base - along + across])
                parts.append(frame.to_lonlat(_polygon_only(shapely.intersection(star, half))))
        else:
            parts.append(frame.to_lonlat(star))
    bites = []
    for site in range(sites.n):
        frame, cx, cy, a, b = _core_frame(sites, site)
        # Cut the area off along one side of the cluster, the side with the most
        # predictions beyond it (false positives outside the cluster) if any.
        side = int(np.argmax(sites.pred_beyond[site] + rng.random(4)))
        ex, ey = frame.xy(*_box_points(sites.extent[site]))
        # Past the whole star of a cluster that is its own hub; else only near the cluster.
        alone = np.count_nonzero(hubs.group == hubs.group[site]) == 1
        margin = 1.7 * math.hypot(a, b) + 5_000.0 if alone else 5_000.0
        x0, y0, x1, y1 = ex.min() - margin, ey.min() - margin, ex.max() + margin, ey.max() + margin
        inward = rng.uniform(-0.02, 0.12)
        cut = [
            (x0, y0, cx - a * (1.0 - inward), y1),
            (cx + a * (1.0 - inward), y0, x1, y1),
            (x0, y0, x1, cy - b * (1.0 - inward)),
            (x0, cy + b * (1.0 - inward), x1, y1),
        ][side]
        bites.append(frame.to_lonlat(shapely.box(*cut)))
        for _ in range(int(rng.integers(1, 3))):
            side, t = int(rng.integers(0, 4)), rng.uniform(-0.7, 0.7)
            x, y = [(cx - a, cy + t * b), (cx + a, cy + t * b), (cx + t * a, cy - b), (cx + t * a, cy + b)][side]
            r = rng.uniform(0.35, 0.6) * min(a, b)
            bites.append(frame.to_lonlat(_star(rng, (x, y), r, 14, angle_jitter=0.1, radius_jitter=(-0.1, 0.1))))
    bitten = shapely.difference(np.array(parts, dtype=object), shapely.union_all(bites))
    # A bite can cut a polygon in two: each piece becomes a row of its own.
    pieces = shapely.get_parts(np.array([_polygon_only(g) for g in bitten], dtype=object))
    return pieces[~shapely.is_empty(pieces)]
