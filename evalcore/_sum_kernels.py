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

__all__ = ["_weighted_group_sums", "_weighted_unit_sums"]


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
def _weighted_unit_sums(weights: np.ndarray, values: np.ndarray, units: np.ndarray, out: np.ndarray) -> None:
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
    """
    n_rep, n_rows = weights.shape
    n_cols = values.shape[1]
    for b in range(n_rep):
        for i in range(n_rows):
            w = weights[b, i]
            k = units[i]
            for j in range(n_cols):
                out[k, b, j] += w * values[i, j]
