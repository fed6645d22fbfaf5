"""The overlapping pairs (:func:`evalcore.pairs.candidate_pairs`): found by their boxes and
kept by a positive intersection area, without GEOS's intersects predicate. Disjoint
polygons whose boxes meet (a field in another's notch, a hair apart) and polygons that
only touch are not pairs; on jittered field grids the table is the one the STRtree with the
intersects predicate gave."""

from __future__ import annotations

import geopandas
import numpy as np
import pytest
import shapely
from shapely.geometry import Polygon, box

from evalcore.pairs import candidate_pairs, intersection_areas
from evalcore.prepare import prepare_layer

CRS = "EPSG:6933"  # the equal-area CRS itself: the geometries are measured as given


def _layer(geoms, name):
    return prepare_layer(geopandas.GeoDataFrame(geometry=list(geoms), crs=CRS), name)


def _by_predicate(ref, pred):
    """The pairs as the STRtree with GEOS's intersects predicate selected them, areas > 0."""
    i, j = shapely.STRtree(pred.geoms_ea).query(ref.geoms_ea, predicate="intersects")
    inter = intersection_areas(ref.geoms_ea[i], pred.geoms_ea[j])
    keep = inter > 0
    return sorted(zip(ref.positions[i[keep]].tolist(), pred.positions[j[keep]].tolist(), inter[keep].tolist()))


def _table(ref, pred):
    t = candidate_pairs(ref, pred)
    return list(zip(t.ref_pos.tolist(), t.pred_pos.tolist(), t.inter_m2.tolist()))


def test_disjoint_touching_and_overlapping():
    # An L of 100 m with a 60 m notch; its box holds the notch.
    ell = Polygon([(0, 0), (100, 0), (100, 40), (40, 40), (40, 100), (0, 100)])
    ref = _layer([ell], "reference")
    pred = _layer([
        box(50, 50, 90, 90),  # in the notch: boxes meet, polygons do not
        box(40 + 1e-7, 40 + 1e-7, 60, 60),  # a hair from the inner corner
        box(100, 0, 120, 40),  # shares an edge: touches, area 0
        box(90, 30, 110, 50),  # overlaps the arm by 10 x 10
    ], "predicted")
    assert np.all(shapely.bounds(pred.geoms_ea)[:3, 0] <= 100)  # every box meets the L's box
    assert _table(ref, pred) == [(0, 3, pytest.approx(100.0, rel=1e-12))]
    assert _table(ref, pred) == _by_predicate(ref, pred)


@pytest.mark.parametrize("seed", range(4))
def test_the_table_of_the_predicate_on_jittered_grids(seed):
    rng = np.random.default_rng(seed)

    def grid(n, side, jitter, shift):
        geoms = []
        for gx in range(n):
            for gy in range(n):
                x0, y0 = gx * side + shift, gy * side + shift
                corners = np.array([(x0, y0), (x0 + side, y0), (x0 + side, y0 + side), (x0, y0 + side)], dtype=float)
                # Exact shared edges for some fields, gaps or overlaps of 1e-9 to 5 m for others.
                corners += rng.choice([0.0, 1e-9, -1e-9, 0.5, -0.5, 5.0], size=corners.shape) * (rng.random(corners.shape) < 0.5)
                geoms.append(shapely.make_valid(Polygon(corners)))
        return [g for g in geoms if g.geom_type in ("Polygon", "MultiPolygon") and g.area > 0]

    ref = _layer(grid(14, 100.0, 5.0, 0.0), "reference")
    pred = _layer(grid(15, 93.0, 5.0, 7.0 * seed), "predicted")
    got = _table(ref, pred)
    assert got == _by_predicate(ref, pred)
    assert len(got) > 300
