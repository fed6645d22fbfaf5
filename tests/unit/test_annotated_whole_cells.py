"""The annotated fraction of a polygon inside whole cells of the annotated area is 1 exactly.

A prediction across a grid line inside the annotated area was measured as the sum of its
pieces' intersection areas over its area: 1 give or take their rounding (0.9999999999999996
for ``ACROSS`` below, before this change). It is now 1 exactly, from the grid alone, in both the in-memory
pieces and the stored cell index (:func:`evalcore.levels.annotated_fractions`).
"""

from __future__ import annotations

import numpy as np
import pytest
import shapely
from shapely.geometry import Polygon, box

from evalcore.levels import AnnotatedArea, _full_squares, annotated_fractions
from evalcore.site_cells import cut_layer, write_cell_pieces
from evalcore.sites import grid_pieces

CELL = 100.0
# Inside a 400 m square annotated area whose edges are on grid lines (its outer cells are
# clipped cells the union covers whole, its inner ones whole cells): across cells (2, 1) and
# (2, 2), and in the box of cells x 1-2, y 1-2 without touching cell (2, 1).
ACROSS = Polygon([(258.986, 183.656), (208.927, 114.961), (245.632, 206.866)])
TRIANGLE = Polygon([(202.128, 281.083), (135.949, 280.757), (166.13, 186.199)])


def _both(annotated_geoms, fields, tmp_path):
    geoms = np.asarray(annotated_geoms, dtype=object)
    fields = np.asarray(fields, dtype=object)
    area = shapely.area(fields)
    in_memory = AnnotatedArea(geoms, "annotated (test)", pieces=grid_pieces(geoms, CELL), cell_m=CELL)
    stored = AnnotatedArea(geoms, "annotated (test)", cells=write_cell_pieces(cut_layer([geoms], CELL), tmp_path))
    return annotated_fractions(in_memory, fields, area), annotated_fractions(stored, fields, area)


def _by_pieces(field, annotated):
    """The field's intersection with the union, cell by cell, summed, over its area."""
    union = shapely.union_all(np.asarray(annotated, dtype=object))
    total = 0.0
    for y in range(-2, 8):
        for x in range(-2, 8):
            total += shapely.area(shapely.intersection(field, shapely.intersection(union, box(x * CELL, y * CELL, (x + 1) * CELL, (y + 1) * CELL))))
    return total / field.area


def test_a_polygon_across_whole_cells_is_wholly_annotated(tmp_path):
    in_memory, stored = _both([box(0, 0, 400, 400)], [ACROSS, TRIANGLE], tmp_path)
    assert in_memory.tolist() == [1.0, 1.0] and stored.tolist() == [1.0, 1.0]


def test_a_polygon_whose_box_reaches_a_cell_outside_is_measured(tmp_path):
    # The same triangle, with the annotated area cut back so that the cell (2, 1) of its box
    # (which the triangle does not touch: x 200-300, y 100-200) is not annotated: no longer a
    # range of whole cells, so it is measured, and it still lies wholly inside the union.
    annotated = [box(0, 0, 200, 400), box(200, 200, 400, 400)]
    assert not TRIANGLE.intersects(box(200, 100, 300, 200))
    in_memory, stored = _both(annotated, [TRIANGLE], tmp_path)
    assert in_memory.tobytes() == stored.tobytes()
    assert in_memory[0] == pytest.approx(_by_pieces(TRIANGLE, annotated), abs=1e-12)


def test_a_polygon_across_the_annotated_edge_keeps_its_share(tmp_path):
    field = box(350, 150, 450, 250)  # half inside a 400 m square
    in_memory, stored = _both([box(0, 0, 400, 400)], [field], tmp_path)
    assert in_memory.tolist() == [0.5] and stored.tolist() == [0.5]


def test_full_squares():
    cell = box(100, 200, 200, 300)
    diamond = Polygon([(150, 200), (200, 250), (150, 300), (100, 250)])  # the cell's box, not the cell
    holed = Polygon(cell.exterior.coords, [[(140, 240), (160, 240), (160, 260), (140, 260)]])
    clipped = shapely.clip_by_rect(box(0, 0, 1000, 1000), 100, 200, 200, 300)  # a clipped cell the union covers
    half = box(100, 200, 150, 300)
    off_grid = box(110, 200, 210, 300)
    got = _full_squares(np.asarray([cell, diamond, holed, clipped, half, off_grid], dtype=object), CELL)
    assert got.tolist() == [True, False, False, True, False, False]
