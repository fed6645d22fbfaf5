"""Site layers' grid pieces kept as a cell index and a store of boundary pieces.

A site layer's lookups (:func:`evalcore.levels.first_aoi`,
:func:`evalcore.levels.annotated_fractions`) test rows against its grid pieces
(:func:`evalcore.sites.grid_pieces`): whole squares for the cells inside a polygon, the
polygon clipped to the cell where its boundary crosses. At national extent that is
over a million shapely objects (918 MiB at the 1M fields' extent), most of them whole
squares, and the distributed runner used to hold them on the client and on every
worker. Here a layer's pieces are

* the **cell index**: the ranges of whole cells of each owner (an AOI's position, or 0
  for the annotated area's union), a few integers per range and no geometry;
* the **boundary pieces**, written once to the work directory in blocks of
  :data:`BLOCK_CELLS` x :data:`BLOCK_CELLS` cells (WKB: every coordinate's bits kept).

:meth:`CellPieces.pieces_in` gives the pieces of a range of cells, reading only the
blocks that range meets and building squares only for its whole cells: the same
geometries, in the same order (owner, then row-major cells) as the whole layer's pieces,
so a lookup made on them gives the same answer, to the bit, for rows inside the range
(the lookups' sums run in piece order; see :func:`evalcore.levels.annotated_fractions`).
:meth:`CellPieces.sole_owner` answers without any geometry for a row strictly inside a
whole cell that no other piece shares.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import shapely

from evalcore._typing import GeomArray, IdArray
from evalcore.sites import GRID_CELL_M, cell_boxes, grid_cells, whole_cells

__all__ = ["BLOCK_CELLS", "CellPieces", "cut_layer", "write_cell_pieces", "cells_of_bounds"]

BLOCK_CELLS = 16
"""Side of a block of boundary pieces in the store, in cells (32 km with 2 km cells):
a prepare chunk or a partition reads the few blocks its rows' extent meets."""


@dataclass(frozen=True, slots=True)
class CellPieces:
    """One site layer's grid pieces: whole cells by range, boundary pieces in memory or in a store.

    Attributes
    ----------
    cell_m : float
        Side of the grid cells, metres (equal-area CRS).
    whole : ndarray of int64, shape (m, 5)
        ``x0, x1, y0, y1, owner`` (ends exclusive): ranges of cells wholly inside the
        owner's polygon.
    x, y, owner : ndarray of int64, shape (n,)
        The boundary cells and their owners (the store's table of contents).
    pieces : ndarray of shapely geometries or None, shape (n,)
        The boundary pieces when held in memory; None when they are in ``directory``.
    directory : str or None
        Where the blocks of boundary pieces are (``block_<bx>_<by>.npz``).
    """

    cell_m: float
    whole: IdArray
    x: IdArray
    y: IdArray
    owner: IdArray
    pieces: GeomArray | None = None
    directory: str | None = None

    @property
    def n_pieces(self) -> int:
        """Pieces of the whole layer (boundary pieces plus whole cells)."""
        w = self.whole
        return len(self.x) + int(((w[:, 1] - w[:, 0]) * (w[:, 3] - w[:, 2])).sum())

    def bounds_cells(self) -> tuple[int, int, int, int]:
        """``x0, x1, y0, y1`` (ends exclusive): the cells holding any piece."""
        xs = np.concatenate([self.x, self.whole[:, 0], self.whole[:, 1] - 1])
        ys = np.concatenate([self.y, self.whole[:, 2], self.whole[:, 3] - 1])
        if not len(xs):
            return 0, 0, 0, 0
        return int(xs.min()), int(xs.max()) + 1, int(ys.min()), int(ys.max()) + 1

    def _boundary(self, keep: np.ndarray) -> GeomArray:
        """The boundary pieces of the cells ``keep`` marks, read from the store's blocks they lie in."""
        if self.pieces is not None:
            return self.pieces[keep]
        out = np.empty(int(keep.sum()), dtype=object)
        rows = np.flatnonzero(keep)
        bx, by = self.x[rows] // BLOCK_CELLS, self.y[rows] // BLOCK_CELLS
        at = {int(r): i for i, r in enumerate(rows)}
        for block in np.unique(np.stack([bx, by], axis=1), axis=0):
            with np.load(Path(self.directory) / f"block_{int(block[0])}_{int(block[1])}.npz", allow_pickle=False) as data:
                ids, offsets, wkb = data["rows"], data["offsets"], data["wkb"]
            wanted = np.flatnonzero(np.isin(ids, rows))
            blobs = [wkb[offsets[i] : offsets[i + 1]].tobytes() for i in wanted]
            geoms = shapely.from_wkb(np.asarray(blobs, dtype=object))
            for i, g in zip(wanted, geoms):
                out[at[int(ids[i])]] = g
        return out

    def pieces_in(self, cells: tuple[int, int, int, int] | None = None) -> tuple[GeomArray, IdArray]:
        """The pieces of the cells ``x0, x1, y0, y1`` (ends exclusive; None: every cell) and their owners.

        In the whole layer's order: by owner, then row-major cells (y, then x), which is
        :func:`evalcore.sites.grid_pieces` of each owner's polygon, concatenated.
        """
        x0, x1, y0, y1 = cells if cells is not None else self.bounds_cells()
        keep = (self.x >= x0) & (self.x < x1) & (self.y >= y0) & (self.y < y1)
        clipped = _clip_ranges(self.whole, x0, x1, y0, y1)
        wx, wy, which = whole_cells(clipped[:, :4])
        xs = np.concatenate([self.x[keep], wx])
        ys = np.concatenate([self.y[keep], wy])
        owners = np.concatenate([self.owner[keep], clipped[which, 4]])
        pieces = np.concatenate([self._boundary(keep), cell_boxes(wx, wy, self.cell_m)])
        order = np.lexsort((xs, ys, owners))
        return np.asarray(pieces[order], dtype=object).reshape(-1), owners[order]

    def sole_owner(self, cx: IdArray, cy: IdArray) -> IdArray:
        """For each cell ``(cx, cy)``: its owner when it is a whole cell of one owner and no other piece lies there; else -1.

        A point strictly inside such a cell is inside that owner's polygon and no other's
        (every piece lies in its own closed cell): the cell index answers it without geometry.
        """
        out = np.full(len(cx), -1, dtype=np.int64)
        if not len(cx) or not len(self.whole):
            return out
        x0, x1, y0, y1 = int(cx.min()), int(cx.max()) + 1, int(cy.min()), int(cy.max()) + 1
        w = _clip_ranges(self.whole, x0, x1, y0, y1)
        wx, wy, which = whole_cells(w[:, :4])
        width = x1 - x0
        key = (wy - y0) * width + (wx - x0)
        cells, first, counts = np.unique(key, return_index=True, return_counts=True)
        inside = (self.x >= x0) & (self.x < x1) & (self.y >= y0) & (self.y < y1)
        clipped = (self.y[inside] - y0) * width + (self.x[inside] - x0)
        sole = (counts == 1) & ~np.isin(cells, clipped)
        cells, owners = cells[sole], w[which[first[sole]], 4]
        query = (cy - y0) * width + (cx - x0)
        if len(cells):
            at = np.minimum(np.searchsorted(cells, query), len(cells) - 1)
            found = cells[at] == query
            out[found] = owners[at[found]]
        return out

    def without_geometry(self, directory: str | os.PathLike) -> CellPieces:
        """The same layer with its boundary pieces written to ``directory`` (see :func:`write_cell_pieces`)."""
        return write_cell_pieces(self, directory)


def _clip_ranges(whole: IdArray, x0: int, x1: int, y0: int, y1: int) -> IdArray:
    """The ranges ``whole`` (rows ``x0, x1, y0, y1, owner``) cut to the cells ``x0:x1, y0:y1``; empty ones dropped."""
    w = whole.copy()
    w[:, 0], w[:, 1] = np.maximum(whole[:, 0], x0), np.minimum(whole[:, 1], x1)
    w[:, 2], w[:, 3] = np.maximum(whole[:, 2], y0), np.minimum(whole[:, 3], y1)
    return w[(w[:, 0] < w[:, 1]) & (w[:, 2] < w[:, 3])]


def cut_layer(geoms_by_owner: Sequence[GeomArray], cell_m: float = GRID_CELL_M) -> CellPieces:
    """Cut each owner's polygons into grid cells (:func:`evalcore.sites.grid_cells`), without building whole squares.

    Parameters
    ----------
    geoms_by_owner : sequence of ndarray of shapely geometries
        The polygons of each owner (equal-area CRS): one per AOI, or the annotated
        area's polygons as one owner, whose union is cut.
    cell_m : float
        Cell side, metres.
    """
    xs, ys, owners, pieces, wholes = [], [], [], [], []
    for k, geoms in enumerate(geoms_by_owner):
        cx, cy, clipped, whole = grid_cells(geoms, cell_m)
        xs.append(cx)
        ys.append(cy)
        owners.append(np.full(len(cx), k, dtype=np.int64))
        pieces.append(clipped)
        wholes.append(np.column_stack([whole, np.full(len(whole), k, dtype=np.int64)]))
    cat = lambda parts, dtype: np.concatenate(parts) if parts else np.empty(0, dtype)  # noqa: E731
    return CellPieces(
        float(cell_m),
        np.concatenate(wholes).reshape(-1, 5) if wholes else np.empty((0, 5), np.int64),
        cat(xs, np.int64), cat(ys, np.int64), cat(owners, np.int64),
        np.asarray(cat(pieces, object), dtype=object),
    )


def write_cell_pieces(cells: CellPieces, directory: str | os.PathLike) -> CellPieces:
    """Write a layer's boundary pieces to ``directory`` in blocks and return the layer pointing there.

    Each block file holds the positions of its pieces in the layer's table of contents
    (``rows``), and their WKB as one byte buffer with offsets.
    """
    if cells.pieces is None:
        return cells
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("block_*.npz"):  # a previous run's blocks
        old.unlink()
    bx, by = cells.x // BLOCK_CELLS, cells.y // BLOCK_CELLS
    wkb = shapely.to_wkb(cells.pieces) if len(cells.pieces) else np.empty(0, dtype=object)
    if len(bx):
        blocks, inverse = np.unique(np.stack([bx, by], axis=1), axis=0, return_inverse=True)
        inverse = np.asarray(inverse).ravel()
        order = np.argsort(inverse, kind="stable")
        starts = np.searchsorted(inverse[order], np.arange(len(blocks) + 1))
        for b, block in enumerate(blocks):
            rows = order[starts[b] : starts[b + 1]]
            blobs = [wkb[r] for r in rows]
            offsets = np.concatenate([[0], np.cumsum([len(v) for v in blobs])]).astype(np.int64)
            buffer = np.frombuffer(b"".join(blobs), dtype=np.uint8)
            np.savez(directory / f"block_{int(block[0])}_{int(block[1])}.npz", rows=rows.astype(np.int64), offsets=offsets, wkb=buffer)
    return CellPieces(cells.cell_m, cells.whole, cells.x, cells.y, cells.owner, None, str(directory))


def cells_of_bounds(bounds: Sequence[float], cell_m: float) -> tuple[int, int, int, int]:
    """``x0, x1, y0, y1`` (ends exclusive): the cells a box ``minx, miny, maxx, maxy`` meets, and one more on each side.

    The margin takes in a piece whose clipped vertex lies a rounding error past its
    cell's edge; pieces that a row does not meet change nothing of its answer.
    """
    minx, miny, maxx, maxy = (float(v) for v in bounds)
    return (int(np.floor(minx / cell_m)) - 1, int(np.floor(maxx / cell_m)) + 2,
            int(np.floor(miny / cell_m)) - 1, int(np.floor(maxy / cell_m)) + 2)
