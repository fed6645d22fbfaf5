"""Seam-heavy layers for the differential tests of the distributed engine.

A grid of 150 m fields straddling the UTM zone 12/13 boundary (longitude -108) near
latitude 40, so that with 2 km tiles almost every kind of seam occurs:

* fields whose polygon crosses the zone boundary (their home is their centroid's zone),
* predictions that merge two neighbours across a tile edge,
* one prediction overlapping reference fields of three partitions,
* boundaries within the tolerance of polygons of another partition (halos),
* unassigned false positives, missed fields, and strata with a missing value.
"""

from __future__ import annotations

import geopandas
import numpy as np
import shapely
from shapely.geometry import box

from evalcore.crs import transform_geoms
from pyproj import CRS

ZONE13 = CRS.from_epsg(32613)
# Easting of longitude -108 at latitude 40 in zone 13 (the zone's western edge).
X_EDGE = 243_900.0
Y0 = 4_430_000.0


def seam_layers(seed: int = 0, n_x: int = 40, n_y: int = 14, side: float = 150.0, gap: float = 12.0):
    """Return (predicted, reference) GeoDataFrames; predicted in EPSG:4326, reference in zone 13."""
    rng = np.random.default_rng(seed)
    step = side + gap
    x0 = X_EDGE - (n_x // 2) * step
    ref_geoms, strata = [], []
    pred_geoms = []
    for j in range(n_y):
        for i in range(n_x):
            x, y = x0 + i * step, Y0 + j * step
            ref = box(x, y, x + side, y + side)
            ref_geoms.append(ref)
            strata.append(None if (i + j) % 17 == 0 else f"s{(i // 7) % 4}")
            roll = rng.random()
            if roll < 0.70:  # good match, small shift
                dx, dy = rng.normal(0, 2.0, 2)
                pred_geoms.append(shapely.affinity.translate(ref, dx, dy))
            elif roll < 0.80 and i + 1 < n_x:  # merge with the right neighbour (across tile edges too)
                pred_geoms.append(box(x - 1, y - 1, x + step + side + 1, y + side + 1))
            elif roll < 0.88:  # split in two
                pred_geoms.append(box(x, y, x + side / 2 - 1, y + side))
                pred_geoms.append(box(x + side / 2 + 1, y, x + side, y + side))
            elif roll < 0.95:  # dilated
                pred_geoms.append(ref.buffer(4.0, join_style="mitre"))
            # else: missed
    # One prediction across three 2 km tiles: a long thin strip over a row of fields.
    pred_geoms.append(box(x0 + 2.5 * step, Y0 + 5 * step + 40, x0 + 2.5 * step + 4_500, Y0 + 5 * step + 110))
    # Unassigned false positives outside the grid.
    for k in range(6):
        pred_geoms.append(box(x0 - 3_000 - k * 400, Y0, x0 - 2_800 - k * 400, Y0 + 200))
    # A reference field crossing the zone boundary, its centroid west of it.
    ref_geoms.append(box(X_EDGE - 400, Y0 - 600, X_EDGE + 100, Y0 - 450))
    strata.append("s0")
    pred_geoms.append(box(X_EDGE - 395, Y0 - 598, X_EDGE + 98, Y0 - 452))
    reference = geopandas.GeoDataFrame({"stratum": strata}, geometry=ref_geoms, crs=ZONE13)
    pred = np.asarray(pred_geoms, dtype=object)
    predicted = geopandas.GeoDataFrame(
        {"score": rng.random(len(pred))},
        geometry=transform_geoms(pred, ZONE13, CRS.from_epsg(4326)),
        crs="EPSG:4326",
    )
    return predicted, reference


def strip_layers(seed: int = 0, n_x: int = 60, n_y: int = 8, side: float = 150.0, gap: float = 12.0):
    """Return (predicted, reference) in zone 13 where connected components span many partitions.

    Rows of 150 m fields; over every other row, long thin predictions (1 to 5 km) that
    overlap a whole run of fields, and over those fields their own good predictions, so
    that a strip, the fields under it and their predictions are one component reaching
    across 2 km partitions (3 or more of them for the longer strips). Strips of adjacent
    rows overlap end to end through a shared diagonal field, chaining components further.
    """
    rng = np.random.default_rng(seed)
    step = side + gap
    x0 = 500_000.0
    ref_geoms, strata, pred_geoms = [], [], []
    for j in range(n_y):
        y = Y0 + j * step
        for i in range(n_x):
            x = x0 + i * step
            ref_geoms.append(box(x, y, x + side, y + side))
            strata.append(f"s{(i + j) % 3}")
            if rng.random() < 0.8:
                dx, dy = rng.normal(0, 3.0, 2)
                pred_geoms.append(box(x + dx, y + dy, x + side + dx, y + side + dy))
        if j % 2 == 0:
            start = 0
            while start < n_x - 2:
                length = int(rng.integers(6, 32))
                end = min(n_x, start + length)
                pred_geoms.append(box(x0 + start * step + 5, y + 50, x0 + (end - 1) * step + side - 5, y + 100))
                start = end - 1  # strips of one row share their end field: a chain along the row
            # A diagonal link to the next row's fields.
            k = int(rng.integers(0, n_x - 1))
            pred_geoms.append(box(x0 + k * step + 20, y + side - 30, x0 + k * step + side - 20, y + step + 30))
    reference = geopandas.GeoDataFrame({"stratum": strata}, geometry=ref_geoms, crs=ZONE13)
    predicted = geopandas.GeoDataFrame({"score": rng.random(len(pred_geoms))}, geometry=pred_geoms, crs=ZONE13)
    return predicted, reference
