"""Sufficient statistics that merge by addition.

:class:`GroupSums` holds, for every group of the flat group axis (overall, each stratum,
each size class; :attr:`evalcore.options.RunPlan.n_groups`), the column sums of the
quantity table (exactly, :mod:`evalcore.exact`) and the maxima of the max-merged columns. Its identity is
:meth:`GroupSums.empty`; ``a.merge(b)`` equals the sums of the union of the rows of
``a`` and ``b``, and statistics built with other columns refuse to merge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse

from evalcore._typing import F64Array, IdArray
from evalcore.errors import IncompatibleStatsError
from evalcore.exact import DIGIT_BITS, N_DIGITS, ONES_DIGIT, digits, value_of

__all__ = ["GroupSums", "group_sums", "exact_group_sums", "digit_group_sums"]


@dataclass(frozen=True, slots=True)
class GroupSums:
    """Column sums and maxima per group.

    The sums are held exactly, as digit sums (:mod:`evalcore.exact`): merging in any
    order or grouping gives the same digits, so a metric never depends on how the
    fields were split into partitions.

    Attributes
    ----------
    columns : tuple of str
        Summed columns (:func:`evalcore.metrics.registry.quantity_columns`).
    max_columns : tuple of str
        Max-merged columns.
    digits : ndarray of float64, shape (n_groups, len(columns), N_DIGITS)
        The exact digit sums of each group's column.
    maxima : ndarray of float64, shape (n_groups, len(max_columns))
        NaN where no row of the group has a value.
    """

    columns: tuple[str, ...]
    max_columns: tuple[str, ...]
    digits: F64Array
    maxima: F64Array
    _sums: list = field(default_factory=list, init=False, repr=False, compare=False)

    @property
    def sums(self) -> F64Array:
        """ndarray of float64, shape (n_groups, len(columns)): each sum correctly rounded."""
        if not self._sums:
            self._sums.append(value_of(self.digits))
        return self._sums[0]

    @staticmethod
    def empty(columns: tuple[str, ...], max_columns: tuple[str, ...], n_groups: int) -> GroupSums:
        return GroupSums(columns, max_columns, np.zeros((n_groups, len(columns), N_DIGITS)),
                         np.full((n_groups, len(max_columns)), np.nan))

    def merge(self, other: GroupSums) -> GroupSums:
        if other.columns != self.columns or other.max_columns != self.max_columns:
            raise IncompatibleStatsError(f"quantity columns differ: {self.columns} vs {other.columns}")
        if other.digits.shape != self.digits.shape:
            raise IncompatibleStatsError(f"group counts differ: {self.digits.shape[0]} vs {other.digits.shape[0]}")
        return GroupSums(self.columns, self.max_columns, self.digits + other.digits, np.fmax(self.maxima, other.maxima))

    def add_to_group(self, group: int, row: F64Array) -> GroupSums:
        """These sums with ``row`` added to one group's sums (the unassigned predictions)."""
        out = self.digits.copy()
        out[group] = out[group] + digits(np.asarray(row, dtype=np.float64))
        return GroupSums(self.columns, self.max_columns, out, self.maxima)

    def as_dict(self, group: int = 0) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self.columns, self.sums[group])}

    def maxima_dict(self, group: int = 0) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self.max_columns, self.maxima[group])}


def exact_group_sums(values: F64Array, group_of_rows: list[IdArray], n_groups: int) -> F64Array:
    """Exact digit sums per group of the columns of ``values`` (:func:`digit_group_sums` of their digits).

    Columns of whole numbers below 2**24 (the counts) skip the digit split: they are
    their own digit of units, and their sums stay whole numbers below 2**53.

    Parameters
    ----------
    values : ndarray of float64, shape (n, c)
    group_of_rows : list of ndarray of int64, each of shape (n,)
    n_groups : int

    Returns
    -------
    ndarray of float64, shape (n_groups, c, N_DIGITS)
    """
    n, c = values.shape
    out = np.zeros((n_groups, c, N_DIGITS))
    whole = ((np.abs(values) < 2.0**DIGIT_BITS) & (np.floor(values) == values)).all(axis=0)
    if whole.any():
        out[:, whole, ONES_DIGIT] = digit_group_sums(values[:, whole], group_of_rows, n_groups)
    if not whole.all():
        out[:, ~whole, :] = digit_group_sums(digits(values[:, ~whole]), group_of_rows, n_groups)
    return out


def digit_group_sums(row_digits: F64Array, group_of_rows: list[IdArray], n_groups: int) -> F64Array:
    """Exact digit sums per group: every row added to its group in each of ``group_of_rows``.

    Parameters
    ----------
    row_digits : ndarray of float64, shape (n, ...)
        Per-row digits (:func:`evalcore.exact.digits`), any trailing shape.
    group_of_rows : list of ndarray of int64, each of shape (n,)
        A group index per row for each grouping (-1: the row is in no group of it).
    n_groups : int

    Returns
    -------
    ndarray of float64, shape (n_groups,) + row_digits.shape[1:]
    """
    n = len(row_digits)
    flat = row_digits.reshape(n, int(np.prod(row_digits.shape[1:], dtype=np.int64)))
    out = np.zeros((n_groups, flat.shape[1]))
    for codes in group_of_rows:
        inside = codes >= 0
        if not inside.any():
            continue
        # A 0/1 matrix times whole-number digits: every sum is exact, whatever the order.
        one_hot = scipy.sparse.csr_matrix(
            (np.ones(int(inside.sum())), (codes[inside], np.flatnonzero(inside))), shape=(n_groups, n)
        )
        out += one_hot @ flat
    return out.reshape((n_groups,) + row_digits.shape[1:])


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
    n = values.shape[0]
    out_max = np.full((n_groups, len(max_columns)), np.nan)
    group_of_row = [np.zeros(n, dtype=np.int64)] + [flat_groups[:, g] for g in range(flat_groups.shape[1])]
    summed = exact_group_sums(values, group_of_row, n_groups)
    for codes in group_of_row:
        inside = codes >= 0
        idx = codes[inside]
        for j in range(len(max_columns)):
            m = maxima[inside, j]
            ok = ~np.isnan(m)
            if ok.any():
                filled = np.full(n_groups, -np.inf)
                np.maximum.at(filled, idx[ok], m[ok])
                out_max[:, j] = np.fmax(out_max[:, j], np.where(np.isfinite(filled), filled, np.nan))
    return GroupSums(columns, max_columns, summed, out_max)
