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

__all__ = ["_weighted_group_sums"]


@njit(**NUMBA_OPTIONS)
def _weighted_group_sums(
    weights: np.ndarray,
    values: np.ndarray,
    strata_codes: np.ndarray,
    size_codes: np.ndarray,
    overall: np.ndarray,
    strata: np.ndarray,
    sizes: np.ndarray,
) -> None:
    """Add ``weights @ values`` into ``overall`` and into each field's stratum and size class.

    Parameters
    ----------
    weights : float64 (n_replicates, n_fields)
        How often each field is drawn in each replicate.
    values : float64 (n_fields, n_columns)
        Quantity rows.
    strata_codes, size_codes : int64 (n_fields,)
        Group of each field (-1: none).
    overall : float64 (n_replicates, n_columns), updated in place
    strata : float64 (n_strata, n_replicates, n_columns), updated in place
    sizes : float64 (n_sizes, n_replicates, n_columns), updated in place
    """
    n_rep, n_fields = weights.shape
    n_cols = values.shape[1]
    for b in range(n_rep):
        for i in range(n_fields):
            w = weights[b, i]
            if w == 0.0:
                continue
            s = strata_codes[i]
            z = size_codes[i]
            for j in range(n_cols):
                x = w * values[i, j]
                overall[b, j] += x
                if s >= 0:
                    strata[s, b, j] += x
                if z >= 0:
                    sizes[z, b, j] += x
