"""The two yardsticks evalcore is measured against, on the same data.

* :func:`straightforward` — what one would write with geopandas + shapely in the obvious
  way: ``sjoin`` for candidate pairs, shapely operations pair by pair for IoU, a Python
  greedy matching, per-sample ``shapely.distance`` for boundary distances, and a
  buffered boundary intersection for the tolerance lengths.
* :func:`geos_floor` — the part no implementation can skip: repair, reprojection to the
  equal-area CRS, an STRtree query and the intersection area of every candidate pair.
"""

from __future__ import annotations

import geopandas
import numpy as np
import shapely

EA = "EPSG:6933"


def _repair(gdf: geopandas.GeoDataFrame) -> geopandas.GeoDataFrame:
    gdf = gdf[~gdf.geometry.isna() & ~gdf.geometry.is_empty].copy()
    gdf["geometry"] = shapely.make_valid(gdf.geometry.values, method="structure", keep_collapsed=False)
    gdf = gdf[gdf.geometry.geom_type.isin(["Polygon", "MultiPolygon"])]
    return gdf


def _floor_layer(gdf: geopandas.GeoDataFrame) -> np.ndarray:
    """The least preparation any evaluator needs: repair the invalid rows, reproject vertex by vertex."""
    geoms = np.asarray(gdf.geometry.array, dtype=object)
    geoms = geoms[~shapely.is_missing(geoms)]
    geoms = geoms[~shapely.is_empty(geoms)]
    invalid = ~shapely.is_valid(geoms)
    geoms[invalid] = shapely.make_valid(geoms[invalid], method="structure", keep_collapsed=False)
    return np.asarray(geopandas.GeoSeries(geoms, crs=gdf.crs).to_crs(EA).array, dtype=object)


def geos_floor(pred: geopandas.GeoDataFrame, ref: geopandas.GeoDataFrame) -> int:
    """Repair, reproject, STRtree query, intersection area of every candidate pair; returns the pair count."""
    p = _floor_layer(pred)
    r = _floor_layer(ref)
    i_ref, i_pred = shapely.STRtree(p).query(r, predicate="intersects")
    areas = shapely.area(shapely.intersection(r[i_ref], p[i_pred]))
    return int((areas > 0).sum())


def straightforward(
    pred: geopandas.GeoDataFrame,
    ref: geopandas.GeoDataFrame,
    *,
    iou_threshold: float = 0.5,
    spacing_m: float = 1.0,
    tolerance_m: float | None = None,
    max_pairs: int | None = None,
) -> dict:
    """The obvious implementation. ``max_pairs`` limits the per-pair loops (the caller scales the time)."""
    p = _repair(pred).to_crs(EA).reset_index(drop=True)
    r = _repair(ref).to_crs(EA).reset_index(drop=True)
    joined = geopandas.sjoin(r, p, how="inner", predicate="intersects")
    i_ref = joined.index.to_numpy()
    i_pred = joined["index_right"].to_numpy()
    if max_pairs is not None:
        i_ref, i_pred = i_ref[:max_pairs], i_pred[:max_pairs]
    pairs = []
    for a, b in zip(i_ref, i_pred):  # pair by pair, as such code usually does
        ga, gb = r.geometry.iloc[a], p.geometry.iloc[b]
        inter = ga.intersection(gb).area
        if inter > 0:
            pairs.append((ga.area and inter / (ga.area + gb.area - inter), a, b))
    pairs.sort(key=lambda t: (-t[0], t[1], t[2]))
    taken_r, taken_p, matches = set(), set(), []
    for iou, a, b in pairs:
        if iou >= iou_threshold and a not in taken_r and b not in taken_p:
            taken_r.add(a)
            taken_p.add(b)
            matches.append((a, b, iou))
    # Distances in the reference's UTM zone, per sample.
    r_utm_crs = r.estimate_utm_crs()
    r_utm = r.to_crs(r_utm_crs).geometry
    p_utm = p.to_crs(r_utm_crs).geometry
    hausdorff = []
    for a, b, _ in matches:
        ba, bb = r_utm.iloc[a].boundary, p_utm.iloc[b].boundary
        sa = shapely.get_coordinates(shapely.segmentize(ba, spacing_m))
        sb = shapely.get_coordinates(shapely.segmentize(bb, spacing_m))
        da = shapely.distance(shapely.points(sa), bb)
        db = shapely.distance(shapely.points(sb), ba)
        hausdorff.append(max(da.max(), db.max()))
    out = {"n_pairs": len(pairs), "tp": len(matches), "hausdorff_mean_m": float(np.mean(hausdorff)) if hausdorff else float("nan")}
    if tolerance_m is not None:
        other = shapely.STRtree(p_utm.boundary.values)
        within = 0.0
        rows = range(len(r_utm)) if max_pairs is None else range(min(len(r_utm), max_pairs))
        for a in rows:
            line = r_utm.iloc[a].boundary
            near = other.query(line, predicate="dwithin", distance=tolerance_m)
            if len(near):
                zone = shapely.buffer(shapely.union_all(p_utm.boundary.values[near]), tolerance_m, quad_segs=64)
                within += shapely.intersection(line, zone).length
        out["ref_within_tol_m"] = within
    return out
