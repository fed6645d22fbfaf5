"""Strata and field-size classes (SPEC section 5).

Both assign each reference field a group code (-1: no group). A field without a
stratum value, or outside every size class, counts only in the overall metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from evalcore._typing import F64Array, IdArray

__all__ = ["StrataCodes", "SizeClasses", "strata_values", "encode_strata", "size_classes", "auto_size_edges"]


def strata_values(reference: object, strata: object, n_rows: int) -> np.ndarray:
    """The stratum of every input reference row as ``str`` (None where missing).

    Parameters
    ----------
    reference : GeoDataFrame or GeoSeries
        The reference layer as given.
    strata : str, pandas.Series or array-like
        A column name of ``reference``, or values aligned with its rows (a Series
        is aligned on the index).
    n_rows : int
        Number of input rows.

    Raises
    ------
    ValueError
        For a column name that does not exist (the message lists those that do), or
        values of the wrong length.
    """
    if isinstance(strata, str):
        columns = [str(c) for c in getattr(reference, "columns", [])]
        if strata not in columns:
            raise ValueError(
                f"strata={strata!r} is not a column of the reference layer; its columns are: "
                f"{', '.join(map(repr, columns)) or '(none)'}."
            )
        if strata == getattr(getattr(reference, "geometry", None), "name", None):
            shown = ", ".join(repr(c) for c in columns if c != strata) or "(none)"
            raise ValueError(f"strata={strata!r} is the reference layer's geometry column, not an attribute; choose one of: {shown}.")
        values = reference[strata]
    elif isinstance(strata, pd.Series):
        if len(strata) != n_rows:
            raise ValueError(f"strata has {len(strata)} values but the reference layer has {n_rows} rows.")
        if hasattr(reference, "index") and strata.index.equals(reference.index):
            values = strata
        elif hasattr(reference, "index") and strata.index.is_unique and set(reference.index) <= set(strata.index):
            values = strata.reindex(reference.index)
        else:
            values = pd.Series(strata.to_numpy())
    else:
        arr = np.asarray(strata, dtype=object)
        if arr.ndim != 1 or len(arr) != n_rows:
            raise ValueError(f"strata has {arr.size} values but the reference layer has {n_rows} rows.")
        values = pd.Series(arr)
    raw = np.asarray(values.to_numpy(dtype=object), dtype=object)
    missing = pd.isna(values).to_numpy()
    out = np.empty(n_rows, dtype=object)
    out[~missing] = [str(v) for v in raw[~missing]]
    out[missing] = None
    return out


class StrataCodes:
    """Stratum names (sorted) and the code of each field (-1: missing)."""

    def __init__(self, names: list[str], codes: IdArray) -> None:
        self.names = names
        self.codes = codes


def encode_strata(values: np.ndarray) -> StrataCodes:
    """Codes in sorted-name order for ``values`` (None for missing)."""
    present = np.array([v is not None for v in values], dtype=bool)
    names = sorted({v for v in values[present]})
    lookup = {name: k for k, name in enumerate(names)}
    codes = np.full(len(values), -1, dtype=np.int64)
    codes[present] = [lookup[v] for v in values[present]]
    return StrataCodes(names, codes)


def _nice(m: int, e: int) -> float:
    return float(f"{m}e{e}")


def auto_size_edges(area_ha: F64Array) -> list[float]:
    """A 1-2-5 series of edges (hectares) spanning the given areas.

    The first edge is the largest 1-2-5 value not above the smallest area, the last
    the smallest one not below the largest area (at least two edges).

    Examples
    --------
    >>> auto_size_edges(np.array([0.3, 4.0, 17.0]))
    [0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0]
    >>> auto_size_edges(np.array([2.0]))
    [2.0, 5.0]
    """
    if len(area_ha) == 0:
        return []
    lo, hi = float(np.min(area_ha)), float(np.max(area_ha))
    e = math.floor(math.log10(lo)) - 1
    series: list[float] = []
    while not series or series[-1] < hi:
        for m in (1, 2, 5):
            series.append(_nice(m, e))
        e += 1
    start = max(k for k, v in enumerate(series) if v <= lo)
    stop = min(k for k, v in enumerate(series) if v >= hi)
    stop = max(stop, start + 1)
    while stop >= len(series):
        series.append(_nice((1, 2, 5)[len(series) % 3], e))
    return series[start : stop + 1]


class SizeClasses:
    """Field-size classes in hectares: ``[lower, upper)`` except the last, closed.

    Attributes
    ----------
    edges : list of float
    keys : list of str
        ``f"{lower:g}-{upper:g}"`` per class.
    """

    def __init__(self, edges: Sequence[float]) -> None:
        self.edges = [float(e) for e in edges]
        self.keys = [f"{lo:g}-{hi:g}" for lo, hi in zip(self.edges[:-1], self.edges[1:])]

    def codes(self, area_ha: F64Array) -> IdArray:
        """Class of each area (-1 outside every class)."""
        edges = np.asarray(self.edges)
        if len(edges) < 2:
            return np.full(len(area_ha), -1, dtype=np.int64)
        k = np.searchsorted(edges, area_ha, side="right") - 1
        last = len(edges) - 2
        k = np.where(area_ha == edges[-1], last, k)
        return np.where((k >= 0) & (k <= last), k, -1).astype(np.int64)


def size_classes(size_bins: object, area_ha: F64Array) -> SizeClasses:
    """Validate ``size_bins`` (``"auto"`` or strictly increasing edges, hectares).

    Raises
    ------
    ValueError
        Naming the argument and the value for anything else.
    """
    if isinstance(size_bins, str):
        if size_bins != "auto":
            raise ValueError(f"size_bins={size_bins!r} must be 'auto' or a list of increasing edges in hectares.")
        return SizeClasses(auto_size_edges(area_ha))
    try:
        edges = [float(e) for e in size_bins]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValueError(
            f"size_bins={size_bins!r} must be 'auto' or a list of increasing edges in hectares."
        ) from None
    if len(edges) < 2 or any(math.isnan(e) for e in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"size_bins={size_bins!r} must be at least two strictly increasing edges in hectares.")
    if edges[0] < 0:
        raise ValueError(f"size_bins={size_bins!r} must not have negative edges (areas are >= 0 ha).")
    return SizeClasses(edges)
