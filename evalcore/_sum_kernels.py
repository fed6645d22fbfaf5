"""numba kernels for the bootstrap's count-weighted sums.

A BLAS matrix product would be faster, but its summation order depends on memory
alignment and blocking, so the same partition could give different last bits in two
processes. These loops add in a fixed order (fields in position order), which keeps
the bootstrap intervals bit-identical between the single-process and the distributed
runs.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from evalcore.config import NUMBA_OPTIONS

__all__ = ["_group_members", "_weighted_group_sums", "_weighted_member_sums", "_weighted_unit_sums"]


@njit(**NUMBA_OPTIONS)
def _weighted_group_sums(weights: np.ndarray, values: np.ndarray, flat_groups: np.ndarray, out: np.ndarray) -> None:
    """Add ``weights @ values`` into the overall group and into each field's groups.

    Parameters
    ----------
    weights : float64 (n_replicates, n_fields)
        How often each field is drawn in each replicate.
    values : float64 (n_fields, n_columns)
        Quantity rows.
    flat_groups : int64 (n_fields, n_groupings)
        Each field's group on the flat group axis in each grouping (-1: none).
    out : float64 (n_groups, n_replicates, n_columns), updated in place
        Group 0 is the overall group.
    """
    n_rep, n_fields = weights.shape
    n_cols = values.shape[1]
    n_groupings = flat_groups.shape[1]
    for b in range(n_rep):
        for i in range(n_fields):
            w = weights[b, i]
            if w == 0.0:
                continue
            # One plain loop over the columns per target group: no indirect load inside
            # it, so it vectorises; each cell still receives the fields in position order.
            for j in range(n_cols):
                out[0, b, j] += w * values[i, j]
            for g in range(n_groupings):
                k = flat_groups[i, g]
                if k < 0:
                    continue
                for j in range(n_cols):
                    out[k, b, j] += w * values[i, j]


@njit(**NUMBA_OPTIONS)
def _group_members(flat_groups: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Each group's fields in position order, for :func:`_weighted_member_sums`.

    Parameters
    ----------
    flat_groups : int64 (n_fields, n_groupings)
        Each field's group in each grouping, ``1 .. n_groups - 1`` (-1: none); every field
        is also in group 0, the overall group.
    n_groups : int

    Returns
    -------
    members : int64 (n_members,)
        The fields of group 0, then of group 1, ..., each in position order.
    bounds : int64 (n_groups + 1,)
        Group ``k``'s fields are ``members[bounds[k]:bounds[k + 1]]``.
    """
    n_fields, n_groupings = flat_groups.shape
    counts = np.zeros(n_groups, np.int64)
    counts[0] = n_fields
    for i in range(n_fields):
        for g in range(n_groupings):
            k = flat_groups[i, g]
            if k >= 0:
                counts[k] += 1
    bounds = np.zeros(n_groups + 1, np.int64)
    for k in range(n_groups):
        bounds[k + 1] = bounds[k] + counts[k]
    fill = bounds[:-1].copy()
    members = np.empty(bounds[n_groups], np.int64)
    for i in range(n_fields):
        members[fill[0]] = i
        fill[0] += 1
        for g in range(n_groupings):
            k = flat_groups[i, g]
            if k >= 0:
                members[fill[k]] = i
                fill[k] += 1
    return members, bounds


@njit(**NUMBA_OPTIONS)
def _weighted_member_sums(weights: np.ndarray, values: np.ndarray, members: np.ndarray, bounds: np.ndarray, out: np.ndarray,
                          member_block: int) -> None:
    """:func:`_weighted_group_sums` of finite values, four replicates and four fields at a time.

    Each cell still receives its group's fields one by one in position order, so the bits
    are those of :func:`_weighted_group_sums`: the weights of 0 it skips add ``0 * value``
    here, a zero, which leaves a sum unchanged (a sum that starts at +0.0 is never -0.0).
    A NaN or infinite value would not be left out: the caller sends those to
    :func:`_weighted_group_sums`. The gain is in the memory traffic: one load and one store
    of a cell per four fields, and each field's row loaded once for four replicates
    (8,300 fields x 1000 replicates x 112 columns, 15 groups, through
    :func:`evalcore.bootstrap.replicate_group_sums`: 0.30 -> 0.215 s).

    A group's fields are taken ``member_block`` at a time through every replicate: with
    the weights kept rows by replicates (each field's counts contiguous, as
    :meth:`evalcore.bootstrap.RowDraws.draw_counts` makes them), a block's counts and
    value rows stay in the cache while the replicates go by (8,300 fields x 1000
    replicates x 89 columns, 9 groups: 0.160 s with the float64 replicates-by-fields
    matrix and no blocks, 0.130 s with byte counts and blocks of 128; the blocks alone
    on that matrix were slower, 0.21 s). Each cell still receives its fields in order.

    Parameters
    ----------
    weights : float64 or unsigned int (n_replicates, n_fields)
    values : float64 (n_fields, n_columns)
        Finite.
    members, bounds : int64
        :func:`_group_members` of the fields' groups.
    out : float64 (n_groups, n_replicates, n_columns), updated in place
    member_block : int
        Fields of a group per pass through the replicates (at least 1).
    """
    n_rep = weights.shape[0]
    n_cols = values.shape[1]
    n_groups = bounds.shape[0] - 1
    for k in range(n_groups):
        for first in range(bounds[k], bounds[k + 1], member_block):
            stop = min(first + member_block, bounds[k + 1])
            b = 0
            while b + 4 <= n_rep:
                m = first
                while m + 4 <= stop:
                    i0, i1, i2, i3 = members[m], members[m + 1], members[m + 2], members[m + 3]
                    a0, a1, a2, a3 = weights[b, i0], weights[b, i1], weights[b, i2], weights[b, i3]
                    c0, c1, c2, c3 = weights[b + 1, i0], weights[b + 1, i1], weights[b + 1, i2], weights[b + 1, i3]
                    d0, d1, d2, d3 = weights[b + 2, i0], weights[b + 2, i1], weights[b + 2, i2], weights[b + 2, i3]
                    e0, e1, e2, e3 = weights[b + 3, i0], weights[b + 3, i1], weights[b + 3, i2], weights[b + 3, i3]
                    # The columns vectorise; the parentheses keep each cell's additions in field order.
                    for j in range(n_cols):
                        v0, v1, v2, v3 = values[i0, j], values[i1, j], values[i2, j], values[i3, j]
                        out[k, b, j] = (((out[k, b, j] + a0 * v0) + a1 * v1) + a2 * v2) + a3 * v3
                        out[k, b + 1, j] = (((out[k, b + 1, j] + c0 * v0) + c1 * v1) + c2 * v2) + c3 * v3
                        out[k, b + 2, j] = (((out[k, b + 2, j] + d0 * v0) + d1 * v1) + d2 * v2) + d3 * v3
                        out[k, b + 3, j] = (((out[k, b + 3, j] + e0 * v0) + e1 * v1) + e2 * v2) + e3 * v3
                    m += 4
                while m < stop:
                    i0 = members[m]
                    a0, c0, d0, e0 = weights[b, i0], weights[b + 1, i0], weights[b + 2, i0], weights[b + 3, i0]
                    for j in range(n_cols):
                        v0 = values[i0, j]
                        out[k, b, j] += a0 * v0
                        out[k, b + 1, j] += c0 * v0
                        out[k, b + 2, j] += d0 * v0
                        out[k, b + 3, j] += e0 * v0
                    m += 1
                b += 4
            while b < n_rep:
                for m in range(first, stop):
                    i0 = members[m]
                    a0 = weights[b, i0]
                    for j in range(n_cols):
                        out[k, b, j] += a0 * values[i0, j]
                b += 1


@njit(**NUMBA_OPTIONS)
def _weighted_unit_sums(weights: np.ndarray, values: np.ndarray, units: np.ndarray, out: np.ndarray, by_row: bool) -> None:
    """Add each row's ``weight * values`` into its unit's cell, in every replicate.

    The rows of a partition's reporting tiles or AOIs, a few columns each: unlike
    :func:`_weighted_group_sums` there is no overall group and no skip of a weight of 0.
    The skip saves nothing on four columns, and a weight of 0 (about a third of a field
    bootstrap's, at random) made it a mispredicted branch; adding ``0 * value`` leaves a
    sum's bits unchanged when the values are finite (the caller's check). Each cell
    still receives its rows in position order.

    Parameters
    ----------
    weights : float64 (n_replicates, n_rows)
    values : float64 (n_rows, n_columns)
        Finite.
    units : int64 (n_rows,)
        Each row's cell on ``out``'s first axis; rows of no unit point at a last, spare cell.
    out : float64 (n_cells, n_replicates, n_columns), updated in place
    by_row : bool
        Whether the weights are kept rows by replicates (a transposed view, each row's
        counts contiguous): then read row by row, each row through every replicate; else
        replicate by replicate. The same additions in the same order either way.
    """
    n_rep, n_rows = weights.shape
    n_cols = values.shape[1]
    if by_row:
        for i in range(n_rows):
            k = units[i]
            for b in range(n_rep):
                w = weights[b, i]
                for j in range(n_cols):
                    out[k, b, j] += w * values[i, j]
        return
    for b in range(n_rep):
        for i in range(n_rows):
            w = weights[b, i]
            k = units[i]
            for j in range(n_cols):
                out[k, b, j] += w * values[i, j]
