"""Small helpers over numpy arrays that any floor of the house may use.

They know nothing of layers, pairs or metrics: keys are plain integer arrays (input
positions, in practice).
"""

from __future__ import annotations

import numpy as np

from evalcore import _kernels
from evalcore._typing import F64Array, IdArray

__all__ = ["index_of", "meeting_boxes", "binary_buffers", "rows_by_key"]


def index_of(sorted_keys: IdArray, keys: IdArray) -> IdArray:
    """Index of each key in ``sorted_keys`` (increasing); KeyError when a key is missing.

    Examples
    --------
    >>> index_of(np.array([3, 7, 9]), np.array([9, 3]))
    array([2, 0])
    """
    idx = np.searchsorted(sorted_keys, keys)
    if len(keys) and (idx.max(initial=0) >= len(sorted_keys) or not np.array_equal(sorted_keys[idx], keys)):
        raise KeyError("a position is missing from the table it is looked up in")
    return idx


def meeting_boxes(boxes: F64Array, other_boxes: F64Array) -> tuple[IdArray, IdArray]:
    """Every pair ``(i, j)`` of closed boxes ``boxes[i]`` and ``other_boxes[j]`` that meet.

    Touching counts (the closed intervals of an envelope test); a box with a non-finite
    bound meets nothing. A uniform grid (:func:`evalcore._kernels._meeting_boxes`), with
    no geometry built.

    Parameters
    ----------
    boxes, other_boxes : ndarray of float64, shape (n, 4) and (m, 4)
        ``(minx, miny, maxx, maxy)``.

    Returns
    -------
    i, j : ndarray of int64
        Each meeting pair once, in an order that depends on the boxes only.

    Examples
    --------
    >>> meeting_boxes(np.array([[0.0, 0.0, 1.0, 1.0]]), np.array([[1.0, 1.0, 2.0, 2.0], [3.0, 0.0, 4.0, 1.0]]))
    (array([0]), array([0]))
    """
    a = np.flatnonzero(np.isfinite(boxes).all(axis=1))
    b = np.flatnonzero(np.isfinite(other_boxes).all(axis=1))
    if len(a) == 0 or len(b) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    sa, sb = boxes[a], other_boxes[b]
    origin_x, origin_y = float(sb[:, 0].min()), float(sb[:, 1].min())
    extent = max(float(sb[:, 2].max()) - origin_x, float(sb[:, 3].max()) - origin_y, 1e-9)
    # Cells about twice a box's mean side: each box covers a few cells, each cell holds a
    # few boxes; never more than 2**20 cells (speed only, never the pairs).
    side = float(np.mean(np.maximum(sb[:, 2] - sb[:, 0], sb[:, 3] - sb[:, 1])))
    cell = max(2.0 * side, extent / 1024.0, 1e-9)
    ncx = int((float(sb[:, 2].max()) - origin_x) // cell) + 1
    ncy = int((float(sb[:, 3].max()) - origin_y) // cell) + 1
    i, j = _kernels._meeting_boxes(*(np.ascontiguousarray(sa[:, k]) for k in range(4)),
                                   *(np.ascontiguousarray(sb[:, k]) for k in range(4)), origin_x, origin_y, cell, ncx, ncy)
    return a[i], b[j]


def binary_buffers(values: object) -> tuple[np.ndarray, IdArray]:
    """The bytes and offsets of a pyarrow binary array (or chunked array), without copying
    the values: value ``i`` is ``data[offsets[i]:offsets[i + 1]]`` (a null value is empty).

    For the numba readers of WKB columns, which take plain arrays.

    Returns
    -------
    data : uint8 (n_bytes,)
    offsets : int64 (len(values) + 1,)
    """
    import pyarrow as pa

    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.binary())
    n = len(arr)
    # The bytes are a writable array whatever the column (np.frombuffer of an Arrow buffer
    # is one): numba compiles a kernel apart for a read-only array.
    if n == 0:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    return data, offsets


def rows_by_key(keys: IdArray) -> tuple[IdArray, IdArray, IdArray]:
    """The distinct rows of ``keys`` (n, k) in increasing lexicographic order, and which rows
    hold each: key ``j``'s rows are ``rows[starts[j]:starts[j + 1]]``, in increasing order.

    What ``np.unique(keys, axis=0, return_inverse=True)`` and a stable sort of the inverse
    give, by one lexicographic sort (``np.unique`` along an axis sorts the rows as structured
    values: 4 of a profiled 2M-field run's 223 preparation task-seconds, py-spy, 2026-12-06).

    Examples
    --------
    >>> unique, rows, starts = rows_by_key(np.array([[2, 1], [1, 5], [2, 1], [1, -3]]))
    >>> unique.tolist(), rows.tolist(), starts.tolist()
    ([[1, -3], [1, 5], [2, 1]], [3, 1, 0, 2], [0, 1, 2, 4])
    """
    keys = np.asarray(keys, dtype=np.int64)
    n = len(keys)
    if n == 0:
        return keys, np.zeros(0, np.int64), np.zeros(1, np.int64)
    rows = np.lexsort(keys.T[::-1])  # by the first column, then the second, ...; stable
    ordered = keys[rows]
    new = np.flatnonzero((ordered[1:] != ordered[:-1]).any(axis=1)) + 1
    starts = np.concatenate([[0], new, [n]]).astype(np.int64)
    return ordered[starts[:-1]], rows.astype(np.int64), starts
