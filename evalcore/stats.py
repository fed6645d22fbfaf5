"""Sufficient statistics that merge by addition.

:class:`QuantitySums` holds the column sums of the quantity table for one group of
reference fields (overall, a stratum, a size class or a tile), plus the one
maximum-type statistic (the largest boundary sample spacing), which merges by max.
Its identity is :meth:`QuantitySums.empty`; ``a.merge(b)`` equals the sums of the
union of the rows of ``a`` and ``b``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evalcore._typing import F64Array, IdArray
from evalcore.errors import IncompatibleStatsError
from evalcore.quantities import QUANTITY_COLUMNS, QuantityTable

__all__ = ["QuantitySums", "group_sums"]


@dataclass(frozen=True, slots=True)
class QuantitySums:
    """Column sums of quantity rows.

    Attributes
    ----------
    columns : tuple of str
        The quantity columns, :data:`~evalcore.quantities.QUANTITY_COLUMNS`.
    sums : ndarray of float64, shape (len(columns),)
    spacing_max_m : float
        Largest boundary sample spacing of a matched pair (NaN when none).
    """

    columns: tuple[str, ...]
    sums: F64Array
    spacing_max_m: float

    @staticmethod
    def empty() -> QuantitySums:
        return QuantitySums(QUANTITY_COLUMNS, np.zeros(len(QUANTITY_COLUMNS)), float("nan"))

    @staticmethod
    def from_rows(values: F64Array, spacing_m: F64Array, unassigned: F64Array | None = None) -> QuantitySums:
        """Sum quantity rows (and optionally the unassigned row)."""
        sums = values.sum(axis=0) if len(values) else np.zeros(len(QUANTITY_COLUMNS))
        if unassigned is not None:
            sums = sums + unassigned
        return QuantitySums(QUANTITY_COLUMNS, sums, _nanmax(spacing_m))

    @staticmethod
    def from_table(table: QuantityTable, *, with_unassigned: bool = True) -> QuantitySums:
        return QuantitySums.from_rows(table.values, table.spacing_m, table.unassigned if with_unassigned else None)

    def merge(self, other: QuantitySums) -> QuantitySums:
        if other.columns != self.columns:
            raise IncompatibleStatsError(f"quantity columns differ: {self.columns} vs {other.columns}")
        return QuantitySums(self.columns, self.sums + other.sums, _nanmax(np.array([self.spacing_max_m, other.spacing_max_m])))

    def as_dict(self) -> dict[str, float]:
        return {name: float(v) for name, v in zip(self.columns, self.sums)}


def _nanmax(values: F64Array) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.max()) if len(finite) else float("nan")


def group_sums(table: QuantityTable, codes: IdArray, n_groups: int) -> list[QuantitySums]:
    """Sums of the rows of each group; rows with a negative code belong to none.

    Parameters
    ----------
    table : QuantityTable
    codes : ndarray of int64, shape (n,)
        Group of each row, in ``[0, n_groups)`` or -1.
    n_groups : int

    Returns
    -------
    list of QuantitySums, one per group (the unassigned row is in none).
    """
    inside = codes >= 0
    c = codes[inside]
    vals = table.values[inside]
    sums = np.zeros((n_groups, len(QUANTITY_COLUMNS)))
    for j in range(len(QUANTITY_COLUMNS)):
        sums[:, j] = np.bincount(c, weights=vals[:, j], minlength=n_groups)
    spacing = np.full(n_groups, np.nan)
    sp = table.spacing_m[inside]
    ok = ~np.isnan(sp)
    if ok.any():
        spacing_filled = np.full(n_groups, -np.inf)
        np.maximum.at(spacing_filled, c[ok], sp[ok])
        spacing = np.where(np.isfinite(spacing_filled), spacing_filled, np.nan)
    return [QuantitySums(QUANTITY_COLUMNS, sums[g], float(spacing[g])) for g in range(n_groups)]
