"""Small helpers over numpy arrays that any floor of the house may use.

They know nothing of layers, pairs or metrics: keys are plain integer arrays (input
positions, in practice).
"""

from __future__ import annotations

import numpy as np

from evalcore._typing import IdArray

__all__ = ["index_of"]


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
