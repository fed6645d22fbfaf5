"""The candidate pairs' table: the value that matching, the families and storage read.

:func:`evalcore.pairs.candidate_pairs` builds it from two prepared layers' geometry;
this module holds the type alone, so that what only reads pairs (matching, the metric
families, the arrays codec) need not import the geometry that finds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalcore._typing import F64Array, IdArray

__all__ = ["PairTable"]


@dataclass(frozen=True, slots=True)
class PairTable:
    """Candidate pairs, sorted by reference position then prediction position.

    Attributes
    ----------
    ref_pos, pred_pos : ndarray of int64, shape (n_pairs,)
        Input positions of the reference field and the prediction.
    inter_m2 : ndarray of float64
        Intersection area, square metres (equal-area CRS), > 0.
    iou : ndarray of float64
        Intersection over union, in [0, 1].
    """

    ref_pos: IdArray
    pred_pos: IdArray
    inter_m2: F64Array
    iou: F64Array

    def __len__(self) -> int:
        return len(self.ref_pos)

    def take(self, rows: IdArray) -> PairTable:
        """The pairs at ``rows`` (indices or a boolean mask), in that order."""
        return PairTable(self.ref_pos[rows], self.pred_pos[rows], self.inter_m2[rows], self.iou[rows])

    @staticmethod
    def empty() -> PairTable:
        return PairTable(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), np.empty(0))

    @staticmethod
    def concat(tables: list[PairTable]) -> PairTable:
        """Concatenate tables and restore the (ref_pos, pred_pos) order; duplicates are an error."""
        return PairTable.concat_with_order(tables)[0]

    @staticmethod
    def concat_with_order(tables: list[PairTable]) -> tuple[PairTable, IdArray]:
        """:meth:`concat`, and the permutation of the concatenated rows it applied
        (so aligned per-pair arrays can be put in the same order)."""
        if not tables:
            return PairTable.empty(), np.empty(0, np.int64)
        ref_pos = np.concatenate([t.ref_pos for t in tables])
        pred_pos = np.concatenate([t.pred_pos for t in tables])
        order = np.lexsort((pred_pos, ref_pos))
        ref_pos, pred_pos = ref_pos[order], pred_pos[order]
        if len(ref_pos) > 1:
            same = (ref_pos[1:] == ref_pos[:-1]) & (pred_pos[1:] == pred_pos[:-1])
            if same.any():
                k = int(np.flatnonzero(same)[0])
                raise ValueError(
                    f"pair (reference {ref_pos[k]}, prediction {pred_pos[k]}) was computed by two partitions"
                )
        table = PairTable(
            ref_pos,
            pred_pos,
            np.concatenate([t.inter_m2 for t in tables])[order],
            np.concatenate([t.iou for t in tables])[order],
        )
        return table, order
