"""Sufficient statistics that merge by addition.

:class:`GroupSums` holds, for every group of the flat group axis (overall, each stratum,
each size class; :attr:`evalcore.options.RunPlan.n_groups`), the column sums of the
quantity table and the maxima of the max-merged columns. Its identity is
:meth:`GroupSums.empty`; ``a.merge(b)`` equals the sums of the union of the rows of
``a`` and ``b``, and statistics built with other columns refuse to merge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalcore._typing import F64Array, IdArray
from evalcore.errors import IncompatibleStatsError

__all__ = ["GroupSums", "group_sums"]


@dataclass(frozen=True, slots=True)
class GroupSums:
    """Column sums and maxima per group.

    Attributes
    ----------
    columns : tuple of str
        Summed columns (:func:`evalcore.metrics.registry.quantity_columns`).
    max_columns : tuple of str
        Max-merged columns.
    sums : ndarray of float64, shape (n_groups, len(columns))
    maxima : ndarray of float64, shape (n_groups, len(max_columns))
        NaN where no row of the group has a value.
    """

    columns: tuple[str, ...]
    max_columns: tuple[str, ...]
    sums: F64Array
    maxima: F64Array

    @staticmethod
    def empty(columns: tuple[str, ...], max_columns: tuple[str, ...], n_groups: int) -> GroupSums:
        return GroupSums(columns, max_columns, np.zeros((n_groups, len(columns))), np.full((n_groups, len(max_columns)), np.nan))

    def merge(self, other: GroupSums) -> GroupSums:
        if other.columns != self.columns or other.max_columns != self.max_columns:
            raise IncompatibleStatsError(f"quantity columns differ: {self.columns} vs {other.columns}")
        if other.sums.shape != self.sums.shape:
            raise IncompatibleStatsError(f"group counts differ: {self.sums.shape[0]} vs {other.sums.shape[0]}")
        return GroupSums(self.columns, self.max_columns, self.sums + other.sums, np.fmax(self.maxima, other.maxima))

    def add_to_group(self, group: int, row: F64Array) -> GroupSums:
        """These sums with ``row`` added to one group's sums (the unassigned predictions)."""
        sums = self.sums.copy()
        sums[group] = sums[group] + row
        return GroupSums(self.columns, self.max_columns, sums, self.maxima)

    def as_dict(self, group: int = 0) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self.columns, self.sums[group])}

    def maxima_dict(self, group: int = 0) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self.max_columns, self.maxima[group])}


def group_sums(
    values: F64Array,
    maxima: F64Array,
    flat_groups: IdArray,
    n_groups: int,
    columns: tuple[str, ...],
    max_columns: tuple[str, ...],
) -> GroupSums:
    """Sums of quantity rows per group: every row in group 0 and in its groups of each grouping.

    Parameters
    ----------
    values : ndarray of float64, shape (n, len(columns))
    maxima : ndarray of float64, shape (n, len(max_columns))
        NaN where a row has no value.
    flat_groups : ndarray of int64, shape (n, n_groupings)
        Each row's index on the flat group axis per grouping (-1: none).
    n_groups : int
    """
    n, c = values.shape
    sums = np.zeros((n_groups, c))
    out_max = np.full((n_groups, len(max_columns)), np.nan)
    group_of_row = [np.zeros(n, dtype=np.int64)] + [flat_groups[:, g] for g in range(flat_groups.shape[1])]
    for codes in group_of_row:
        inside = codes >= 0
        idx = codes[inside]
        rows = values[inside]
        for j in range(c):
            sums[:, j] += np.bincount(idx, weights=rows[:, j], minlength=n_groups)
        for j in range(len(max_columns)):
            m = maxima[inside, j]
            ok = ~np.isnan(m)
            if ok.any():
                filled = np.full(n_groups, -np.inf)
                np.maximum.at(filled, idx[ok], m[ok])
                out_max[:, j] = np.fmax(out_max[:, j], np.where(np.isfinite(filled), filled, np.nan))
    return GroupSums(columns, max_columns, sums, out_max)
