"""numba kernel placing the field bootstrap's draws (ranks within their (pool, tile)
group) on the reference rows of a chunk of replicates.

The generator calls stay in numpy (the draws are numpy's bounded integers, one stream
per group); this loop only turns them into counts, which numpy does in five passes over
the chunk's draws (repeat, gather, multiply-add, bincount, cast).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from evalcore.config import NUMBA_OPTIONS

__all__ = ["_place_draws"]


@njit(**NUMBA_OPTIONS)
def _place_draws(draws_per_replicate: np.ndarray, ranks: np.ndarray, row_of_rank: np.ndarray, first_rank: np.ndarray,
                 out: np.ndarray) -> bool:
    """Add one to ``out[j, row]`` for every draw of every group in every replicate ``j``
    (draws whose rank has no row here are skipped); whether a count wrapped round to 0
    (only a count kept in an unsigned integer type can, past its largest value).

    Parameters
    ----------
    draws_per_replicate : int64 (n_groups, n_chunk_replicates)
        How many draws each group makes in each replicate of the chunk.
    ranks : int64 (total draws,)
        The draws, group by group, each group's in replicate order (its generator's order).
    row_of_rank : int64 (sum of the groups' sizes,)
        The row of ``out`` holding each rank, group by group; -1 for a rank whose row is
        not in ``out`` (a group shared with another partition: its draws are made whole,
        the same wherever its fields are, and each partition keeps its own).
    first_rank : int64 (n_groups,)
        Where each group's ranks start in ``row_of_rank``.
    out : float64 or unsigned int (n_chunk_replicates, n_rows), zeroed, updated in place
        Any memory layout: the field bootstrap's counts are kept rows by replicates
        (:meth:`evalcore.bootstrap.RowDraws.draw_counts`), here seen transposed.
    """
    n_groups, n_rep = draws_per_replicate.shape
    wrapped = False
    k = 0
    for g in range(n_groups):
        base = first_rank[g]
        for j in range(n_rep):
            for _ in range(draws_per_replicate[g, j]):
                row = row_of_rank[base + ranks[k]]
                if row >= 0:
                    out[j, row] += 1
                    if out[j, row] == 0:
                        wrapped = True
                k += 1
    return wrapped
