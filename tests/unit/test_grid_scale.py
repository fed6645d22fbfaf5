"""The tolerance kernel's grid: its scale (the mean segment length, a numba loop) by hand,
and the promise that the cell size changes the speed only, never a bit of the lengths."""

from __future__ import annotations

import numpy as np
import shapely
from shapely.geometry import Polygon

from evalcore import _kernels
from evalcore.boundary import _flatten, _grid_cell


def _rings(*rings):
    x = np.concatenate([np.asarray(r, dtype=float)[:, 0] for r in rings]) if rings else np.empty(0)
    y = np.concatenate([np.asarray(r, dtype=float)[:, 1] for r in rings]) if rings else np.empty(0)
    off = np.concatenate([[0], np.cumsum([len(r) for r in rings])]).astype(np.int64)
    return x, y, off


def test_mean_segment_length_by_hand():
    triangle = [(0, 0), (3, 0), (3, 4), (0, 0)]  # segments 3, 4, 5
    square = [(10, 10), (11, 10), (11, 11), (10, 11), (10, 10)]  # four of 1
    assert _kernels._mean_segment_length(*_rings(triangle)) == 4.0
    # No segment joins the triangle's last point to the square's first.
    assert _kernels._mean_segment_length(*_rings(triangle, square)) == 16.0 / 7.0
    assert _kernels._mean_segment_length(*_rings([(5, 5)], triangle)) == 4.0  # a lone point adds no segment
    assert _kernels._mean_segment_length(*_rings()) == 0.0


def test_the_cell_changes_no_bit_of_the_lengths():
    rng = np.random.default_rng(11)

    def fields(n, jitter):
        out = []
        for k in range(n):
            cx, cy = rng.uniform(0, 2_000, 2)
            angles = np.sort(rng.uniform(0, 2 * np.pi, 9))
            radius = rng.uniform(20, 120) * (1 + jitter * rng.random(9))
            out.append(shapely.make_valid(Polygon(np.column_stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)]))))
        return np.array([g for g in out if g.geom_type in ("Polygon", "MultiPolygon")], dtype=object)

    query, other = fields(150, 0.3), fields(170, 0.5)
    qx, qy, q_ring, q_geom = _flatten(query)
    ox, oy, o_ring, _ = _flatten(other)
    tol = 10.0
    chosen = _grid_cell(qx, qy, q_ring, ox, oy, o_ring, tol)
    lengths = [
        _kernels._boundary_within_tolerance(qx, qy, q_ring, q_geom, ox, oy, o_ring, tol, cell).tobytes()
        for cell in (chosen, 0.37 * chosen + 4 * tol, 3.1 * chosen, 4 * tol, 2_500.0)
    ]
    assert all(b == lengths[0] for b in lengths[1:])
    assert (np.frombuffer(lengths[0]) > 0).sum() > 50  # something is measured
