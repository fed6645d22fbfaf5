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

from evalcore.distributed import workdir as wd
from evalcore._typing import GeomArray, IdArray
from evalcore.sites import GRID_CELL_M, cell_boxes, grid_cells, halves, whole_cells

__all__ = [
    "BLOCK_CELLS",
    "CellPieces",
    "cut_layer",
    "write_cell_pieces",
    "cells_of_bounds",
    "cells_near",
    "cell_key",
    "cell_ranges",
    "block_groups",
    "NearUnion",
    "near_union",
]

BLOCK_CELLS = 16
"""Side of a block of boundary pieces in the store, in cells (32 km with 2 km cells):
a prepare chunk or a partition reads the few blocks its rows' extent meets."""

_MAX_STATE_CELLS = 1 << 22
"""Largest grid of cells :meth:`CellPieces.range_state` lays out at once (4 Mi cells: its
summed-area tables take 32 MiB each; a block's rows need a few hundred cells)."""


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
            with np.load(wd.fetch(Path(self.directory) / f"block_{int(block[0])}_{int(block[1])}.npz"), allow_pickle=False) as data:
                ids, offsets, wkb = data["rows"], data["offsets"], data["wkb"]
            wanted = np.flatnonzero(np.isin(ids, rows))
            blobs = [wkb[offsets[i] : offsets[i + 1]].tobytes() for i in wanted]
            geoms = shapely.from_wkb(np.asarray(blobs, dtype=object))
            for i, g in zip(wanted, geoms):
                out[at[int(ids[i])]] = g
        return out

    def pieces_in(self, cells: tuple[int, int, int, int] | None = None, wanted: IdArray | None = None) -> tuple[GeomArray, IdArray]:
        """The pieces of the cells ``x0, x1, y0, y1`` (ends exclusive; None: every cell) and their owners.

        In the whole layer's order: by owner, then row-major cells (y, then x), which is
        :func:`evalcore.sites.grid_pieces` of each owner's polygon, concatenated.
        ``wanted`` (sorted :func:`cell_key` values, :func:`cells_near`) keeps only the pieces
        of those cells, in the same order: a lookup's rows meet no other piece, and a
        chunk's rows meet a few of the cells of their extent (no square is built for the others).
        """
        x0, x1, y0, y1 = cells if cells is not None else self.bounds_cells()
        keep = (self.x >= x0) & (self.x < x1) & (self.y >= y0) & (self.y < y1)
        clipped = _clip_ranges(self.whole, x0, x1, y0, y1)
        wx, wy, which = whole_cells(clipped[:, :4])
        if wanted is not None:
            keep &= _among(cell_key(self.x, self.y), wanted)
            chosen = _among(cell_key(wx, wy), wanted)
            wx, wy, which = wx[chosen], wy[chosen], which[chosen]
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

    def range_state(self, x0: IdArray, x1: IdArray, y0: IdArray, y1: IdArray) -> np.ndarray:
        """For each range of cells ``x0:x1, y0:y1`` (ends exclusive): 1 when every cell is a whole
        cell, 0 when no piece lies in any of them, -1 otherwise; answered from the index alone.

        Meant for a one-owner layer (the study area, the training area), whose whole
        ranges and boundary cells are disjoint. Ranges spanning more than
        :data:`_MAX_STATE_CELLS` cells together get -1 (their rows are tested on pieces).

        Parameters
        ----------
        x0, x1, y0, y1 : ndarray of int64, shape (n,)
            Cell indices (``x * cell_m`` is the cell's west edge, metres).

        Returns
        -------
        ndarray of int8, shape (n,)
        """
        out = np.full(len(x0), -1, dtype=np.int8)
        if not len(x0):
            return out
        gx0, gx1, gy0, gy1 = int(x0.min()), int(x1.max()), int(y0.min()), int(y1.max())
        width, height = gx1 - gx0, gy1 - gy0
        if width * height > _MAX_STATE_CELLS:
            return out
        # 0: nothing, 1: a whole cell, 2: a boundary cell; then counts over each range by
        # summed-area tables.
        grid = np.zeros((height, width), dtype=np.int8)
        for a, b, c, d, _ in _clip_ranges(self.whole, gx0, gx1, gy0, gy1):
            grid[c - gy0 : d - gy0, a - gx0 : b - gx0] = 1
        inside = (self.x >= gx0) & (self.x < gx1) & (self.y >= gy0) & (self.y < gy1)
        grid[self.y[inside] - gy0, self.x[inside] - gx0] = 2

        def counts(mask: np.ndarray) -> IdArray:
            table = np.zeros((height + 1, width + 1), dtype=np.int64)
            table[1:, 1:] = mask.cumsum(axis=0).cumsum(axis=1)
            a, b, c, d = x0 - gx0, x1 - gx0, y0 - gy0, y1 - gy0
            return table[d, b] - table[c, b] - table[d, a] + table[c, a]

        size = (x1 - x0) * (y1 - y0)
        out[counts(grid == 1) == size] = 1
        out[counts(grid == 0) == size] = 0
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
    directory = wd.local(directory)  # a store work directory: this process's mirror, each block published when written
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
            wd.publish(directory / f"block_{int(block[0])}_{int(block[1])}.npz")
    return CellPieces(cells.cell_m, cells.whole, cells.x, cells.y, cells.owner, None, str(directory))


def cells_of_bounds(bounds: Sequence[float], cell_m: float) -> tuple[int, int, int, int]:
    """``x0, x1, y0, y1`` (ends exclusive): the cells a box ``minx, miny, maxx, maxy`` meets, and one more on each side.

    The margin takes in a piece whose clipped vertex lies a rounding error past its
    cell's edge; pieces that a row does not meet change nothing of its answer.
    """
    minx, miny, maxx, maxy = (float(v) for v in bounds)
    return (int(np.floor(minx / cell_m)) - 1, int(np.floor(maxx / cell_m)) + 2,
            int(np.floor(miny / cell_m)) - 1, int(np.floor(maxy / cell_m)) + 2)


def cell_key(x: IdArray, y: IdArray) -> IdArray:
    """One int64 per cell ``(x, y)`` (indices within +-2**30), ordered by x, then y."""
    return (np.asarray(x, dtype=np.int64) + (1 << 30)) * (1 << 31) + (np.asarray(y, dtype=np.int64) + (1 << 30))


def _among(keys: IdArray, wanted: IdArray) -> np.ndarray:
    """Whether each of ``keys`` is one of ``wanted`` (sorted)."""
    if not len(wanted):
        return np.zeros(len(keys), dtype=bool)
    at = np.minimum(np.searchsorted(wanted, keys), len(wanted) - 1)
    return wanted[at] == keys


def cells_near(bounds: np.ndarray, cell_m: float) -> tuple[tuple[int, int, int, int], IdArray]:
    """The cells some boxes ``minx, miny, maxx, maxy`` meet, and one more around each box
    (:func:`cell_ranges`): their range ``x0, x1, y0, y1`` (ends exclusive) and their
    :func:`cell_key` values, sorted, for :meth:`CellPieces.pieces_in`.
    """
    x0, x1, y0, y1 = cell_ranges(bounds, cell_m)
    if not len(x0):
        return (0, 0, 0, 0), np.empty(0, dtype=np.int64)
    cx, cy, _ = whole_cells(np.stack([x0, x1, y0, y1], axis=1))
    return (int(x0.min()), int(x1.max()), int(y0.min()), int(y1.max())), np.unique(cell_key(cx, cy))


def cell_ranges(bounds: np.ndarray, cell_m: float, ring: int = 1) -> tuple[IdArray, IdArray, IdArray, IdArray]:
    """``x0, x1, y0, y1`` (ends exclusive) per row: the cells its box ``minx, miny, maxx, maxy`` meets, and ``ring`` more on each side.

    With a ring of one cell, a range of whole cells holds the box with at least a cell
    of the polygon around it, and a range of empty cells has no piece within a cell of
    it (a piece's vertex a rounding error past its cell's edge included).
    """
    b = np.asarray(bounds, dtype=np.float64).reshape(-1, 4)
    return (np.floor(b[:, 0] / cell_m).astype(np.int64) - ring, np.floor(b[:, 2] / cell_m).astype(np.int64) + 1 + ring,
            np.floor(b[:, 1] / cell_m).astype(np.int64) - ring, np.floor(b[:, 3] / cell_m).astype(np.int64) + 1 + ring)


def block_groups(bounds: np.ndarray, block_m: float) -> list[IdArray]:
    """Rows grouped by the block of side ``block_m`` holding their box's south-west corner (input order in each).

    Each group is looked up with the pieces of its own extent, so that a chunk whose rows
    lie all over a country never holds the pieces of the whole country at once.
    """
    b = np.asarray(bounds, dtype=np.float64).reshape(-1, 4)
    if not len(b):
        return []
    key = np.stack([np.floor(b[:, 0] / block_m), np.floor(b[:, 1] / block_m)], axis=1)
    _, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    order = np.argsort(inverse, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(inverse[order])) + 1)


# --------------------------------------------------------------------------- a polygon's contains, by block

NEAR_MARGIN_BLOCKS = 0.5
"""How far a block's neighbourhood (:class:`NearUnion`) reaches past the block, in blocks
(16 km with 32 km blocks): a row whose box starts in the block is answered from it when
the row reaches no further than that (less the segments clipping made)."""

_NEAR_EPS_M = 1.0
"""Margin around a row's box, metres, when checking that no segment clipping made comes
near it: the clipped segments lie within nanometres of the polygon's own."""


@dataclass(frozen=True, slots=True)
class NearUnion:
    """A polygon (a study area's union) for ``contains``, held whole or as one neighbourhood per block.

    The neighbourhood of a block is the polygon clipped to the block grown by
    :data:`NEAR_MARGIN_BLOCKS`. A row's answer from it is the whole polygon's to the bit
    when every segment of the polygon near the row is one of its own, not one the clipping
    cut or added: those lie on the clipping rectangle's edges. Within the rectangle and
    away from them the two polygons have the same segments, and ``contains`` only looks at
    the segments near the row and at which side of them the row lies. Rows that come near
    a clipped segment (a polygon with edges longer than the margin, a row tens of
    kilometres long) are answered by the whole polygon, read from the store.

    Attributes
    ----------
    block_m : float
        Side of the blocks, metres.
    margin_m : float
        How far each neighbourhood reaches past its block, metres.
    union : shapely geometry or None
        The whole polygon, when held in memory.
    directory : str or None
        Where ``union.wkb`` and ``near_<bx>_<by>.wkb`` are.
    blocks : ndarray of int64, shape (m, 2)
        The blocks with a neighbourhood in the store (sorted rows ``bx, by``).
    """

    block_m: float
    margin_m: float
    union: shapely.Geometry | None = None
    directory: str | None = None
    blocks: IdArray | None = None

    def contains(self, geoms: GeomArray) -> np.ndarray:
        """``shapely.contains(union, geoms)``, reading only the neighbourhoods of the rows' blocks."""
        geoms = np.asarray(geoms, dtype=object)
        if self.union is not None:
            shapely.prepare(self.union)
            return np.asarray(shapely.contains(self.union, geoms), dtype=bool).reshape(-1)
        out = np.zeros(len(geoms), dtype=bool)
        if not len(geoms):
            return out
        bounds = shapely.bounds(geoms)
        whole: list[IdArray] = []
        stored = {(int(bx), int(by)) for bx, by in self.blocks}
        for rows in block_groups(bounds, self.block_m):
            bx, by = (int(v) for v in np.floor(bounds[rows[0], :2] / self.block_m))
            if (bx, by) not in stored:
                whole.append(rows)
                continue
            near = shapely.from_wkb(wd.fetch(Path(self.directory) / f"near_{bx}_{by}.wkb").read_bytes())
            rect = _near_rect(bx, bx + 1, by, by + 1, self.block_m, self.margin_m)
            safe = _away_from_cuts(near, rect, bounds[rows])
            if safe.any():
                shapely.prepare(near)
                out[rows[safe]] = shapely.contains(near, geoms[rows[safe]])
            whole.append(rows[~safe])
        rest = np.concatenate(whole) if whole else np.empty(0, np.int64)
        if len(rest):
            union = shapely.from_wkb(wd.fetch(Path(self.directory) / "union.wkb").read_bytes())
            shapely.prepare(union)
            out[rest] = shapely.contains(union, geoms[rest])
        return out


def _near_rect(bx0: int, bx1: int, by0: int, by1: int, block_m: float, margin_m: float) -> tuple[float, float, float, float]:
    """The rectangle of the blocks ``bx0:bx1, by0:by1`` grown by ``margin_m`` (computed alike at every level of the cut)."""
    return (bx0 * block_m - margin_m, by0 * block_m - margin_m, bx1 * block_m + margin_m, by1 * block_m + margin_m)


def _away_from_cuts(near: shapely.Geometry, rect: tuple[float, float, float, float], bounds: np.ndarray) -> np.ndarray:
    """Which boxes (rows ``minx, miny, maxx, maxy``), grown by :data:`_NEAR_EPS_M`, lie inside ``rect`` and meet
    no segment of ``near`` with an end on the rectangle's edges (the segments the clipping cut or added)."""
    grown = bounds + np.array([-_NEAR_EPS_M, -_NEAR_EPS_M, _NEAR_EPS_M, _NEAR_EPS_M])
    safe = (grown[:, 0] > rect[0]) & (grown[:, 1] > rect[1]) & (grown[:, 2] < rect[2]) & (grown[:, 3] < rect[3])
    if near.is_empty or not safe.any():
        return safe
    rings = shapely.get_rings(shapely.get_parts(near))
    xy, ring = shapely.get_coordinates(rings, return_index=True)
    on_edge = (xy[:, 0] == rect[0]) | (xy[:, 0] == rect[2]) | (xy[:, 1] == rect[1]) | (xy[:, 1] == rect[3])
    same_ring = ring[1:] == ring[:-1]
    cut = same_ring & (on_edge[1:] | on_edge[:-1])
    if not cut.any():
        return safe
    a, b = xy[:-1][cut], xy[1:][cut]
    boxes = shapely.box(np.minimum(a[:, 0], b[:, 0]), np.minimum(a[:, 1], b[:, 1]), np.maximum(a[:, 0], b[:, 0]), np.maximum(a[:, 1], b[:, 1]))
    rows = np.flatnonzero(safe)
    hit, _ = shapely.STRtree(boxes).query(shapely.box(*grown[rows].T), predicate="intersects")
    safe[rows[hit]] = False
    return safe


def near_union(union: shapely.Geometry, cells: CellPieces, directory: str | os.PathLike | None = None) -> NearUnion:
    """``union`` for :meth:`NearUnion.contains`: held whole (``directory`` None), or written to ``directory``
    as itself and one neighbourhood per block within a block of a boundary cell of ``cells``.

    The neighbourhoods are cut by bisection (the rectangle of a range of blocks, grown by
    the margin, clipped from its parent's part), so the polygon is read about log(blocks)
    times instead of once per block.
    """
    block_m = cells.cell_m * BLOCK_CELLS
    margin_m = block_m * NEAR_MARGIN_BLOCKS
    if directory is None:
        return NearUnion(block_m, margin_m, union)
    directory = wd.local(directory)  # a store work directory: this process's mirror, each piece published when written
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("near_*.wkb"):  # a previous run's neighbourhoods
        old.unlink()
    (directory / "union.wkb").write_bytes(shapely.to_wkb(union))
    wd.publish(directory / "union.wkb")
    own = np.unique(np.stack([cells.x // BLOCK_CELLS, cells.y // BLOCK_CELLS], axis=1).reshape(-1, 2), axis=0)
    steps = np.array([(dx, dy) for dy in (-1, 0, 1) for dx in (-1, 0, 1)], dtype=np.int64)
    wanted = np.unique((own[:, None, :] + steps[None, :, :]).reshape(-1, 2), axis=0) if len(own) else np.empty((0, 2), np.int64)

    def cut(part: shapely.Geometry, bx0: int, bx1: int, by0: int, by1: int, blocks: IdArray) -> None:
        part = shapely.clip_by_rect(part, *_near_rect(bx0, bx1, by0, by1, block_m, margin_m))
        if bx1 - bx0 == 1 and by1 - by0 == 1:
            (directory / f"near_{bx0}_{by0}.wkb").write_bytes(shapely.to_wkb(part))
            wd.publish(directory / f"near_{bx0}_{by0}.wkb")
            return
        for a0, a1, b0, b1 in halves(bx0, bx1, by0, by1):
            inside = blocks[(blocks[:, 0] >= a0) & (blocks[:, 0] < a1) & (blocks[:, 1] >= b0) & (blocks[:, 1] < b1)]
            if len(inside):
                cut(part, a0, a1, b0, b1, inside)

    if len(wanted):
        cut(union, int(wanted[:, 0].min()), int(wanted[:, 0].max()) + 1, int(wanted[:, 1].min()), int(wanted[:, 1].max()) + 1, wanted)
    return NearUnion(block_m, margin_m, None, str(directory), wanted)
